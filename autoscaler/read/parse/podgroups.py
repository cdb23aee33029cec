"""Volcano PodGroups: the gangs waiting for room, and the queue each job runs in.

A waiting PodGroup that needs GPUs is a `PendingGroup` the planner may make room for; a
malformed one is an `InvalidGroup` that says why; a running, finished or GPU-free one is
nothing to plan. Its spec.queue is where Volcano runs its job, whatever the job says
(`podgroup_queues`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autoscaler.core.model import InvalidGroup, PendingGroup
from autoscaler.core.options import ReadOptions
from autoscaler.core.resources import WAITING_PHASES
from autoscaler.read.fields import BadField, dig, parse_quantity
from autoscaler.read.records import GroupRecord

from .objects import DEFAULT_QUEUE, _created, _fallback_ref, _owner, _ref
from .queues import NO_PRIORITIES, Priorities


def _waiting(obj: Mapping[str, Any]) -> str | None:
    phase = dig(obj, "status", "phase")
    if not isinstance(phase, str):
        return None
    if phase in WAITING_PHASES:
        return phase
    if phase == "Unknown":
        conditions = dig(obj, "status", "conditions")
        if isinstance(conditions, list) and any(
            dig(c, "type") == "Unschedulable" and dig(c, "status") == "True" for c in conditions
        ):
            return phase
    return None


def parse_podgroup(
    obj: Mapping[str, Any], options: ReadOptions, priorities: Priorities
) -> PendingGroup | InvalidGroup | None:
    """A waiting PodGroup that needs GPUs, an invalid one, or None (running, done, or
    GPU-free: nothing for the planner to make room for)."""

    try:
        ref = _ref(obj, "PodGroup")
    except BadField as exc:
        return InvalidGroup(_fallback_ref(obj, "PodGroup"), DEFAULT_QUEUE, str(exc))
    phase = _waiting(obj)
    if phase is None:
        return None
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    queue = spec.get("queue")
    queue = queue if isinstance(queue, str) and queue else DEFAULT_QUEUE
    min_resources = spec.get("minResources") or {}
    if not isinstance(min_resources, Mapping):
        return InvalidGroup(ref, queue, f"{ref}: spec.minResources must be a mapping")
    gpus = 0
    try:
        for name in options.gpu_resource_names:
            if name in min_resources:
                gpus += parse_quantity(min_resources[name], f"spec.minResources[{name}]")
            elif f"requests.{name}" in min_resources:
                gpus += parse_quantity(
                    min_resources[f"requests.{name}"], f"spec.minResources[requests.{name}]"
                )
    except BadField as exc:
        return InvalidGroup(ref, queue, f"{ref}: {exc}")
    # gpus 0: minResources names no GPU, which a template with its GPUs in limits only
    # gives too: its pods or its job's templates say what it needs (resolve_gangs)
    min_member = spec.get("minMember")
    return PendingGroup(
        ref=ref,
        queue=queue,
        gpus=gpus,
        created=_created(obj["metadata"]),
        priority=priorities.of(spec.get("priorityClassName")),
        owner=_owner(obj, ref.namespace),
        phase=phase,
        min_member=min_member if isinstance(min_member, int) and min_member > 0 else 0,
    )


def decode_podgroup(obj: Mapping[str, Any], options: ReadOptions) -> GroupRecord:
    phase = dig(obj, "status", "phase")
    name = dig(obj, "spec", "priorityClassName")
    group = parse_podgroup(obj, options, NO_PRIORITIES)
    queue = dig(obj, "spec", "queue")
    namespace = dig(obj, "metadata", "namespace")
    return GroupRecord(
        group.ref if group is not None else _fallback_ref(obj, "PodGroup"),
        group,
        phase if isinstance(phase, str) else "",
        name if isinstance(name, str) else None,
        queue if isinstance(queue, str) and queue else DEFAULT_QUEUE,
        _owner(obj, namespace) if isinstance(namespace, str) else None,
    )


def podgroup_queues(groups: Iterable[GroupRecord]) -> dict[tuple[str, str, str], str]:
    """(namespace, kind, name) of the job that made each PodGroup -> its spec.queue."""
    return {
        (g.owner.namespace, g.owner.kind, g.owner.name): g.queue
        for g in groups
        if g.owner is not None and g.queue
    }
