"""PriorityClasses and Volcano Queues: what the scheduler reads of them.

A PriorityClass gives a job or gang its priority value (`Priorities`, resolved when the
snapshot is assembled, since the class may arrive after the job). A Queue gives its
state, weight, capability (GPUs and every other dimension Volcano bounds), guarantee and
deserved, read as the scheduler reads them: an unreadable figure bounds nothing, and is
said in the Queue's `problems`. `volcano_view` joins those specs with the free-GPU
reading, which is what headroom is computed from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.core.model import (
    NODE_GROUP_LIMITS,
    Node,
    NodeGroups,
    Plugin,
    QueueState,
    VolcanoQueue,
    VolcanoView,
    is_tree,
)
from autoscaler.core.options import ReadOptions
from autoscaler.core.resources import UNBOUNDED_AT_ZERO
from autoscaler.core.shapes import PODS, Quantities
from autoscaler.read.fields import BadField, dig, parse_quantity, show
from autoscaler.read.podspec import is_extended, items, milli
from autoscaler.read.records import PriorityValue, QueueSpec


@dataclass(frozen=True, slots=True)
class Priorities:
    """PriorityClass name -> value, and the value of a name that is unset or unknown:
    the globalDefault class's, else 0 (as the API server gives a pod)."""

    values: Mapping[str, int]
    default: int = 0

    def of(self, name: Any) -> int:
        if isinstance(name, str) and name in self.values:
            return self.values[name]
        return self.default

    @classmethod
    def parse(cls, objects: Iterable[Mapping[str, Any]]) -> Priorities:
        return cls.of_records(r for o in objects if (r := decode_priority_class(o)) is not None)

    @classmethod
    def of_records(cls, records: Iterable[PriorityValue]) -> Priorities:
        values: dict[str, int] = {}
        default = 0
        for r in records:
            values[r.name] = r.value
            if r.global_default:
                default = r.value
        return cls(values, default)


NO_PRIORITIES = Priorities({})


def decode_priority_class(obj: Mapping[str, Any]) -> PriorityValue | None:
    """A PriorityClass's name and value, or None when it has no usable value."""
    name = dig(obj, "metadata", "name")
    value = obj.get("value")
    if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int):
        return None
    return PriorityValue(name, value, obj.get("globalDefault") is True)


def decode_queue(obj: Mapping[str, Any], options: ReadOptions) -> QueueSpec | None:
    """A Queue's state, and its spec as the scheduler reads it: weight defaults to 1, an
    unreadable figure counts as unset. None for a Queue without a name."""
    name = dig(obj, "metadata", "name")
    if not isinstance(name, str) or not name:
        return None
    state = dig(obj, "status", "state")
    weight = dig(obj, "spec", "weight")
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
        weight = 1
    raw_capability = dig(obj, "spec", "capability")
    problems: list[str] = []
    try:
        capability = gpu_sum(raw_capability, options, "spec.capability")
    except BadField as e:
        capability = None
        problems.append(f"Queue {name}: {e}; it bounds nothing")
    limits = capability_limits(raw_capability, name, options.gpu_resource_names, problems)
    guarantee = readable_gpus(
        dig(obj, "spec", "guarantee", "resource"), options, "spec.guarantee.resource"
    )
    parent = dig(obj, "spec", "parent")
    return QueueSpec(
        name,
        node_groups=decode_node_groups(obj, name),
        parent=parent if isinstance(parent, str) and parent != name else "",
        state=state if isinstance(state, str) and state else "Open",
        weight=float(weight),
        capability=None if capability is None else float(capability),
        guarantee=float(guarantee or 0),
        deserved=readable_gpus(dig(obj, "spec", "deserved"), options, "spec.deserved"),
        allocated=readable_gpus(dig(obj, "status", "allocated"), options, "status.allocated"),
        limits=limits,
        problems=tuple(problems),
    )


