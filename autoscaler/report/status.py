"""The status object: what the last cycle decided and why, in a ConfigMap any user can read
with kubectl (in the spirit of cluster-autoscaler's status ConfigMap).

Pure: `build_status` turns one cycle (snapshot, plan, write outcomes) and the previous
status into the next; `to_data`/`from_data` are the ConfigMap's `data`. The writer
(status_writer.py) and the CLI (`status`, `explain`) are the I/O around it.

What it holds: when, the cycle's result, per queue the headroom and what bounded it, GPUs
in flight, waiting gangs and what happens to them, grants and reclaims, and the jobs one by
one, most urgent first: refused by the API, resizing, invalid, held. Each job carries its
reason and since when, and a resize state (`requested -> running -> settled`, or
`rejected` with the API's message). Why the resize state lives here and not in an
annotation on the job: a refused write cannot annotate the job it was refused on (the
same policy or RBAC refuses the annotation), and every state change written onto the job
would bump its resourceVersion, wake training-operator and race its own writes, at 10k
jobs once per job per step. One object in our namespace costs one write per change.

Bounded at any cluster size: jobs and gangs listed one by one are capped at
`status_max_jobs` each (the rest counted per queue and reason, which are always
complete), messages are cut at MESSAGE_MAX characters, and the whole document is kept
under MAX_BYTES (far below the 1 MiB a ConfigMap may hold) by listing fewer jobs.
"""

from __future__ import annotations

import heapq
import json
import operator
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cache
from typing import Any

from autoscaler.core.model import (
    Bound,
    ClusterSnapshot,
    Decision,
    ElasticJob,
    ObjectRef,
    Plan,
    QueueSummary,
    Reason,
)
from autoscaler.core.resources import rfc3339
from autoscaler.read.fields import BadField, parse_time

from .render import headroom_words

SCHEMA = "elastic-autoscaler.io/status/v1"
DATA_KEY = "status"  # the ConfigMap key holding the document (JSON)
MESSAGE_MAX = 300
MAX_BYTES = 512 * 1024


class ResizeState(StrEnum):
    """Where a resize of one job stands."""

    REQUESTED = "requested"  # the new size is written; not every worker runs at it yet
    RUNNING = "running"  # every worker of the new size is active (the job restarted)
    SETTLED = "settled"  # still so a cycle later: done; listed until its cooldown ends
    REJECTED = "rejected"  # the API refused the write (admission, validation, RBAC)
    RETRYING = "retrying"  # not written this cycle (conflict, throttled, server error)
    WOULD_RESIZE = "would-resize"  # dry run: planned, never written


# rank of a listed job: lower is listed first, and kept when the list is cut
# (RANK_FINISHED: a finished job never runs again: listed after every other, the first
# cut; a cluster that keeps its finished jobs lists tens of thousands, and they must not
# crowd out the jobs that run)
RANK_REJECTED, RANK_RESIZING, RANK_INVALID, RANK_HELD, RANK_SETTLED, RANK_REST, RANK_FINISHED = (
    range(7)
)
_RESIZING = {ResizeState.REQUESTED, ResizeState.RUNNING, ResizeState.RETRYING}
_RESIZING |= {ResizeState.WOULD_RESIZE}
# reasons of jobs that do not wait for anything: listed last
_STEADY = {"HoldAtMax", "NotElastic", "SkipPaused", "SkipFinished", "SkipSuspended"}
_STEADY |= {"SkipTerminating", "SkipOperatorHpa"}
# write outcomes (actuator.Outcome values; faults may add more) by what the resize does next
_REJECTED_OUTCOMES = {"denied", "refused"}
_RETRY_OUTCOMES = {"conflict", "throttled", "deferred", "backoff", "error"}


class StatusError(ValueError):
    """A status object that cannot be read; the message says what is wrong with it."""


