"""The one builder of the daemon's parts from settings: watch caches and Prometheus
(sources), the actuator (live, or dry-run: chosen here once), the leader elector, the
status writer, the controller and its driver, the HTTP server. `run`, the live `plan`
and `status`, the tests and the benchmarks all build through here, so what they run is
what the daemon runs (cluster-autoscaler's `NewAutoscaler(opts)`).

Each part gets its own section of the settings (options.py). What a caller may choose
instead of the settings: the API client (who made it closes it), the clocks, the
actuator and the dry run's output, the HTTP address; never a part's wiring."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, TextIO

from kubernetes_asyncio.client import ApiClient

from autoscaler.act.actuator import KubeActuator
from autoscaler.act.dry_run import DryRunActuator
from autoscaler.act.results import Actuator
from autoscaler.core.errors import RunFailure
from autoscaler.core.options import ServerOptions
from autoscaler.core.resources import PODGROUP
from autoscaler.read.kinds import KINDS, JobKind, named
from autoscaler.read.kube.source import KubeSource, OnChange
from autoscaler.read.live import LiveSource
from autoscaler.read.parse import decoders
from autoscaler.read.prometheus.source import PrometheusSource
from autoscaler.report.metrics import Metrics
from autoscaler.report.status.writer import StatusWriter
from autoscaler.settings import Settings

from .driver import Driver
from .leader import AlwaysLeader, LeaderElector, make_elector
from .loop import Controller
from .server import HealthServer
from .triggers import GangStarts, wants_cycle


def job_kinds(settings: Settings) -> tuple[JobKind, ...]:
    """The kinds the settings name, else all: a kind whose CRD is not installed costs
    one info line and a LIST every few minutes (read/kube/cache.py)."""
    return named(settings.job_kinds) if settings.job_kinds else KINDS


def build_sources(
    settings: Settings,
    api_client: ApiClient,
    on_change: OnChange | None = None,
    on_change_kinds: Collection[str] | None = None,
) -> tuple[KubeSource, PrometheusSource]:
    """The watch caches (every job kind the settings name, nodes, and bound pods for
    node fit) and the Prometheus source: the daemon's and a one-shot `plan`'s alike.
    `on_change` is told of the changes of `on_change_kinds` (None: every kind)."""
    options = settings.read_options()
    kube = KubeSource(
        settings.kube_options(),
        api_client,
        on_change,
        on_change_kinds=on_change_kinds,
        decode=decoders(options),
        read_options=options,
        job_kinds=[k.resource for k in job_kinds(settings)],
        watch_nodes=True,
        watch_pods=settings.node_fit,
    )
    return kube, PrometheusSource(settings.prometheus_options())


def build_actuator(
    settings: Settings, api_client: ApiClient, out: TextIO | None = sys.stdout
) -> Actuator:
    """Dry run is a different actuator, chosen here once: it prints, never writes."""
    if settings.dry_run:
        return DryRunActuator(out=out)
    return KubeActuator(settings.actuator_options(), api_client, kinds=job_kinds(settings))


@dataclass
class Parts:
    """The daemon, built and not yet started (`running()` starts and stops it)."""

    settings: Settings
    api_client: ApiClient
    metrics: Metrics
    kube: KubeSource
    prometheus: PrometheusSource
    actuator: Actuator
    elector: LeaderElector | AlwaysLeader
    status: StatusWriter | None
    controller: Controller
    driver: Driver
    server: HealthServer
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    # set when a signal asks the daemon to stop: the monotonic time by which the last
    # status and the Lease must be written, so a down API server cannot hold the exit
    stop_by: float | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Parts]:
        """Serve HTTP, start the caches, the elector and the status writer, restore the
        last status; on the way out stop them all (the status written last, before the
        Lease goes). The caches may not have synced yet: `kube.wait_synced`."""
        await self._listen()
        try:
            await self.kube.start()
            self._spawn(self.elector.run(), "leader-election")
            if self.status is not None:
                self._spawn(self.status.run(), "status-writer")
                # each job's `since` and resize state survive a restart
                self.controller.last_status = await self.status.restore()
            yield self
        finally:
            await self._stop()

    def _spawn(self, coro: Any, name: str) -> None:
        self.tasks.append(asyncio.create_task(coro, name=name))

    async def _listen(self) -> None:
        try:
            await self.server.start()
        except OSError as exc:
            self.prometheus.close()
            where = f"{self.server.host}:{self.server.port}"
            raise RunFailure(
                f"cannot listen on {where} for /metrics, /healthz, /readyz: "
                f"{exc.strerror or exc} (is another process using the port? set listen_port)"
            ) from None

    async def _stop(self) -> None:
        """Stop every part. Runs to its end even when the task running the daemon is
        cancelled (a stop that could not wait), within `stop_by` when one is set."""
        cleanup = asyncio.ensure_future(self._cleanup())
        cancelled = False
        while not cleanup.done():
            try:
                await asyncio.shield(cleanup)
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError
        cleanup.result()

    def _remaining(self, share: float = 1.0) -> float:
        """Seconds a shutdown step may take: a request timeout, or at a stop's deadline
        `share` of what is left of it."""
        limit = self.settings.kube_request_timeout_seconds
        if self.stop_by is None:
            return limit
        return max(0.05, min(limit, share * (self.stop_by - time.monotonic())))

    async def _cleanup(self) -> None:
        if self.status is not None:  # the last cycle's status, before the Lease goes
            await self.status.close(self._remaining(0.5))
        self.elector.limit_release(self._remaining())
        for task in reversed(self.tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.tasks.clear()
        await self.kube.stop()
        self.prometheus.close()
        await self.server.stop()


class _Triggers:
    """What calls a cycle early: the caches' changes (triggers.py) and a won election.
    Connected before the driver exists; they fire once it does."""

    def __init__(self, settings: Settings, metrics: Metrics) -> None:
        self.settings, self.metrics = settings, metrics
        self.driver: Driver | None = None
        self.starts = GangStarts()
        # the kinds whose changes `on_change` reads: gangs (turning waiting, or bound)
        # and the managed jobs (finished, deleted, restarted); not the 50k bound pods
        # or the nodes a sync installs
        self.kinds = frozenset({PODGROUP.kind, *(k.resource.kind for k in job_kinds(settings))})

    def on_change(self, kind: str, event_type: str, record: object, before: object) -> None:
        bound = self.starts.bound(event_type, record)  # kept up to date before a driver
        if self.driver is None:
            return
        if bound is not None and bound in self.driver.controller.idle_queues:
            self.driver.trigger(urgent=True)
        elif wants_cycle(kind, event_type, record, before):
            self.driver.trigger()

    def api_answered(self, actuator: KubeActuator) -> None:
        """A cache is answered again after failing: writes paused for an outage resume
        now, in a cycle called early (not after the pause doubled while it lasted)."""
        if not actuator.pacer.down:
            return
        actuator.pacer.server_answered()
        if self.driver is not None:
            self.driver.trigger()

    def leadership(self, leading: bool) -> None:
        self.metrics.is_leader.set(1 if leading else 0)
        if leading and self.driver is not None:
            self.driver.trigger()


def _status_writer(
    settings: Settings,
    api_client: ApiClient,
    metrics: Metrics,
    elector: LeaderElector | AlwaysLeader,
    clock: Callable[[], float],
) -> StatusWriter | None:
    """The status object's writer, when the settings name a ConfigMap; the leader's."""
    if not settings.status_configmap:
        return None
    return StatusWriter(
        settings.status_options(),
        api_client,
        metrics,
        may_write=lambda: elector.is_leader,
        clock=clock,
    )


def build(
    settings: Settings,
    api_client: ApiClient,
    *,
    metrics: Metrics | None = None,
    actuator: Actuator | None = None,
    out: TextIO | None = sys.stdout,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    server: ServerOptions | None = None,
) -> Parts:
    """Every part of the daemon from `settings`, connected: the caches' changes and a
    won election trigger an early cycle; only the leader writes (jobs, status)."""
    metrics = metrics or Metrics()
    triggers = _Triggers(settings, metrics)
    kube, prometheus = build_sources(settings, api_client, triggers.on_change, triggers.kinds)
    kube.export_ages(metrics.cache_age, metrics.cache_stalled)
    elector = make_elector(settings.leader_options(), api_client, triggers.leadership)
    status = _status_writer(settings, api_client, metrics, elector, clock)
    built = actuator or build_actuator(settings, api_client, out)
    if isinstance(built, KubeActuator):  # no write outlives the Lease (leader.lease_left)
        built.lease_left = elector.lease_left
        kube.on_answer(partial(triggers.api_answered, built))
    controller = Controller(
        settings.loop_options(),
        settings.planner_policy(),
        LiveSource(settings.source_options(), kube, prometheus, metrics),
        built,
        metrics,
        may_write=lambda: elector.is_leader,
        clock=clock,
        status=status,
        identity=getattr(elector, "identity", "") or settings.identity,
    )
    driver = triggers.driver = Driver(
        controller, is_leader=lambda: elector.is_leader, wall=wall, ready_check=lambda: kube.current
    )
    listen = server or settings.server_options()
    http = HealthServer(metrics, driver.alive, driver.ready, listen.listen_host, listen.listen_port)
    return Parts(
        settings,
        api_client,
        metrics,
        kube,
        prometheus,
        controller.actuator,
        elector,
        status,
        controller,
        driver,
        http,
    )
