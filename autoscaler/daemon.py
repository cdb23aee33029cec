"""Assembly: the daemon (`run_daemon`) and the one-shot live `plan`, wired from their
parts: sources, actuator (live or dry-run, chosen here once), leader elector, HTTP server,
and the loop that drives cycles. The only module that knows every part."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException
from prometheus_client import ProcessCollector

from .actuator import Actuator, DryRunActuator, KubeActuator
from .errors import RunFailure, UsageError
from .kinds import BY_NAME, KINDS, JobKind, NotManaged, named
from .kubeapi import ApiFailure, classify, failure_line
from .leader import AlwaysLeader, make_elector
from .logs import configure_logging
from .loop import Controller, Driver
from .metrics import Metrics, package_version
from .model import ClusterSnapshot, Plan
from .parse import read_measured, read_time
from .planner import plan as make_plan
from .redact import redact
from .resources import WAITING_PHASES
from .server import HealthServer
from .settings import Settings
from .sources.kube import KubeconfigError, KubeSource, make_api_client
from .sources.live import LiveSource
from .sources.prom_answer import FreeGpuReading, PromError
from .sources.prometheus import PrometheusSource
from .sources.prune import pruner
from .status import Cycle, StatusDoc, StatusError, build_status, from_data
from .status_writer import StatusWriter

log = structlog.get_logger("autoscaler.daemon")


def wants_early_cycle(kind: str, event_type: str, obj: Mapping[str, Any]) -> bool:
    """A new waiting gang, or a job that finished or went away, frees or needs GPUs now."""

    if kind == "PodGroup":
        status = obj.get("status") if isinstance(obj, Mapping) else None
        phase = status.get("phase") if isinstance(status, Mapping) else None
        return event_type == "ADDED" and phase in WAITING_PHASES
    job_kind = BY_NAME.get(kind)
    return job_kind is not None and job_kind.wants_early_cycle(event_type, obj)


def restart_done(kind: str, obj: Mapping[str, Any], settings: Settings) -> bool:
    """A job we resized whose workers all run again, its restart not yet measured: a
    cycle now measures it to within min_interval_seconds, not a whole interval."""
    job_kind = BY_NAME.get(kind)
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    if job_kind is None or not isinstance(notes, Mapping):
        return False
    last = notes.get(settings.last_scale_annotation)
    if not isinstance(last, str) or settings.restart_cost_annotation in notes:
        return False
    measured = read_measured(notes.get(settings.measured_restart_cost_annotation))
    if measured is not None and measured[1] == read_time(last):
        return False
    try:
        workers = job_kind.workers(obj, settings)
    except NotManaged:
        return False
    return workers.replicas > 0 and workers.active == workers.replicas


def job_kinds(settings: Settings) -> tuple[JobKind, ...]:
    """The kinds the settings name, else all: a kind whose CRD is not installed costs
    one info line and a LIST every few minutes (sources/kube.py)."""
    return named(settings.job_kinds) if settings.job_kinds else KINDS


# Prometheus failures a retry cannot fix: the settings are wrong (exit 2)
_SETTINGS_ERRORS = frozenset({PromError.BAD_QUERY, PromError.CONFIG, PromError.NON_VECTOR})


def prometheus_problem(reading: FreeGpuReading) -> UsageError | RunFailure | None:
    """What is wrong with a whole Prometheus answer, as the error the CLI exits with:
    UsageError for a query or settings to fix, RunFailure for a Prometheus that did not
    answer usably now; None when the answer can be planned on (a queue that holds on its
    own is part of a plan)."""
    if reading.problem is None:
        return None
    text = f"Prometheus: {reading.message}"
    if _SETTINGS_ERRORS & set(reading.errors):
        return UsageError(text)
    return RunFailure(text)


async def check_prometheus(prometheus: PrometheusSource) -> None:
    """At start, once: say what is wrong with the Prometheus URL and query. A query or a
    setting Prometheus refuses stops the daemon (exit 2: it can never work); a Prometheus
    that does not answer now is a warning (it may be starting too): cycles hold until it
    answers."""
    reading = await prometheus.fetch(datetime.now(UTC))
    problem = prometheus_problem(reading)
    if isinstance(problem, UsageError):
        raise problem
    if problem is not None:
        log.warning(
            "prometheus.check", ok=False, error=str(problem), note="holding until it answers"
        )
    else:
        log.info(
            "prometheus.check",
            ok=True,
            queues=len(reading.queues),
            plugin=str(reading.plugin) if reading.plugin else None,
        )


def run_daemon(settings: Settings) -> int:
    configure_logging(settings)
    try:
        return asyncio.run(_daemon(settings))
    except KeyboardInterrupt:
        return 130


async def _daemon(settings: Settings) -> int:
    metrics = Metrics()
    ProcessCollector(registry=metrics.registry)
    try:
        api_client = await make_api_client(settings)
    except KubeconfigError as exc:
        raise UsageError(str(exc)) from None
    except (ConfigException, OSError, ValueError) as exc:
        raise UsageError(f"cannot configure the Kubernetes client: {exc}") from None
    driver: Driver | None = None

    def on_change(kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        if driver is not None and (
            wants_early_cycle(kind, event_type, obj) or restart_done(kind, obj, settings)
        ):
            driver.trigger()

    kinds = job_kinds(settings)
    kube = KubeSource(
        settings,
        api_client,
        on_change,
        transform=pruner(settings),
        job_kinds=[k.resource for k in kinds],
        watch_nodes=True,
        watch_pods=settings.node_fit,
    )
    prometheus = PrometheusSource(settings)
    actuator: Actuator = (
        DryRunActuator(settings, out=sys.stdout)
        if settings.dry_run
        else KubeActuator(settings, api_client, kinds=kinds)
    )

    def leadership(leading: bool) -> None:
        metrics.is_leader.set(1 if leading else 0)
        if leading and driver is not None:
            driver.trigger()

    # a dry run writes nothing, the Lease included: it must never displace a live leader
    elector = (
        AlwaysLeader(leadership)
        if settings.dry_run or not settings.leader_election
        else make_elector(settings, api_client, leadership)
    )
    status = (
        StatusWriter(settings, api_client, metrics, may_write=lambda: elector.is_leader)
        if settings.status_configmap
        else None
    )
    controller = Controller(
        settings,
        LiveSource(settings, kube, prometheus, metrics),
        actuator,
        metrics,
        may_write=lambda: elector.is_leader,
        status=status,
        identity=getattr(elector, "identity", "") or settings.identity,
    )
    driver = Driver(
        controller, is_leader=lambda: elector.is_leader, ready_check=lambda: kube.current
    )
    server = HealthServer(
        metrics, driver.alive, driver.ready, settings.listen_host, settings.listen_port
    )

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, driver.stop)
    log.info(
        "starting",
        dry_run=settings.dry_run,
        interval_s=settings.interval_seconds,
        leader_election=settings.leader_election and not settings.dry_run,
        namespaces=settings.namespaces or "all",
        port=settings.listen_port,
    )
    try:
        await server.start()
    except OSError as exc:
        prometheus.close()
        await api_client.close()
        raise RunFailure(
            f"cannot listen on {settings.listen_host}:{settings.listen_port} for /metrics, "
            f"/healthz, /readyz: {exc.strerror or exc} (is another process using the port? "
            "set listen_port)"
        ) from None
    log.info("listening", host=settings.listen_host, port=server.port)
    log.info("waiting for the Kubernetes API", url=api_client.configuration.host)
    synced_at = time.monotonic()
    await kube.start()
    elector_task = asyncio.create_task(elector.run(), name="leader-election")

    async def report_synced() -> None:
        # one line once every cache has listed, however long the API takes to answer;
        # cycles hold (and say why) until then
        await kube.wait_synced(float("inf"))
        objects = kube.objects()
        log.info(
            "caches synced",
            seconds=round(time.monotonic() - synced_at, 2),
            jobs=len(objects.jobs),
            podgroups=len(objects.podgroups),
            queues=len(objects.queues),
        )

    synced_task = asyncio.create_task(report_synced(), name="report-synced")
    tasks = [synced_task, elector_task]
    if status is not None:
        tasks.append(asyncio.create_task(status.run(), name="status-writer"))
    try:
        await check_prometheus(prometheus)
        if status is not None:  # each job's `since` and resize state survive a restart
            controller.last_status = await status.restore()
        with contextlib.suppress(TimeoutError):
            await kube.wait_synced(settings.cycle_deadline_seconds)
        await driver.run()
    finally:
        if status is not None:  # the last cycle's status, before the Lease goes
            await status.close(settings.kube_request_timeout_seconds)
        for task in reversed(tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await kube.stop()
        prometheus.close()
        await server.stop()
        await api_client.close()
        log.info("stopped", cycles=driver.cycles)
    return 0


async def live_snapshot(
    settings: Settings, now: datetime, api_client: Any = None
) -> ClusterSnapshot:
    """One read of the live cluster, for `plan` without --snapshot. Lists once, writes
    nothing."""
    return (await live_read(settings, now, api_client))[0]


async def live_read(
    settings: Settings, now: datetime, api_client: Any = None
) -> tuple[ClusterSnapshot, FreeGpuReading | None]:
    """The snapshot and Prometheus' answer it was made from (None if it was not asked)."""

    own_client = api_client is None
    client = await make_api_client(settings) if own_client else api_client
    kube = KubeSource(
        settings,
        client,
        transform=pruner(settings),
        job_kinds=[k.resource for k in job_kinds(settings)],
        watch_nodes=True,
        watch_pods=settings.node_fit,
    )
    prometheus = PrometheusSource(settings)
    try:
        async with asyncio.timeout(settings.cycle_deadline_seconds):
            await kube.list_once()  # a one-shot read: no watches
            source = LiveSource(settings, kube, prometheus)
            snapshot = await source.read(now)
            return snapshot, source.last_reading
    finally:
        prometheus.close()
        if own_client:
            await client.close()


