"""All policies on the eight Pollux workloads (64 GPUs): per-workload and averaged
metrics, plus planner ablations. Used for docs/benchmarks.md.

    python benchmarks/simulate_pollux.py [TRACES_DIR] [--set key=value ...]
        [--volcano-plugin capacity|proportion] [--no-queue-capability] [--json out.json]
        [--job-info none|runtime|progress|both] [--timings 100/12,120/15,140/18 | sweep]

`--timings` runs the planner's cycle at each interval/min_interval (seconds) and prints
the mean (min..max) of each policy's average JCT over them: on these workloads a shift
of a few seconds in one cycle decides which of two orders a backlog of gangs takes (one
workload moves by 5-10 %), so one timing is one draw (docs/benchmarks.md, #29).
`sweep`: interval 100..140 by 10 x min_interval 12, 15, 18 (15 timings).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import autoscaler.sim.policies
from autoscaler.core.model import ClusterSnapshot, Plugin
from autoscaler.settings import Settings
from autoscaler.sim.cli import bundled_traces
from autoscaler.sim.engine import Cluster
from autoscaler.sim.policies import JOB_INFO, POLICIES
from autoscaler.sim.runner import compare
from autoscaler.sim.traces import TraceOptions, read_trace
from autoscaler.sim.workload import ElasticRule


def hide_queue_capability() -> None:
    """The planner is not shown the Queue's capability (`QueueState.capacity_gpus`), as
    before the simulator handed it Volcano's view: reproduces the numbers recorded before
    (the capacity rule of the planner, `_room_by_capacity`, then never applies)."""
    shown = autoscaler.sim.policies.snapshot_of

    def hidden(cluster: Cluster, cache: Any = None) -> ClusterSnapshot:
        s = shown(cluster, cache)
        queues = {q: replace(v, capacity_gpus=None) for q, v in s.queues.items()}
        return replace(s, queues=queues)

    autoscaler.sim.policies.snapshot_of = hidden  # type: ignore[assignment]


KEYS = ("utilisation", "bound", "avg_jct", "p95_jct", "p95_queueing", "restarts_per_job")


def run_all(
    traces: Path,
    settings: Settings,
    policies: tuple[str, ...],
    gpus: int,
    penalty: float,
    opts: TraceOptions,
    plugin: Plugin = Plugin.CAPACITY,
    job_info: str = "none",
) -> dict[str, dict[str, float]]:
    per: dict[str, list[dict[str, float]]] = {p: [] for p in policies}
    for i in range(1, 9):
        w = read_trace(traces / "pollux-workloads" / f"workload-{i}.csv", opts)
        c = compare(w, gpus, settings, policies, penalty, plugin=plugin, job_info=job_info)
        for p in policies:
            m = c.metrics[p]
            per[p].append({k: getattr(m, k) for k in KEYS})
    return {
        p: {k: statistics.fmean(r[k] for r in rows) for k in KEYS}
        | {"util/bound": statistics.fmean(r["utilisation"] / r["bound"] for r in rows)}
        for p, rows in per.items()
    } | {"_per_workload": per}  # type: ignore[operator]


def per_workload(avg: dict[str, Any]) -> str:
    per = avg["_per_workload"]
    lines = [
        "avg JCT h / restarts per job, by workload",
        f"{'policy':16s} " + " ".join(f"{'wl-' + str(i):>10s}" for i in range(1, 9)),
    ]
    for p, rows in per.items():
        lines.append(
            f"{p:16s} "
            + " ".join(f"{r['avg_jct'] / 3600:5.2f}/{r['restarts_per_job']:4.2f}" for r in rows)
        )
    return "\n".join(lines)


def show(avg: dict[str, Any], ref: str = "planner") -> str:
    lines = [f"{'policy':24s} util  u/bound  avgJCT h  p95JCT h  p95queue h  restarts"]
    for p, m in avg.items():
        if p.startswith("_"):
            continue
        lines.append(
            f"{p:24s} {m['utilisation']:.3f} {m['util/bound']:.3f}   "
            f"{m['avg_jct'] / 3600:7.3f}   {m['p95_jct'] / 3600:7.2f}   "
            f"{m['p95_queueing'] / 3600:8.2f}   {m['restarts_per_job']:.2f}"
        )
    return "\n".join(lines)


SWEEP = tuple((float(i), float(m)) for i in (100, 110, 120, 130, 140) for m in (12, 15, 18))


def timings(text: str) -> tuple[tuple[float, float], ...]:
    """`--timings`: "sweep", or interval/min_interval pairs separated by commas."""
    if text == "sweep":
        return SWEEP
    out = []
    for pair in text.split(","):
        interval, _, least = pair.partition("/")
        try:
            out.append((float(interval), float(least)))
        except ValueError:
            raise SystemExit(f"--timings: {pair!r} is not interval/min_interval") from None
    return tuple(out)


def over_timings(runs: list[tuple[tuple[float, float], dict[str, Any]]]) -> str:
    """One line per timing (average JCT of each policy), then mean (min..max)."""
    policies = [p for p in runs[0][1] if not p.startswith("_")]
    lines = [f"{'interval/min':14s} " + " ".join(f"{p:>22s}" for p in policies)]
    for (interval, least), avg in runs:
        lines.append(
            f"{interval:g}/{least:g}".ljust(14)
            + " "
            + " ".join(f"{avg[p]['avg_jct'] / 3600:22.3f}" for p in policies)
        )
    cells = []
    for p in policies:
        v = [avg[p]["avg_jct"] / 3600 for _, avg in runs]
        cells.append(f"{statistics.fmean(v):.4f} ({min(v):.3f}..{max(v):.3f})".rjust(22))
    lines.append(f"{'mean (min..max)':14s} " + " ".join(cells))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "traces",
        type=Path,
        nargs="?",
        default=bundled_traces(),
        help="folder with pollux-workloads/ and pollux-app-profiles/ "
        "(default: the copy bundled in the package)",
    )
    ap.add_argument("--set", action="append", default=[], help="planner setting key=value")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--penalty", type=float, default=30.0)
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--elastic-range", default="0.5,2")
    ap.add_argument("--speedup", default="auto")
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
        "--timings",
        help="interval/min_interval pairs (e.g. 100/12,120/15,140/18) or sweep: the "
        "planner at each, the mean (min..max) of average JCT over them",
    )
    args = ap.parse_args()
    if args.no_queue_capability:
        hide_queue_capability()
    overrides = dict(kv.split("=", 1) for kv in args.set)
    settings = Settings(**overrides)
    t = time.time()
    opts = TraceOptions(elastic=ElasticRule.parse(args.elastic_range), speedup=args.speedup)

    def run_at(at: Settings) -> dict[str, dict[str, float]]:
        policies, plugin = tuple(args.policies.split(",")), Plugin(args.volcano_plugin)
        return run_all(
            args.traces, at, policies, args.gpus, args.penalty, opts, plugin, args.job_info
        )

    if args.timings:
        runs = []
        for interval, least in timings(args.timings):
            # the timing wins over a --set of the same setting
            at = Settings(
                **(overrides | {"interval_seconds": interval, "min_interval_seconds": least})
            )
            one = run_at(at)
            print(f"== {interval:g}/{least:g}\n{per_workload(one)}", flush=True)
            runs.append(((interval, least), one))
        print(over_timings(runs))
        print(f"({time.time() - t:.1f}s)", file=sys.stderr)
        return
    avg = run_at(settings)
    print(show(avg))
    print(per_workload(avg))
    print(f"({time.time() - t:.1f}s)", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(avg, indent=1) + "\n")


if __name__ == "__main__":
    main()
