"""Nodes and pods: what each node offers and what the pods bound to it hold.

A node is read as the scheduler's filters see it (podspec.read_node); a pod as what it
holds on its node, which worker of which job it is, and its gang. Joined, they give
each node what its bound pods request (`nodes_in_use`) and each job the node of each
worker (`worker_nodes`): node fit and the reclaim count workers by node.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from autoscaler.core.model import Node
from autoscaler.core.options import ReadOptions
from autoscaler.core.shapes import MILLI, HostPort, PodShape
from autoscaler.read.fields import dig
from autoscaler.read.kinds import KIND_NAMES
from autoscaler.read.podspec import finished_pod, frozen, read_node, read_pod_use, read_shape
from autoscaler.read.records import PodUse

from .objects import _owner

_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


def decode_node(obj: Mapping[str, Any], options: ReadOptions) -> Node | None:
    """A node as the scheduler's filters see it (podspec.read_node): labels, taints,
    allocatable of every resource, Ready, cordoned. What its bound pods request is
    filled in when the snapshot is assembled."""
    return read_node(obj, options.gpu_resource_names)


def decode_pod(obj: Mapping[str, Any], options: ReadOptions) -> PodUse | None:
    """What an unfinished pod holds on its node (every resource: any pod can hold what a
    worker needs), which worker it is and its PodGroup; an unbound one (node "") says
    which job and gang it belongs to and its shape: a job's workers with no pod at all
    stop counting (HoldNoPods), a gang's pods say what it needs (resolve_gangs). None
    for a finished pod, or an unbound one of no job and no PodGroup."""
    if finished_pod(obj):
        return None
    ns = dig(obj, "metadata", "namespace")
    ns = ns if isinstance(ns, str) else ""
    group = dig(obj, "metadata", "annotations", _GROUP_ANNOTATION)
    # one string per gang, shared by its pods
    group = sys.intern(f"{ns}/{group}") if isinstance(group, str) and group else ""
    use = read_pod_use(obj, options.gpu_resource_names, group)
    if use is not None:
        return use
    owner = _owner(obj, ns) if ns else None
    if owner is not None and owner.kind.split(".")[0] not in KIND_NAMES:
        owner = None
    if owner is None and not group:
        return None
    shape = read_shape(
        dig(obj, "spec"), extended_resource_toleration=options.extended_resource_toleration
    )
    return PodUse(
        "",
        shape_gpus(shape, options),
        owner=(owner.namespace, owner.kind, owner.name, "") if owner is not None else None,
        group=group,
        shape=shape,
    )


def shape_gpus(shape: PodShape, options: ReadOptions) -> int:
    """Whole GPUs a pod of this shape requests (gpu_resource_names)."""
    return sum(shape.amount(name) for name in options.gpu_resource_names) // MILLI


def pods_by_owner(pods: Iterable[PodUse]) -> dict[tuple[str, str, str], int]:
    """Unfinished pods, bound or not, per job that made them: (namespace, kind, name)."""
    out: dict[tuple[str, str, str], int] = {}
    for p in pods:
        if p.owner is not None:
            key = p.owner[:3]
            out[key] = out.get(key, 0) + 1
    return out


def nodes_in_use(nodes: Iterable[Node], pods: Iterable[PodUse]) -> tuple[Node, ...]:
    """Each node with what its bound pods request of every resource, and the host ports
    they hold, by name (sorted by name)."""
    requested: dict[str, dict[str, int]] = {}
    gpus: dict[str, int] = {}
    ports: dict[str, list[HostPort]] = {}
    for pod in pods:
        if not pod.node:
            continue  # unbound: holds nothing on a node yet
        into = requested.setdefault(pod.node, {})
        for name, value in pod.requests:
            into[name] = into.get(name, 0) + value
        gpus[pod.node] = gpus.get(pod.node, 0) + pod.gpus
        if pod.ports:
            ports.setdefault(pod.node, []).extend(pod.ports)
    out = [
        replace(
            n,
            used=gpus.get(n.name, 0),
            requested=frozen(requested[n.name]),
            ports=tuple(ports.get(n.name, ())),
        )
        if n.name in requested
        else n
        for n in nodes
    ]
    return tuple(sorted(out, key=lambda n: n.name))


def node_in_use(node: Node, pods: Iterable[PodUse]) -> Node:
    """One node as nodes_in_use gives it, from the pods bound to it (in their order)."""
    into: dict[str, int] = {}
    gpus = 0
    ports: list[HostPort] = []
    bound = False
    for pod in pods:
        bound = True
        for name, value in pod.requests:
            into[name] = into.get(name, 0) + value
        gpus += pod.gpus
        ports.extend(pod.ports)
    if not bound:
        return node
    return replace(node, used=gpus, requested=frozen(into), ports=tuple(ports))


def parse_nodes(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], options: ReadOptions
) -> tuple[Node, ...]:
    """Each node as the scheduler sees it, with what its bound, unfinished pods request
    (a pod's request as the scheduler counts it: podspec.pod_requests), from raw objects."""
    return nodes_in_use(
        (n for o in nodes if (n := decode_node(o, options)) is not None),
        (p for o in pods if (p := decode_pod(o, options)) is not None),
    )


def worker_nodes(pods: Iterable[PodUse]) -> dict[tuple[str, str, str, str], tuple[str, ...]]:
    """(namespace, kind, name, worker group) of each job -> the node of each worker by
    index ("" where no pod of that index is bound)."""
    found: dict[tuple[str, str, str, str], dict[int, str]] = {}
    for pod in pods:
        if pod.owner is not None and pod.index >= 0:
            found.setdefault(pod.owner, {})[pod.index] = pod.node
    return {
        owner: tuple(by_index.get(i, "") for i in range(max(by_index) + 1))
        for owner, by_index in found.items()
    }