_AFFINITY_LISTS = (
    ("nodeGroupAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("nodeGroupAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("nodeGroupAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    ("nodeGroupAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
)


def decode_node_groups(obj: Mapping[str, Any], name: str) -> NodeGroups | None:
    """A Queue's node groups for the nodegroup plugin: the groups its spec.affinity
    names, and its per-group limits (annotation volcano.sh/nodegroup-resource-limits,
    JSON: group -> resource -> quantity); None when it has neither. An annotation that
    cannot be read is kept as `error`, in words naming the Queue and the annotation:
    the plugin then rejects every node for the queue's pods."""
    affinity = dig(obj, "spec", "affinity")
    raw = dig(obj, "metadata", "annotations", NODE_GROUP_LIMITS)
    if affinity is None and (raw is None or raw == ""):
        return None
    named = []
    for rule, when in _AFFINITY_LISTS:
        groups = dig(affinity, rule, when) if isinstance(affinity, Mapping) else None
        named.append(frozenset(g for g in items(groups) if isinstance(g, str)))
    limits, error = _group_limits(raw, name)
    required, preferred, anti_required, anti_preferred = named
    return NodeGroups(
        required, preferred, anti_required, anti_preferred, limits=limits, error=error
    )


def _group_limits(raw: Any, queue: str) -> tuple[tuple[tuple[str, Quantities], ...], str]:
    """The per-group limits of the annotation, milli-units by resource, or why it cannot
    be read (as the plugin's json.Unmarshal into group -> ResourceList refuses it)."""
    if raw is None or raw == "":
        return (), ""
    where = f"Queue {queue}: annotation {NODE_GROUP_LIMITS}"
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except ValueError as exc:
        return (), f"{where} is not JSON ({exc})"
    if not isinstance(parsed, Mapping):
        return (), (
            f"{where} must be a JSON object of group to resources, e.g. "
            f'{{"g1": {{"nvidia.com/gpu": "8"}}}}, got {show(raw)}'
        )
    out = []
    for group, resources in sorted(parsed.items()):
        if not isinstance(resources, Mapping):
            return (), (
                f"{where}: group {group} must map resource names to quantities, "
                f"got {show(resources)}"
            )
        amounts = {}
        for res, value in resources.items():
            amount = milli(value)
            if amount is None:
                return (), (
                    f"{where}: {group}[{res}] must be a quantity such as 8 or 100Gi, "
                    f"got {show(value)}"
                )
            amounts[res] = amount
        out.append((group, tuple(sorted(amounts.items()))))
    return tuple(out), ""


def _volcano_bounds(name: str, gpu_names: tuple[str, ...]) -> bool:
    """Whether Volcano's queue plugins bound a resource of this name other than GPUs: cpu,
    memory and the scalar resources its Resource keeps (ephemeral-storage, hugepages-*,
    extended and kubernetes.io/ resources), not `pods` (never compared) nor quota
    counts (count/*)."""
    if name in gpu_names or name == PODS or name.startswith("count/"):
        return False
    return (
        name in ("cpu", "memory", "ephemeral-storage")
        or name.startswith("hugepages-")
        or is_extended(name)
        or "kubernetes.io/" in name
    )


def capability_limits(
    resources: Any, queue: str, gpu_names: tuple[str, ...], problems: list[str]
) -> Quantities:
    """A Queue's spec.capability in every dimension but GPUs, milli-units, as Volcano
    reads it: 0 CPU or memory is unlimited (left out), 0 of another resource is a bound
    of 0. An unreadable figure is left out (no bound from it) and said in `problems`,
    naming the Queue and the field."""
    if resources is None:
        return ()
    if not isinstance(resources, Mapping):
        problems.append(
            f"Queue {queue}: spec.capability must be a mapping of resource to quantity, "
            f"got {show(resources)}; it bounds nothing"
        )
        return ()
    out: dict[str, int] = {}
    for res, value in resources.items():
        if not isinstance(res, str) or not _volcano_bounds(res, gpu_names):
            continue
        amount = milli(value)
        if amount is None:
            problems.append(
                f"Queue {queue}: spec.capability[{res}] must be a non-negative quantity "
                f"such as 100 or 400Gi, got {show(value)}; it bounds nothing"
            )
        elif amount or res not in UNBOUNDED_AT_ZERO:
            out[res] = amount
    return tuple(sorted(out.items()))


def inherited(specs: Sequence[QueueSpec]) -> Sequence[QueueSpec]:
    """The specs with what the capacity plugin inherits under hierarchy: a child's
    capability in every dimension it leaves unset is its nearest ancestor's that sets
    it (GPUs and every other dimension, `limits`). `specs` as they are when no queue
    names a parent other than root (a flat cluster), or when nothing is inherited."""
    if not is_tree(q.parent for q in specs):
        return specs
    by_name = {q.name: q for q in specs}
    out = []
    for q in specs:
        capability, limits = q.capability, dict(q.limits)
        seen = {q.name}
        up = by_name.get(q.parent)
        while up is not None and up.name not in seen:  # a cycle ends the walk
            seen.add(up.name)
            if capability is None:
                capability = up.capability
            for res, amount in up.limits:
                limits.setdefault(res, amount)
            up = by_name.get(up.parent)
        merged = tuple(sorted(limits.items()))
        changed = capability != q.capability or merged != q.limits
        out.append(replace(q, capability=capability, limits=merged) if changed else q)
    return out


def queue_capacities(specs: Iterable[QueueSpec]) -> dict[str, int]:
    """GPUs each Queue lets its jobs hold by the API's own account: `spec.capability`, for
    `gpu_resource_names`. Not `spec.deserved`: under the capacity plugin a queue borrows
    beyond it up to its capability, and the proportion plugin does not read it. A queue
    that sets no capability, or sets it unreadably, has no bound here."""
    return {q.name: int(q.capability) for q in specs if q.capability is not None}


def volcano_view(
    plugin: Plugin,
    states: Mapping[str, QueueState],
    specs: Iterable[QueueSpec],
    nodes: tuple[Node, ...] | None,
    gpu_names: tuple[str, ...] = ("nvidia.com/gpu",),
    nodes_total: int | None = None,
) -> tuple[VolcanoView, dict[str, QueueState]]:
    """The view headroom is computed from: each queue's metrics joined with its Queue
    object's weight, capability and guarantee (the object is what the scheduler reads).
    `nodes_total`: the allocatable GPUs of the Ready `nodes`, where the caller keeps it."""
    by_name = {q.name: q for q in specs}
    queues: dict[str, VolcanoQueue] = {}
    out = dict(states)
    for name, state in states.items():
        vq = state.volcano
        if vq is None:
            continue
        spec = by_name.get(name)
        if spec is not None:
            vq = replace(
                vq,
                weight=spec.weight,
                capability=spec.capability,
                guarantee=spec.guarantee,
                spec_deserved=None if spec.deserved is None else float(spec.deserved),
                parent=spec.parent,
            )
            out[name] = replace(state, volcano=vq)
        queues[name] = vq
    # A Queue without series is an idle one (under proportion the scheduler exports
    # nothing for a queue that never had a job): it still takes part in the water-fill
    # with what its waiting gangs will ask for, and its guarantee still counts. Its own
    # jobs, if any, hold: that queue's state stays unknown.
    for name, spec in by_name.items():
        if name not in queues:
            queues[name] = VolcanoQueue(
                name,
                weight=spec.weight,
                capability=spec.capability,
                guarantee=spec.guarantee,
                spec_deserved=None if spec.deserved is None else float(spec.deserved),
                parent=spec.parent,
            )
    view = VolcanoView(plugin, queues, nodes, gpu_names=gpu_names, nodes_total=nodes_total)
    return view, out


def readable_gpus(resources: Any, options: ReadOptions, field: str) -> int | None:
    """gpu_sum, or None where the figure cannot be read: it then bounds nothing (the
    API server validated these objects; an unreadable one is not ours to report)."""
    try:
        return gpu_sum(resources, options, field)
    except BadField:
        return None


def gpu_sum(resources: Any, options: ReadOptions, field: str) -> int | None:
    if not isinstance(resources, Mapping):
        return None
    present = [n for n in options.gpu_resource_names if n in resources]
    if not present:
        return None
    return sum(parse_quantity(resources[n], f"{field}[{n}]") for n in present)
