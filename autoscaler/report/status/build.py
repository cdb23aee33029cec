"""One cycle -> the next status document: each job's resize state carried from the last
document, every job ranked and counted, the most urgent listed, the whole kept within
its bounds. Pure; a daemon's StatusMemo lets a steady cycle take up what did not change."""

from __future__ import annotations

import heapq
import operator
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from autoscaler.act.results import Outcome
from autoscaler.core.model import (
    ClusterSnapshot,
    Decision,
    ElasticJob,
    ObjectRef,
    PendingGroup,
    Plan,
    QueueSummary,
)
from autoscaler.core.reasons import Reason

from ..render import notes_said, room_of
from .codec import dump
from .doc import (
    _VALUE,
    MAX_BYTES,
    Cycle,
    GangEntry,
    JobEntry,
    QueueEntry,
    Resize,
    ResizeState,
    StatusDoc,
    StatusMemo,
    _KeptEntry,
    _plain_rank,
    _rank_of,
)
from .split import split_named

# write outcomes compared as the plain strings a WriteOutcome carries
_APPLIED, _DRY_RUN = Outcome.APPLIED.value, Outcome.DRY_RUN.value
_GONE, _ERROR = Outcome.GONE.value, Outcome.ERROR.value
# write outcomes (act/results.py Outcome values; faults may add more) by what the resize does next
_REJECTED_OUTCOMES = {Outcome.DENIED.value, Outcome.REFUSED.value}
_RETRY_OUTCOMES = {o.value for o in (Outcome.CONFLICT, Outcome.THROTTLED, Outcome.DEFERRED)}
_RETRY_OUTCOMES |= {Outcome.BACKOFF.value, Outcome.ERROR.value}


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What became of one planned write (from actuator.ActionResult)."""

    namespace: str
    name: str
    kind: str
    outcome: str  # an Outcome value (act/results.py)
    message: str = ""


def _api_refused(outcome: WriteOutcome) -> bool:
    """The API refused the write for good: a 4xx other than conflict/gone/throttled.
    (The actuator on main reports those as `error` with `HTTP 4xx ...` text.)"""
    if outcome.outcome in _REJECTED_OUTCOMES:
        return True
    text = outcome.message
    return (
        outcome.outcome == _ERROR
        and text.startswith("HTTP 4")
        and not text.startswith(("HTTP 409", "HTTP 404", "HTTP 429"))
    )


def _resize(
    d: Decision,
    job: ElasticJob | None,
    written: WriteOutcome | None,
    before: Resize | None,
    now: datetime,
    cooldown: timedelta,
) -> Resize | None:
    """The job's resize state after this cycle (docstring of ResizeState)."""
    if written is not None:
        return _resize_written(d, written, before, now)
    if before is None:
        return None
    if before.state is ResizeState.REJECTED:
        # kept while the plan still holds on the refusal
        return before if d.reason is Reason.WRITE_REFUSED else None
    if before.state not in (ResizeState.REQUESTED, ResizeState.RUNNING, ResizeState.SETTLED):
        return None  # retrying / would-resize with no write now: the plan moved on
    if job is None or job.replicas != before.to_replicas:
        return None  # gone, finished, or resized by someone else since
    at_size = job.active == job.replicas
    if before.state is ResizeState.REQUESTED:
        return replace(before, state=ResizeState.RUNNING, since=now) if at_size else before
    if before.state is ResizeState.RUNNING:
        return replace(before, state=ResizeState.SETTLED, since=now) if at_size else before
    # settled: listed until the cooldown of that resize has passed
    start = job.last_scale_time or before.since
    return before if now - start < cooldown else None


def _resize_written(
    d: Decision, written: WriteOutcome, before: Resize | None, now: datetime
) -> Resize | None:
    """The job's resize state after a write of it this cycle (or a dry run's)."""

    def kept(state: ResizeState) -> datetime:
        same = before is not None and before.state is state and before.to_replicas == d.target
        return before.since if same and before is not None else now

    if written.outcome == _APPLIED:
        return Resize(
            ResizeState.REQUESTED,
            d.current,
            d.target,
            now,
            d.reason.value,
            d.message,
        )
    if written.outcome == _DRY_RUN:
        state = ResizeState.WOULD_RESIZE
        return Resize(state, d.current, d.target, kept(state), d.reason.value, d.message)
    if _api_refused(written):
        state = ResizeState.REJECTED
        return Resize(
            state,
            d.current,
            d.target,
            kept(state),
            d.reason.value,
            written.message,
        )
    if written.outcome in _RETRY_OUTCOMES:
        state = ResizeState.RETRYING
        return Resize(
            state,
            d.current,
            d.target,
            kept(state),
            d.reason.value,
            written.message,
        )
    if written.outcome == _GONE:
        return None
    return before  # not the leader: nothing happened


