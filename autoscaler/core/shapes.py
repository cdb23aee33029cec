"""Shapes: what a pod asks of a node and what a node offers, in one integer
arithmetic for every resource (milli-units). The readers build them once per template
or node pool; node fit (autoscaler/plan/fit/) compares them as the scheduler's filters
would."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

# Resource name -> amount in milli-units (1 CPU = 1000, 1 GPU = 1000, 1 byte = 1000),
# sorted by name: one integer arithmetic for every resource. Interned by the readers:
# the workers of one template, or the nodes of one pool, share one tuple.
Quantities = tuple[tuple[str, int], ...]
Labels = tuple[tuple[str, str], ...]  # sorted by key
MILLI = 1000
GPU_RESOURCE = "nvidia.com/gpu"  # the GPU resource of a shape or node built from GPUs alone
PODS = "pods"  # the node's pod count, a resource like the others (each pod asks 1)


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint that repels pods (NoSchedule or NoExecute)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule or NoExecute (PreferNoSchedule repels nothing)

    def __str__(self) -> str:
        return (
            f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"
        )


@dataclass(frozen=True, slots=True)
class Toleration:
    """A pod's toleration, matched against node taints as the scheduler matches them."""

    key: str = ""  # "" with Exists: every key
    operator: str = "Equal"  # Equal or Exists
    value: str = ""
    effect: str = ""  # "": every effect


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement: `key` (a label, or a field: metadata.name) with
    In, NotIn, Exists, DoesNotExist, Gt or Lt over `values`."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One term of required node affinity: every expression (labels) and every field
    requirement must hold; a term with neither matches no node."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host port a pod asks for: two pods asking the same one never share a node."""

    port: int
    protocol: str = "TCP"
    ip: str = ""  # "" or 0.0.0.0: every address of the node


@dataclass(frozen=True, slots=True)
class PodShape:
    """What one pod asks of a node, as the created pod will be (the API server's
    defaults applied: a limit alone is the request; init containers as the scheduler
    counts them; the ExtendedResourceToleration plugin's tolerations; hostNetwork's
    container ports as host ports). One job's workers share one shape.

    `affinity` None: no required node affinity (every node); a tuple of terms: at least
    one must match. `unmodelled`: what the pod asks that fit does not judge (inter-pod
    affinity, topology spread, volumes), said in `plan` for its job."""

    requests: Quantities = ()
    node_selector: Labels = ()
    affinity: tuple[SelectorTerm, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    unmodelled: tuple[str, ...] = ()
    # a shape is a dict key of every cache of fit.Placer, looked up once per job: its
    # hash is computed once, not over its nested tuples at every lookup
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "_hash",
            hash(
                (
                    self.requests,
                    self.node_selector,
                    self.affinity,
                    self.tolerations,
                    self.host_ports,
                    self.unmodelled,
                )
            ),
        )

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def of_gpus(cls, gpus: int, resource: str = GPU_RESOURCE) -> PodShape:
        """A pod known only by its GPUs (tests, the simulator, a snapshot without nodes):
        one shared object per size."""
        return _gpu_shape(gpus, resource)

    def amount(self, resource: str) -> int:
        """Milli-units of `resource` it requests (0 when none)."""
        for name, value in self.requests:
            if name == resource:
                return value
        return 0


@cache
def _gpu_shape(gpus: int, resource: str) -> PodShape:
    return PodShape(((resource, gpus * MILLI),) if gpus else ())


WorkerShape = PodShape  # a job's worker is a pod: the same shape
