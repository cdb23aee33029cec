"""In-flight GPUs bounded in time: workers a job asked for that have had no pod at all
for longer than `no_pods_timeout_seconds` stop counting as GPUs in flight (HoldNoPods).

Pure (no I/O, no clock: `now` is given). A job whose operator is not running, or refuses
it, never makes its pods: counting its spec forever would lower its queue's headroom for
good. A worker whose pod exists but is not bound still counts: the scheduler may bind it
any second. When the clock starts is read from the job itself (ElasticJob.asked_at: its
creation, our last resize, its managedFields), so a restarted daemon agrees.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from autoscaler.core.model import ElasticJob, ObjectRef, UnmanagedJob


def duration(seconds: float) -> str:
    """45s, 5m, 2h, 3d: how long, in the unit a person reads."""
    s = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


@dataclass(frozen=True, slots=True)
class NoPods:
    """Which workers have had no pod for too long, for one plan. `pods` None: pods are
    not watched, so no worker is ever said to have none."""

    pods: Mapping[tuple[str, str, str], int] | None
    timeout: float
    now: datetime

    def workers(
        self, ref: ObjectRef, replicas: int, inflight: int, asked_at: datetime | None
    ) -> int:
        """Of `inflight` workers asked for, those with no pod after the timeout. Pods are
        counted per job, whatever their replica type: a job's other pods (a Master) make
        it look as if more workers had one, the safe side (they keep counting)."""
        if self.pods is None or inflight <= 0 or asked_at is None:
            return 0
        if (self.now - asked_at).total_seconds() <= self.timeout:
            return 0
        have = self.pods.get((ref.namespace, ref.kind, ref.name), 0)
        return max(0, min(inflight, replicas - have))

    def of_job(self, j: ElasticJob) -> int:
        return self.workers(j.ref, j.replicas, j.inflight_workers, j.asked_at)

    def gpus_of(self, u: UnmanagedJob) -> int:
        """GPUs of an unmanaged job's in-flight workers that no longer count."""
        gpw = u.gpus_per_worker or 0
        if gpw <= 0:
            return 0
        return gpw * self.workers(u.ref, u.replicas or 0, u.inflight_gpus // gpw, u.asked_at)

    @staticmethod
    def may_count(u: UnmanagedJob) -> bool:
        """Whether `gpus_of(u)` may be other than 0, whatever the pods and the time: a
        finished job's is never (the planner decides those once, listing._listing)."""
        gpw = u.gpus_per_worker or 0
        return gpw > 0 and u.inflight_gpus // gpw > 0 and u.asked_at is not None

    def words(self, workers: int, asked_at: datetime | None) -> str:
        """HoldNoPods' message."""
        waited = duration((self.now - asked_at).total_seconds()) if asked_at else "?"
        return (
            f"no pods for {workers} of its workers after {waited}: is its operator running? "
            f"(they no longer count as GPUs in flight: no_pods_timeout_seconds="
            f"{self.timeout:.0f})"
        )
