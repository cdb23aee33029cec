"""Pod specs and nodes read as the scheduler reads them: the one reader of a pod's shape
(`read_shape`: a job's worker template, a gang's pod, any bound pod), of a Node
(`read_node`) and of what a bound pod holds on its node (`read_pod_use`).

Pure. A template is read as the created pod will be, with what the API server adds on
create: a limit alone becomes the request (defaulting), hostNetwork turns container
ports into host ports (defaulting), and, with `extended_resource_toleration`, the
ExtendedResourceToleration admission plugin (on in GKE, EKS, AKS) adds a toleration
`<resource>:Exists:NoSchedule` for every extended resource the pod requests. A real pod
already carries all of that; reading it again adds nothing new.

The scheduler's request of a pod (NodeResourcesFit): per resource, the larger of its
containers' sum (plus restartable init containers: sidecars run beside them) and each
init container's own request (plus the sidecars started before it); plus
`spec.overhead`; plus one of the node's `pods`.

Shapes, label sets and resource lists are interned: the workers of one template, and
the nodes of one pool, share one object, so 45k pods and 26k nodes stay small.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypeVar

import msgspec

from autoscaler.core.model import Node
from autoscaler.core.resources import quantity
from autoscaler.core.shapes import (
    MILLI,
    PODS,
    HostPort,
    Labels,
    PodShape,
    Quantities,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from autoscaler.read.records import PodUse

REPEL = frozenset({"NoSchedule", "NoExecute"})  # PreferNoSchedule repels nothing
FINISHED_POD_PHASES = frozenset({"Succeeded", "Failed"})
HOSTNAME_LABEL = "kubernetes.io/hostname"
# what training-operator adds to the default container of every pod it makes
# (`setDefaultPort`): torchrun's rendezvous port, Paddle's master port
PYTORCH_PORT = ("pytorch", "pytorchjob-port", 23456)
PADDLE_PORT = ("paddle", "master", 36543)
# the pod's worker, as the operators label it
KUBEFLOW_JOB_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_ROLE_LABEL = "training.kubeflow.org/replica-type"
KUBEFLOW_INDEX_LABEL = "training.kubeflow.org/replica-index"
VOLCANO_JOB_LABEL = "volcano.sh/job-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
VOLCANO_INDEX_ANNOTATION = "volcano.sh/task-index"

_T = TypeVar("_T")
_INTERNED: dict[Any, Any] = {}
_INTERN_LIMIT = 200_000  # distinct shapes, label sets, resource lists: far above a cluster's


def intern(value: _T) -> _T:
    """One shared object per distinct value (tuples and frozen shapes)."""
    found = _INTERNED.get(value)
    if found is not None:
        return found  # type: ignore[no-any-return]
    if len(_INTERNED) >= _INTERN_LIMIT:  # never grows without bound on churn
        _INTERNED.clear()
    _INTERNED[value] = value
    return value


def is_map(obj: Any) -> bool:
    # JSON gives plain dicts: test that first, the abstract Mapping check costs ten
    # times more, and a template is a few dozen such checks
    return type(obj) is dict or isinstance(obj, Mapping)


def items(value: Any) -> Sequence[Any]:
    """A list field's items (a list, or a tuple built in code); none where it holds
    anything else (an object the API server did not validate, e.g. a snapshot file's,
    may hold a scalar there)."""
    return value if isinstance(value, (list, tuple)) else ()


def finished_pod(obj: Any) -> bool:
    """The pod has ended (status.phase Succeeded or Failed; a phase that is not a
    string is none)."""
    phase = dig(obj, "status", "phase")
    return isinstance(phase, str) and phase in FINISHED_POD_PHASES


def dig(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]..., None where a step is missing or not a mapping (as
    fields.dig, which sits on this module's floor)."""
    for key in path:
        if not is_map(obj):
            return None
        obj = obj.get(key)
    return obj


def _str(value: Any) -> str:
    return sys.intern(value) if isinstance(value, str) else ""


# ---- quantities -------------------------------------------------------------------------


