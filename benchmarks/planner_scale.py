"""Plan time at scale: `python benchmarks/planner_scale.py [--jobs 1000 10000 50000]`.

A realistic mix over 100 queues: 1/2/4/8-GPU workers, a third of the jobs in cooldown,
some with workers in flight or being released, ~3% pending gangs, queues from full to
half idle. Prints the median of several runs of plan() and, separately, of parsing the
same cluster from raw objects (build_snapshot), which the daemon also does each cycle.
`--volcano proportion|capacity`: the headroom computed from Volcano's inputs, with the
nodes (8 GPUs each, one per 8 running GPUs and 200 idle: ~20k nodes at 10k jobs).
`--cpu-capability`: every worker asks CPU and memory and every Queue caps both.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.core.model import (
    ClusterSnapshot,
    ElasticJob,
    NodeGpus,
    ObjectRef,
    PendingGroup,
    Plugin,
    QueueState,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.shapes import MILLI, PodShape
from autoscaler.plan.planner import plan
from autoscaler.read.parse import RawObjects, build_snapshot
from autoscaler.read.snapshot_file import free_gpu_states
from autoscaler.settings import Settings

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
QUEUES = 100


def cluster(n_jobs: int, seed: int = 1) -> tuple[ClusterSnapshot, list[dict], dict]:
    rng = random.Random(seed)
    jobs, raw, pending = [], [], []
    for i in range(n_jobs):
        queue = f"team-{i % QUEUES:03d}"
        gpw = rng.choice([1, 1, 1, 2, 4, 8])
        min_r = rng.randint(1, 4)
        max_r = min_r + rng.randint(0, 12)
        replicas = rng.randint(min_r, max_r)
        roll = rng.random()
        active = replicas if roll < 0.8 else (max(0, replicas - 2) if roll < 0.9 else replicas + 1)
        last = None if rng.random() < 0.5 else NOW - timedelta(seconds=rng.randint(0, 3600))
        created = NOW - timedelta(seconds=rng.randint(600, 86400))
        ref = ObjectRef(f"ns-{i % 37}", f"job-{i}", "PyTorchJob", f"uid-{i}")
        jobs.append(
            ElasticJob(
                ref,
                queue,
                min_r,
                max_r,
                replicas,
                active,
                gpw,
                created,
                priority=rng.choice([0, 0, 0, 100]),
                last_scale_time=last,
                resource_version=str(i),
            )
        )
        raw.append(_raw_job(ref, queue, min_r, max_r, replicas, active, gpw, created, last))
        if rng.random() < 0.03:
            pending.append(
                PendingGroup(
                    ObjectRef(ref.namespace, f"pg-{i}", "PodGroup"),
                    queue,
                    rng.choice([1, 2, 4, 8, 16, 64]),
                    NOW - timedelta(seconds=rng.randint(0, 4000)),
                )
            )
    free = {f"team-{q:03d}": float(rng.choice([0, 0, 2, 8, 16, 64])) for q in range(QUEUES)}
    snap = ClusterSnapshot(
        {q: QueueState(q, v) for q, v in free.items()}, tuple(jobs), pending=tuple(pending)
    )
    return snap, raw, free


def with_volcano(snap: ClusterSnapshot, plugin: Plugin) -> ClusterSnapshot:
    """The same cluster with its headroom computed from Volcano's inputs under `plugin`:
    nodes of 8 GPUs holding every running worker, 200 more idle, every queue allocated
    what its jobs run (request the same), a little inqueue, some guarantees and
    capabilities."""
    used = sum(j.active * j.gpus_per_worker for j in snap.jobs)
    busy = -(-used // 8)
    nodes = tuple(NodeGpus(f"node-{i}", 8, 8 if i < busy else 0) for i in range(busy + 200))
    allocated: dict[str, float] = {}
    for j in snap.jobs:
        allocated[j.queue] = allocated.get(j.queue, 0.0) + j.active * j.gpus_per_worker
    queues = {
        q: VolcanoQueue(
            q,
            allocated=allocated.get(q, 0.0),
            request=allocated.get(q, 0.0),
            inqueue=float(i % 3),
            guarantee=float(i % 2),
            capability=None if i % 4 else allocated.get(q, 0.0) + 32,
        )
        for i, q in enumerate(sorted(snap.queues))
    }
    states = {q: QueueState(q, None, volcano=v) for q, v in queues.items()}
    return replace(snap, queues=states, volcano=VolcanoView(plugin, queues, nodes))


def with_cpu_capability(snap: ClusterSnapshot) -> ClusterSnapshot:
    """Every worker asks 8 CPU and 64Gi per GPU, and every queue's Queue object caps it
    at 400 CPU and 4Ti (300 CPU already held by its pods): the capability in every
    dimension (autoscaler/plan/quota.py) is checked for every job that could grow."""
    gib = 2**30 * MILLI
    jobs = tuple(
        replace(
            j,
            shape=PodShape(
                (
                    ("cpu", 8 * MILLI * j.gpus_per_worker),
                    ("memory", 64 * gib * j.gpus_per_worker),
                    ("nvidia.com/gpu", MILLI * j.gpus_per_worker),
                )
            ),
        )
        for j in snap.jobs
    )
    limits = (("cpu", 400 * MILLI), ("memory", 4096 * gib))
    queues = {
        name: replace(s, limits=limits, allocated=(("cpu", 300 * MILLI),))
        for name, s in snap.queues.items()
    }
    return replace(snap, jobs=jobs, queues=queues)


def _raw_job(ref, queue, min_r, max_r, replicas, active, gpw, created, last) -> dict:
    ann = (
        {"elastic-autoscaler.io/last-scale-time": last.strftime("%Y-%m-%dT%H:%M:%SZ")}
        if last
        else {}
    )
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": ref.name,
            "namespace": ref.namespace,
            "uid": ref.uid,
            "resourceVersion": "1",
            "annotations": ann,
            "creationTimestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "spec": {
            "elasticPolicy": {"minReplicas": min_r, "maxReplicas": max_r},
            "runPolicy": {"schedulingPolicy": {"queue": queue, "minAvailable": min_r}},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "resources": {"limits": {"nvidia.com/gpu": gpw}},
                                }
                            ]
                        }
                    },
                }
            },
        },
        "status": {"replicaStatuses": {"Worker": {"active": active}}},
    }


def timed(fn, repeat: int) -> float:
    """Median CPU time of this process (other processes on the machine do not count)."""

    samples = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--volcano",
        choices=[Plugin.PROPORTION.value, Plugin.CAPACITY.value],
        help="headroom from Volcano's inputs under this plugin, with the nodes",
    )
    parser.add_argument(
        "--cpu-capability",
        action="store_true",
        help="workers ask CPU and memory, every Queue caps both (quota.py's bound)",
    )
    args = parser.parse_args()
    settings = Settings()
    print(f"{'jobs':>7} {'gangs':>6} {'plan ms':>9} {'us/job':>7} {'actions':>8} {'parse ms':>9}")
    for n in args.jobs:
        snap, raw, free = cluster(n)
        if args.volcano:
            snap = with_volcano(snap, Plugin(args.volcano))
        if args.cpu_capability:
            snap = with_cpu_capability(snap)
        states = free_gpu_states(free)
        raw_objects = RawObjects(jobs=tuple(raw))
        plan_s = timed(lambda snap=snap: plan(snap, settings.planner_policy(), NOW), args.repeat)
        parse_s = timed(
            lambda r=raw_objects, s=states: build_snapshot(r, s, settings.read_options()),
            max(1, args.repeat // 2),
        )
        actions = len(plan(snap, settings.planner_policy(), NOW).actions)
        print(
            f"{n:>7} {len(snap.pending):>6} {plan_s * 1000:>9.1f} "
            f"{plan_s / n * 1e6:>7.2f} {actions:>8} {parse_s * 1000:>9.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
