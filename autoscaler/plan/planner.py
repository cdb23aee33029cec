"""The global planner: `plan(snapshot, policy, now) -> Plan`.

Pure and deterministic: no I/O, no clock, no randomness; the same input gives the same
plan, in the same order. Every job and every waiting gang gets a decision with a reason.
The rules are docs/design.md "Planner rules"; the numbers below refer to them.

Per queue, in order:
  hold    missing/bad data, a closed or missing queue: nothing in the queue changes (rule 9);
          a job whose last resize the cluster refused holds alone (its share goes on)
  trim    workers still unplaced long after our resize are given back (rule 5)
  gangs   waiting PodGroups one at a time by priority then age; each fits in what is free
          (plus GPUs being released) or gets elastic workers reclaimed, only if that makes
          it fit; otherwise skipped, unless it is starving (rule 3)
  grow    what is left, minus in-flight and reserve, to jobs out of cooldown (rules 4, 6, 7)
"""

from __future__ import annotations

import bisect
import heapq
import math
import operator
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache, lru_cache
from typing import Any, Protocol, TypeVar

from autoscaler.core.model import (
    Action,
    Bound,
    ClusterSnapshot,
    Decision,
    ElasticJob,
    GangDecision,
    Measurement,
    ObjectRef,
    PendingGroup,
    Plan,
    Plugin,
    QueueState,
    QueueSummary,
    UnmanagedJob,
    VolcanoView,
    same_items,
)
from autoscaler.core.policy import GrowthPolicy, PlannerPolicy, VictimOrder
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import MILLI

from . import payoff
from .fit import Holder, Placer, Room, describe_shape, make_room
from .headroom import Limits, PluginLimit, real_capability
from .inflight import NoPods
from .quota import QueueQuota, add, amount_words, beyond
from .shares import Ask, capacity_allotments, deserved_of

CLOSED_STATES = frozenset({"Closed", "Closing"})
# gangs not served this cycle: they wait for the GPUs that free first
_STILL_WAITING = frozenset(
    {Reason.GANG_UNCOVERABLE, Reason.GANG_RECLAIM_UNPAID, Reason.GANG_BLOCKED}
)
# gangs served this cycle: their GPUs are held at their jobs' minimum once bound
_SERVED = frozenset({Reason.GANG_FITS, Reason.GANG_COVERED})
_EPS = 1e-9


@dataclass(slots=True, eq=False)  # eq=False: hashed by identity, usable as a dict key
class _Job:
    """A job's working state during one plan (mutable, private to this module)."""

    job: ElasticJob
    target: int
    since: float | None  # seconds since our last resize; None: never resized by us
    skey: tuple[str, str, str]  # stable order: namespace, name, kind
    reason: Reason | None = None
    message: str = ""
    locked: bool = False  # decided for this cycle: no further change
    victim_of: list[str] | None = None  # the gangs it gives workers to, once it does
    fit_note: str = ""  # what node fit said when it bounded this job's growth

    @property
    def key(self) -> ObjectRef:
        return self.job.ref


def plan(snapshot: ClusterSnapshot, policy: PlannerPolicy, now: datetime) -> Plan:
    index = _index(snapshot.jobs)
    jobs_by_queue = index.by_queue
    unmanaged_by_queue = _listing(snapshot.unmanaged).by_queue
    pending_by_queue = _by_queue(snapshot.pending)

    gangs: list[GangDecision] = [
        GangDecision(g.ref, g.queue, 0, Reason.INVALID_GANG, g.message)
        for g in snapshot.invalid_groups
    ]
    names = sorted(
        set(snapshot.queues) | set(jobs_by_queue) | set(pending_by_queue) | set(unmanaged_by_queue)
    )
    no_pods = NoPods(snapshot.pods_by_owner, policy.no_pods_timeout_seconds, now)
    work = {name: _work(index.ordered.get(name, ()), now) for name in names}
    cluster = (
        _Cluster(
            snapshot,
            index,
            pending_by_queue,
            lambda j: _growth_block(j, _seconds(j.last_scale_time, now), policy) is None,
            no_pods,
        )
        if snapshot.volcano is not None
        else None
    )
    lenders = _Lenders.of(snapshot, cluster, work, policy) if cluster is not None else None
    shared = _Shared(no_pods, lenders)
    by_queue = (unmanaged_by_queue, pending_by_queue)
    planners = [
        _plan_queue(name, snapshot, cluster, work[name], by_queue, shared, policy, now)
        for name in names
    ]
    summaries = {p.state.name: summary for p, summary in planners}
    # decisions once every queue ran: a gang of a later queue may take a job's workers
    # back from an earlier one (lent shares, _Lenders)
    decisions: list[Decision] = []
    memo: _Decided = (_KEPT.decided, {})
    for queue_plan, _ in planners:
        own = queue_plan.decisions(memo)
        listed = unmanaged_by_queue.get(queue_plan.state.name)
        decisions.extend(_with_listed(own, listed, no_pods) if listed is not None else own)
        gangs.extend(queue_plan.gangs)
    _KEPT.decided = memo[1]

    gangs.sort(key=lambda g: (g.queue, g.ref.namespace, g.ref.name))
    return Plan(
        now=now,
        decisions=tuple(decisions),
        gangs=tuple(gangs),
        queues=summaries,
        measurements=_measurements(index.measurable, now, policy.unplaced_timeout_seconds),
    )


def _plan_queue(
    name: str,
    snapshot: ClusterSnapshot,
    cluster: _Cluster | None,
    work: list[_Job],
    by_queue: tuple[Mapping[str, _Listed], dict[str, list[PendingGroup]]],
    shared: _Shared,
    policy: PlannerPolicy,
    now: datetime,
) -> tuple[_QueuePlanner, QueueSummary]:
    """One queue planned, and its summary; queues are planned in name order,
    each taking from the cluster's idle GPUs what it is given."""
    state = snapshot.queues.get(name) or QueueState(
        name, None, Reason.METRICS_MISSING, f"queue {name} has no free-GPU reading"
    )
    headroom = None
    if cluster is not None and (state.volcano is not None or cluster.view.plugin is Plugin.GIVEN):
        state, headroom = cluster.queue_state(state)
    unmanaged, pending = by_queue
    queue_plan = _QueuePlanner(
        state,
        work,
        unmanaged.get(name, _NONE_LISTED),
        pending.get(name, []),
        snapshot,
        policy,
        now,
        cluster.pool if cluster is not None else None,
        shared,
    )
    summary = queue_plan.run()
    if state.notes:
        summary = replace(summary, notes=state.notes)
    if headroom is not None:
        summary = headroom.summary(summary, queue_plan.node_fit_limited)
    elif state.free_gpus is None and state.volcano is None:
        # no reading for it: nothing was given, and no plugin computed its headroom
        summary = replace(summary, plugin=Plugin.UNKNOWN)
    return queue_plan, summary


def _work(ordered: Iterable[tuple[ElasticJob, _Key]], now: datetime) -> list[_Job]:
    """A queue's jobs as the planner works on them, in stable order (`_Jobs.ordered`)."""
    return [
        _Job(
            j,
            j.replicas,
            None if j.last_scale_time is None else (now - j.last_scale_time).total_seconds(),
            key,
        )
        for j, key in ordered
    ]


_Key = tuple[str, str, str]  # a job's stable order: namespace, name, kind


@dataclass(frozen=True, slots=True)
class _Jobs:
    """What plan() reads of the jobs alone, whatever the time and the rest of the
    snapshot: kept for the same tuple of jobs (`_index`). Read only."""

    of: tuple[ElasticJob, ...]
    by_queue: Mapping[str, tuple[ElasticJob, ...]]  # each in the snapshot's order
    ordered: Mapping[str, tuple[tuple[ElasticJob, _Key], ...]]  # each in stable order
    room_to_max: Mapping[str, float]  # GPUs each queue's jobs could still grow by
    moving: tuple[ElasticJob, ...]  # with workers in flight, queue by queue (name order)
    measurable: tuple[ElasticJob, ...]  # whose restart the plan may measure (_measure)


def _index(jobs: Sequence[ElasticJob]) -> _Jobs:
    """The jobs indexed, or the last plan's index of the same jobs: the same tuple (a
    tuple and the frozen jobs in it cannot change), or a new sequence of the same job
    objects in the same order (the sources assemble a new tuple whenever any of their
    caches changed, most often not a job)."""
    last = _KEPT.jobs
    if last is not None and same_items(last.of, jobs):
        return last
    by_queue = {q: tuple(js) for q, js in _by_queue(jobs).items()}
    index = _Jobs(
        tuple(jobs),
        by_queue,
        {
            q: tuple(sorted(((j, (j.ref.namespace, j.ref.name, j.ref.kind)) for j in js), key=_KEY))
            for q, js in by_queue.items()
        },
        {q: float(sum(_room_to_max(j) for j in js)) for q, js in by_queue.items()},
        tuple(j for _, js in sorted(by_queue.items()) for j in js if j.inflight_workers),
        tuple(j for j in jobs if j.last_scale_time is not None and j.awaits_restart_measure),
    )
    _KEPT.jobs = index
    return index


@dataclass(frozen=True, slots=True)
class _Listed:
    """A queue's unmanaged jobs as plan() reads them alone, whatever the time and the
    rest of the snapshot: kept for the same jobs (`_listing`). Read only.

    A cluster that keeps its finished jobs lists tens of thousands (training-operator
    deletes none by default): each one's decision is made once, from its record alone,
    and the queue's are sorted once, not every plan."""

    jobs: list[UnmanagedJob]  # in the snapshot's order
    # the decisions that are the record's alone (no HoldNoPods note can come), in
    # (namespace, name, kind) order, and those keys; None: two of the queue's unmanaged
    # jobs share a key (a duplicate), merged as each plan sorts them (`_with_unmanaged`)
    fixed: list[Decision] | None
    keys: list[_Key]
    timed: list[UnmanagedJob]  # the others: decided every plan, in the snapshot's order
    inflight: list[UnmanagedJob]  # with GPUs in flight (inflight_gpus not 0)
    by_spec: list[UnmanagedJob]  # holding GPUs by spec (replicas x gpus per worker not 0)
    names: frozenset[tuple[str, str]]  # (namespace, name) of each
    # the seconds of the latest payoff.RECENT_RUNS finished runs by completion (rule 3b's
    # evidence, `_QueuePlanner._queue_runs`)
    runs: tuple[float, ...]


_NONE_LISTED = _Listed([], [], [], [], [], [], frozenset(), ())


@dataclass(frozen=True, slots=True)
class _Unmanaged:
    """The unmanaged jobs by queue (`_Listed`) and, by id() of each job kept, its
    decision (the job object is kept too, so an id cannot match a new job at an old
    address)."""

    of: tuple[UnmanagedJob, ...]
    by_queue: Mapping[str, _Listed]
    decided: dict[int, tuple[UnmanagedJob, Decision]]


def _listing(unmanaged: Sequence[UnmanagedJob]) -> _Unmanaged:
    """The unmanaged jobs by queue, or the last plan's for the same job objects in the
    same order; a job kept from the last keeps its decision."""
    last = _KEPT.unmanaged
    if last is not None and same_items(last.of, unmanaged):
        return last
    seen = last.decided if last is not None else {}
    decided: dict[int, tuple[UnmanagedJob, Decision]] = {}
    by_queue = {q: _listed(us, seen, decided) for q, us in _by_queue(unmanaged).items()}
    _KEPT.unmanaged = _Unmanaged(tuple(unmanaged), by_queue, decided)
    return _KEPT.unmanaged


def _listed(
    jobs: list[UnmanagedJob],
    seen: Mapping[int, tuple[UnmanagedJob, Decision]],
    decided: dict[int, tuple[UnmanagedJob, Decision]],
) -> _Listed:
    fixed: list[Decision] = []
    timed: list[UnmanagedJob] = []
    for u in jobs:
        if NoPods.may_count(u):
            timed.append(u)
            continue
        kept = seen.get(id(u))
        if kept is None or kept[0] is not u:
            kept = (u, _report(u, ()))
        decided[id(u)] = kept
        fixed.append(kept[1])
    fixed.sort(key=_decision_order)
    keys = [_decision_order(d) for d in fixed]
    every = set(keys)
    every.update((u.ref.namespace, u.ref.name, u.ref.kind) for u in timed)
    return _Listed(
        jobs,
        fixed if len(every) == len(jobs) else None,
        keys,
        timed,
        [u for u in jobs if u.inflight_gpus],
        [u for u in jobs if (u.replicas or 0) * (u.gpus_per_worker or 0)],
        frozenset((u.ref.namespace, u.ref.name) for u in jobs),
        _latest_runs(jobs),
    )


def _latest_runs(jobs: Iterable[UnmanagedJob]) -> tuple[float, ...]:
    """The seconds of the latest payoff.RECENT_RUNS runs of `jobs` by completion (runs
    that completed together and ran alike are the same evidence, whichever is taken)."""
    runs = [r for u in jobs if (r := payoff.run_of(u)) is not None]
    if len(runs) > payoff.RECENT_RUNS:
        runs = heapq.nlargest(payoff.RECENT_RUNS, runs, key=lambda r: (r.completed, r.seconds))
    return tuple(r.seconds for r in runs)


