"""Planner defaults by benchmark: the planner under candidate settings against stock
Volcano, static and the ideal preempting Volcano, on the eight Pollux workloads (flat 30 s
restarts and per-model Sia restart costs) and two Philly slices (1-GPU-dominated and
multi-GPU). A default changes only with the row that justifies it (docs/benchmarks.md).

    PYTHONPATH=. python benchmarks/simulate_defaults.py \\
        [--candidate 'name:key=value,key=value' ...] [--json out.json]
        [--volcano-plugin capacity|proportion] [--no-queue-capability]
        [--job-info none|runtime|progress|both] [--one-queue] [--history N]

`--one-queue` puts every job of a scenario in one queue (ONE_QUEUE): the Philly slices
then hold one FIFO backlog instead of the trace's 11 queues, where a queue alone borrows
nothing and every swap inside it is the planner's in-queue reclaim ([outcomes] #29).
`--history N` lists the runs of the N jobs of each queue before a Philly window to the
planner as finished jobs (simulate_slices.py --history).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from simulate_pollux import hide_queue_capability
from simulate_slices import trace_history

from autoscaler.core.model import Plugin
from autoscaler.settings import Settings
from autoscaler.sim.cli import bundled_trace, bundled_traces
from autoscaler.sim.policies import JOB_INFO
from autoscaler.sim.runner import compare
from autoscaler.sim.traces import TraceOptions, read_trace
from autoscaler.sim.workload import Workload, with_restart_costs

BASELINES = ("volcano-default", "static", "volcano-elastic")
ONE_QUEUE = "one"
PHILLY_GPUS = 128
SCENARIOS = {
    # name: (workloads, GPUs)
    "pollux x8, 30 s": ("pollux", 64),
    "pollux x8, Sia costs": ("pollux-profile", 64),
    "philly 10000-12000 (1-GPU jobs: 99 %)": ("philly:10000,12000", PHILLY_GPUS),
    "philly 42000-44000 (multi-GPU: 92 % of GPU-time)": ("philly:42000,44000", PHILLY_GPUS),
}
CANDIDATES = {
    "defaults": {},
    "cooldown 10x restart cost": {"cooldown_restart_cost_factor": 10},
    "starving gang does not block": {"starving_gang_blocks_later_gangs": False},
    "both": {"cooldown_restart_cost_factor": 10, "starving_gang_blocks_later_gangs": False},
}


def one_queue(ws: list[Workload]) -> list[Workload]:
    """The same workloads with every job in the queue ONE_QUEUE."""
    return [replace(w, jobs=tuple(replace(j, queue=ONE_QUEUE) for j in w.jobs)) for w in ws]


def with_history(ws: list[Workload], kind: str, count: int, queue: str | None) -> list[Workload]:
    """A Philly scenario with the runs of the `count` jobs of each queue before its window
    listed as finished (simulate_slices.trace_history); Pollux workloads have none."""
    if count <= 0 or not kind.startswith("philly"):
        return ws
    start = int(kind.split(":")[1].split(",")[0])
    runs = trace_history(start, count, lambda _gpus: True, queue, 5 * count)
    return [replace(w, history=runs) for w in ws]


def workloads(kind: str) -> list[Workload]:
    if kind.startswith("pollux"):
        out = []
        for i in range(1, 9):
            w = read_trace(
                bundled_traces() / "pollux-workloads" / f"workload-{i}.csv", TraceOptions()
            )
            cost = None if kind == "pollux-profile" else 30.0
            out.append(replace(w, jobs=with_restart_costs(w.jobs, cost)))
        return out
    start, end = (int(x) for x in kind.split(":")[1].split(","))
    w = read_trace(bundled_trace("philly"), TraceOptions(philly_slice=(start, end)))
    return [replace(w, jobs=with_restart_costs(w.jobs, 30.0))]


def measure(
    ws: list[Workload],
    gpus: int,
    settings: Settings,
    policies: tuple[str, ...],
    plugin: Plugin = Plugin.CAPACITY,
    job_info: str = "none",
) -> dict:
    """Average JCT (h) and restarts per job per policy, averaged over the workloads."""
    rows: dict[str, list[tuple[float, float]]] = {p: [] for p in policies}
    for w in ws:
        c = compare(w, gpus, settings, policies, 30.0, plugin=plugin, job_info=job_info)
        for p in policies:
            m = c.metrics[p]
            rows[p].append((m.avg_jct / 3600, m.restarts_per_job))
    return {
        p: {
            "avg_jct_h": statistics.fmean(r[0] for r in v),
            "restarts_per_job": statistics.fmean(r[1] for r in v),
        }
        for p, v in rows.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", action="append", default=[], help="name:key=value,...")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", default="", help="comma-separated scenario name prefixes")
    ap.add_argument(
        "--no-standard", action="store_true", help="only the --candidate ones (and defaults)"
    )
    ap.add_argument("--volcano-plugin", choices=["capacity", "proportion"], default="capacity")
    ap.add_argument(
        "--job-info",
        choices=JOB_INFO,
        default="none",
        help="what jobs declare of their run to the planner (simulate --job-info)",
    )
    ap.add_argument(
        "--no-queue-capability",
        action="store_true",
        help="do not show the planner the Queue's capability (the numbers before it was)",
    )
    ap.add_argument(
        "--one-queue",
        action="store_true",
        help="every job of a scenario in one queue (the Philly slices' 11 queues as one)",
    )
    ap.add_argument(
        "--history",
        type=int,
        default=0,
        help="list the runs of the N jobs of each queue before a Philly window as finished",
    )
    args = ap.parse_args()
    plugin = Plugin(args.volcano_plugin)
    if args.no_queue_capability:
        hide_queue_capability()
    candidates = {"defaults": {}} if args.no_standard else dict(CANDIDATES)
    for spec in args.candidate:
        name, _, kvs = spec.partition(":")
        candidates[name] = dict(kv.split("=", 1) for kv in kvs.split(",") if kv)
    out: dict = {}
    t = time.time()
    for scenario, (kind, gpus) in SCENARIOS.items():
        if args.only and not any(scenario.startswith(p) for p in args.only.split(",")):
            continue
        ws = one_queue(workloads(kind)) if args.one_queue else workloads(kind)
        ws = with_history(ws, kind, args.history, ONE_QUEUE if args.one_queue else None)
        base = measure(ws, gpus, Settings(), BASELINES, plugin)
        out[scenario] = {"baselines": base, "planner": {}}
        for name, overrides in candidates.items():
            got = measure(ws, gpus, Settings(**overrides), ("planner",), plugin, args.job_info)
            got = got["planner"]
            out[scenario]["planner"][name] = got
        where = ", one queue" if args.one_queue else ""
        print(f"\n{scenario} ({gpus} GPUs{where}; {time.time() - t:.0f}s so far)")
        for p, m in base.items():
            print(f"  {p:30s} JCT {m['avg_jct_h']:.3f} h  restarts/job {m['restarts_per_job']:.2f}")
        ve, vd, st = base["volcano-elastic"], base["volcano-default"], base["static"]
        print(
            f"  {'planner candidate':30s} JCT h   x stock    x static  x elastic  "
            "restarts  x elastic"
        )
        for name, m in out[scenario]["planner"].items():
            j, r = m["avg_jct_h"], m["restarts_per_job"]
            print(
                f"  {name:30s} {j:.3f}   {j / vd['avg_jct_h']:.3f}      {j / st['avg_jct_h']:.3f}"
                f"     {j / ve['avg_jct_h']:.3f}      {r:.2f}      "
                f"{r / ve['restarts_per_job'] if ve['restarts_per_job'] else float('nan'):.2f}"
            )
        sys.stdout.flush()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
