"""A queue tree replayed (issue 46, Deliver 4): the capacity plugin with enableHierarchy,
stock Volcano against the planner, on the simulator's tree (sim/engine.py QueueTree).

Cluster: 32 GPUs. dept-a (capability 16) over team-a1 and team-a2 (deserved 8 each,
capability inherited: each may take all 16 while the other is quiet); b, a top-level
leaf of 16. Jobs: one every 120 s on average, a queue drawn at random, 1-4 workers of
1 GPU asked for, range 0.5..2 (team-a2's every third job a rigid gang of 2-6), Amdahl
0.95, 10 min to 1.5 h of work, 30 s per restart. Deterministic (`--seed`).

What to read: `late` (growths of the planner whose workers were not all bound by its
next cycle) stays 0: the planner never asks past an ancestor. The planner's queueing
against stock Volcano's shows the reclaim between siblings.

    PYTHONPATH=. nice -n 10 python benchmarks/simulate_tree.py [--jobs 80] [--seed 0,1]
"""

from __future__ import annotations

import argparse
import random

from autoscaler.settings import Settings
from autoscaler.sim.engine import Cluster, Controller, QueueTree, simulate
from autoscaler.sim.metrics import compute
from autoscaler.sim.policies import PlannerController, make_controller, preempts
from autoscaler.sim.workload import ElasticRule, JobSpec, amdahl

TREE = QueueTree({"team-a1": "dept-a", "team-a2": "dept-a"}, {"dept-a": 16})
DESERVED = {"team-a1": 8, "team-a2": 8, "b": 16}
POLICIES = ("static", "volcano-default", "planner")


class Watched(PlannerController):
    """The planner, counting its growths not all bound by its next cycle."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.asked: dict[str, int] = {}
        self.late = 0

    def cycle(self, now: float, cluster: Cluster) -> None:
        live = {j.name: j for j in cluster.live()}
        for name, replicas in self.asked.items():
            j = live.get(name)
            if j is not None and j.replicas == replicas and j.active < replicas:
                self.late += 1
        before = {j.name: j.replicas for j in cluster.live()}
        super().cycle(now, cluster)
        self.asked = {
            j.name: j.replicas for j in cluster.live() if j.admitted and j.replicas > before[j.name]
        }


def workload(jobs: int, seed: int) -> list[JobSpec]:
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(jobs):
        t += rng.expovariate(1 / 120.0)
        queue = rng.choice(sorted(DESERVED))
        requested = rng.randint(1, 4)
        lo, hi = ElasticRule().range(requested)
        if queue == "team-a2" and i % 3 == 0:
            requested = lo = hi = rng.randint(2, 6)
        work = rng.uniform(600, 5_400)
        out.append(
            JobSpec(
                f"j{i}",
                round(t, 1),
                work,
                requested,
                lo,
                hi,
                1,
                queue,
                amdahl(requested, 32, 0.95),
                restart_cost=30.0,
            )
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=80)
    ap.add_argument("--seed", default="0")
    args = ap.parse_args()
    print(
        f"{'seed':>4}  {'policy':<16} {'util':>6} {'avg JCT h':>9} {'avg queue h':>11} "
        f"{'restarts/job':>12} {'late':>5}"
    )
    for seed in (int(s) for s in args.seed.split(",")):
        specs = workload(args.jobs, seed)
        for name in POLICIES:
            controller: Controller = (
                Watched(Settings()) if name == "planner" else make_controller(name, Settings())
            )
            run = simulate(specs, DESERVED, controller, 30.0, preempt=preempts(name), tree=TREE)
            m = compute(run)
            print(
                f"{seed:>4}  {name:<16} {m.utilisation:>6.1%} {m.avg_jct / 3600:>9.2f} "
                f"{m.avg_queueing / 3600:>11.2f} {m.restarts_per_job:>12.2f} "
                f"{controller.late if isinstance(controller, Watched) else 0:>5}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
