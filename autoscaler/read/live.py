"""The daemon's sources read together: the Kubernetes watch caches plus one Prometheus
query, joined into one ClusterSnapshot per cycle."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import structlog

from autoscaler.core.model import ClusterSnapshot, Plugin, QueueState
from autoscaler.core.options import SourceOptions
from autoscaler.core.reasons import Reason
from autoscaler.read.prometheus.answer import FreeGpuReading, PromError
from autoscaler.read.records import QueueSpec

from .parse import Assembled, Records, build_snapshot
from .parse.delta import Assembler

if TYPE_CHECKING:
    from .kube.source import KubeObjects

log = structlog.get_logger("autoscaler.read.live")

KUBE_ERRORS = ("not_synced", "stale", "oversized")  # kinds of source_errors{kubernetes}


class _Labelled(Protocol):
    def labels(self, *values: str) -> Any: ...


class Metrics(Protocol):
    """The counters the sources keep (report.metrics.Metrics has them): read/ sits below
    report/, so it names what it needs rather than importing the registry."""

    @property
    def source_errors(self) -> _Labelled: ...

    @property
    def kind_installed(self) -> _Labelled: ...


class KubeReader(Protocol):
    """What a cycle reads of the Kubernetes watch caches (read.kube.source.KubeSource);
    a `stats()` of theirs, when it has one, counts the objects they dropped."""

    def objects(self) -> KubeObjects: ...


class PrometheusReader(Protocol):
    """What a cycle asks of Prometheus (read.prometheus.source.PrometheusSource)."""

    async def fetch(self, now: datetime) -> FreeGpuReading: ...


class LiveSource:
    """The daemon's sources: Kubernetes watch caches plus one Prometheus query."""

    def __init__(
        self,
        settings: SourceOptions,
        kube: KubeReader,
        prometheus: PrometheusReader,
        metrics: Metrics | None = None,
    ) -> None:
        self.settings, self.kube, self.prometheus, self.metrics = (
            settings,
            kube,
            prometheus,
            metrics,
        )
        # what the caches' records gave last time: assembled again only when they change,
        # and then from what changed where the caches say (parse.delta)
        self._assembled: tuple[Records, Assembled] | None = None
        self._assembler = Assembler()
        self._generation: int | None = None  # KubeObjects.generation of `_assembled`
        self.plugin: Plugin | None = None  # the plugin the headroom followed last cycle
        self.last_reading: FreeGpuReading | None = None  # Prometheus' last answer
        self._dropped = 0  # oversized objects the caches dropped, as last counted
        if metrics is not None:  # every series from 0: alerts see the first error
            for kind in PromError:
                metrics.source_errors.labels("prometheus", kind.value)
            for what in KUBE_ERRORS:
                metrics.source_errors.labels("kubernetes", what)

    async def read(self, now: datetime) -> ClusterSnapshot:
        reading = await self.prometheus.fetch(now)
        self.last_reading = reading
        if self.metrics is not None:
            for kind in reading.errors:
                self.metrics.source_errors.labels("prometheus", kind).inc()
        objects = self.kube.objects()  # the caches: no API call
        self._count_dropped()
        records = objects.records
        if self._assembled is None or self._assembled[0] is not records:
            since = getattr(self.kube, "changes_since", None)
            changes = (
                since(self._generation)
                if since is not None and self._generation is not None
                else None
            )
            self._assembled = (records, self._assembler.assemble(records, changes))
            self._generation = objects.generation
        problem, message = reading.problem, reading.message
        free = reading.queues
        if self.settings.cross_check_queue_status:
            free = cross_check_free(free, objects.queues)
        stale = objects.failing_seconds > self.settings.kube_max_stale_seconds
        if not objects.synced or stale:
            # half a picture could hide a pending gang or a job's real size: hold
            problem = Reason.METRICS_UNAVAILABLE
            what = f"failing for {objects.failing_seconds:.0f}s" if objects.synced else "not synced"
            message = f"Kubernetes caches {what}: " + "; ".join(objects.errors)
            if self.metrics is not None:
                self.metrics.source_errors.labels(
                    "kubernetes", "not_synced" if not objects.synced else "stale"
                ).inc()
        if objects.synced and objects.stalled and problem is not Reason.METRICS_UNAVAILABLE:
            # a watch that went silent: what its cache holds may be gone (a human's
            # resize, a deleted gang); nothing is written on it until it connects again
            problem = Reason.CACHE_STALE
            message = (
                "Kubernetes watch stalled, its objects may be stale; writes hold until it "
                "is connected again: " + "; ".join(objects.stalled)
            )
        self._note_plugin(reading.plugin)
        return build_snapshot(
            records,
            free,
            self.settings.read,
            problem=problem,
            message=message,
            assembled=self._assembled[1],
            plugin=reading.plugin,
            # a synced Queue cache knows every Queue: a name it lacks is missing, not unknown
            queues_listed=objects.synced,
        )

    def _note_plugin(self, plugin: Plugin | None) -> None:
        """Say which plugin the headroom follows when it is found, and when it changes
        (a scheduler reconfigured from proportion to capacity, or the other way)."""
        if plugin is None or plugin is self.plugin:
            return
        log.info(
            "headroom.plugin",
            plugin=str(plugin),
            setting=str(self.settings.headroom_plugin),
            previous=str(self.plugin) if self.plugin is not None else None,
            note="auto: capacity when real-capacity series are exported, else proportion"
            if self.settings.headroom_plugin == "auto"
            else "as set",
        )
        self.plugin = plugin

    def _count_dropped(self) -> None:
        """Objects over max_object_bytes are dropped by the caches (and logged there); the
        planner cannot see them, so they are also counted where alerts look. Job kinds
        whose CRD is not installed are shown the same way."""

        stats_of = getattr(self.kube, "stats", None)
        stats = stats_of() if stats_of is not None else {}
        dropped = stats.get("dropped_oversized", 0)
        if self.metrics is not None and dropped > self._dropped:
            self.metrics.source_errors.labels("kubernetes", "oversized").inc(
                dropped - self._dropped
            )
        self._dropped = dropped
        if self.metrics is not None:
            installed: dict[str, bool] = {}
            for cache in (stats.get("by_cache") or {}).values():
                if cache.get("optional"):
                    kind = str(cache.get("kind"))
                    installed[kind] = installed.get(kind, True) and not cache.get("absent")
            for kind, yes in installed.items():
                self.metrics.kind_installed.labels(kind).set(1 if yes else 0)


