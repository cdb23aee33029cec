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
collections it ran. `--freeze` tunes the collector as the daemon does once its caches are synced
(read/kube/tuning.settle_gc: everything alive before the cycles, the snapshot as the
caches hold it, moved out of the collector's sight, and a first-generation threshold of
50,000): the daemon's own cycle.

`--nodes N`: node fit too, on plan_node_fit.py's cluster instead (cycle_real.py's jobs
read through build_snapshot, their pods bound to the nodes they fill, 200 waiting gangs),
padded with idle nodes to N: the workers in flight placed on the nodes every cycle.

`--dry-run`: the cycles of a dry run (`run --dry-run`, the chart's first install): the
first plan's resizes are never applied, so every cycle decides them again (thousands of
pending actions at 10k jobs). `--lent` (with `--nodes`): plan_gangs.py's cluster instead,
queues sharing it under the proportion plugin and n / 50 waiting gangs, half of them in
queues that may take a lent share back (issue #45's hard case).

`--finished N`: N finished jobs listed beside the running ones (UnmanagedJob, reason
FINISHED, as parse reads a job with a Succeeded condition), spread over the queues, each
with its start and completion (completed in the last 30 days, runs of 1 minute to a day):
a cluster that never deletes its finished jobs (training-operator's default). Also
printed: the first cycle's CPU (`first_cycle_cpu_ms`: nothing remembered by the planner
yet) and the median of cycles after a reassembly (`reassembled_cycle_cpu_ms`): new
tuples of the same records, what the sources hand over whenever a cache changed
(parse.assemble), which in a live cluster is nearly every cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import io
import json
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import plan_gangs  # noqa: E402
import plan_node_fit  # noqa: E402
import planner_scale  # noqa: E402

from autoscaler.act.dry_run import DryRunActuator  # noqa: E402
from autoscaler.core.model import ClusterSnapshot, ObjectRef, UnmanagedJob  # noqa: E402
from autoscaler.core.reasons import Reason  # noqa: E402
from autoscaler.plan.kept import MEMORY  # noqa: E402
from autoscaler.plan.planner import plan  # noqa: E402
from autoscaler.read.kube.tuning import settle_gc  # noqa: E402
from autoscaler.report.logs import configure_logging  # noqa: E402
from autoscaler.report.metrics import Metrics  # noqa: E402
from autoscaler.run import loop  # noqa: E402
from autoscaler.run.loop import Controller  # noqa: E402
from autoscaler.settings import Settings  # noqa: E402


class _Fixed:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.reassemble = False

    async def read(self, now: datetime) -> ClusterSnapshot:
        if not self.reassemble:
            return self.snapshot
        # as parse.assemble hands them over: new tuples, the same records
        s = self.snapshot
        return dataclasses.replace(
            s,
            jobs=tuple(list(s.jobs)),
            unmanaged=tuple(list(s.unmanaged)),
            pending=tuple(list(s.pending)),
            invalid_groups=tuple(list(s.invalid_groups)),
        )


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


def steady(
    n: int, settings: Settings, nodes: int = 0, dry_run: bool = False, lent: bool = False
) -> ClusterSnapshot:
    if nodes and lent:
        snap = plan_gangs.cluster(n, nodes)
    elif nodes:
        snap = plan_node_fit.cluster(n, nodes)
    else:
        snap, _, _ = planner_scale.cluster(n)
    if dry_run:  # nothing is applied: every cycle plans the first plan's resizes again
        return snap
    first = plan(snap, settings.planner_policy(), planner_scale.NOW)
    targets = {a.ref: a.target for a in first.actions}
    jobs = tuple(
        dataclasses.replace(j, replicas=targets[j.ref], last_scale_time=planner_scale.NOW)
        if j.ref in targets
        else j
        for j in snap.jobs
    )
    return dataclasses.replace(snap, jobs=jobs)


def finished(n: int, queues: list[str], seed: int = 2) -> tuple[UnmanagedJob, ...]:
    """`n` finished jobs over `queues`, as parse reads them."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ref = ObjectRef(f"ns-{i % 37}", f"done-{i}", "PyTorchJob", f"uid-done-{i}")
        completed = planner_scale.NOW - timedelta(seconds=rng.randint(60, 30 * 86400))
        started = completed - timedelta(seconds=rng.randint(60, 86400))
        out.append(
            UnmanagedJob(
                ref,
                queues[i % len(queues)],
                Reason.FINISHED,
                f"{ref}: job has condition Succeeded",
                started=started,
                completed=completed,
            )
        )
    return tuple(out)


async def measure(
    n: int,
    cycles: int,
    freeze: bool,
    nodes: int = 0,
    done: int = 0,
    dry_run: bool = False,
    lent: bool = False,
) -> dict[str, Any]:
    settings = Settings(
        cooldown_seconds=0,
        cooldown_restart_cost_factor=0,
        growth_payoff_factor=0,
        log_level="info",
        log_format="json",
        dry_run=dry_run,  # as `run --dry-run` sets it: a resize planned again is said once
    )
    snapshot = steady(n, settings, nodes, dry_run, lent)
    if done:
        queues = sorted({j.queue for j in snapshot.jobs})
        snapshot = dataclasses.replace(
            snapshot, unmanaged=snapshot.unmanaged + finished(done, queues)
        )
    MEMORY.reset()  # the first cycle: nothing remembered
    if freeze:
        gc.collect()
        settle_gc()
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
    source = controller.source
    assert isinstance(source, _Fixed)
    try:
        configure_logging(settings)
        start = time.process_time()
        await controller.run_once(now)  # the first: every decision is news
        first = time.process_time() - start
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
        source.reassemble, again = True, []
        for i in range(cycles):
            start = time.process_time()
            await controller.run_once(now + timedelta(seconds=cycles + i + 1))
            again.append(time.process_time() - start)
    finally:
        sys.stderr = real
        gc.callbacks[:] = [c for c in gc.callbacks if not isinstance(c, _GcClock)]
    ran = [s["collections"] - c for s, c in zip(gc.get_stats(), collections, strict=True)]
    return {
        "jobs": n,
        "nodes": len(snapshot.volcano.nodes or ()) if snapshot.volcano else 0,
        "finished": done,
        "first_cycle_cpu_ms": round(1000 * first, 1),
        "cycle_cpu_ms": round(1000 * statistics.median(times), 1),
        "status_cpu_ms": round(1000 * statistics.median(status.times[:cycles]), 1),
        "reassembled_cycle_cpu_ms": round(1000 * statistics.median(again), 1),
        "reassembled_status_cpu_ms": round(1000 * statistics.median(status.times[cycles:]), 1),
        # over both runs of cycles, the steady and the reassembled
        "log_lines_per_cycle": round(out.lines / (2 * cycles), 1),
        "actions_per_cycle": round(actions / cycles, 1),
        "gc_per_cycle": [round(r / (2 * cycles), 1) for r in ran],
        "gc_ms_per_cycle": round(1000 * paused.seconds / (2 * cycles), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, nargs="+", default=[10000, 20000])
    parser.add_argument("--cycles", type=int, default=7)
    parser.add_argument("--freeze", action="store_true")
    parser.add_argument("--nodes", type=int, default=0, help="node fit on N nodes (see above)")
    parser.add_argument("--finished", type=int, default=0, help="N finished jobs (see above)")
    parser.add_argument("--dry-run", action="store_true", help="never applied (see above)")
    parser.add_argument("--lent", action="store_true", help="gangs take lent shares (above)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        result = measure(
            args.jobs[0],
            args.cycles,
            args.freeze,
            args.nodes,
            args.finished,
            args.dry_run,
            args.lent,
        )
        print(json.dumps(asyncio.run(result)))
        return 0
    for n in args.jobs:
        # one process per size: each heap (and so each collection) is that size's own
        argv = [__file__, "--one", "--jobs", str(n), "--cycles", str(args.cycles)]
        argv += ["--freeze"] if args.freeze else []
        argv += ["--nodes", str(args.nodes)] if args.nodes else []
        argv += ["--finished", str(args.finished)] if args.finished else []
        argv += ["--dry-run"] if args.dry_run else []
        argv += ["--lent"] if args.lent else []
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True)
        print(out.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
