"""The jobs the planner lists but does not scale (unmanaged: not elastic, finished,
another operator's), and their decisions.

A cluster that keeps its finished jobs lists tens of thousands: each one's decision is
made once, from its record alone, kept while the same job objects come back, and merged
into its queue's decisions in (namespace, name, kind) order. The queue's finished runs
are read here too, as rule 3b's evidence (weigh.py)."""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.core.model import Decision, UnmanagedJob, same_items
from autoscaler.core.reasons import Reason

from . import payoff
from .inflight import NoPods
from .work import _by_queue, _Key


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
    # evidence, `weigh.WeighRules._queue_runs`)
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


def _listing(unmanaged: Sequence[UnmanagedJob], last: _Unmanaged | None) -> _Unmanaged:
    """The unmanaged jobs by queue, or `last`, the last plan's, for the same job objects
    in the same order; a job kept from the last keeps its decision."""
    if last is not None and same_items(last.of, unmanaged):
        return last
    seen = last.decided if last is not None else {}
    decided: dict[int, tuple[UnmanagedJob, Decision]] = {}
    by_queue = {q: _listed(us, seen, decided) for q, us in _by_queue(unmanaged).items()}
    return _Unmanaged(tuple(unmanaged), by_queue, decided)


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


def _with_unmanaged(
    decisions: list[Decision], unmanaged: Iterable[UnmanagedJob], no_pods: NoPods
) -> Iterable[Decision]:
    """A queue's decisions with its unmanaged jobs' merged in, in (namespace, name) order:
    the job list is already in that order, so the few unmanaged ones are merged in
    rather than everything sorted."""
    reports = sorted((_unmanaged_decision(u, no_pods) for u in unmanaged), key=_decision_order)
    return heapq.merge(decisions, reports, key=_decision_order) if reports else decisions


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
        other_gpus=u.other_gpus,
    )


def _decision_order(d: Decision) -> tuple[str, str, str]:
    return (d.ref.namespace, d.ref.name, d.ref.kind)
