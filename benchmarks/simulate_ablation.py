"""What each planner setting buys: the planner alone on the eight Pollux workloads
(64 GPUs), one configuration per row, averaged. Used for docs/benchmarks.md.

    PYTHONPATH=. python benchmarks/simulate_ablation.py [TRACES_DIR]  (default: the bundled copy)

`+noblock` rows run with starving_gang_blocks_later_gangs=false: a gang past
max_gang_wait_seconds still stops growth in its queue, but no longer stops the planner
from serving the gangs behind it.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from autoscaler.settings import Settings
from autoscaler.sim.cli import bundled_traces
from autoscaler.sim.runner import compare
from autoscaler.sim.traces import TraceOptions, read_trace

CONFIGS: list[tuple[str, dict[str, Any], bool]] = [
    ("defaults", {}, False),
    ("growth_payoff_factor=2", {"growth_payoff_factor": 2}, False),
    ("growth_payoff_factor=10", {"growth_payoff_factor": 10}, False),
    ("victim_order=least-work-lost", {"victim_order": "least-work-lost"}, False),
    ("growth_policy=fair", {"growth_policy": "fair"}, False),
    ("cooldown_seconds=900", {"cooldown_seconds": 900}, False),
    ("reclaim_cooldown_seconds=0", {"reclaim_cooldown_seconds": 0}, False),
    ("interval_seconds=60", {"interval_seconds": 60}, False),
    ("interval_seconds=300", {"interval_seconds": 300}, False),
    ("reserve_gpus_per_queue=2", {"reserve_gpus_per_queue": 2}, False),
    ("max_gang_wait_seconds=7200", {"max_gang_wait_seconds": 7200}, False),
    ("max_gang_wait_seconds=1e6 (guard off)", {"max_gang_wait_seconds": 1e6}, False),
    ("+noblock", {}, True),
    ("+noblock reserve_gpus_per_queue=2", {"reserve_gpus_per_queue": 2}, True),
    ("+noblock growth_payoff_factor=2", {"growth_payoff_factor": 2}, True),
    (
        "+noblock cooldown=900 reserve=2",
        {"cooldown_seconds": 900, "reserve_gpus_per_queue": 2},
        True,
    ),
]


def main() -> None:
    traces = Path(sys.argv[1]) if len(sys.argv) > 1 else bundled_traces()
    workloads = [
        read_trace(traces / "pollux-workloads" / f"workload-{i}.csv", TraceOptions())
        for i in range(1, 9)
    ]
    print(f"{'planner configuration':40s} avgJCT h  p95queue h  restarts  util/bound")
    for label, overrides, proto in CONFIGS:
        if proto:
            overrides = {**overrides, "starving_gang_blocks_later_gangs": False}
        rows = []
        for w in workloads:
            m = compare(w, 64, Settings(**overrides), ["planner"]).metrics["planner"]
            rows.append((m.avg_jct, m.p95_queueing, m.restarts_per_job, m.utilisation / m.bound))
        print(
            f"{label:40s} {statistics.fmean(r[0] for r in rows) / 3600:8.3f}  "
            f"{statistics.fmean(r[1] for r in rows) / 3600:10.2f}  "
            f"{statistics.fmean(r[2] for r in rows):8.2f}  "
            f"{statistics.fmean(r[3] for r in rows):10.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
