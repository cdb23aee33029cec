"""Rules 4, 6, 7: grow elastic jobs into what is left.

What the gangs leave, minus in-flight GPUs and the reserve, goes to jobs that may grow
(`_growth_block`: not at max, out of cooldown (rule 6), nothing in flight), in whole
workers: `fill` (as few jobs as possible, each to its max in one step, as each resize
is a restart) or `fair` (max-min in workers), each grant placed on nodes where they
are known. A step smaller than `min_step_workers` (rule 7), or one that does not save
more time than its restart costs (the payoff rule), is skipped."""

from __future__ import annotations

import heapq
from datetime import datetime
from functools import lru_cache

from autoscaler.core.model import ElasticJob
from autoscaler.core.policy import GrowthPolicy, PlannerPolicy
from autoscaler.core.reasons import Reason

from .capability import CapabilityRules
from .work import _SKEY, _Job, restart_cost


def _seconds(delta_from: datetime | None, now: datetime) -> float | None:
    return None if delta_from is None else (now - delta_from).total_seconds()


def _water_fill(candidates: list[_Job], pool: int) -> dict[_Job, int]:
    """One worker at a time to the job with the fewest (then priority, smaller workers,
    age, name) that is below its max and whose worker fits in what is left. A heap: a
    job whose worker no longer fits never will (what is left only shrinks), so it
    leaves the heap; O(workers granted x log jobs), not a scan of every job per worker."""
    grants = {w: 0 for w in candidates}
    heap = [
        (w.job.replicas, -w.job.priority, w.job.gpus_per_worker, w.job.created, w.skey, w)
        for w in candidates
        if w.job.replicas < w.job.max_replicas
    ]
    heapq.heapify(heap)
    left = pool
    while heap:
        size, prio, gpus, created, skey, w = heapq.heappop(heap)
        if gpus > left:
            continue
        grants[w] += 1
        left -= gpus
        if size + 1 < w.job.max_replicas:
            heapq.heappush(heap, (size + 1, prio, gpus, created, skey, w))
    return grants


_AT_MAX = "at maxReplicas={}"


_IN_FLIGHT_WORDS = "{} worker(s) asked for are not running yet"


_NO_IDLE = "no idle GPUs for a worker of {} GPU(s)"


@lru_cache(maxsize=1024)
def _words(template: str, n: int) -> str:
    """A hold's message that depends on one number, made once: thousands of jobs a cycle
    say the same (and a decision taken up from the last plan compares it by identity)."""
    return template.format(n)


def _growth_block(
    j: ElasticJob, since: float | None, p: PlannerPolicy, no_pods: str = ""
) -> tuple[Reason, str] | None:
    """Why the job may not grow this cycle, whatever its queue has free; None: it may.
    `no_pods`: why its workers asked for count no longer (HoldNoPods), "" if they do."""
    if j.replicas >= j.max_replicas:
        return Reason.AT_MAX, _words(_AT_MAX, j.max_replicas)
    if j.gang_grows and not p.grow_without_min_available:
        # only shrunk: shrinking lowers the gang, which never blocks it
        return Reason.NO_MIN_AVAILABLE, j.gang_grows
    if j.grow_blocked:
        return Reason.IN_FLIGHT, j.grow_blocked
    if j.replicas > j.active:
        if no_pods:
            return Reason.NO_PODS, no_pods
        return Reason.IN_FLIGHT, _words(_IN_FLIGHT_WORDS, j.replicas - j.active)
    if j.replicas < j.active:
        return Reason.RELEASING, f"{j.active - j.replicas} worker(s) are still being released"
    cost = restart_cost(j, p)
    if since is not None and (since < (cool := p.cooldown_for(cost)) or since <= 0):
        # even with no cooldown, a job resized at `now` is not resized again at `now`
        why = f"resized {since:.0f}s ago; cooldown {cool:.0f}s"
        if cool > p.cooldown_seconds:
            why += f" ({p.cooldown_restart_cost_factor:g} x its restart cost {cost:.0f}s)"
        return Reason.COOLDOWN, why
    return None


