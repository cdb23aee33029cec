"""Which elastic workers may give way to a waiting gang, and in what order (rule 3).

`may_give_way` is the one filter, for the gangs of a job's own queue and for those of
other queues taking lent shares back (lenders.py): a job gives only workers above its
min, not within the reclaim cooldown, and not while it holds alone (`HELD_ALONE`).
`_VictimPool` orders the victims: lowest priority first, then by `victim_order`, whole
workers, as few as cover a shortfall, so few jobs restart."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from typing import Any

from autoscaler.core.policy import PlannerPolicy, VictimOrder
from autoscaler.core.reasons import Reason

from .fit import Holder
from .work import _extra_gpus, _heap_entry, _Job, restart_cost

# decisions that hold a job alone, whatever its queue does: a clock skew, a resize the
# cluster refused, its own gang waiting. Such a job keeps its size: it gives no worker.
HELD_ALONE = frozenset({Reason.CLOCK_SKEW, Reason.WRITE_REFUSED, Reason.OWN_GANG_WAITING})


def may_give_way(w: _Job, reclaim_cooldown_seconds: float) -> bool:
    """The one victim filter: w has workers above its min, was not resized within the
    reclaim cooldown (a reclaim would undo a resize before it paid), and is not held
    alone (HELD_ALONE). Both the gangs of w's own queue (ReclaimRules._victims) and those
    of other queues (lenders._Lenders) take only such jobs' workers."""
    return (
        w.target > w.job.min_replicas
        and (w.since is None or w.since >= reclaim_cooldown_seconds)
        and w.reason not in HELD_ALONE
    )


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
    ) -> None:
        self._jobs = jobs
        self._policy = policy
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
        lost = restart_cost(j, self._policy) * j.active * j.gpus_per_worker
        return (j.priority, lost / covered, -reclaimable, w.skey)


def victims_of_cuts(
    jobs: Iterable[_Job | tuple[_Job, str]], cuts: Iterable[int]
) -> list[tuple[_Job, int]]:
    """Victims and their workers taken, from make_room's cuts (in holder order)."""
    out = []
    for item, n in zip(jobs, cuts, strict=False):
        w = item[0] if isinstance(item, tuple) else item
        if n:
            out.append((w, n))
    return out


def holder_of(w: _Job, group: str = "") -> Holder:
    """A victim's workers above its min as fit.make_room sees them: highest index
    first (the operators delete those first), each with its node ("" unbound)."""
    where, j = w.job.worker_nodes, w.job
    nodes = tuple(
        where[i] if i < len(where) else "" for i in range(w.target - 1, j.min_replicas - 1, -1)
    )
    return Holder(j.worker_shape, nodes, j.priority, group)