# waiting gangs listed in this order of their reason (plain strings: an entry's reason is
# the value)
_GANG_ORDER = tuple(
    r.value
    for r in (
        Reason.GANG_COVERED,
        Reason.GANG_FITS,
        Reason.GANG_UNCOVERABLE,
        Reason.GANG_RECLAIM_UNPAID,
        Reason.GANG_BLOCKED,
        Reason.GANG_OWNER_GONE,
    )
)


def _gang_rank(g: GangEntry) -> int:
    return _GANG_ORDER.index(g.reason) if g.reason in _GANG_ORDER else len(_GANG_ORDER)


def _queue_entry(q: QueueSummary, jobs: Counter[str], gangs: Counter[str]) -> QueueEntry:
    headroom, bound, words = room_of(q)  # as the plan's table shows it
    return QueueEntry(
        name=q.name,
        status=q.reason.value if q.reason else "ok",
        # what of its Queue object bounds nothing (QueueSummary.notes) when nothing else
        message=q.message or "; ".join(q.notes),
        headroom_gpus=headroom,
        bound=bound,
        plugin=q.plugin.value,
        headroom=words,
        limits=dict(sorted(q.limits.items())),
        inputs=dict(sorted(q.inputs.items())),
        free_gpus=q.free_gpus,
        inflight_gpus=q.inflight_gpus,
        releasing_gpus=q.releasing_gpus,
        pending_gpus=q.pending_gpus,
        granted_gpus=q.granted_gpus,
        reclaimed_gpus=q.reclaimed_gpus,
        trimmed_gpus=q.trimmed_gpus,
        jobs=dict(sorted(jobs.items())),
        gangs=dict(sorted(gangs.items())),
    )


def _restart(d: Decision) -> str:
    if d.restart_cost_seconds is None:
        return ""
    return f"{d.restart_cost_seconds:.0f}s {d.restart_cost_source}".strip()


def build_status(
    snapshot: ClusterSnapshot,
    plan: Plan,
    cycle: Cycle,
    previous: StatusDoc | None = None,
    writes: Iterable[WriteOutcome] = (),
    *,
    max_jobs: int = 500,
    cooldown_seconds: float = 0.0,
    mode: str = "live",
    identity: str = "",
    version: str = "",
    heartbeat_seconds: float = 0.0,
    max_bytes: int | None = MAX_BYTES,
    memo: StatusMemo | None = None,
) -> StatusDoc:
    """The status after this cycle. `previous` carries each job's `since` and resize state
    across cycles (and across restarts: the writer reads the object back at start).
    `memo`: what the last status of the same daemon left to take up (StatusMemo); the
    document is the same without it.

    Linear in the jobs with small constants (10k jobs: docs/benchmarks.md): every job is
    counted and ranked, but only the `max_jobs` most urgent become entries."""

    now = plan.now
    writes = tuple(writes)
    params = (max_jobs, cooldown_seconds, mode, identity, version, heartbeat_seconds, max_bytes)
    if memo is not None:
        again = _steady_doc(memo, snapshot, plan, cycle, previous, writes, params)
        if again is not None:
            return again
    elastic = _by_ref(snapshot.jobs)
    if memo is not None:
        memo.take_up(plan.decisions)
    cooldown = timedelta(seconds=cooldown_seconds)
    ranked = _ranked(plan, elastic, previous, writes, cooldown, max_jobs, memo)
    chosen = heapq.nsmallest(max_jobs, ranked) if len(ranked) > max_jobs else sorted(ranked)
    entries = _entries(chosen, plan.decisions, elastic, memo)
    # every job counted by queue and reason once: the queues' counts and the omitted's
    counts = _counted(plan.decisions, memo)
    omitted: Counter[str] = Counter()
    for (_, reason), n in counts.items():
        omitted[_VALUE[reason]] += n
    omitted.subtract(e.reason for e in entries)
    doc = StatusDoc(
        time=now,
        cycle=cycle,
        mode=mode,
        identity=identity,
        version=version,
        heartbeat_seconds=heartbeat_seconds,
        queues=_queue_entries(plan, counts),
        jobs=tuple(entries),
        gangs=_gang_entries(snapshot, plan),
        omitted_jobs={r: n for r, n in sorted(omitted.items()) if n > 0},
    )
    out = bounded(doc, max_jobs, max_bytes, memo)
    if memo is not None:
        memo.steady = _Steady.of(doc, out, snapshot, plan, writes, params, cooldown, memo.margin)
    return out


