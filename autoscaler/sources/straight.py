"""The records of the objects a sync reads by the ten thousand, built straight from the
bytes: bound Pods and Nodes.

The caches' usual way (`sources.wire`, then `parse.decoders`) reads the declared fields
into plain dicts and walks them with the decoders, which check every step's type. At
10k jobs a sync reads ~50k bound pods and 16k-26k nodes, and that walk was about half of
the daemon's CPU beyond the server's own floor ([placement] #27, sixth round,
docs/benchmarks.md). Here the same fields are declared as msgspec Structs whose types
are those the API server validates (strings, string maps, lists of objects), so msgspec
checks the types in C while it reads, and a record is made of attributes.

Each reader returns the object's cache key and its record, or None for an object it
does not take: one whose fields are of other types than declared (a Struct's type
check failed), or that the usual way decodes in a way not repeated here (an unbound or
finished pod, a node without a name). The cache then reads that object the usual way,
so every record and every message is the decoders' (`tests/test_straight.py` pins each
reader's record to the usual one, for served, written and randomly changed objects).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import msgspec

from ..model import MILLI, GroupRecord, HostPort, Labels, Node, ObjectRef, PodUse, Quantities, Taint
from ..options import ReadOptions
from ..parse import DEFAULT_QUEUE, MAX_NAME_LENGTH, owner_of
from ..podspec import (
    FINISHED_POD_PHASES,
    HOSTNAME_LABEL,
    KUBEFLOW_INDEX_LABEL,
    KUBEFLOW_ROLE_LABEL,
    REPEL,
    VOLCANO_INDEX_ANNOTATION,
    VOLCANO_TASK_ANNOTATION,
    frozen,
    intern,
    pod_holds,
    quantities,
)
from ..resources import WAITING_PHASES

__all__ = ["Straight", "straight"]

Key = tuple[str, str]
# an object's bytes -> (its cache key, its record), or None: read it the usual way
Straight = Callable[[bytes | msgspec.Raw], "tuple[Key, Any] | None"]

GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # as parse._GROUP_ANNOTATION

# Fields the usual way reads alike whether null or absent default to None; a field
# typed Any takes any JSON, as the usual way's dicts do.


class _Owner(msgspec.Struct, gc=False):
    kind: Any = None
    name: Any = None
    controller: Any = None


class _Meta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[_Owner] | None = None


class _Container(msgspec.Struct, gc=False):
    """What a bound pod's holding reads of a container (`podspec.pod_holds`)."""

    name: Any = None
    resources: Any = None
    ports: Any = None
    restartPolicy: Any = None


class _PodSpec(msgspec.Struct, gc=False):
    nodeName: str = ""
    containers: list[_Container] | None = None
    initContainers: list[_Container] | None = None
    overhead: Any = None
    hostNetwork: Any = None


class _PodStatus(msgspec.Struct, gc=False):
    phase: str | None = None


class _Pod(msgspec.Struct, gc=False):
    metadata: _Meta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


class _Taint(msgspec.Struct, gc=False):
    key: Any = None
    value: Any = None
    effect: Any = None


class _NodeSpec(msgspec.Struct, gc=False):
    taints: list[_Taint] | None = None
    unschedulable: Any = None


class _Condition(msgspec.Struct, gc=False):
    type: Any = None
    status: Any = None


class _NodeStatus(msgspec.Struct, gc=False):
    allocatable: Any = None
    conditions: list[_Condition] | None = None


class _NodeMeta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""  # none on a Node; its cache key has it, as the usual way's
    labels: dict[str, str] | None = None


class _Node(msgspec.Struct, gc=False):
    metadata: _NodeMeta | None = None
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None


_ENCODE = msgspec.json.Encoder().encode
_LIMIT = 1024  # distinct holdings, label sets remembered: far above a cluster's


def _interned(value: Any) -> str:
    return sys.intern(value) if isinstance(value, str) else ""


