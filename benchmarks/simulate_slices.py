"""The planner against stock Volcano on held-out, ITP-style slices of the Philly trace:
one shared queue (an ITP virtual cluster), 1-GPU jobs only or multi-GPU jobs only, each
slice a different stretch of the trace, Amdahl 0.95, elastic range 0.5..2, the cluster
sized to the load (`cluster_gpus`).

The noise is measured, not assumed: each slice is run under several seeds; a seed moves
every job's submission by a random 0-60 s (the same trace for stock Volcano and the
planner) and runs the planner at another cycle timing (interval/min_interval: 100/12,
120/15, 140/18 s, the daemon's periodic cycle and its early cycles on submissions). The
spread of planner / stock over the seeds is the noise of one slice.

    PYTHONPATH=. nice -n 10 python benchmarks/simulate_slices.py \\
        [--kinds 1gpu,multi] [--slices 0,1,2,3] [--seeds 0,1,2] \\
        [--set key=value ...] [--job-info none|runtime|progress|both] \\
        [--volcano-plugin capacity|proportion] [--history N] [--json out.json]

`--history N` lists the N runs of the slice's kind before its window (the trace's
durations) to the planner as finished jobs of the queue, as a cluster that keeps its
finished jobs would: where nothing is declared, the planner weighs swaps by the queue's
run times (docs/design.md rule 3b), and a slice cut from an empty cluster has none in
its first hour. Stock Volcano does not read them.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.core.model import Plugin
from autoscaler.settings import Settings
from autoscaler.sim.cli import bundled_trace
from autoscaler.sim.policies import JOB_INFO
from autoscaler.sim.runner import compare
from autoscaler.sim.traces import TraceOptions, read_trace
from autoscaler.sim.workload import Workload, with_restart_costs

# kind: (jobs per slice, first job of seed 0, stride between seeds, which jobs)
KINDS = {
    "1gpu": (1500, 10_000, 9_000, lambda gpus: gpus == 1),
    "multi": (300, 10_000, 9_000, lambda gpus: gpus >= 2),
}
LOAD = 0.9  # the cluster is sized to this fraction of the GPUs asked for while submitting
QUEUE = "itp"


TIMINGS = ((100.0, 12.0), (120.0, 15.0), (140.0, 18.0))  # interval, min_interval (s)
SHIFT = 60.0  # a seed moves each submission by up to this many seconds


def workload(kind: str, index: int) -> Workload:
    """`kind`'s jobs from the index-th stretch of the trace, in one queue: the stretch
    is read until it holds enough of them (multi-GPU jobs are 7 % of Philly's)."""
    count, first, stride, keep = KINDS[kind]
    start = first + index * stride
    span = count if kind == "1gpu" else count * 30
    w = read_trace(bundled_trace("philly"), TraceOptions(philly_slice=(start, start + span)))
    jobs = [replace(j, queue=QUEUE) for j in w.jobs if keep(j.requested_gpus)][:count]
    return replace(w, jobs=with_restart_costs(tuple(jobs), 30.0), source=f"{kind}#{index}")


def trace_history(
    start: int, count: int, keep: Callable[[int], bool], queue: str | None, span: int
) -> tuple[tuple[str, float], ...]:
    """The runs of the last `count` jobs `keep` takes (by their GPUs) among the `span`
    trace rows before row `start`, each (queue, run seconds), in `queue` if given (else
    its own): the jobs a cluster that keeps its finished jobs still lists when the
    window starts. A run is the trace's duration (at the size the job asked for)."""
    w = read_trace(
        bundled_trace("philly"), TraceOptions(philly_slice=(max(0, start - span), start))
    )
    runs: dict[str, list[float]] = {}
    for j in w.jobs:
        if keep(j.requested_gpus):
            runs.setdefault(queue or j.queue, []).append(j.work)
    return tuple((q, r) for q, v in sorted(runs.items()) for r in v[-count:])


def with_history(w: Workload, kind: str, index: int, count: int) -> Workload:
    """The slice with the `count` runs of its kind before its window as finished jobs."""
    if count <= 0:
        return w
    _, first, stride, keep = KINDS[kind]
    span = count * (5 if kind == "1gpu" else 30)
    return replace(w, history=trace_history(first + index * stride, count, keep, QUEUE, span))


def perturbed(w: Workload, seed: int) -> Workload:
    """The same jobs, each submitted up to SHIFT seconds later (seed 0: unchanged)."""
    if seed == 0:
        return w
    rng = random.Random(seed)
    jobs = [replace(j, submit=j.submit + rng.uniform(0, SHIFT)) for j in w.jobs]
    return replace(w, jobs=tuple(sorted(jobs, key=lambda j: (j.submit, j.name))))


def cluster_gpus(w: Workload) -> int:
    """GPUs for the slice: LOAD x the GPUs its jobs ask for on average while they are
    submitted (a job counts for at most the window), in nodes of 8, at least its
    largest job."""
    first = min(j.submit for j in w.jobs)
    window = max(1.0, max(j.submit for j in w.jobs) - first)
    asked = sum(min(j.work, window) * j.requested_gpus for j in w.jobs) / window
    biggest = max(j.max_workers * j.gpus_per_worker for j in w.jobs)
    return max(biggest, 8 * max(1, round(LOAD * asked / 8)))


def run(
    kinds: list[str],
    slices: list[int],
    seeds: list[int],
    overrides: dict[str, str],
    plugin: Plugin,
    job_info: str = "none",
    history: int = 0,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in kinds:
        for index in slices:
            base = with_history(workload(kind, index), kind, index, history)
            gpus = cluster_gpus(base)
            rows = []
            for seed in seeds:
                w = perturbed(base, seed)
                stock = compare(w, gpus, Settings(), ("volcano-default",), 30.0, plugin=plugin)
                interval, early = TIMINGS[seed % len(TIMINGS)]
                timing = {"interval_seconds": interval, "min_interval_seconds": early}
                s = Settings(**(overrides | timing))
                c = compare(w, gpus, s, ("planner",), 30.0, plugin=plugin, job_info=job_info)
                m, b = c.metrics["planner"], stock.metrics["volcano-default"]
                rows.append(
                    {
                        "seed": seed,
                        "interval": interval,
                        "min_interval": early,
                        "stock_avg_jct_h": b.avg_jct / 3600,
                        "avg_jct_h": m.avg_jct / 3600,
                        "restarts_per_job": m.restarts_per_job,
                        "x_stock": m.avg_jct / b.avg_jct,
                    }
                )
            ratios = [r["x_stock"] for r in rows]
            r = out[f"{kind}#{index}"] = {
                "jobs": len(base.jobs),
                "gpus": gpus,
                "runs": rows,
                "x_stock_mean": statistics.fmean(ratios),
                "x_stock_min": min(ratios),
                "x_stock_max": max(ratios),
            }
            print(
                f"{kind}#{index}: {len(base.jobs)} jobs, {gpus} GPUs, stock "
                f"{statistics.fmean(x['stock_avg_jct_h'] for x in rows):.3f} h;"
                f" planner x stock {r['x_stock_mean']:.4f} ({r['x_stock_min']:.4f}.."
                f"{r['x_stock_max']:.4f}), restarts/job "
                f"{statistics.fmean(x['restarts_per_job'] for x in rows):.2f}"
            )
            sys.stdout.flush()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="1gpu,multi")
    ap.add_argument("--slices", default="0,1,2,3", help="which stretches of the trace")
    ap.add_argument("--seeds", default="0,1,2", help="noise seeds (submit shift, timing)")
    ap.add_argument("--set", action="append", default=[], help="planner setting key=value")
    ap.add_argument("--volcano-plugin", choices=["capacity", "proportion"], default="capacity")
    ap.add_argument("--job-info", choices=JOB_INFO, default="none")
    ap.add_argument(
        "--history",
        type=int,
        default=0,
        help="list the N runs of the trace before each slice as finished jobs (0: none)",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t = time.time()
    out = run(
        args.kinds.split(","),
        [int(x) for x in args.slices.split(",")],
        [int(x) for x in args.seeds.split(",")],
        dict(kv.split("=", 1) for kv in args.set),
        Plugin(args.volcano_plugin),
        args.job_info,
        args.history,
    )
    print(f"({time.time() - t:.0f}s)", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