# ---- the document -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resize:
    state: ResizeState
    from_replicas: int | None
    to_replicas: int | None
    since: datetime
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class JobEntry:
    namespace: str
    name: str
    kind: str
    queue: str
    reason: str
    message: str
    since: datetime
    replicas: int | None = None  # the worker spec now
    active: int | None = None  # workers running
    target: int | None = None  # what the plan wants
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpus_per_worker: int | None = None
    priority: int | None = None
    last_resize: datetime | None = None
    restart_cost: str = ""  # "95s measured"
    notes: tuple[str, ...] = ()
    resize: Resize | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}/{self.kind}"


@dataclass(frozen=True, slots=True)
class GangEntry:
    namespace: str
    name: str
    queue: str
    gpus: int
    reason: str
    message: str
    since: datetime  # waiting since (the PodGroup's creation)
    victims: tuple[str, ...] = ()
    owner: str = ""  # the job that made it, kind/name
    job: str = ""  # the same, kind/namespace/name
    need_from: str = ""  # where its GPUs were read: pods, template, minResources
    blockers: tuple[str, ...] = ()  # elastic jobs that did not give way, and why


@dataclass(frozen=True, slots=True)
class QueueEntry:
    name: str
    status: str  # "ok" or the hold reason of the whole queue
    message: str = ""
    headroom_gpus: float | None = None
    bound: str = ""
    plugin: str = ""
    headroom: str = ""  # headroom_words(): the limits, the inputs, the result
    limits: Mapping[str, float] = field(default_factory=dict)
    inputs: Mapping[str, float] = field(default_factory=dict)
    free_gpus: float | None = None
    inflight_gpus: int = 0
    releasing_gpus: int = 0
    pending_gpus: int = 0
    granted_gpus: int = 0
    reclaimed_gpus: int = 0
    trimmed_gpus: int = 0
    jobs: Mapping[str, int] = field(default_factory=dict)  # jobs by reason: complete
    gangs: Mapping[str, int] = field(default_factory=dict)  # waiting gangs by reason


@dataclass(frozen=True, slots=True)
class Cycle:
    result: str
    message: str = ""
    duration_seconds: float = 0.0
    jobs: int = 0
    actions: int = 0
    gangs: int = 0
    writes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StatusDoc:
    time: datetime  # the cycle's `now`
    cycle: Cycle
    mode: str = "live"  # live | dry-run | plan (a one-off `--live` reading)
    identity: str = ""
    version: str = ""
    heartbeat_seconds: float = 0.0
    queues: Mapping[str, QueueEntry] = field(default_factory=dict)
    jobs: tuple[JobEntry, ...] = ()
    gangs: tuple[GangEntry, ...] = ()
    omitted_jobs: Mapping[str, int] = field(default_factory=dict)  # by reason
    omitted_gangs: Mapping[str, int] = field(default_factory=dict)

    def job(self, namespace: str, name: str) -> list[JobEntry]:
        return [j for j in self.jobs if j.namespace == namespace and j.name == name]


# ---- one cycle -> the next document --------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What became of one planned write (from actuator.ActionResult)."""

    namespace: str
    name: str
    kind: str
    outcome: str  # actuator.Outcome value
    message: str = ""


def _cut(text: str) -> str:
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."