def live_plan(settings: Settings, now: datetime | None = None) -> Plan:
    return live_cycle(settings, now)[1]


def live_cycle(settings: Settings, now: datetime | None = None) -> tuple[ClusterSnapshot, Plan]:
    """One live read and plan, writing nothing. A plan that could not be made raises:
    UsageError (exit 2) for settings or a query to fix, RunFailure (exit 1) for a cluster
    or Prometheus that did not answer usably; each a single line."""
    now = now or datetime.now(UTC)
    # the sources' log lines (which plugin the headroom follows, a kind not installed)
    # go to stderr: stdout is the plan, and `-o json` must stay parseable
    configure_logging(settings)
    try:
        snapshot, reading = asyncio.run(live_read(settings, now))
    except KubeconfigError as exc:
        raise UsageError(str(exc)) from None
    except ConfigException as exc:
        raise UsageError(f"cannot configure the Kubernetes client: {exc}") from None
    except TimeoutError:
        raise RunFailure(
            f"cannot read the live cluster: no answer within cycle_deadline_seconds="
            f"{settings.cycle_deadline_seconds:g}"
        ) from None
    except Exception as exc:  # API unreachable, refused: a run-time failure
        raise RunFailure(f"cannot read the live cluster: {redact(failure_line(exc))}") from None
    if reading is not None:
        problem = prometheus_problem(reading)
        if problem is not None:
            raise problem
    if snapshot.problem is not None:
        raise RunFailure(f"cannot plan: {snapshot.message or snapshot.problem.value}")
    return snapshot, make_plan(snapshot, settings.planner_policy(), now)


