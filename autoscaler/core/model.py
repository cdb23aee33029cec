"""Frozen, typed model of a cluster as the planner sees it, and of the plan it makes.

Raw Kubernetes objects and Prometheus answers are parsed into these types at the edge
(`autoscaler/read/`); the planner only ever sees these. Nothing here does I/O, and
this module must not import kubernetes_asyncio, prometheus_api_client, aiohttp or
structlog (a test enforces it).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from itertools import compress

from .reasons import Reason
from .shapes import GPU_RESOURCE, HostPort, Labels, PodShape, Quantities, Taint


@dataclass(frozen=True, slots=True, order=True)
class ObjectRef:
    """Identity of a Kubernetes object. Ordering gives the planner a stable tie-break."""

    namespace: str
    name: str
    kind: str = "PyTorchJob"
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ElasticJob:
    """An elastic job the planner may resize. Every field has been validated by parse.py:
    1 <= min_replicas <= replicas <= max_replicas, gpus_per_worker >= 1."""

    ref: ObjectRef
    queue: str
    min_replicas: int
    max_replicas: int
    replicas: int  # the worker group's spec replicas (where, its kind says): what we asked for
    active: int  # status.replicaStatuses.Worker.active: what is running
    gpus_per_worker: int
    created: datetime
    priority: int = 0
    last_scale_time: datetime | None = None  # from our annotation; None: never resized by us
    started: datetime | None = None  # when the job first ran (Running condition), if known
    resource_version: str = ""
    # why growing this job would raise its gang (its operator sizes the gang from the
    # replicas: training-operator without runPolicy.schedulingPolicy.minAvailable), with
    # what to set; "" when growing leaves the gang at its minimum
    gang_grows: str = ""
    # why growing this job now would stall it (a Volcano Job with more Pending pods than
    # replicas - minAvailable stays in phase Pending); "" when it may grow
    grow_blocked: str = ""
    workers_at: str = ""  # where its kind finds the worker group (see kinds.base.Workers.at)
    # what one restart costs this job: from its annotation ("annotation"), else measured by
    # us after our last resize ("measured"); None: the policy's default
    restart_cost_seconds: float | None = None
    restart_cost_source: str = ""
    measured_for: datetime | None = None  # the resize our measurement belongs to
    # what the job declares of its run (our annotations; autoscaler/plan/payoff.py): seconds
    # from its start it is expected to run, and the fraction of its work done; None: not
    # declared (a reclaim from it or for it is then decided as if nothing were known)
    expected_runtime_seconds: float | None = None
    progress: float | None = None
    # the job names a queue it does not run in (an annotation its operator does not
    # honour): which queue it does run in and how to set it; "" when none
    queue_warning: str = ""
    # the latest write to its spec or metadata we can date (creation, our last resize,
    # metadata.managedFields): its workers without a pod have been asked for since then
    asked_at: datetime | None = None
    # one worker's pod as the scheduler will judge it (autoscaler/plan/fit.py); None: known by
    # its GPUs alone (then `PodShape.of_gpus(gpus_per_worker)`)
    shape: PodShape | None = None
    # the node each worker runs on, by worker index ("" where none is bound), from the
    # pod watch: a reclaim counts only workers on nodes the waiting gang's pods fit
    worker_nodes: tuple[str, ...] = ()
    # GPUs of its pods outside the worker group that its gang counts (a training-operator
    # Master, a Volcano Job's other tasks): never resized, shown in the job's count
    other_gpus: int = 0

    @property
    def worker_shape(self) -> PodShape:
        return self.shape if self.shape is not None else PodShape.of_gpus(self.gpus_per_worker)

    @property
    def has_min_available(self) -> bool:
        """Growing leaves the gang at its minimum."""
        return not self.gang_grows

    @property
    def inflight_workers(self) -> int:
        return max(0, self.replicas - self.active)

    @property
    def releasing_workers(self) -> int:
        return max(0, self.active - self.replicas)

    @property
    def awaits_restart_measure(self) -> bool:
        """We resized it, all its workers run again, and that restart is not measured yet
        (nor is its cost the owner's to say): the planner measures it now, and a change
        that makes this true is worth an early cycle."""
        resized = self.last_scale_time
        return (
            resized is not None
            and self.restart_cost_source != "annotation"
            and self.measured_for != resized
            and self.active == self.replicas
            and self.replicas > 0
        )


@dataclass(frozen=True, slots=True)
class UnmanagedJob:
    """A job parse.py will not let the planner touch, with the reason and which field.

    `inflight_gpus` keeps its promised-but-not-running GPUs in the queue's accounting
    whenever the fields needed to know them could be read."""

    ref: ObjectRef
    queue: str
    reason: Reason
    message: str
    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpus_per_worker: int | None = None
    inflight_gpus: int = 0
    queue_warning: str = ""  # as ElasticJob.queue_warning
    asked_at: datetime | None = None  # as ElasticJob.asked_at
    # the worker group's name on its pods ("" unknown): its workers are counted by spec
    # against the Queue's GPU capability, so their pods are not counted again
    workers_group: str = ""
    # a finished job's run, status.startTime and status.completionTime (None: not
    # given): the queue's run times weigh swaps where nothing is declared (payoff.py)
    started: datetime | None = None
    completed: datetime | None = None
    other_gpus: int = 0  # as ElasticJob.other_gpus


@dataclass(frozen=True, slots=True)
class FinishedRun:
    """The run of a finished job this daemon saw that the API no longer lists (deleted
    after it finished, e.g. by its ttlSecondsAfterFinished): one sample of its queue's
    run times (run_memory.py), seconds from status.startTime to completionTime."""

    ref: ObjectRef
    queue: str
    seconds: float
    completed: datetime


@dataclass(frozen=True, slots=True)
class PendingGroup:
    """A Volcano PodGroup waiting for its gang (phase Pending/Inqueue, or Unknown and
    unschedulable): GPUs it needs before any of its pods can start."""

    ref: ObjectRef
    queue: str
    gpus: int
    created: datetime
    priority: int = 0
    owner: ObjectRef | None = None  # the job that made it (ownerReferences), if any
    phase: str = "Pending"
    # its pods by shape, (shape, how many), when known (from its pods, else its owner's
    # template); () : known by its GPUs alone, whose room is then taken from the
    # emptiest nodes (fit.Placer.take_gpus)
    pods: tuple[tuple[PodShape, int], ...] = ()
    # where `gpus` was read: "pods" (its pods' requests, a limit counting as the
    # request), "template" (its owner's pod templates, as its operator counts the gang),
    # "minResources" (the PodGroup's own spec)
    need_from: str = "minResources"
    min_member: int = 0  # spec.minMember: pods the gang needs at once
    # why its owner gives no reason to make room for it ("" : it does): the job that made
    # it is being deleted, is gone (its PodGroup waits for the garbage collector), or is
    # not among the watched jobs of its kind. Volcano still counts it (its queue's
    # request, inqueue); the planner reclaims nothing for it (GangOwnerGone)
    orphan: str = ""


@dataclass(frozen=True, slots=True)
class InvalidGroup:
    """A PodGroup that could not be read, with the message naming its bad field."""

    ref: ObjectRef
    queue: str
    message: str


class Plugin(StrEnum):
    """Which Volcano plugin decides what a queue's pods may be bound to (docs/design.md
    "Headroom"). GIVEN: the free GPUs are taken as given (a custom query, a snapshot file's
    `free_gpus`, or the deprecated deserved - allocated). UNKNOWN: a queue with no usable
    reading, whose headroom no plugin computed (a queue summary's only, never a setting)."""

    PROPORTION = "proportion"
    CAPACITY = "capacity"
    GIVEN = "given"
    UNKNOWN = "unknown"


class Bound(StrEnum):
    """What bounded a queue's headroom this cycle (the smallest of its limits)."""

    SHARE = "share"  # proportion: the weighted share the queue would get if it asked for more
    CAPABILITY = "capability"  # the Queue's spec.capability
    REAL_CAPACITY = "real-capacity"  # capacity: capability less the other queues' guarantees
    CLUSTER_IDLE = "cluster-idle"  # GPUs idle on schedulable nodes, after other queues' grants
    NODE_FIT = "node-fit"  # idle GPUs exist, but no node has room for a whole worker
    IN_FLIGHT = "in-flight"  # GPUs asked for and not running yet take the rest
    # capacity: what is left for this queue once the idle GPUs are shared out, queues
    # below their deserved first (shares.capacity_allotments)
    FAIR_SHARE = "fair-share"
    GIVEN = "given"  # the free-GPU reading as given
    # capacity under hierarchy: what an ancestor queue may still take, shared by its
    # descendants (headroom.Tree)
    ANCESTOR = "ancestor"


@dataclass(frozen=True, slots=True)
class VolcanoQueue:
    """One queue as Volcano's scheduler sees it, in GPUs (metrics are milli-units; the
    source divides). From the metrics: allocated (bound pods), request (existing pods,
    bound or not: a gang whose PodGroup is Pending adds nothing), inqueue (admitted gangs
    not yet allocated), real_capacity (capacity plugin only). From the Queue object: weight,
    capability (None: unlimited), guarantee."""

    name: str
    allocated: float = 0.0
    request: float = 0.0
    inqueue: float = 0.0
    weight: float = 1.0
    capability: float | None = None
    guarantee: float = 0.0
    real_capacity: float | None = None
    deserved: float | None = None  # the scheduler's own figure, shown, not used
    # the Queue object's spec.deserved (what the capacity plugin reads), None where unset
    spec_deserved: float | None = None
    # the Queue object's spec.parent ("" where unset): the capacity plugin's queue tree
    # under enableHierarchy (headroom.Tree); Volcano's controller sets "root" on a queue
    # that names none, so only another parent makes a tree
    parent: str = ""


ROOT_QUEUE = "root"  # the capacity plugin's tree top: unbounded, every queue under it


def is_tree(parents: Iterable[str]) -> bool:
    """Whether the Queues' spec.parent values make a queue tree: some queue has a parent
    other than root (Volcano's controller sets root on every queue that names none, so a
    flat cluster reads "" or root everywhere and is planned as flat)."""
    return any(p not in ("", ROOT_QUEUE) for p in parents)


NODE_GROUP_LABEL = "volcano.sh/nodegroup-name"  # a node's group, for the nodegroup plugin
NODE_GROUP_LIMITS = "volcano.sh/nodegroup-resource-limits"  # a Queue's per-group limits


@dataclass(frozen=True, slots=True)
class NodeGroups:
    """A queue's node groups as Volcano's nodegroup plugin judges its pods (its node
    filter): the groups of its Queue's spec.affinity (nodeGroupAffinity and
    nodeGroupAntiAffinity, required and preferred), its per-group limits (annotation
    volcano.sh/nodegroup-resource-limits: group -> milli-units per resource named) and
    what its bound pods request on each group's nodes, and the plugin's strict mode.
    `error`: the annotation cannot be read (the plugin then rejects every node)."""

    required: frozenset[str] = frozenset()
    preferred: frozenset[str] = frozenset()
    anti_required: frozenset[str] = frozenset()
    anti_preferred: frozenset[str] = frozenset()
    limits: tuple[tuple[str, Quantities], ...] = ()
    allocated: tuple[tuple[str, Quantities], ...] = ()
    strict: bool = True
    error: str = ""

    @property
    def has_affinity(self) -> bool:
        return bool(self.required or self.preferred or self.anti_required or self.anti_preferred)

    def allows(self, group: str) -> bool:
        """The plugin's predicate on a labelled node's group: named required or
        preferred and not anti-required; anti-preferred admits (it only scores low)."""
        if group in self.anti_preferred:
            return True
        return (group in self.required or group in self.preferred) and (
            group not in self.anti_required
        )

    def groups(self) -> list[str]:
        """The groups it may use, in the plugin's score order (required, preferred, the
        rest; anti-preferred last), then by name."""
        named = self.required | self.preferred | self.anti_preferred
        return sorted(
            (g for g in named if self.allows(g)),
            key=lambda g: (
                -(100 * (g in self.required) + 50 * (g in self.preferred)),
                g in self.anti_preferred,
                g,
            ),
        )

    @property
    def unlabelled(self) -> bool:
        """Whether nodes without a group take its pods: only outside strict mode, and
        only for a queue with no node-group affinity."""
        return not self.strict and not self.has_affinity


@dataclass(frozen=True, slots=True)
class Node:
    """A node as the scheduler's filters see it (autoscaler/plan/fit.py decides with it): its
    GPUs (allocatable of every configured GPU resource, and what bound pods request of
    them), whether it is Ready, cordoned, its labels and taints, the allocatable of
    every resource and what every bound, unfinished pod requests there, and the host
    ports those pods hold. `resources` () means the GPUs are all that is known (tests,
    the simulator): they count as `nvidia.com/gpu`."""

    name: str
    allocatable: int  # GPUs
    used: int = 0  # GPUs bound pods request
    schedulable: bool = True  # Ready (cordoned is its own field)
    labels: Labels = ()
    taints: tuple[Taint, ...] = ()  # NoSchedule and NoExecute ones: those repel pods
    resources: Quantities = ()  # allocatable, milli-units
    requested: Quantities = ()  # what bound, unfinished pods request, `pods` included
    ports: tuple[HostPort, ...] = ()
    cordoned: bool = False  # spec.unschedulable
    # its kubernetes.io/hostname label, kept apart from `labels` so that the nodes of one
    # pool share one label tuple
    hostname: str = ""

    @property
    def idle(self) -> int:
        """GPUs idle on it, for pods that its labels and taints admit; 0 when it is not
        Ready or cordoned."""
        if not self.schedulable or self.cordoned:
            return 0
        return max(0, self.allocatable - self.used)


NodeGpus = Node  # the name before nodes had labels, taints and every resource


@dataclass(frozen=True, slots=True)
class VolcanoView:
    """What the headroom of every queue is computed from (docs/design.md "Headroom").
    `nodes` None: the nodes' idle GPUs are unknown (a snapshot file without nodes, or
    node_fit off), so no cluster-idle or node-fit bound."""

    plugin: Plugin
    queues: Mapping[str, VolcanoQueue] = field(default_factory=dict)
    nodes: tuple[Node, ...] | None = None
    # the cluster's GPUs when the nodes' idle GPUs are not tracked (node_fit off)
    cluster_gpus: int | None = None
    # the resources that are GPUs (settings.gpu_resource_names), as nodes name them
    gpu_names: tuple[str, ...] = (GPU_RESOURCE,)
    # Volcano's cluster total: allocatable GPUs of every Ready node, tainted and cordoned
    # ones included, as Volcano counts it (cluster_gpus without nodes). Summed once:
    # every queue's headroom reads it, and a sum over 40k nodes per queue made the plan
    # grow with jobs x queues
    total_gpus: int | None = field(init=False, repr=False, compare=False)
    # that sum of `nodes` where the caller keeps it (read.parse.delta, as nodes change):
    # else summed here, over every node each cycle
    nodes_total: int | None = field(default=None, repr=False, compare=False, kw_only=True)

    def __post_init__(self) -> None:
        total = (
            self.cluster_gpus
            if self.nodes is None
            else self.nodes_total
            if self.nodes_total is not None
            else sum(n.allocatable for n in self.nodes if n.schedulable)
        )
        object.__setattr__(self, "total_gpus", total)


@dataclass(frozen=True, slots=True)
class QueueState:
    """What we know of one Volcano queue this cycle.

    `free_gpus` None means unknown (no series, bad sample, source down): the queue holds,
    with `problem` saying why. Unknown is never read as zero."""

    name: str
    free_gpus: float | None
    problem: Reason | None = None
    message: str = ""
    state: str = "Open"  # Volcano Queue.status.state; Open when the Queue object is unknown
    # GPUs the Queue object lets its jobs hold (spec.capability); None
    # when the API does not say. Growth never takes a queue's jobs above it, whatever
    # Prometheus reads.
    capacity_gpus: int | None = None
    # set when the headroom is computed from Volcano's inputs (ClusterSnapshot.volcano);
    # free_gpus is then ignored
    volcano: VolcanoQueue | None = None
    # GPUs of admitted (Inqueue) gangs already taken out of free_gpus (the capacity
    # plugin's inqueue): such gangs are served from these first, not counted twice
    admitted_gpus: float = 0.0
    # the Queue object's capability in its other dimensions (QueueSpec.limits), and what
    # the queue's bound, unfinished pods request of those (the pod watch, by PodGroup):
    # growth never takes its pods above any of them (autoscaler/plan/quota.py)
    limits: Quantities = ()
    allocated: Quantities = ()
    notes: tuple[str, ...] = ()  # what could not be read of its Queue object, and why
    # GPUs the queue's bound, unfinished pods hold outside the worker groups counted by
    # spec against capacity_gpus (masters, launchers, plain pods; the pod watch)
    other_gpus: int = 0
    # the nodegroup plugin's rules for its pods (plan/fit/groups.py); None: not in use
    node_groups: NodeGroups | None = None

    @property
    def usable(self) -> bool:
        return self.problem is None and (self.free_gpus is not None or self.volcano is not None)


@dataclass(frozen=True, slots=True)
class Refusal:
    """The cluster refused a resize of this job (an admission policy or webhook, validation,
    RBAC): a fact about the job, not a failure to retry. The job holds while it is still
    at `resource_version` (the version the refused write was pinned to); the daemon
    forgets a refusal after a retry window, so a policy that changes is noticed."""

    ref: ObjectRef
    resource_version: str
    message: str  # what the API server said, e.g. which policy denied it and why
    at: datetime

    def applies_to(self, job: ElasticJob) -> bool:
        r, j = self.ref, job.ref
        same = (r.namespace, r.name, r.kind) == (j.namespace, j.name, j.kind)
        return same and (not self.resource_version or self.resource_version == job.resource_version)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything one planning cycle knows, read once at the edge."""

    queues: Mapping[str, QueueState]
    jobs: tuple[ElasticJob, ...] = ()
    unmanaged: tuple[UnmanagedJob, ...] = ()
    pending: tuple[PendingGroup, ...] = ()
    invalid_groups: tuple[InvalidGroup, ...] = ()
    # a cycle-wide problem (e.g. Prometheus down): every queue holds with this reason
    problem: Reason | None = None
    message: str = ""
    # Volcano's plugin, the queues' inputs and the nodes: headroom is computed from these;
    # None: each queue's free_gpus is taken as given
    volcano: VolcanoView | None = None
    # resizes the cluster refused, as the actuator remembers them: those jobs hold
    refusals: tuple[Refusal, ...] = ()
    # unfinished pods (bound or not) per job that made them, by (namespace, kind, name);
    # None: pods are not watched (node_fit off, a snapshot file without pods), so no job
    # is ever said to have none
    pods_by_owner: Mapping[tuple[str, str, str], int] | None = None
    # runs of finished jobs no longer listed, as this daemon remembers them (run_memory)
    finished_runs: tuple[FinishedRun, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """What the plan says about one job: a new replica count or why it stays."""

    ref: ObjectRef
    queue: str
    current: int | None
    target: int | None
    reason: Reason
    message: str
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpus_per_worker: int | None = None
    resource_version: str = ""
    notes: tuple[str, ...] = ()  # shown with the decision (plan, status, explain)
    workers_at: str = ""  # the job's ElasticJob.workers_at, handed back to its kind's write
    restart_cost_seconds: float | None = None  # the estimate the plan used
    restart_cost_source: str = ""  # annotation, measured or default
    # what the job's owner must fix that is not this decision's business (also in notes):
    # said once on the job as a Warning Event
    warnings: tuple[str, ...] = ()
    other_gpus: int = 0  # the job's ElasticJob.other_gpus (a Master's): shown, not resized

    @property
    def gpus(self) -> int | None:
        """GPUs the job holds at its size `current`: its workers' and its other pods'
        (a Master) that its gang counts; None where its workers' are unknown. The one
        count every output shows beside its workers."""
        if self.current is None or self.gpus_per_worker is None:
            return None
        return self.current * self.gpus_per_worker + self.other_gpus

    @property
    def changed(self) -> bool:
        return self.target is not None and self.current is not None and self.target != self.current

    @property
    def direction(self) -> str:
        current, target = self.current, self.target
        if current is None or target is None or current == target:
            return "none"
        return "up" if target > current else "down"


@dataclass(frozen=True, slots=True)
class Action(Decision):
    """A decision that changes its job: from `current` to `target` workers, both known
    and different. What the actuators write; every other Decision is a report (a hold
    or a skip, with its reason)."""

    current: int
    target: int

    @classmethod
    def of(cls, d: Decision) -> Action | None:
        """`d` as an Action when it changes its job, else None."""
        if isinstance(d, Action):
            return d
        if d.current is None or d.target is None or d.current == d.target:
            return None
        return cls(**{f.name: getattr(d, f.name) for f in fields(Decision)})


@dataclass(frozen=True, slots=True)
class GangDecision:
    """What the plan says about one waiting gang."""

    ref: ObjectRef
    queue: str
    gpus: int
    reason: Reason
    message: str
    victims: tuple[ObjectRef, ...] = ()
    owner: ObjectRef | None = None  # the job whose gang it is (PendingGroup.owner)
    need_from: str = ""  # PendingGroup.need_from
    # for a gang not covered: each elastic job above its min that did not give way, why
    blockers: tuple[str, ...] = ()

    @property
    def job(self) -> str:
        """The job whose gang it is, kind/namespace/name; "" for a PodGroup of no job."""
        o = self.owner
        return f"{o.kind}/{o.namespace}/{o.name}" if o is not None else ""


@dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue's accounts for a cycle: what was free, in flight, released, granted,
    and what bounded it (status, metrics and `plan` print these)."""

    name: str
    free_gpus: float | None
    inflight_gpus: int = 0
    releasing_gpus: int = 0
    pending_gpus: int = 0
    granted_gpus: int = 0
    reclaimed_gpus: int = 0
    trimmed_gpus: int = 0
    reason: Reason | None = None
    message: str = ""
    # GPUs the plan left idle in the queue once gangs were served and jobs grown: a job
    # that starts there may grow at once (the daemon's start trigger, triggers.py)
    idle_left_gpus: int = 0
    # what the scheduler would bind for this queue now, before gangs and growth: the
    # smallest of `limits` (the room, in GPUs, each limit leaves), and which one that was;
    # `inputs` are the figures they were computed from (share, allocated, inqueue...)
    headroom_gpus: float | None = None
    bound: Bound | None = None
    limits: Mapping[str, float] = field(default_factory=dict)
    inputs: Mapping[str, float] = field(default_factory=dict)
    plugin: Plugin = Plugin.GIVEN
    notes: tuple[str, ...] = ()  # QueueState.notes: what of its Queue object bounds nothing


@dataclass(frozen=True, slots=True)
class Measurement:
    """How long a job took, after our resize at `resized`, until all its workers were
    active: its restart cost, kept on the job (annotation) so a restarted daemon has it.
    An upper bound: it is seen at cycle granularity."""

    ref: ObjectRef
    seconds: float
    resized: datetime
    resource_version: str = ""


def same_items(kept: Sequence[object] | None, items: Sequence[object]) -> bool:
    """`items` are the objects kept, in the same order (a list changed in place is not):
    what the sources assemble anew when another cache changed holds the same frozen
    objects, and what was made of them may be kept."""
    if kept is None:
        return False
    return kept is items or (len(kept) == len(items) and all(map(operator.is_, kept, items)))


_TARGET = operator.attrgetter("target")
_CURRENT = operator.attrgetter("current")


def resized(decisions: Sequence[Decision]) -> Iterator[bool]:
    """Whether each decision's target is not its size, in order, found in C (a cluster
    that keeps its finished jobs lists tens of thousands of decisions, few of them
    resizes)."""
    return map(operator.ne, map(_TARGET, decisions), map(_CURRENT, decisions))


@dataclass(frozen=True, slots=True)
class Plan:
    """What one cycle decided: a decision for every job, a verdict for every waiting
    gang, a summary per queue, and the restart costs measured on the way."""

    now: datetime
    decisions: tuple[Decision, ...]
    gangs: tuple[GangDecision, ...] = ()
    queues: Mapping[str, QueueSummary] = field(default_factory=dict)
    measurements: tuple[Measurement, ...] = ()
    # the places of the decisions whose target is not their size, and those that change
    # a job, in plan order: found once (a cycle reads them several times, and with tens
    # of thousands of finished jobs listed each scan costs milliseconds)
    resized_at: tuple[int, ...] = field(init=False, repr=False, compare=False)
    actions: tuple[Action, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        decisions = self.decisions
        at = tuple(compress(range(len(decisions)), resized(decisions)))
        actions = tuple(a for i in at if (a := Action.of(decisions[i])) is not None)
        object.__setattr__(self, "resized_at", at)
        object.__setattr__(self, "actions", actions)
