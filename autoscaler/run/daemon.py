"""The daemon's commands: `run` (the daemon: its parts built by wiring.py, started, run
until a signal), the one-shot live `plan`, and the status object for `status` and
`explain`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException
from prometheus_client import ProcessCollector

from autoscaler.client.config import KubeconfigError, make_api_client
from autoscaler.client.kubeapi import ApiFailure, classify, error_text, failure_line
from autoscaler.client.redact import redact
from autoscaler.core.errors import RunFailure, UsageError
from autoscaler.core.model import ClusterSnapshot, Plan
from autoscaler.core.resources import JOB_RESOURCES
from autoscaler.plan import planner
from autoscaler.read.kube.tuning import settle_gc, sync_gc
from autoscaler.read.live import LiveSource
from autoscaler.read.prometheus.answer import FreeGpuReading, PromError
from autoscaler.read.prometheus.source import PrometheusSource
from autoscaler.report.logs import configure_logging
from autoscaler.report.metrics import package_version
from autoscaler.report.status.build import build_status
from autoscaler.report.status.codec import from_data
from autoscaler.report.status.doc import Cycle, StatusDoc, StatusError
from autoscaler.report.status.writer import StatusWriter
from autoscaler.settings import Settings

from .triggers import restart_done, wants_early_cycle
from .wiring import Parts, build, build_sources, job_kinds

__all__ = [
    "job_kinds",
    "live_cycle",
    "live_plan",
    "live_status",
    "read_status",
    "restart_done",
    "run_daemon",
    "wants_early_cycle",
]

log = structlog.get_logger("autoscaler.run.daemon")


# Prometheus failures a retry cannot fix: the settings are wrong (exit 2)
_SETTINGS_ERRORS = frozenset({PromError.BAD_QUERY, PromError.CONFIG, PromError.NON_VECTOR})


_QUERY_ERRORS = frozenset({PromError.BAD_QUERY, PromError.NON_VECTOR})
_AUTH_SETTINGS = ("prometheus_bearer_token_file", "prometheus_username", "prometheus_password")


def prometheus_settings(reading: FreeGpuReading, settings: Settings) -> str:
    """The settings a Prometheus failure points at, in words: where each value came from
    and which flag or variable sets it (the URL, unless the query or the credentials)."""
    errors = set(reading.errors)
    if errors & _QUERY_ERRORS:
        if settings.free_gpus_query:
            return f"setting {settings.named('free_gpus_query')}"
        return "the *_gpus_series settings make the query (docs/settings.md)"
    if PromError.AUTH in errors:
        given = [n for n in _AUTH_SETTINGS if getattr(settings, n) is not None]
        return "settings " + (
            "; ".join(settings.named(n) for n in given) or ", ".join(_AUTH_SETTINGS)
        )
    return f"setting {settings.named('prometheus_url')}"


def prometheus_problem(
    reading: FreeGpuReading, settings: Settings | None = None
) -> UsageError | RunFailure | None:
    """What is wrong with a whole Prometheus answer, as the error the CLI exits with:
    UsageError for a query or settings to fix, RunFailure for a Prometheus that did not
    answer usably now; None when the answer can be planned on (a queue that holds on its
    own is part of a plan). With `settings`, the line names the setting to check."""
    if reading.problem is None:
        return None
    text = f"Prometheus: {reading.message}"
    if settings is not None:
        text += f" ({prometheus_settings(reading, settings)})"
    if _SETTINGS_ERRORS & set(reading.errors):
        return UsageError(text)
    return RunFailure(text)


async def check_prometheus(prometheus: PrometheusSource, settings: Settings | None = None) -> None:
    """At start, once: say what is wrong with the Prometheus URL and query, naming the
    setting to check. A query or a setting Prometheus refuses stops the daemon (exit 2:
    it can never work); a Prometheus that does not answer now is a warning (it may be
    starting too): cycles hold until it answers."""
    reading = await prometheus.fetch(datetime.now(UTC))
    problem = prometheus_problem(reading, settings)
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


def kubeconfig_words(settings: Settings) -> str:
    """Which kubeconfig (and context) the client is made from, where that came from and
    what sets it: the end of every line about a kubeconfig or an API server that fails."""
    if settings.kubeconfig is not None:
        words = f"setting {settings.named('kubeconfig')}"
    elif any(os.environ.get("KUBECONFIG", "").split(os.pathsep)):
        words = (
            "setting kubeconfig from $KUBECONFIG; --kubeconfig or AUTOSCALER_KUBECONFIG "
            "sets another"
        )
    else:
        words = (
            "setting kubeconfig from the default: in-cluster, else ~/.kube/config; "
            "--kubeconfig, AUTOSCALER_KUBECONFIG or $KUBECONFIG sets it"
        )
    if settings.kube_context:
        words += f"; context {settings.kube_context!r}: {settings.named('kube_context')}"
    return words


def kube_usage_error(exc: Exception, settings: Settings) -> UsageError:
    """A kubeconfig to fix (exit 2), in one line naming the setting that picked it."""
    text = str(exc)
    if not isinstance(exc, KubeconfigError):
        text = f"cannot configure the Kubernetes client: {text}"
    return UsageError(f"{text} ({kubeconfig_words(settings)})")


async def _api_client(settings: Settings) -> ApiClient:
    """The API client of the kubeconfig the settings pick; a kubeconfig to fix is a
    UsageError (exit 2)."""
    try:
        return await make_api_client(settings.kube_options())
    except (KubeconfigError, ConfigException, OSError, ValueError) as exc:
        raise kube_usage_error(exc, settings) from None


# SIGTERM/SIGINT to exit, whatever the daemon waits on (the chart's grace period is 30 s;
# a rollout must never end in SIGKILL): a cycle under way may finish within the grace,
# then whatever is still waited on (cache sync, Prometheus, a cycle, a write drain) is
# cancelled, and the last status and the Lease release get what is left before the stop.
STOP_GRACE_SECONDS = 1.0
STOP_SECONDS = 1.6
STOP_RECANCEL_SECONDS = 0.1


async def _daemon(settings: Settings) -> int:
    api_client = await _api_client(settings)
    try:
        # a dry run says what it would write in its log stream (`would scale`, one
        # `decision` line each, with the message), in log_format like every other line:
        # its plain lines on stdout would land in the same pod log in another format
        parts = build(settings, api_client, out=None)
        ProcessCollector(registry=parts.metrics.registry)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _on_signal, parts, stopping, sig)
        log.info(
            "starting",
            dry_run=settings.dry_run,
            interval_s=settings.interval_seconds,
            leader_election=settings.elects_leader,
            namespaces=settings.namespaces or "all",
            port=settings.listen_port,
        )
        serve = asyncio.create_task(_serve(parts), name="serve")
        await _until_stopped(serve, stopping, lambda: parts.driver.cycling)
    finally:
        await api_client.close()
    return 0


def _on_signal(parts: Parts, stopping: asyncio.Event, sig: signal.Signals) -> None:
    if not stopping.is_set():
        log.info("stopping", signal=sig.name, within_s=STOP_SECONDS)
        parts.stop_by = time.monotonic() + STOP_SECONDS
    stopping.set()
    parts.driver.stop()


async def _until_stopped(
    serve: asyncio.Task[None], stopping: asyncio.Event, cycling: Callable[[], bool]
) -> None:
    """Run the daemon until it ends or a signal stops it: a cycle under way gets
    STOP_GRACE_SECONDS to finish, then whatever the daemon waits on is cancelled (its
    parts stop in order, within the stop's deadline, whatever is cancelled); a wait
    outside a cycle (start-up, the caches' first sync) is cancelled at once."""
    signalled = asyncio.create_task(stopping.wait(), name="signalled")
    try:
        await asyncio.wait({serve, signalled}, return_when=asyncio.FIRST_COMPLETED)
        if not serve.done() and cycling():
            await asyncio.wait({serve}, timeout=STOP_GRACE_SECONDS)
        if not serve.done():
            log.info("stopping now", note="cancelling what the daemon waits on")
        while not serve.done():
            # again until it ends: a write drain takes one cancel to stop sending and a
            # second to abandon the writes in flight; the parts' shutdown is shielded
            serve.cancel()
            await asyncio.wait({serve}, timeout=STOP_RECANCEL_SECONDS)
        with contextlib.suppress(asyncio.CancelledError):
            await serve
    finally:
        signalled.cancel()
        if not serve.done():  # cancelled from outside: take the daemon down with us
            serve.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serve


async def _serve(parts: Parts) -> None:
    """Start every part, check Prometheus, give the caches a cycle's deadline to sync,
    then run cycles until a signal stops the driver."""
    settings = parts.settings
    synced_at = time.monotonic()
    sync_gc()  # before the caches list (read.kube.tuning.sync_gc)
    try:
        async with parts.running():
            log.info("listening", host=settings.listen_host, port=parts.server.port)
            log.info("waiting for the Kubernetes API", url=parts.api_client.configuration.host)
            reporter = asyncio.create_task(_report_synced(parts, synced_at), name="report-synced")
            checker = asyncio.create_task(check_status_object(parts.status), name="status-check")
            try:
                await check_prometheus(parts.prometheus, settings)
                with contextlib.suppress(TimeoutError):
                    await parts.kube.wait_synced(settings.cycle_deadline_seconds)
                await parts.driver.run()
            finally:
                for task in (reporter, checker):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
    except asyncio.CancelledError:  # stopped by a signal while it waited
        log.info("stopped", cycles=parts.driver.cycles)
        raise
    log.info("stopped", cycles=parts.driver.cycles)


async def check_status_object(writer: StatusWriter | None) -> None:
    """At start, one line: whether the status object can be written (its namespace
    exists, RBAC lets us), and if not what to do; beside the cycles, never in their way
    (a down API server is said too, and the writer's own failures follow it)."""
    if writer is None:
        log.info("status.check", ok=False, note="status_configmap is empty: none is written")
        return
    try:
        ok, words = await writer.check()
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.warning("status.check", ok=False, object=writer.where, error=error_text(exc))
        return
    (log.info if ok else log.warning)("status.check", ok=ok, status=words)


async def _report_synced(parts: Parts, since: float) -> None:
    """One line once every cache has listed, however long the API takes to answer;
    cycles hold (and say why) until then. Then the garbage collector is tuned for the
    daemon (read.kube.tuning.settle_gc)."""
    await parts.kube.wait_synced(float("inf"))
    settle_gc()
    objects = parts.kube.objects()
    log.info(
        "caches synced",
        seconds=round(time.monotonic() - since, 2),
        jobs=len(objects.jobs),
        podgroups=len(objects.podgroups),
        queues=len(objects.queues),
    )


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
    client = await make_api_client(settings.kube_options()) if own_client else api_client
    kube, prometheus = build_sources(settings, client)
    try:
        async with asyncio.timeout(settings.cycle_deadline_seconds):
            await kube.list_once()  # a one-shot read: no watches
            source = LiveSource(settings.source_options(), kube, prometheus)
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
    # are the daemon's: for people, only warnings, each a short line on stderr (stdout is
    # the plan, and `-o json` must stay parseable)
    configure_logging(settings, for_people=True)
    try:
        snapshot, reading = asyncio.run(live_read(settings, now))
    except (KubeconfigError, ConfigException) as exc:
        raise kube_usage_error(exc, settings) from None
    except TimeoutError:
        raise RunFailure(
            f"cannot read the live cluster: no answer within cycle_deadline_seconds="
            f"{settings.cycle_deadline_seconds:g} ({kubeconfig_words(settings)})"
        ) from None
    except Exception as exc:  # API unreachable, refused: a run-time failure
        raise RunFailure(
            f"cannot read the live cluster: {redact(failure_line(exc))} "
            f"({kubeconfig_words(settings)})"
        ) from None
    if reading is not None:
        problem = prometheus_problem(reading, settings)
        if problem is not None:
            raise problem
    if snapshot.problem is not None:
        raise RunFailure(f"cannot plan: {snapshot.message or snapshot.problem.value}")
    return snapshot, planner.plan(snapshot, settings.planner_policy(), now)


# ---- the status object, for `status` and `explain` --------------------------------------


async def _read_status(settings: Settings) -> StatusDoc | str:
    """The status document, or why it may be missing (in words)."""
    client = await make_api_client(settings.kube_options())
    try:
        writer = StatusWriter(settings.status_options(), client)
        try:
            obj = await writer.read()
        except ApiException as exc:
            if classify(exc) is ApiFailure.NOT_FOUND:
                return await _why_missing(settings, client)
            exc.add_note(f"get {writer.where}")
            raise
        return from_data(obj.data, writer.where)
    finally:
        await client.close()


async def _why_missing(settings: Settings, client: ApiClient) -> str:
    """Why no status object is there, as far as we can tell, and what to check."""
    namespace = settings.lease_namespace
    where = f"the namespace is {namespace} ({settings.named('lease_namespace')})"
    try:
        await CoreV1Api(client).read_namespace(
            namespace, _request_timeout=settings.kube_request_timeout_seconds
        )
    except ApiException as exc:
        if classify(exc) is ApiFailure.NOT_FOUND:
            return (
                f"namespace {namespace} does not exist: the daemon runs in another one "
                f"(--autoscaler-namespace names it) or is not installed; {where}"
            )
    except Exception:  # a hint only: the line below says what else to check
        pass
    return (
        "the daemon has not written one: it is not running, not leading yet, or not "
        "allowed to write it (its log says so: `status.check`, `status.write_failed`), "
        f"or it runs in another namespace or writes another name (status_configmap); {where}"
    )


def read_status(settings: Settings) -> StatusDoc:
    """The status object as the daemon last wrote it. One line and exit 1 when it cannot
    be read; exit 2 for a kubeconfig to fix."""
    where = f"configmap {settings.lease_namespace}/{settings.status_configmap}"
    if not settings.status_configmap:
        raise UsageError("status_configmap is empty: no status object is written; use --live")
    try:
        doc = asyncio.run(_read_status(settings))
    except (KubeconfigError, ConfigException) as exc:
        raise kube_usage_error(exc, settings) from None
    except StatusError as exc:
        raise RunFailure(f"cannot read the status object: {exc}") from None
    except Exception as exc:
        raise RunFailure(
            f"cannot read the status object: {redact(failure_line(exc))} "
            f"({kubeconfig_words(settings)})"
        ) from None
    if isinstance(doc, str):
        raise RunFailure(f"no status object ({where}): {doc}; --live plans now instead")
    return doc


async def _kinds_named(settings: Settings, namespace: str, name: str) -> tuple[str, ...]:
    client = await make_api_client(settings.kube_options())
    try:
        api = CustomObjectsApi(client)
        found = []
        for r in JOB_RESOURCES:
            try:
                await api.get_namespaced_custom_object(
                    r.group,
                    r.version,
                    namespace,
                    r.plural,
                    name,
                    _request_timeout=settings.kube_request_timeout_seconds,
                )
            except ApiException as exc:
                if classify(exc) is ApiFailure.NOT_FOUND:  # no such job, or no such CRD
                    continue
                raise
            found.append(r.kind)
        return tuple(found)
    finally:
        await client.close()


def job_kinds_named(settings: Settings, namespace: str, name: str) -> tuple[str, ...] | None:
    """The job kinds (PyTorchJob, PaddleJob, Job) of which an object of this name exists
    in the namespace: `explain` tells a job that does not exist from one not managed.
    None when the cluster cannot say (unreachable, RBAC)."""
    try:
        return asyncio.run(_kinds_named(settings, namespace, name))
    except Exception:
        return None


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
