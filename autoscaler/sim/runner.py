"""Run several policies on one workload and cluster: the comparison the CLI prints."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from autoscaler.core.model import Plugin
from autoscaler.settings import Settings

from .engine import RunResult, queue_limit, simulate, split_capacity
from .metrics import Metrics, compute
from .nodes import PoolSpec
from .policies import POLICIES, make_controller, preempts
from .workload import JobSpec, Workload

DEFAULT_RESTART_PENALTY = 30.0


@dataclass(frozen=True)
class Comparison:
    workload: Workload
    gpus: int
    deserved: dict[str, int]
    restart_penalty: float
    seed: int
    runs: dict[str, RunResult]
    metrics: dict[str, Metrics]
    plugin: Plugin = Plugin.CAPACITY  # the Volcano queue plugin modelled
    job_info: str = "none"  # what jobs declare of their run to the planner (JOB_INFO)
    pools: tuple[PoolSpec, ...] = ()  # node pools (none: every GPU alike)
    planner_sees_shapes: bool = True


def compare(
    workload: Workload,
    gpus: int,
    settings: Settings,
    policies: Sequence[str] = POLICIES,
    restart_penalty: float = DEFAULT_RESTART_PENALTY,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
    plugin: Plugin = Plugin.CAPACITY,
    job_info: str = "none",
    pools: tuple[PoolSpec, ...] = (),
    planner_sees_shapes: bool = True,
) -> Comparison:
    deserved = split_capacity(gpus, workload.jobs)
    specs, capped = fit_to_queues(workload.jobs, deserved, plugin)
    if capped:
        shown = ", ".join(capped[:10]) + (
            f" and {len(capped) - 10} more" if len(capped) > 10 else ""
        )
        workload = replace(
            workload,
            jobs=specs,
            notes=(
                *workload.notes,
                f"{len(capped)} job(s) asked for more GPUs than their queue can ever "
                f"hold: their sizes are capped at the queue (their work is unchanged): "
                f"{shown}",
            ),
        )
    runs: dict[str, RunResult] = {}
    metrics: dict[str, Metrics] = {}
    for name in policies:
        controller = make_controller(name, settings, job_info, workload.history)
        cb = None if progress is None else (lambda _t, done, n=name: progress(n, done))
        run = simulate(
            workload.jobs,
            deserved,
            controller,
            restart_penalty,
            preempt=preempts(name),
            progress=cb,
            horizon=math.inf,
            plugin=plugin,
            pools=pools,
            planner_sees_shapes=planner_sees_shapes,
        )
        runs[name] = run
        metrics[name] = compute(run)
    return Comparison(
        workload,
        gpus,
        deserved,
        restart_penalty,
        seed,
        runs,
        metrics,
        plugin,
        job_info,
        pools,
        planner_sees_shapes,
    )


def fit_to_queues(
    jobs: Sequence[JobSpec], deserved: dict[str, int], plugin: Plugin = Plugin.CAPACITY
) -> tuple[tuple[JobSpec, ...], list[str]]:
    """Jobs whose requested or elastic sizes exceed what their queue can ever hold
    (`queue_limit`: its GPUs under capacity, the cluster under proportion), cut to it (a
    Volcano queue never admits such a gang). Work keeps its meaning: seconds at the
    originally requested size, so a capped job runs at speedup(cap) of it."""

    out: list[JobSpec] = []
    capped: list[str] = []
    for j in jobs:
        cap = queue_limit(plugin, deserved, j.queue) // j.gpus_per_worker
        if j.max_workers <= cap:
            out.append(j)
            continue
        capped.append(j.name)
        out.append(
            replace(
                j,
                requested=min(j.requested, cap),
                min_workers=min(j.min_workers, cap),
                max_workers=cap,
            )
        )
    return tuple(out), capped