class GrowthRules(CapabilityRules):
    """Rule mixin: rules 4, 6, 7, the growth pool handed out to the jobs that may grow,
    by `fill` or `fair`, within node fit and the Queue's capability."""

    def _grow(self, pool: int, starving: str, capped: str = "") -> None:
        growable = [w for w in self.work if not w.locked and self._may_grow(w, starving, pool)]
        if self.policy.growth_policy is GrowthPolicy.FAIR:
            grants = self._place_fair(self._fair(growable, pool))
        else:
            grants = self._fill(growable, pool)
        for w in growable:
            j = w.job
            extra = grants.get(w, 0)
            if extra:
                self.granted += extra * j.gpus_per_worker
                why = (
                    f"{j.replicas} -> {j.replicas + extra} worker(s) into idle GPUs "
                    f"of queue {j.queue}"
                )
                self._decide(
                    w,
                    j.replicas + extra,
                    Reason.SCALE_UP_IDLE_GPUS,
                    f"{why}; {w.fit_note}" if w.fit_note else why,
                )
            elif w.reason is None and capped:
                self._keep_size(w, Reason.QUEUE_CAPACITY, capped)
            elif w.reason is None:
                self._keep_size(
                    w,
                    Reason.NO_IDLE_GPUS,
                    _words(_NO_IDLE, j.gpus_per_worker),
                )

    def _may_grow(self, w: _Job, starving: str, pool: int) -> bool:
        """Whether the job may be grown this cycle; if not, it holds with the reason. A
        gang not covered holds it only where something is free (`pool`): with nothing
        free, there is nothing of the gang's to keep (HoldNoIdleGpus says why)."""
        j = w.job
        # whether its workers have pods matters only to workers asked for and not running
        missing = self.pods_missing(j) if j.replicas > j.active else ""
        block = _growth_block(j, w.since, self.policy, missing)
        if block is None and starving:
            block = Reason.GANG_STARVING, starving
        if block is None and self.waits_for:
            block = Reason.GANG_WAITING, self.waits_for
        if block is None and self.uncovered and pool > 0:
            block = Reason.GANG_WAITING, self.uncovered
        if block is None:
            return True
        self._keep_size(w, *block)
        return False

    def _step_ok(self, w: _Job, extra: int) -> bool:
        j = w.job
        if extra < self.policy.min_step_workers and j.replicas + extra != j.max_replicas:
            self._keep_size(
                w,
                Reason.MIN_STEP,
                f"{extra} more worker(s) is below min_step_workers={self.policy.min_step_workers}",
            )
            return False
        return self._worth_it(w, extra)

    def _worth_it(self, w: _Job, extra: int) -> bool:
        """Grow only when the time the extra workers save beats the restart they cost.
        What is left of a job is unknown; its running time so far is the estimate."""

        factor = self.policy.growth_payoff_factor
        j = w.job
        if factor <= 0:
            return True
        ran = _seconds(j.started or j.created, self.now)
        if ran is None or ran <= 0:
            return True
        saved = ran * extra / (j.replicas + extra)  # linear speedup on the remaining work
        restart = restart_cost(j, self.policy)
        if saved > factor * restart:
            return True
        self._keep_size(
            w,
            Reason.NOT_WORTH_RESTART,
            f"+{extra} worker(s) would save ~{saved:.0f}s, less than "
            f"{factor:g} x restart cost {restart:.0f}s",
        )
        return False

    def _fill(self, growable: list[_Job], pool: int) -> dict[_Job, int]:
        """Few jobs, one step each: smallest job first, each up to its max."""

        grants: dict[_Job, int] = {}
        if pool <= 0:
            return grants  # a full queue: no order to find
        order = sorted(
            growable,
            key=lambda w: (
                -w.job.priority,
                w.job.replicas * w.job.gpus_per_worker,
                w.job.created,
                w.skey,
            ),
        )
        for w in order:
            if pool <= 0:
                break  # nothing left: no job gets a worker (the rest keep their holds)
            j = w.job
            extra = self._within_quota(
                w, min(j.max_replicas - j.replicas, pool // j.gpus_per_worker)
            )
            if extra > 0 and self.nodes is not None:
                fits = self._node_fits(w, extra)
                if fits < extra:
                    self._no_node_fits(w, fits)
                    extra = fits
            if extra <= 0 or not self._step_ok(w, extra):
                continue
            if self.nodes is not None:
                self._node_place(w, extra)
            if self.quota is not None:
                self.quota.take(j.worker_shape, extra)
            grants[w] = extra
            pool -= extra * j.gpus_per_worker
        return grants

    def _no_node_fits(self, w: _Job, fits: int) -> None:
        """Node fit bounds the job's growth to `fits` more workers: held, with where its
        workers fit and why the idle GPUs elsewhere do not take them (kept as the note
        of a smaller grant)."""
        assert self.nodes is not None
        self.node_fit_limited = True
        w.fit_note = self._node_words(w, fits)
        self._keep_size(w, Reason.NO_NODE_FITS, w.fit_note)

    def _place_fair(self, grants: dict[_Job, int]) -> dict[_Job, int]:
        """Fair shares are computed in GPUs; each grant is then cut to what the queue's
        capability admits and placed on nodes, in the plan's stable order, and cut to
        what fits."""
        if self.nodes is None and self.quota is None:
            return grants
        placed: dict[_Job, int] = {}
        for w in sorted(grants, key=_SKEY):
            shape = w.job.worker_shape
            n = self._within_quota(w, grants[w])
            if self.nodes is not None and n > 0:
                fits = self._node_fits(w, n)
                if fits < n:
                    self._no_node_fits(w, fits)
                n = self._node_place(w, fits)
            if n > 0:
                if self.quota is not None:
                    self.quota.take(shape, n)
                placed[w] = n
        return placed

    def _fair(self, growable: list[_Job], pool: int) -> dict[_Job, int]:
        """Max-min fair in workers: water-fill one worker at a time to the job with the
        fewest. Jobs whose share stays under min_step drop out and the rest re-fill; what
        is then left is water-filled again among the dropped ones, until a round grants
        nothing (so planning on the result grants nothing more: idempotence)."""

        granted: dict[_Job, int] = {}
        candidates = list(growable)
        while candidates:
            grants, dropped = self._fair_round(candidates, pool)
            if not grants:
                break
            granted.update(grants)
            pool -= sum(n * w.job.gpus_per_worker for w, n in grants.items())
            candidates = dropped
        return granted

    def _fair_round(self, candidates: list[_Job], pool: int) -> tuple[dict[_Job, int], list[_Job]]:
        all_dropped: list[_Job] = []
        while True:
            grants = _water_fill(candidates, pool)
            dropped = [w for w in candidates if grants[w] and not self._step_ok(w, grants[w])]
            if not dropped:
                return {k: v for k, v in grants.items() if v}, all_dropped
            all_dropped += dropped
            gone = set(dropped)
            candidates = [w for w in candidates if w not in gone]
