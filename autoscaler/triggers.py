"""What makes a cycle come early: a watch event that frees or needs GPUs now, or a
resized job whose restart can now be measured. Called by the watch caches' on_change,
as `wiring` connects them to the driver."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .kinds import BY_NAME, NotManaged
from .parse import read_measured, read_time
from .resources import WAITING_PHASES
from .settings import Settings


def wants_early_cycle(kind: str, event_type: str, obj: Mapping[str, Any]) -> bool:
    """A new waiting gang, or a job that finished or went away, frees or needs GPUs now."""

    if kind == "PodGroup":
        status = obj.get("status") if isinstance(obj, Mapping) else None
        phase = status.get("phase") if isinstance(status, Mapping) else None
        return event_type == "ADDED" and phase in WAITING_PHASES
    job_kind = BY_NAME.get(kind)
    return job_kind is not None and job_kind.wants_early_cycle(event_type, obj)


def restart_done(kind: str, obj: Mapping[str, Any], settings: Settings) -> bool:
    """A job we resized whose workers all run again, its restart not yet measured: a
    cycle now measures it to within min_interval_seconds, not a whole interval."""
    job_kind = BY_NAME.get(kind)
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    if job_kind is None or not isinstance(notes, Mapping):
        return False
    last = notes.get(settings.last_scale_annotation)
    if not isinstance(last, str) or settings.restart_cost_annotation in notes:
        return False
    measured = read_measured(notes.get(settings.measured_restart_cost_annotation))
    if measured is not None and measured[1] == read_time(last):
        return False
    try:
        workers = job_kind.workers(obj, settings)
    except NotManaged:
        return False
    return workers.replicas > 0 and workers.active == workers.replicas


def wants_cycle(kind: str, event_type: str, obj: Mapping[str, Any], settings: Settings) -> bool:
    """The body of the caches' on_change: whether this change calls for a cycle now."""
    return wants_early_cycle(kind, event_type, obj) or restart_done(kind, obj, settings)
