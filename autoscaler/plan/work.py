"""A job as the planner works on it, and the small facts every rule reads of it.

`_Job` is a job's mutable working state for one plan (its target, the reason for it,
whether it is decided); `_Jobs` is what a plan reads of the tuple of jobs alone, kept
for the next plan while the tuple stays (`kept.PlanMemory`). The helpers here (a job's
room to max, its GPUs above its min, its restart cost, the gang of its own it waits
for) are shared by several rules, so they live below all of them."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from autoscaler.core.model import ElasticJob, ObjectRef, PendingGroup, QueueState, same_items
from autoscaler.core.policy import PlannerPolicy
from autoscaler.core.reasons import Reason

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


def _index(jobs: Sequence[ElasticJob], last: _Jobs | None) -> _Jobs:
    """The jobs indexed, or `last`, the last plan's index, for the same jobs: the same tuple (a
    tuple and the frozen jobs in it cannot change), or a new sequence of the same job
    objects in the same order (the sources assemble a new tuple whenever any of their
    caches changed, most often not a job)."""
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
    return index


class _Queued(Protocol):
    """Anything that names its queue (a job, a gang, an unmanaged job)."""

    @property
    def queue(self) -> str: ...


_T = TypeVar("_T", bound=_Queued)


def _by_queue(items: Iterable[_T]) -> dict[str, list[_T]]:
    """Items by their queue, each list in the items' order."""
    out: dict[str, list[_T]] = {}
    for item in items:
        out.setdefault(item.queue, []).append(item)
    return out


_SKEY = operator.attrgetter("skey")


_KEY = operator.itemgetter(1)


def own_gangs_waiting(pending: list[PendingGroup]) -> dict[tuple[str, str, str], PendingGroup]:
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


def _plans(state: QueueState) -> bool:
    """The queue is planned this cycle: its data is known and it is open."""
    return state.usable and state.state not in CLOSED_STATES


def _gpus_of(victims: Iterable[tuple[_Job, int]]) -> int:
    """GPUs the victims' workers free."""
    return sum(n * w.job.gpus_per_worker for w, n in victims)


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


def restart_cost(j: ElasticJob, policy: PlannerPolicy) -> float:
    """The job's own estimate (its annotation, else our measurement), else the policy's."""
    return policy.restart_cost_seconds if j.restart_cost_seconds is None else j.restart_cost_seconds
