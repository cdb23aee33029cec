"""What a simulated job is: submit time, work, size range and a speedup curve.

Work is measured in seconds at the requested size: a job running on `g` GPUs progresses
at `speedup(g) / speedup(requested)` seconds of work per second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from autoscaler.core.shapes import PodShape


class SpecError(ValueError):
    """A trace row or option that cannot describe a job."""


@dataclass(frozen=True, slots=True)
class Speedup:
    """Relative throughput by GPU count: `rates[g]` for g = 0..len-1, 1.0 at the job's
    requested GPUs; beyond the table the last value holds (no more speedup)."""

    rates: tuple[float, ...]
    label: str = ""

    def rate(self, gpus: int) -> float:
        if gpus <= 0:
            return 0.0
        if gpus < len(self.rates):
            return self.rates[gpus]
        return self.rates[-1]


def linear(requested: int, top: int) -> Speedup:
    return Speedup(tuple(g / requested for g in range(top + 1)), "linear")


def amdahl(requested: int, top: int, parallel: float) -> Speedup:
    """Amdahl's law with parallel fraction `parallel`: S(g) = 1 / ((1-p) + p/g)."""

    def s(g: int) -> float:
        return 1.0 / ((1.0 - parallel) + parallel / g)

    base = s(requested)
    return Speedup((0.0, *(s(g) / base for g in range(1, top + 1))), f"amdahl:{parallel:g}")


def parse_speedup_kind(text: str) -> tuple[str, float]:
    """`linear`, `amdahl:P` (0 < P <= 1), `measured` or `auto`."""

    kind, _, arg = text.partition(":")
    if kind in ("linear", "measured", "auto") and not arg:
        return kind, 0.0
    if kind == "amdahl":
        try:
            p = float(arg) if arg else 0.95
        except ValueError:
            raise SpecError(f"--speedup amdahl:P needs a number, got {arg!r}") from None
        if not 0.0 < p <= 1.0:
            raise SpecError(f"--speedup amdahl:P needs 0 < P <= 1, got {p}")
        return kind, p
    raise SpecError(f"unknown speedup {text!r}: use linear, amdahl:P, measured or auto")


@dataclass(frozen=True, slots=True)
class ElasticRule:
    """How a job's elastic range is derived when the trace gives none: in workers,
    min = max(1, floor(requested * min_factor)), max = max(requested,
    ceil(requested * max_factor)); max is then capped by what the speedup curve can use."""

    min_factor: float = 0.5
    max_factor: float = 2.0

    def range(self, requested: int) -> tuple[int, int]:
        lo = max(1, math.floor(requested * self.min_factor + 1e-9))
        hi = max(requested, math.ceil(requested * self.max_factor - 1e-9))
        return min(lo, requested), hi

    @classmethod
    def parse(cls, text: str) -> ElasticRule:
        try:
            lo, hi = (float(x) for x in text.split(","))
        except ValueError:
            raise SpecError(f"--elastic-range wants MIN_FACTOR,MAX_FACTOR, got {text!r}") from None
        if not 0 < lo <= 1 <= hi:
            raise SpecError(f"--elastic-range needs 0 < min <= 1 <= max, got {text!r}")
        return cls(lo, hi)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job of a workload, sizes in workers of `gpus_per_worker` GPUs."""

    name: str
    submit: float  # seconds from the start of the trace
    work: float  # seconds of running at the requested size
    requested: int  # workers the user asked for
    min_workers: int
    max_workers: int
    gpus_per_worker: int
    queue: str
    speedup: Speedup
    application: str = ""
    priority: int = 0  # from the trace's priority column, if it has one
    restart_cost: float | None = None  # seconds a resize costs it; None: the run's flat cost
    # one worker's pod (CPUs, nodeSelector, tolerations) for a cluster of node pools
    # (sim/nodes.py); None: its GPUs alone
    shape: PodShape | None = None

    @property
    def worker_shape(self) -> PodShape:
        return self.shape if self.shape is not None else PodShape.of_gpus(self.gpus_per_worker)

    @property
    def requested_gpus(self) -> int:
        return self.requested * self.gpus_per_worker

    def rate(self, workers: int) -> float:
        return self.speedup.rate(workers * self.gpus_per_worker)

    def best_duration(self) -> float:
        """Shortest possible run: the whole job at its fastest allowed size, no restarts."""

        best = max(self.rate(w) for w in range(self.min_workers, self.max_workers + 1))
        return self.work / best


@dataclass(frozen=True, slots=True)
class Workload:
    jobs: tuple[JobSpec, ...]
    source: str
    notes: tuple[str, ...] = ()
    # how its jobs' restart costs were set, for the reader: "flat", "profile" (each job
    # its model's, PROFILE_FALLBACK_SECONDS for the rest), "" not said
    restart_costs: str = ""
    # jobs that finished in the same queues before the workload starts, (queue, seconds
    # from start to completion): listed to the planner as finished jobs are by the API
    # until deleted (sim/policies.py FINISHED_LISTED); () none
    history: tuple[tuple[str, float], ...] = ()

    @property
    def queues(self) -> tuple[str, ...]:
        return tuple(sorted({j.queue for j in self.jobs}))


# What one restart costs each model of the Pollux workloads, in seconds: measured by the
# Sia artifact (SOSP'23) for checkpoint-restart of these models.
PROFILE_RESTART_SECONDS = {
    "ncf": 15.0,
    "deepspeech2": 25.0,
    "cifar10": 50.0,
    "yolov3": 80.0,
    "bert": 120.0,
    "imagenet": 250.0,
}
PROFILE_FALLBACK_SECONDS = 30.0  # a job whose model the table does not name


def with_restart_costs(jobs: Sequence[JobSpec], cost: float | None) -> tuple[JobSpec, ...]:
    """Each job's restart cost: `cost` seconds for all, or (None) its model's from
    PROFILE_RESTART_SECONDS, PROFILE_FALLBACK_SECONDS for models it does not name."""
    return tuple(
        replace(
            j,
            restart_cost=cost
            if cost is not None
            else PROFILE_RESTART_SECONDS.get(j.application, PROFILE_FALLBACK_SECONDS),
        )
        for j in jobs
    )
