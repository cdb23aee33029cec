"""Runs of finished jobs, remembered after the API stops listing them.

Rule 3b weighs a swap where nothing is declared by its queue's run times
(payoff.RunTimes), read from the finished jobs the API lists. A cluster that deletes its
finished jobs (a job's `runPolicy.ttlSecondsAfterFinished`, a cleanup controller) would
leave the rule without evidence however long it had run. So the daemon remembers each run
it saw finish, the latest REMEMBERED_RUNS of each queue by completion, and hands the
planner those whose jobs are gone (ClusterSnapshot.finished_runs). Memory only: a
restarted daemon, or a new leader, starts from what the API lists. Pure state, no I/O.
"""

from __future__ import annotations

import heapq
from dataclasses import replace
from datetime import datetime

from .model import ClusterSnapshot, FinishedRun
from .payoff import run_of

# per queue; as many as the simulator's API lists (sim/policies.py FINISHED_LISTED), and
# several times the planner's floor of evidence (payoff.EVIDENCE_RUNS)
REMEMBERED_RUNS = 200

# a run: its job and when it completed (a job deleted and created again under the same
# name is another run)
_Key = tuple[str, str, str, datetime]


def _key(run: FinishedRun) -> _Key:
    return (run.ref.namespace, run.ref.name, run.ref.kind, run.completed)


class RunMemory:
    """The latest `per_queue` runs of each queue this daemon saw finish."""

    def __init__(self, per_queue: int = REMEMBERED_RUNS) -> None:
        self.per_queue = per_queue
        # per queue: the runs kept, and a heap of (completion, key) whose top is the
        # oldest, the first to go when a later run comes
        self._runs: dict[str, dict[_Key, FinishedRun]] = {}
        self._oldest: dict[str, list[tuple[datetime, _Key]]] = {}

    def remember(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with the remembered runs of the jobs it no longer lists; each run
        it lists is remembered for later."""
        listed: set[_Key] = set()
        for job in snapshot.unmanaged:
            run = run_of(job)
            if run is not None:
                key = _key(run)
                listed.add(key)
                self._keep(run, key)
        gone = tuple(
            run for runs in self._runs.values() for key, run in runs.items() if key not in listed
        )
        if not gone:
            return snapshot
        return replace(snapshot, finished_runs=snapshot.finished_runs + gone)

    def _keep(self, run: FinishedRun, key: _Key) -> None:
        runs = self._runs.setdefault(run.queue, {})
        if key in runs:
            return
        oldest = self._oldest.setdefault(run.queue, [])
        if len(runs) >= self.per_queue:
            if not oldest or oldest[0][0] >= run.completed:
                return  # older than every run kept: not among the latest
            _, dropped = heapq.heapreplace(oldest, (run.completed, key))
            del runs[dropped]
        else:
            heapq.heappush(oldest, (run.completed, key))
        runs[key] = run

    def __len__(self) -> int:
        return sum(len(runs) for runs in self._runs.values())
