"""The global planner: `plan(snapshot, policy, now) -> Plan`.

Pure and deterministic: no I/O, no clock, no randomness; the same input gives the same
plan, in the same order. Every job and every waiting gang gets a decision with a reason.
The rules are docs/design.md "Planner rules"; each lives in a file of its own, named
below. plan() builds the cluster's state (cluster.py) and plans each queue in name
order with a `QueuePlanner`.

Per queue, in order:
  hold    missing/bad data, a closed or missing queue: nothing in the queue changes (rule 9,
          here); a job whose last resize the cluster refused holds alone (its share goes on)
  trim    workers still unplaced long after our resize are given back (rule 5, trim.py)
  gangs   waiting PodGroups one at a time by priority then age; each fits in what is free
          (plus GPUs being released) or gets elastic workers reclaimed, only if that makes
          it fit and pays; otherwise skipped, unless it is starving (rule 3, gangs.py,
          reclaim.py, victims.py, lenders.py; rule 3b, weigh.py)
  grow    what is left, minus in-flight and reserve, to jobs out of cooldown, within the
          Queue's capability (rules 4, 6, 7, growth.py; capability.py)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from autoscaler.core.model import (
    ClusterSnapshot,
    Decision,
    ElasticJob,
    GangDecision,
    Measurement,
    PendingGroup,
    Plan,
    Plugin,
    QueueState,
    QueueSummary,
)
from autoscaler.core.policy import PlannerPolicy
from autoscaler.core.reasons import Reason

from .cluster import _Cluster
from .gangs import GangRules
from .growth import GrowthRules, _growth_block, _seconds
from .inflight import NoPods
from .kept import MEMORY, PlanMemory, _Decided
from .lenders import _Lenders, _Shared
from .listing import _NONE_LISTED, _Listed, _listing, _with_listed
from .trim import TrimRule
from .work import (
    _EPS,
    CLOSED_STATES,
    _by_queue,
    _index,
    _Job,
    _Jobs,
    _Key,
    _own_gang,
    _waits_for_own_gang,
    own_gang_words,
    own_gangs_waiting,
)


def plan(
    snapshot: ClusterSnapshot,
    policy: PlannerPolicy,
    now: datetime,
    *,
    memory: PlanMemory = MEMORY,
) -> Plan:
    """The plan for one cycle: a decision for every job and every waiting gang.

    `memory` is what the last plan left (kept.PlanMemory): the same plan is made with
    any memory, a steady cycle is made faster with the last one's. By default the
    module's own, one per process; `memory.reset()` makes the next plan from scratch."""
    memory.jobs = index = _index(snapshot.jobs, memory.jobs)
    jobs_by_queue = index.by_queue
    memory.unmanaged = _listing(snapshot.unmanaged, memory.unmanaged)
    unmanaged_by_queue = memory.unmanaged.by_queue
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
    cluster = _cluster(snapshot, index, pending_by_queue, no_pods, policy, now, memory)
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
    memo: _Decided = (memory.decided, {})
    for queue_plan, _ in planners:
        own = queue_plan.decisions(memo)
        listed = unmanaged_by_queue.get(queue_plan.state.name)
        decisions.extend(_with_listed(own, listed, no_pods) if listed is not None else own)
        gangs.extend(queue_plan.gangs)
    memory.decided = memo[1]

    gangs.sort(key=lambda g: (g.queue, g.ref.namespace, g.ref.name))
    return Plan(
        now=now,
        decisions=tuple(decisions),
        gangs=tuple(gangs),
        queues=summaries,
        measurements=_measurements(index.measurable, now, policy.unplaced_timeout_seconds),
    )


