"""assemble(), kept current from what changed: a churning cluster costs what changed in
it, not what it holds.

`Assembler.assemble(records, changes)` gives what `assemble(records)` gives (a property
test holds the two equal after random changes), from its last assembly and what changed
since (read.records.Changes, kept by the watch caches): with k pods replaced it assembles
again the nodes, jobs and waiting gangs of those k pods, and hands on the very objects
of the last assembly for every job and node that did not change (one assembled again
equal to the last is the last), so the planner's memos, keyed by identity (plan.kept),
hold for them. Assembled whole instead: the first time; a LIST installed anew; a Queue,
PriorityClass or HPA changed; a job or node added or removed; records whose pods have no
keys (a snapshot file); queues whose limits count their pods (queue_allocated and its
kin, summed over every pod); a job listed twice.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from autoscaler.core.model import (
    ElasticJob,
    InvalidGroup,
    Node,
    ObjectRef,
    PendingGroup,
    UnmanagedJob,
)
from autoscaler.read.records import Changes, JobRecord, PodKey, PodUse

from .assemble import (
    Assembled,
    JobContext,
    Records,
    assemble,
    assemble_job,
    owners_gone,
    pending_of,
    resolve_gangs,
)
from .nodes import node_in_use
from .podgroups import podgroup_queues

__all__ = ["Assembler"]

Owner = tuple[str, str, str, str]  # namespace, kind, name, worker group
JobKey = tuple[str, str, str]  # namespace, kind, name


def _job_key(job: ElasticJob | UnmanagedJob) -> JobKey:
    return (job.ref.namespace, job.ref.kind, job.ref.name)


@dataclass
class _Index:
    """The last assembly and what finds its parts again by what changed."""

    records: Records
    out: Assembled
    context: JobContext
    by_node: dict[str, list[PodKey]]  # the bound pods of each node, sorted
    by_owner: dict[Owner, list[PodKey]]  # each worker group's workers (index >= 0)
    # the pods of each waiting gang's PodGroup (namespace/name; the others' are not kept)
    by_group: dict[str, list[PodKey]]
    # each job kind's rank in records.jobs: the jobs are in (rank, namespace, name)
    # order, so a job's place there and in the assembly is found by bisection
    kinds: dict[str, int]
    base: tuple[list[PendingGroup], list[InvalidGroup]]  # pending_of(records)
    waiting: frozenset[str]  # the waiting gangs' PodGroups (namespace/name), of `base`


class _Jobs(Mapping[JobKey, JobRecord]):
    """records.jobs by key, through the index (for owners_gone and resolve_gangs:
    `gangs`, only the jobs whose gang is read)."""

    def __init__(self, ix: _Index, records: Records, gangs: bool = False) -> None:
        self._ix, self._records, self._gangs = ix, records, gangs

    def __getitem__(self, key: JobKey) -> JobRecord:
        at = _job_at(self._ix, self._records, key)
        record = None if at is None else self._records.jobs[at]
        if record is None or (self._gangs and record.gang is None):
            raise KeyError(key)
        return record

    def __iter__(self) -> Iterator[JobKey]:
        return (_job_key(r.job) for r in self._records.jobs)

    def __len__(self) -> int:
        return len(self._records.jobs)


def _rank(kinds: dict[str, int], ref: ObjectRef) -> tuple[int, str, str]:
    return (kinds.get(ref.kind, -1), ref.namespace, ref.name)


def _job_at(ix: _Index, records: Records, key: JobKey) -> int | None:
    """A job's place in records.jobs, if there."""
    ns, kind, name = key
    jobs, want = records.jobs, (ix.kinds.get(kind, -1), ns, name)
    at = bisect_left(jobs, want, key=lambda r: _rank(ix.kinds, r.job.ref))
    return at if at < len(jobs) and _job_key(jobs[at].job) == key else None


def _out_at(ix: _Index, key: JobKey) -> tuple[bool, int] | None:
    """A job's place in the last assembly: among its jobs (True) or unmanaged."""
    ns, kind, name = key
    want = (ix.kinds.get(kind, -1), ns, name)
    for elastic, seq in ((True, ix.out.jobs), (False, ix.out.unmanaged)):
        at = bisect_left(seq, want, key=lambda j: _rank(ix.kinds, j.ref))
        if at < len(seq) and _job_key(seq[at]) == key:
            return elastic, at
    return None