def cross_check_free(
    free: Mapping[str, QueueState], queues: Iterable[QueueSpec]
) -> dict[str, QueueState]:
    """Hold a queue whose reading disagrees by more than one GPU with what the API says.
    Catches a query that no longer matches the scheduler (renamed metrics, wrong units).
    With Volcano's figures: the allocated GPUs of the metrics against the controller's
    `Queue.status.allocated` (plain units). A free-GPU reading taken as given: against
    `spec.deserved` minus `status.allocated`, for queues that set both (a figure that
    cannot be read is not compared: the reading stands on its own)."""

    out = dict(free)
    for spec in queues:
        name = spec.name
        state = out.get(name)
        if state is None:
            continue
        allocated = spec.allocated
        if state.volcano is not None:
            if allocated is not None and abs(allocated - state.volcano.allocated) > 1:
                out[name] = QueueState(
                    name,
                    None,
                    Reason.METRICS_INVALID,
                    f"queue {name}: Prometheus says {state.volcano.allocated:g} GPUs "
                    f"allocated, the Queue object's status.allocated says {allocated}",
                    state.state,
                )
            continue
        deserved = spec.deserved
        if state.free_gpus is None or deserved is None or allocated is None:
            continue
        expected = max(0, deserved - allocated)
        if abs(expected - state.free_gpus) > 1:
            out[name] = QueueState(
                name,
                None,
                Reason.METRICS_INVALID,
                f"queue {name}: Prometheus says {state.free_gpus:g} free GPUs, the Queue "
                f"object says {expected} (spec.deserved {deserved} - status.allocated "
                f"{allocated})",
                state.state,
            )
    return out
