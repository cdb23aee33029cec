"""Two GPU pools ([placement] #27, item 6): the planner with node fit by the worker's
shape against the rule before it (nodes as GPU counts, any worker fits any node with
enough idle GPUs), and stock Volcano, on a cluster of node pools replayed through the
daemon's fit (autoscaler/plan/fit/; simulate --nodes).

Cluster: pool a100, 2 nodes x 8 GPUs, 64 CPUs, label accelerator=a100; pool h100, 2 nodes
x 8 GPUs, 64 CPUs, label accelerator=h100. Jobs: pinned by nodeSelector, 3 of 4 to a100
(the busy pool) and 1 of 4 to h100, workers of 1 GPU and 8 CPUs, 1-4 workers asked for,
range 0.5..2, Amdahl 0.95, work 10 min to 1.5 h, one every 150 s on average;
every job pays 30 s per restart. Deterministic (`--seed`).

`--cpu-heavy F`: instead, one pool of 4 such nodes without labels, and a fraction F of
the jobs CPU-heavy: 1-2 workers of 1 GPU and 60 CPUs (a node's worth each), so a
reclaim for their gang must empty a node of 8-CPU workers (docs/design.md "reclaim by
nodes"); stock Volcano and the planner with node fit.

    PYTHONPATH=. nice -n 10 python benchmarks/simulate_pools.py [--jobs 120] [--seed 0,1,2]
    PYTHONPATH=. nice -n 10 python benchmarks/simulate_pools.py --cpu-heavy 0.25
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys

from autoscaler.core.shapes import Labels, PodShape
from autoscaler.settings import Settings
from autoscaler.sim.nodes import PoolSpec, worker_shape
from autoscaler.sim.runner import compare
from autoscaler.sim.workload import ElasticRule, JobSpec, Workload, amdahl

ARRIVAL = 150.0  # seconds between submissions, on average
POOLS = (
    PoolSpec("a100", 2, 8, 64, (("accelerator", "a100"),)),
    PoolSpec("h100", 2, 8, 64, (("accelerator", "h100"),)),
)


def _job(name: str, t: float, rng: random.Random, requested: int, shape: PodShape) -> JobSpec:
    """A job submitted at t, its run drawn now (after its size: the seeds' draws stay
    in the order the published numbers were made with)."""
    lo, hi = ElasticRule().range(requested)
    run = rng.uniform(600, 5_400)
    return JobSpec(
        name,
        round(t, 1),
        run,
        requested,
        lo,
        hi,
        1,
        "q",
        amdahl(requested, 16, 0.95),
        restart_cost=30.0,
        shape=shape,
    )


def workload(jobs: int, seed: int) -> Workload:
    rng = random.Random(seed)
    out = []
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(1 / ARRIVAL)
        pool = "a100" if rng.random() < 0.75 else "h100"
        requested = rng.choice((1, 1, 2, 2, 4))
        selector: Labels = (("accelerator", pool),)
        out.append(_job(f"j{i:03d}-{pool}", t, rng, requested, worker_shape(1, 8, selector, ())))
    return Workload(tuple(out), f"two pools #{seed}")


ONE_POOL = (PoolSpec("p", 4, 8, 64, ()),)


def heavy_workload(jobs: int, seed: int, heavy: float) -> Workload:
    """One in 1/heavy jobs asks 1-2 workers of 1 GPU and 60 CPUs; the rest as above,
    8-CPU workers, on the one unlabelled pool."""
    rng = random.Random(seed)
    out = []
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(1 / ARRIVAL)
        big = rng.random() < heavy
        requested = rng.choice((1, 2)) if big else rng.choice((1, 1, 2, 2, 4))
        shape = worker_shape(1, 60 if big else 8, (), ())
        out.append(_job(f"j{i:03d}{'-heavy' if big else ''}", t, rng, requested, shape))
    return Workload(tuple(out), f"cpu-heavy {heavy:g} #{seed}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=120)
    ap.add_argument("--seed", default="0,1,2")
    ap.add_argument("--cpu-heavy", type=float, default=0.0)
    args = ap.parse_args()
    rows: dict[str, list[tuple[float, float, float]]] = {}
    pools = ONE_POOL if args.cpu_heavy else POOLS
    gpus = sum(p.count * p.gpus for p in pools)
    runs = (
        ("volcano-default", ("volcano-default",), True),
        ("planner, nodes as GPU counts (before)", ("planner",), False),
        ("planner, node fit by shape (after)", ("planner",), True),
    )
    for seed in (int(x) for x in args.seed.split(",")):
        if args.cpu_heavy:
            w = heavy_workload(args.jobs, seed, args.cpu_heavy)
        else:
            w = workload(args.jobs, seed)
        for name, policies, sees in runs[::2] if args.cpu_heavy else runs:
            c = compare(w, gpus, Settings(), policies, 30.0, pools=pools, planner_sees_shapes=sees)
            m = c.metrics[policies[0]]
            unbound = c.runs[policies[0]].unbound_asks / len(w.jobs)
            rows.setdefault(name, []).append((m.avg_jct / 3600, m.restarts_per_job, unbound))
            print(
                f"seed {seed} {name:40s} avg JCT {m.avg_jct / 3600:.3f} h  "
                f"restarts/job {m.restarts_per_job:.2f}  unbound asks/job {unbound:.2f}"
            )
            sys.stdout.flush()
    print("mean over seeds:")
    for name, r in rows.items():
        print(
            f"  {name:40s} avg JCT {statistics.fmean(x[0] for x in r):.3f} h  "
            f"restarts/job {statistics.fmean(x[1] for x in r):.2f}  "
            f"unbound asks/job {statistics.fmean(x[2] for x in r):.2f}"
        )


if __name__ == "__main__":
    main()
