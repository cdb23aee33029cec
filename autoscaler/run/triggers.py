"""What makes a cycle come early: a watch event that frees or needs GPUs now, or a
resized job whose restart can now be measured. Called by the watch caches' on_change,
as `wiring` connects them to the driver, with the record the cache holds for the object
(read.kube.source.OnChange): each test is a predicate on the model, the planner's own where
it has one.

And one that cannot wait: a gang just bound (`GangStarts`) in a queue the last plan left
idle GPUs in. Its job started at the size it asked for and will be grown into them; a
cycle now grows it while it is still starting (torchrun keeps its first rendezvous open a
while for nodes up to its max), where a cycle held back to min_interval_seconds grows it
once it runs, which restarts it. The driver runs that cycle at once (driver.Driver.trigger,
urgent)."""

from __future__ import annotations

from autoscaler.core.model import PendingGroup
from autoscaler.core.resources import WAITING_PHASES
from autoscaler.read.records import GroupRecord, JobRecord


def waiting(record: object) -> bool:
    """A PodGroup the planner reads as a waiting gang: phase Pending or Inqueue, or
    Unknown with its Unschedulable condition (parse.podgroups reads it so)."""
    if not isinstance(record, GroupRecord):
        return False
    return record.phase in WAITING_PHASES or (
        record.phase == "Unknown" and isinstance(record.group, PendingGroup)
    )


def wants_early_cycle(kind: str, event_type: str, record: object, before: object = None) -> bool:
    """A gang that turns waiting, or a job that finished or went away, needs or frees
    GPUs now.

    A PodGroup turns waiting when it is added waiting, or changed into waiting from
    anything else: training-operator creates a job's PodGroup with no phase and Volcano
    writes Pending or Inqueue a moment later (a MODIFIED event); a job suspended and
    resumed, or a gang evicted, turns waiting again from Running. `before` is what the
    cache held before (read.kube.source.OnChange): a change from waiting to waiting
    (Pending -> Inqueue, a label written) is no new demand, so each transition calls
    exactly one early cycle."""

    if isinstance(record, GroupRecord):
        return event_type != "DELETED" and waiting(record) and not waiting(before)
    if isinstance(record, JobRecord):
        return event_type == "DELETED" or record.frees_gpus
    return False


def restart_done(record: object) -> bool:
    """A job we resized whose workers all run again, its restart not yet measured: a
    cycle now measures it (the planner's own test, ElasticJob.awaits_restart_measure) to
    within min_interval_seconds, not a whole interval."""
    return isinstance(record, JobRecord) and record.awaits_restart_measure


def wants_cycle(kind: str, event_type: str, record: object, before: object = None) -> bool:
    """The body of the caches' on_change: whether this change calls for a cycle now."""
    return wants_early_cycle(kind, event_type, record, before) or restart_done(record)


class GangStarts:
    """Tells when a PodGroup the watch saw waiting is bound (phase Running): its job has
    just started. The watch gives only an object's new state, so the waiting ones are
    remembered (as many as gangs wait; forgotten once bound or deleted)."""

    def __init__(self) -> None:
        # by namespace and name: a waiting gang's ref carries its uid, a bound one's not
        self._waiting: set[tuple[str, str]] = set()

    def bound(self, event_type: str, record: object) -> str | None:
        """The queue of a gang this change binds, else None."""
        if not isinstance(record, GroupRecord):
            return None
        key = (record.ref.namespace, record.ref.name)
        if event_type == "DELETED":
            self._waiting.discard(key)
            return None
        if waiting(record):
            self._waiting.add(key)
            return None
        if key not in self._waiting:
            return None
        self._waiting.discard(key)
        return record.queue if record.phase == "Running" else None