class _Placed(Mapping[Owner, tuple[str, ...]]):
    """worker_nodes(records.pods), read one worker group at a time from the index."""

    def __init__(self, ix: _Index, records: Records) -> None:
        self._ix, self._records = ix, records

    def __getitem__(self, owner: Owner) -> tuple[str, ...]:
        keys = self._ix.by_owner.get(owner)
        if not keys:
            raise KeyError(owner)
        by_index: dict[int, str] = {}
        for pod in _pods(self._records, keys):
            by_index[pod.index] = pod.node
        return tuple(by_index.get(i, "") for i in range(max(by_index) + 1))

    def __iter__(self) -> Iterator[Owner]:
        return iter(self._ix.by_owner)

    def __len__(self) -> int:
        return len(self._ix.by_owner)


def _pod(records: Records, key: PodKey) -> PodUse | None:
    """The pod of `key` among `records.pods` (their keys are sorted), if there."""
    at = bisect_left(records.pod_keys, key)
    if at < len(records.pod_keys) and records.pod_keys[at] == key:
        return records.pods[at]
    return None


def _pods(records: Records, keys: list[PodKey]) -> Iterator[PodUse]:
    for key in keys:
        pod = _pod(records, key)
        if pod is None:
            raise _Lost(key)
        yield pod


class _Lost(Exception):
    """The index and the records disagree: assemble whole."""


def _add(index: dict[Any, list[PodKey]], at: Any, key: PodKey) -> None:
    insort(index.setdefault(at, []), key)


def _drop(index: dict[Any, list[PodKey]], at: Any, key: PodKey) -> None:
    keys = index.get(at)
    if keys is None or key not in keys:
        raise _Lost(key)
    keys.remove(key)
    if not keys:
        del index[at]


class Assembler:
    """`assemble(records)`, kept current between calls (see the module's docstring)."""

    def __init__(self) -> None:
        self._ix: _Index | None = None
        self._last: tuple[Records, Assembled] | None = None

    def assemble(self, records: Records, changes: Changes | None = None) -> Assembled:
        """What `assemble(records)` gives. `changes`: what changed from the records of
        the last call to these (None: not known, assembled whole)."""
        last = self._last
        if last is not None and records is last[0]:
            return last[1]
        out = None
        if last is not None and changes is not None and not changes.whole:
            # the last assembly indexed only now it is needed: not beside a first plan,
            # the daemon's peak of memory
            if self._ix is None or self._ix.records is not last[0]:
                self._ix = _index(*last)
            try:
                out = None if self._ix is None else _update(self._ix, records, changes)
            except _Lost:
                out = None
        if out is None:
            out, self._ix = assemble(records), None
        self._last = (records, out)
        return out


def _index(records: Records, out: Assembled) -> _Index | None:
    """The index of an assembly; None where it cannot be followed (the module's
    docstring): the next is assembled whole."""
    if (
        not records.pods_known
        or len(records.pod_keys) != len(records.pods)
        or any(q.limits or q.capability is not None or q.node_groups for q in records.queues)
        or len(out.jobs) + len(out.unmanaged) != len(records.jobs)
        or len(out.nodes or ()) != len(records.nodes)
        or any(a.name != b.name for a, b in zip(out.nodes or (), records.nodes, strict=True))
    ):
        return None
    by_node: dict[str, list[PodKey]] = {}
    by_owner: dict[Owner, list[PodKey]] = {}
    for key, pod in zip(records.pod_keys, records.pods, strict=True):
        if pod.node:
            by_node.setdefault(pod.node, []).append(key)
        if pod.owner is not None and pod.index >= 0:
            by_owner.setdefault(pod.owner, []).append(key)
    kinds = {k: i for i, k in enumerate(dict.fromkeys(r.job.ref.kind for r in records.jobs))}
    ranks = (_rank(kinds, r.job.ref) for r in records.jobs)
    if any(a >= b for a, b in pairwise(ranks)):
        return None  # not in the caches' order (a snapshot file's)
    context = JobContext.of(records)
    base = pending_of(records, context.priorities)
    waiting = _waiting(base[0])
    ix = _Index(
        records,
        out,
        context,
        by_node,
        by_owner,
        _by_group(records, waiting),
        kinds,
        base,
        waiting,
    )
    return ix


