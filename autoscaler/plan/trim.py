"""Rule 5: trim workers that never landed.

A job we resized whose extra workers are still not running `unplaced_timeout_seconds`
later is cut back to what runs: a worker landing hours later would restart the job
again, and its GPUs would stay "in flight" (rule 2) for ever."""

from __future__ import annotations

from autoscaler.core.model import ElasticJob
from autoscaler.core.reasons import Reason

from .state import QueuePlanState


def _bound_workers(j: ElasticJob) -> int:
    """Workers of the job's current size whose pod is bound to a node (pod watch)."""
    return sum(1 for node in j.worker_nodes[: j.replicas] if node)


class TrimRule(QueuePlanState):
    """Rule mixin: rule 5, workers still unplaced long after our resize go back."""

    def _trim(self) -> int:
        p, freed = self.policy, 0
        for w in self.work:
            j, since = w.job, w.since
            if w.locked or since is None or j.inflight_workers == 0:
                continue
            if since <= p.unplaced_timeout_seconds:
                continue
            # placed: what the operator counts active, or what the pod watch sees bound
            # when the operator's status lags behind its pods (a busy or restarting
            # operator): workers that run are not unplaced, whatever the status says
            placed = max(j.active, _bound_workers(j))
            target = max(j.min_replicas, placed)
            if target >= j.replicas:
                continue
            freed += (j.replicas - target) * j.gpus_per_worker
            self.trimmed += (j.replicas - target) * j.gpus_per_worker
            self._decide(
                w,
                target,
                Reason.TRIM_UNPLACED,
                f"{j.replicas - placed} worker(s) still unplaced {since:.0f}s after "
                f"our resize (timeout {p.unplaced_timeout_seconds:.0f}s): back to "
                f"{target}",
            )
        return freed