def _with_listed(decisions: list[Decision], listed: _Listed, no_pods: NoPods) -> list[Decision]:
    """`_with_unmanaged`, the same list, from what is kept: the few decisions made this
    plan (the queue's jobs', its unmanaged jobs' that may say HoldNoPods) placed among
    the kept ones by bisection. Ties (a job and an unmanaged one of the same key) put the
    job's first, as heapq.merge does."""
    fixed, keys = listed.fixed, listed.keys
    if fixed is None:
        return list(_with_unmanaged(decisions, listed.jobs, no_pods))
    timed = sorted((_unmanaged_decision(u, no_pods) for u in listed.timed), key=_decision_order)
    made = list(heapq.merge(decisions, timed, key=_decision_order)) if timed else decisions
    if not made:
        return fixed
    out: list[Decision] = []
    at = 0
    for d in made:
        to = bisect.bisect_left(keys, _decision_order(d), at)
        out += fixed[at:to]
        out.append(d)
        at = to
    out += fixed[at:]
    return out


class _Queued(Protocol):
    @property
    def queue(self) -> str: ...


_T = TypeVar("_T", bound=_Queued)


def _by_queue(items: Iterable[_T]) -> dict[str, list[_T]]:
    """Items by their queue, each list in the items' order."""
    out: dict[str, list[_T]] = {}
    for item in items:
        out.setdefault(item.queue, []).append(item)
    return out


def _with_unmanaged(
    decisions: list[Decision], unmanaged: Iterable[UnmanagedJob], no_pods: NoPods
) -> Iterable[Decision]:
    """A queue's decisions with its unmanaged jobs' merged in, in (namespace, name) order:
    the job list is already in that order, so the few unmanaged ones are merged in
    rather than everything sorted."""
    reports = sorted((_unmanaged_decision(u, no_pods) for u in unmanaged), key=_decision_order)
    return heapq.merge(decisions, reports, key=_decision_order) if reports else decisions


def _measurements(
    jobs: Iterable[ElasticJob], now: datetime, limit: float
) -> tuple[Measurement, ...]:
    found = (m for j in jobs if (m := _measure(j, now, limit)) is not None)
    return tuple(sorted(found, key=lambda m: (m.ref.namespace, m.ref.name, m.ref.kind)))


@dataclass(frozen=True, slots=True)
class _Headroom:
    """How one queue's headroom was found, for its QueueSummary."""

    plugin: Plugin
    gpus: float  # before in-flight: what the queue planner is given as free
    inflight: int
    limits: dict[str, float]
    inputs: dict[str, float]
    bound: Bound

    def summary(self, s: QueueSummary, node_fit_limited: bool) -> QueueSummary:
        bound = Bound.NODE_FIT if node_fit_limited else self.bound
        return replace(
            s,
            headroom_gpus=max(0.0, self.gpus - self.inflight),
            bound=bound,
            limits=self.limits,
            inputs=self.inputs,
            plugin=self.plugin,
        )