def _waiting(pending: list[PendingGroup]) -> frozenset[str]:
    return frozenset(f"{g.ref.namespace}/{g.ref.name}" for g in pending)


def _by_group(records: Records, waiting: frozenset[str]) -> dict[str, list[PodKey]]:
    """The pods of each waiting gang's PodGroup, in their order."""
    out: dict[str, list[PodKey]] = {}
    for key, pod in zip(records.pod_keys, records.pods, strict=True):
        if pod.group in waiting:
            out.setdefault(pod.group, []).append(key)
    return out


def _node_at(records: Records, name: str) -> int | None:
    """A node's place in records.nodes (sorted by name) and the assembly's nodes."""
    nodes = records.nodes
    at = bisect_left(nodes, name, key=lambda n: n.name)
    return at if at < len(nodes) and nodes[at].name == name else None


@dataclass
class _Touched:
    """What the changes reach: jobs (by key), nodes (by name), PodGroups whose pods
    changed, and the change of each owner's pod count."""

    jobs: set[JobKey]
    nodes: set[str]
    groups: set[str]
    counts: dict[JobKey, int]
    moved_queue: bool = False  # a job assembled again names another queue than before


def _update(ix: _Index, records: Records, changes: Changes) -> Assembled | None:
    """The assembly of `records` from the index of the last and what changed; None
    where the changes go beyond what it follows (a job or node added or removed)."""
    old = ix.records
    if len(records.jobs) != len(old.jobs) or len(records.nodes) != len(old.nodes):
        return None
    touched = _Touched(set(), set(), set(), {})
    for key in changes.jobs:
        at = _job_at(ix, records, key)
        if at is None or _job_key(old.jobs[at].job) != key:
            return None
        touched.jobs.add(key)
    total = ix.out.nodes_total
    for name in changes.nodes:
        at = _node_at(records, name)
        if at is None or old.nodes[at].name != name or total is None:
            return None
        touched.nodes.add(name)
        total += _gpus(records.nodes[at]) - _gpus(old.nodes[at])
    context = ix.context
    if changes.groups:
        queues = podgroup_queues(records.groups)
        was = context.group_queues
        touched.jobs.update(k for k in was.keys() | queues.keys() if was.get(k) != queues.get(k))
        context = replace(context, group_queues=queues)
        ix.base = pending_of(records, context.priorities)
    _move_pods(ix, records, changes, touched)
    if changes.groups and _waiting(ix.base[0]) != ix.waiting:
        ix.waiting = _waiting(ix.base[0])  # other gangs wait: their pods found anew
        ix.by_group = _by_group(records, ix.waiting)
    ix.records, ix.context = records, context
    jobs, unmanaged = _jobs(ix, records, touched)
    if jobs is None or unmanaged is None:
        return None
    out = ix.out
    ix.out = Assembled(
        jobs,
        unmanaged,
        *_pending(ix, records, changes, touched),
        records.queues,
        _nodes(ix, records, touched),
        _counts(out.pods_by_owner, touched.counts),
        out.queue_allocated,
        out.queue_other_gpus,
        out.queue_group_allocated,
        total,
        _job_queues(out, jobs, unmanaged, touched),
    )
    return ix.out


def _job_queues(
    out: Assembled,
    jobs: tuple[ElasticJob, ...],
    unmanaged: tuple[UnmanagedJob, ...],
    touched: _Touched,
) -> frozenset[str] | None:
    """The queues the jobs name: the last assembly's where no job changed queue."""
    if not touched.moved_queue and out.job_queues is not None:
        return out.job_queues
    return frozenset({j.queue for j in jobs} | {u.queue for u in unmanaged})


def _gpus(node: Node) -> int:
    """What a node adds to Volcano's cluster total (Assembled.nodes_total)."""
    return node.allocatable if node.schedulable else 0


def _move_pods(ix: _Index, records: Records, changes: Changes, touched: _Touched) -> None:
    """The changed pods out of the index where they were, into it where they are now;
    what that reaches noted in `touched`."""
    for key, before in changes.pods.items():
        after = _pod(records, key)
        if before == after:
            continue
        if before is not None:
            _unplace(ix, key, before, touched, -1)
        if after is not None:
            _unplace(ix, key, after, touched, 1)