def _cluster(
    snapshot: ClusterSnapshot,
    index: _Jobs,
    pending_by_queue: dict[str, list[PendingGroup]],
    no_pods: NoPods,
    policy: PlannerPolicy,
    now: datetime,
    memory: PlanMemory,
) -> _Cluster | None:
    """The state the queues of this cycle share, where Volcano's view is known: a job
    asks for room to grow (capacity's allotments) when nothing blocks its growth."""
    if snapshot.volcano is None:
        return None
    return _Cluster(
        snapshot,
        index,
        pending_by_queue,
        lambda j: _growth_block(j, _seconds(j.last_scale_time, now), policy) is None,
        no_pods,
        memory,
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
) -> tuple[QueuePlanner, QueueSummary]:
    """One queue planned, and its summary; queues are planned in name order,
    each taking from the cluster's idle GPUs what it is given."""
    state = snapshot.queues.get(name) or QueueState(
        name, None, Reason.METRICS_MISSING, f"queue {name} has no free-GPU reading"
    )
    headroom = None
    if cluster is not None and (state.volcano is not None or cluster.view.plugin is Plugin.GIVEN):
        state, headroom = cluster.queue_state(state)
    unmanaged, pending = by_queue
    queue_plan = QueuePlanner(
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
    if cluster is not None and cluster.room_above:
        cluster.took(name, _took(queue_plan, summary))
    if state.notes:
        summary = replace(summary, notes=state.notes)
    if headroom is not None:
        summary = headroom.summary(summary, queue_plan.node_fit_limited)
    elif state.problem is Reason.QUEUE_PARENT:
        summary = replace(summary, plugin=Plugin.CAPACITY)  # the only plugin with a tree
    elif state.free_gpus is None and state.volcano is None:
        # no reading for it: nothing was given, and no plugin computed its headroom
        summary = replace(summary, plugin=Plugin.UNKNOWN)
    return queue_plan, summary


def _took(queue_plan: QueuePlanner, summary: QueueSummary) -> int:
    """GPUs a queue's plan takes of its room: its growth and the gangs that fit in free
    GPUs (an admitted gang's are held already, a covered gang's are freed for it)."""
    admitted = {g.ref for g in queue_plan.pending if g.phase == "Inqueue"}
    fit = sum(
        g.gpus for g in queue_plan.gangs if g.reason is Reason.GANG_FITS and g.ref not in admitted
    )
    return summary.granted_gpus + fit


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


def _measurements(
    jobs: Iterable[ElasticJob], now: datetime, limit: float
) -> tuple[Measurement, ...]:
    found = (m for j in jobs if (m := _measure(j, now, limit)) is not None)
    return tuple(sorted(found, key=lambda m: (m.ref.namespace, m.ref.name, m.ref.kind)))


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


class QueuePlanner(GangRules, GrowthRules, TrimRule):
    """One queue's plan: the state of state.QueuePlanState with every rule mixed in,
    run in the order of the rules (`run`). It holds the queue (rule 9) when its data
    is missing, bad or the queue closed, counts what is in flight and being released
    (rule 2), trims (rule 5), serves the waiting gangs (rule 3) and grows into what is
    left (rules 4, 6, 7). One is made per queue per plan; its `decisions` and `gangs`
    are read once every queue ran (a later queue's gang may take an earlier one's
    workers back)."""

    def run(self) -> QueueSummary:
        p = self.policy
        hold = self._why_queue_holds()
        pending_gpus = sum(g.gpus for g in self.pending)
        if hold is not None:
            return self._hold_queue(*hold, pending_gpus)

        inflight, releasing = self._account()
        known = self.state.free_gpus
        assert known is not None  # else _why_queue_holds held the queue
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

    def _hold_queue(self, reason: Reason, message: str, pending_gpus: int) -> QueueSummary:
        """Rule 9: the whole queue holds (missing or bad data, a closed queue)."""
        for w in self.work:
            self._decide(w, w.job.replicas, reason, message)
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
        own_waiting = own_gangs_waiting(self.pending)
        refusals = {(r.ref.namespace, r.ref.name, r.ref.kind): r for r in self.snapshot.refusals}
        inflight = releasing = 0
        # a job's own gang has the job's name: most jobs need no lookup of theirs
        own_names = {name for _, name, _ in own_waiting}
        for w in self.work:
            j = w.job
            own = _own_gang(j.ref, own_waiting) if j.ref.name in own_names else None
            if own is not None:
                self._decide(w, j.replicas, Reason.OWN_GANG_WAITING, own_gang_words(own))
                continue  # counted once, as that gang
            if j.replicas > j.active:
                # workers with no pod long after they were asked for count no more
                counted = j.replicas - j.active - self.no_pods.of_job(j)
                inflight += counted * j.gpus_per_worker
            elif j.replicas < j.active:
                releasing += (j.active - j.replicas) * j.gpus_per_worker
            if w.since is not None and -w.since > p.clock_skew_seconds:
                self._decide(
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
                self._decide(
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

    def _why_queue_holds(self) -> tuple[Reason, str] | None:
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
