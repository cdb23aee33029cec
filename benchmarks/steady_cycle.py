"""The steady cycle's own work at scale, without the sources:
`python benchmarks/steady_cycle.py [--jobs 10000 20000] [--freeze] [--nodes 26000]`.

planner_scale.py's cluster (100 queues, 1/2/4/8-GPU workers, ~3 % waiting gangs) made
steady: the first plan's resizes are applied to the snapshot (their workers in flight),
so later cycles have nothing to do. Then `Controller.run_once` over that snapshot, as the
daemon runs it at the info log level (JSON lines to /dev/null): plan, decision logging,
metrics, the status document. The snapshot source returns the same snapshot (what the
watch caches give when nothing changed). Prints the median CPU time of a cycle (this
process only: others' load on the machine does not count) and of the status document's
build within it (`status_cpu_ms`), the log lines a steady cycle wrote, and the garbage
collections it ran. `--freeze` moves everything alive before the
cycles (the snapshot, as the caches hold it) out of the collector's sight (gc.freeze), as
a daemon may do once its caches are synced.

`--nodes N`: node fit too, on plan_node_fit.py's cluster instead (cycle_real.py's jobs
read through build_snapshot, their pods bound to the nodes they fill, 200 waiting gangs),
padded with idle nodes to N: the workers in flight placed on the nodes every cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import io
import json
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import plan_node_fit  # noqa: E402
import planner_scale  # noqa: E402

from autoscaler import loop  # noqa: E402
from autoscaler.actuator import DryRunActuator  # noqa: E402
from autoscaler.logs import configure_logging  # noqa: E402
from autoscaler.loop import Controller  # noqa: E402
from autoscaler.metrics import Metrics  # noqa: E402
from autoscaler.model import ClusterSnapshot  # noqa: E402
from autoscaler.planner import plan  # noqa: E402
from autoscaler.settings import Settings  # noqa: E402


class _Fixed:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot

    async def read(self, now: datetime) -> ClusterSnapshot:
        return self.snapshot


class _Sink:
    def publish(self, doc: Any) -> None:
        pass


class _Lines(io.StringIO):
    """Counts the log lines written (stderr while the cycles run)."""

    lines = 0

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        return len(text)


class _StatusClock:
    """The CPU time of each status document built (loop.build_status, wrapped)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._build = loop.build_status

    def __call__(self, *args: Any, **kw: Any) -> Any:
        start = time.process_time()
        try:
            return self._build(*args, **kw)
        finally:
            self.times.append(time.process_time() - start)


class _GcClock:
    """Time spent in garbage collections (a gc callback)."""

    def __init__(self) -> None:
        self.seconds, self._start = 0.0, 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start


def steady(n: int, settings: Settings, nodes: int = 0) -> ClusterSnapshot:
    if nodes:
        snap = plan_node_fit.cluster(n, nodes)
    else:
        snap, _, _ = planner_scale.cluster(n)
    first = plan(snap, settings.planner_policy(), planner_scale.NOW)
    targets = {a.ref: a.target for a in first.actions}
    jobs = tuple(
        dataclasses.replace(j, replicas=targets[j.ref], last_scale_time=planner_scale.NOW)
        if j.ref in targets
        else j
        for j in snap.jobs
    )
    return dataclasses.replace(snap, jobs=jobs)


async def measure(n: int, cycles: int, freeze: bool, nodes: int = 0) -> dict[str, Any]:
    settings = Settings(
        cooldown_seconds=0,
        cooldown_restart_cost_factor=0,
        growth_payoff_factor=0,
        log_level="info",
        log_format="json",
    )
    snapshot = steady(n, settings, nodes)
    if freeze:
        gc.collect()
        gc.freeze()
    controller = Controller(
        settings.loop_options(),
        settings.planner_policy(),
        _Fixed(snapshot),
        DryRunActuator(),
        Metrics(),
        status=_Sink(),
    )
    now = planner_scale.NOW + timedelta(minutes=1)
    out, real = _Lines(), sys.stderr
    sys.stderr = out
    try:
        configure_logging(settings)
        await controller.run_once(now)  # the first: every decision is news
        out.lines = 0
        collections = [s["collections"] for s in gc.get_stats()]
        status = _StatusClock()
        loop.build_status = status  # type: ignore[assignment]
        paused = _GcClock()
        gc.callbacks.append(paused)
        times, actions = [], 0
        for i in range(cycles):
            start = time.process_time()
            result = await controller.run_once(now + timedelta(seconds=i + 1))
            times.append(time.process_time() - start)
            actions += len(result.plan.actions) if result.plan else 0
    finally:
        sys.stderr = real
        gc.callbacks[:] = [c for c in gc.callbacks if not isinstance(c, _GcClock)]
    ran = [s["collections"] - c for s, c in zip(gc.get_stats(), collections, strict=True)]
    return {
        "jobs": n,
        "nodes": len(snapshot.volcano.nodes or ()) if snapshot.volcano else 0,
        "cycle_cpu_ms": round(1000 * statistics.median(times), 1),
        "status_cpu_ms": round(1000 * statistics.median(status.times), 1),
        "log_lines_per_cycle": round(out.lines / cycles, 1),
        "actions_per_cycle": round(actions / cycles, 1),
        "gc_per_cycle": [round(r / cycles, 1) for r in ran],
        "gc_ms_per_cycle": round(1000 * paused.seconds / cycles, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, nargs="+", default=[10000, 20000])
    parser.add_argument("--cycles", type=int, default=7)
    parser.add_argument("--freeze", action="store_true")
    parser.add_argument("--nodes", type=int, default=0, help="node fit on N nodes (see above)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        result = measure(args.jobs[0], args.cycles, args.freeze, args.nodes)
        print(json.dumps(asyncio.run(result)))
        return 0
    for n in args.jobs:
        # one process per size: each heap (and so each collection) is that size's own
        argv = [__file__, "--one", "--jobs", str(n), "--cycles", str(args.cycles)]
        argv += ["--freeze"] if args.freeze else []
        argv += ["--nodes", str(args.nodes)] if args.nodes else []
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True)
        print(out.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
