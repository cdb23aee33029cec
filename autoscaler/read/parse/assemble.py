"""Records -> snapshot: the decoders by kind, and joining what they decoded.

`decoders` gives each Kubernetes kind the function a watch cache (or a snapshot file)
decodes one object with; `Records` holds what they made. `assemble` resolves what
depends on other objects (priority values, the queue a PodGroup names, HPAs, pods per
node, the waiting gangs' needs), once per change of a cache; `build_snapshot` joins
that with the free-GPU reading per queue into the one `ClusterSnapshot` a cycle plans.
A queue that jobs or gangs use but the reading lacks is unknown (held), never zero.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from autoscaler.core.model import (
    NODE_GROUP_LABEL,
    ClusterSnapshot,
    ElasticJob,
    InvalidGroup,
    Node,
    NodeGroups,
    ObjectRef,
    PendingGroup,
    Plugin,
    QueueState,
    UnmanagedJob,
)
from autoscaler.core.options import NodeGroupsMode, ReadOptions
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import PodShape, Quantities
from autoscaler.read.kinds import KIND_NAMES, KINDS
from autoscaler.read.podspec import frozen
from autoscaler.read.records import (
    GroupRecord,
    HpaTarget,
    JobRecord,
    PodUse,
    PriorityValue,
    QueueSpec,
)

from .hpas import _hpa_skip, decode_hpa, targets_of
from .jobs import decode_job, in_queue, worker_group
from .nodes import decode_node, decode_pod, nodes_in_use, pods_by_owner, worker_nodes
from .objects import HPA_KIND, RawObjects
from .podgroups import decode_podgroup, podgroup_queues
from .queues import (
    Priorities,
    decode_priority_class,
    decode_queue,
    inherited,
    queue_capacities,
    volcano_view,
)

Decoder = Callable[[Mapping[str, Any]], Any]


def decoders(options: ReadOptions) -> dict[str, Decoder]:
    """Kubernetes kind -> the function that decodes one of its objects into the record
    its cache holds (None: nothing the planner reads). The caches and snapshot files
    use the same ones."""
    out: dict[str, Decoder] = {
        k.resource.kind: partial(decode_job, options=options, kind=k) for k in KINDS
    }
    out.update(
        {
            "PodGroup": partial(decode_podgroup, options=options),
            "Queue": partial(decode_queue, options=options),
            "PriorityClass": decode_priority_class,
            "Node": partial(decode_node, options=options),
            "Pod": partial(decode_pod, options=options),
            HPA_KIND: decode_hpa,
        }
    )
    return out


@dataclass(frozen=True, slots=True)
class Records:
    """Every decoded object a snapshot is assembled from, by kind."""

    jobs: tuple[JobRecord, ...] = ()
    groups: tuple[GroupRecord, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    priorities: tuple[PriorityValue, ...] = ()
    nodes: tuple[Node, ...] = ()
    pods: tuple[PodUse, ...] = ()
    hpas: tuple[HpaTarget, ...] = ()
    # `pods` are every unfinished pod (a pod watch, a snapshot file with pods): a job
    # with none there has none (HoldNoPods); else pods are unknown
    pods_known: bool = False
    # the job kinds whose every object (in the watched namespaces, by label_selector) is
    # among `jobs`: a PodGroup owned by one of these kinds whose job is not there has no
    # job to make room for (owners_gone). None: the kinds `jobs` holds (a snapshot file)
    job_kinds: tuple[str, ...] | None = None
    # the jobs are chosen by label_selector: a PodGroup's owner not among `jobs` may be a
    # real job outside it, so only a job seen deleted (`deleted_jobs`) counts as gone
    job_selector: bool = False
    # the jobs of `job_kinds` the caches saw deleted lately (a watch's DELETED, a relist
    # without them): their refs, uid included
    deleted_jobs: tuple[ObjectRef, ...] = ()
    # the key of each of `pods` in its cache, (namespace, name), sorted as `pods` is:
    # what parse.delta follows a pod by (empty: a snapshot file's, assembled whole)
    pod_keys: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    @classmethod
    def decode(cls, raw: RawObjects, options: ReadOptions) -> Records:
        """Raw objects (a snapshot file's) through the caches' decoders."""

        def each(objects: Iterable[Mapping[str, Any]], decode: Decoder) -> tuple[Any, ...]:
            return tuple(r for o in objects if (r := decode(o)) is not None)

        by_kind = decoders(options)
        return cls(
            jobs=tuple(decode_job(o, options) for o in raw.jobs),
            groups=each(raw.podgroups, by_kind["PodGroup"]),
            queues=each(raw.queues, by_kind["Queue"]),
            priorities=each(raw.priorityclasses, by_kind["PriorityClass"]),
            nodes=each(raw.nodes, by_kind["Node"]),
            pods=each(raw.pods, by_kind["Pod"]),
            hpas=each(raw.hpas, by_kind[HPA_KIND]),
            pods_known=bool(raw.pods),
        )


@dataclass(frozen=True, slots=True)
class Assembled:
    """What a snapshot takes from the objects alone, whatever Prometheus says: the
    cross-object facts resolved (priorities by PriorityClass name, jobs an HPA scales,
    each node's GPUs in use). The daemon assembles again only when a cache changed."""

    jobs: tuple[ElasticJob, ...]
    unmanaged: tuple[UnmanagedJob, ...]
    pending: tuple[PendingGroup, ...]
    invalid: tuple[InvalidGroup, ...]
    queues: tuple[QueueSpec, ...]
    nodes: tuple[Node, ...] | None
    pods_by_owner: Mapping[tuple[str, str, str], int] | None = None
    # what each queue's bound pods request, for the queues whose capability names a
    # dimension other than GPUs (queue_allocated)
    queue_allocated: Mapping[str, Quantities] = field(default_factory=dict)
    # GPUs each GPU-capped queue's bound pods hold outside its counted worker groups
    # (queue_other_gpus)
    queue_other_gpus: Mapping[str, int] = field(default_factory=dict)
    # what each queue's bound pods request on each node group's nodes, for the queues
    # with per-group limits (queue_group_allocated)
    queue_group_allocated: Mapping[str, tuple[tuple[str, Quantities], ...]] = field(
        default_factory=dict
    )
    # the allocatable GPUs of the Ready nodes (Volcano's cluster total), None without nodes
    nodes_total: int | None = None
    # the queues the jobs and unmanaged jobs name (None: found from them when needed)
    job_queues: frozenset[str] | None = None


def resolve_gangs(
    pending: list[PendingGroup],
    records: Records,
    by_group: Mapping[str, Sequence[PodUse]] | None = None,
    gangs: Mapping[tuple[str, str, str], JobRecord] | None = None,
) -> tuple[list[PendingGroup], list[InvalidGroup]]:
    """Each waiting gang's need, from the first of: its pods, when at least minMember
    of them exist (their requests, a limit counting as the request); its owner's
    templates, as its operator counts the gang (JobRecord.gang); its spec.minResources.
    A gang that needs no GPU by what is known leaves; one whose need cannot be known
    (minResources names no GPU, no pods yet, its job of a kind we read but not read) is
    shown as invalid, with why, not dropped. `by_group` (each gang's pods, in their
    order) and `gangs` (the jobs whose gang is read, by owner) where a caller keeps them."""
    if by_group is None:
        by_group = pods_by_group(records) if records.pods_known else {}
    if gangs is None:
        gangs = {
            (r.job.ref.namespace, r.job.ref.kind, r.job.ref.name): r
            for r in records.jobs
            if r.gang is not None
        }
    out: list[PendingGroup] = []
    unknown: list[InvalidGroup] = []
    for g in pending:
        resolved = _need_from_pods(g, by_group.get(f"{g.ref.namespace}/{g.ref.name}", ()))
        o = g.owner
        record = gangs.get((o.namespace, o.kind, o.name)) if o is not None else None
        if resolved is None and record is not None and record.gang is not None:
            resolved = replace(g, gpus=record.gang_gpus, pods=record.gang, need_from="template")
        resolved = resolved or g
        if resolved.gpus > 0:
            out.append(resolved)
        elif o is not None and o.kind in KIND_NAMES and record is None:
            unknown.append(
                InvalidGroup(
                    g.ref,
                    g.queue,
                    f"{g.ref}: its GPU need cannot be known: spec.minResources names no GPU, "
                    f"its pods do not exist yet, and {o} is not read (not in a watched "
                    "namespace, or its pod templates are unreadable)",
                )
            )
    return out, unknown


def pods_by_group(records: Records) -> dict[str, list[PodUse]]:
    """The pods of each PodGroup (namespace/name), in their order."""
    by_group: dict[str, list[PodUse]] = {}
    for p in records.pods:
        if p.group:
            by_group.setdefault(p.group, []).append(p)
    return by_group


def owners_gone(
    pending: list[PendingGroup],
    records: Records,
    jobs: Mapping[tuple[str, str, str], JobRecord] | None = None,
) -> list[PendingGroup]:
    """Each waiting gang, marked `orphan` (why) where the job that made it is being
    deleted, is gone, or is not among the watched jobs of its kind: such a gang is no
    reason to make room (GangOwnerGone). A deleted job's PodGroup stays until the garbage
    collector removes it, and the cycle its deletion calls comes exactly then. A gang of
    no owner, or of an owner of a kind not watched, is left as it is: nothing says its
    job is gone. Under a label_selector a missing owner is gone only if it was seen
    deleted: else it is a job we do not manage, and its gang is served. `jobs`: the
    records by (namespace, kind, name), where a caller keeps them."""
    if jobs is None:
        jobs = {(r.job.ref.namespace, r.job.ref.kind, r.job.ref.name): r for r in records.jobs}
    kinds = set(records.job_kinds if records.job_kinds is not None else (ref[1] for ref in jobs))
    out: list[PendingGroup] = []
    for g in pending:
        o = g.owner
        why = ""
        if o is not None and o.kind in kinds:
            record = jobs.get((o.namespace, o.kind, o.name))
            uid = record.job.ref.uid if record is not None else ""
            if record is None:
                why = _missing_owner(o, records)
            elif o.uid and uid and o.uid != uid:
                why = f"its {o} is gone (a job of that name now is another, uid {uid})"
            elif record.deleting:
                why = f"its {o} is being deleted (metadata.deletionTimestamp is set)"
        out.append(replace(g, orphan=why) if why else g)
    return out


def _missing_owner(o: ObjectRef, records: Records) -> str:
    """Why a gang whose owner is not among the jobs is GangOwnerGone ("" if it is not)."""
    if any(
        (d.namespace, d.kind, d.name) == (o.namespace, o.kind, o.name)
        and (not d.uid or not o.uid or d.uid == o.uid)
        for d in records.deleted_jobs
    ):
        return f"its {o} is gone (seen deleted; its PodGroup waits for the garbage collector)"
    if records.job_selector:
        return ""  # a job outside label_selector: real, only not ours to resize
    return f"its {o} is gone, or not among the watched jobs of its kind (namespaces)"


def _need_from_pods(g: PendingGroup, pods: Iterable[PodUse]) -> PendingGroup | None:
    """g with its need from its pods, when at least minMember of them exist."""
    pods = list(pods)
    if not pods or len(pods) < max(1, g.min_member):
        return None
    unbound: dict[PodShape, int] = {}
    for p in pods:
        if not p.node and p.shape is not None:
            unbound[p.shape] = unbound.get(p.shape, 0) + 1
    return replace(g, gpus=sum(p.gpus for p in pods), pods=tuple(unbound.items()), need_from="pods")


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a job's assembly reads of other objects: PriorityClass values, the queue
    each PodGroup names, the HPAs' targets."""

    priorities: Priorities
    group_queues: Mapping[tuple[str, str, str], str]
    targets: Mapping[tuple[str, str, str], list[str]]

    @classmethod
    def of(cls, records: Records) -> JobContext:
        return cls(
            Priorities.of_records(records.priorities),
            podgroup_queues(records.groups),
            targets_of(records.hpas),
        )


def assemble_job(
    record: JobRecord,
    context: JobContext,
    placed: Mapping[tuple[str, str, str, str], tuple[str, ...]],
) -> ElasticJob | UnmanagedJob:
    """One job as the planner sees it: in the queue its PodGroup names, at its
    PriorityClass's value, with the node of each worker (`placed`, worker_nodes), left
    alone where an HPA scales it."""
    job = record.job
    queue = context.group_queues.get((job.ref.namespace, job.ref.kind, job.ref.name))
    if queue is not None:  # where Volcano runs it, whatever the job says
        job = in_queue(job, queue, record.queue_annotation, from_podgroup=True)
    if isinstance(job, ElasticJob):
        value = context.priorities.of(record.priority_class)
        if value != job.priority:
            job = replace(job, priority=value)
        job = _with_worker_nodes(job, placed)
        job = _hpa_skip(job, context.targets)
    return job


def pending_of(
    records: Records, priorities: Priorities
) -> tuple[list[PendingGroup], list[InvalidGroup]]:
    """The waiting gangs at their PriorityClass's value, and the PodGroups shown invalid,
    before their needs are resolved (resolve_gangs, owners_gone)."""
    pending: list[PendingGroup] = []
    invalid: list[InvalidGroup] = []
    for g in records.groups:
        group = g.group
        if isinstance(group, PendingGroup):
            value = priorities.of(g.priority_class)
            pending.append(group if value == group.priority else replace(group, priority=value))
        elif isinstance(group, InvalidGroup):
            invalid.append(group)
    return pending, invalid


def assemble(records: Records) -> Assembled:
    context = JobContext.of(records)
    placed = worker_nodes(records.pods) if records.pods else {}
    jobs: list[ElasticJob] = []
    unmanaged: list[UnmanagedJob] = []
    seen: set[tuple[str, str, str]] = set()
    for record in records.jobs:
        job = assemble_job(record, context, placed)
        key = (job.ref.namespace, job.ref.name, job.ref.kind)
        if key in seen:
            unmanaged.append(
                UnmanagedJob(
                    job.ref, job.queue, Reason.DUPLICATE, f"{job.ref}: appears more than once"
                )
            )
            continue
        seen.add(key)
        if isinstance(job, ElasticJob):
            jobs.append(job)
        else:
            unmanaged.append(job)
    pending, invalid = pending_of(records, context.priorities)
    pending, unknown = resolve_gangs(pending, records)
    pending = owners_gone(pending, records)
    invalid += unknown
    return Assembled(
        tuple(jobs),
        tuple(unmanaged),
        tuple(pending),
        tuple(invalid),
        records.queues,
        nodes_in_use(records.nodes, records.pods) if records.nodes else None,
        pods_by_owner(records.pods) if records.pods_known else None,
        queue_allocated(records) if records.pods_known else {},
        queue_other_gpus(records, jobs, unmanaged) if records.pods_known else {},
        queue_group_allocated(records) if records.pods_known else {},
        sum(n.allocatable for n in records.nodes if n.schedulable) if records.nodes else None,
        frozenset({j.queue for j in jobs} | {u.queue for u in unmanaged}),
    )


def queue_group_allocated(records: Records) -> dict[str, tuple[tuple[str, Quantities], ...]]:
    """What the bound, unfinished pods of each queue with per-group limits request on
    each node group's nodes (label volcano.sh/nodegroup-name), as the nodegroup plugin
    counts a queue's allocated in a group: by the pod's PodGroup's queue."""
    limited = {q.name for q in records.queues if q.node_groups and q.node_groups.limits}
    if not limited:
        return {}
    queue_of = {
        f"{g.ref.namespace}/{g.ref.name}": g.queue for g in records.groups if g.queue in limited
    }
    group_of = {n.name: g for n in records.nodes if (g := dict(n.labels).get(NODE_GROUP_LABEL))}
    sums: dict[str, dict[str, dict[str, int]]] = {}
    for p in records.pods:
        if not (p.node and p.group):
            continue
        q, g = queue_of.get(p.group), group_of.get(p.node)
        if q is not None and g is not None:
            into = sums.setdefault(q, {}).setdefault(g, {})
            for name, value in p.requests:
                into[name] = into.get(name, 0) + value
    return {
        q: tuple((g, frozen(amounts)) for g, amounts in sorted(by_group.items()))
        for q, by_group in sums.items()
    }


def queue_allocated(records: Records) -> dict[str, Quantities]:
    """What the bound, unfinished pods of each queue request, for the queues whose
    Queue object bounds a dimension other than GPUs (others cost nothing). A pod is in
    the queue of its PodGroup (annotation scheduling.k8s.io/group-name -> spec.queue),
    as Volcano counts a queue's allocated."""
    bounded = {q.name for q in records.queues if q.limits}
    if not bounded:
        return {}
    queue_of = {
        f"{g.ref.namespace}/{g.ref.name}": g.queue for g in records.groups if g.queue in bounded
    }
    sums: dict[str, dict[str, int]] = {}
    for p in records.pods:
        if p.node and p.group and (q := queue_of.get(p.group)) is not None:
            into = sums.setdefault(q, {})
            for name, value in p.requests:
                into[name] = into.get(name, 0) + value
    return {q: frozen(amounts) for q, amounts in sums.items()}


def queue_other_gpus(
    records: Records, jobs: Iterable[ElasticJob], unmanaged: Iterable[UnmanagedJob]
) -> dict[str, int]:
    """GPUs the bound, unfinished pods of each queue with a GPU capability hold outside
    the worker groups that the capability rule counts by spec (planner
    `_room_by_capacity`): a PyTorchJob's Master, an MPIJob's launcher, a plain pod of
    the queue's PodGroups, a worker group we cannot read. Volcano counts every one of
    them against the Queue; counting only the workers asked for workers it cannot bind."""
    capped = {q.name for q in records.queues if q.capability is not None}
    if not capped:
        return {}
    queue_of = {
        f"{g.ref.namespace}/{g.ref.name}": g.queue for g in records.groups if g.queue in capped
    }
    counted = {(j.ref.namespace, j.ref.kind, j.ref.name, worker_group(j.workers_at)) for j in jobs}
    counted |= {
        (u.ref.namespace, u.ref.kind, u.ref.name, u.workers_group)
        for u in unmanaged
        if u.workers_group and u.replicas is not None and u.gpus_per_worker
    }
    sums: dict[str, int] = {}
    for p in records.pods:
        if not (p.node and p.gpus and p.group) or (p.index >= 0 and p.owner in counted):
            continue
        if (q := queue_of.get(p.group)) is not None:
            sums[q] = sums.get(q, 0) + p.gpus
    return sums


def _with_worker_nodes(
    job: ElasticJob, placed: Mapping[tuple[str, str, str, str], tuple[str, ...]]
) -> ElasticJob:
    """The job with the node of each of its workers (a new object only when it moved)."""
    ref = job.ref
    nodes = placed.get((ref.namespace, ref.kind, ref.name, worker_group(job.workers_at)), ())
    return job if nodes == job.worker_nodes else replace(job, worker_nodes=nodes)


def build_snapshot(
    objects: RawObjects | Records,
    free: Mapping[str, QueueState],
    options: ReadOptions,
    *,
    problem: Reason | None = None,
    message: str = "",
    plugin: Plugin | None = None,
    queues_listed: bool = False,
    assembled: Assembled | None = None,
) -> ClusterSnapshot:
    """The snapshot of decoded objects (raw ones are decoded first) and `free`, what the
    free-GPU source said per queue; a queue that jobs or gangs use but `free` lacks is
    unknown (held), never zero. `assembled`: `assemble(objects)`, kept by a caller whose
    objects did not change since.

    `queues_listed`: the queues are every Queue of the cluster (a synced watch cache),
    so a queue named by a job or gang but absent there was deleted (or never made) and
    holds (HoldQueueMissing), whatever Prometheus still serves for it. Not set for a
    snapshot file (it may list no Queue at all), and no Queue at all means no Volcano
    queues to check against: Volcano itself always keeps its `default` queue."""

    if assembled is None:
        records = Records.decode(objects, options) if isinstance(objects, RawObjects) else objects
        assembled = assemble(records)
    a = assembled
    # the capacity plugin's tree inherits capability (proportion has no tree)
    specs = inherited(a.queues) if plugin is Plugin.CAPACITY else a.queues
    queues = _queue_states(a, free, queues_listed, specs)
    if options.node_groups is not NodeGroupsMode.OFF and any(q.node_groups for q in specs):
        queues = _with_node_groups(queues, specs, a, options.node_groups)
    view = None
    if plugin is not None:
        view, queues = volcano_view(
            plugin, queues, specs, a.nodes, options.gpu_resource_names, a.nodes_total
        )
        if a.nodes is not None and not options.node_fit:
            total = a.nodes_total
            if total is None:
                total = sum(n.allocatable for n in a.nodes if n.schedulable)
            view = replace(view, nodes=None, cluster_gpus=total, nodes_total=None)
    return ClusterSnapshot(
        queues=queues,
        jobs=a.jobs,
        unmanaged=a.unmanaged,
        pending=a.pending,
        invalid_groups=a.invalid,
        problem=problem,
        message=message,
        volcano=view,
        pods_by_owner=a.pods_by_owner,
    )


def _with_node_groups(
    queues: dict[str, QueueState],
    specs: Sequence[QueueSpec],
    a: Assembled,
    mode: NodeGroupsMode,
) -> dict[str, QueueState]:
    """Each queue with the nodegroup plugin's rules for its pods (a queue naming no
    group too: under strict mode it fits no node). A queue whose limits annotation
    cannot be read holds: the plugin rejects every node for its pods."""
    by_name = {q.name: q for q in specs}
    strict = mode is NodeGroupsMode.STRICT
    out = {}
    for name, state in queues.items():
        spec = by_name.get(name)
        rules = spec.node_groups if spec is not None and spec.node_groups else NodeGroups()
        rules = replace(rules, strict=strict, allocated=a.queue_group_allocated.get(name, ()))
        state = replace(state, node_groups=rules)
        if rules.error and state.problem is None:
            state = replace(
                state,
                problem=Reason.NO_NODE_FITS,
                message=f"{rules.error}: Volcano's nodegroup plugin rejects every node for "
                "the queue's pods, so nothing of it is grown or admitted until it is fixed",
            )
        out[name] = state
    return out


def _queue_states(
    a: Assembled,
    free: Mapping[str, QueueState],
    queues_listed: bool,
    queue_specs: Sequence[QueueSpec] | None = None,
) -> dict[str, QueueState]:
    """Every queue a job or gang names, or the free-GPU source reads: its reading (unknown
    where there is none) with what its Queue object says of its state and capacity
    (`queue_specs`: with what a child inherits, queues.inherited; the Queues as read
    where not given)."""
    queue_specs = a.queues if queue_specs is None else queue_specs
    queue_states = {q.name: q.state for q in queue_specs}
    specs = {q.name: q for q in queue_specs}
    capacities = queue_capacities(queue_specs)
    names = set(free) | {g.queue for g in a.pending}
    if a.job_queues is not None:
        names |= a.job_queues
    else:
        names |= {j.queue for j in a.jobs} | {u.queue for u in a.unmanaged}
    queues: dict[str, QueueState] = {}
    for name in sorted(names):
        state = free.get(name)
        if state is None:
            state = QueueState(
                name,
                None,
                Reason.METRICS_MISSING,
                f"queue {name} has no series in the free-GPU query",
            )
        qstate = queue_states.get(name)
        if qstate is not None and qstate != state.state:
            state = replace(state, state=qstate)
        if qstate is None and queues_listed and queue_states:
            state = replace(
                state,
                problem=Reason.QUEUE_MISSING,
                message=f"queue {name}: no Queue object of that name (deleted, or never "
                "created); Volcano schedules nothing of it, whatever its metrics say",
            )
        capacity = capacities.get(name)
        if capacity != state.capacity_gpus:
            state = replace(state, capacity_gpus=capacity)
        other = a.queue_other_gpus.get(name, 0) if capacity is not None else 0
        if other != state.other_gpus:
            state = replace(state, other_gpus=other)
        spec = specs.get(name)
        if spec is not None and (spec.limits or spec.problems):
            state = replace(
                state,
                limits=spec.limits,
                allocated=a.queue_allocated.get(name, ()),
                notes=spec.problems,
            )
        queues[name] = state
    return queues
