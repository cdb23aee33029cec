"""What the caches read of each object, decoded straight from the bytes the server sent.

A cache used to decode every object whole (`msgspec.json.decode` into dicts) and then
read a few fields of it: at 10k jobs, 16k-26k nodes and 50k bound pods that is ~350 MB
of JSON turned into Python objects, most of it never read (`managedFields`, a pod's
env, probes and volume mounts, a node's images and conditions' messages). Here each
kind the caches hold in bulk has TypedDicts declaring only the fields its decoder
(`parse.decoders`) reads; msgspec skips everything else in the bytes without building
it and gives the same plain dict the decoder reads, absent fields absent, so the
decoders stay the one reader of every field, with their messages. (Structs read into
and then turned into dicts by `msgspec.to_builtins` gave the same dicts, ~1 us an
object later, for nothing the decoders use.)

Declared here, per kind (what `parse`, `podspec` and `kinds` read):

- every object: apiVersion, kind; metadata name, namespace, labels, annotations,
  resourceVersion, ownerReferences; of jobs and PodGroups also uid, creationTimestamp,
  deletionTimestamp and of each managedFields entry its time and subresource
  (`parse._asked_at`), which nothing reads of a Pod or a Node;
- Kubeflow jobs (PyTorchJob, PaddleJob): spec.elasticPolicy and spec.runPolicy whole;
  of each replica spec its replicas and its template's pod spec, declared as a Pod's
  below (a template's bulk, its containers' env, command and probes, is never read);
  status whole;
- Volcano Jobs and PodGroups: spec and status whole (the kinds' readers walk them);
- Nodes: spec.taints, spec.unschedulable, status.allocatable, and of each condition its
  type and status (`podspec.read_node`);
- Pods: spec.nodeName, hostNetwork, overhead; of each container and init container
  its name, resources, ports and restartPolicy; status.phase (`parse.decode_pod`,
  `podspec.read_pod_use`). A pod not bound to a node (no spec.nodeName) is read again
  with what its shape needs besides (`podspec.read_shape`): nodeSelector, affinity,
  tolerations, topologySpreadConstraints, and of each volume whether it is a
  persistentVolumeClaim or ephemeral. A bound pod's record never reads those (it says
  what the pod holds where it runs), and of 50k pods nearly all are bound.

A field of another JSON type than declared (the API server validates core objects,
but a CRD's schema may be loose) makes the object decode whole, as before: its decoder
then reads and reports it as it always did. Kinds not declared here (Queues,
PriorityClasses, HPAs: few, small) are decoded whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import msgspec

from autoscaler.read.kinds.kubeflow import PADDLEJOB_KIND, PYTORCHJOB_KIND

__all__ = ["Reader", "read_whole", "reader"]

Reader = Callable[[bytes | msgspec.Raw], Any]

# Each TypedDict names the JSON fields as served (camelCase); every field may be absent
# (total=False); a field typed Any is read as whatever JSON it holds.


class _Managed(TypedDict, total=False):
    """A metadata.managedFields entry: when and to what it wrote (not fieldsV1)."""

    time: Any
    subresource: Any


class _PodMeta(TypedDict, total=False):
    """A Pod's or a Node's metadata: no times, no managedFields."""

    name: Any
    namespace: Any
    labels: Any
    annotations: Any
    resourceVersion: Any
    ownerReferences: Any


class _Meta(_PodMeta, total=False):
    """A job's or a PodGroup's metadata: also its times and managedFields' times."""

    uid: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    managedFields: list[_Managed]


class _Kinded(TypedDict, total=False):
    apiVersion: Any
    kind: Any


class _Object(_Kinded, total=False):
    """A job of any kind, a PodGroup: spec and status as they are."""

    metadata: _Meta
    spec: Any
    status: Any


class _Condition(TypedDict, total=False):
    type: Any
    status: Any


class _NodeSpec(TypedDict, total=False):
    taints: Any
    unschedulable: Any


class _NodeStatus(TypedDict, total=False):
    allocatable: Any
    conditions: list[_Condition]


class _Node(_Kinded, total=False):
    metadata: _PodMeta
    spec: _NodeSpec
    status: _NodeStatus