def milli(value: Any) -> int | None:
    """A Kubernetes quantity in milli-units, rounded up (as the scheduler rounds a
    request); None when it is not one (the API server validated what it stored, so an
    unreadable figure is not ours to report: it counts as absent)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * MILLI if value >= 0 else None
    if isinstance(value, float):
        return math.ceil(value * MILLI) if math.isfinite(value) and value >= 0 else None
    if not isinstance(value, str) or len(value) > 64:
        return None
    return _milli_text(value)


@lru_cache(maxsize=4096)  # a cluster's requests are a few dozen distinct strings
def _milli_text(value: str) -> int | None:
    number = quantity(value)
    if number is None or number < 0 or not number.is_finite():
        return None
    return int((number * MILLI).to_integral_value(rounding="ROUND_CEILING"))


def quantities(resources: Any) -> dict[str, int]:
    """A resource list (requests, limits, allocatable) in milli-units; unreadable
    entries left out. A new dict each call (callers add to it)."""
    if not is_map(resources):
        return {}
    try:
        key = tuple(resources.items())
        known = _QUANTITIES.get(key)
    except TypeError:  # a figure that is a list or a map: not a quantity, read below
        key, known = None, None
    if known is None:
        known = _read_quantities(resources)
        if key is not None:
            if len(_QUANTITIES) >= _INTERN_LIMIT:  # never grows without bound on churn
                _QUANTITIES.clear()
            _QUANTITIES[key] = known
    return dict(known)


# resource lists as served -> as read: a cluster's pods and nodes repeat a few dozen
# (50k pods' requests and limits, 26k nodes' allocatable: ~12% of a sync's CPU to read
# each anew)
_QUANTITIES: dict[tuple[tuple[Any, Any], ...], dict[str, int]] = {}


def _read_quantities(resources: Mapping[Any, Any]) -> dict[str, int]:
    out = {}
    for name, value in resources.items():
        amount = milli(value)
        if isinstance(name, str) and amount is not None:
            out[name] = amount
    return out


def frozen(amounts: Mapping[str, int]) -> Quantities:
    """A resource dict as the sorted, interned tuple the model keeps (zeros dropped)."""
    return intern(tuple(sorted((sys.intern(k), v) for k, v in amounts.items() if v)))


def is_extended(name: str) -> bool:
    """An extended resource (nvidia.com/gpu, rdma/hca): a domain-prefixed name outside
    kubernetes.io, not a quota's requests.* (the API's IsExtendedResourceName)."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


# ---- the shape of a pod ------------------------------------------------------------------


def _container_requests(container: Any) -> dict[str, int]:
    """A container's requests as the API server defaults them: a resource with a limit
    and no request is requested at its limit."""
    resources: Any = container.get("resources") if is_map(container) else None
    if not is_map(resources):
        return {}
    out = quantities(resources.get("limits"))
    out.update(quantities(resources.get("requests")))
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def pod_requests(spec: Any) -> dict[str, int]:
    """What the scheduler counts a pod as requesting, per resource, milli-units, its
    one `pods` included (see the module docstring)."""
    if not is_map(spec):
        spec = {}
    total: dict[str, int] = {}
    for container in items(spec.get("containers")):
        _add(total, _container_requests(container))
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for container in items(spec.get("initContainers")):
        own = _container_requests(container)
        if dig(container, "restartPolicy") == "Always":  # a sidecar: runs beside the rest
            _add(sidecars, own)
            continue
        step = dict(sidecars)
        _add(step, own)
        for name, value in step.items():
            peak[name] = max(peak.get(name, 0), value)
    _add(total, sidecars)
    for name, value in peak.items():
        total[name] = max(total.get(name, 0), value)
    _add(total, quantities(spec.get("overhead")))
    total[PODS] = MILLI
    return total


def _tolerations(spec: Any, requests: Iterable[str], extended: bool) -> tuple[Toleration, ...]:
    found = []
    for t in items(spec.get("tolerations")):
        if not is_map(t):
            continue
        found.append(
            Toleration(
                _str(t.get("key")),
                _str(t.get("operator")) or "Equal",
                _str(t.get("value")),
                _str(t.get("effect")),
            )
        )
    if extended:  # what ExtendedResourceToleration adds on create
        found += [Toleration(name, "Exists", "", "NoSchedule") for name in requests]
    return tuple(dict.fromkeys(found))


def _requirements(reqs: Any) -> tuple[Requirement, ...]:
    out = []
    for r in items(reqs):
        if not is_map(r):
            continue
        values = r.get("values") or ()
        out.append(
            Requirement(
                _str(r.get("key")),
                _str(r.get("operator")),
                tuple(_str(v) for v in values) if isinstance(values, list) else (),
            )
        )
    return tuple(out)


