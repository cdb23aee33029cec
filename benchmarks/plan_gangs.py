"""The planner alone on the hard case, waiting gangs that take lent shares back:
`python benchmarks/plan_gangs.py [--jobs 10000 20000 40000] [--repeat 3]`.

plan_node_fit.py's cluster (cycle.py's PyTorchJobs in 100 queues, their pods bound to
nodes of 8 GPUs, 96 CPUs, packed in order, read through build_snapshot) under the
capacity plugin: the even queues hold twice their deserved (lenders), the odd ones half
of it; 2 waiting gangs per 100 jobs (200 at 10k), spread over the queues, so half of them
may take a lent share back from the 50 lenders (rule 3). No node is idle: every gang is
covered by a reclaim, or waits. Prints, per size, the CPU time (median of `--repeat`) of
the first plan (what a dry run plans every cycle: it applies nothing, so thousands of
resizes stay pending; made anew, nothing remembered) and of a steady plan (its resizes
asked for, their workers not running yet; the plan after one of the same snapshot, as a
daemon's next cycle makes it), the collector tuned as the daemon tunes it once synced,
each size's time over the one before (the doubling ratio), and a digest
of each plan (two trees print the same digests: the same plans).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

import plan_node_fit  # noqa: E402

from autoscaler.core.model import ClusterSnapshot, Plan, Plugin, QueueState, VolcanoQueue  # noqa: E402
from autoscaler.core.reasons import Reason  # noqa: E402
from autoscaler.plan.kept import MEMORY  # noqa: E402
from autoscaler.plan.planner import plan  # noqa: E402
from autoscaler.read.kube.tuning import settle_gc  # noqa: E402
from autoscaler.settings import Settings  # noqa: E402

NOW = plan_node_fit.NOW
PLUGIN = Plugin.PROPORTION


def cluster(n: int, at_least_nodes: int = 0) -> ClusterSnapshot:
    """`n` jobs, n / 50 waiting gangs, queues sharing the cluster under PLUGIN; idle
    nodes up to `at_least_nodes`."""
    snap = plan_node_fit.cluster(n, at_least_nodes, gangs=max(1, n // 50))
    assert snap.volcano is not None
    held: dict[str, float] = {}
    for j in snap.jobs:
        held[j.queue] = held.get(j.queue, 0.0) + j.active * j.gpus_per_worker
    queues = {}
    for i, name in enumerate(sorted(snap.queues)):
        used = held.get(name, 0.0)
        queues[name] = VolcanoQueue(
            name, allocated=used, request=used, spec_deserved=used / 2 if i % 2 == 0 else used * 2
        )
    states = {q: QueueState(q, None, volcano=v) for q, v in queues.items()}
    view = replace(snap.volcano, plugin=PLUGIN, queues=queues)
    return replace(snap, queues=states, volcano=view)


def digest(result: Plan) -> str:
    """The plan's decisions and gangs, hashed: the same digest, the same plan."""
    rows = [(d.ref.name, d.target, d.reason.value, d.message) for d in result.decisions]
    rows += [(g.ref.name, g.gpus, g.reason.value, g.message) for g in result.gangs]
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:12]


def timed(snapshot: ClusterSnapshot, repeat: int, anew: bool) -> tuple[float, int, int, str]:
    """Median CPU ms of plan(), its actions, gangs served and digest. `anew`: each plan
    made with an empty memory (a first plan); else after one plan of the same snapshot,
    as a daemon's next cycle plans it (the last plan's memory kept)."""
    policy = Settings().planner_policy()
    times, result = [], None
    MEMORY.reset()
    if not anew:
        plan(snapshot, policy, NOW)
    for _ in range(repeat):
        if anew:
            MEMORY.reset()
        t = time.process_time()
        result = plan(snapshot, policy, NOW)
        times.append(1000 * (time.process_time() - t))
    assert result is not None
    served = sum(1 for g in result.gangs if g.reason is Reason.GANG_COVERED)
    return statistics.median(times), len(result.actions), served, digest(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[10000, 20000, 40000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    policy = Settings().planner_policy()
    last: tuple[float, float] | None = None
    print(f"{'jobs':>6} {'gangs':>5} {'first ms':>9} {'x':>5} {'steady ms':>9} {'x':>5}  plan")
    for n in args.jobs:
        snap = cluster(n)
        gc.collect()
        settle_gc()  # as the daemon once synced: what is alive frozen, fewer collections
        first, actions, served, first_digest = timed(snap, args.repeat, anew=True)
        targets = {a.ref: a.target for a in plan(snap, policy, NOW).actions}
        grown = tuple(
            replace(j, replicas=targets[j.ref], last_scale_time=NOW) if j.ref in targets else j
            for j in snap.jobs
        )
        steady, _, _, steady_digest = timed(replace(snap, jobs=grown), args.repeat, anew=False)
        ratio = (f"{first / last[0]:5.2f}", f"{steady / last[1]:5.2f}") if last else ("", "")
        print(
            f"{n:>6} {len(snap.pending):>5} {first:>9.0f} {ratio[0]:>5} {steady:>9.0f} "
            f"{ratio[1]:>5}  {actions} resizes, {served} gangs covered, digests "
            f"{first_digest} {steady_digest}"
        )
        last = (first, steady)


if __name__ == "__main__":
    main()
