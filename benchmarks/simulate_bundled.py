"""Regenerate autoscaler/sim/data/small.csv, the workload `elastic-autoscaler simulate`
runs without --trace: every other job of Pollux workload-3 (80 jobs, ~8 h of submissions),
its work derived from the application profiles (autoscaler/sim/profiles.py), its elastic
range from the default rule cut to the measured curve, and its measured speedup curve
replaced by the Amdahl curve that fits it best (least squares of log speedup over the
range), so the bundled file needs no profiles.

    python benchmarks/simulate_bundled.py autoscaler/sim/data/traces > autoscaler/sim/data/small.csv
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from autoscaler.sim.traces import TraceOptions, read_trace
from autoscaler.sim.workload import amdahl


def fit(job) -> float:  # type: ignore[no-untyped-def]
    sizes = range(job.min_workers, job.max_workers + 1)
    best = (math.inf, 0.95)
    for k in range(1, 2000):
        p = 0.5 + 0.5 * k / 2000
        curve = amdahl(job.requested, job.max_workers, p)
        err = sum((math.log(curve.rate(g)) - math.log(job.speedup.rate(g))) ** 2 for g in sizes)
        best = min(best, (err, p))
    return round(best[1], 4)


def main() -> None:
    traces = Path(sys.argv[1])
    w = read_trace(traces / "pollux-workloads" / "workload-3.csv", TraceOptions())
    print("name,submit,duration,gpus,queue,min_workers,max_workers,speedup")
    for i, j in enumerate(w.jobs):
        if i % 2:
            continue
        print(
            f"{j.name},{j.submit:.0f},{j.work:.0f},{j.requested},default,"
            f"{j.min_workers},{j.max_workers},amdahl:{fit(j)}"
        )


if __name__ == "__main__":
    main()
