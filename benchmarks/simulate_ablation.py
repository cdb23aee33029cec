"""What each planner setting buys: the planner alone on the eight Pollux workloads
(64 GPUs), one configuration per row, averaged. Used for docs/benchmarks-sim.md.

    PYTHONPATH=. python benchmarks/simulate_ablation.py /work/shared/traces

`+noblock` rows measure a PROPOSED planner rule that is not in planner.py yet (see
docs/benchmarks-sim.md, "Proposed rule"): a gang past max_gang_wait_seconds still stops
growth in its queue, but no longer stops the planner from serving the gangs behind it.
They run a copy of planner.py with that two-line change applied in memory; planner.py
itself is untouched.
"""

from __future__ import annotations

import statistics
import sys
import types
from pathlib import Path
from typing import Any

import autoscaler.planner as planner_module
import autoscaler.sim.policies as policies_module
from autoscaler.settings import Settings
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
    ("+noblock cooldown=900 reserve=2",
     {"cooldown_seconds": 900, "reserve_gpus_per_queue": 2}, True),
]

_ORIGINAL_PLAN = planner_module.plan


def _noblock_plan():  # type: ignore[no-untyped-def]
    src = Path(planner_module.__file__).read_text()
    a = "            if starving:\n                self.gangs.append(GangDecision("
    b = "                if waited > p.max_gang_wait_seconds:"
    if a not in src or b not in src:
        raise SystemExit("planner.py changed: the +noblock prototype no longer applies")
    src = src.replace(a, "            if False:\n                self.gangs.append(GangDecision(")
    src = src.replace(b, "                if waited > p.max_gang_wait_seconds and not starving:")
    module = types.ModuleType("autoscaler._planner_noblock")
    module.__package__ = "autoscaler"
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(src, "planner_noblock", "exec"), module.__dict__)
    namespace = module.__dict__
    return namespace["plan"]


def main() -> None:
    traces = Path(sys.argv[1])
    workloads = [read_trace(traces / "pollux-workloads" / f"workload-{i}.csv", TraceOptions())
                 for i in range(1, 9)]
    noblock = _noblock_plan()
    print(f"{'planner configuration':40s} avgJCT h  p95queue h  restarts  util/bound")
    for label, overrides, proto in CONFIGS:
        policies_module.plan = noblock if proto else _ORIGINAL_PLAN
        rows = []
        for w in workloads:
            m = compare(w, 64, Settings(**overrides), ["planner"]).metrics["planner"]
            rows.append((m.avg_jct, m.p95_queueing, m.restarts_per_job,
                         m.utilisation / m.bound))
        print(f"{label:40s} {statistics.fmean(r[0] for r in rows) / 3600:8.3f}  "
              f"{statistics.fmean(r[1] for r in rows) / 3600:10.2f}  "
              f"{statistics.fmean(r[2] for r in rows):8.2f}  "
              f"{statistics.fmean(r[3] for r in rows):10.3f}", flush=True)
    policies_module.plan = _ORIGINAL_PLAN


if __name__ == "__main__":
    main()
