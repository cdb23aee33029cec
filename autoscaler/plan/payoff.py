"""Whether reclaiming workers for a waiting gang pays (planner rule 3, "reclaim only where
it pays"). Pure: estimates from what jobs declare, time from the plan's `now`.

A job may declare how long it runs (our `expected-runtime-seconds` annotation: seconds
from its start) or report how far it is (our `progress` annotation: the fraction of its
work done). From either, `remaining_seconds` estimates what is left of its run. With
those estimates a reclaim is a trade between the queue's waiting gangs and its victims:

- the waiting gangs gain the time by which they start sooner, summed over all of them in
  admission order (`reclaim_gain`): a small event walk (`starts`) replays, with and
  without the reclaim, when GPUs free in the queue: the running jobs' declared ends (at
  their current sizes) and each gang, once started, freeing its GPUs at its own
  declared end. Without the reclaim the gangs it serves wait in line; with it they start
  now, and each victim, short of the workers it gave up, ends later (at linear speedup:
  its restart plus its run left times taken / kept) and returns its GPUs later. So a
  reclaim for the head of a backlog moves every gang behind it up, and a victim's late
  return delays the gangs that would have taken its GPUs: the gain can be negative. A
  gang whose run is unknown holds its GPUs past the walk's end (nothing is guessed of
  when they free); a gang that cannot start on what is known is left out of the sum, as
  is every gang behind it (`gang_wait` is the walk for one gang and no backlog);
- each victim loses its restart, plus the work of the workers it gives up, for as long
  as it runs without them, at linear speedup (`victim_loss`): until the gang's job ends
  (its GPUs come back to the queue), its own end, or, in the walk with the reclaim,
  every waiting gang has started and as many GPUs as it gave up are free again (then it
  is grown back, a second restart), whichever is soonest. The gang's job must declare
  its run (a waiting job has no progress: its expected run time).

The reclaim goes ahead only if the gain beats the losses (times the policy's
`reclaim_payoff_factor`). What nobody declared is not guessed: a gang whose wait cannot be
estimated, or a victim whose loss cannot, is reclaimed for as before (elastic workers go
first). Only reclaims inside the gang's queue are weighed: what other queues give back of
its queue's share is owed, not traded (the planner's `_cover`).

A waiting gang's declared run is read at the size it starts at (`run_at_start`): a run
time declared at submission is for the size the job asked for, its gang is smaller.

One thing is read without declarations: the queue's own run times (`RunTimes`: finished
jobs' start to completion, running jobs' ages, one Kaplan-Meier estimate). Where the gang
declares nothing, a swap (its victims give up as many workers as they keep) whose every
victim is known to have no more run left than a newcomer's expected run at the size it
starts at and the swap's restarts does not pay (`swap_short`): with near-linear speedup,
fewer jobs faster beat more jobs slower unless the one kept waiting is the shorter. The
finished runs are wall times of jobs that grew as they ran; a newcomer starts at its
gang's size, so its run there is the queue's mean run times its growth ratio
(`growth_ratio`, `RunTimes.at_start`).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from autoscaler.core.model import ElasticJob, FinishedRun, UnmanagedJob
from autoscaler.core.reasons import Reason


def remaining_seconds(job: ElasticJob, now: datetime) -> float | None:
    """Seconds of running the job has left, from what it declared, None if it declared
    nothing usable. Reported progress wins (extrapolated at the pace so far, which counts
    its resizes and restarts); else the expected run time less what it has run (a job
    not started has all of it left; one past its estimate no longer has one)."""
    ran = None if job.started is None else (now - job.started).total_seconds()
    p = job.progress
    if p is not None and 0 < p and ran is not None and ran > 0:
        return ran * (1 - min(p, 1.0)) / p
    expected = job.expected_runtime_seconds
    if expected is None:
        return None
    if ran is None:
        return expected
    left = expected - max(ran, 0.0)
    return left if left > 0 else None


def run_at_start(job: ElasticJob, now: datetime, start_gpus: int) -> float | None:
    """Seconds a waiting gang's job runs once started, at the size it starts at (its
    gang's `start_gpus`), from what it declared; None if it declared nothing usable. A
    run time declared at submission is for the size the job asked for (its replicas):
    at linear speedup (the speedup the trade assumes throughout) a job asking for more
    than its gang runs that much longer at its gang's size. A job that has run (a gang
    waiting again) is read as it declares (`remaining_seconds`)."""
    run = remaining_seconds(job, now)
    if run is None or job.started is not None or start_gpus <= 0:
        return run
    return run * max(1.0, job.replicas * job.gpus_per_worker / start_gpus)


def growth_ratio(sizes: Iterable[tuple[int, int]]) -> float:
    """How much larger than their minimum a queue's running jobs run, from each one's
    (workers running, minimum): the mean over the jobs of workers over minimum (a job
    below its minimum counts 1), at least 1. The queue's finished runs ran, start to
    completion, at about that size; a newcomer starts at its gang's, its minimum. A mean
    over jobs, not GPUs, as the run times are (each run one sample, a 56-GPU job's as
    much as a 1-GPU job's); in a queue of 1-GPU jobs the two are the same."""
    ratios = [max(1.0, active / low) if low > 0 else 1.0 for active, low in sizes]
    return max(1.0, sum(ratios) / len(ratios)) if ratios else 1.0


def gang_wait(shortfall: int, ending: Iterable[tuple[float, int]]) -> float | None:
    """Seconds until `shortfall` GPUs free without a reclaim: `ending` holds (seconds
    left, GPUs held) of the queue's running jobs that declared their run; None when
    those cannot free enough (then nothing is known of the wait)."""
    freed = 0
    for left, gpus in sorted(ending):
        freed += gpus
        if freed >= shortfall:
            return left
    return None


# a waiting gang in a walk: (GPUs it needs, seconds it runs once started; None: unknown)
Gang = tuple[int, float | None]


def starts(free: int, ending: Iterable[tuple[float, int]], gangs: Iterable[Gang]) -> list[float]:
    """Seconds from now at which `gangs` start, in admission order, one after the other
    (strictly in order: the walk does not let a smaller gang past one that does not fit),
    each once the GPUs free cover it: `free` now, then `ending` ((seconds, GPUs), sorted:
    the running jobs' declared ends), then each started gang's GPUs at its declared end
    (a gang whose run is unknown holds them past the walk). Stops at the first gang the
    known frees never cover: the starts of those before it."""
    out: list[float] = []
    done: list[tuple[float, int]] = []  # the started gangs' ends, a heap
    frees = iter(ending)
    nxt = next(frees, None)
    at = 0.0
    for need, run in gangs:
        while free < need:
            if done and (nxt is None or done[0][0] <= nxt[0]):
                at, gpus = heapq.heappop(done)
            elif nxt is not None:
                (at, gpus), nxt = nxt, next(frees, None)
            else:
                return out
            free += gpus
        free -= need
        out.append(at)
        if run is not None:
            heapq.heappush(done, (at + run, need))
    return out


@dataclass(frozen=True, slots=True)
class Backlog:
    """A queue's waiting gangs around one reclaim, each in admission order: those still
    waiting ahead of the gangs it serves, those it serves, those behind; `free`: GPUs
    free for them now (less than the served need: else no reclaim)."""

    ahead: Sequence[Gang]
    served: Sequence[Gang]
    behind: Sequence[Gang]
    free: int


def reclaim_gain(
    backlog: Backlog,
    ending: Sequence[tuple[float, int]],
    ending_after: Iterable[tuple[float, int]],
    taken: int,
    grow_back: int = 0,
) -> tuple[float, float, float | None] | None:
    """(the served gangs' summed wait, the backlog's gain, when the victims are grown
    back) of a reclaim that frees `taken` GPUs now. The gain: the seconds by which the
    queue's waiting gangs start sooner in all, each walked (`starts`) without the
    reclaim on `ending` and with it on `ending_after` (the same ends, the victims' moved
    later and smaller: sorted), the served gangs started now and freeing theirs at
    their ends. A gang that does not start on what is known in either walk is left out
    with all behind it. None when a served gang's own wait is unknown (then nothing is
    known of what the reclaim buys), or when they are short of no GPU (of room on nodes,
    which a walk of GPUs knows nothing of). The victims are grown back once, with the
    reclaim, every waiting gang has started and `grow_back` more GPUs are free (nothing
    grows while gangs wait): the walk's last "gang"; None when that is unknown or
    nothing is to come back."""
    a, s = len(backlog.ahead), len(backlog.served)
    if sum(need for need, _ in backlog.served) <= backlog.free:
        return None
    before = starts(backlog.free, ending, [*backlog.ahead, *backlog.served, *backlog.behind])
    if len(before) < a + s:
        return None
    wait = sum(before[a : a + s])
    left = backlog.free + taken - sum(need for need, _ in backlog.served)
    served_ends = sorted((run, need) for need, run in backlog.served if run is not None)
    line = [*backlog.ahead, *backlog.behind]
    after = starts(
        max(0, left),
        heapq.merge(ending_after, served_ends),
        [*line, (grow_back, None)] if grow_back > 0 else line,
    )
    back_in = after.pop() if grow_back > 0 and len(after) > len(line) else None
    gain = wait
    for i in range(min(a, len(after), len(before))):
        gain += before[i] - after[i]
    for k in range(min(len(after) - a, len(before) - a - s)):
        gain += before[a + s + k] - after[a + k]
    return wait, gain, back_in


def delayed_end(left: float, workers: int, taken: int, restart_seconds: float) -> float | None:
    """When a victim running `workers` with `left` seconds to go ends once `taken` of
    them go: its restart, then its run left at linear speedup (the speedup the trade
    assumes throughout) on the workers it keeps, not grown back while gangs wait (gangs
    come first). None when it keeps none (it frees nothing more in the walk)."""
    kept = workers - taken
    if kept <= 0:
        return None
    return restart_seconds + left * workers / kept


def victim_loss(
    workers: int,
    taken: int,
    remaining: float | None,
    gang_runtime: float | None,
    restart_seconds: float,
    back_in: float | None = None,
) -> float | None:
    """Seconds the victim's end moves out when `taken` of its `workers` go: its restart,
    plus, at linear speedup, the work those workers would have done while it runs without
    them: until the gang's job ends (their GPUs come back to the queue), its own end, or
    `back_in` (when the queue's jobs will have freed enough for every waiting gang and
    for the workers taken: then it is grown back, a second restart), whichever is soonest.
    None when the gang's run is unknown: the victim's own end alone would charge it as if
    it never got them back, which no known run says."""
    if gang_runtime is None:
        return None
    if taken <= 0:
        return 0.0  # only workers never placed: nothing runs slower, nothing restarts
    span = gang_runtime if remaining is None else min(remaining, gang_runtime)
    restarts = 1
    if back_in is not None and back_in < span:
        span, restarts = back_in, 2
    left = workers - taken
    if left <= 0:  # the job stops: everything it had left waits
        return restarts * restart_seconds + span
    return restarts * restart_seconds + span * taken / left


@dataclass(frozen=True, slots=True)
class Trade:
    """A reclaim weighed: the waiting gangs' gain (the seconds by which they start
    sooner in all, `reclaim_gain`) and the victims' losses (seconds), the losses of
    victims whose loss is unknown left out; `wait`: the served gangs' own wait, where it
    differs from the gain (gangs ahead or behind moved too)."""

    gain: float | None
    loss: float
    wait: float | None = None
    # a swap refused by the queue's run times where nothing is declared (swap_short):
    # what the estimate said; "" for a trade of declared runs
    estimate: str = ""

    def pays(self, factor: float) -> bool:
        """Reclaim when the check is off (factor 0), the gain is unknown, or it beats
        the losses; never where the run times refused the swap."""
        if self.estimate:
            return False
        return factor <= 0 or self.gain is None or self.gain > factor * self.loss

    def describe(self) -> str:
        if self.estimate:
            return self.estimate
        if self.gain is None:
            return f"the gang would wait unknown; its victims would lose ~{self.loss:.0f}s"
        if self.wait is None or abs(self.wait - self.gain) < 0.5:
            gain = f"~{self.gain:.0f}s"
        else:
            sooner = "sooner" if self.gain >= 0 else "later"
            gain = (
                f"~{self.wait:.0f}s, the queue's waiting gangs in all would start "
                f"~{abs(self.gain):.0f}s {sooner}"
            )
        return f"the gang would wait {gain}; its victims would lose ~{self.loss:.0f}s"


# ---- swaps without declared runs: the queue's own run times ---------------------------

# Finished runs a Kaplan-Meier estimate needs beyond an age before it says anything of a
# job of that age: the usual sample for a mean. Below it the estimate is not used (today's
# rule: elastic workers go first).
EVIDENCE_RUNS = 30

# Finished runs of a queue the estimate reads at most, the latest by completion: a
# cluster that never deletes its finished jobs (training-operator's default) lists tens
# of thousands, and the latest runs say more of the jobs running now than last year's.
# As many as the daemon remembers of jobs no longer listed (run_memory.py) and the
# simulator lists (sim/policies.py FINISHED_LISTED).
RECENT_RUNS = 200


@dataclass(frozen=True, slots=True)
class RunTimes:
    """A queue's run times as Kaplan-Meier estimates them: the finished jobs' runs
    (start to completion) are events, the running jobs' ages censored samples (each has
    run at least that long). `times` ascending, `survival[k]` = S(t) on
    [times[k], times[k+1]), `area[k]` = the area under S from times[k] to the last time:
    every mean is restricted to the longest run seen."""

    times: tuple[float, ...]
    survival: tuple[float, ...]
    area: tuple[float, ...]
    finished: tuple[float, ...]  # the finished runs, ascending
    running: int = 0  # the running jobs' ages among the samples
    # the queue's growth_ratio: the runs are wall times at about that many times the
    # jobs' minimum size
    growth: float = 1.0

    @classmethod
    def of(cls, finished: Iterable[float], ages: Iterable[float], growth: float = 1.0) -> RunTimes:
        done = sorted(max(0.0, t) for t in finished)
        running = [(max(0.0, a), 0) for a in ages]
        samples = sorted([(t, 1) for t in done] + running)
        times, survival, s, i, n = [0.0], [1.0], 1.0, 0, len(samples)
        while i < n:
            t, events, at_risk = samples[i][0], 0, n - i
            while i < n and samples[i][0] == t:
                events, i = events + samples[i][1], i + 1
            s *= 1 - events / at_risk
            times.append(t)
            survival.append(s)
        area = [0.0] * len(times)
        for k in range(len(times) - 2, -1, -1):
            area[k] = area[k + 1] + survival[k] * (times[k + 1] - times[k])
        done_runs = tuple(done)
        return cls(tuple(times), tuple(survival), tuple(area), done_runs, len(running), growth)

    def known_beyond(self, age: float) -> int:
        """Finished runs longer than `age`: the evidence for a job of that age."""
        return len(self.finished) - bisect.bisect_right(self.finished, age)

    def remaining(self, age: float) -> float:
        """Expected run left of a job that has run `age` seconds: E[T - a | T > a]."""
        k = max(0, bisect.bisect_right(self.times, age) - 1)
        s = self.survival[k]
        if s <= 0 or k + 1 >= len(self.times):
            return 0.0
        return (self.area[k + 1] + s * (self.times[k + 1] - age)) / s

    def mean(self) -> float:
        """Expected run of a job not started, at the size the queue's jobs ran at."""
        return self.area[0]

    def at_start(self) -> float:
        """Expected run of a newcomer at the size it starts at (its gang, its minimum):
        the mean at linear speedup from the size the runs ran at (`growth`)."""
        return self.area[0] * self.growth


def run_of(job: UnmanagedJob) -> FinishedRun | None:
    """A finished job's run, None where it has none (no start or completion read)."""
    if job.reason is not Reason.FINISHED or job.started is None or job.completed is None:
        return None
    if job.completed < job.started:
        return None
    seconds = (job.completed - job.started).total_seconds()
    return FinishedRun(job.ref, job.queue, seconds, job.completed)


def swap_short(
    remaining: float | None, newcomer: float | None, restarts: float, factor: float
) -> bool:
    """A victim that gives up as many workers as it keeps (a swap) is known to be worth
    less than the newcomer: its expected run left at its size is at most `factor` x (the
    newcomer's expected run at the size it starts at + the `restarts` seconds the swap
    costs it). For mean JCT with
    near-linear speedup, running fewer jobs faster wins unless the job kept waiting is
    the shorter: the GPU goes to the job with the least work left. None: not known."""
    if remaining is None or newcomer is None or factor <= 0:
        return False
    return remaining <= factor * (newcomer + restarts)
