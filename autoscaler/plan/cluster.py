"""What the queues of one cycle share: the cluster's state (`_Cluster`) and each
queue's headroom (`_Headroom`).

Volcano's view of every queue, the GPUs idle on schedulable nodes, and the workers in
flight (rule 2: promised capacity counts): in-flight workers take their node room first,
then the queues, in name order, as gangs and growth are granted. Under the capacity
plugin, the idle GPUs are shared out between the queues (shares.capacity_allotments)
before any queue is planned, so an early queue cannot take a later one's share."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.core.model import (
    Bound,
    ClusterSnapshot,
    ElasticJob,
    NodeGroups,
    PendingGroup,
    Plugin,
    QueueState,
    QueueSummary,
    UnmanagedJob,
    VolcanoView,
)
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import Quantities

from .fit import GroupFit, Placer, Replay, with_taken
from .fit.nodes import _Grouping
from .headroom import Limits, PluginLimit, real_capability
from .inflight import NoPods
from .kept import PlanMemory
from .shares import Ask, capacity_allotments, deserved_of
from .work import _EPS, _Jobs, _plans, _room_to_max, _waits_for_own_gang, own_gangs_waiting


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
        memory: PlanMemory,
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
        # what each queue's workers in flight take of its node groups' limits
        self.group_inflight: dict[str, tuple[tuple[str, Quantities], ...]] = {}
        self._count_inflight(snapshot, jobs.moving, pending_by_queue, no_pods, memory)
        # capacity under hierarchy: what each ancestor queue may still take, shared by
        # its leaves and consumed as they are planned (`took`)
        self.tree = self.limits.tree
        self.room_above: dict[str, float] = {}
        if self.tree.on:
            self.room_above = self._rooms_above()
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
        memory: PlanMemory,
    ) -> None:
        # a job whose own PodGroup waits counts once, as that gang (rule 2): its workers
        # are not in flight here, the queue planner takes the gang's GPUs; workers with
        # no pod long after they were asked for count no more (HoldNoPods)
        own = own_gangs_waiting([g for groups in pending_by_queue.values() for g in groups])
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
            # the nodegroup plugin's rules: a queue's workers in flight land only on its
            # groups, and take their limits first (queue_state)
            rules = {n: s.node_groups for n, s in snapshot.queues.items() if s.node_groups}
            self.pool, self.group_inflight = _placed_in_flight(
                self.view, jobs, unmanaged, memory, rules
            )
        for j, n in jobs:
            self.inflight[j.queue] = self.inflight.get(j.queue, 0) + n * j.gpus_per_worker
        for u, gpus in unmanaged:
            self.inflight[u.queue] = self.inflight.get(u.queue, 0) + gpus

    def _rooms_above(self) -> dict[str, float]:
        """Each parent's room: its real capability (its series, else as the plugin
        builds it) less what its leaves hold and have in flight."""
        tree, total = self.tree, self.view.total_gpus
        rooms: dict[str, float] = {}
        for name in tree.children:
            q = self.view.queues.get(name)
            if q is None:
                continue
            real = q.real_capacity
            if real is None:
                if total is None:
                    continue  # unbounded as far as is known: the leaves' own limits hold
                real = tree.real(name, total)
            inflight = sum(self.inflight.get(n, 0) for n in tree.leaves_under(name))
            rooms[name] = real - tree.used(name) - inflight
        return rooms

    def above(self, name: str) -> tuple[str, float] | None:
        """The ancestor of queue `name` with the least room left, and that room; None
        without one (a flat cluster, a top-level queue)."""
        rooms = [(a, self.room_above[a]) for a in self.tree.ancestors(name) if a in self.room_above]
        return min(rooms, key=lambda r: r[1]) if rooms else None

    def took(self, name: str, gpus: float) -> None:
        """Queue `name` was planned and took `gpus` more of its room: so did each of its
        ancestors, for the leaves planned after it."""
        if gpus > 0:
            for a in self.tree.ancestors(name):
                if a in self.room_above:
                    self.room_above[a] -= gpus

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
        tree = self.tree
        for name, q in sorted(view.queues.items()):
            if tree.on and tree.is_parent(name):
                continue  # its leaves ask; what it holds is theirs
            limit = self.limits.limit(name)
            if limit is None:
                continue
            inflight = self.inflight.get(name, 0)
            want = sum(_room_to_max(j) for j in jobs_by_queue.get(name, ()) if asks(j))
            want += sum(g.gpus for g in pending_by_queue.get(name, ()) if g.phase != "Inqueue")
            want = want if name in planned else 0
            room = limit.gpus - inflight
            if tree.on:
                # under hierarchy deserved is not capped at the real capability
                real = math.inf
                above = self.above(name)
                room = room if above is None else min(room, above[1])
            else:
                real = real_capability(q, total, self.limits.total_guarantee)
            used = q.allocated + q.inqueue + inflight
            rows.append(Ask(name, used, deserved_of(q, real), q.weight, room, want))
        if self.pool is not None:
            idle = self.pool.idle_gpus
        else:
            idle = math.floor(total - sum(r.used for r in rows) + _EPS)
        allotted = capacity_allotments(idle, rows)
        if self.tree.on:
            self._share_rooms_above(rows, allotted)
        # where a queue gets all it asks for, its headroom stays the scheduler's room
        return {r.name: allotted[r.name] for r in rows if allotted[r.name] < r.most}

    def _share_rooms_above(self, rows: list[Ask], allotted: dict[str, int]) -> None:
        """Under a tree, each ancestor's room shared out between its leaves by the same
        rule as the cluster's idle GPUs (owed first), not taken by the first leaf
        planned: each leaf's allotment cut to its part of every ancestor's room."""
        by_name = {r.name: r for r in rows}
        for ancestor, room in sorted(self.room_above.items()):
            under = [by_name[n] for n in self.tree.leaves_under(ancestor) if n in by_name]
            if not under:
                continue
            parts = capacity_allotments(math.floor(max(0.0, room) + _EPS), under)
            for r in under:
                allotted[r.name] = min(allotted[r.name], parts[r.name])

    def queue_state(self, state: QueueState) -> tuple[QueueState, _Headroom | None]:
        """The queue's state with `free_gpus` = its headroom before in-flight workers:
        the smallest of its plugin's room and the cluster's idle GPUs (plus its own
        in-flight ones, which the queue planner subtracts)."""
        if state.problem is not None:
            return state, None
        if self.tree.on and self.tree.is_parent(state.name):
            return self._parent(state), None
        taken = self.group_inflight.get(state.name)
        if taken and state.node_groups is not None:
            state = replace(state, node_groups=with_taken(state.node_groups, taken))
        if self.view.plugin is Plugin.GIVEN:
            if state.free_gpus is None:
                return state, None
            limit: PluginLimit | None = PluginLimit(state.free_gpus, Bound.GIVEN, {})
        else:
            limit = self.limits.limit(state.name)
        if limit is None:
            return self._unknown(state), None
        inflight = self.inflight.get(state.name, 0)
        limits = {str(limit.bound): limit.gpus}
        free, bound = max(0.0, limit.gpus), limit.bound
        if self.pool is not None:
            idle = self.pool.idle_gpus + inflight
            limits[str(Bound.CLUSTER_IDLE)] = float(self.pool.idle_gpus)
            if idle <= free:  # a tie names the physical limit
                free, bound = float(idle), Bound.CLUSTER_IDLE
        above = self.above(state.name)
        if above is not None:
            # every ancestor bounds it, as the scheduler checks each (headroom.Tree)
            ancestor, room = above
            limits[f"{Bound.ANCESTOR} {ancestor}"] = room
            # `room` is after every leaf's workers in flight, this one's included: a
            # sibling's in flight beyond the room is a deficit this leaf's do not undo
            if max(0.0, room + inflight) < free:
                free, bound = max(0.0, room + inflight), Bound.ANCESTOR
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
            # under a tree, an ancestor over its room is a deficit of the leaf's too
            short = min(0.0, limit.gpus, above[1] if above is not None else 0.0)
            admitted = max(0.0, inqueue + short)
        return replace(state, free_gpus=free, admitted_gpus=admitted), headroom

    def _unknown(self, state: QueueState) -> QueueState:
        """A queue whose headroom its plugin cannot give: it holds."""
        what = (
            "no nodes to count the cluster's GPUs"
            if self.view.plugin is Plugin.PROPORTION
            else "no real capacity series and no nodes to compute it"
        )
        return replace(
            state,
            free_gpus=None,
            problem=Reason.METRICS_MISSING,
            message=f"queue {state.name}: headroom under the {self.view.plugin} "
            f"plugin cannot be computed: {what}",
        )

    def _parent(self, state: QueueState) -> QueueState:
        """A parent queue holds: the scheduler runs jobs only in leaves (one in a parent
        stops its scheduling altogether), and its room is its leaves' (no free GPUs of
        its own to report, so none are counted twice)."""
        children = ", ".join(self.tree.children[state.name])
        return replace(
            state,
            free_gpus=None,
            problem=Reason.QUEUE_PARENT,
            message=f"queue {state.name} is a parent in Volcano's queue tree (of "
            f"{children}): jobs run only in leaf queues (a job in a parent queue stops the "
            "scheduler's capacity plugin), and its room is shared by its leaves",
        )


def _placed_in_flight(
    view: VolcanoView,
    jobs: list[tuple[ElasticJob, int]],
    unmanaged: list[tuple[UnmanagedJob, int]],
    memory: PlanMemory,
    rules: Mapping[str, NodeGroups],
) -> tuple[Placer, dict[str, tuple[tuple[str, Quantities], ...]]]:
    """The nodes with room taken by workers asked for and not running yet (`jobs`: a job
    and its workers in flight; `unmanaged`: a job and its GPUs in flight), whoever asked:
    they will take node room first (a worker already bound is on its node's used room and
    counts twice for the seconds until it runs: the safe side). A steady cluster hands
    the planner the same nodes and job objects every cycle (the snapshot is assembled
    again only when a cache changed): the placement, most of a steady plan at 10k jobs,
    is then taken up from the last plan's, which is what placing the same workers on the
    same nodes again gives. A queue with node-group `rules` has its workers placed only
    on its groups, within their limits (GroupFit); what they take of each limit is
    returned by queue."""
    assert view.nodes is not None
    last = memory.in_flight
    if (
        last is not None
        and last[0] is view.nodes
        and _same_pairs(last[1], jobs)
        and _same_pairs(last[2], unmanaged)
        and last[3][2] == rules
    ):
        return _replay(view, last[3][0], memory), last[3][1]
    pool = Replay.placing(view.nodes, view.gpu_names)
    fits: dict[str, GroupFit] = {}
    for j, n in jobs:
        queue_rules = rules.get(j.queue)
        if queue_rules is None:
            pool.place(j.worker_shape, n)
            continue
        fit = fits.get(j.queue)
        if fit is None:
            fit = fits[j.queue] = GroupFit(j.queue, queue_rules, pool)
        fit.place(j.worker_shape, n)
    for _, gpus in unmanaged:
        pool.take_gpus(gpus)
    taken = {q: t for q, fit in fits.items() if (t := fit.taken())}
    start = pool.state()
    memory.in_flight = (view.nodes, jobs, unmanaged, (start, taken, dict(rules)))
    pool.logging(start)  # the room as `start` has it: no copy made of it
    memory.placed = pool
    return pool, taken


def _replay(view: VolcanoView, start: _Grouping, memory: PlanMemory) -> Replay:
    """The plan's Placer from the room the workers in flight left (`start`): it answers
    from the last plan's log while this plan asks it the same (fit/replay.py), which is
    only the same when it started from the same room (the same `start` object, kept
    with the nodes it was made of) with the same resource names."""
    assert view.nodes is not None
    last = memory.placed
    log = last.calls if last is not None and last.start is start else ()
    if last is not None and last.gpu_names != tuple(view.gpu_names):
        log = ()
    memory.placed = placer = Replay(view.nodes, view.gpu_names, start, log)
    return placer


def _same_pairs(a: list[tuple[Any, int]], b: list[tuple[Any, int]]) -> bool:
    return len(a) == len(b) and all(
        x[0] is y[0] and x[1] == y[1] for x, y in zip(a, b, strict=True)
    )
