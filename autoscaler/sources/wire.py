"""What the caches read of each object, decoded straight from the bytes the server sent.

A cache used to decode every object whole (`msgspec.json.decode` into dicts) and then
read a few fields of it: at 10k jobs, 16k-26k nodes and 50k bound pods that is ~350 MB
of JSON turned into Python objects, most of it never read (`managedFields`, a pod's
env, probes and volume mounts, a node's images and conditions' messages). Here each
kind the caches hold in bulk has msgspec Structs declaring only the fields its decoder
(`parse.decoders`) reads; msgspec skips everything else in the bytes without building
it, and `msgspec.to_builtins` turns what was read into the same plain dict the decoder
reads, absent fields absent (`UNSET` is left out), so the decoders stay the one reader
of every field, with their messages.

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
from typing import Any

import msgspec
from msgspec import UNSET, Struct, UnsetType

from ..kinds.kubeflow import PADDLEJOB_KIND, PYTORCHJOB_KIND

__all__ = ["Reader", "read_whole", "reader"]

Reader = Callable[[bytes | msgspec.Raw], Any]


class _Managed(Struct, rename="camel"):
    """A metadata.managedFields entry: when and to what it wrote (not fieldsV1)."""

    time: Any = UNSET
    subresource: Any = UNSET


class _PodMeta(Struct, rename="camel"):
    """A Pod's or a Node's metadata: no times, no managedFields."""

    name: Any = UNSET
    namespace: Any = UNSET
    labels: Any = UNSET
    annotations: Any = UNSET
    resource_version: Any = UNSET
    owner_references: Any = UNSET


class _Meta(_PodMeta):
    """A job's or a PodGroup's metadata: also its times and managedFields' times."""

    uid: Any = UNSET
    creation_timestamp: Any = UNSET
    deletion_timestamp: Any = UNSET
    managed_fields: list[_Managed] | UnsetType = UNSET


class _Kinded(Struct, rename="camel"):
    api_version: Any = UNSET
    kind: Any = UNSET


class _Object(_Kinded):
    """A job of any kind, a PodGroup: spec and status as they are."""

    metadata: _Meta | UnsetType = UNSET
    spec: Any = UNSET
    status: Any = UNSET


class _Condition(Struct):
    type: Any = UNSET
    status: Any = UNSET


class _NodeSpec(Struct):
    taints: Any = UNSET
    unschedulable: Any = UNSET


class _NodeStatus(Struct):
    allocatable: Any = UNSET
    conditions: list[_Condition] | UnsetType = UNSET


class _Node(_Kinded):
    metadata: _PodMeta | UnsetType = UNSET
    spec: _NodeSpec | UnsetType = UNSET
    status: _NodeStatus | UnsetType = UNSET


class _Container(Struct, rename="camel"):
    name: Any = UNSET
    resources: Any = UNSET
    ports: Any = UNSET
    restart_policy: Any = UNSET


class _Volume(Struct, rename="camel"):
    persistent_volume_claim: Any = UNSET
    ephemeral: Any = UNSET


class _BoundSpec(Struct, rename="camel"):
    """What a bound pod's record reads of its spec (`podspec.read_pod_use`)."""

    node_name: Any = UNSET
    containers: list[_Container] | UnsetType = UNSET
    init_containers: list[_Container] | UnsetType = UNSET
    overhead: Any = UNSET
    host_network: Any = UNSET


class _PodSpec(_BoundSpec):
    """A pod spec as its shape reads it (`podspec.read_shape`)."""

    node_selector: Any = UNSET
    affinity: Any = UNSET
    tolerations: Any = UNSET
    topology_spread_constraints: Any = UNSET
    volumes: list[_Volume] | UnsetType = UNSET


class _Template(Struct):
    """A job's pod template: only its pod spec is read (`kinds.base.read_workers`,
    `kinds.gang`)."""

    spec: _PodSpec | UnsetType = UNSET


class _Replica(Struct):
    replicas: Any = UNSET
    template: _Template | UnsetType = UNSET


def _kubeflow(kind: str, replica_specs: str) -> type[Struct]:
    """A Kubeflow job (`kinds.kubeflow`): its replica specs at `spec.<replica_specs>`."""
    spec = msgspec.defstruct(
        f"_{kind}Spec",
        [
            (replica_specs, dict[str, _Replica] | UnsetType, UNSET),
            ("elasticPolicy", Any, UNSET),
            ("runPolicy", Any, UNSET),
        ],
    )
    return msgspec.defstruct(
        f"_{kind}",
        [
            ("metadata", _Meta | UnsetType, UNSET),
            ("spec", spec | UnsetType, UNSET),
            ("status", Any, UNSET),
        ],
        bases=(_Kinded,),
    )


class _PodStatus(Struct):
    phase: Any = UNSET


class _Pod(_Kinded):
    metadata: _PodMeta | UnsetType = UNSET
    spec: _PodSpec | UnsetType = UNSET
    status: _PodStatus | UnsetType = UNSET


class _BoundPod(_Kinded):
    metadata: _PodMeta | UnsetType = UNSET
    spec: _BoundSpec | UnsetType = UNSET
    status: _PodStatus | UnsetType = UNSET


def read_whole(raw: bytes | msgspec.Raw) -> Any:
    """The object as it is, every field: for kinds with no declared fields."""
    return msgspec.json.decode(raw)


def _lean(schema: type[Struct]) -> Reader:
    decoder = msgspec.json.Decoder(schema)
    to_builtins = msgspec.to_builtins

    def read(raw: bytes | msgspec.Raw) -> Any:
        try:
            return to_builtins(decoder.decode(raw))
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
    to_builtins = msgspec.to_builtins

    def read(raw: bytes | msgspec.Raw) -> Any:
        try:
            pod = bound.decode(raw)
        except msgspec.ValidationError:
            return whole(raw)  # read whole there, if the type is wrong in _Pod's fields
        spec = pod.spec
        if spec is UNSET or not isinstance(spec.node_name, str) or not spec.node_name:
            return whole(raw)
        return to_builtins(pod)

    return read


_SCHEMAS: dict[str, type[Struct]] = {"Node": _Node, "PodGroup": _Object}
_JOB_SCHEMAS: dict[str, type[Struct]] = {
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