@dataclass(frozen=True, slots=True)
class _Steady:
    """A document with everything it was built of (of the snapshot, all a status reads:
    its jobs and waiting PodGroups, the same objects), kept when building it again from
    the same inputs, with itself as the previous document, gives it again
    (`_steady_doc`): a steady dry run hands over the same records, decisions and writes
    every cycle, and ranking and resizing its thousands of planned resizes again was
    most of a status. Which is so when no entry listed was stamped by its build (a
    `since`, an entry's or its resize's, and a gang's are the build's `now` only when
    they are new or moved: built again, they would take the new `now`), every size
    checked against the byte bound was far from it (another cycle section cuts the
    same), and until the cooldown of a settled resize listed has passed (then it
    leaves). The others keep their entries: a job listed keeps its since and resize,
    one not listed only ranks later (its since is the new `now`), so the same are
    listed, and the same are cut and counted."""

    doc: StatusDoc
    jobs: tuple[ElasticJob, ...]  # what a status reads of the snapshot: its jobs
    pending: tuple[PendingGroup, ...]  # and its waiting PodGroups
    decisions: tuple[Decision, ...]
    # the plan's gangs and queues as written out: equal numbers of another type (a
    # free count read as 0 or 0.0) are written differently
    said: str
    writes: tuple[WriteOutcome, ...]
    params: tuple[object, ...]
    built: datetime  # the `now` it was built at: a later `now` only ranks the rest later
    until: datetime | None  # the end of the first cooldown of a settled resize listed

    @classmethod
    def of(
        cls,
        doc: StatusDoc,
        out: StatusDoc,
        snapshot: ClusterSnapshot,
        plan: Plan,
        writes: tuple[WriteOutcome, ...],
        params: tuple[object, ...],
        cooldown: timedelta,
        margin: int | None,
    ) -> _Steady | None:
        """`out` (bounded from `doc`) kept, or None when a build again may differ. What
        was cut (to the bound, or to fit the bytes) may have been stamped: built again
        it would rank later still, and stay cut."""
        now, max_bytes = plan.now, params[-1]
        if max_bytes is not None and (margin is None or margin <= _ROOM):
            return None
        if any(g.since == now for g in out.gangs):
            return None
        until: datetime | None = None
        for e in out.jobs:
            r = e.resize
            if e.since == now or (r is not None and r.since == now):
                return None
            if r is not None and r.state is ResizeState.SETTLED:
                end = (e.last_resize or r.since) + cooldown
                until = end if until is None else min(until, end)
        return cls(
            out,
            tuple(snapshot.jobs),
            tuple(snapshot.pending),
            plan.decisions,
            _said(plan),
            writes,
            params,
            now,
            until,
        )


def _said(plan: Plan) -> str:
    return repr((plan.gangs, plan.queues))


def _same(items: Sequence[object], kept: tuple[object, ...]) -> bool:
    return len(items) == len(kept) and all(map(operator.is_, items, kept))


# bytes every size checked against the bound must be away from it for a document to be
# kept: another cycle section of the same message and writes (a result, a duration) is
# a few dozen bytes longer at most, and the time a few more
_ROOM = 256


def _steady_doc(
    memo: StatusMemo,
    snapshot: ClusterSnapshot,
    plan: Plan,
    cycle: Cycle,
    previous: StatusDoc | None,
    writes: tuple[WriteOutcome, ...],
    params: tuple[object, ...],
) -> StatusDoc | None:
    """The last document with this cycle's section, when it is what building it again
    gives (_Steady); None otherwise."""
    k = memo.steady
    if not isinstance(k, _Steady) or previous is not k.doc:
        return None
    now = plan.now
    if now < k.built or (k.until is not None and now >= k.until):
        return None
    if params != k.params or cycle.message != k.doc.cycle.message:
        return None
    # the same objects, in C: the sources assemble new tuples of the same records
    # whenever any cache changed
    if not (
        _same(plan.decisions, k.decisions)
        and _same(snapshot.jobs, k.jobs)
        and _same(snapshot.pending, k.pending)
    ):
        return None
    if not (writes is k.writes or writes == k.writes):
        return None
    if _said(plan) != k.said:
        return None
    doc = with_cycle(k.doc, now, cycle)
    memo.steady = replace(k, doc=doc)
    return doc


# (rank, since, namespace, name, kind, index in plan.decisions, resize): sorts by urgency
_Ranked = tuple[int, datetime, str, str, str, int, "Resize | None"]


