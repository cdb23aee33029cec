"""Per-policy metrics of a run (all times in seconds unless the name says hours).

- utilisation: allocated GPU-seconds / (capacity x makespan), over the makespan window
  (first submit to last finish). GPUs of a job paused by a restart count as allocated.
- bound: the physical bound on utilisation in the same window: the time integral of
  sum over queues of min(deserved, sum of max GPUs of its submitted unfinished jobs),
  divided by capacity x makespan. "Max" is the job's max under that policy (requested
  for static). No policy can allocate more than this; it depends on the policy because
  the set of unfinished jobs does.
- jct: finish - submit. queueing delay: first start - submit. restarts per job: average
  number of worker-count changes of a running job. idle GPU-hours per queue:
  (deserved x makespan - allocated GPU-seconds of the queue) / 3600.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from .engine import RunResult


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
    capacity = sum(run.deserved.values())
    allocated = sum(run.queue_gpu_seconds.values())
    bound_area = 0.0
    s = run.samples
    for a, b in itertools.pairwise(s):
        bound_area += a.demand * (b.time - a.time)
    denom = capacity * makespan if makespan > 0 else math.nan
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
        cycles=run.cycles,
        preemptions=run.preemptions,
    )


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
    cap = sum(run.deserved.values())
    xs = [(t0 + (k + 0.5) * width) / 3600.0 for k in range(bins)]
    return xs, [x / (width * cap) for x in area]
