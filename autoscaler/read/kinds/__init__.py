"""Job kinds: how each elastic job kind is read and resized.

The planner plans `ElasticJob`s and never asks what kind a job is. Each kind here says
where its queue, priority, elastic range, workers and their GPUs live, what a finished
job looks like, and how a new worker count is written. parse.py (whose decoders the
watch caches run on every object), the actuator and RBAC all take them from `KINDS`.

Adding a kind is one module (a `JobKind`) plus its entry in `KINDS` and its tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import JobKind, NotManaged, Workers, Write
from .kubeflow import PADDLEJOB_KIND, PYTORCHJOB_KIND
from .vcjob import VCJOB_KIND

KINDS: tuple[JobKind, ...] = (PYTORCHJOB_KIND, PADDLEJOB_KIND, VCJOB_KIND)
KIND_NAMES = tuple(k.resource.kind for k in KINDS)
BY_NAME = {k.resource.kind: k for k in KINDS}  # kind name (PyTorchJob, Job, ...) -> kind

__all__ = [
    "BY_NAME",
    "KINDS",
    "KIND_NAMES",
    "JobKind",
    "NotManaged",
    "Workers",
    "Write",
    "kind_of",
    "named",
]


def kind_of(obj: Mapping[str, Any]) -> JobKind | None:
    """The kind of a raw object by its kind and API group, or None."""
    kind = obj.get("kind")
    found = BY_NAME.get(kind) if isinstance(kind, str) else None
    if found is None:
        return None
    api_version = obj.get("apiVersion")
    if isinstance(api_version, str) and api_version.split("/")[0] != found.resource.group:
        return None  # e.g. a batch/v1 Job is not a Volcano Job
    return found


def named(names: list[str]) -> tuple[JobKind, ...]:
    """The kinds of these names (as in the job_kinds setting), in KINDS order."""
    wanted = set(names)
    return tuple(k for k in KINDS if k.resource.kind in wanted)