# ---- the status object, for `status` and `explain` --------------------------------------


async def _read_status(settings: Settings) -> StatusDoc | None:
    client = await make_api_client(settings)
    try:
        writer = StatusWriter(settings, client)
        try:
            obj = await writer.read()
        except ApiException as exc:
            if classify(exc) is ApiFailure.NOT_FOUND:
                return None
            exc.add_note(f"get {writer.where}")
            raise
        return from_data(obj.data, writer.where)
    finally:
        await client.close()


def read_status(settings: Settings) -> StatusDoc:
    """The status object as the daemon last wrote it. One line and exit 1 when it cannot
    be read; exit 2 for a kubeconfig to fix."""
    where = f"configmap {settings.lease_namespace}/{settings.status_configmap}"
    if not settings.status_configmap:
        raise UsageError("status_configmap is empty: no status object is written; use --live")
    try:
        doc = asyncio.run(_read_status(settings))
    except KubeconfigError as exc:
        raise UsageError(str(exc)) from None
    except ConfigException as exc:
        raise UsageError(f"cannot configure the Kubernetes client: {exc}") from None
    except StatusError as exc:
        raise RunFailure(f"cannot read the status object: {exc}") from None
    except Exception as exc:
        raise RunFailure(f"cannot read the status object: {redact(failure_line(exc))}") from None
    if doc is None:
        raise RunFailure(
            f"no status object ({where}): the daemon has not written one yet (is it running "
            "and leading, in that namespace? --autoscaler-namespace names another); "
            "--live plans now instead"
        )
    return doc


def live_status(settings: Settings, now: datetime | None = None) -> StatusDoc:
    """The status one live cycle would write (nothing is written), every job listed."""
    snapshot, plan = live_cycle(settings, now)
    cycle = Cycle(
        result="ok",
        jobs=len(plan.decisions),
        actions=len(plan.actions),
        gangs=len(plan.gangs),
    )
    return build_status(
        snapshot,
        plan,
        cycle,
        max_jobs=len(plan.decisions) + len(plan.gangs),
        mode="plan",
        version=package_version(),
        cooldown_seconds=settings.cooldown_seconds,
        max_bytes=None,
    )
