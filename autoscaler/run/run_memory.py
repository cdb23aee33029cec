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

from autoscaler.core.model import ClusterSnapshot, FinishedRun, UnmanagedJob, same_items
from autoscaler.core.reasons import Reason
from autoscaler.plan.payoff import RECENT_RUNS, run_of

# per queue; as many listed runs as the planner reads (payoff.RECENT_RUNS, as many as the
# simulator's API lists, sim/policies.py FINISHED_LISTED), and several times the
# planner's floor of evidence (payoff.EVIDENCE_RUNS)
REMEMBERED_RUNS = RECENT_RUNS

# a run: its job and when it completed (a job deleted and created again under the same
# name is another run)
_Key = tuple[str, str, str, datetime]


class RunMemory:
    """The latest `per_queue` runs of each queue this daemon saw finish."""

    def __init__(self, per_queue: int = REMEMBERED_RUNS) -> None:
        self.per_queue = per_queue
        # per queue: the runs kept, and a heap of (completion, key) whose top is the
        # oldest, the first to go when a later run comes
        self._runs: dict[str, dict[_Key, FinishedRun]] = {}
        self._oldest: dict[str, list[tuple[datetime, _Key]]] = {}
        # each run kept: in how many queues (a finished job listed in another queue than
        # before, e.g. once its PodGroup is gone, is still listed)
        self._held: dict[_Key, int] = {}
        # the last listing read and what it did not list: a cycle whose caches did not
        # change hands over the same tuple, and one where another cache changed a new
        # tuple of the same jobs (parse.assemble runs on any change): read again, the
        # same jobs would keep and drop nothing
        self._read: tuple[UnmanagedJob, ...] | None = None
        self._gone: tuple[FinishedRun, ...] = ()

    def remember(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """The snapshot with the remembered runs of the jobs it no longer lists; each run
        it lists is remembered for later."""
        if not same_items(self._read, snapshot.unmanaged):
            self._read = snapshot.unmanaged
            listed = self._listed(snapshot.unmanaged)
            self._gone = tuple(
                run
                for runs in self._runs.values()
                for key, run in runs.items()
                if key not in listed
            )
        if not self._gone:
            return snapshot
        return replace(snapshot, finished_runs=snapshot.finished_runs + self._gone)

    def _listed(self, jobs: tuple[UnmanagedJob, ...]) -> set[_Key]:
        """The runs kept that `jobs` list, the new ones kept first. A cluster that keeps
        its finished jobs lists thousands: one lookup each for those already kept or
        older than every run kept."""
        listed: set[_Key] = set()
        for job in jobs:
            completed = job.completed
            if completed is None or job.reason is not Reason.FINISHED:
                continue
            ref = job.ref
            key = (ref.namespace, ref.name, ref.kind, completed)
            runs = self._runs.get(job.queue)
            if runs is not None and key in runs:
                listed.add(key)
            elif self._keep(job, key) or key in self._held:
                listed.add(key)
        return listed

    def _keep(self, job: UnmanagedJob, key: _Key) -> bool:
        """Keep the job's run if it is among its queue's latest; whether it was kept."""
        runs = self._runs.setdefault(job.queue, {})
        oldest = self._oldest.setdefault(job.queue, [])
        full = len(runs) >= self.per_queue
        if full and (not oldest or oldest[0][0] >= key[3]):
            return False  # older than every run kept: not among the latest
        run = run_of(job)
        if run is None:
            return False
        if full:
            _, dropped = heapq.heapreplace(oldest, (run.completed, key))
            del runs[dropped]
            if self._held[dropped] > 1:
                self._held[dropped] -= 1
            else:
                del self._held[dropped]
        else:
            heapq.heappush(oldest, (run.completed, key))
        runs[key] = run
        self._held[key] = self._held.get(key, 0) + 1
        return True

    def __len__(self) -> int:
        return sum(len(runs) for runs in self._runs.values())