def _affinity(spec: Any) -> tuple[SelectorTerm, ...] | None:
    required = dig(
        spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not is_map(required):
        return None
    terms = required.get("nodeSelectorTerms")
    return tuple(
        SelectorTerm(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
        for t in (terms if isinstance(terms, list) else ())
        if is_map(t)
    )


def _host_ports(spec: Any, default_port: tuple[str, str, int] | None) -> tuple[HostPort, ...]:
    """Host ports the pod takes: each container port's hostPort, or with hostNetwork its
    containerPort (the API server defaults hostPort to it). `default_port`: (container,
    port name, number) its operator adds to that container unless a port of that name
    is there."""
    host_network = spec.get("hostNetwork") is True
    found: list[HostPort] = []
    for container in items(spec.get("containers")):
        if not is_map(container):
            continue
        ports = [p for p in items(container.get("ports")) if is_map(p)]
        if (
            default_port is not None
            and container.get("name") == default_port[0]
            and not any(p.get("name") == default_port[1] for p in ports)
        ):
            ports.append({"name": default_port[1], "containerPort": default_port[2]})
        for p in ports:
            port = p.get("hostPort") or (p.get("containerPort") if host_network else None)
            if isinstance(port, int) and not isinstance(port, bool) and port > 0:
                ip = _str(p.get("hostIP"))
                found.append(HostPort(port, _str(p.get("protocol")) or "TCP", ip))
    return tuple(dict.fromkeys(found))


def _unmodelled(spec: Any) -> tuple[str, ...]:
    """What the pod asks of the scheduler that fit does not judge."""
    out = []
    affinity = spec.get("affinity")
    if affinity is None:
        affinity = {}
    if dig(affinity, "podAffinity", "requiredDuringSchedulingIgnoredDuringExecution"):
        out.append("inter-pod affinity")
    if dig(affinity, "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"):
        out.append("inter-pod anti-affinity")
    spread = items(spec.get("topologySpreadConstraints"))
    if any(dig(c, "whenUnsatisfiable") in (None, "DoNotSchedule") for c in spread):
        out.append("topology spread")
    volumes = items(spec.get("volumes"))
    if any(is_map(v) and ("persistentVolumeClaim" in v or "ephemeral" in v) for v in volumes):
        out.append("volumes")
    return tuple(out)


def encoded(value: Any) -> bytes | None:
    """`value` as JSON bytes: a memo's key for what is read of it (equal bytes, equal
    JSON); None when it is not plain JSON, which would not read back as itself (a
    snapshot file's YAML may hold dates and numbers as keys, which encode as strings;
    a tuple encodes as a list): such a value is read anew each time."""
    try:
        encoded = _ENCODE(value)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return None
    return encoded if _DECODE(encoded) == value else None  # ~1 us of a ~12 us read


_ENCODE = msgspec.json.Encoder().encode
_DECODE = msgspec.json.Decoder().decode
# a pod spec as read (sources.wire declares only what is read: a template without its
# env, command and probes is a few hundred bytes) -> its shape: the jobs of a cluster
# repeat a few dozen, and reading one costs ~10 us
_SHAPES: dict[tuple[bytes, bool, tuple[str, str, int] | None], PodShape] = {}
_SHAPES_LIMIT = 1024  # ~0.5 MB of keys at most


def read_shape(
    spec: Any,
    *,
    extended_resource_toleration: bool = True,
    default_port: tuple[str, str, int] | None = None,
) -> PodShape:
    """The shape of a pod of this spec (a template's `spec`, or a pod's), as the
    created pod will be (see the module docstring). Never raises: what cannot be read
    is left out (the API server validated it)."""
    if not is_map(spec):
        spec = {}
    text = encoded(spec)
    if text is None:
        return _read_shape(spec, extended_resource_toleration, default_port)
    key = (text, extended_resource_toleration, default_port)
    shape = _SHAPES.get(key)
    if shape is None:
        shape = _read_shape(spec, extended_resource_toleration, default_port)
        if len(_SHAPES) >= _SHAPES_LIMIT:  # never grows without bound on churn
            _SHAPES.clear()
        _SHAPES[key] = shape
    return shape


def _read_shape(
    spec: Any, extended_resource_toleration: bool, default_port: tuple[str, str, int] | None
) -> PodShape:
    requests = pod_requests(spec)
    selector = spec.get("nodeSelector")
    labels: Labels = ()
    if is_map(selector):
        labels = tuple(sorted((_str(k), _str(v)) for k, v in selector.items()))
    extended = [n for n, v in sorted(requests.items()) if v and is_extended(n)]
    return intern(
        PodShape(
            frozen(requests),
            intern(labels),
            _affinity(spec),
            intern(_tolerations(spec, extended, extended_resource_toleration)),
            _host_ports(spec, default_port),
            _unmodelled(spec),
        )
    )


# ---- nodes and the pods bound to them ------------------------------------------------------


def read_node(obj: Mapping[str, Any], gpu_names: Iterable[str]) -> Node | None:
    """A Node as the scheduler's filters see it; None for one without a name. What
    bound pods request there is filled in when a snapshot is assembled."""
    name = dig(obj, "metadata", "name")
    if not isinstance(name, str) or not name:
        return None
    allocatable = quantities(dig(obj, "status", "allocatable"))
    gpus = sum(allocatable.get(g, 0) for g in gpu_names) // MILLI
    ready = any(
        is_map(c) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in items(dig(obj, "status", "conditions"))
    )
    taints = tuple(
        Taint(_str(t.get("key")), _str(t.get("value")), _str(t.get("effect")))
        for t in items(dig(obj, "spec", "taints"))
        if is_map(t) and _str(t.get("effect")) in REPEL
    )
    raw_labels = dig(obj, "metadata", "labels")
    labels: Labels = ()
    hostname = ""
    if is_map(raw_labels):
        hostname = _str(raw_labels.get(HOSTNAME_LABEL))
        labels = tuple(
            sorted((_str(k), _str(v)) for k, v in raw_labels.items() if k != HOSTNAME_LABEL)
        )
    return Node(
        sys.intern(name),
        gpus,
        0,
        ready,
        intern(labels),
        intern(taints),
        frozen(allocatable),
        cordoned=dig(obj, "spec", "unschedulable") is True,
        hostname=hostname,
    )


def read_pod_use(
    obj: Mapping[str, Any], gpu_names: Iterable[str], group: str = ""
) -> PodUse | None:
    """What a bound, unfinished pod holds on its node (every resource, its host ports)
    and which job's worker it is (`group`: its PodGroup, namespace/name); None for a pod
    not bound or finished."""
    node = dig(obj, "spec", "nodeName")
    if not isinstance(node, str) or not node:
        return None
    if finished_pod(obj):
        return None
    spec = obj.get("spec")
    if not is_map(spec):
        spec = {}
    requests, ports = pod_holds(spec)
    amounts = dict(requests)
    gpus = sum(amounts.get(g, 0) for g in gpu_names) // MILLI
    owner, index = _worker_of(obj)
    return PodUse(sys.intern(node), gpus, requests, ports, owner, index, group)


def pod_holds(spec: Any) -> tuple[Quantities, tuple[HostPort, ...]]:
    """What a pod of this spec requests and the host ports it takes, remembered by what
    they are read from: a cluster's pods repeat a few dozen (50k bound pods: ~5 us
    each to read anew)."""
    key = encoded(  # a list: a tuple would not read back as itself
        [
            spec.get("containers"),
            spec.get("initContainers"),
            spec.get("overhead"),
            spec.get("hostNetwork"),
        ]
    )
    held = _HOLDS.get(key) if key is not None else None
    if held is None:
        held = frozen(pod_requests(spec)), intern(_host_ports(spec, None))
        if key is not None:
            if len(_HOLDS) >= _SHAPES_LIMIT:  # never grows without bound on churn
                _HOLDS.clear()
            _HOLDS[key] = held
    return held


_HOLDS: dict[bytes, tuple[Quantities, tuple[HostPort, ...]]] = {}


def _worker_of(obj: Mapping[str, Any]) -> tuple[tuple[str, str, str, str] | None, int]:
    """(namespace, kind, name, worker group) of the job whose pod this is, and its index
    there, from its controller reference and its operator's labels; (None, -1) for a
    pod of no job."""
    controller = next(
        (
            o
            for o in items(dig(obj, "metadata", "ownerReferences"))
            if is_map(o) and o.get("controller") is True
        ),
        None,
    )
    if controller is None:
        return None, -1
    labels = dig(obj, "metadata", "labels") or {}
    annotations = dig(obj, "metadata", "annotations") or {}
    if not is_map(labels) or not is_map(annotations):
        return None, -1
    if KUBEFLOW_ROLE_LABEL in labels:
        group, index = labels.get(KUBEFLOW_ROLE_LABEL), labels.get(KUBEFLOW_INDEX_LABEL)
    else:
        group = annotations.get(VOLCANO_TASK_ANNOTATION)
        index = annotations.get(VOLCANO_INDEX_ANNOTATION) or _name_index(obj)
    try:
        number = int(index) if isinstance(index, str | int) else -1
    except ValueError:
        number = -1
    owner = (
        _str(dig(obj, "metadata", "namespace")),
        _str(controller.get("kind")),
        _str(controller.get("name")),
        _str(group).lower(),
    )
    return intern(owner), number


def _name_index(obj: Mapping[str, Any]) -> str | None:
    """A Volcano Job's pod is named <job>-<task>-<index>."""
    name = dig(obj, "metadata", "name")
    if isinstance(name, str):
        tail = name.rsplit("-", 1)[-1]
        return tail if tail.isdigit() else None
    return None