def _ranked(
    plan: Plan,
    elastic: Mapping[ObjectRef, ElasticJob],
    previous: StatusDoc | None,
    writes: Iterable[WriteOutcome],
    cooldown: timedelta,
    max_jobs: int,
    memo: StatusMemo | None,
) -> list[_Ranked]:
    """The decisions that may be listed, ranked: every one named like a job with a
    history or a write (only those need _resize), and the `max_jobs` first of the rest."""
    now = plan.now
    before = {j.key: j for j in previous.jobs} if previous is not None else {}
    outcomes = {(w.namespace, w.name, w.kind): w for w in writes}
    # most jobs have neither: a name in neither needs no key built
    named = frozenset({j.name for j in before.values()} | {w.name for w in outcomes.values()})
    split = split_named(plan.decisions, named, max_jobs, memo)
    named_at, plain = split.named_at, split.first()
    # the rest are listed since now, with no resize: ranked by their decision alone
    ranked: list[_Ranked] = [(r, now, ns, name, kind, i, None) for r, ns, name, kind, i in plain]
    for i in named_at:
        d = plan.decisions[i]
        ref, reason = d.ref, _VALUE[d.reason]
        resize: Resize | None = None
        since = now
        old = before.get(f"{ref.namespace}/{ref.name}/{ref.kind}")
        written = outcomes.get((ref.namespace, ref.name, ref.kind))
        if old is not None or written is not None:
            resize = _resize(
                d, elastic.get(ref), written, old.resize if old else None, now, cooldown
            )
        if old is not None and old.reason == reason and old.target == d.target:
            since = old.since
        changed_size = d.target is not None and d.target != d.current
        if resize is None:
            rank = _plain_rank(changed_size, reason)
        else:
            rank = _rank_of(resize, changed_size, reason)
        ranked.append((rank, since, ref.namespace, ref.name, ref.kind, i, resize))
    return ranked


def _gang_entries(snapshot: ClusterSnapshot, plan: Plan) -> tuple[GangEntry, ...]:
    """Every waiting gang, most urgent first, with its PodGroup's age and owner."""
    pending = {(p.ref.namespace, p.ref.name): p for p in snapshot.pending}
    gangs: list[GangEntry] = []
    for g in plan.gangs:
        p = pending.get((g.ref.namespace, g.ref.name))
        owner = f"{p.owner.kind}/{p.owner.name}" if p is not None and p.owner else ""
        gangs.append(
            GangEntry(
                namespace=g.ref.namespace,
                name=g.ref.name,
                queue=g.queue,
                gpus=g.gpus,
                reason=g.reason.value,
                message=g.message,
                since=p.created if p is not None else plan.now,
                victims=tuple(f"{v.namespace}/{v.name}" for v in g.victims),
                owner=owner,
                job=g.job,
                need_from=g.need_from,
                blockers=tuple(g.blockers),
            )
        )
    gangs.sort(key=lambda g: (_gang_rank(g), g.since, g.namespace, g.name))
    return tuple(gangs)


def _queue_entries(plan: Plan, counts: Counter[tuple[str, Reason]]) -> dict[str, QueueEntry]:
    """Each queue's headroom and what bounded it, its jobs (`counts`: by queue and
    reason) and gangs counted by reason."""
    jobs = _per_queue(counts)
    gangs = _per_queue(Counter((g.queue, g.reason) for g in plan.gangs))
    return {
        name: _queue_entry(q, jobs.get(name, Counter()), gangs.get(name, Counter()))
        for name, q in sorted(plan.queues.items())
    }


def _per_queue(counts: Counter[tuple[str, Reason]]) -> dict[str, Counter[str]]:
    """(queue, reason) counts as each queue's counts by reason."""
    out: dict[str, Counter[str]] = {}
    for (queue, reason), n in counts.items():
        out.setdefault(queue, Counter())[_VALUE[reason]] = n
    return out


# the last status's jobs by ref, with the tuple they were read from (see _by_ref)
_BY_REF: list[tuple[tuple[ElasticJob, ...], dict[ObjectRef, ElasticJob]]] = []


def _by_ref(jobs: tuple[ElasticJob, ...]) -> Mapping[ObjectRef, ElasticJob]:
    """The jobs by ref; for the same tuple as the last status's, that status's (a steady
    cluster's caches hand over the same tuple of the same jobs every cycle: hashing 10k
    refs again was a sixth of building the status)."""
    last = _BY_REF[0] if _BY_REF else None
    if last is not None and last[0] is jobs:
        return last[1]
    found = {j.ref: j for j in jobs}
    if isinstance(jobs, tuple):  # a list may change in place: not kept
        _BY_REF[:] = [(jobs, found)]
    return found


