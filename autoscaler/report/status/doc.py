"""The status document's types: what one cycle decided of each queue, gang and job, in the
order a reader (and a cut list) takes them, and what one daemon's next status takes up
from its last (StatusMemo). Pure data; codec.py writes and reads it, build.py makes it."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from functools import cache
from itertools import compress

from autoscaler.core.model import Decision, ElasticJob
from autoscaler.core.reasons import Reason

# a memo is patched where at most one decision in this many is new (else made anew)
_PATCHED_AT_MOST = 8
SCHEMA = "elastic-autoscaler.io/status/v1"
DATA_KEY = "status"  # the ConfigMap key holding the document (JSON)
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
_STEADY = {r.value for r in (Reason.AT_MAX, Reason.NOT_ELASTIC, Reason.PAUSED, Reason.FINISHED)}
_STEADY |= {r.value for r in (Reason.SUSPENDED, Reason.TERMINATING, Reason.OPERATOR_HPA)}


class StatusError(ValueError):
    """A status object that cannot be read; the message says what is wrong with it."""


# ---- the document -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resize:
    """Where one job's resize stands (ResizeState), since when, and the API's message."""

    state: ResizeState
    from_replicas: int | None
    to_replicas: int | None
    since: datetime
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class JobEntry:
    """One listed job: its reason and since when, its sizes, and its resize if any."""

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
    # GPUs it holds at `replicas`, its Master's (and other pods its gang counts) included:
    # Decision.gpus, the count every output shows beside its workers
    gpus: int | None = None
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
    """One waiting gang: what happens to it (its reason), since when, and who gives way."""

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
    """One queue: its headroom and what bounded it, GPUs in flight, its jobs and gangs
    counted by reason."""

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
    """The cycle that made the document: its result, how long it took, what it counted."""

    result: str
    message: str = ""
    duration_seconds: float = 0.0
    jobs: int = 0
    actions: int = 0
    gangs: int = 0
    writes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StatusDoc:
    """The whole document: when, who wrote it, the cycle, the queues, the listed gangs
    and jobs most urgent first, and what was left out counted by reason."""

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


# reasons _rank_of tells apart (plain strings: an entry's reason is the value)
_HOLD_REFUSED = Reason.WRITE_REFUSED.value
_FINISHED = Reason.FINISHED.value


def rank(entry: JobEntry) -> int:
    changed = entry.target is not None and entry.target != entry.replicas
    return _rank_of(entry.resize, changed, entry.reason)


def _rank_of(r: Resize | None, changed: bool, reason: str) -> int:
    if r is not None and r.state is ResizeState.REJECTED:
        return RANK_REJECTED
    if (r is not None and r.state in _RESIZING) or changed:
        return RANK_RESIZING
    if reason.startswith("Invalid") or reason == _HOLD_REFUSED:
        return RANK_INVALID
    if reason.startswith("Hold") and reason not in _STEADY:
        return RANK_HELD
    if r is not None:
        return RANK_SETTLED
    return RANK_FINISHED if reason == _FINISHED else RANK_REST


# a reason's string by member: an Enum's `.value` is a descriptor call, and a status
# reads one for every job each cycle
_VALUE: dict[Reason, str] = {r: r.value for r in Reason}


@cache
def _plain_rank(changed: bool, reason: str) -> int:
    """The rank of a job with no resize to tell (most of them), by what it depends on."""
    return _rank_of(None, changed, reason)


# a decision with no history and no write, ranked: (rank, namespace, name, kind, index)
_Plain = tuple[int, str, str, str, int]
# a listed job's entry with what it was made of: (decision, job, since, resize, entry)
_KeptEntry = tuple[Decision, "ElasticJob | None", datetime, "Resize | None", JobEntry]


@dataclass(slots=True)
class StatusMemo:
    """What one daemon's last status leaves for its next (Controller keeps one): a steady
    cycle's plan hands over the same Decision objects (planner.py keeps a decision that
    did not change), and ranking, counting, building and dumping them again was most of
    a status at 10k jobs (docs/benchmarks.md). Each part is taken up only when
    everything it was made of is the same: the same objects (kept here, so an id cannot
    match a new object at an old address), or for a queue the same JSON. A status built
    with a memo is the one built without, byte for byte (tests/test_status_memo.py)."""

    decisions: tuple[Decision, ...] = ()  # the last plan's; what follows was read of them
    counts: Counter[tuple[str, Reason]] | None = None
    # which decisions are ranked one by one (split.py's Split: it reads this module)
    split: object | None = None
    # the places of the decisions that changed since the split was made, each with the
    # one it held then: the split is patched there (split.py), not made anew
    moved: dict[int, Decision] | None = None
    entries: dict[int, _KeptEntry] = field(default_factory=dict)  # by id() of the decision
    rows: dict[int, tuple[JobEntry, str]] = field(default_factory=dict)  # by id() of entry
    queues: dict[str, str] = field(default_factory=dict)  # a queue's JSON -> its lines
    # the last document with everything it was built of, when building it again from
    # the same inputs gives it again (build.py _Steady); None when it might not
    steady: object | None = None
    # the least distance, in bytes, between a size the last bounding checked and the
    # bound (None: nothing checked): how far another cycle section is from another cut
    margin: int | None = None

    def take_up(self, decisions: tuple[Decision, ...]) -> None:
        """This plan's decisions: what was read of the last plan's is kept where these
        are the same objects in the same places, patched where a few of them are new
        (a live cluster's few every cycle among tens of thousands kept), else forgotten."""
        last = self.decisions
        if len(decisions) == len(last):
            places = list(compress(range(len(last)), map(operator.is_not, decisions, last)))
            if not places:
                return
            if len(places) <= len(last) // _PATCHED_AT_MOST:
                self._patch(places, last, decisions)
                return
        self.decisions, self.counts, self.split, self.moved = tuple(decisions), None, None, None

    def _patch(
        self, places: list[int], last: tuple[Decision, ...], decisions: tuple[Decision, ...]
    ) -> None:
        """The decisions at `places` are new: counted again, and noted for the split."""
        counts = self.counts
        if counts is not None:
            for i in places:
                old, new = last[i], decisions[i]
                before, now = (old.queue, old.reason), (new.queue, new.reason)
                if before != now:
                    counts[before] -= 1
                    if not counts[before]:
                        del counts[before]  # as a count made anew would not have it
                    counts[now] += 1
        if self.split is not None and self.moved is None:
            self.moved = {i: last[i] for i in places}  # the ones the split was made with
        else:  # no split, or one not patched since the last take_up: made anew
            self.split, self.moved = None, None
        self.decisions = tuple(decisions)

    def take_moved(self) -> dict[int, Decision]:
        """The places `take_up` noted for the split (each with the decision the split was
        made with), handed over once."""
        moved, self.moved = self.moved, None
        return moved or {}
