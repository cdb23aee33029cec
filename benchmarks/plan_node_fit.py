"""plan() with node fit on the cluster of cycle_real.py, without the API server:
`python benchmarks/plan_node_fit.py [--jobs 10000] [--repeat 3]`.

The same objects cycle_real.py creates (cycle.py's PyTorchJobs, their pods bound to
nodes of 8 GPUs, 96 CPUs, packed in order; 200 waiting PodGroups), read through
build_snapshot as the daemon reads them, free GPUs given per queue. Prints the CPU time
of the first plan (grants placed on the nodes), then of a steady plan: the same cluster
with every grant asked for and not running yet (the workers in flight are placed on the
nodes first, every cycle).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from cycle import _jobs  # noqa: E402
from cycle_real import FREE_PER_QUEUE, QUEUES, _pod  # noqa: E402

from autoscaler.core.model import ClusterSnapshot, Plugin, QueueState  # noqa: E402
from autoscaler.plan.planner import plan  # noqa: E402
from autoscaler.read.parse import RawObjects, build_snapshot  # noqa: E402
from autoscaler.settings import Settings  # noqa: E402

NOW = datetime(2026, 11, 22, 10, tzinfo=UTC)
ALLOCATABLE = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti", "pods": "110"}


def cluster(n: int, at_least_nodes: int = 0, gangs: int = 200) -> ClusterSnapshot:
    """`n` jobs on the nodes their pods fill, then idle nodes up to `at_least_nodes`
    (cycle_real.py's `--nodes`), and `gangs` waiting PodGroups."""
    jobs = _jobs(n)
    placed = []
    for obj in jobs:
        meta, worker = obj["metadata"], obj["spec"]["pytorchReplicaSpecs"]["Worker"]
        per = worker["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
        queue = obj["spec"]["runPolicy"]["schedulingPolicy"]["queue"]
        obj["status"] = {
            "replicaStatuses": {"Worker": {"active": worker["replicas"]}, "Master": {"active": 1}}
        }
        ns, name = meta["namespace"], meta["name"]
        placed.append((ns, f"{name}-master-0", 0, queue))
        placed += [(ns, f"{name}-worker-{i}", per, queue) for i in range(worker["replicas"])]
    used: list[int] = []
    where = []
    for _, _, gpus, _ in placed:
        if not used or used[-1] + gpus > 8:
            used.append(0)
        used[-1] += gpus
        where.append(f"gpu-node-{len(used) - 1:05d}")
    nodes = [
        {
            "kind": "Node",
            "metadata": {"name": f"gpu-node-{i:05d}"},
            "status": {
                "allocatable": ALLOCATABLE,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
        for i in range(max(len(used), at_least_nodes))
    ]
    pods = [
        _pod(ns, name, node, g, q) for (ns, name, g, q), node in zip(placed, where, strict=True)
    ]
    gangs = [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": f"waiting-{i}",
                "namespace": f"ns-{i % 37}",
                "creationTimestamp": "2026-11-22T09:00:00Z",
            },
            "spec": {
                "minMember": 2,
                "queue": f"team-{i % QUEUES:03d}",
                "minResources": {"nvidia.com/gpu": str(1 + i % 8)},
            },
            "status": {"phase": "Pending"},
        }
        for i in range(gangs)
    ]
    raw = RawObjects(jobs=tuple(jobs), nodes=tuple(nodes), pods=tuple(pods), podgroups=tuple(gangs))
    free = {
        f"team-{i:03d}": QueueState(f"team-{i:03d}", float(FREE_PER_QUEUE)) for i in range(QUEUES)
    }
    return build_snapshot(raw, free, Settings().read_options(), plugin=Plugin.GIVEN)


def timed(snapshot: ClusterSnapshot, repeat: int) -> tuple[float, int]:
    policy = Settings().planner_policy()
    times, actions = [], 0
    for _ in range(repeat):
        t = time.process_time()
        actions = len(plan(snapshot, policy, NOW).actions)
        times.append(1000 * (time.process_time() - t))
    return statistics.median(times), actions


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    snapshot = cluster(args.jobs)
    assert snapshot.volcano is not None and snapshot.volcano.nodes is not None
    first_ms, grants = timed(snapshot, args.repeat)
    targets = {a.ref: a.target for a in plan(snapshot, Settings().planner_policy(), NOW).actions}
    grown = tuple(
        replace(j, replicas=targets[j.ref], last_scale_time=NOW) if j.ref in targets else j
        for j in snapshot.jobs
    )
    steady_ms, _ = timed(replace(snapshot, jobs=grown), args.repeat)
    print(
        f"jobs {args.jobs}  nodes {len(snapshot.volcano.nodes)}  first plan {first_ms:.0f} ms "
        f"({grants} resizes)  steady plan {steady_ms:.0f} ms (CPU, median of {args.repeat})"
    )


if __name__ == "__main__":
    main()
