"""The planning cost of a reclaim by nodes (docs/design.md "reclaim by nodes"): one full
queue, `--nodes` nodes of 8 GPUs and 64 CPUs each held by 4 elastic jobs of 4 workers
(1 GPU, 8 CPUs; two workers on each of two nodes, min 1), and `--gangs` waiting gangs of
one pod asking 1 GPU and `--cpu` CPUs (60: a node's worth, each gang gets a reclaim;
70: more than a node, none fits). Prints the CPU time of one plan and per gang.

    PYTHONPATH=. python benchmarks/plan_reclaim_nodes.py [--nodes 2000] [--gangs 200] [--cpu 60]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from builders import NOW, ej, gang, policy  # noqa: E402
from test_fit import node, shape  # noqa: E402

from autoscaler.core.model import ClusterSnapshot, Plugin, QueueState, VolcanoView  # noqa: E402
from autoscaler.plan.kept import MEMORY  # noqa: E402
from autoscaler.plan.planner import plan  # noqa: E402


def cluster(nodes: int, gangs: int, cpu: int) -> ClusterSnapshot:
    worker = shape(1, 8)
    jobs, placed = [], []
    for pair in range(nodes // 2):
        a, b = f"n{2 * pair:05d}", f"n{2 * pair + 1:05d}"
        for k in range(4):
            job = ej(f"j{pair:05d}-{k}", min=1, max=8, replicas=4)
            jobs.append(replace(job, shape=worker, worker_nodes=(a, a, b, b)))
        placed += [node(a, used_gpus=8, used_cpu=64), node(b, used_gpus=8, used_cpu=64)]
    pending = tuple(replace(gang(f"g{i:04d}", 1), pods=((shape(1, cpu), 1),)) for i in range(gangs))
    return ClusterSnapshot(
        queues={"q": QueueState("q", 0)},
        jobs=tuple(jobs),
        pending=pending,
        volcano=VolcanoView(Plugin.GIVEN, {}, tuple(placed)),
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--gangs", type=int, default=200)
    ap.add_argument("--cpu", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    snapshot = cluster(args.nodes, args.gangs, args.cpu)
    times = []
    for _ in range(args.repeat):
        MEMORY.reset()  # a plan made anew: the last one's placer log would answer it all
        t = time.process_time()
        result = plan(snapshot, policy(), NOW)
        times.append(time.process_time() - t)
    reasons: dict[str, int] = {}
    for g in result.gangs:
        reasons[str(g.reason)] = reasons.get(str(g.reason), 0) + 1
    ms = 1000 * statistics.median(times)
    print(
        f"nodes {args.nodes} jobs {len(snapshot.jobs)} gangs {args.gangs} cpu {args.cpu}: "
        f"plan {ms:.0f} ms, {ms / max(1, args.gangs):.1f} ms a gang (CPU, median of "
        f"{args.repeat}); gangs {reasons}"
    )


if __name__ == "__main__":
    main()
