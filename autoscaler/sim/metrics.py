"""Per-policy metrics of a run (all times in seconds unless the name says hours).

Every policy runs the same jobs to completion, so the same work: GPU-hours and idle
GPU-hours compare directly between rows.

- idle_wanted_gpu_hours (the headline idle figure): GPU-hours idle while wanted: the time
  integral of the GPUs the scheduler would have bound for a queue (its room, within the
  cluster's idle GPUs) that a job of that queue could have used (a waiting job up to its
  max, a running one from its workers up to its max), summed over queues and cut to the
  cluster's idle GPUs. What a policy left on the table; idle GPUs no job could use are not
  counted (after the last submission a fast policy's cluster empties).
- allocated_gpu_hours: GPU-hours allocated to jobs, first submit to last finish: what the
  same work cost (a job paused by a restart still holds its GPUs). A policy that runs
  jobs bigger on a sublinear curve spends more for the same work.
- util_submitted: allocated GPU-seconds / (capacity x submission window), the window from
  the first submit to the last (the makespan when every job is submitted at once): how
  busy the cluster was while work kept arriving, the same window for every policy.
- utilisation: allocated GPU-seconds / (capacity x makespan). Each policy's own window:
  a policy that finishes the backlog sooner has a shorter, emptier tail; kept in
  results.json, not in the table.
- bound: the time integral over the makespan of sum over queues of min(deserved, sum of
  max GPUs of its submitted unfinished jobs), / (capacity x makespan). Policy-dependent
  (max is `requested` for static; the unfinished jobs differ), so not a common bound:
  kept in results.json for older comparisons, not in the table.
- jct: finish - submit. queueing delay: first start - submit. restarts per job: average
  number of worker-count changes of a running job. idle_gpu_hours per queue:
  (deserved x makespan - allocated GPU-seconds of the queue) / 3600, every idle GPU-hour
  whether or not anything could use it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from .engine import RunResult, Sample


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""

    if not values:
        return math.nan
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class Metrics:
    policy: str
    jobs: int
    utilisation: float
    bound: float
    avg_jct: float
    p50_jct: float
    p95_jct: float
    avg_queueing: float
    p95_queueing: float
    makespan: float
    restarts_per_job: float
    idle_gpu_hours: dict[str, float]
    allocated_gpu_hours: float
    idle_wanted_gpu_hours: float
    util_submitted: float
    cycles: int
    preemptions: int

    def to_json(self) -> dict[str, Any]:
        return {k: _clean(v) for k, v in self.__dict__.items()}


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6)
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def compute(run: RunResult) -> Metrics:
    jobs = run.jobs
    start = min(j.spec.submit for j in jobs)
    end = max(j.finish for j in jobs if j.finish is not None)
    makespan = end - start
    capacity = run.gpus
    allocated = sum(run.queue_gpu_seconds.values())
    s = run.samples
    bound_area = sum(a.demand * (b.time - a.time) for a, b in itertools.pairwise(s))
    wanted_area = sum(a.idle_wanted * (b.time - a.time) for a, b in itertools.pairwise(s))
    last_submit = max(j.spec.submit for j in jobs)
    window_end = last_submit if last_submit > start else end
    denom = capacity * makespan if makespan > 0 else math.nan
    window = capacity * (window_end - start) if window_end > start else math.nan
    jct = [j.finish - j.spec.submit for j in jobs if j.finish is not None]
    queueing = [j.first_start - j.spec.submit for j in jobs if j.first_start is not None]
    idle = {
        q: (run.deserved[q] * makespan - run.queue_gpu_seconds[q]) / 3600.0
        for q in sorted(run.deserved)
    }
    return Metrics(
        policy=run.policy,
        jobs=len(jobs),
        utilisation=allocated / denom,
        bound=bound_area / denom,
        avg_jct=sum(jct) / len(jct),
        p50_jct=percentile(jct, 50),
        p95_jct=percentile(jct, 95),
        avg_queueing=sum(queueing) / len(queueing),
        p95_queueing=percentile(queueing, 95),
        makespan=makespan,
        restarts_per_job=sum(j.restarts for j in jobs) / len(jobs),
        idle_gpu_hours=idle,
        allocated_gpu_hours=allocated / 3600.0,
        idle_wanted_gpu_hours=wanted_area / 3600.0,
        util_submitted=_allocated_between(s, start, window_end) / window,
        cycles=run.cycles,
        preemptions=run.preemptions,
    )


def _allocated_between(samples: tuple[Sample, ...], t0: float, t1: float) -> float:
    """Allocated GPU-seconds in [t0, t1]: each sample's allocation holds until the next."""
    area = 0.0
    for a, b in itertools.pairwise(samples):
        lo, hi = max(a.time, t0), min(b.time, t1)
        if hi > lo:
            area += a.allocated * (hi - lo)
    return area


def utilisation_series(run: RunResult, bins: int = 200) -> tuple[list[float], list[float]]:
    """Allocated fraction of capacity, averaged per bin of the makespan (hours, fraction)."""

    s = run.samples
    if len(s) < 2:
        return [], []
    t0, t1 = s[0].time, s[-1].time
    width = (t1 - t0) / bins or 1.0
    edges = [t0 + k * width for k in range(bins)] + [t1]
    area = [0.0] * bins
    k = 0
    for a, b in itertools.pairwise(s):
        lo = a.time
        while k < bins - 1 and edges[k + 1] <= lo:
            k += 1
        j = k
        while lo < b.time:
            hi = b.time if j == bins - 1 else min(b.time, edges[j + 1])
            area[j] += a.allocated * (hi - lo)
            lo = hi
            j += 1
    cap = run.gpus
    xs = [(t0 + (k + 0.5) * width) / 3600.0 for k in range(bins)]
    return xs, [x / (width * cap) for x in area]
