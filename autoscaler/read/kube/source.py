"""Kubernetes objects the planner reads, kept current by list-then-watch caches.

One cache per (resource, namespace scope), each the loop of an informer
(read.kube.cache; its LIST paging is read.kube.pages). Each object is decoded once, when
its LIST page or WATCH event arrives, into the frozen record the planner needs
(`parse.decoders`: a job, a waiting gang, a Queue's spec, ...); raw dicts are not kept. A
cycle then reads `KubeSource.objects()`, the records of every cache, which costs no API
call. The ApiClient comes from client.config; the collector's tuning for the caches'
records is read.kube.tuning.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import structlog
from kubernetes_asyncio.client import ApiClient

from autoscaler.client.config import namespace_scopes
from autoscaler.client.redact import remember_client
from autoscaler.core.model import Node, ObjectRef
from autoscaler.core.options import KubeOptions, ReadOptions, default_read_options
from autoscaler.core.resources import (
    HPA,
    JOB_RESOURCES,
    NODE,
    POD,
    PODGROUP,
    PRIORITY_CLASS,
    PYTORCHJOB,
    QUEUE,
    UNFINISHED_POD_FIELD_SELECTOR,
    ResourceKind,
)
from autoscaler.read.parse import Decoder, Records, decoders
from autoscaler.read.records import (
    Changes,
    GroupRecord,
    HpaTarget,
    JobRecord,
    PodUse,
    PriorityValue,
    QueueSpec,
)

from .cache import _Cache
from .pages import CacheCounters, Key, ObjectsApi, ProtoReaders, proto_readers
from .straight import Straight, straight
from .wire import reader

__all__ = ["KubeObjects", "KubeSource", "OnChange"]

log = structlog.get_logger("autoscaler.read.kube.source")


class OnChange(Protocol):
    """Called (synchronously; keep it cheap) for every change applied to a cache.

    `kind` is the Kubernetes kind (`PyTorchJob`, `PodGroup`, `Queue`, `PriorityClass`),
    `event_type` ADDED, MODIFIED or DELETED (a relist reports its differences the same
    way), `record` what the cache holds for the object (for DELETED: what it held),
    `before` what it held before this change (None for an object it did not hold, or
    held as nothing the planner reads): a trigger that fires on a transition (a PodGroup
    turning waiting) compares the two, so it fires once per transition, whether the
    change came by a watch event or a relist.
    Objects the planner reads nothing of (a pod not bound, or finished) are not reported,
    nor are the kinds KubeSource was not told it wants (`on_change_kinds`).
    """

    def __call__(self, kind: str, event_type: str, record: Any, before: Any) -> None: ...


@dataclass(frozen=True)
class KubeObjects:
    """One consistent-enough read of all caches: the records they hold.

    Each tuple is ordered by (namespace, name) of the objects. `records` is the same
    records for `parse.build_snapshot`, the same object while no cache changed (a
    caller may keep what it built from it). `synced` is False until every cache finished
    its first LIST; `errors` names caches whose last LIST/WATCH failed and objects that
    were dropped. `failing_seconds` is how long the longest-failing cache has been
    unable to list or watch (0 when all are connected): past a bound its objects are
    stale, not current. `stalled`: caches whose watch went silent (read.kube.cache).
    """

    records: Records
    synced: bool
    errors: tuple[str, ...]
    failing_seconds: float = 0.0
    # caches whose watch delivered nothing for watch_stall_seconds and has not connected
    # again since, each with its words: what they hold may be stale, so writes hold
    stalled: tuple[str, ...] = ()
    # which `records` these are (KubeSource.changes_since: what changed since another)
    generation: int = 0

    @property
    def jobs(self) -> tuple[JobRecord, ...]:
        return self.records.jobs

    @property
    def podgroups(self) -> tuple[GroupRecord, ...]:
        return self.records.groups

    @property
    def queues(self) -> tuple[QueueSpec, ...]:
        return self.records.queues

    @property
    def priorityclasses(self) -> tuple[PriorityValue, ...]:
        return self.records.priorities

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.records.nodes

    @property
    def pods(self) -> tuple[PodUse, ...]:
        return self.records.pods

    @property
    def hpas(self) -> tuple[HpaTarget, ...]:
        return self.records.hpas  # a job an HPA targets is theirs


@dataclass
class _Memo:
    """What `objects()` and `_records()` built last, and from which cache versions."""

    versions: tuple[Any, ...] = ()
    snapshot: KubeObjects | None = None
    records_versions: tuple[int, ...] = ()
    records: Records | None = None
    generation: int = 0  # of `records`: each new one is the next
    # what changed into each of the last records from the one before: (generation, changes)
    changes: deque[tuple[int, Changes]] = field(default_factory=lambda: deque(maxlen=8))


TOMBSTONE_SECONDS = 3600.0
TOMBSTONE_COUNT = 10_000


class Tombstones:
    """The jobs the caches saw deleted (a watch's DELETED, a relist without them), for
    assemble.owners_gone under a label_selector: there a PodGroup's owner missing from
    the caches may be a job outside the selector, so only a job seen deleted is gone.

    Kept TOMBSTONE_SECONDS: a deleted job's PodGroup waits only for the garbage
    collector (seconds; minutes when it is backed up), and a tombstone that outlives it
    marks nothing (a new job of the name has another uid). At most TOMBSTONE_COUNT, the
    oldest dropped first: a mass deletion cannot grow the daemon without bound.
    """

    def __init__(self) -> None:
        self._at: dict[ObjectRef, float] = {}  # insertion order: oldest first
        self.version = 0  # bumped on every change, as a cache's (the records memo)

    def add(self, ref: ObjectRef, now: float) -> None:
        self._at.pop(ref, None)
        self._at[ref] = now
        while len(self._at) > TOMBSTONE_COUNT:
            del self._at[next(iter(self._at))]
        self.version += 1

    def live(self, now: float) -> tuple[ObjectRef, ...]:
        """The tombstones not yet expired (the expired ones are dropped)."""
        while self._at and now - next(iter(self._at.values())) > TOMBSTONE_SECONDS:
            del self._at[next(iter(self._at))]
        return tuple(self._at)


@dataclass(frozen=True)
class _CacheMaker:
    """What every cache of one KubeSource shares; `make` adds what one cache watches."""

    api: ObjectsApi
    settings: KubeOptions
    notify: Callable[[str, str, Any, Any], None]
    # the kinds whose caches notify (None: every kind)
    notified: Collection[str] | None
    backoff: Callable[[int], float]
    page_size: int
    decode: Mapping[str, Decoder]
    # kind -> its straight reader: only with the options `decode` was made with
    fast: Mapping[str, Straight]
    # kind -> how its protobuf LIST items are read (settings.kube_protobuf)
    protos: Mapping[str, ProtoReaders]

    def make(
        self,
        resource: ResourceKind,
        namespace: str | None,
        selector: str = "",
        optional: bool = False,
        field_selector: str = "",
    ) -> _Cache:
        return _Cache(
            resource,
            namespace,
            selector,
            self.api,
            self.settings,
            self.notify if self.notified is None or resource.kind in self.notified else None,
            self.backoff,
            self.page_size,
            self.decode[resource.kind],
            optional,
            field_selector,
            reader(resource.kind, job=resource in JOB_RESOURCES),
            self.fast.get(resource.kind),
            self.protos.get(resource.kind),
        )


def _told(
    on_change: OnChange | None, kinds: Collection[str] | None, job_kinds: set[str]
) -> set[str] | None:
    """The kinds whose caches tell KubeSource._notify of their changes (None: every
    kind): those `on_change` is told of, and the job kinds (their deletions are kept as
    tombstones)."""
    if on_change is None:
        return set(job_kinds)
    return None if kinds is None else {*kinds, *job_kinds}


def _readers(
    decode: Mapping[str, Decoder] | None, read_options: ReadOptions | None
) -> tuple[Mapping[str, Decoder], dict[str, Straight], ReadOptions | None]:
    """Each kind's decoder (`decode`, else the readers of the default read options,
    core.options.default_read_options: no settings loader needed) and the straight
    readers of the kinds a LIST brings by the ten thousand: only with the options
    `decode` was made with (`KubeSource`'s `decode`, `read_options`)."""
    if decode is None:
        read_options = read_options or default_read_options()
        decode = decoders(read_options)
    fast = {
        kind: found
        for kind in ("Pod", "Node", "PodGroup", "PyTorchJob")
        if read_options is not None and (found := straight(kind, read_options)) is not None
    }
    return decode, fast, read_options


class KubeSource:
    """Informer-like caches of the managed job kinds, PodGroups, Queues, PriorityClasses
    and HorizontalPodAutoscalers.

    `settings.namespaces` empty: one all-namespaces cache per namespaced resource, else
    one per namespace. `settings.label_selector` applies to jobs only. Call `start()`
    inside the event loop, `wait_synced()` before the first cycle, `stop()` at the end.
    """

    def __init__(
        self,
        settings: KubeOptions,
        api_client: ApiClient,
        on_change: OnChange | None = None,
        *,
        on_change_kinds: Collection[str] | None = None,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        rng: random.Random | None = None,
        page_size: int | None = None,  # None: settings.kube_list_page_size
        job_kinds: Sequence[ResourceKind] = (PYTORCHJOB,),
        watch_nodes: bool = False,
        watch_pods: bool = False,
        decode: Mapping[str, Decoder] | None = None,
        read_options: ReadOptions | None = None,
    ) -> None:
        """`job_kinds`: the job resources to cache (the daemon passes the managed kinds).
        Each object is decoded when it arrives with `decode[its kind]`: the daemon passes
        `parse.decoders(settings)`; None, the readers of the default settings (GPU
        resource names, annotation names as `Settings()` has them). `read_options`: the
        options `decode` was made with, for the readers that build a LIST's bound pods
        and nodes straight from their bytes (read.kube.straight); None with `decode`
        given: those are decoded by `decode` too. `on_change_kinds`: the kinds
        `on_change` is told of (None: every kind); a cache of another kind tells nothing
        (but a job kind's deletions, kept as tombstones): at 50k bound pods and 26k
        nodes, telling a callback that reads neither of each as a LIST is installed was
        ~40 ms of a sync's CPU."""
        self._settings = settings
        self._on_change = on_change
        self._on_change_kinds = on_change_kinds
        self._job_kind_names = {kind.kind for kind in job_kinds}
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._rng = rng or random.Random()
        remember_client(api_client.configuration)
        decode, fast, read_options = _readers(decode, read_options)
        caches = _CacheMaker(
            ObjectsApi(api_client),
            settings,
            self._notify,
            _told(on_change, on_change_kinds, self._job_kind_names),
            self._backoff,
            # a LIST of big objects is parsed page by page: only one page is held raw at once
            page_size or settings.kube_list_page_size,
            decode,
            fast,
            {
                kind: found
                for kind in ("Pod", "Node")
                if settings.kube_protobuf
                and (found := proto_readers(kind, read_options)) is not None
            },
        )
        self._make_caches(caches, job_kinds, watch_nodes=watch_nodes, watch_pods=watch_pods)
        self.tombstones = Tombstones()
        self._tasks: list[asyncio.Task[None]] = []
        self._memo = _Memo()

    def _make_caches(
        self,
        caches: _CacheMaker,
        job_kinds: Sequence[ResourceKind],
        *,
        watch_nodes: bool,
        watch_pods: bool,
    ) -> None:
        """One cache per resource and namespace scope (see the class docstring)."""
        settings = caches.settings
        namespaces = namespace_scopes(settings.namespaces)
        selector = settings.label_selector.strip()
        # one list per kind: a PyTorchJob and a Volcano Job may share a name
        self._jobs_by_kind = [
            [caches.make(kind, ns, selector, optional=True) for ns in namespaces]
            for kind in job_kinds
        ]
        self._jobs = [c for by_kind in self._jobs_by_kind for c in by_kind]
        self._podgroups = [caches.make(PODGROUP, ns) for ns in namespaces]
        self._queues = [caches.make(QUEUE, None)]
        self._priorityclasses = [caches.make(PRIORITY_CLASS, None)]
        # the cluster's GPUs (nodes) and, for node fit, what bound pods use of them: every
        # namespace's pods, whatever `namespaces` says (they share the nodes); unbound ones
        # too: a job's workers with no pod at all stop counting as in flight (HoldNoPods)
        self._nodes = [caches.make(NODE, None)] if watch_nodes else []
        unfinished = UNFINISHED_POD_FIELD_SELECTOR
        self._pods = [caches.make(POD, None, field_selector=unfinished)] if watch_pods else []
        # any HPA scaling a job takes it out of our hands (parse.hpa_targets); per namespace
        # like the jobs, and optional like them: a server without autoscaling/v2 has none
        self._hpas = [caches.make(HPA, ns, optional=True) for ns in namespaces]
        self._caches = [*self._jobs, *self._podgroups, *self._queues, *self._priorityclasses]
        self._caches += [*self._nodes, *self._pods, *self._hpas]

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            raise RuntimeError("KubeSource already started")
        self._tasks = [
            asyncio.create_task(c.run(), name=f"kube-cache-{c.name}") for c in self._caches
        ]

    async def list_once(self) -> KubeObjects:
        """LIST every cache once, without watching: a one-shot read (e.g. `plan`).

        Raises the first failure (ApiException, aiohttp.ClientError, TimeoutError).
        Do not mix with `start()`.
        """

        await asyncio.gather(*(c.list_once() for c in self._caches))
        return self.objects()

    async def wait_synced(self, timeout: float) -> None:  # noqa: ASYNC109 - our contract
        """Return once every cache finished its first LIST; TimeoutError names the rest."""

        pending = [c for c in self._caches if not c.synced.is_set()]
        if pending:
            waiters = [asyncio.create_task(c.synced.wait()) for c in pending]
            try:
                await asyncio.wait(waiters, timeout=timeout)
            finally:
                for w in waiters:
                    w.cancel()
                await asyncio.gather(*waiters, return_exceptions=True)
        unsynced = [c for c in self._caches if not c.synced.is_set()]
        if unsynced:
            detail = "; ".join(
                c.name + (f" (last error: {c.last_error})" if c.last_error else "")
                for c in unsynced
            )
            raise TimeoutError(f"Kubernetes caches not synced after {timeout:g}s: {detail}")

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for cache, result in zip(self._caches, results, strict=False):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.error("kube.cache_crashed", cache=cache.name, error=repr(result))

    # -- reading ------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return all(c.synced.is_set() for c in self._caches)

    @property
    def current(self) -> bool:
        """Every cache listed and none is failing to list or watch now: what readiness
        means. After an outage this stays False until each cache has reconnected (and
        re-listed where the server forgot its version), so /readyz does not claim a
        picture it cannot have."""
        return all(c.synced.is_set() and c.failing_since is None for c in self._caches)

    def objects(self) -> KubeObjects:
        """The current records; no API call. Memoised until a cache changes."""

        now = time.monotonic()
        failing = max(
            (now - c.failing_since for c in self._caches if c.failing_since is not None),
            default=0.0,
        )
        versions = (
            *((c.version, c.last_error, c.synced.is_set(), c.stalled) for c in self._caches),
            self.tombstones.version,
        )
        memo = self._memo
        if memo.snapshot is not None and memo.versions == versions and not failing:
            return memo.snapshot
        records = self._records()
        snapshot = KubeObjects(
            records=records,
            synced=self.synced,
            errors=tuple(e for c in self._caches for e in c.errors()),
            failing_seconds=failing,
            stalled=tuple(f"{c.name}: {c.last_error}" for c in self._caches if c.stalled),
            generation=self._memo.generation,
        )
        self._memo.versions, self._memo.snapshot = versions, snapshot
        return snapshot

    def _records(self) -> Records:
        """The records of every cache: the same object while no cache changed."""
        versions = (*(c.version for c in self._caches), self.tombstones.version)
        memo = self._memo
        if memo.records is not None and memo.records_versions == versions:
            return memo.records
        pods, pod_keys = self._pods[0].keyed() if len(self._pods) == 1 else ((), ())
        # one kind's tuple handed on as it is (the others' caches are mostly empty)
        jobs = [found for caches in self._jobs_by_kind if (found := _merged(caches))]
        records = Records(
            jobs=jobs[0] if len(jobs) == 1 else tuple(r for found in jobs for r in found),
            groups=_merged(self._podgroups),
            queues=_merged(self._queues),
            priorities=_merged(self._priorityclasses),
            nodes=_merged(self._nodes),
            pods=pods,
            hpas=_merged(self._hpas),
            pods_known=bool(self._pods),
            job_kinds=tuple(c[0].resource.kind for c in self._jobs_by_kind if c),
            job_selector=bool(self._settings.label_selector.strip()),
            deleted_jobs=self.tombstones.live(time.monotonic()),
            pod_keys=pod_keys,
        )
        whole = memo.records is None or memo.records_versions[-1] != versions[-1]
        memo.generation += 1
        memo.changes.append((memo.generation, self._changes(whole)))
        memo.records_versions, memo.records = versions, records
        return records

    def _changes(self, whole: bool) -> Changes:
        """What changed in the caches since the records before (the caches' keys taken)."""
        jobs: set[tuple[str, str, str]] = set()
        for caches in self._jobs_by_kind:
            for c in caches:
                changed = c.take_changed()
                whole = whole or changed is None
                jobs.update((ns, c.resource.kind, name) for ns, name in changed or ())
        groups = False
        for c in self._podgroups:
            changed = c.take_changed()
            groups = groups or changed is None or bool(changed)
        for c in (*self._queues, *self._priorityclasses, *self._hpas):
            changed = c.take_changed()
            whole = whole or changed is None or bool(changed)
        nodes: set[str] = set()
        for c in self._nodes:
            changed = c.take_changed()
            whole = whole or changed is None
            nodes.update(name for _, name in changed or ())
        pods: dict[tuple[str, str], Any] = {}
        for c in self._pods:
            changed = c.take_changed()
            whole = whole or changed is None
            pods.update(changed or ())
        if whole:
            return Changes(whole=True)
        return Changes(frozenset(jobs), frozenset(nodes), pods, groups)

    def changes_since(self, generation: int) -> Changes | None:
        """What changed in the records from those of `generation` to the last ones
        (KubeObjects.generation); None when that is no longer known."""
        log = [c for g, c in self._memo.changes if g > generation]
        if not log or self._memo.changes[0][0] > generation + 1:
            return None
        out = log[0]
        for later in log[1:]:
            out = out.then(later)
        return out

    def stats(self) -> dict[str, Any]:
        """Counters for metrics (monotonic, except the `by_cache` state fields).

        Totals over all caches: `lists` (completed LISTs), `watches` (watch requests),
        `watch_restarts` (watches that ended cleanly and were resumed), `relists_410`
        (watches expired by the server), `events` (ADDED/MODIFIED/DELETED applied),
        `dropped_oversized`; `errors` is {kind: failed LIST/WATCH attempts}; `by_cache`
        maps a cache name (`PyTorchJob(ns1)`, `Queue`, ...) to its own counters plus
        `synced`, `last_error`, `objects`, `resource_version`, `stalled` and
        `age_seconds` (since the server last said anything to it: a LIST, a watch's
        answer, an event or a bookmark; None before the first).
        """

        totals = CacheCounters()
        now = time.monotonic()
        errors: dict[str, int] = {}
        by_cache: dict[str, dict[str, Any]] = {}
        for c in self._caches:
            for name in vars(totals):
                setattr(totals, name, getattr(totals, name) + getattr(c.counters, name))
            errors[c.resource.kind] = errors.get(c.resource.kind, 0) + c.counters.errors
            by_cache[c.name] = {
                **vars(c.counters),
                "synced": c.synced.is_set(),
                "last_error": c.last_error,
                "objects": len(c.items),
                "resource_version": c.resource_version,
                "kind": c.resource.kind,
                "optional": c.optional,
                "absent": c.absent,
                "stalled": c.stalled,
                # seconds since the server last said anything to it (None: never)
                "age_seconds": None if c.heard is None else max(0.0, now - c.heard),
            }
        return {**vars(totals), "errors": errors, "by_cache": by_cache}

    def on_answer(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever a cache that was failing (or stalled) is answered by
        the API server again: the server is back (the actuator lifts its outage pause)."""
        for c in self._caches:
            c.on_answer = callback

    def export_ages(self, age: Labelled, stalled: Labelled) -> None:
        """Each cache's age (seconds since the server last said anything to it) and
        whether its watch stalled, read when the metrics are scraped (a Gauge's
        `labels(cache).set_function`): a stall shows while it lasts, not a cycle later."""
        for c in self._caches:
            age.labels(c.name).set_function(partial(_age, c))
            stalled.labels(c.name).set_function(partial(_stalled, c))

    # -- internals ----------------------------------------------------------------------

    def _notify(self, kind: str, event_type: str, record: Any, before: Any) -> None:
        if event_type == "DELETED" and kind in self._job_kind_names:
            if isinstance(record, JobRecord):
                self.tombstones.add(record.job.ref, time.monotonic())
        if self._on_change is None or record is None:
            return
        if self._on_change_kinds is not None and kind not in self._on_change_kinds:
            return  # a job kind's deletion, told for its tombstone only
        try:
            self._on_change(kind, event_type, record, before)
        except Exception:  # a callback bug must not stop the watch
            log.exception("kube.on_change_failed", kind=kind, event_type=event_type)

    def _backoff(self, failures: int) -> float:
        """Exponential in consecutive failures, capped, with jitter in [d/2, d]."""

        if failures <= 0:
            return 0.0
        delay = min(self._backoff_cap, self._backoff_base * 2 ** min(failures - 1, 30))
        return self._rng.uniform(delay / 2, delay)


class Labelled(Protocol):
    """A labelled Gauge, as far as export_ages uses it (prometheus_client's)."""

    def labels(self, *values: str) -> Any: ...


def _age(cache: _Cache) -> float:
    return 0.0 if cache.heard is None else max(0.0, time.monotonic() - cache.heard)


def _stalled(cache: _Cache) -> float:
    return 1.0 if cache.stalled else 0.0


def _merged(caches: Sequence[_Cache]) -> tuple[Any, ...]:
    if len(caches) == 1:
        return caches[0].values()
    # several namespace scopes: each cache is sorted, their union is sorted again
    items: dict[Key, Any] = {}
    for c in caches:
        items.update((k, v) for k, v in c.items.items() if v is not None)
    return tuple(obj for _, obj in sorted(items.items()))
