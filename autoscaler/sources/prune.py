"""Keeping, of each raw object a watch cache holds, only the fields parsing reads: pod
templates, managed fields and kubectl's last-applied annotation are most of a job's size,
and at 10k jobs the caches would otherwise hold gigabytes. Parsing a pruned object gives
exactly what parsing the whole one gives (a test checks it on every kind)."""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from typing import Any

from ..kinds import KINDS
from ..resources import HPA
from ..settings import Settings
from ..shapes import KEEP, Shared, conditions, only


def _shapes(settings: Settings) -> dict[str, Any]:
    meta = {
        "name": KEEP,
        "namespace": KEEP,
        "uid": KEEP,
        "resourceVersion": KEEP,
        "creationTimestamp": KEEP,
        "deletionTimestamp": KEEP,
    }
    gpus = only(settings.gpu_resource_names)
    group_gpus = only(
        [*settings.gpu_resource_names, *(f"requests.{n}" for n in settings.gpu_resource_names)]
    )
    return {
        **{k.resource.kind: k.prune_shape(meta, settings) for k in KINDS},
        "PodGroup": {
            "apiVersion": KEEP,
            "kind": KEEP,
            "metadata": {**meta, "ownerReferences": KEEP},
            "spec": {
                "queue": KEEP,
                "minMember": KEEP,
                "minResources": group_gpus,
                "priorityClassName": KEEP,
            },
            "status": {"phase": KEEP, "conditions": conditions(("Unschedulable",))},
        },
        # what parse.hpa_targets reads: whom it scales, nothing of how
        HPA.kind: {
            "apiVersion": KEEP,
            "kind": KEEP,
            "metadata": {"name": KEEP, "namespace": KEEP, "uid": KEEP, "resourceVersion": KEEP},
            "spec": {"scaleTargetRef": only(("apiVersion", "kind", "name"))},
        },
        "Queue": {
            "apiVersion": KEEP,
            "kind": KEEP,
            "metadata": meta,
            "spec": {
                "deserved": gpus,
                "capability": gpus,
                "guarantee": {"resource": gpus},
                "weight": KEEP,
            },
            "status": {"state": KEEP, "allocated": gpus},
        },
        "Node": {
            "apiVersion": KEEP,
            "kind": KEEP,
            "metadata": {"name": KEEP, "resourceVersion": KEEP},
            "spec": {"unschedulable": KEEP, "taints": [{"key": KEEP, "effect": KEEP}]},
            "status": {
                "allocatable": Shared(gpus),
                "conditions": Shared(conditions(("Ready",))),
            },
        },
        # every bound pod of the cluster: only its node, phase and GPUs are kept
        "Pod": {
            "apiVersion": KEEP,
            "kind": KEEP,
            "metadata": {"name": KEEP, "namespace": KEEP, "resourceVersion": KEEP},
            # pods of one job ask alike: their pruned containers are stored once
            "spec": {
                "nodeName": KEEP,
                "containers": Shared([{"resources": {"limits": gpus, "requests": gpus}}]),
                "initContainers": Shared([{"resources": {"limits": gpus, "requests": gpus}}]),
            },
            "status": {"phase": KEEP},
        },
    }


class _SharedDict(dict):  # type: ignore[type-arg]
    __slots__ = ("__weakref__",)


class _SharedList(list):  # type: ignore[type-arg]
    __slots__ = ("__weakref__",)


_shared: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()


def _share(value: Any) -> Any:
    if isinstance(value, dict):
        candidate: Any = _SharedDict(value)
    elif isinstance(value, list):
        candidate = _SharedList(value)
    else:
        return value
    try:
        key = json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return value
    found = _shared.get(key)
    if found is not None:
        return found
    _shared[key] = candidate
    return candidate


def _prune(value: Any, shape: Any) -> Any:
    if shape is KEEP:
        return value
    if isinstance(shape, Shared):
        return _share(_prune(value, shape.shape))
    if callable(shape):
        return shape(value)
    if isinstance(shape, list):
        if not isinstance(value, list):
            return value
        return [_prune(item, shape[0]) for item in value]
    if not isinstance(value, Mapping):
        return value  # not the shape we expect: keep it whole, parsing will say why
    return {k: _prune(value[k], sub) for k, sub in shape.items() if k in value}


def pruner(settings: Settings) -> Any:
    """A function that keeps, of a raw object, only the fields parsing reads (pod
    templates, managed fields and kubectl's last-applied annotation are most of a job's
    size). Parsing a pruned object gives exactly what parsing the whole one gives."""

    shapes = _shapes(settings)

    def prune(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        kind = obj.get("kind") if isinstance(obj, Mapping) else None
        shape = shapes.get(kind) if isinstance(kind, str) else None
        return obj if shape is None else _prune(obj, shape)

    return prune
