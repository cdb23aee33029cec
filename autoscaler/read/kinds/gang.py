"""A job's gang as its operator counts it, from the job's pod templates: which pods (by
shape) its PodGroup's `minMember` holds. What a waiting gang needs when its PodGroup does
not say (parse.resolve_gangs): Volcano's controller and training-operator compute
`spec.minResources` from the templates' *requests*, so a template with its GPUs in
`limits` only (the API server copies them to each pod's requests) gives a PodGroup with
no GPU in it. Never raises: what cannot be read gives None (the need is then unknown).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autoscaler.core.options import ReadOptions
from autoscaler.core.shapes import PodShape
from autoscaler.read.fields import dig
from autoscaler.read.podspec import read_shape

GangPods = tuple[tuple[PodShape, int], ...]


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def first_pods(groups: Iterable[tuple[PodShape, int]], count: int | None) -> GangPods:
    """The first `count` pods of `groups`, in order (all of them when None)."""
    out: list[tuple[PodShape, int]] = []
    left = count
    for shape, n in groups:
        take = n if left is None else min(n, left)
        if take > 0:
            out.append((shape, take))
        if left is not None:
            left -= take
    return tuple(out)


def _shape(template: Any, options: ReadOptions, port: tuple[str, str, int] | None) -> PodShape:
    return read_shape(
        dig(template, "spec"),
        extended_resource_toleration=options.extended_resource_toleration,
        default_port=port,
    )


def vcjob_gang(obj: Mapping[str, Any], options: ReadOptions) -> GangPods | None:
    """Volcano's controller (calcPGMinResources): each task's minAvailable pods (its
    replicas when unset); when spec.minAvailable is smaller than their sum, only the
    first spec.minAvailable of them, task by task (tasks in spec order: their
    PriorityClasses are not read here)."""
    tasks = dig(obj, "spec", "tasks")
    if not isinstance(tasks, list) or not tasks:
        return None
    groups = []
    for task in tasks:
        if not isinstance(task, Mapping):
            return None
        replicas = _count(task.get("replicas", 0))
        least = _count(task.get("minAvailable"))
        n = least if least is not None else replicas
        if n is None:
            return None
        groups.append((_shape(task.get("template"), options, None), n))
    total = sum(n for _, n in groups)
    job_min = _count(dig(obj, "spec", "minAvailable"))
    return first_pods(groups, job_min if job_min is not None and job_min < total else None)


def kubeflow_gang(
    obj: Mapping[str, Any],
    replica_specs: str,
    options: ReadOptions,
    port: tuple[str, str, int] | None,
) -> GangPods | None:
    """training-operator: the PodGroup's minMember is runPolicy.schedulingPolicy.
    minAvailable, else every replica of every type (a Master counts as a pod of the
    gang); its minResources, the first minMember pods (Master first, then the other
    types by name)."""
    specs = dig(obj, "spec", replica_specs)
    if not isinstance(specs, Mapping) or not specs:
        return None
    names = sorted(specs, key=lambda n: (n != "Master", str(n)))
    groups = []
    for name in names:
        spec = specs[name]
        if not isinstance(spec, Mapping):
            return None
        n = _count(spec.get("replicas", 1))
        if n is None:
            return None
        groups.append((_shape(spec.get("template"), options, port), n))
    least = _count(dig(obj, "spec", "runPolicy", "schedulingPolicy", "minAvailable"))
    return first_pods(groups, least)