def _unplace(ix: _Index, key: PodKey, pod: PodUse, touched: _Touched, sign: int) -> None:
    """The pod of `key` out of the index (`sign` -1) or into it (1)."""
    move = _add if sign > 0 else _drop
    if pod.node:
        move(ix.by_node, pod.node, key)
        touched.nodes.add(pod.node)
    if pod.owner is not None:
        owner = pod.owner[:3]
        touched.counts[owner] = touched.counts.get(owner, 0) + sign
        if pod.index >= 0:
            move(ix.by_owner, pod.owner, key)
            touched.jobs.add(owner)
    if pod.group:
        if pod.group in ix.waiting:
            move(ix.by_group, pod.group, key)
        touched.groups.add(pod.group)


def _jobs(
    ix: _Index, records: Records, touched: _Touched
) -> tuple[tuple[ElasticJob, ...] | None, tuple[UnmanagedJob, ...] | None]:
    """The jobs assembled again where something of theirs changed, in their places;
    (None, None) where one moved between managed and not (assembled whole then)."""
    out = ix.out
    placed = _Placed(ix, records)
    jobs: list[ElasticJob] | None = None
    unmanaged: list[UnmanagedJob] | None = None
    for key in touched.jobs:
        at = _job_at(ix, records, key)
        if at is None:
            continue  # a pod's owner that is not among the jobs
        job = assemble_job(records.jobs[at], ix.context, placed)
        found = _out_at(ix, key)
        if found is None or found[0] != isinstance(job, ElasticJob):
            return None, None
        place = found[1]
        was = out.jobs[place] if isinstance(job, ElasticJob) else out.unmanaged[place]
        if job == was:
            continue
        touched.moved_queue = touched.moved_queue or job.queue != was.queue
        if isinstance(job, ElasticJob):
            jobs = list(out.jobs) if jobs is None else jobs
            jobs[place] = job
        else:
            unmanaged = list(out.unmanaged) if unmanaged is None else unmanaged
            unmanaged[place] = job
    return (
        out.jobs if jobs is None else tuple(jobs),
        out.unmanaged if unmanaged is None else tuple(unmanaged),
    )


def _pending(
    ix: _Index, records: Records, changes: Changes, touched: _Touched
) -> tuple[tuple[PendingGroup, ...], tuple[InvalidGroup, ...]]:
    """The waiting gangs and invalid PodGroups, resolved again where a PodGroup, a job
    or a waiting gang's pods changed (the same tuples where that gives the same)."""
    out = ix.out
    base, invalid = ix.base
    if not (changes.groups or touched.jobs or not ix.waiting.isdisjoint(touched.groups)):
        return out.pending, out.invalid
    by_group = {n: list(_pods(records, keys)) for n, keys in ix.by_group.items()}
    gangs = _Jobs(ix, records, gangs=True)
    resolved, unknown = resolve_gangs(list(base), records, by_group, gangs)
    pending = tuple(owners_gone(resolved, records, _Jobs(ix, records)))
    invalids = (*invalid, *unknown)
    return (
        out.pending if pending == out.pending else pending,
        out.invalid if invalids == out.invalid else invalids,
    )


def _nodes(ix: _Index, records: Records, touched: _Touched) -> tuple[Node, ...] | None:
    """The nodes whose pods or own record changed, assembled again in their places."""
    out = ix.out.nodes
    if out is None:
        return None
    nodes: list[Node] | None = None
    for name in touched.nodes:
        at = _node_at(records, name)
        if at is None:
            continue  # a pod bound to a node not among the nodes
        node = node_in_use(records.nodes[at], _pods(records, ix.by_node.get(name, [])))
        if node != out[at]:
            nodes = list(out) if nodes is None else nodes
            nodes[at] = node
    return out if nodes is None else tuple(nodes)


def _counts(
    counts: Mapping[JobKey, int] | None, changed: dict[JobKey, int]
) -> Mapping[JobKey, int] | None:
    """pods_by_owner with the changed owners' counts (the same mapping if none)."""
    if counts is None or not any(changed.values()):
        return counts
    out = dict(counts)
    for owner, delta in changed.items():
        n = out.get(owner, 0) + delta
        if n:
            out[owner] = n
        else:
            out.pop(owner, None)
    return out