def _job_entry(
    d: Decision, job: ElasticJob | None, since: datetime, resize: Resize | None
) -> JobEntry:
    return JobEntry(
        namespace=d.ref.namespace,
        name=d.ref.name,
        kind=d.ref.kind,
        queue=d.queue,
        reason=d.reason.value,
        message=d.message,
        since=since,
        replicas=d.current,
        active=job.active if job is not None else None,
        target=d.target,
        min_replicas=d.min_replicas,
        max_replicas=d.max_replicas,
        gpus_per_worker=d.gpus_per_worker,
        gpus=d.gpus,
        priority=job.priority if job is not None else None,
        last_resize=job.last_scale_time if job is not None else None,
        restart_cost=_restart(d),
        notes=notes_said(d),
        resize=resize,
    )


_QUEUE = operator.attrgetter("queue")
_REASON = operator.attrgetter("reason")


def _counted(
    decisions: tuple[Decision, ...], memo: StatusMemo | None
) -> Counter[tuple[str, Reason]]:
    """Every job counted by queue and reason."""
    if memo is not None and memo.counts is not None:
        return memo.counts
    # pairs made and counted in C: a cluster that keeps its finished jobs lists 60k
    counts = Counter(zip(map(_QUEUE, decisions), map(_REASON, decisions), strict=True))
    if memo is not None:
        memo.counts = counts
    return counts


def _entries(
    chosen: list[_Ranked],
    decisions: tuple[Decision, ...],
    elastic: Mapping[ObjectRef, ElasticJob],
    memo: StatusMemo | None,
) -> list[JobEntry]:
    """The listed jobs' entries: the last status's entry of a job when it was made of the
    same decision, job, since and resize."""
    last = memo.entries if memo is not None else {}
    kept: dict[int, _KeptEntry] = {}
    out: list[JobEntry] = []
    for c in chosen:
        d = decisions[c[5]]
        job, since, resize = elastic.get(d.ref), c[1], c[6]
        k = last.get(id(d))
        same = k is not None and k[0] is d and k[1] is job and k[2] is since and k[3] is resize
        entry = k[4] if same and k is not None else _job_entry(d, job, since, resize)
        kept[id(d)] = (d, job, since, resize, entry)
        out.append(entry)
    if memo is not None:
        memo.entries = kept
    return out


def bounded(
    doc: StatusDoc, max_jobs: int, max_bytes: int | None = MAX_BYTES, memo: StatusMemo | None = None
) -> StatusDoc:
    """At most `max_jobs` jobs and gangs each, the rest counted by reason; then fewer
    until the document fits in `max_bytes`."""

    def cut(n_jobs: int, n_gangs: int) -> StatusDoc:
        rest_jobs = Counter(j.reason for j in doc.jobs[n_jobs:])
        rest_gangs = Counter(g.reason for g in doc.gangs[n_gangs:])
        return replace(
            doc,
            jobs=doc.jobs[:n_jobs],
            gangs=doc.gangs[:n_gangs],
            omitted_jobs=dict(sorted((Counter(doc.omitted_jobs) + rest_jobs).items())),
            omitted_gangs=dict(sorted((Counter(doc.omitted_gangs) + rest_gangs).items())),
        )

    n_jobs, n_gangs = min(max_jobs, len(doc.jobs)), min(max_jobs, len(doc.gangs))
    out = cut(n_jobs, n_gangs)
    margin = None  # the least distance of a size checked from the bound
    while max_bytes is not None:
        size = len(dump(out, memo))
        margin = abs(size - max_bytes) if margin is None else min(margin, abs(size - max_bytes))
        if size <= max_bytes or not (n_jobs or n_gangs):
            break
        n_jobs, n_gangs = n_jobs // 2, n_gangs // 2  # halving: a few dumps at most
        out = cut(n_jobs, n_gangs)
    if memo is not None:
        memo.margin = margin
    return out


def changed(old: StatusDoc | None, new: StatusDoc) -> bool:
    """Whether `new` says anything `old` did not (the cycle's time and duration aside):
    a steady cluster writes only its heartbeat."""
    if old is None:
        return True
    quiet = replace(old.cycle, duration_seconds=0.0)
    return replace(old, time=new.time, cycle=quiet) != replace(
        new, cycle=replace(new.cycle, duration_seconds=0.0)
    )


def with_cycle(doc: StatusDoc, now: datetime, cycle: Cycle) -> StatusDoc:
    """A cycle that made no plan (error, timeout): the last plan's picture, with this
    cycle's result and message."""
    return replace(doc, time=now, cycle=cycle)
