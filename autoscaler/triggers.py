"""What makes a cycle come early: a watch event that frees or needs GPUs now, or a
resized job whose restart can now be measured. Called by the watch caches' on_change,
as `wiring` connects them to the driver, with the record the cache holds for the object
(sources.kube.OnChange): each test is a predicate on the model, the planner's own where
it has one."""

from __future__ import annotations

from .model import GroupRecord, JobRecord
from .resources import WAITING_PHASES


def wants_early_cycle(kind: str, event_type: str, record: object) -> bool:
    """A new waiting gang, or a job that finished or went away, frees or needs GPUs now."""

    if isinstance(record, GroupRecord):
        return event_type == "ADDED" and record.phase in WAITING_PHASES
    if isinstance(record, JobRecord):
        return event_type == "DELETED" or record.frees_gpus
    return False


def restart_done(record: object) -> bool:
    """A job we resized whose workers all run again, its restart not yet measured: a
    cycle now measures it (the planner's own test, ElasticJob.awaits_restart_measure) to
    within min_interval_seconds, not a whole interval."""
    return isinstance(record, JobRecord) and record.awaits_restart_measure


def wants_cycle(kind: str, event_type: str, record: object) -> bool:
    """The body of the caches' on_change: whether this change calls for a cycle now."""
    return wants_early_cycle(kind, event_type, record) or restart_done(record)
