"""Rule 3b: a reclaim for a waiting gang is made only where it pays.

Where jobs declare their run, a reclaim inside the queue is weighed by what it buys
the queue's whole backlog (the summed start times of its waiting gangs, with and
without it, over the jobs' declared ends) against what its victims lose (payoff.py).
Where the gang declares nothing, a swap (each victim gives up as many running workers
as it keeps) is weighed by the queue's own run times, or, before the queue has seen
enough finished runs, by how many of its jobs run (`_cold_swap`). See docs/design.md
rule 3 and docs/daemon.md "Reclaim only where it pays"."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from autoscaler.core.model import ElasticJob, PendingGroup

from . import payoff
from .quota import beyond
from .state import QueuePlanState
from .work import _STILL_WAITING, _is_swap, _Job, _running_taken, restart_cost

# who covers a gang: (victims in its queue, lent shares given back), why nobody can, or
# the trade of a reclaim that does not pay
_Covered = tuple[list[tuple["_Job", int]], list[tuple["_Job", int]]] | str | payoff.Trade


class WeighRules(QueuePlanState):
    """Rule mixin: rule 3b, whether a reclaim for a gang pays: the trade it makes for
    the queue's backlog, the swap check, and the queue's run times they read."""

    def _reclaim_trade(
        self, g: PendingGroup, shortfall: int, victims: list[tuple[_Job, int]]
    ) -> payoff.Trade:
        """What the gang would gain from these victims' workers and what they would
        lose, from what the jobs declare of their run (unknowns left out)."""
        now = self.now
        gang_runtime = self._gang_runtime(g)
        taken = sum(n * w.job.gpus_per_worker for w, n in victims)
        # the victims are grown back once, in the walk with the reclaim, every waiting
        # gang has started and what they gave up is free again; where the walk does not
        # know, once the running jobs' ends cover every other waiting gang and what the
        # victims gave up
        running_taken = sum(_running_taken(w, n) * w.job.gpus_per_worker for w, n in victims)
        walked = payoff.reclaim_gain(
            self._backlog(g, shortfall),
            self._ending(),
            self._ending_after(victims),
            taken,
            running_taken,
        )
        back_in = None if walked is None else walked[2]
        if back_in is None:
            weighed = {x.ref for x, _ in self._members} or {g.ref}
            others = sum(x.gpus for x in self.pending if x.ref not in weighed)
            back_in = payoff.gang_wait(others + taken, self._ending())
        loss = 0.0
        for w, workers in victims:
            j = w.job
            running = _running_taken(w, workers)  # unplaced: free
            lost = payoff.victim_loss(
                j.active,
                running,
                payoff.remaining_seconds(j, now),
                gang_runtime,
                restart_cost(j, self.policy),
                back_in,
            )
            loss += 0.0 if lost is None else lost
        if walked is None:
            return payoff.Trade(None, loss)
        wait, gain, _ = walked
        return payoff.Trade(gain, loss, wait)

    def _swap_check(
        self, g: PendingGroup, victims: list[tuple[_Job, int]], trade: payoff.Trade
    ) -> payoff.Trade:
        """Rule 3b where the gang declares nothing: a reclaim whose every victim gives up
        as many running workers as it keeps (a swap) and is known, by its queue's run
        times, to have less run left at its size than the newcomer's run at the size it
        starts at (the queue's runs, which grew as they ran, scaled by its growth ratio:
        RunTimes.at_start) and the swap's two restarts (payoff.swap_short) does not pay;
        nor, before the queue has those run times, a swap in a busy queue (_cold_swap).
        Else the trade as weighed."""
        factor = self.policy.reclaim_payoff_factor
        if factor <= 0 or not trade.pays(factor) or not victims:
            return trade  # rule 3b off, refused already, or nothing to weigh
        if self._gang_runtime(g) is not None:
            return trade
        runs = self._queue_runs()
        if runs is None:
            return self._cold_swap(g, victims, trade)
        newcomer, lefts = runs.at_start(), []
        for w, workers in victims:
            j = w.job
            left = self._left_of(j, runs)
            restarts = 2 * restart_cost(j, self.policy)
            if not _is_swap(w, workers) or left is None:
                return trade  # not a swap, or its run left is not known
            if not payoff.swap_short(left, newcomer, restarts, factor):
                return trade
            lefts.append((left, j.ref.name))
        longest, name = max(lefts)
        grown = (
            f" at its gang's size (~{runs.mean():.0f}s as the queue's jobs ran, at "
            f"{runs.growth:.2f}x their minimum)"
            if runs.growth > 1
            else ""
        )
        estimate = (
            f"nothing declared; by queue {g.queue}'s run times ({len(runs.finished)} "
            f"finished, {runs.running} running, Kaplan-Meier) a "
            f"newcomer runs ~{newcomer:.0f}s{grown} and its victims have at most "
            f"~{longest:.0f}s left ({name}): no more than that and the swap's two restarts"
        )
        return payoff.Trade(trade.gain, trade.loss, trade.wait, estimate)

    def _cold_swap(
        self, g: PendingGroup, victims: list[tuple[_Job, int]], trade: payoff.Trade
    ) -> payoff.Trade:
        """A swap before the queue has payoff.EVIDENCE_RUNS finished runs, where nothing
        of the victims' runs is declared either: nothing says whether the newcomer or
        the victims have the shorter run, and a swap is then about even for the queue
        (the gangs behind move up by what the victims lose) but for the victims' two
        restarts each, which are certain. It is refused in a queue of at least
        payoff.EVIDENCE_RUNS running jobs: their ends free GPUs by themselves, and the
        same ends soon give the run times a swap is weighed by. In a smaller queue a
        gang may wait a whole run for one job: today's rule, elastic workers go first."""
        finished, running = self._cold
        if running < payoff.EVIDENCE_RUNS:
            return trade
        for w, workers in victims:
            if not _is_swap(w, workers):
                return trade
            if payoff.remaining_seconds(w.job, self.now) is not None:
                return trade  # a victim's run is declared: weighed as it declares
        estimate = (
            f"nothing declared; queue {g.queue} has {finished} finished run(s), fewer than "
            f"the {payoff.EVIDENCE_RUNS} a swap is weighed by, and {running} jobs running "
            "that free GPUs as they end: no swap (two restarts for each victim) on a gain "
            "nothing measures yet"
        )
        return payoff.Trade(trade.gain, trade.loss, trade.wait, estimate)

    def _left_of(self, j: ElasticJob, runs: payoff.RunTimes) -> float | None:
        """A victim's run left: declared, else by the queue's run times where at least
        payoff.EVIDENCE_RUNS finished runs were longer than its age; None: not known."""
        declared = payoff.remaining_seconds(j, self.now)
        if declared is not None or j.started is None:
            return declared
        age = max(0.0, (self.now - j.started).total_seconds())
        if runs.known_beyond(age) < payoff.EVIDENCE_RUNS:
            return None
        return runs.remaining(age)

    def _queue_runs(self) -> payoff.RunTimes | None:
        """The queue's run times: its finished jobs' runs (status.startTime to
        completionTime: the latest payoff.RECENT_RUNS the API lists, by completion, and
        those it no longer lists as the daemon remembers them) and its running jobs'
        ages; None below payoff.EVIDENCE_RUNS finished runs (then `_cold` counts the
        finished runs and the running jobs). Once per plan."""
        if not self._run_times_read:
            self._run_times_read = True
            finished = list(self.listed.runs)
            finished += [
                r.seconds for r in self.snapshot.finished_runs if r.queue == self.state.name
            ]
            running = [w.job for w in self.work if w.job.active > 0]
            ages = [
                (self.now - j.started).total_seconds() for j in running if j.started is not None
            ]
            if len(finished) >= payoff.EVIDENCE_RUNS:
                growth = payoff.growth_ratio((j.active, j.min_replicas) for j in running)
                self._run_times = payoff.RunTimes.of(finished, ages, growth)
            else:
                self._cold = len(finished), len(running)
        return self._run_times

    def _gang_runtime(self, g: PendingGroup) -> float | None:
        """How long the gang's job runs (its GPUs then come back); for gangs weighed
        together, the longest that is known."""
        self._walk_gangs()
        runs = [self._runs.get(x.ref) for x in ([x for x, _ in self._members] or [g])]
        known = [r for r in runs if r is not None]
        return max(known) if known else None

    def _ending(self) -> list[tuple[float, int]]:
        """(seconds left, GPUs held) of the queue's running jobs that declared their run,
        soonest first; found at the first reclaim weighed, once per plan."""
        if self._ends is None:
            ends = sorted(
                (left, w.job.active * w.job.gpus_per_worker, id(w))
                for w in self.work
                if w.job.active > 0
                and (left := payoff.remaining_seconds(w.job, self.now)) is not None
            )
            self._ends = [(left, gpus) for left, gpus, _ in ends]
            self._end_ids = [i for _, _, i in ends]
        return self._ends

    def _ending_after(self, victims: list[tuple[_Job, int]]) -> Iterable[tuple[float, int]]:
        """_ending once the victims gave up their workers: each declared victim that loses
        running workers ends later (payoff.delayed_end) holding fewer GPUs."""
        moved: dict[int, tuple[float, int] | None] = {}
        for w, workers in victims:
            j = w.job
            running = _running_taken(w, workers)
            left = payoff.remaining_seconds(j, self.now) if j.active > 0 else None
            if running <= 0 or left is None:
                continue  # it frees what it held when it did (or never, as before)
            end = payoff.delayed_end(left, j.active, running, restart_cost(j, self.policy))
            kept = (j.active - running) * j.gpus_per_worker
            moved[id(w)] = None if end is None else (end, kept)
        ends = self._ending()
        if not moved:
            return ends
        kept_ends = (e for e, i in zip(ends, self._end_ids, strict=True) if i not in moved)
        return heapq.merge(kept_ends, sorted(m for m in moved.values() if m is not None))

    def _walk_gangs(self) -> list[payoff.Gang | None]:
        """Each waiting gang of `pending` as the walk sees it, (GPUs, its job's declared
        run at the gang's size, payoff.run_at_start: the walk holds the gang's GPUs for
        it), None for one Volcano never admits (it waits outside the line); once per
        plan."""
        if self._walked is None:
            jobs = {(w.job.ref.namespace, w.job.ref.name): w.job for w in self.work}
            self._walked = []
            for x in self.pending:
                ref = x.owner or x.ref
                owner = jobs.get((ref.namespace, ref.name))
                run = None if owner is None else payoff.run_at_start(owner, self.now, x.gpus)
                admissible = not beyond(self.state.limits, x.pods)[0]
                self._walked.append((x.gpus, run) if admissible else None)
                self._runs[x.ref] = run
        return self._walked

    def _backlog(self, g: PendingGroup, shortfall: int) -> payoff.Backlog:
        """The queue's waiting gangs around a reclaim of `shortfall` GPUs for g (or for the
        gangs weighed with it, _weigh_behind), in admission order: those ahead that still
        wait (by what their decisions say they need), those it serves (each its need, the
        last short of the rest; `free` the GPUs they have now), those behind."""
        walked, runs = self._walk_gangs(), self._runs
        members = self._members or [(g, shortfall)]
        needs = [n for _, n in members]
        total = sum(needs)
        needs[-1] += max(0, shortfall - total)
        weighed = {x.ref for x, _ in members}
        ahead = [
            (d.gpus, runs.get(d.ref))
            for d in self.gangs
            if d.reason in _STILL_WAITING and d.ref not in weighed
        ]
        served = [(n, runs.get(x.ref)) for (x, _), n in zip(members, needs, strict=True)]
        behind = [gang for gang in walked[self._next :] if gang is not None]
        return payoff.Backlog(ahead, served, behind, max(0, total - shortfall))

    def _resized_now(self, g: PendingGroup, shortfall: int) -> frozenset[int]:
        """Jobs this plan already trimmed or reclaimed from, where a reclaim for a gang
        short of `shortfall` GPUs is weighed (rule 3b) and a resize starts the reclaim
        cooldown: the next plan would not take from them, so neither does this one
        (replanning its result then weighs the same victims: idempotence). Elsewhere a
        job may give workers to several gangs of one plan."""
        if self.policy.reclaim_cooldown_seconds <= 0 or self.policy.reclaim_payoff_factor <= 0:
            return frozenset()
        if shortfall <= 0:
            return frozenset()
        if self._queue_runs() is None:  # else swaps are weighed by the queue's run times
            backlog = self._backlog(g, shortfall)
            line = [*backlog.ahead, *backlog.served]
            if len(payoff.starts(backlog.free, self._ending(), line)) < len(line):
                return frozenset()  # the gang's wait is unknown: not weighed
        return frozenset(id(w) for w in self.work if w.target != w.job.replicas)