def _pod_reader(options: ReadOptions) -> Straight:
    """A bound, unfinished pod: `parse.decode_pod` as it reads one."""
    decode = msgspec.json.Decoder(_Pod).decode
    gpu_names = tuple(options.gpu_resource_names)
    # a pod spec's holding, by what it is read from: (requests, ports, GPUs)
    holds: dict[bytes, tuple[Quantities, tuple[HostPort, ...], int]] = {}

    def held(spec: _PodSpec) -> tuple[Quantities, tuple[HostPort, ...], int]:
        key = _ENCODE((spec.containers, spec.initContainers, spec.overhead, spec.hostNetwork))
        found = holds.get(key)
        if found is None:
            # read as the usual way reads it: the same fields, null and absent alike
            requests, ports = pod_holds(
                {
                    "containers": msgspec.to_builtins(spec.containers),
                    "initContainers": msgspec.to_builtins(spec.initContainers),
                    "overhead": spec.overhead,
                    "hostNetwork": spec.hostNetwork,
                }
            )
            amounts = dict(requests)
            gpus = sum(amounts.get(g, 0) for g in gpu_names) // MILLI
            found = (requests, ports, gpus)
            if len(holds) >= _LIMIT:  # never grows without bound on churn
                holds.clear()
            holds[key] = found
        return found

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        try:
            pod = decode(raw)
        except msgspec.ValidationError:
            return None
        meta, spec, status = pod.metadata, pod.spec, pod.status
        if meta is None or spec is None or not spec.nodeName:
            return None  # not bound: its shape is read the usual way
        if status is not None and status.phase in FINISHED_POD_PHASES:
            return None
        ns = sys.intern(meta.namespace)
        group = (meta.annotations or {}).get(GROUP_ANNOTATION)
        group = sys.intern(f"{ns}/{group}") if group else ""
        requests, ports, gpus = held(spec)
        owner, index = _worker_of(meta, ns)
        return (ns, meta.name), PodUse(
            sys.intern(spec.nodeName), gpus, requests, ports, owner, index, group
        )

    return read


def _worker_of(meta: _Meta, ns: str) -> tuple[tuple[str, str, str, str] | None, int]:
    """`podspec._worker_of`, of a pod read as `_Meta`."""
    controller = next((o for o in meta.ownerReferences or () if o.controller is True), None)
    if controller is None:
        return None, -1
    labels = meta.labels or {}
    annotations = meta.annotations or {}
    index: str | None
    if KUBEFLOW_ROLE_LABEL in labels:
        group, index = labels.get(KUBEFLOW_ROLE_LABEL), labels.get(KUBEFLOW_INDEX_LABEL)
    else:
        group = annotations.get(VOLCANO_TASK_ANNOTATION)
        index = annotations.get(VOLCANO_INDEX_ANNOTATION) or _name_index(meta.name)
    try:
        number = int(index) if index is not None else -1
    except ValueError:
        number = -1
    owner = (ns, _interned(controller.kind), _interned(controller.name), _interned(group).lower())
    return intern(owner), number


def _name_index(name: str) -> str | None:
    """A Volcano Job's pod is named <job>-<task>-<index> (`podspec._name_index`)."""
    if not name:
        return None
    tail = name.rsplit("-", 1)[-1]
    return tail if tail.isdigit() else None