def _api_refused(outcome: WriteOutcome) -> bool:
    """The API refused the write for good: a 4xx other than conflict/gone/throttled.
    (The actuator on main reports those as `error` with `HTTP 4xx ...` text.)"""
    if outcome.outcome in _REJECTED_OUTCOMES:
        return True
    text = outcome.message
    return (
        outcome.outcome == "error"
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

    def kept(state: ResizeState) -> datetime:
        same = before is not None and before.state is state and before.to_replicas == d.target
        return before.since if same and before is not None else now

    if written is not None:
        if written.outcome == "applied":
            return Resize(
                ResizeState.REQUESTED, d.current, d.target, now, d.reason.value, _cut(d.message)
            )
        if written.outcome == "dry_run":
            state = ResizeState.WOULD_RESIZE
            return Resize(state, d.current, d.target, kept(state), d.reason.value, _cut(d.message))
        if _api_refused(written):
            state = ResizeState.REJECTED
            return Resize(
                state, d.current, d.target, kept(state), d.reason.value, _cut(written.message)
            )
        if written.outcome in _RETRY_OUTCOMES:
            state = ResizeState.RETRYING
            return Resize(
                state, d.current, d.target, kept(state), d.reason.value, _cut(written.message)
            )
        if written.outcome == "gone":
            return None
        return before  # not the leader: nothing happened
    if before is None:
        return None
    if before.state is ResizeState.REJECTED:
        # kept while the plan still holds on the refusal
        return before if d.reason.value == "HoldRefused" else None
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


def rank(entry: JobEntry) -> int:
    changed = entry.target is not None and entry.target != entry.replicas
    return _rank_of(entry.resize, changed, entry.reason)


def _rank_of(r: Resize | None, changed: bool, reason: str) -> int:
    if r is not None and r.state is ResizeState.REJECTED:
        return RANK_REJECTED
    if (r is not None and r.state in _RESIZING) or changed:
        return RANK_RESIZING
    if reason.startswith("Invalid") or reason == "HoldRefused":
        return RANK_INVALID
    if reason.startswith("Hold") and reason not in _STEADY:
        return RANK_HELD
    if r is not None:
        return RANK_SETTLED
    return RANK_FINISHED if reason == "SkipFinished" else RANK_REST


@cache
def _plain_rank(changed: bool, reason: str) -> int:
    """The rank of a job with no resize to tell (most of them), by what it depends on."""
    return _rank_of(None, changed, reason)


def _gang_rank(g: GangEntry) -> int:
    order = (
        "GangCoveredByReclaim",
        "GangFits",
        "GangUncoverable",
        "GangReclaimDoesNotPay",
        "GangBlockedByStarvingGang",
    )
    return order.index(g.reason) if g.reason in order else len(order)


def _queue_entry(q: QueueSummary, jobs: Counter[str], gangs: Counter[str]) -> QueueEntry:
    headroom, bound = q.headroom_gpus, q.bound.value if q.bound else ""
    words = headroom_words(q) if q.bound is not None else ""
    if headroom is None and q.reason is None and q.free_gpus is not None:
        # free GPUs taken as given (free_gpus_query, a snapshot's free_gpus), no nodes
        headroom, bound = q.free_gpus, Bound.GIVEN.value
        words = f"given: {q.free_gpus:g} free GPU(s) as read -> {q.free_gpus:g} GPU(s)"
    return QueueEntry(
        name=q.name,
        status=q.reason.value if q.reason else "ok",
        # what of its Queue object bounds nothing (QueueSummary.notes) when nothing else
        message=_cut(q.message or "; ".join(q.notes)),
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
    return bounded(doc, max_jobs, max_bytes, memo)


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
    named_at, plain = _split_named(plan.decisions, named, max_jobs, memo)
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
                message=_cut(g.message),
                since=p.created if p is not None else plan.now,
                victims=tuple(f"{v.namespace}/{v.name}" for v in g.victims),
                owner=owner,
                job=g.job,
                need_from=g.need_from,
                blockers=tuple(_cut(b) for b in g.blockers),
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


# a reason's string by member: an Enum's `.value` is a descriptor call, and a status
# reads one for every job each cycle
_VALUE: dict[Reason, str] = {r: r.value for r in Reason}

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
        message=_cut(d.message),
        since=since,
        replicas=d.current,
        active=job.active if job is not None else None,
        target=d.target,
        min_replicas=d.min_replicas,
        max_replicas=d.max_replicas,
        gpus_per_worker=d.gpus_per_worker,
        priority=job.priority if job is not None else None,
        last_resize=job.last_scale_time if job is not None else None,
        restart_cost=_restart(d),
        notes=tuple(_cut(n) for n in d.notes),
        resize=resize,
    )


# ---- what a daemon's next status takes up from its last ---------------------------------

# a decision with no history and no write, ranked: (rank, namespace, name, kind, index)
_Plain = tuple[int, str, str, str, int]
# a listed job's entry with what it was made of: (decision, job, since, resize, entry)
_KeptEntry = tuple[Decision, "ElasticJob | None", datetime, "Resize | None", JobEntry]


@dataclass(slots=True)
class StatusMemo:
    """What one daemon's last status leaves for its next (Controller keeps one): a steady
    cycle's plan hands over the same Decision objects (planner.py keeps a decision that
    did not change), and ranking, counting, building and dumping them again was most of
    a status at 10k jobs (docs/benchmarks.md, [placement] #27 fifth round). Each part is
    taken up only when everything it was made of is the same: the same objects (kept
    here, so an id cannot match a new object at an old address), or for a queue the
    same JSON. A status built with a memo is the one built without, byte for byte
    (tests/test_status_memo.py)."""

    decisions: tuple[Decision, ...] = ()  # the last plan's; what follows was read of them
    counts: Counter[tuple[str, Reason]] | None = None
    # the names with a history or a write, max_jobs, where those names are in the
    # decisions, and the max_jobs first of the others
    split: tuple[frozenset[str], int, list[int], list[_Plain]] | None = None
    entries: dict[int, _KeptEntry] = field(default_factory=dict)  # by id() of the decision
    rows: dict[int, tuple[JobEntry, str]] = field(default_factory=dict)  # by id() of entry
    queues: dict[str, str] = field(default_factory=dict)  # a queue's JSON -> its lines

    def take_up(self, decisions: tuple[Decision, ...]) -> None:
        """This plan's decisions: what was read of the last plan's is forgotten unless
        these are the same objects in the same order."""
        last = self.decisions
        if len(decisions) == len(last) and all(map(operator.is_, decisions, last)):
            return
        self.decisions, self.counts, self.split = tuple(decisions), None, None


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


def _split_named(
    decisions: tuple[Decision, ...], named: frozenset[str], max_jobs: int, memo: StatusMemo | None
) -> tuple[list[int], list[_Plain]]:
    """Where the decisions named in `named` are, and the `max_jobs` first of the others
    ranked (each is listed since now with no resize: its place depends on it alone, and
    no more of them than `max_jobs` can be listed)."""
    if memo is not None and memo.split is not None and memo.split[:2] == (named, max_jobs):
        return memo.split[2], memo.split[3]
    named_at: list[int] = []
    plain: list[_Plain] = []
    for i, d in enumerate(decisions):
        ref = d.ref
        if ref.name in named:
            named_at.append(i)
            continue
        changed_size = d.target is not None and d.target != d.current
        rank = _plain_rank(changed_size, _VALUE[d.reason])
        plain.append((rank, ref.namespace, ref.name, ref.kind, i))
    if len(plain) > max_jobs:
        plain = heapq.nsmallest(max_jobs, plain)
    if memo is not None:
        memo.split = (named, max_jobs, named_at, plain)
    return named_at, plain


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
    while max_bytes is not None and len(dump(out, memo)) > max_bytes and (n_jobs or n_gangs):
        n_jobs, n_gangs = n_jobs // 2, n_gangs // 2  # halving: a few dumps at most
        out = cut(n_jobs, n_gangs)
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


# ---- to and from the ConfigMap ---------------------------------------------------------


def _drop_empty(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v not in (None, "", (), [], {})}


def _t(when: datetime | None) -> str | None:
    return rfc3339(when) if when is not None else None


def job_dict(j: JobEntry) -> dict[str, Any]:
    out = _drop_empty(
        {
            "job": f"{j.namespace}/{j.name}",
            "kind": j.kind,
            "queue": j.queue,
            "reason": j.reason,
            "message": j.message,
            "since": _t(j.since),
            "replicas": j.replicas,
            "active": j.active,
            "target": j.target,
            "min": j.min_replicas,
            "max": j.max_replicas,
            "gpus_per_worker": j.gpus_per_worker,
            "priority": j.priority,
            "last_resize": _t(j.last_resize),
            "restart_cost": j.restart_cost,
            "notes": list(j.notes),
        }
    )
    if j.resize is not None:
        r = j.resize
        out["resize"] = _drop_empty(
            {
                "state": r.state.value,
                "from": r.from_replicas,
                "to": r.to_replicas,
                "since": _t(r.since),
                "reason": r.reason,
                "message": r.message,
            }
        )
    return out


def gang_dict(g: GangEntry) -> dict[str, Any]:
    return _drop_empty(
        {
            "gang": f"{g.namespace}/{g.name}",
            "queue": g.queue,
            "gpus": g.gpus,
            "reason": g.reason,
            "message": g.message,
            "waiting_since": _t(g.since),
            "victims": list(g.victims),
            "owner": g.owner,
            "job": g.job,
            "need_from": g.need_from,
            "blockers": list(g.blockers),
        }
    )


def queue_dict(q: QueueEntry) -> dict[str, Any]:
    return {
        "status": q.status,
        "message": q.message,
        "headroom_gpus": q.headroom_gpus,
        "bound": q.bound or None,
        "plugin": q.plugin or None,
        "headroom": q.headroom,
        "limits": dict(q.limits),
        "inputs": dict(q.inputs),
        "free_gpus": q.free_gpus,
        "inflight_gpus": q.inflight_gpus,
        "releasing_gpus": q.releasing_gpus,
        "pending_gpus": q.pending_gpus,
        "granted_gpus": q.granted_gpus,
        "reclaimed_gpus": q.reclaimed_gpus,
        "trimmed_gpus": q.trimmed_gpus,
        "jobs": dict(q.jobs),
        "gangs": dict(q.gangs),
    }


def to_dict(doc: StatusDoc) -> dict[str, Any]:
    return {
        **_head(doc),
        "queues": {name: queue_dict(q) for name, q in doc.queues.items()},
        "gangs": [gang_dict(g) for g in doc.gangs],
        "jobs": [job_dict(j) for j in doc.jobs],
        "omitted": {"jobs": dict(doc.omitted_jobs), "gangs": dict(doc.omitted_gangs)},
    }


def _head(doc: StatusDoc) -> dict[str, Any]:
    """The document's first keys: when, who wrote it, the cycle."""
    c = doc.cycle
    return {
        "schema": SCHEMA,
        "time": rfc3339(doc.time),
        "writer": _drop_empty(
            {
                "mode": doc.mode,
                "identity": doc.identity,
                "version": doc.version,
                "heartbeat_seconds": doc.heartbeat_seconds or None,
            }
        ),
        "cycle": _drop_empty(
            {
                "result": c.result,
                "message": _cut(c.message),
                "duration_seconds": round(c.duration_seconds, 3),
                "jobs": c.jobs,
                "actions": c.actions,
                "gangs": c.gangs,
                "writes": dict(sorted(c.writes.items())),
            }
        ),
    }


def dump(doc: StatusDoc, memo: StatusMemo | None = None) -> str:
    """The document as the ConfigMap holds it: JSON (ten times faster to write than YAML,
    and `jq` reads it), the header and queues one field a line, each job and gang on one
    line of its own, so `kubectl get ... | grep NAMESPACE/NAME` shows a whole entry.
    `memo`: the last status's lines of the same jobs and queues taken up (StatusMemo)."""
    parts = [
        json.dumps(_head(doc), indent=1, ensure_ascii=False)[:-2],  # without "\n}"
        f' "queues": {_queues_text(doc.queues, memo)}',
    ]
    gangs = [_line(gang_dict(g)) for g in doc.gangs]
    for key, rows in (("gangs", gangs), ("jobs", _job_lines(doc.jobs, memo))):
        lines = ",\n".join(rows)
        parts.append(f' "{key}": [\n{lines}\n ]' if rows else f' "{key}": []')
    omitted = {"jobs": dict(doc.omitted_jobs), "gangs": dict(doc.omitted_gangs)}
    parts.append(f' "omitted": {json.dumps(omitted)}')
    return ",\n".join(parts) + "\n}\n"


def _line(item: dict[str, Any]) -> str:
    return "  " + json.dumps(item, ensure_ascii=False)


def _job_lines(jobs: tuple[JobEntry, ...], memo: StatusMemo | None) -> list[str]:
    """Each job's line; the last dump's line of the same entry object when kept."""
    last = memo.rows if memo is not None else {}
    rows: dict[int, tuple[JobEntry, str]] = {}
    lines = []
    for j in jobs:
        k = last.get(id(j))
        if k is None or k[0] is not j:
            k = (j, _line(job_dict(j)))
        rows[id(j)] = k
        lines.append(k[1])
    if memo is not None:
        memo.rows = rows
    return lines


def _queues_text(queues: Mapping[str, QueueEntry], memo: StatusMemo | None) -> str:
    """The queues as `json.dumps(..., indent=1)` writes them one level in; each queue's
    lines taken up from the last dump when its JSON is the same (the indented writer is
    pure Python, and ten times slower than the compact one the key is made with)."""
    if not queues:
        return "{}"
    last = memo.queues if memo is not None else {}
    kept: dict[str, str] = {}
    items = []
    for name, q in queues.items():
        data = queue_dict(q)
        key = json.dumps(data, ensure_ascii=False)
        # JSON strings hold no raw newline: each line of the queue goes two spaces in
        text = last.get(key) or json.dumps(data, indent=1, ensure_ascii=False).replace("\n", "\n  ")
        kept[key] = text
        items.append(f"  {json.dumps(name, ensure_ascii=False)}: {text}")
    if memo is not None:
        memo.queues = kept
    return "{\n" + ",\n".join(items) + "\n }"


def to_data(doc: StatusDoc) -> dict[str, str]:
    """The ConfigMap's `data`."""
    return {DATA_KEY: dump(doc)}


# reading back: tolerant of fields a newer or older writer adds or lacks


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StatusError(f"{where} is not a mapping")
    return value


def _time(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        value = value.isoformat()
    try:
        return parse_time(value, where)
    except BadField as exc:
        raise StatusError(str(exc)) from None


def _opt_time(value: Any, where: str) -> datetime | None:
    return None if value is None else _time(value, where)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _counts(value: Any) -> dict[str, int]:
    return {str(k): v for k, v in (value or {}).items() if isinstance(v, int)}


def _split(ref: Any, where: str) -> tuple[str, str]:
    if not isinstance(ref, str) or ref.count("/") != 1:
        raise StatusError(f"{where} is not namespace/name: {ref!r}")
    ns, name = ref.split("/")
    return ns, name


def from_dict(data: Any) -> StatusDoc:
    top = _map(data, "the status document")
    if top.get("schema") != SCHEMA:
        raise StatusError(f"schema is {top.get('schema')!r}, not {SCHEMA}")
    writer = _map(top.get("writer"), "writer")
    omitted = _map(top.get("omitted"), "omitted")
    return StatusDoc(
        time=_time(top.get("time"), "time"),
        cycle=_cycle_from(_map(top.get("cycle"), "cycle")),
        mode=str(writer.get("mode") or ""),
        identity=str(writer.get("identity") or ""),
        version=str(writer.get("version") or ""),
        heartbeat_seconds=_num(writer.get("heartbeat_seconds")) or 0.0,
        queues={
            str(name): _queue_from(str(name), _map(raw, f"queues.{name}"))
            for name, raw in _map(top.get("queues"), "queues").items()
        },
        jobs=tuple(
            _job_from(_map(raw, f"jobs[{i}]"), f"jobs[{i}]")
            for i, raw in enumerate(top.get("jobs") or [])
        ),
        gangs=tuple(
            _gang_from(_map(raw, f"gangs[{i}]"), f"gangs[{i}]")
            for i, raw in enumerate(top.get("gangs") or [])
        ),
        omitted_jobs=_counts(omitted.get("jobs")),
        omitted_gangs=_counts(omitted.get("gangs")),
    )


def _cycle_from(c: Mapping[str, Any]) -> Cycle:
    return Cycle(
        result=str(c.get("result", "")),
        message=str(c.get("message", "")),
        duration_seconds=_num(c.get("duration_seconds")) or 0.0,
        jobs=_int(c.get("jobs")) or 0,
        actions=_int(c.get("actions")) or 0,
        gangs=_int(c.get("gangs")) or 0,
        writes=_counts(c.get("writes")),
    )


def _queue_from(name: str, q: Mapping[str, Any]) -> QueueEntry:
    return QueueEntry(
        name=name,
        status=str(q.get("status", "")),
        message=str(q.get("message") or ""),
        headroom_gpus=_num(q.get("headroom_gpus")),
        bound=str(q.get("bound") or ""),
        plugin=str(q.get("plugin") or ""),
        headroom=str(q.get("headroom") or ""),
        limits={str(k): float(v) for k, v in _map(q.get("limits"), "limits").items()},
        inputs={str(k): float(v) for k, v in _map(q.get("inputs"), "inputs").items()},
        free_gpus=_num(q.get("free_gpus")),
        inflight_gpus=_int(q.get("inflight_gpus")) or 0,
        releasing_gpus=_int(q.get("releasing_gpus")) or 0,
        pending_gpus=_int(q.get("pending_gpus")) or 0,
        granted_gpus=_int(q.get("granted_gpus")) or 0,
        reclaimed_gpus=_int(q.get("reclaimed_gpus")) or 0,
        trimmed_gpus=_int(q.get("trimmed_gpus")) or 0,
        jobs=_counts(q.get("jobs")),
        gangs=_counts(q.get("gangs")),
    )


def _resize_from(r: Mapping[str, Any], where: str) -> Resize:
    try:
        state = ResizeState(str(r.get("state")))
    except ValueError:
        raise StatusError(f"{where}.state {r.get('state')!r} unknown") from None
    return Resize(
        state,
        _int(r.get("from")),
        _int(r.get("to")),
        _time(r.get("since"), f"{where}.since"),
        str(r.get("reason") or ""),
        str(r.get("message") or ""),
    )


def _job_from(j: Mapping[str, Any], where: str) -> JobEntry:
    ns, name = _split(j.get("job"), f"{where}.job")
    raw_resize = j.get("resize")
    resize = (
        None
        if raw_resize is None
        else _resize_from(_map(raw_resize, f"{where}.resize"), f"{where}.resize")
    )
    return JobEntry(
        namespace=ns,
        name=name,
        kind=str(j.get("kind") or ""),
        queue=str(j.get("queue") or ""),
        reason=str(j.get("reason") or ""),
        message=str(j.get("message") or ""),
        since=_time(j.get("since"), f"{where}.since"),
        replicas=_int(j.get("replicas")),
        active=_int(j.get("active")),
        target=_int(j.get("target")),
        min_replicas=_int(j.get("min")),
        max_replicas=_int(j.get("max")),
        gpus_per_worker=_int(j.get("gpus_per_worker")),
        priority=_int(j.get("priority")),
        last_resize=_opt_time(j.get("last_resize"), f"{where}.last_resize"),
        restart_cost=str(j.get("restart_cost") or ""),
        notes=tuple(str(n) for n in j.get("notes") or ()),
        resize=resize,
    )


def _gang_from(g: Mapping[str, Any], where: str) -> GangEntry:
    ns, name = _split(g.get("gang"), f"{where}.gang")
    return GangEntry(
        namespace=ns,
        name=name,
        queue=str(g.get("queue") or ""),
        gpus=_int(g.get("gpus")) or 0,
        reason=str(g.get("reason") or ""),
        message=str(g.get("message") or ""),
        since=_time(g.get("waiting_since"), f"{where}.waiting_since"),
        victims=tuple(str(v) for v in g.get("victims") or ()),
        owner=str(g.get("owner") or ""),
        job=str(g.get("job") or ""),
        need_from=str(g.get("need_from") or ""),
        blockers=tuple(str(b) for b in g.get("blockers") or ()),
    )


def from_data(data: Mapping[str, Any] | None, where: str) -> StatusDoc:
    """The document in a ConfigMap's `data`; StatusError names `where` and the problem."""
    text = (data or {}).get(DATA_KEY)
    if not isinstance(text, str):
        raise StatusError(f"{where}: no data.{DATA_KEY}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StatusError(f"{where}: data.{DATA_KEY} is not JSON: {exc}") from None
    try:
        return from_dict(data)
    except (StatusError, TypeError, ValueError) as exc:
        raise StatusError(f"{where}: data.{DATA_KEY}: {exc}") from None
