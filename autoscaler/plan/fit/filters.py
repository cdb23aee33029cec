"""The scheduler's filters, judged from a node and a pod shape: would kube-scheduler
(whose filters Volcano's `predicates` plugin runs) let a pod of this shape onto this
node? Kept apart from placing so that the simulator judges nodes by the very same rules
as the planner (shapes.PodShape is read by autoscaler/read/podspec.py).

- NodeResourcesFit: every resource the pod requests (GPUs, CPU, memory, RDMA and other
  extended resources, one of the node's `pods`) free on the node: allocatable less what
  its bound, unfinished pods request (`how_many`, `short_of`);
- NodeAffinity: the node's labels match the pod's `nodeSelector`, and one term of its
  required node affinity (In, NotIn, Exists, DoesNotExist, Gt, Lt on labels; In, NotIn on
  the field metadata.name); a term with no requirement matches no node;
- TaintToleration: every NoSchedule and NoExecute taint tolerated (PreferNoSchedule
  repels nothing);
- NodeUnschedulable: a cordoned node only for a pod tolerating
  node.kubernetes.io/unschedulable:NoSchedule; a node that is not Ready takes nothing;
- NodePorts: a host port (hostNetwork pods take their container ports) free on the
  node, so such pods fit one per node (`ports_conflict`).

Not judged (said in `plan` for the jobs that use them): inter-pod affinity, topology
spread, volumes.

`admits` decides what a node's labels, taints and state decide alone (None, or the
Misfit); room is judged by the caller, from the node's free room.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autoscaler.core.model import Node
from autoscaler.core.shapes import (
    PODS,
    HostPort,
    PodShape,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)

REPEL = frozenset({"NoSchedule", "NoExecute"})
HOSTNAME_LABEL = "kubernetes.io/hostname"
NAME_FIELD = "metadata.name"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")

# why a node does not take a pod, in the order the filters are tried
NOT_READY = "not-ready"
CORDONED = "cordoned"
SELECTOR = "node-selector"
AFFINITY = "node-affinity"
TAINT = "taint"
RESOURCES = "resources"
PORTS = "host-ports"


@dataclass(frozen=True, slots=True)
class Misfit:
    """Why a node does not take a pod: `kind` (one of the constants above) and, for a
    taint, which; for resources, which are short."""

    kind: str
    detail: str = ""


# ---- the filters ----------------------------------------------------------------------------


def tolerates(t: Toleration, taint: Taint) -> bool:
    """The toleration matches the taint (k8s ToleratesTaint): same effect or none; same
    key, or no key with Exists; Exists, or Equal and the same value."""
    if t.effect and t.effect != taint.effect:
        return False
    if not t.key:
        return t.operator == "Exists"
    if t.key != taint.key:
        return False
    if t.operator == "Exists":
        return True
    return t.operator in ("Equal", "") and t.value == taint.value


def untolerated(shape: PodShape, node: Node) -> Taint | None:
    """The first NoSchedule/NoExecute taint of the node that the pod does not tolerate."""
    for taint in node.taints:
        if taint.effect in REPEL and not any(tolerates(t, taint) for t in shape.tolerations):
            return taint
    return None


def label(node: Node, key: str) -> str | None:
    if key == HOSTNAME_LABEL and node.hostname:
        return node.hostname
    for k, v in node.labels:
        if k == key:
            return v
    return None


def requirement_matches(req: Requirement, value: str | None) -> bool:
    """One requirement against the label's (or field's) value, None when absent."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        try:
            have, bound = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False  # an unknown operator, or Gt/Lt without one integer: the term fails


def term_matches(term: SelectorTerm, node: Node) -> bool:
    if not term.expressions and not term.fields:
        return False
    for req in term.fields:
        if req.key != NAME_FIELD or req.operator not in ("In", "NotIn"):
            return False
        if not requirement_matches(req, node.name):
            return False
    return all(requirement_matches(r, label(node, r.key)) for r in term.expressions)


def matches_selector(shape: PodShape, node: Node) -> bool:
    return all(label(node, k) == v for k, v in shape.node_selector)


def matches_affinity(shape: PodShape, node: Node) -> bool:
    terms = shape.affinity
    return terms is None or any(term_matches(t, node) for t in terms)


def admits(shape: PodShape, node: Node) -> Misfit | None:
    """What the node's state, labels and taints decide alone (not its free room)."""
    if not node.schedulable:
        return Misfit(NOT_READY)
    if node.cordoned and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in shape.tolerations):
        return Misfit(CORDONED)
    if not matches_selector(shape, node):
        return Misfit(SELECTOR)
    if not matches_affinity(shape, node):
        return Misfit(AFFINITY)
    taint = untolerated(shape, node)
    if taint is not None:
        return Misfit(TAINT, str(taint))
    return None


def per_node(shape: PodShape) -> bool:
    """The shape names single nodes (the hostname label, metadata.name): its filters run
    per node, not once per class."""
    if any(k == HOSTNAME_LABEL for k, _ in shape.node_selector):
        return True
    return any(
        t.fields or any(r.key == HOSTNAME_LABEL for r in t.expressions)
        for t in shape.affinity or ()
    )


def ports_conflict(taken: Iterable[HostPort], wanted: Iterable[HostPort]) -> bool:
    """A wanted host port is taken (same protocol and port; same address, or either on
    every address)."""
    for w in wanted:
        for t in taken:
            if (
                w.port == t.port
                and w.protocol == t.protocol
                and (w.ip == t.ip or w.ip in ("", "0.0.0.0") or t.ip in ("", "0.0.0.0"))
            ):
                return True
    return False


def how_many(free: Mapping[str, int], shape: PodShape) -> int:
    """Pods of the shape that fit in `free` room, by resources alone (a resource the
    node does not have is 0, but for its pod count when it gives none)."""
    count = -1
    for name, want in shape.requests:
        if want <= 0:
            continue
        if name == PODS and PODS not in free:
            continue
        n = free.get(name, 0) // want
        if n <= 0:
            return 0
        count = n if count < 0 else min(count, n)
    return 1_000_000 if count < 0 else count


def short_of(free: Mapping[str, int], shape: PodShape) -> list[str]:
    """The resources one more pod of the shape lacks."""
    return [
        name
        for name, want in shape.requests
        if want > 0 and not (name == PODS and PODS not in free) and free.get(name, 0) < want
    ]
