"""The vocabulary of prune shapes: how a job kind (and sources/prune.py for PodGroups and
Queues) says which fields of an object parsing reads. A shape is a mapping of kept keys
to sub-shapes, `[shape]` for each item of a list, `KEEP` for a whole value, a function
that prunes a value itself, or `Shared(shape)`: equal pruned values are stored once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

KEEP = True  # keep this value whole


def only(keys: Iterable[str]) -> Any:
    """Keep these keys of a mapping (anything else stays whole, for parsing to report)."""

    wanted = frozenset(keys)

    def keep(value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        return {k: v for k, v in value.items() if k in wanted}

    return keep


def conditions(types: Iterable[str]) -> Any:
    """Keep the conditions parsing looks at (finished, suspended, unschedulable)."""

    wanted = frozenset(types)

    def keep(value: Any) -> Any:
        if not isinstance(value, list):
            return value
        return [
            {"type": c.get("type"), "status": c.get("status")}
            for c in value
            if isinstance(c, Mapping) and c.get("type") in wanted
        ]

    return keep


@dataclass(frozen=True, slots=True)
class Shared:
    """Jobs repeat these parts (elastic policy, scheduling policy, Worker spec, status
    counts): equal pruned values are stored once. Safe because cached objects are never
    mutated, only replaced."""

    shape: Any


def gpu_template(resource_names: Iterable[str]) -> Shared:
    """A pod template, down to the GPUs its containers ask for."""
    gpus = only(resource_names)
    return Shared({"spec": {"containers": [{"resources": {"limits": gpus, "requests": gpus}}]}})


def job_metadata(meta: Mapping[str, Any], annotations: Iterable[str]) -> dict[str, Any]:
    """A job's metadata: the identity fields in `meta` and these annotations."""
    return {**meta, "annotations": only(annotations)}
