"""Run several policies on one workload and cluster: the comparison the CLI prints."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..settings import Settings
from .engine import RunResult, simulate, split_capacity
from .metrics import Metrics, compute
from .policies import POLICIES, make_controller, preempts
from .workload import Workload

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


def compare(
    workload: Workload,
    gpus: int,
    settings: Settings,
    policies: Sequence[str] = POLICIES,
    restart_penalty: float = DEFAULT_RESTART_PENALTY,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
) -> Comparison:
    deserved = split_capacity(gpus, workload.jobs)
    runs: dict[str, RunResult] = {}
    metrics: dict[str, Metrics] = {}
    for name in policies:
        controller = make_controller(name, settings)
        cb = None if progress is None else (lambda _t, done, n=name: progress(n, done))
        run = simulate(workload.jobs, deserved, controller, restart_penalty,
                       preempt=preempts(name), progress=cb, horizon=math.inf)
        runs[name] = run
        metrics[name] = compute(run)
    return Comparison(workload, gpus, deserved, restart_penalty, seed, runs, metrics)