class _Container(TypedDict, total=False):
    name: Any
    resources: Any
    ports: Any
    restartPolicy: Any


class _Volume(TypedDict, total=False):
    persistentVolumeClaim: Any
    ephemeral: Any


class _BoundSpec(TypedDict, total=False):
    """What a bound pod's record reads of its spec (`podspec.read_pod_use`)."""

    nodeName: Any
    containers: list[_Container]
    initContainers: list[_Container]
    overhead: Any
    hostNetwork: Any


class _PodSpec(_BoundSpec, total=False):
    """A pod spec as its shape reads it (`podspec.read_shape`)."""

    nodeSelector: Any
    affinity: Any
    tolerations: Any
    topologySpreadConstraints: Any
    volumes: list[_Volume]


class _Template(TypedDict, total=False):
    """A job's pod template: only its pod spec is read (`kinds.base.read_workers`,
    `kinds.gang`)."""

    spec: _PodSpec


class _Replica(TypedDict, total=False):
    replicas: Any
    template: _Template


def _kubeflow(kind: str, replica_specs: str) -> Any:
    """A Kubeflow job (`kinds.kubeflow`): its replica specs at `spec.<replica_specs>`,
    the field its kind names (a class statement cannot take a name from a variable)."""
    spec = _typed_dict(
        f"_{kind}Spec",
        {replica_specs: dict[str, _Replica], "elasticPolicy": Any, "runPolicy": Any},
        total=False,
    )
    fields = {"apiVersion": Any, "kind": Any, "metadata": _Meta, "spec": spec, "status": Any}
    return _typed_dict(f"_{kind}", fields, total=False)


# TypedDict's call form, for field names known only at run time (mypy types only a
# literal call of it)
_typed_dict: Any = TypedDict


class _PodStatus(TypedDict, total=False):
    phase: Any


class _Pod(_Kinded, total=False):
    metadata: _PodMeta
    spec: _PodSpec
    status: _PodStatus


class _BoundPod(_Kinded, total=False):
    metadata: _PodMeta
    spec: _BoundSpec
    status: _PodStatus


def read_whole(raw: bytes | msgspec.Raw) -> Any:
    """The object as it is, every field: for kinds with no declared fields."""
    return msgspec.json.decode(raw)


def _lean(schema: Any) -> Reader:
    decoder = msgspec.json.Decoder(schema)

    def read(raw: bytes | msgspec.Raw) -> Any:
        try:
            return decoder.decode(raw)
        except msgspec.ValidationError:
            # a field of another type than declared: read whole, so that its decoder
            # sees it and says what is wrong as before (malformed JSON raises alike)
            return msgspec.json.decode(raw)

    return read


def _pod_reader() -> Reader:
    """A Pod: bound to a node, what its record reads (`_BoundSpec`); else read again
    with its shape's fields (`_PodSpec`)."""
    bound = msgspec.json.Decoder(_BoundPod)
    whole = _lean(_Pod)

    def read(raw: bytes | msgspec.Raw) -> Any:
        try:
            pod = bound.decode(raw)
        except msgspec.ValidationError:
            return whole(raw)  # read whole there, if the type is wrong in _Pod's fields
        node = pod["spec"].get("nodeName") if "spec" in pod else None
        if not isinstance(node, str) or not node:
            return whole(raw)
        return pod

    return read


_SCHEMAS: dict[str, Any] = {"Node": _Node, "PodGroup": _Object}
_JOB_SCHEMAS: dict[str, Any] = {
    k.resource.kind: _kubeflow(k.resource.kind, k.replica_specs)
    for k in (PYTORCHJOB_KIND, PADDLEJOB_KIND)
}


def reader(kind: str, *, job: bool = False) -> Reader:
    """How a cache of `kind` decodes an object's bytes into what its decoder reads:
    the declared fields of Nodes, Pods, PodGroups and jobs (`job`: a managed job kind),
    every field of any other kind."""
    if kind == "Pod" and not job:
        return _pod_reader()
    schema = _JOB_SCHEMAS.get(kind, _Object) if job else _SCHEMAS.get(kind)
    return read_whole if schema is None else _lean(schema)