def _node_reader(options: ReadOptions) -> Straight:
    """A Node: `podspec.read_node` as it reads one."""
    decode = msgspec.json.Decoder(_Node).decode
    gpu_names = tuple(options.gpu_resource_names)
    # a node's labels but its hostname, as served -> as kept: a pool's nodes share them
    label_sets: dict[tuple[tuple[str, str], ...], Labels] = {}

    def labels_of(raw: dict[str, str]) -> tuple[Labels, str]:
        hostname = raw.get(HOSTNAME_LABEL)
        key = tuple(raw.items())
        if hostname is not None:
            key = tuple(kv for kv in key if kv[0] != HOSTNAME_LABEL)
        labels = label_sets.get(key)
        if labels is None:
            labels = intern(tuple(sorted((sys.intern(k), sys.intern(v)) for k, v in key)))
            if len(label_sets) >= _LIMIT:  # never grows without bound on churn
                label_sets.clear()
            label_sets[key] = labels
        return labels, sys.intern(hostname) if hostname is not None else ""

    # allocatable as served -> (as kept, its GPUs): a pool's nodes share one
    resource_sets: dict[tuple[tuple[str, Any], ...], tuple[Quantities, int]] = {}

    def resources_of(allocatable: Any) -> tuple[Quantities, int]:
        try:
            key = tuple(allocatable.items()) if type(allocatable) is dict else None
            found = resource_sets.get(key) if key is not None else None
        except TypeError:  # a figure that is a list or a map: read anew
            key, found = None, None
        if found is None:
            amounts = quantities(allocatable)
            found = frozen(amounts), sum(amounts.get(g, 0) for g in gpu_names) // MILLI
            if key is not None:
                if len(resource_sets) >= _LIMIT:  # never grows without bound on churn
                    resource_sets.clear()
                resource_sets[key] = found
        return found

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        try:
            node = decode(raw)
        except msgspec.ValidationError:
            return None
        meta = node.metadata
        if meta is None or not meta.name:
            return None
        spec, status = node.spec, node.status
        resources, gpus = resources_of(status.allocatable if status is not None else None)
        ready = False
        if status is not None and status.conditions:
            ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions)
        taints: tuple[Taint, ...] = ()
        if spec is not None and spec.taints:
            taints = intern(
                tuple(
                    Taint(_interned(t.key), _interned(t.value), _interned(t.effect))
                    for t in spec.taints
                    if _repels(t.effect)
                )
            )
        labels, hostname = labels_of(meta.labels) if meta.labels else ((), "")
        return (sys.intern(meta.namespace), meta.name), Node(
            sys.intern(meta.name),
            gpus,
            0,
            ready,
            labels,
            taints,
            resources,
            cordoned=spec is not None and spec.unschedulable is True,
            hostname=hostname,
        )

    return read


def _repels(effect: Any) -> bool:
    """`effect in REPEL`, false for a value that is no key of a set (a list, a map):
    the usual way's `in` raises there, so such a node is read the usual way."""
    try:
        return effect in REPEL
    except TypeError:
        raise _Usual from None


class _Usual(Exception):
    """This object is read the usual way."""


class _GroupMeta(msgspec.Struct, gc=False):
    name: Any = None
    namespace: Any = None
    ownerReferences: Any = None


class _GroupSpec(msgspec.Struct, gc=False):
    queue: Any = None
    priorityClassName: Any = None


class _GroupStatus(msgspec.Struct, gc=False):
    phase: Any = None


class _Group(msgspec.Struct, gc=False):
    metadata: _GroupMeta | None = None
    spec: _GroupSpec | None = None
    status: _GroupStatus | None = None


def _group_reader(options: ReadOptions) -> Straight:
    """A PodGroup that waits for nothing (running, done: nearly all of them):
    `parse.decode_podgroup` as it reads one. A waiting one, or one whose phase is
    Unknown (its conditions say whether it waits), is read the usual way."""
    decode = msgspec.json.Decoder(_Group).decode

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        try:
            group = decode(raw)
        except msgspec.ValidationError:
            return None
        meta = group.metadata
        if meta is None:
            return None
        name, ns = meta.name, meta.namespace
        # what `parse._ref` takes without complaint, with a namespace of its own
        if not (isinstance(name, str) and name and len(name) <= MAX_NAME_LENGTH):
            return None
        if not (isinstance(ns, str) and ns):
            return None
        phase = group.status.phase if group.status is not None else None
        if not isinstance(phase, str):
            phase = ""
        elif phase in WAITING_PHASES or phase == "Unknown":
            return None
        spec = group.spec or _GroupSpec()
        queue, priority = spec.queue, spec.priorityClassName
        ns = sys.intern(ns)
        return (ns, name), GroupRecord(
            ObjectRef(ns, name, "PodGroup"),
            None,
            phase,
            priority if isinstance(priority, str) else None,
            queue if isinstance(queue, str) and queue else DEFAULT_QUEUE,
            owner_of(meta.ownerReferences, ns),
        )

    return read


def straight(kind: str, options: ReadOptions) -> Straight | None:
    """The straight reader of a cache of `kind` (Pod, Node, PodGroup), None for other
    kinds."""
    make = {"Pod": _pod_reader, "Node": _node_reader, "PodGroup": _group_reader}.get(kind)
    if make is None:
        return None
    read = make(options)

    def guarded(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        try:
            return read(raw)
        except _Usual:
            return None

    return guarded
