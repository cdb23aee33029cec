"""LIST pages of Pods and Nodes as the API server encodes them in protobuf.

A sync at 10k jobs reads ~50k bound pods and 16k-26k nodes. Asked in JSON, the API
server spends most of its CPU for those LISTs encoding JSON (Go's encoding/json, a
pod's managedFields and all); asked in protobuf, as client-go's informers ask for the
built-in kinds, it spends about half (docs/benchmarks.md, the sync), and the answer
is ~25 % smaller. CRDs (jobs, PodGroups) are served in JSON only, so only the Pod
and Node caches ask for it (`settings.kube_protobuf`), and only on LIST: a watch stays
JSON, one event at a time.

Only the fields our readers read are declared, with the numbers of
k8s.io/api/core/v1/generated.proto and apimachinery's (proto2: a field the server does
not send reads as its default); every other field of the bytes is skipped by the parser
in C. An object is read in one of two ways, as a JSON one is (`read.kube.cache._Cache`):

- straight to its record (`straight_reader`): a bound pod, a node; the same code as
  `read.kube.straight` builds the record from the message's attributes;
- else as the plain dict `read.kube.wire` would have read from its JSON (`wire_dict`):
  the fields the decoders read, each as Go's JSON encoding of the object writes it (an
  empty `omitempty` field absent, a pointer field present when set), which the decoders
  (`parse.decoders`) then read with their usual checks and messages.

`tests/test_proto.py` pins both to the JSON readers' records for the same objects as a
real API server serves them in each encoding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

__all__ = [
    "ACCEPT",
    "MAGIC",
    "ProtoError",
    "container_wire",
    "continue_ahead",
    "is_proto",
    "list_page",
    "node_wire",
    "parse",
    "pod_wire",
    "quantities",
    "status_json",
]

# the protobuf envelope's four bytes (runtime.protobufSerializer): a JSON answer never
# starts with them
MAGIC = b"k8s\x00"
# what a Pod or Node cache asks for: protobuf, or JSON from a server (or proxy) that
# does not serve it
ACCEPT = "application/vnd.kubernetes.protobuf, application/json"


class ProtoError(ValueError):
    """An answer that says it is protobuf but cannot be read as the envelope and list
    it should be."""


_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_TYPES = {
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "bool": _F.TYPE_BOOL,
}
_PACKAGE = "autoscaler.k8s"

# message -> its fields: (name, number, type, repeated); a type that is not a scalar
# names a message here, "map:<value>" a map<string, value>. Numbers as upstream's.
_SCHEMA: dict[str, tuple[tuple[str, int, str, bool], ...]] = {
    # k8s.io/apimachinery/pkg/runtime: Unknown, the envelope, its `raw` (bytes, 2) read
    # as the message it holds: a List, or a Status
    "ListEnvelope": (("raw", 2, "List", False), ("contentEncoding", 3, "string", False)),
    "StatusEnvelope": (("raw", 2, "Status", False), ("contentEncoding", 3, "string", False)),
    # api/resource; a map<string, Quantity>'s entry (maps read as their entries' bytes:
    # a memo's key, read when it misses)
    "Quantity": (("string", 1, "string", False),),
    "QuantityEntry": (("key", 1, "string", False), ("value", 2, "Quantity", False)),
    # k8s.io/apimachinery/pkg/apis/meta/v1
    "ListMeta": (("resourceVersion", 2, "string", False), ("continue", 3, "string", False)),
    "List": (("metadata", 1, "ListMeta", False), ("items", 2, "bytes", True)),
    "Status": (
        ("status", 2, "string", False),
        ("message", 3, "string", False),
        ("reason", 4, "string", False),
        ("code", 6, "int32", False),
    ),
    "OwnerReference": (
        ("kind", 1, "string", False),
        ("name", 3, "string", False),
        ("uid", 4, "string", False),
        ("apiVersion", 5, "string", False),
        ("controller", 6, "bool", False),
    ),
    "ObjectMeta": (
        ("name", 1, "string", False),
        ("namespace", 3, "string", False),
        ("resourceVersion", 6, "string", False),
        ("labels", 11, "map:string", False),
        ("annotations", 12, "map:string", False),
        ("ownerReferences", 13, "OwnerReference", True),
    ),
    # k8s.io/api/core/v1
    "ContainerPort": (
        ("name", 1, "string", False),
        ("hostPort", 2, "int32", False),
        ("containerPort", 3, "int32", False),
        ("protocol", 4, "string", False),
        ("hostIP", 5, "string", False),
    ),
    "ResourceRequirements": (
        ("limits", 1, "map:Quantity", False),
        ("requests", 2, "map:Quantity", False),
    ),
    "Container": (
        ("name", 1, "string", False),
        ("ports", 6, "bytes", True),  # ContainerPort
        ("resources", 8, "bytes", False),  # ResourceRequirements
        ("restartPolicy", 24, "string", False),
    ),
    "NodeSelectorRequirement": (
        ("key", 1, "string", False),
        ("operator", 2, "string", False),
        ("values", 3, "string", True),
    ),
    "NodeSelectorTerm": (
        ("matchExpressions", 1, "NodeSelectorRequirement", True),
        ("matchFields", 2, "NodeSelectorRequirement", True),
    ),
    "NodeSelector": (("nodeSelectorTerms", 1, "NodeSelectorTerm", True),),
    "NodeAffinity": (("requiredDuringSchedulingIgnoredDuringExecution", 1, "NodeSelector", False),),
    # a PodAffinityTerm's content is never read, only that there is one
    "PodAffinity": (("requiredDuringSchedulingIgnoredDuringExecution", 1, "bytes", True),),
    "Affinity": (
        ("nodeAffinity", 1, "NodeAffinity", False),
        ("podAffinity", 2, "PodAffinity", False),
        ("podAntiAffinity", 3, "PodAffinity", False),
    ),
    "Toleration": (
        ("key", 1, "string", False),
        ("operator", 2, "string", False),
        ("value", 3, "string", False),
        ("effect", 4, "string", False),
        ("tolerationSeconds", 5, "int64", False),
    ),
    "TopologySpreadConstraint": (
        ("maxSkew", 1, "int32", False),
        ("topologyKey", 2, "string", False),
        ("whenUnsatisfiable", 3, "string", False),
    ),
    # a VolumeSource's sources: only whether one is set is read
    "VolumeSource": (
        ("persistentVolumeClaim", 10, "bytes", False),
        ("ephemeral", 29, "bytes", False),
    ),
    "Volume": (("name", 1, "string", False), ("volumeSource", 2, "VolumeSource", False)),
    "PodSpec": (
        ("volumes", 1, "Volume", True),
        ("containers", 2, "Container", True),
        ("nodeSelector", 7, "map:string", False),
        ("nodeName", 10, "string", False),
        ("hostNetwork", 11, "bool", False),
        ("affinity", 18, "Affinity", False),
        ("initContainers", 20, "Container", True),
        ("tolerations", 22, "Toleration", True),
        ("overhead", 32, "bytes", True),  # QuantityEntry
        ("topologySpreadConstraints", 33, "TopologySpreadConstraint", True),
    ),
    "PodStatus": (("phase", 1, "string", False),),
    "Pod": (
        ("metadata", 1, "ObjectMeta", False),
        ("spec", 2, "PodSpec", False),
        ("status", 3, "PodStatus", False),
    ),
    # a bound pod as its straight reader reads it (read.kube.straight): of its spec, its
    # node and what its holding is read from (a Container declares only that), by which
    # the holding is remembered (these fields re-encoded: the other fields of a spec, an
    # env, differ pod by pod)
    "BoundPodSpec": (
        ("containers", 2, "Container", True),
        ("nodeName", 10, "string", False),
        ("hostNetwork", 11, "bool", False),
        ("initContainers", 20, "Container", True),
        ("overhead", 32, "bytes", True),  # QuantityEntry
    ),
    "BoundPod": (
        ("metadata", 1, "ObjectMeta", False),
        ("spec", 2, "BoundPodSpec", False),
        ("status", 3, "PodStatus", False),
    ),
    "Taint": (
        ("key", 1, "string", False),
        ("value", 2, "string", False),
        ("effect", 3, "string", False),
    ),
    "NodeSpec": (("unschedulable", 4, "bool", False), ("taints", 5, "Taint", True)),
    "NodeCondition": (("type", 1, "string", False), ("status", 2, "string", False)),
    "NodeStatus": (
        ("allocatable", 2, "bytes", True),  # QuantityEntry
        ("conditions", 4, "NodeCondition", True),
    ),
    "Node": (
        ("metadata", 1, "ObjectMeta", False),
        ("spec", 2, "NodeSpec", False),
        ("status", 3, "NodeStatus", False),
    ),
}


def _field(owner: Any, name: str, number: int, kind: str, repeated: bool) -> None:
    label = _REP if repeated else _OPT
    if kind.startswith("map:"):
        # a map<string, V> is a repeated entry message, as protoc writes it
        entry = owner.nested_type.add(name=name[0].upper() + name[1:] + "Entry")
        entry.options.map_entry = True
        _field(entry, "key", 1, "string", False)
        _field(entry, "value", 2, kind[4:], False)
        full = f".{_PACKAGE}.{owner.name}.{entry.name}"
        owner.field.add(name=name, number=number, label=_REP, type=_F.TYPE_MESSAGE, type_name=full)
    elif kind in _TYPES:
        owner.field.add(name=name, number=number, label=label, type=_TYPES[kind])
    else:
        owner.field.add(
            name=name,
            number=number,
            label=label,
            type=_F.TYPE_MESSAGE,
            type_name=f".{_PACKAGE}.{kind}",
        )


def _classes() -> dict[str, type[message.Message]]:
    file = descriptor_pb2.FileDescriptorProto(
        name="autoscaler_k8s.proto", package=_PACKAGE, syntax="proto2"
    )
    for name, fields in _SCHEMA.items():
        owner = file.message_type.add(name=name)
        for field in fields:
            _field(owner, *field)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
        for name in _SCHEMA
    }


_CLASSES = _classes()
_PARSE: dict[str, Callable[[bytes], Any]] = {name: cls.FromString for name, cls in _CLASSES.items()}


def is_proto(body: bytes) -> bool:
    return body[:4] == MAGIC


def _open(body: bytes, envelope: str) -> Any:
    """The envelope of `body` with its message read; ProtoError for one that is not."""
    if not is_proto(body):
        raise ProtoError("not a protobuf answer")
    try:
        opened = _PARSE[envelope](body[4:])
    except message.DecodeError as exc:
        raise ProtoError(f"protobuf envelope unreadable: {exc}") from None
    if opened.contentEncoding:
        raise ProtoError(f"protobuf envelope has contentEncoding {opened.contentEncoding!r}")
    return opened.raw


def list_page(body: bytes) -> tuple[str, str, Sequence[bytes]]:
    """A LIST answer in protobuf: (its resourceVersion, its continue token, each item's
    bytes, still encoded: its size is their length). ProtoError for one that is not."""
    page = _open(body, "ListEnvelope")
    meta = page.metadata
    return meta.resourceVersion, getattr(meta, "continue"), page.items


# runtime.Unknown's `raw` (2), then the List's `metadata` (1), then ListMeta's `continue`
# (3): length-delimited fields, their tags as protobuf writes them
_RAW_TAG, _META_TAG, _CONTINUE = 0x12, 0x0A, 3


def _varint(data: bytes, at: int) -> tuple[int, int] | None:
    """The varint at `at` and where it ends; None when `data` ends first."""
    value, shift = 0, 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise ProtoError("varint too long")
    return None


def continue_ahead(head: bytes) -> str | None:
    """The continue token of a protobuf LIST answer, read from its first bytes: the
    server writes the list's metadata before its items, so the next page can be asked
    for while this one still arrives (read.kube.pages). None when `head` ends before the
    token; ProtoError when the bytes are not laid out as a List's envelope (read whole
    then). A guess until the page is read whole: `list_page` reads the same token, and
    the caller compares the two."""
    if len(head) < len(MAGIC) and MAGIC.startswith(head):
        return None
    if not is_proto(head):
        raise ProtoError("not a protobuf answer")
    at = len(MAGIC)
    while True:  # runtime.Unknown's fields up to `raw`: typeMeta (1) comes first
        tag = _varint(head, at)
        if tag is None:
            return None
        if tag[0] & 7 != 2:
            raise ProtoError(f"envelope field tag {tag[0]} is not length-delimited")
        size = _varint(head, tag[1])
        if size is None:
            return None
        if tag[0] == _RAW_TAG:
            at = size[1]
            break
        at = size[1] + size[0]
    # the List: its metadata first (Go's generated marshalling writes fields in order)
    if at >= len(head):
        return None
    if head[at] != _META_TAG:
        raise ProtoError("the list's metadata is not its first field")
    meta = _varint(head, at + 1)
    if meta is None:
        return None
    start, end = meta[1], meta[1] + meta[0]
    if end > len(head):
        return None
    at = start
    while at < end:  # ListMeta: selfLink (1), resourceVersion (2), continue (3), ...
        tag = _varint(head, at)
        if tag is not None and tag[0] & 7 == 0:  # remainingItemCount (4), an int64
            skipped = _varint(head, tag[1])
            if skipped is None:
                raise ProtoError("the list's metadata is not as ListMeta writes it")
            at = skipped[1]
            continue
        if tag is None or tag[0] & 7 != 2:
            raise ProtoError("the list's metadata is not as ListMeta writes it")
        size = _varint(head, tag[1])
        if size is None or size[1] + size[0] > end:
            raise ProtoError("the list's metadata is not as ListMeta writes it")
        if tag[0] >> 3 == _CONTINUE:
            try:
                return head[size[1] : size[1] + size[0]].decode()
            except UnicodeDecodeError:
                raise ProtoError("continue token is not UTF-8") from None
        at = size[1] + size[0]
    return ""


def status_json(body: bytes) -> bytes:
    """A failure's Status sent in protobuf, as the JSON the client's ApiException (and
    `kubeapi.classify`) reads; the body as it is when it cannot be read."""
    try:
        status = _open(body, "StatusEnvelope")
    except ProtoError:
        return body
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": status.status,
            "message": status.message,
            "reason": status.reason,
            "code": status.code,
        }
    ).encode()


def parse(kind: str, raw: bytes) -> Any:
    """One item of a LIST of `kind` (Pod, Node), or a field declared as its bytes (a
    map's entry, a sub-message: `kind` its message), as its message; ProtoError when it
    cannot be read."""
    try:
        return _PARSE[kind](raw)
    except message.DecodeError as exc:
        raise ProtoError(f"{kind} unreadable in protobuf: {exc}") from None


# ---- the usual way: the dict read.kube.wire reads from the JSON ---------------------------


def quantities(resources: Any) -> dict[str, str]:
    """A map<string, Quantity> as JSON writes it, each quantity its canonical string:
    of a parsed map, or of its entries' bytes."""
    if isinstance(resources, Mapping):
        return {name: q.string for name, q in resources.items()}
    return {e.key: e.value.string for e in (parse("QuantityEntry", r) for r in resources)}


def _put(into: dict[str, Any], name: str, value: Any) -> None:
    """`omitempty`: an empty value is not written."""
    if value:
        into[name] = value


def _meta(meta: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "name", meta.name)
    _put(out, "namespace", meta.namespace)
    _put(out, "resourceVersion", meta.resourceVersion)
    _put(out, "labels", dict(meta.labels))
    _put(out, "annotations", dict(meta.annotations))
    owners = []
    for o in meta.ownerReferences:
        owner = {"apiVersion": o.apiVersion, "kind": o.kind, "name": o.name, "uid": o.uid}
        if o.HasField("controller"):  # *bool: written when set
            owner["controller"] = o.controller
        owners.append(owner)
    _put(out, "ownerReferences", owners)
    return out


def container_wire(c: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}  # a struct: written even when empty
    declared = parse("ResourceRequirements", c.resources)
    _put(resources, "limits", quantities(declared.limits))
    _put(resources, "requests", quantities(declared.requests))
    out: dict[str, Any] = {"name": c.name, "resources": resources}
    ports = []
    for p in (parse("ContainerPort", raw) for raw in c.ports):
        port: dict[str, Any] = {"containerPort": p.containerPort}
        _put(port, "name", p.name)
        _put(port, "hostPort", p.hostPort)
        _put(port, "protocol", p.protocol)
        _put(port, "hostIP", p.hostIP)
        ports.append(port)
    _put(out, "ports", ports)
    if c.HasField("restartPolicy"):  # *ContainerRestartPolicy
        out["restartPolicy"] = c.restartPolicy
    return out


def _requirements(reqs: Any) -> list[dict[str, Any]]:
    out = []
    for r in reqs:
        req: dict[str, Any] = {"key": r.key, "operator": r.operator}
        _put(req, "values", list(r.values))
        out.append(req)
    return out


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _affinity(a: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if a.HasField("nodeAffinity"):
        node: dict[str, Any] = {}
        if a.nodeAffinity.HasField(_REQUIRED):
            terms = []
            for t in getattr(a.nodeAffinity, _REQUIRED).nodeSelectorTerms:
                term: dict[str, Any] = {}
                _put(term, "matchExpressions", _requirements(t.matchExpressions))
                _put(term, "matchFields", _requirements(t.matchFields))
                terms.append(term)
            node[_REQUIRED] = {"nodeSelectorTerms": terms}
        out["nodeAffinity"] = node
    for name in ("podAffinity", "podAntiAffinity"):
        if a.HasField(name):
            # each term stands for one (its content is never read)
            required: list[dict[str, Any]] = [{} for _ in getattr(getattr(a, name), _REQUIRED)]
            out[name] = {_REQUIRED: required} if required else {}
    return out


def _toleration(t: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "key", t.key)
    _put(out, "operator", t.operator)
    _put(out, "value", t.value)
    _put(out, "effect", t.effect)
    if t.HasField("tolerationSeconds"):  # *int64
        out["tolerationSeconds"] = t.tolerationSeconds
    return out


def _volume(v: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": v.name}
    for source in ("persistentVolumeClaim", "ephemeral"):
        if v.volumeSource.HasField(source):  # inlined in JSON, a pointer each
            out[source] = {}
    return out


def _pod_spec(s: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _put(out, "nodeName", s.nodeName)
    _put(out, "hostNetwork", s.hostNetwork)
    _put(out, "overhead", quantities(s.overhead))
    _put(out, "containers", [container_wire(c) for c in s.containers])
    _put(out, "initContainers", [container_wire(c) for c in s.initContainers])
    _put(out, "nodeSelector", dict(s.nodeSelector))
    if s.HasField("affinity"):
        out["affinity"] = _affinity(s.affinity)
    _put(out, "tolerations", [_toleration(t) for t in s.tolerations])
    spread = [
        {"maxSkew": c.maxSkew, "topologyKey": c.topologyKey, "whenUnsatisfiable": w}
        for c in s.topologySpreadConstraints
        for w in (c.whenUnsatisfiable,)
    ]
    _put(out, "topologySpreadConstraints", spread)
    _put(out, "volumes", [_volume(v) for v in s.volumes])
    return out


def pod_wire(pod: Any) -> dict[str, Any]:
    """A Pod message as the dict `read.kube.wire` reads from its JSON: every field the
    decoders read of a bound or an unbound pod."""
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(pod.metadata)}
    out["spec"] = _pod_spec(pod.spec)
    status: dict[str, Any] = {}
    _put(status, "phase", pod.status.phase)
    out["status"] = status
    return out


def node_wire(node: Any) -> dict[str, Any]:
    """A Node message as the dict `read.kube.wire` reads from its JSON."""
    spec: dict[str, Any] = {}
    taints = []
    for t in node.spec.taints:
        taint = {"key": t.key, "effect": t.effect}
        _put(taint, "value", t.value)
        taints.append(taint)
    _put(spec, "taints", taints)
    _put(spec, "unschedulable", node.spec.unschedulable)
    status: dict[str, Any] = {}
    _put(status, "allocatable", quantities(node.status.allocatable))
    conditions = [{"type": c.type, "status": c.status} for c in node.status.conditions]
    _put(status, "conditions", conditions)
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": _meta(node.metadata)}
    out["spec"] = spec
    out["status"] = status
    return out
