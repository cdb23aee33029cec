"""What the watch caches hold: each object decoded once, when it arrives (`parse.decoders`).

These records are the read side's own: the caches, the snapshot files and
`parse.assemble` pass them around; the planner never sees them. Cross-object facts
(priority values by PriorityClass name, HPAs scaling a job, pods per node) are resolved
when a snapshot is assembled (`parse.assemble`, `parse.build_snapshot`), not here.

The records a sync makes one per object (`PodUse`, `JobRecord`, `GroupRecord`: ~70k at
10k jobs) are frozen msgspec Structs, not frozen dataclasses: one is made in ~0.04 us
against ~0.6 us (a frozen dataclass's __init__ sets each field through
object.__setattr__), and with gc=False the collector never walks them (they hold only
immutable values, so they can be in no reference cycle). At 10k jobs, 50k bound pods
that is ~55 ms less of the sync's CPU (docs/benchmarks.md, "What ends the sync").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from autoscaler.core.model import (
    ElasticJob,
    InvalidGroup,
    NodeGroups,
    ObjectRef,
    PendingGroup,
    UnmanagedJob,
)
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import HostPort, PodShape, Quantities


class JobRecord(msgspec.Struct, frozen=True, gc=False):
    """A job as decoded from its object: what the planner may resize, or why not (its
    priority not yet resolved: 0 until the PriorityClass named here is looked up)."""

    job: ElasticJob | UnmanagedJob
    priority_class: str | None = None
    # the queue annotation (scheduling.volcano.sh/queue-name) the job carries, if any:
    # checked against the queue its PodGroup names once that is known
    queue_annotation: str | None = None
    # the pods its gang holds, by shape, as its operator counts them (kinds.gang): what
    # its waiting PodGroup needs when neither its pods nor its minResources say; None:
    # its templates could not be read
    gang: tuple[tuple[PodShape, int], ...] | None = None
    gang_gpus: int = 0  # the GPUs of those pods (gpu_resource_names)
    # metadata.deletionTimestamp is set: a waiting PodGroup it made is no reason to make
    # room (assemble.owners_gone), whatever else its decoding says
    deleting: bool = False

    @property
    def frees_gpus(self) -> bool:
        """It finished: its GPUs are free now (a reason for an early cycle)."""
        return isinstance(self.job, UnmanagedJob) and self.job.reason is Reason.FINISHED

    @property
    def awaits_restart_measure(self) -> bool:
        """A job we resized whose workers all run again, its restart not yet measured."""
        return isinstance(self.job, ElasticJob) and self.job.awaits_restart_measure


class GroupRecord(msgspec.Struct, frozen=True, gc=False):
    """A PodGroup as decoded: its waiting gang (None when it waits for nothing the
    planner makes room for), its phase, and the PriorityClass its gang carries."""

    ref: ObjectRef
    group: PendingGroup | InvalidGroup | None
    phase: str = ""
    priority_class: str | None = None
    queue: str = ""  # spec.queue as Volcano reads it (default when unset): where it runs
    owner: ObjectRef | None = None  # the job that made it (ownerReferences), if any


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """What a Volcano Queue object says: its state and what the scheduler reads of its
    spec (weight defaults to 1; an unreadable figure counts as unset), and the GPU
    figures the free-GPU cross-check compares (None where unset or unreadable)."""

    name: str
    state: str = "Open"
    weight: float = 1.0
    capability: float | None = None
    guarantee: float = 0.0
    deserved: int | None = None
    allocated: int | None = None
    # spec.capability in every dimension other than GPUs that Volcano bounds (cpu, memory,
    # extended resources), milli-units; a dimension whose figure is unreadable is left
    # out, with a message in `problems` naming the Queue and the field
    limits: Quantities = ()
    problems: tuple[str, ...] = ()
    parent: str = ""  # spec.parent, "" where unset (Volcano's controller writes root)
    # spec.affinity's node groups and the per-group limits annotation; None: neither
    node_groups: NodeGroups | None = None


@dataclass(frozen=True, slots=True)
class PriorityValue:
    """A PriorityClass as decoded: its name, value, and whether it is the global default."""

    name: str
    value: int
    global_default: bool = False


class PodUse(msgspec.Struct, frozen=True, gc=False):
    """What a bound, unfinished pod holds on its node (any pod: a data loader holds CPUs a
    worker needs), and, for a job's worker, which worker it is (the reclaim counts only
    workers on nodes a waiting gang's pods fit)."""

    node: str
    gpus: int
    requests: Quantities = ()  # every resource, the `pods` count included
    ports: tuple[HostPort, ...] = ()  # host ports it takes on the node
    # the job whose worker it is: (namespace, kind, name, worker group), "" group for
    # the pods of no job we know the groups of; index: the worker's index
    owner: tuple[str, str, str, str] | None = None
    index: int = -1
    group: str = ""  # its PodGroup, namespace/name (annotation scheduling.k8s.io/group-name)
    shape: PodShape | None = None  # an unbound pod's shape: what its gang still needs placed


@dataclass(frozen=True, slots=True)
class HpaTarget:
    """A HorizontalPodAutoscaler and the job it scales: (namespace, kind, name), or None
    when it scales nothing of ours."""

    namespace: str
    name: str
    target: tuple[str, str, str] | None = None


# a pod's key in its cache: (namespace, name)
PodKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed in the watch caches between two of their reads (read.kube.source),
    for parse.delta to assemble only that: the jobs changed, by (namespace, kind, name);
    the nodes changed, by name; each pod changed with the record it held before (None:
    none). `groups`: some PodGroup changed. `whole`: something changed that is not
    listed here (a LIST installed anew, a Queue, a PriorityClass, an HPA, a job seen
    deleted): only a whole assembly is sure to be right."""

    jobs: frozenset[tuple[str, str, str]] = frozenset()
    nodes: frozenset[str] = frozenset()
    pods: Mapping[PodKey, PodUse | None] = field(default_factory=dict)
    groups: bool = False
    whole: bool = False

    def then(self, later: Changes) -> Changes:
        """These changes followed by `later`'s: a pod's record before is the earlier one."""
        if self.whole or later.whole:
            return Changes(whole=True)
        pods = dict(later.pods)
        pods.update(self.pods)
        return Changes(
            self.jobs | later.jobs, self.nodes | later.nodes, pods, self.groups or later.groups
        )