class _Cluster:
    """What the queues of one cycle share: Volcano's view of every queue, and the GPUs idle
    on schedulable nodes, taken by in-flight workers first, then queue by queue (name
    order) as gangs and growth are granted; under the capacity plugin, how those idle
    GPUs are shared out between the queues (shares.capacity_allotments)."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        jobs: _Jobs,
        pending_by_queue: dict[str, list[PendingGroup]],
        asks: Callable[[ElasticJob], bool],
        no_pods: NoPods,
    ) -> None:
        view = snapshot.volcano
        assert view is not None
        self.view = view
        # What each queue would ask for beyond its request this cycle: room to max of its
        # elastic jobs, and its waiting gangs (a Pending PodGroup adds nothing to request).
        self.wanted: dict[str, float] = dict(jobs.room_to_max)
        for name, groups in pending_by_queue.items():
            self.wanted[name] = self.wanted.get(name, 0.0) + sum(g.gpus for g in groups)
        self.limits = Limits(view, self.wanted)
        self.pool: Placer | None = None
        self.inflight: dict[str, int] = {}
        self._count_inflight(snapshot, jobs.moving, pending_by_queue, no_pods)
        # capacity: idle GPUs each queue may take, where that is less than it asks for
        self.allotments: dict[str, int] = {}
        if view.plugin is Plugin.CAPACITY:
            # a queue that holds (unknown data, closed) asks for nothing this cycle
            planned = {
                n for n, s in snapshot.queues.items() if _plans(s) and snapshot.problem is None
            }
            self.allotments = self._allot(jobs.by_queue, pending_by_queue, asks, planned)

    def _count_inflight(
        self,
        snapshot: ClusterSnapshot,
        moving: Iterable[ElasticJob],
        pending_by_queue: dict[str, list[PendingGroup]],
        no_pods: NoPods,
    ) -> None:
        # a job whose own PodGroup waits counts once, as that gang (rule 2): its workers
        # are not in flight here, the queue planner takes the gang's GPUs; workers with
        # no pod long after they were asked for count no more (HoldNoPods)
        own = _own_waiting([g for groups in pending_by_queue.values() for g in groups])
        jobs = [
            (j, n)
            for j in moving  # those with workers in flight, queue by queue
            if not _waits_for_own_gang(j.ref, own)
            and (n := j.inflight_workers - no_pods.of_job(j)) > 0
        ]
        unmanaged = [
            (u, n)
            for u in snapshot.unmanaged
            if u.inflight_gpus
            and not _waits_for_own_gang(u.ref, own)
            and (n := u.inflight_gpus - no_pods.gpus_of(u)) > 0
        ]
        if self.view.nodes is not None:
            self.pool = _placed_in_flight(self.view, jobs, unmanaged)
        for j, n in jobs:
            self.inflight[j.queue] = self.inflight.get(j.queue, 0) + n * j.gpus_per_worker
        for u, gpus in unmanaged:
            self.inflight[u.queue] = self.inflight.get(u.queue, 0) + gpus

    def _allot(
        self,
        jobs_by_queue: Mapping[str, Sequence[ElasticJob]],
        pending_by_queue: dict[str, list[PendingGroup]],
        asks: Callable[[ElasticJob], bool],
        planned: set[str],
    ) -> dict[str, int]:
        """Idle GPUs each queue may take this cycle under the capacity plugin: owed ones
        first (docs/design.md "Sharing a cluster between queues"). A queue asks for the
        room to max of its jobs that may grow now and for its gangs not yet admitted
        (an Inqueue gang's GPUs are in `inqueue` already); one not `planned` (it holds),
        for nothing."""
        view, total = self.view, self.view.total_gpus
        if total is None:
            return {}
        rows = []
        for name, q in sorted(view.queues.items()):
            limit = self.limits.limit(name)
            if limit is None:
                continue
            inflight = self.inflight.get(name, 0)
            want = sum(_room_to_max(j) for j in jobs_by_queue.get(name, ()) if asks(j))
            want += sum(g.gpus for g in pending_by_queue.get(name, ()) if g.phase != "Inqueue")
            want = want if name in planned else 0
            real = real_capability(q, total, self.limits.total_guarantee)
            used = q.allocated + q.inqueue + inflight
            rows.append(
                Ask(name, used, deserved_of(q, real), q.weight, limit.gpus - inflight, want)
            )
        if self.pool is not None:
            idle = self.pool.idle_gpus
        else:
            idle = math.floor(total - sum(r.used for r in rows) + _EPS)
        allotted = capacity_allotments(idle, rows)
        # where a queue gets all it asks for, its headroom stays the scheduler's room
        return {r.name: allotted[r.name] for r in rows if allotted[r.name] < r.most}

    def queue_state(self, state: QueueState) -> tuple[QueueState, _Headroom | None]:
        """The queue's state with `free_gpus` = its headroom before in-flight workers:
        the smallest of its plugin's room and the cluster's idle GPUs (plus its own
        in-flight ones, which the queue planner subtracts)."""
        if state.problem is not None:
            return state, None
        if self.view.plugin is Plugin.GIVEN:
            if state.free_gpus is None:
                return state, None
            limit: PluginLimit | None = PluginLimit(state.free_gpus, Bound.GIVEN, {})
        else:
            limit = self.limits.limit(state.name)
        if limit is None:
            what = (
                "no nodes to count the cluster's GPUs"
                if self.view.plugin is Plugin.PROPORTION
                else "no real capacity series and no nodes to compute it"
            )
            return (
                replace(
                    state,
                    free_gpus=None,
                    problem=Reason.METRICS_MISSING,
                    message=f"queue {state.name}: headroom under the {self.view.plugin} "
                    f"plugin cannot be computed: {what}",
                ),
                None,
            )
        inflight = self.inflight.get(state.name, 0)
        limits = {str(limit.bound): limit.gpus}
        free, bound = max(0.0, limit.gpus), limit.bound
        if self.pool is not None:
            idle = self.pool.idle_gpus + inflight
            limits[str(Bound.CLUSTER_IDLE)] = float(self.pool.idle_gpus)
            if idle <= free:  # a tie names the physical limit
                free, bound = float(idle), Bound.CLUSTER_IDLE
        if state.name in self.allotments:
            # capacity: the queues below their deserved are served first (shares.py)
            allot = self.allotments[state.name]
            limits[str(Bound.FAIR_SHARE)] = float(allot)
            if allot + inflight < free:
                free, bound = float(allot + inflight), Bound.FAIR_SHARE
        if inflight:
            limits[str(Bound.IN_FLIGHT)] = float(inflight)
            if inflight >= free > 0:
                bound = Bound.IN_FLIGHT
        headroom = _Headroom(self.view.plugin, free, inflight, limits, dict(limit.figures), bound)
        # capacity: admitted gangs' GPUs (inqueue) are already out of the room, so the
        # queue planner serves Inqueue gangs from them first; but only the part that is
        # really there: Volcano admits a gang counting other jobs' elastic workers as
        # reclaimable, so inqueue may exceed real capacity - allocated (room < 0), and
        # that deficit must still be reclaimed
        admitted = 0.0
        if self.view.plugin is Plugin.CAPACITY:
            inqueue = self.view.queues[state.name].inqueue
            admitted = max(0.0, inqueue + min(0.0, limit.gpus))
        return replace(state, free_gpus=free, admitted_gpus=admitted), headroom


# the nodes after the last plan's in-flight workers took their room, with what it was
# made of (kept, so an identity test cannot match a new object at an old address)
_IN_FLIGHT: list[tuple[object, list[tuple[Any, int]], list[tuple[Any, int]], Any]] = []


def _placed_in_flight(
    view: VolcanoView,
    jobs: list[tuple[ElasticJob, int]],
    unmanaged: list[tuple[UnmanagedJob, int]],
) -> Placer:
    """The nodes with room taken by workers asked for and not running yet (`jobs`: a job
    and its workers in flight; `unmanaged`: a job and its GPUs in flight), whoever asked:
    they will take node room first (a worker already bound is on its node's used room and
    counts twice for the seconds until it runs: the safe side). A steady cluster hands
    the planner the same nodes and job objects every cycle (the snapshot is assembled
    again only when a cache changed): the placement, most of a steady plan at 10k jobs,
    is then taken up from the last plan's, which is what placing the same workers on the
    same nodes again gives."""
    assert view.nodes is not None
    last = _IN_FLIGHT[0] if _IN_FLIGHT else None
    if (
        last is not None
        and last[0] is view.nodes
        and _same_pairs(last[1], jobs)
        and _same_pairs(last[2], unmanaged)
    ):
        return Placer(view.nodes, view.gpu_names, start=last[3])
    pool = Placer(view.nodes, view.gpu_names)
    for j, n in jobs:
        pool.place(j.worker_shape, n)
    for _, gpus in unmanaged:
        pool.take_gpus(gpus)
    _IN_FLIGHT[:] = [(view.nodes, jobs, unmanaged, pool.state())]
    return pool


def _same_pairs(a: list[tuple[Any, int]], b: list[tuple[Any, int]]) -> bool:
    return len(a) == len(b) and all(
        x[0] is y[0] and x[1] == y[1] for x, y in zip(a, b, strict=True)
    )


def _measure(j: ElasticJob, now: datetime, limit: float) -> Measurement | None:
    """A job we resized whose workers are now all active: the time it took is its
    restart cost (cycle-granular, so an upper bound), averaged with the one before.
    Not for jobs whose owner set the cost, nor twice for one resize, nor when it took
    longer than `limit` (unplaced_timeout_seconds): then the workers waited for GPUs,
    which is queueing, not the job's restart."""
    resized = j.last_scale_time
    if resized is None or not j.awaits_restart_measure:
        return None
    took = (now - resized).total_seconds()
    if not 0 < took <= limit:
        return None
    if j.restart_cost_source == "measured" and j.restart_cost_seconds is not None:
        took = (took + j.restart_cost_seconds) / 2
    return Measurement(j.ref, took, resized, j.resource_version)


def _unmanaged_decision(u: UnmanagedJob, no_pods: NoPods) -> Decision:
    gone = no_pods.gpus_of(u)
    notes: tuple[str, ...] = ()
    if gone:
        workers = gone // (u.gpus_per_worker or 1)
        notes = (f"{Reason.NO_PODS}: {no_pods.words(workers, u.asked_at)}",)
    return _report(u, notes)


def _report(u: UnmanagedJob, notes: tuple[str, ...]) -> Decision:
    """An unmanaged job's decision, with what the plan says of its pods."""
    return Decision(
        ref=u.ref,
        queue=u.queue,
        current=u.replicas,
        target=u.replicas,
        reason=u.reason,
        message=u.message,
        min_replicas=u.min_replicas,
        max_replicas=u.max_replicas,
        gpus_per_worker=u.gpus_per_worker,
        notes=(*notes, u.queue_warning) if u.queue_warning else notes,
        warnings=(u.queue_warning,) if u.queue_warning else (),
    )


def _decision_order(d: Decision) -> tuple[str, str, str]:
    return (d.ref.namespace, d.ref.name, d.ref.kind)


_NO_MIN_AVAILABLE = (
    "no runPolicy.schedulingPolicy.minAvailable: training-operator sets the "
    "gang size to all replicas, so growing raises it (grown only with "
    "grow_without_min_available)",
)


_SKEY = operator.attrgetter("skey")
_KEY = operator.itemgetter(1)


def _notes(j: ElasticJob) -> tuple[str, ...]:
    """What the plan says beside a job's decision: a gang it would raise, what node fit
    does not judge of its workers, a queue it names but does not run in (the first two
    one shared tuple per combination: this runs for every job every cycle)."""
    shape = j.shape
    unmodelled = shape.unmodelled if shape is not None and j.replicas < j.max_replicas else ()
    notes = _notes_for(j.has_min_available, unmodelled)
    return (*notes, j.queue_warning) if j.queue_warning else notes


@cache
def _notes_for(has_min_available: bool, unmodelled: tuple[str, ...]) -> tuple[str, ...]:
    notes: tuple[str, ...] = () if has_min_available else _NO_MIN_AVAILABLE
    if unmodelled:
        notes += (
            f"node fit does not judge its workers' {', '.join(unmodelled)}: a worker "
            "granted may stay Pending, and is trimmed after unplaced_timeout_seconds",
        )
    return notes


# the decisions of the last plan by id() of their job: (job, target, reason, message,
# default restart cost, decision). Built anew by every plan from the one before: a
# steady cycle decides the same of most of its 10k jobs, and building each frozen
# Decision again was a fifth of a steady plan (docs/benchmarks.md, [placement] #27
# fifth round). The job object is kept, so an id cannot match a new job at an old
# address; every other input of a decision is compared.
_Seen = tuple[ElasticJob, int, Reason, str, float, Decision]
_Decided = tuple[dict[int, _Seen], dict[int, _Seen]]  # (the last plan's, this plan's)


class _Kept:
    """What a plan leaves for the next (docs/design.md): the index of its tuple of jobs
    (a steady cluster hands the planner the same tuple of the same jobs every cycle: the
    watch caches assemble a new one only when one changed, `_index`) and its decisions
    (`_Decided`). What is kept is what planning anew gives."""

    __slots__ = ("decided", "jobs", "unmanaged")

    def __init__(self) -> None:
        self.jobs: _Jobs | None = None
        self.decided: dict[int, _Seen] = {}
        self.unmanaged: _Unmanaged | None = None  # the unmanaged jobs' (`_listing`)


_KEPT = _Kept()


def _decision(j: ElasticJob, w: _Job, default_cost: float) -> Decision:
    # positional, costs inline: this runs once per job whose decision changed
    return (Action if w.target != j.replicas else Decision)(
        j.ref,
        j.queue,
        j.replicas,
        w.target,
        w.reason or Reason.NO_IDLE_GPUS,
        w.message,
        j.min_replicas,
        j.max_replicas,
        j.gpus_per_worker,
        j.resource_version,
        _notes(j),
        j.workers_at,
        default_cost if j.restart_cost_seconds is None else j.restart_cost_seconds,
        j.restart_cost_source or "default",
        (j.queue_warning,) if j.queue_warning else (),
    )


def _seconds(delta_from: datetime | None, now: datetime) -> float | None:
    return None if delta_from is None else (now - delta_from).total_seconds()


class _VictimPool:
    """Rule 3's victims: the extra (above-min) workers of elastic jobs, taken lowest
    priority first, then by `victim_order`; whole workers, as few as cover a shortfall.

    Kept across the gangs of one queue. GPUs reclaimable per priority make "can this gang
    be covered at all" (the common answer in a full queue is no) O(priorities), and the
    default order keeps its victims in a heap: O(log n) a pick."""

    def __init__(
        self,
        jobs: list[_Job],
        policy: PlannerPolicy,
        restart_cost: Callable[[ElasticJob], float],
    ) -> None:
        self._jobs = jobs
        self._restart_cost = restart_cost
        self._by_priority: dict[int, int] = {}
        for w in jobs:
            prio = w.job.priority
            self._by_priority[prio] = self._by_priority.get(prio, 0) + _extra_gpus(w)
        self._by_heap = policy.victim_order is VictimOrder.MOST_WORKERS
        # built at the first reclaim: most cycles reclaim nothing, and at 20k jobs the
        # heap of every job above its minimum was a tenth of the plan
        self._heap: list[tuple[int, int, tuple[str, str, str], _Job]] | None = None

    def reclaimable(self, max_priority: float) -> int:
        """GPUs the jobs of priority <= max_priority could still give up."""
        return sum(v for prio, v in self._by_priority.items() if prio <= max_priority)

    def take(
        self, shortfall: int, max_priority: float, skip: frozenset[int] = frozenset()
    ) -> list[tuple[_Job, int]]:
        """Victims and how many workers each gives (highest index first); the caller
        applies them and reports each back with `taken`. `skip`: ids of jobs not to
        take from (they stay victims for later gangs)."""
        chosen: list[tuple[_Job, int]] = []
        left = (
            []
            if self._by_heap
            else [
                w
                for w in self._jobs
                if w.job.priority <= max_priority and _extra_gpus(w) > 0 and id(w) not in skip
            ]
        )
        skipped: list[_Job] = []
        while shortfall > 0:
            w = self._next(left, shortfall, max_priority)
            if w is None:
                break
            if id(w) in skip:  # popped off the heap: back on it once done
                skipped.append(w)
                continue
            j = w.job
            workers = min(w.target - j.min_replicas, math.ceil(shortfall / j.gpus_per_worker))
            chosen.append((w, workers))
            shortfall -= workers * j.gpus_per_worker
        for w in skipped:
            heapq.heappush(self._victim_heap(), _heap_entry(w))
        return chosen

    def ordered(self, max_priority: float) -> list[_Job]:
        """Every job of priority <= max_priority with workers above its min, in the
        order `take` would pick them for a shortfall as large as all they hold."""
        jobs = [w for w in self._jobs if w.job.priority <= max_priority and _extra_gpus(w) > 0]
        if self._by_heap:
            return sorted(jobs, key=_heap_entry)
        return sorted(jobs, key=lambda w: self._least_work_lost_rank(w, _extra_gpus(w)))

    def claim(self, chosen: list[tuple[_Job, int]]) -> None:
        """Victims chosen without `take` (by nodes): out of the heap until `taken`
        puts back those still above their min."""
        if self._heap is not None and chosen:
            gone = {id(w) for w, _ in chosen}
            self._heap = [e for e in self._heap if id(e[3]) not in gone]
            heapq.heapify(self._heap)

    def put_back(self, chosen: list[tuple[_Job, int]]) -> None:
        """Victims `take` chose but the reclaim did not happen: victims again."""
        if self._by_heap:
            for w, _ in chosen:
                heapq.heappush(self._victim_heap(), _heap_entry(w))

    def taken(self, w: _Job, workers: int) -> None:
        """`workers` of w's are gone (w.target already lowered)."""
        self._by_priority[w.job.priority] -= workers * w.job.gpus_per_worker
        if self._by_heap and w.target > w.job.min_replicas:  # still a victim for later gangs
            heapq.heappush(self._victim_heap(), _heap_entry(w))

    def _victim_heap(self) -> list[tuple[int, int, tuple[str, str, str], _Job]]:
        if self._heap is None:
            self._heap = [_heap_entry(w) for w in self._jobs if _extra_gpus(w) > 0]
            heapq.heapify(self._heap)
        return self._heap

    def _next(self, left: list[_Job], shortfall: int, max_priority: float) -> _Job | None:
        if self._by_heap:
            # lowest priority, then the most reclaimable workers: as few jobs as possible
            # restart
            heap = self._victim_heap()
            if heap and heap[0][0] <= max_priority:
                return heapq.heappop(heap)[3]
            return None
        # least-work-lost: the rank depends on the shortfall, so each pick scans
        if not left:
            return None
        w = min(left, key=lambda c: self._least_work_lost_rank(c, shortfall))
        left.remove(w)
        return w

    def _least_work_lost_rank(self, w: _Job, shortfall: int) -> tuple[Any, ...]:
        # A resize restarts the whole job: it loses its restart cost on every GPU it runs
        # on. Greedy weighted cover: least GPU-seconds lost per GPU of shortfall covered.
        j = w.job
        reclaimable = w.target - j.min_replicas
        covered = min(reclaimable * j.gpus_per_worker, shortfall)
        lost = self._restart_cost(j) * j.active * j.gpus_per_worker
        return (j.priority, lost / covered, -reclaimable, w.skey)


def _own_waiting(pending: list[PendingGroup]) -> dict[tuple[str, str, str], PendingGroup]:
    """(namespace, name, kind) of jobs whose own PodGroup is among the waiting gangs: by
    owner reference, else by name with kind "" (training-operator names the PodGroup
    after the job) -> that PodGroup."""

    found: dict[tuple[str, str, str], PendingGroup] = {}
    for g in pending:
        o = g.owner
        if o is None:
            found[(g.ref.namespace, g.ref.name, "")] = g
        else:
            found[(o.namespace, o.name, o.kind)] = g
    return found


def _own_gang(
    ref: ObjectRef, own_waiting: Mapping[tuple[str, str, str], PendingGroup]
) -> PendingGroup | None:
    found = own_waiting.get((ref.namespace, ref.name, ref.kind))
    return found if found is not None else own_waiting.get((ref.namespace, ref.name, ""))


def _waits_for_own_gang(
    ref: ObjectRef, own_waiting: Mapping[tuple[str, str, str], PendingGroup]
) -> bool:
    return _own_gang(ref, own_waiting) is not None


# what a job waiting for its own PodGroup is told, by the PodGroup's phase
_OWN_GANG_PHASE = {
    "Pending": "Volcano has not admitted its gang yet (training-operator creates no pod "
    "until it does)",
    "Inqueue": "Volcano admitted its gang; its pods are not all bound yet",
    "Unknown": "its pods exist but Volcano has not placed the whole gang (some stay "
    "Pending, the rest run): it waits for room in its queue, or for its gang to shrink",
}


def own_gang_words(g: PendingGroup) -> str:
    """Why a job holds for its own PodGroup, naming it and its phase."""
    why = _OWN_GANG_PHASE.get(g.phase, "it is waiting to be scheduled")
    return f"its own {g.ref} is {g.phase or 'waiting'} ({g.gpus} GPU(s)): {why}"


def _bound_workers(j: ElasticJob) -> int:
    """Workers of the job's current size whose pod is bound to a node (pod watch)."""
    return sum(1 for node in j.worker_nodes[: j.replicas] if node)


def _water_fill(candidates: list[_Job], pool: int) -> dict[_Job, int]:
    """One worker at a time to the job with the fewest (then priority, smaller workers,
    age, name) that is below its max and whose worker fits in what is left. A heap: a
    job whose worker no longer fits never will (what is left only shrinks), so it
    leaves the heap; O(workers granted x log jobs), not a scan of every job per worker."""
    grants = {w: 0 for w in candidates}
    heap = [
        (w.job.replicas, -w.job.priority, w.job.gpus_per_worker, w.job.created, w.skey, w)
        for w in candidates
        if w.job.replicas < w.job.max_replicas
    ]
    heapq.heapify(heap)
    left = pool
    while heap:
        size, prio, gpus, created, skey, w = heapq.heappop(heap)
        if gpus > left:
            continue
        grants[w] += 1
        left -= gpus
        if size + 1 < w.job.max_replicas:
            heapq.heappush(heap, (size + 1, prio, gpus, created, skey, w))
    return grants


def _plans(state: QueueState) -> bool:
    """The queue is planned this cycle: its data is known and it is open."""
    return state.usable and state.state not in CLOSED_STATES


def _cut(jobs: Iterable[_Job | tuple[_Job, str]], cuts: Iterable[int]) -> list[tuple[_Job, int]]:
    """Victims and their workers taken, from make_room's cuts (in holder order)."""
    out = []
    for item, n in zip(jobs, cuts, strict=False):
        w = item[0] if isinstance(item, tuple) else item
        if n:
            out.append((w, n))
    return out


def _gpus_of(victims: Iterable[tuple[_Job, int]]) -> int:
    """GPUs the victims' workers free."""
    return sum(n * w.job.gpus_per_worker for w, n in victims)


def _holder(w: _Job, group: str = "") -> Holder:
    """A victim's workers above its min as fit.make_room sees them: highest index
    first (the operators delete those first), each with its node ("" unbound)."""
    where, j = w.job.worker_nodes, w.job
    nodes = tuple(
        where[i] if i < len(where) else "" for i in range(w.target - 1, j.min_replicas - 1, -1)
    )
    return Holder(j.worker_shape, nodes, j.priority, group)


def _room_to_max(j: ElasticJob) -> int:
    return max(0, j.max_replicas - j.replicas) * j.gpus_per_worker


def _running_taken(w: _Job, workers: int) -> int:
    """Of `workers` taken from w, those that run: the highest indexes go first, and the
    ones this plan asked for that never landed (above what is active) cost nothing."""
    return workers - min(workers, max(0, w.target - w.job.active))


def _is_swap(w: _Job, workers: int) -> bool:
    """Taking `workers` from w is a swap: it gives up running workers, at least as many
    as it keeps (at linear speedup it loses about what the gang gains)."""
    running = _running_taken(w, workers)
    return running > 0 and running >= w.job.active - running


def _extra_gpus(w: _Job) -> int:
    return max(0, w.target - w.job.min_replicas) * w.job.gpus_per_worker


def _heap_entry(w: _Job) -> tuple[int, int, tuple[str, str, str], _Job]:
    return (w.job.priority, w.job.min_replicas - w.target, w.skey, w)


def _restart_cost_of(j: ElasticJob, policy: PlannerPolicy) -> float:
    """The job's own estimate (its annotation, else our measurement), else the policy's."""
    return policy.restart_cost_seconds if j.restart_cost_seconds is None else j.restart_cost_seconds


_AT_MAX = "at maxReplicas={}"
_IN_FLIGHT_WORDS = "{} worker(s) asked for are not running yet"
_NO_IDLE = "no idle GPUs for a worker of {} GPU(s)"


@lru_cache(maxsize=1024)
def _words(template: str, n: int) -> str:
    """A hold's message that depends on one number, made once: thousands of jobs a cycle
    say the same (and a decision taken up from the last plan compares it by identity)."""
    return template.format(n)


def _growth_block(
    j: ElasticJob, since: float | None, p: PlannerPolicy, no_pods: str = ""
) -> tuple[Reason, str] | None:
    """Why the job may not grow this cycle, whatever its queue has free; None: it may.
    `no_pods`: why its workers asked for count no longer (HoldNoPods), "" if they do."""
    if j.replicas >= j.max_replicas:
        return Reason.AT_MAX, _words(_AT_MAX, j.max_replicas)
    if j.gang_grows and not p.grow_without_min_available:
        # only shrunk: shrinking lowers the gang, which never blocks it
        return Reason.NO_MIN_AVAILABLE, j.gang_grows
    if j.grow_blocked:
        return Reason.IN_FLIGHT, j.grow_blocked
    if j.replicas > j.active:
        if no_pods:
            return Reason.NO_PODS, no_pods
        return Reason.IN_FLIGHT, _words(_IN_FLIGHT_WORDS, j.replicas - j.active)
    if j.replicas < j.active:
        return Reason.RELEASING, f"{j.active - j.replicas} worker(s) are still being released"
    cost = _restart_cost_of(j, p)
    if since is not None and (since < (cool := p.cooldown_for(cost)) or since <= 0):
        # even with no cooldown, a job resized at `now` is not resized again at `now`
        why = f"resized {since:.0f}s ago; cooldown {cool:.0f}s"
        if cool > p.cooldown_seconds:
            why += f" ({p.cooldown_restart_cost_factor:g} x its restart cost {cost:.0f}s)"
        return Reason.COOLDOWN, why
    return None


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every queue planner of one plan reads beside its own queue."""

    no_pods: NoPods
    lenders: _Lenders | None


# who covers a gang: (victims in its queue, lent shares given back), why nobody can, or
# the trade of a reclaim that does not pay
_Covered = tuple[list[tuple["_Job", int]], list[tuple["_Job", int]]] | str | payoff.Trade

_NOT_VICTIMS = frozenset({Reason.CLOCK_SKEW, Reason.WRITE_REFUSED, Reason.OWN_GANG_WAITING})


class _Lenders:
    """Lent shares come back (docs/design.md "Sharing a cluster between queues"): a
    queue holding more than its own share lent the rest while nobody asked; a waiting
    gang of a queue within its share takes elastic workers back from such queues, by the
    rules of reclaim inside a queue (_VictimPool), never taking a queue below its share
    by more than part of one worker. Volcano's default actions never reclaim across
    queues: without this, the gang waits until the lender's jobs end."""

    def __init__(
        self,
        shares: dict[str, float],
        best_effort: set[str],
        held: dict[str, float],
        usable: set[str],
        work: dict[str, list[_Job]],
        policy: PlannerPolicy,
        snapshot: ClusterSnapshot,
    ) -> None:
        self.shares, self.best_effort, self.held = shares, best_effort, held
        self.usable, self.work, self.policy = usable, work, policy
        # what each queue keeps whoever asks (its deserved under capacity, its weight's
        # part of the cluster among the queues with jobs under proportion): beyond it, it
        # holds others' idle share
        self.owned = dict(shares)
        # what locks a job in its own queue's accounting (_account), known before that
        # queue is planned: a job taken here must not be locked there at its old size
        self.own = _own_waiting(list(snapshot.pending))
        self.refusals = {(r.ref.namespace, r.ref.name, r.ref.kind): r for r in snapshot.refusals}

    @classmethod
    def of(
        cls,
        snapshot: ClusterSnapshot,
        cluster: _Cluster,
        work: dict[str, list[_Job]],
        policy: PlannerPolicy,
    ) -> _Lenders | None:
        """Each queue's share and what it holds (allocated + admitted), by its plugin:
        capacity, its deserved (shares.deserved_of; a best-effort queue is owed
        nothing); proportion, the water-fill of everyone's asks (Limits.shares)."""
        view, total = cluster.view, cluster.view.total_gpus
        if view.plugin is Plugin.GIVEN or total is None:
            return None
        shares, best_effort = cluster.limits.shares(), set()
        if view.plugin is Plugin.CAPACITY:
            for name, q in view.queues.items():
                real = real_capability(q, total, cluster.limits.total_guarantee)
                deserved = deserved_of(q, real)
                shares[name] = deserved or 0.0
                if deserved is None:
                    best_effort.add(name)
        held = {name: q.allocated + q.inqueue for name, q in view.queues.items()}
        usable = {name for name, state in snapshot.queues.items() if _plans(state) and name in held}
        lenders = cls(shares, best_effort, held, usable, work, policy, snapshot)
        if view.plugin is Plugin.PROPORTION:
            lenders.owned = cluster.limits.owned()
        return lenders

    def within(self, g: PendingGroup) -> str:
        """ "" when g's queue, with g, stays within its share; else why not."""
        q = g.queue
        if q not in self.shares or q in self.best_effort:
            return f"queue {q} is owed no share (no deserved, no guarantee)"
        adds = 0 if g.phase == "Inqueue" else g.gpus  # an admitted gang is in inqueue
        held, share = self.held.get(q, 0.0), self.shares[q]
        if held + adds > share + _EPS:
            return (
                f"queue {q} would hold {held + adds:g} GPU(s) with it, beyond its share "
                f"{share:g}: nothing is taken back from other queues for it"
            )
        return ""

    def on_loan(self, g: PendingGroup, locked: float) -> str:
        """Rule 3c: "" when g's queue, its gangs holding `locked` GPUs (its jobs' minimum
        and the gangs served this plan), may start g by taking its own elastic workers;
        else why not. Beyond what the queue keeps whoever asks (`owned`), the GPUs its
        elastic workers hold are on loan: given back in one restart when another
        queue's gang asks for its share (rule 3, lent shares). A gang started on them
        holds them until its job ends, and no give-back reaches a gang, so the lenders'
        shares would wait on the borrower's run times. Volcano still starts g on GPUs
        that free (its own plugin's rule); only the reclaim is not made."""
        q = g.queue
        owned = self.owned.get(q)
        if owned is None or q in self.best_effort or locked + g.gpus <= owned + _EPS:
            return ""
        return (
            f"queue {q}'s gangs hold {locked:g} GPU(s) at their jobs' minimum; with it "
            f"{locked + g.gpus:g}, beyond the {owned:g} the queue keeps whoever asks: its "
            "elastic workers are on loan from other queues' shares and are not turned "
            "into a gang's, which nothing gives back until its job ends"
        )

    def pools(self, g: PendingGroup) -> list[tuple[str, float, _VictimPool]]:
        """The other queues over their share, most over first: (queue, GPUs over, its
        jobs that may lend as victims)."""
        pools = []
        for name in sorted(self.usable - {g.queue}, key=lambda n: (-self._over(n), n)):
            over = self._over(name)
            jobs = [w for w in self.work.get(name, ()) if self._may_lend(w)]
            if over > _EPS and jobs:
                pool = _VictimPool(jobs, self.policy, lambda j: _restart_cost_of(j, self.policy))
                pools.append((name, over, pool))
        return pools

    def cover(self, g: PendingGroup, short: int, limit: float) -> list[tuple[_Job, int]] | None:
        """Victims in other queues over their share that cover `short` GPUs for g, most
        over first, each queue's by _VictimPool's order; None when they cannot."""
        pools = self.pools(g)
        if sum(min(over, pool.reclaimable(limit)) for _, over, pool in pools) < short:
            return None
        taken: list[tuple[_Job, int]] = []
        for _, over, pool in pools:
            if short <= 0:
                break
            part = pool.take(math.ceil(min(short, over)), limit)
            short -= _gpus_of(part)
            taken += part
        self.charge(g, taken)
        return taken

    def caps(self) -> dict[str, float]:
        """GPUs each queue holds beyond its share: the most it gives back."""
        return {name: max(0.0, self._over(name)) for name in self.usable}

    def charge(self, g: PendingGroup, taken: list[tuple[_Job, int]]) -> None:
        """g's queue holds g now; the lenders no longer hold what they give it."""
        for w, n in taken:
            self.held[w.job.queue] -= n * w.job.gpus_per_worker
        self.held[g.queue] = self.held.get(g.queue, 0.0) + g.gpus

    def restore(self, g: PendingGroup, taken: list[tuple[_Job, int]]) -> None:
        """Undo what `cover` counted for g: its victims' queues hold their workers again."""
        for w, n in taken:
            self.held[w.job.queue] = self.held.get(w.job.queue, 0.0) + n * w.job.gpus_per_worker
        self.held[g.queue] = self.held.get(g.queue, 0.0) - g.gpus

    def _over(self, name: str) -> float:
        return self.held.get(name, 0.0) - self.shares.get(name, 0.0)

    def _may_lend(self, w: _Job) -> bool:
        """A job whose extra workers may go, as _QueuePlanner._victims, and not one its
        own queue already decided on (grown, trimmed, held with its queue)."""
        reclaimed = w.reason in (Reason.RECLAIM_FOR_PENDING, Reason.RECLAIM_FOR_QUEUE)
        p, since = self.policy, w.since
        refusal = self.refusals.get(w.skey)
        return (
            w.target > w.job.min_replicas
            and (not w.locked or reclaimed)
            and (since is None or since >= p.reclaim_cooldown_seconds)
            and w.reason not in _NOT_VICTIMS
            and not _waits_for_own_gang(w.job.ref, self.own)
            and not (since is not None and -since > p.clock_skew_seconds)
            and not (refusal is not None and refusal.applies_to(w.job))
        )


class _QueuePlanner:
    def __init__(
        self,
        state: QueueState,
        work: list[_Job],
        listed: _Listed,
        pending: list[PendingGroup],
        snapshot: ClusterSnapshot,
        policy: PlannerPolicy,
        now: datetime,
        nodes: Placer | None = None,
        shared: _Shared | None = None,
    ) -> None:
        self.state = state
        self.policy = policy
        self.now = now
        self.snapshot = snapshot
        self.nodes = nodes  # shared by every queue of the cycle
        shared = shared or _Shared(NoPods(None, 0, now), None)
        self.no_pods, self.lenders = shared.no_pods, shared.lenders
        self.admitted = math.floor(state.admitted_gpus + _EPS)
        self.credited = 0  # gang GPUs served from `admitted`: not bound yet, need nodes
        self.placed_gang_gpus = 0  # GPUs of gangs' pods placed on nodes by their shape
        self.node_fit_limited = False
        self.work = work
        self.listed = listed  # the queue's unmanaged jobs
        self.pending = sorted(
            pending, key=lambda g: (-g.priority, g.created, g.ref.namespace, g.ref.name)
        )
        self.gangs: list[GangDecision] = []
        self.granted = self.reclaimed = self.trimmed = 0
        self._ends: list[tuple[float, int]] | None = None  # see _ending
        self._end_ids: list[int] = []  # the job (id of its _Job) of each of _ends
        self._walked: list[payoff.Gang | None] | None = None  # see _walk_gangs
        self._runs: dict[ObjectRef, float | None] = {}  # each waiting gang's job's run left
        self._next = 0  # index in `pending` of the first gang behind the one served now
        self._run_times: payoff.RunTimes | None = None  # see _queue_runs
        self._run_times_read = False
        self._cold = (0, 0)  # below the floor: (finished runs, running jobs), _queue_runs
        # rule 3b: the first gang that waits for GPUs to free because reclaiming for it
        # does not pay (its message), "" while none does
        self.waits_for = ""
        # rule 3b: gangs refused a reclaim and still waiting (gang, GPUs it needs, its
        # decision's index): a reclaim for a gang behind them frees GPUs Volcano gives
        # them first, so it is weighed for all of them (_weigh_behind)
        self._refused: list[tuple[PendingGroup, int, int]] = []
        self._members: list[tuple[PendingGroup, int]] = []  # those weighed together now
        self._locked: int | None = None  # see _locked_gpus
        # the Queue object's capability in its other dimensions, once gangs are served
        self.quota: QueueQuota | None = None
        self._no_room: dict[Hashable, Room] = {}  # see _room
        self._holders: dict[tuple[int, str], tuple[int, Holder]] = {}  # see _holder

    # ---- bookkeeping ------------------------------------------------------------------

    def pods_missing(self, j: ElasticJob) -> str:
        """HoldNoPods' message when some of j's workers have had no pod for too long."""
        n = self.no_pods.of_job(j)
        return self.no_pods.words(n, j.asked_at) if n else ""

    def _settle(self, w: _Job, target: int, reason: Reason, message: str) -> None:
        w.target, w.reason, w.message, w.locked = target, reason, message, True

    def decisions(self, memo: _Decided) -> list[Decision]:
        """Each job's decision, in the work's order; one the last plan made for the same
        job object with the same outcome is that plan's (`_Decided`)."""
        default_cost = self.policy.restart_cost_seconds
        last, made = memo
        out = []
        for w in self.work:
            j, target, reason, message = w.job, w.target, w.reason, w.message
            reason = reason or Reason.NO_IDLE_GPUS
            seen = last.get(id(j))
            if (
                seen is None
                or seen[0] is not j
                or seen[1] != target
                or seen[2] is not reason
                or seen[3] != message
                or seen[4] != default_cost
            ):
                seen = (j, target, reason, message, default_cost, _decision(j, w, default_cost))
            made[id(j)] = seen
            out.append(seen[5])
        return out

    # ---- the cycle --------------------------------------------------------------------

    def run(self) -> QueueSummary:
        p = self.policy
        hold = self._hold_reason()
        pending_gpus = sum(g.gpus for g in self.pending)
        if hold is not None:
            return self._held(*hold, pending_gpus)

        inflight, releasing = self._account()
        known = self.state.free_gpus
        assert known is not None  # else _hold_reason held the queue
        free = math.floor(known + _EPS)
        summary_inflight, summary_releasing = inflight, releasing

        inflight -= self._trim()
        idle = free - inflight  # may be negative: promised more than Prometheus shows free
        before = idle
        idle, releasing, starving = self._serve_gangs(idle, releasing)
        if self.nodes is not None:
            # gangs' pods are not on nodes yet: what they take from idle GPUs, and what
            # admitted gangs were credited, will be
            taken = max(0, before - max(idle, 0)) + self.credited - self.placed_gang_gpus
            self.nodes.take_gpus(max(0, taken))
        pool, capped = self._capped(max(0, idle - p.reserve_gpus_per_queue))
        self.quota = self._quota()
        self._grow(pool, starving, capped)

        return QueueSummary(
            self.state.name,
            self.state.free_gpus,
            inflight_gpus=summary_inflight,
            releasing_gpus=summary_releasing,
            pending_gpus=pending_gpus,
            granted_gpus=self.granted,
            reclaimed_gpus=self.reclaimed,
            trimmed_gpus=self.trimmed,
            reason=Reason.GANG_STARVING if starving else None,
            message=starving or "",
            idle_left_gpus=max(0, pool - self.granted),
        )

    def _held(self, reason: Reason, message: str, pending_gpus: int) -> QueueSummary:
        """Rule 9: the whole queue holds (missing or bad data, a closed queue)."""
        for w in self.work:
            self._settle(w, w.job.replicas, reason, message)
        self.gangs = [
            GangDecision(g.ref, g.queue, g.gpus, reason, message, (), g.owner, g.need_from)
            for g in self.pending
        ]
        return QueueSummary(
            self.state.name,
            self.state.free_gpus,
            pending_gpus=pending_gpus,
            reason=reason,
            message=message,
        )

    def _account(self) -> tuple[int, int]:
        """GPUs in flight and being released (rule 2: promised but not running is not
        free, whoever asked); locks the jobs that hold alone: their own gang waits (then
        counted once, as that gang), a clock skew, a refused resize."""
        p = self.policy
        own_waiting = self._own_waiting()
        refusals = {(r.ref.namespace, r.ref.name, r.ref.kind): r for r in self.snapshot.refusals}
        inflight = releasing = 0
        # a job's own gang has the job's name: most jobs need no lookup of theirs
        own_names = {name for _, name, _ in own_waiting}
        for w in self.work:
            j = w.job
            own = _own_gang(j.ref, own_waiting) if j.ref.name in own_names else None
            if own is not None:
                self._settle(w, j.replicas, Reason.OWN_GANG_WAITING, own_gang_words(own))
                continue  # counted once, as that gang
            if j.replicas > j.active:
                # workers with no pod long after they were asked for count no more
                counted = j.replicas - j.active - self.no_pods.of_job(j)
                inflight += counted * j.gpus_per_worker
            elif j.replicas < j.active:
                releasing += (j.active - j.replicas) * j.gpus_per_worker
            if w.since is not None and -w.since > p.clock_skew_seconds:
                self._settle(
                    w,
                    j.replicas,
                    Reason.CLOCK_SKEW,
                    f"last-scale-time {j.last_scale_time} is in the future; fix the "
                    "annotation or the clock",
                )
            elif refusals and (r := refusals.get(w.skey)) is not None and r.applies_to(j):
                # The cluster said no to this job's last resize: asking again each cycle
                # would keep its share from the rest of the queue (locked: neither grown
                # nor a victim, since a shrink would be refused alike).
                self._settle(
                    w,
                    j.replicas,
                    Reason.WRITE_REFUSED,
                    f"its resize was refused at {r.at:%Y-%m-%dT%H:%M:%SZ}: {r.message}",
                )
        inflight += sum(
            u.inflight_gpus - self.no_pods.gpus_of(u)
            for u in self.listed.inflight  # the others' GPUs in flight: none
            if not _waits_for_own_gang(u.ref, own_waiting)
        )
        return inflight, releasing

    def _capped(self, pool: int) -> tuple[int, str]:
        """The growth pool cut to what the Queue object's capability still allows, and
        why, when it cut."""
        room = self._room_by_capacity()
        cap, other = self.state.capacity_gpus, self.state.other_gpus
        if room is None or cap is None or room >= pool:
            return pool, ""
        return max(0, room), (
            f"queue {self.state.name} may hold {cap} GPU(s) by its Queue object; its "
            f"jobs and admitted gangs would hold {cap - room}"
            + (f" ({other} of them in pods other than elastic workers)" if other else "")
        )

    def _hold_reason(self) -> tuple[Reason, str] | None:
        s = self.state
        if self.snapshot.problem is not None:
            return self.snapshot.problem, self.snapshot.message or "cycle-wide data problem"
        if s.problem is not None or s.free_gpus is None:
            return (
                s.problem or Reason.METRICS_MISSING,
                s.message or f"queue {s.name}: free GPUs unknown",
            )
        if not math.isfinite(s.free_gpus) or s.free_gpus < 0:
            return Reason.METRICS_INVALID, f"queue {s.name}: free GPUs {s.free_gpus!r}"
        if s.state in CLOSED_STATES:
            return Reason.QUEUE_CLOSED, f"queue {s.name} is {s.state}"
        return None

    def _room_by_capacity(self) -> int | None:
        """GPUs the queue's jobs may still grow by before they hold more than the Queue
        object allows, None without a bound. A physical cap whatever Prometheus reads:
        jobs at their planned size (or what still runs, if more), unmanaged jobs at
        their spec, the gangs given a share this cycle that no job here owns, and the
        queue's bound pods outside those worker groups (masters, launchers, plain pods:
        Volcano counts them too).

        A job whose own PodGroup waits is counted once, as that gang (rule 2): at its
        spec if the gang was served this cycle (its pods will bind), not at all if not
        (Volcano admits none of its pods; counting it anyway blocked all growth while
        any gang could not fit, and `max_gang_wait_seconds` could never matter)."""
        cap = self.state.capacity_gpus
        if cap is None:
            return None
        served, unserved_owners = self._served()
        held = self.state.other_gpus + sum(
            max(w.target, w.job.active) * w.job.gpus_per_worker
            for w in self.work
            if not _waits_for_own_gang(w.job.ref, unserved_owners)
        )
        held += sum(
            (u.replicas or 0) * (u.gpus_per_worker or 0)
            for u in self.listed.by_spec  # the others hold none by spec
            if not _waits_for_own_gang(u.ref, unserved_owners)
        )
        known = {(w.job.ref.namespace, w.job.ref.name) for w in self.work}
        known |= self.listed.names
        for g in self.pending:
            owned = g.owner is not None and (g.owner.namespace, g.owner.name) in known
            if g.ref in served and not owned:
                held += g.gpus
        return cap - held

    def _served(self) -> tuple[set[ObjectRef], dict[tuple[str, str, str], PendingGroup]]:
        """The gangs given a share this cycle, and the jobs whose own gang waits unserved
        (Volcano binds none of their pods: not counted)."""
        served = {g.ref for g in self.gangs if g.reason in (Reason.GANG_FITS, Reason.GANG_COVERED)}
        return served, _own_waiting([g for g in self.pending if g.ref not in served])

    def _quota(self) -> QueueQuota | None:
        """What the Queue object's capability in its other dimensions (CPU, memory,
        extended resources) still admits (quota.py): less what the queue's bound pods
        request (every pod of its PodGroups, as Volcano counts allocated), each job's
        workers asked for and not bound yet (at its planned size, or what still runs if
        more), and the pods of gangs served this cycle that no job here owns. Without
        the pod watch no pod is known bound: jobs count at their planned size."""
        s = self.state
        if not s.limits:
            return None
        held = dict(s.allocated)
        served, unserved_owners = self._served()
        for w in self.work:
            j = w.job
            # workers with a node ("" where none): in `allocated` already
            unbound = max(w.target, j.active) - len(j.worker_nodes) + j.worker_nodes.count("")
            if unbound > 0 and not (
                unserved_owners and _waits_for_own_gang(j.ref, unserved_owners)
            ):
                add(held, j.worker_shape, unbound)
        known = (
            {(w.job.ref.namespace, w.job.ref.name) for w in self.work} if self.pending else set()
        )
        for g in self.pending:
            owned = g.owner is not None and (g.owner.namespace, g.owner.name) in known
            if g.ref in served and not owned:
                for shape, count in g.pods:
                    add(held, shape, count)
        return QueueQuota(s.name, s.limits, held)

    def _within_quota(self, w: _Job, extra: int) -> int:
        """`extra` more workers of w cut to what the queue's capability admits in every
        dimension it names; held (HoldQueueCapacity) or noted when it cut."""
        quota = self.quota
        if quota is None or extra <= 0:
            return extra
        shape = w.job.worker_shape
        fits = quota.fits(shape, extra)
        if fits < extra:
            names = self.snapshot.volcano.gpu_names if self.snapshot.volcano else ()
            words = quota.words(shape, fits, describe_shape(shape, names or ("nvidia.com/gpu",)))
            w.fit_note = words
            self._hold(w, Reason.QUEUE_CAPACITY, words)
        return fits

    def _own_waiting(self) -> dict[tuple[str, str, str], PendingGroup]:
        return _own_waiting(self.pending)

    # ---- rule 5: trim workers that never landed -----------------------------------------

    def _trim(self) -> int:
        p, freed = self.policy, 0
        for w in self.work:
            j, since = w.job, w.since
            if w.locked or since is None or j.inflight_workers == 0:
                continue
            if since <= p.unplaced_timeout_seconds:
                continue
            # placed: what the operator counts active, or what the pod watch sees bound
            # when the operator's status lags behind its pods (a busy or restarting
            # operator): workers that run are not unplaced, whatever the status says
            placed = max(j.active, _bound_workers(j))
            target = max(j.min_replicas, placed)
            if target >= j.replicas:
                continue
            freed += (j.replicas - target) * j.gpus_per_worker
            self.trimmed += (j.replicas - target) * j.gpus_per_worker
            self._settle(
                w,
                target,
                Reason.TRIM_UNPLACED,
                f"{j.replicas - placed} worker(s) still unplaced {since:.0f}s after "
                f"our resize (timeout {p.unplaced_timeout_seconds:.0f}s): back to "
                f"{target}",
            )
        return freed

    # ---- rule 3: waiting gangs ------------------------------------------------------------

    def _serve_gangs(self, idle: int, releasing: int) -> tuple[int, int, str]:
        p, starving, from_idle = self.policy, "", 0
        pool = _VictimPool(self._victims(), p, self._restart_cost)
        for at, g in enumerate(self.pending):
            self._next = at + 1
            if starving and p.starving_gang_blocks_later_gangs:
                self._gang(
                    g, Reason.GANG_BLOCKED, f"{g.ref} waits behind a starving gang: {starving}"
                )
                continue
            if self._never_admitted(g):
                continue
            need = self._uncredited(g)
            node_short, placed = self._node_short(g)
            if need <= idle + releasing and placed:
                idle, releasing, from_idle = self._consume(need, idle, releasing, from_idle)
                self._place_gang(g)
                self._gang(
                    g,
                    Reason.GANG_FITS,
                    f"{g.ref} needs {g.gpus} GPU(s): fits in what is free or being released",
                )
                continue
            if self._refused:
                served, idle, releasing, starving = self._weigh_behind(
                    g, need, pool, idle, releasing, starving
                )
                if served:
                    idle, releasing, from_idle = self._consume(served, idle, releasing, from_idle)
                continue
            shortfall = max(need - (idle + releasing), node_short)
            covered = self._cover(g, shortfall, pool, need - (idle + releasing))
            if isinstance(covered, str):  # nobody can cover it
                starving = self._uncoverable(g, shortfall, starving, covered)
                continue
            if isinstance(covered, payoff.Trade):  # a reclaim that does not pay
                starving = self._reclaim_unpaid(g, need, covered, starving)
                continue
            victims, lent = covered
            idle, releasing = self._reclaim(g, victims, pool, idle, releasing, lent)
            idle, releasing, from_idle = self._consume(need, idle, releasing, from_idle)
            self._place_gang(g)
        # A gang served from idle GPUs before a later reclaim released more than that gang
        # needed (whole workers) could as well have taken released ones: trade them, so
        # the plan is what replanning on its result gives (idempotence).
        swap = min(releasing, from_idle)
        return idle + swap, releasing - swap, starving

    def _never_admitted(self, g: PendingGroup) -> bool:
        """A gang whose pods together ask more of a dimension than the Queue's capability
        allows is never admitted by Volcano, whatever is reclaimed: it gets nothing (no
        GPUs kept for it, no worker taken back) and does not starve its queue's growth,
        which it could never end."""
        name, need = beyond(self.state.limits, g.pods)
        if not name:
            return False
        cap = dict(self.state.limits)[name]
        self._gang(
            g,
            Reason.GANG_UNCOVERABLE,
            f"{g.ref} asks {amount_words(name, need)} in all, more than queue "
            f"{self.state.name} may ever hold by its Queue object (spec.capability[{name}] "
            f"= {amount_words(name, cap)}): Volcano will not admit it; nothing is reclaimed "
            "for it",
        )
        return True

    def _cover(
        self, g: PendingGroup, shortfall: int, pool: _VictimPool, gpus_short: int
    ) -> _Covered:
        """Who covers the gang's shortfall: (victims in its queue, jobs of other queues
        giving back its share); why nobody can; or the trade of a reclaim that does not
        pay. Its own queue's elastic workers first, then what
        other queues hold of its share (lent). Rule 3b weighs the reclaim inside the
        queue (its gain: the wait for the GPUs those victims cover); what other queues
        give back is owed, not traded: where the reclaim inside does not pay, the gang
        still gets its share back if that alone covers it. Where the gang's pods and the
        nodes are known, by nodes (_cover_by_nodes); else by GPUs alone."""
        # Elastic workers are created last and destroyed first: by default any job's
        # extra workers may go (lowest priority first), whatever the gang's priority.
        limit = math.inf if self.policy.reclaim_from_higher_priority else g.priority
        if self.nodes is not None and g.pods:
            return self._cover_by_nodes(g, shortfall, pool, limit, max(0, gpus_short))
        lent: list[tuple[_Job, int]] = []
        loan = self._on_loan(g)
        local = 0 if loan else pool.reclaimable(limit)
        if local < shortfall:
            # then from other queues holding more than their share (lent shares)
            found, why = self._lent(g, shortfall - local, limit)
            if found is None:
                return "; ".join(w for w in (loan, why) if w)
            lent = found
        left = shortfall - _gpus_of(lent)
        skip = self._resized_now(g, left) if left > 0 else frozenset()
        victims = pool.take(left, limit, skip) if left > 0 else []
        if skip and _gpus_of(victims) < left:
            pool.put_back(victims)
            if self.lenders is not None and lent:
                self.lenders.restore(g, lent)
            why = (
                "the rest of what could give way was resized by this plan already "
                f"(reclaim_cooldown_seconds={self.policy.reclaim_cooldown_seconds:g})"
            )
            return why  # uncoverable this cycle, as the next plan sees it
        if not victims:
            return victims, lent
        trade = self._swap_check(g, victims, self._reclaim_trade(g, left, victims))
        if trade.pays(self.policy.reclaim_payoff_factor):
            return victims, lent
        pool.put_back(victims)
        if self.lenders is not None and lent:
            self.lenders.restore(g, lent)
        owed, _ = self._lent(g, shortfall, limit)
        if owed is not None:  # its share alone covers it: owed, not weighed
            return [], owed
        return trade

    def _cover_by_nodes(
        self, g: PendingGroup, shortfall: int, pool: _VictimPool, limit: float, gpus_short: int
    ) -> _Covered:
        """_cover where the gang's pods and the nodes are known: the victims are chosen
        by fit.make_room, so that once their workers are gone every pod of the gang
        fits on a node (every resource it asks, not only GPUs), all in this one
        reclaim, with the fewest jobs restarted; workers whose going helps no pod of
        it stay. Counting GPUs alone took one worker a cycle from a node a CPU-heavy
        pod could not use yet (each cycle a restart), or workers on nodes that never
        fit it. The queue's own jobs first, then lent shares; the payoff rule weighs
        the victims of its queue, as by GPUs."""
        loan = self._on_loan(g)
        skip = self._resized_now(g, shortfall)
        local = [] if loan else [w for w in pool.ordered(limit) if id(w) not in skip]
        room, why = self._room(g, local, [], gpus_short), ""
        lenders: list[tuple[_Job, str]] = []
        if room.cuts is None:
            lenders, why = self._lending(g, limit)
            if lenders:
                room = self._room(g, local, lenders, gpus_short)
        if room.cuts is None:
            return "; ".join(w for w in (room.why, loan, why) if w)
        victims, lent = _cut(local, room.cuts), _cut(lenders, room.cuts[len(local) :])
        if victims:
            trade = self._reclaim_trade(g, shortfall - _gpus_of(lent), victims)
            trade = self._swap_check(g, victims, trade)
            if not trade.pays(self.policy.reclaim_payoff_factor):
                lenders = lenders or self._lending(g, limit)[0]
                owed = self._room(g, [], lenders, gpus_short) if lenders else None
                if owed is None or owed.cuts is None:
                    return trade
                victims, lent = [], _cut(lenders, owed.cuts)  # owed, not weighed
        if lent and self.lenders is not None:
            self.lenders.charge(g, lent)
        pool.claim(victims)
        return victims, lent

    def _room(
        self, g: PendingGroup, local: list[_Job], lenders: list[tuple[_Job, str]], gpus: int
    ) -> Room:
        """fit.make_room for g's pods from these victims (lenders: with their queue,
        each queue giving no more than it holds beyond its share)."""
        assert self.nodes is not None
        holders = [self._holder(w) for w in local] + [self._holder(w, q) for w, q in lenders]
        caps = self.lenders.caps() if self.lenders is not None and lenders else {}
        # a full queue's waiting gangs are often alike and none fits: asked once each
        # until a gang is placed or a reclaim changes the nodes (cleared there)
        key = (g.pods, gpus, tuple(holders), tuple(sorted(caps.items())))
        found = self._no_room.get(key)
        if found is None:
            found = make_room(self.nodes, g.pods, holders, gpus, caps)
            if found.cuts is None:
                self._no_room[key] = found
        return found

    def _holder(self, w: _Job, group: str = "") -> Holder:
        """_holder, remembered while the job's target stays (asked again per gang)."""
        key = (id(w), group)
        found = self._holders.get(key)
        if found is None or found[0] != w.target:
            found = self._holders[key] = (w.target, _holder(w, group))
        return found[1]

    def _lending(self, g: PendingGroup, limit: float) -> tuple[list[tuple[_Job, str]], str]:
        """Jobs of other queues holding more than their share that may give g's queue
        its share back (with their queue), most over first; or why none may."""
        if self.lenders is None:
            return [], ""
        why = self.lenders.within(g)
        if why:
            return [], why
        found = [(w, name) for name, _, pool in self.lenders.pools(g) for w in pool.ordered(limit)]
        return found, "" if found else "no other queue holds more than its share"

    def _on_loan(self, g: PendingGroup) -> str:
        """Rule 3c (_Lenders.on_loan): why g may not take its own queue's elastic
        workers, "" when it may (or where shares are unknown)."""
        if self.lenders is None:
            return ""
        return self.lenders.on_loan(g, self._locked_gpus())

    def _locked_gpus(self) -> int:
        """GPUs the queue's gangs hold: its running jobs' minimum workers (once per
        plan) and the gangs served so far in this plan (counted in _gang)."""
        if self._locked is None:
            self._locked = sum(
                min(w.job.active, w.job.min_replicas) * w.job.gpus_per_worker for w in self.work
            ) + sum(d.gpus for d in self.gangs if d.reason in _SERVED)
        return self._locked

    def _uncredited(self, g: PendingGroup) -> int:
        """GPUs the gang still needs: an admitted (Inqueue) gang's are already out of
        `free` (the capacity plugin's inqueue), as far as they go."""
        need = g.gpus
        if g.phase == "Inqueue" and self.admitted > 0:
            credit = min(self.admitted, need)
            self.admitted -= credit
            self.credited += credit
            need -= credit
        return need

    def _lent(
        self, g: PendingGroup, short: int, limit: float
    ) -> tuple[list[tuple[_Job, int]] | None, str]:
        """Victims in other queues that give back what they hold of g's queue's share,
        or None and why not ("" when there are no shares to speak of)."""
        if self.lenders is None:
            return None, ""
        why = self.lenders.within(g)
        if why:
            return None, why
        found = self.lenders.cover(g, short, limit)
        if found is None:
            why = "other queues hold too little beyond their own share to give back"
        return found, why

    def _uncoverable(self, g: PendingGroup, shortfall: int, starving: str, why: str = "") -> str:
        """The gang cannot be covered: skipped, so the small ones behind it may fit; one
        that has waited too long starves its queue's growth. Returns the starving gang.
        `why`: by nodes, what no reclaim frees (node fit's words); by GPUs, why other
        queues give nothing back."""
        message = (
            f"{g.ref} needs {g.gpus} GPU(s); free, releasing and reclaimable "
            f"capacity fall {shortfall} short: skipped" + (f" ({why})" if why else "")
        )
        return self._skip_gang(g, Reason.GANG_UNCOVERABLE, message, starving)

    def _skip_gang(
        self, g: PendingGroup, reason: Reason, message: str, starving: str, say_why: bool = False
    ) -> str:
        """A gang not served this cycle, with why; one that has waited too long starves
        its queue's growth (the first such), and then says so (after why, with
        `say_why`). Returns the starving gang."""
        p = self.policy
        waited = (self.now - g.created).total_seconds()
        if waited > p.max_gang_wait_seconds and not starving:
            starving = (
                f"{g.ref} has waited {waited:.0f}s (> max_gang_wait_seconds="
                f"{p.max_gang_wait_seconds:.0f}): nothing in queue {g.queue} "
                "grows until it fits"
            )
            message = f"{message}; {starving}" if say_why else starving
        self._gang(g, reason, message, blockers=self._blockers(g))
        return starving

    # ---- rule 3b: reclaim only where it pays (autoscaler/plan/payoff.py) ---------------------

    def _reclaim_trade(
        self, g: PendingGroup, shortfall: int, victims: list[tuple[_Job, int]]
    ) -> payoff.Trade:
        """What the gang would gain from these victims' workers and what they would
        lose, from what the jobs declare of their run (unknowns left out)."""
        now = self.now
        gang_runtime = self._gang_runtime(g)
        taken = sum(n * w.job.gpus_per_worker for w, n in victims)
        # the victims are grown back once, in the walk with the reclaim, every waiting
        # gang has started and what they gave up is free again; where the walk does not
        # know, once the running jobs' ends cover every other waiting gang and what the
        # victims gave up
        running_taken = sum(_running_taken(w, n) * w.job.gpus_per_worker for w, n in victims)
        walked = payoff.reclaim_gain(
            self._backlog(g, shortfall),
            self._ending(),
            self._ending_after(victims),
            taken,
            running_taken,
        )
        back_in = None if walked is None else walked[2]
        if back_in is None:
            weighed = {x.ref for x, _ in self._members} or {g.ref}
            others = sum(x.gpus for x in self.pending if x.ref not in weighed)
            back_in = payoff.gang_wait(others + taken, self._ending())
        loss = 0.0
        for w, workers in victims:
            j = w.job
            running = _running_taken(w, workers)  # unplaced: free
            lost = payoff.victim_loss(
                j.active,
                running,
                payoff.remaining_seconds(j, now),
                gang_runtime,
                self._restart_cost(j),
                back_in,
            )
            loss += 0.0 if lost is None else lost
        if walked is None:
            return payoff.Trade(None, loss)
        wait, gain, _ = walked
        return payoff.Trade(gain, loss, wait)

    def _swap_check(
        self, g: PendingGroup, victims: list[tuple[_Job, int]], trade: payoff.Trade
    ) -> payoff.Trade:
        """Rule 3b where the gang declares nothing: a reclaim whose every victim gives up
        as many running workers as it keeps (a swap) and is known, by its queue's run
        times, to have less run left than the newcomer's run and the swap's two restarts
        (payoff.swap_short) does not pay; nor, before the queue has those run times, a
        swap in a busy queue (_cold_swap). Else the trade as weighed."""
        factor = self.policy.reclaim_payoff_factor
        if factor <= 0 or not trade.pays(factor) or not victims:
            return trade  # rule 3b off, refused already, or nothing to weigh
        if self._gang_runtime(g) is not None:
            return trade
        runs = self._queue_runs()
        if runs is None:
            return self._cold_swap(g, victims, trade)
        newcomer, lefts = runs.mean(), []
        for w, workers in victims:
            j = w.job
            left = self._left_of(j, runs)
            restarts = 2 * self._restart_cost(j)
            if not _is_swap(w, workers) or left is None:
                return trade  # not a swap, or its run left is not known
            if not payoff.swap_short(left, newcomer, restarts, factor):
                return trade
            lefts.append((left, j.ref.name))
        longest, name = max(lefts)
        estimate = (
            f"nothing declared; by queue {g.queue}'s run times ({len(runs.finished)} "
            f"finished, {runs.running} running, Kaplan-Meier) a "
            f"newcomer runs ~{newcomer:.0f}s and its victims have at most ~{longest:.0f}s "
            f"left ({name}): no more than that and the swap's two restarts"
        )
        return payoff.Trade(trade.gain, trade.loss, trade.wait, estimate)

    def _cold_swap(
        self, g: PendingGroup, victims: list[tuple[_Job, int]], trade: payoff.Trade
    ) -> payoff.Trade:
        """A swap before the queue has payoff.EVIDENCE_RUNS finished runs, where nothing
        of the victims' runs is declared either: nothing says whether the newcomer or
        the victims have the shorter run, and a swap is then about even for the queue
        (the gangs behind move up by what the victims lose) but for the victims' two
        restarts each, which are certain. It is refused in a queue of at least
        payoff.EVIDENCE_RUNS running jobs: their ends free GPUs by themselves, and the
        same ends soon give the run times a swap is weighed by. In a smaller queue a
        gang may wait a whole run for one job: today's rule, elastic workers go first."""
        finished, running = self._cold
        if running < payoff.EVIDENCE_RUNS:
            return trade
        for w, workers in victims:
            if not _is_swap(w, workers):
                return trade
            if payoff.remaining_seconds(w.job, self.now) is not None:
                return trade  # a victim's run is declared: weighed as it declares
        estimate = (
            f"nothing declared; queue {g.queue} has {finished} finished run(s), fewer than "
            f"the {payoff.EVIDENCE_RUNS} a swap is weighed by, and {running} jobs running "
            "that free GPUs as they end: no swap (two restarts for each victim) on a gain "
            "nothing measures yet"
        )
        return payoff.Trade(trade.gain, trade.loss, trade.wait, estimate)

    def _left_of(self, j: ElasticJob, runs: payoff.RunTimes) -> float | None:
        """A victim's run left: declared, else by the queue's run times where at least
        payoff.EVIDENCE_RUNS finished runs were longer than its age; None: not known."""
        declared = payoff.remaining_seconds(j, self.now)
        if declared is not None or j.started is None:
            return declared
        age = max(0.0, (self.now - j.started).total_seconds())
        if runs.known_beyond(age) < payoff.EVIDENCE_RUNS:
            return None
        return runs.remaining(age)

    def _queue_runs(self) -> payoff.RunTimes | None:
        """The queue's run times: its finished jobs' runs (status.startTime to
        completionTime: the latest payoff.RECENT_RUNS the API lists, by completion, and
        those it no longer lists as the daemon remembers them) and its running jobs'
        ages; None below payoff.EVIDENCE_RUNS finished runs (then `_cold` counts the
        finished runs and the running jobs). Once per plan."""
        if not self._run_times_read:
            self._run_times_read = True
            finished = list(self.listed.runs)
            finished += [
                r.seconds for r in self.snapshot.finished_runs if r.queue == self.state.name
            ]
            running = [w.job for w in self.work if w.job.active > 0]
            ages = [
                (self.now - j.started).total_seconds() for j in running if j.started is not None
            ]
            if len(finished) >= payoff.EVIDENCE_RUNS:
                self._run_times = payoff.RunTimes.of(finished, ages)
            else:
                self._cold = len(finished), len(running)
        return self._run_times

    def _gang_runtime(self, g: PendingGroup) -> float | None:
        """How long the gang's job runs (its GPUs then come back); for gangs weighed
        together, the longest that is known."""
        self._walk_gangs()
        runs = [self._runs.get(x.ref) for x in ([x for x, _ in self._members] or [g])]
        known = [r for r in runs if r is not None]
        return max(known) if known else None

    def _ending(self) -> list[tuple[float, int]]:
        """(seconds left, GPUs held) of the queue's running jobs that declared their run,
        soonest first; found at the first reclaim weighed, once per plan."""
        if self._ends is None:
            ends = sorted(
                (left, w.job.active * w.job.gpus_per_worker, id(w))
                for w in self.work
                if w.job.active > 0
                and (left := payoff.remaining_seconds(w.job, self.now)) is not None
            )
            self._ends = [(left, gpus) for left, gpus, _ in ends]
            self._end_ids = [i for _, _, i in ends]
        return self._ends

    def _ending_after(self, victims: list[tuple[_Job, int]]) -> Iterable[tuple[float, int]]:
        """_ending once the victims gave up their workers: each declared victim that loses
        running workers ends later (payoff.delayed_end) holding fewer GPUs."""
        moved: dict[int, tuple[float, int] | None] = {}
        for w, workers in victims:
            j = w.job
            running = _running_taken(w, workers)
            left = payoff.remaining_seconds(j, self.now) if j.active > 0 else None
            if running <= 0 or left is None:
                continue  # it frees what it held when it did (or never, as before)
            end = payoff.delayed_end(left, j.active, running, self._restart_cost(j))
            kept = (j.active - running) * j.gpus_per_worker
            moved[id(w)] = None if end is None else (end, kept)
        ends = self._ending()
        if not moved:
            return ends
        kept_ends = (e for e, i in zip(ends, self._end_ids, strict=True) if i not in moved)
        return heapq.merge(kept_ends, sorted(m for m in moved.values() if m is not None))

    def _walk_gangs(self) -> list[payoff.Gang | None]:
        """Each waiting gang of `pending` as the walk sees it, (GPUs, its job's declared
        run left), None for one Volcano never admits (it waits outside the line); once
        per plan."""
        if self._walked is None:
            jobs = {(w.job.ref.namespace, w.job.ref.name): w.job for w in self.work}
            self._walked = []
            for x in self.pending:
                ref = x.owner or x.ref
                owner = jobs.get((ref.namespace, ref.name))
                run = None if owner is None else payoff.remaining_seconds(owner, self.now)
                admissible = not beyond(self.state.limits, x.pods)[0]
                self._walked.append((x.gpus, run) if admissible else None)
                self._runs[x.ref] = run
        return self._walked

    def _backlog(self, g: PendingGroup, shortfall: int) -> payoff.Backlog:
        """The queue's waiting gangs around a reclaim of `shortfall` GPUs for g (or for the
        gangs weighed with it, _weigh_behind), in admission order: those ahead that still
        wait (by what their decisions say they need), those it serves (each its need, the
        last short of the rest; `free` the GPUs they have now), those behind."""
        walked, runs = self._walk_gangs(), self._runs
        members = self._members or [(g, shortfall)]
        needs = [n for _, n in members]
        total = sum(needs)
        needs[-1] += max(0, shortfall - total)
        weighed = {x.ref for x, _ in members}
        ahead = [
            (d.gpus, runs.get(d.ref))
            for d in self.gangs
            if d.reason in _STILL_WAITING and d.ref not in weighed
        ]
        served = [(n, runs.get(x.ref)) for (x, _), n in zip(members, needs, strict=True)]
        behind = [gang for gang in walked[self._next :] if gang is not None]
        return payoff.Backlog(ahead, served, behind, max(0, total - shortfall))

    def _reclaim_unpaid(
        self, g: PendingGroup, need: int, trade: payoff.Trade, starving: str, ahead: str = ""
    ) -> str:
        """The reclaim would cost its victims more than the gang gains: it waits, and
        holds its queue's growth (the GPUs that free are its). `ahead`: the gangs
        weighed with it (_weigh_behind)."""
        with_ahead = f" with {ahead} ahead of it" if ahead else ""
        message = (
            f"{g.ref} needs {g.gpus} GPU(s): reclaiming for it{with_ahead} does not pay "
            f"({trade.describe()}, reclaim_payoff_factor="
            f"{self.policy.reclaim_payoff_factor:g}): it waits for GPUs to free"
        )
        if not self.waits_for:
            self.waits_for = (
                f"{g.ref} waits for GPUs to free (reclaiming for it does not pay): "
                f"nothing in queue {g.queue} grows into them"
            )
        self._refused.append((g, need, len(self.gangs)))
        return self._skip_gang(g, Reason.GANG_RECLAIM_UNPAID, message, starving, say_why=True)

    def _weigh_behind(
        self,
        g: PendingGroup,
        need: int,
        pool: _VictimPool,
        idle: int,
        releasing: int,
        starving: str,
    ) -> tuple[int, int, int, str]:
        """A gang behind gangs refused a reclaim, that does not fit in what is free. Volcano
        admits in order: what a reclaim frees goes to the gangs ahead first (the next plan
        would serve them from it). So the reclaim covers all of them and g, and weighs
        their summed gain; if it pays all are served by it, else g waits with them.
        Returns the GPUs served (to consume), idle, releasing and the starving gang."""
        members = [*((x, n) for x, n, _ in self._refused), (g, need)]
        pods = tuple(p for x, _ in members for p in x.pods)
        known = all(x.pods for x, _ in members)
        group = replace(g, gpus=sum(x.gpus for x, _ in members), pods=pods if known else ())
        total = sum(n for _, n in members)
        node_short, _ = self._node_short(group)
        shortfall = max(total - (idle + releasing), node_short)
        names = ", ".join(str(x.ref) for x, _, _ in self._refused)
        self._members = members
        covered = self._cover(group, shortfall, pool, total - (idle + releasing))
        self._members = []
        if isinstance(covered, str):
            why = f"counted with {names} ahead of it, which what is freed goes to first"
            why += f"; {covered}" if covered else ""
            return 0, idle, releasing, self._uncoverable(g, shortfall, starving, why)
        if isinstance(covered, payoff.Trade):
            return 0, idle, releasing, self._reclaim_unpaid(g, need, covered, starving, names)
        victims, lent = covered
        refused = tuple(x for x, _, _ in self._refused)
        idle, releasing = self._reclaim(group, victims, pool, idle, releasing, lent, refused)
        self._place_gang(group)
        done, ahead = self.gangs[-1], group.gpus - g.gpus
        words = (
            f"needs {g.gpus} GPU(s) and waits behind {names} ({ahead} GPU(s), refused a "
            "reclaim alone; Volcano gives them what is freed first): reclaimed for all,"
        )
        self.gangs[-1] = replace(
            done, gpus=g.gpus, message=done.message.replace(f"needs {group.gpus} GPU(s):", words, 1)
        )
        for x, _, at in self._refused:
            self.gangs[at] = replace(
                self.gangs[at],
                reason=Reason.GANG_COVERED,
                message=f"{x.ref} needs {x.gpus} GPU(s): covered by the reclaim made for "
                f"{g.ref} behind it (Volcano gives what is freed to it first)",
                victims=done.victims,
                blockers=(),
            )
        self._refused, self.waits_for = [], ""
        return total, idle, releasing, self._starving_again(starving)

    def _starving_again(self, starving: str) -> str:
        """The starving gang once gangs refused a reclaim were served after all: the first
        gang still waiting that has waited too long, "" if none."""
        if not starving:
            return starving
        waiting = {d.ref for d in self.gangs if d.reason in _STILL_WAITING}
        limit = self.policy.max_gang_wait_seconds
        for x in self.pending:
            waited = (self.now - x.created).total_seconds()
            if x.ref in waiting and waited > limit:
                return (
                    f"{x.ref} has waited {waited:.0f}s (> max_gang_wait_seconds="
                    f"{limit:.0f}): nothing in queue {x.queue} grows until it fits"
                )
        return ""

    def _resized_now(self, g: PendingGroup, shortfall: int) -> frozenset[int]:
        """Jobs this plan already trimmed or reclaimed from, where a reclaim for a gang
        short of `shortfall` GPUs is weighed (rule 3b) and a resize starts the reclaim
        cooldown: the next plan would not take from them, so neither does this one
        (replanning its result then weighs the same victims: idempotence). Elsewhere a
        job may give workers to several gangs of one plan."""
        if self.policy.reclaim_cooldown_seconds <= 0 or self.policy.reclaim_payoff_factor <= 0:
            return frozenset()
        if shortfall <= 0:
            return frozenset()
        if self._queue_runs() is None:  # else swaps are weighed by the queue's run times
            backlog = self._backlog(g, shortfall)
            line = [*backlog.ahead, *backlog.served]
            if len(payoff.starts(backlog.free, self._ending(), line)) < len(line):
                return frozenset()  # the gang's wait is unknown: not weighed
        return frozenset(id(w) for w in self.work if w.target != w.job.replicas)

    def _reclaim(
        self,
        g: PendingGroup,
        victims: list[tuple[_Job, int]],
        pool: _VictimPool,
        idle: int,
        releasing: int,
        lent: Iterable[tuple[_Job, int]] = (),
        ahead: Sequence[PendingGroup] = (),
    ) -> tuple[int, int]:
        """Take the victims' workers for gang `g`: those never placed come back as idle,
        running ones are released; `lent`'s, other queues', are all the gang's (what
        they free is not this queue's idle). `ahead`: gangs refused a reclaim alone that
        this one serves too (a victim names them all). Returns the new idle and releasing
        GPUs."""
        left: list[str] = []
        self._no_room.clear()  # the nodes and the victims change
        for w, workers in (*victims, *lent):  # in make_room's order: the room it planned
            left += self._release_workers(w, workers, g)
        served = [f"{x.ref.namespace}/{x.ref.name}" for x in (*ahead, g)]
        given = self._give_back(g, lent, served)
        releasing += given
        gained = 0
        for w, workers in victims:
            j = w.job
            unplaced = workers - _running_taken(w, workers)
            idle += unplaced * j.gpus_per_worker
            releasing += (workers - unplaced) * j.gpus_per_worker
            gained += workers * j.gpus_per_worker
            w.target -= workers
            w.victim_of = [*(w.victim_of or ()), *served]
            self._settle(
                w,
                w.target,
                Reason.RECLAIM_FOR_PENDING,
                f"{j.replicas} -> {w.target} worker(s) to make room for PodGroup "
                f"{', '.join(w.victim_of)}",
            )
            pool.taken(w, workers)
        self.reclaimed += gained + given
        message = (
            f"{g.ref} needs {g.gpus} GPU(s): {gained} reclaimed from {len(victims)} elastic job(s)"
        )
        lent = list(lent)
        if lent:
            queues = sorted({w.job.queue for w, _ in lent})
            message += (
                f", {given} given back from {len(lent)} job(s) of queue(s) "
                f"{', '.join(queues)} holding more than their share"
            )
        message += self._room_words(g, left)
        self._gang(g, Reason.GANG_COVERED, message, tuple(w.key for w, _ in (*victims, *lent)))
        return idle, releasing

    def _give_back(
        self, g: PendingGroup, lent: Iterable[tuple[_Job, int]], served: list[str]
    ) -> int:
        """Lent shares come back: each job of another queue gives its workers to g (and
        to `served`, the gangs this reclaim serves)."""
        given = 0
        for w, workers in lent:
            j = w.job
            gpus = workers * j.gpus_per_worker
            given += gpus
            w.target -= workers
            w.victim_of = [*(w.victim_of or ()), *served]
            w.target, w.reason, w.locked = w.target, Reason.RECLAIM_FOR_QUEUE, True
            w.message = (
                f"{j.replicas} -> {w.target} worker(s): gives back {gpus} GPU(s) of queue "
                f"{g.queue}'s share to its gang {g.ref.namespace}/{g.ref.name} (queue "
                f"{j.queue} holds more than its own share)"
            )
        return given

    # ---- node fit of gangs: their pods by shape, known when the gang says them ------------

    def _node_short(self, g: PendingGroup) -> tuple[int, bool]:
        """GPUs of the gang's pods that no node takes now, and whether every pod finds a
        node (a pod without GPUs, a launcher asking most of a node's CPUs, may not:
        the gang does not start then either). (0, True) where its pods' shapes or the
        nodes are unknown, when GPUs alone decide."""
        if self.nodes is None or not g.pods:
            return 0, True
        left = self.nodes.unplaced(g.pods)
        names = self.nodes.gpu_names
        gpus = sum(
            n * sum(shape.amount(r) for r in names) // MILLI
            for (shape, _), n in zip(g.pods, left, strict=True)
        )
        return gpus, not any(left)

    def _place_gang(self, g: PendingGroup) -> None:
        """The gang's pods take their nodes' room now, so later gangs and growth see it
        taken (pods whose shapes are unknown take GPUs from the emptiest nodes later)."""
        if self.nodes is None or not g.pods:
            return
        self._no_room.clear()  # the nodes changed
        names = self.nodes.gpu_names
        for shape, count in g.pods:
            placed = self.nodes.place(shape, count)
            self.placed_gang_gpus += placed * sum(shape.amount(r) for r in names) // MILLI

    def _release_workers(self, w: _Job, workers: int, g: PendingGroup) -> list[str]:
        """The victim's `workers` highest-index workers go: their nodes' room comes back
        for the gang (only a gang whose pods' shapes are known is placed by them).
        Returns the nodes they leave."""
        if self.nodes is None or not g.pods:
            return []
        where, left = w.job.worker_nodes, []
        for i in range(w.target - 1, w.target - 1 - workers, -1):
            if 0 <= i < len(where) and where[i]:
                self.nodes.release(where[i], w.job.worker_shape)
                left.append(where[i])
        return left

    def _room_words(self, g: PendingGroup, left: Iterable[str]) -> str:
        """Where the reclaim made room for the gang's pods, in words: the nodes its
        victims' workers leave that its pods may use ("" by GPUs alone)."""
        nodes = self.nodes
        if nodes is None or not g.pods:
            return ""
        shapes = tuple(dict.fromkeys(shape for shape, _ in g.pods))  # in the gang's order
        names = sorted({n for n in left if any(nodes.admits_node(s, n) for s in shapes)})
        what = "; ".join(describe_shape(s, nodes.gpu_names) for s in shapes)
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return f"; node fit: room for its pods ({what}) on node(s) {shown or 'none'}"

    def _gang(
        self,
        g: PendingGroup,
        reason: Reason,
        message: str,
        victims: tuple[ObjectRef, ...] = (),
        blockers: tuple[str, ...] = (),
    ) -> None:
        self.gangs.append(
            GangDecision(
                g.ref, g.queue, g.gpus, reason, message, victims, g.owner, g.need_from, blockers
            )
        )
        if self._locked is not None and reason in _SERVED:
            self._locked += g.gpus

    def _victims(self) -> list[_Job]:
        """Jobs whose extra workers a waiting gang may take: above min, out of reclaim
        cooldown, with a trustworthy annotation and not waiting for their own gang."""
        if not self.pending:
            return []
        cool = self.policy.reclaim_cooldown_seconds
        return [
            w
            for w in self.work
            if w.target > w.job.min_replicas
            and (w.since is None or w.since >= cool)
            and w.reason is not Reason.CLOCK_SKEW
            and w.reason is not Reason.WRITE_REFUSED
            and w.reason is not Reason.OWN_GANG_WAITING
        ]

    def _blockers(self, g: PendingGroup, most: int = 10) -> tuple[str, ...]:
        """For a gang not covered: each elastic job of its queue above its min, and why
        its extra workers did not give way (the first `most`)."""
        p, out = self.policy, []
        cool = p.reclaim_cooldown_seconds
        loan = self._on_loan(g)
        for w in self.work:
            j, extra = w.job, w.target - w.job.min_replicas
            if extra <= 0:
                continue
            what = f"{j.ref.namespace}/{j.ref.name}: {extra} worker(s) above its min"
            if loan:
                why = "on loan from other queues' shares (see the gang's message)"
            elif w.reason in (Reason.CLOCK_SKEW, Reason.WRITE_REFUSED, Reason.OWN_GANG_WAITING):
                why = f"held ({w.reason})"
            elif w.since is not None and w.since < cool:
                why = f"resized {w.since:.0f}s ago (reclaim_cooldown_seconds={cool:.0f})"
            elif j.priority > g.priority and not p.reclaim_from_higher_priority:
                why = f"priority {j.priority} above the gang's {g.priority}"
            else:
                why = "could give way, but all such workers together do not cover the gang"
            out.append(f"{what}: {why}")
            if len(out) >= most:
                break
        return tuple(out) or (f"no elastic job of queue {g.queue} is above its minimum",)

    def _restart_cost(self, j: ElasticJob) -> float:
        """The job's own estimate (its annotation, else our measurement), else the policy's."""
        cost = j.restart_cost_seconds
        return self.policy.restart_cost_seconds if cost is None else cost

    @staticmethod
    def _consume(need: int, idle: int, releasing: int, from_idle: int) -> tuple[int, int, int]:
        # Released GPUs can serve only gangs, so gangs use them before idle ones.
        from_release = min(max(releasing, 0), need)
        used_idle = need - from_release
        return idle - used_idle, releasing - from_release, from_idle + max(0, used_idle)

    # ---- rules 4, 6, 7: growth ------------------------------------------------------------

    def _grow(self, pool: int, starving: str, capped: str = "") -> None:
        growable = [w for w in self.work if not w.locked and self._may_grow(w, starving)]
        if self.policy.growth_policy is GrowthPolicy.FAIR:
            grants = self._place_fair(self._fair(growable, pool))
        else:
            grants = self._fill(growable, pool)
        for w in growable:
            j = w.job
            extra = grants.get(w, 0)
            if extra:
                self.granted += extra * j.gpus_per_worker
                why = (
                    f"{j.replicas} -> {j.replicas + extra} worker(s) into idle GPUs "
                    f"of queue {j.queue}"
                )
                self._settle(
                    w,
                    j.replicas + extra,
                    Reason.SCALE_UP_IDLE_GPUS,
                    f"{why}; {w.fit_note}" if w.fit_note else why,
                )
            elif w.reason is None and capped:
                self._hold(w, Reason.QUEUE_CAPACITY, capped)
            elif w.reason is None:
                self._hold(
                    w,
                    Reason.NO_IDLE_GPUS,
                    _words(_NO_IDLE, j.gpus_per_worker),
                )

    def _may_grow(self, w: _Job, starving: str) -> bool:
        """Whether the job may be grown this cycle; if not, it holds with the reason."""
        j = w.job
        # whether its workers have pods matters only to workers asked for and not running
        missing = self.pods_missing(j) if j.replicas > j.active else ""
        block = _growth_block(j, w.since, self.policy, missing)
        if block is None and starving:
            block = Reason.GANG_STARVING, starving
        if block is None and self.waits_for:
            block = Reason.GANG_WAITING, self.waits_for
        if block is None:
            return True
        self._hold(w, *block)
        return False

    @staticmethod
    def _hold(w: _Job, reason: Reason, message: str) -> None:
        # an unlocked job's target is still its replicas: a hold only says why
        w.reason, w.message = reason, message

    def _step_ok(self, w: _Job, extra: int) -> bool:
        j = w.job
        if extra < self.policy.min_step_workers and j.replicas + extra != j.max_replicas:
            self._hold(
                w,
                Reason.MIN_STEP,
                f"{extra} more worker(s) is below min_step_workers={self.policy.min_step_workers}",
            )
            return False
        return self._worth_it(w, extra)

    def _worth_it(self, w: _Job, extra: int) -> bool:
        """Grow only when the time the extra workers save beats the restart they cost.
        What is left of a job is unknown; its running time so far is the estimate."""

        factor = self.policy.growth_payoff_factor
        j = w.job
        if factor <= 0:
            return True
        ran = _seconds(j.started or j.created, self.now)
        if ran is None or ran <= 0:
            return True
        saved = ran * extra / (j.replicas + extra)  # linear speedup on the remaining work
        restart = self._restart_cost(j)
        if saved > factor * restart:
            return True
        self._hold(
            w,
            Reason.NOT_WORTH_RESTART,
            f"+{extra} worker(s) would save ~{saved:.0f}s, less than "
            f"{factor:g} x restart cost {restart:.0f}s",
        )
        return False

    def _fill(self, growable: list[_Job], pool: int) -> dict[_Job, int]:
        """Few jobs, one step each: smallest job first, each up to its max."""

        grants: dict[_Job, int] = {}
        if pool <= 0:
            return grants  # a full queue: no order to find
        order = sorted(
            growable,
            key=lambda w: (
                -w.job.priority,
                w.job.replicas * w.job.gpus_per_worker,
                w.job.created,
                w.skey,
            ),
        )
        for w in order:
            if pool <= 0:
                break  # nothing left: no job gets a worker (the rest keep their holds)
            j = w.job
            extra = self._within_quota(
                w, min(j.max_replicas - j.replicas, pool // j.gpus_per_worker)
            )
            if extra > 0 and self.nodes is not None:
                fits = self.nodes.fits(j.worker_shape, extra)
                if fits < extra:
                    self._no_node_fits(w, fits)
                    extra = fits
            if extra <= 0 or not self._step_ok(w, extra):
                continue
            if self.nodes is not None:
                self.nodes.place(j.worker_shape, extra)
            if self.quota is not None:
                self.quota.take(j.worker_shape, extra)
            grants[w] = extra
            pool -= extra * j.gpus_per_worker
        return grants

    def _no_node_fits(self, w: _Job, fits: int) -> None:
        """Node fit bounds the job's growth to `fits` more workers: held, with where its
        workers fit and why the idle GPUs elsewhere do not take them (kept as the note
        of a smaller grant)."""
        assert self.nodes is not None
        self.node_fit_limited = True
        w.fit_note = self.nodes.explain(w.job.worker_shape, fits)
        self._hold(w, Reason.NO_NODE_FITS, w.fit_note)

    def _place_fair(self, grants: dict[_Job, int]) -> dict[_Job, int]:
        """Fair shares are computed in GPUs; each grant is then cut to what the queue's
        capability admits and placed on nodes, in the plan's stable order, and cut to
        what fits."""
        if self.nodes is None and self.quota is None:
            return grants
        placed: dict[_Job, int] = {}
        for w in sorted(grants, key=_SKEY):
            shape = w.job.worker_shape
            n = self._within_quota(w, grants[w])
            if self.nodes is not None and n > 0:
                fits = self.nodes.fits(shape, n)
                if fits < n:
                    self._no_node_fits(w, fits)
                n = self.nodes.place(shape, fits)
            if n > 0:
                if self.quota is not None:
                    self.quota.take(shape, n)
                placed[w] = n
        return placed

    def _fair(self, growable: list[_Job], pool: int) -> dict[_Job, int]:
        """Max-min fair in workers: water-fill one worker at a time to the job with the
        fewest. Jobs whose share stays under min_step drop out and the rest re-fill; what
        is then left is water-filled again among the dropped ones, until a round grants
        nothing (so planning on the result grants nothing more: idempotence)."""

        granted: dict[_Job, int] = {}
        candidates = list(growable)
        while candidates:
            grants, dropped = self._fair_round(candidates, pool)
            if not grants:
                break
            granted.update(grants)
            pool -= sum(n * w.job.gpus_per_worker for w, n in grants.items())
            candidates = dropped
        return granted

    def _fair_round(self, candidates: list[_Job], pool: int) -> tuple[dict[_Job, int], list[_Job]]:
        all_dropped: list[_Job] = []
        while True:
            grants = _water_fill(candidates, pool)
            dropped = [w for w in candidates if grants[w] and not self._step_ok(w, grants[w])]
            if not dropped:
                return {k: v for k, v in grants.items() if v}, all_dropped
            all_dropped += dropped
            gone = set(dropped)
            candidates = [w for w in candidates if w not in gone]
