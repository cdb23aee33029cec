"""Pollux (OSDI'21) application profiles: measured step times by placement and the
iterations each model needs, turned into a job's work and its speedup curve.

Derivation (the same as Pollux's simulator/applications.py with its fixed epoch budget,
`target_metric=None`): a job of `application` at global batch size `B` needs
`iterations(B) = validation-B.csv.iteration[max_epochs - 1]` steps (interpolated between
profiled batch sizes). On `n` GPUs packed 4 per node, one step at local batch
`ceil(B / n)` takes `step_time` from placements.csv (n <= 16) or scalability.csv
(larger n), linearly interpolated in local batch; a local batch above the profiled
maximum is split into gradient-accumulation steps. A job keeps its global batch when
resized, so its iterations do not change: the speedup of n GPUs is
`iter_time(requested) / iter_time(n)`. GPUs that would push the local batch below the
profiled minimum add nothing (the curve stays flat there).
"""

from __future__ import annotations

import csv
import math
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from .workload import SpecError, Speedup

GPUS_PER_NODE = 4
# Pollux's epoch budgets (simulator/applications.py, APPLICATIONS)
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}  # Pollux overrides the profiled maximum for yolov3


def _interp(xs: list[float], ys: list[float], x: float) -> float:
    """Piecewise-linear, clamped at both ends."""

    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _curve(rows: list[tuple[float, float, float]]) -> tuple[list[float], list[float], list[float]]:
    """(local_bsz, step, sync) rows, averaged per local_bsz, sorted."""

    acc: dict[float, list[tuple[float, float]]] = {}
    for b, step, sync in rows:
        acc.setdefault(b, []).append((step, sync))
    xs = sorted(acc)
    steps = [sum(s for s, _ in acc[b]) / len(acc[b]) for b in xs]
    syncs = [sum(s for _, s in acc[b]) / len(acc[b]) for b in xs]
    return xs, steps, syncs


def _read(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))
    except OSError as exc:
        raise SpecError(f"application profile {path}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class AppProfile:
    name: str
    iterations_by_bsz: dict[int, float]  # steps to finish at each profiled batch size
    by_gpus: dict[int, tuple[list[float], list[float], list[float]]]  # anchor n -> curve
    min_local_bsz: float
    max_local_bsz: float

    @classmethod
    def load(cls, directory: Path) -> AppProfile:
        name = directory.name
        if name not in MAX_EPOCHS:
            raise SpecError(f"unknown application profile {name!r} in {directory}")
        epochs = MAX_EPOCHS[name]
        iterations: dict[int, float] = {}
        for path in sorted(directory.glob("validation-*.csv")):
            bsz = int(path.stem.split("-")[-1])
            rows = _read(path)
            iterations[bsz] = float(rows[min(epochs, len(rows)) - 1]["iteration"])
        if not iterations:
            raise SpecError(f"application profile {directory}: no validation-*.csv")
        placements: dict[str, list[tuple[float, float, float]]] = {}
        for r in _read(directory / "placements.csv"):
            placements.setdefault(r["placement"], []).append(
                (float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"]))
            )
        scal: dict[int, dict[int, list[tuple[float, float, float]]]] = {}
        for r in _read(directory / "scalability.csv"):
            n, nodes = int(r["num_replicas"]), int(r["num_nodes"])
            scal.setdefault(n, {}).setdefault(nodes, []).append(
                (float(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"]))
            )
        by_gpus: dict[int, tuple[list[float], list[float], list[float]]] = {}
        for n in range(1, 4 * GPUS_PER_NODE + 1):
            key = _packed(n)
            if key in placements:
                by_gpus[n] = _curve(placements[key])
        for n, per_nodes in scal.items():
            if n in by_gpus:
                continue
            packed = math.ceil(n / GPUS_PER_NODE)
            nodes = min((k for k in per_nodes if k >= packed), default=max(per_nodes))
            by_gpus[n] = _curve(per_nodes[nodes])
        all_bsz = [b for curve in by_gpus.values() for b in curve[0]]
        lo = min(all_bsz)
        hi = MAX_LOCAL_BSZ.get(name, max(all_bsz))
        return cls(name, dict(sorted(iterations.items())), dict(sorted(by_gpus.items())), lo, hi)

    def iterations(self, bsz: int) -> float:
        xs = list(self.iterations_by_bsz)
        return _interp([float(x) for x in xs], list(self.iterations_by_bsz.values()), float(bsz))

    def useful_gpus(self, bsz: int) -> int:
        return max(1, int(bsz // self.min_local_bsz))

    def _step(self, n: int, local: float) -> tuple[float, float]:
        anchors = list(self.by_gpus)
        if n in self.by_gpus:
            xs, steps, syncs = self.by_gpus[n]
            return _interp(xs, steps, local), _interp(xs, syncs, local)
        lo = max((a for a in anchors if a < n), default=anchors[0])
        hi = min((a for a in anchors if a > n), default=anchors[-1])
        s0, y0 = self._step(lo, local)
        if hi == lo:
            return s0, y0
        s1, y1 = self._step(hi, local)
        f = (n - lo) / (hi - lo)
        return s0 + (s1 - s0) * f, y0 + (y1 - y0) * f

    def iter_time(self, gpus: int, bsz: int) -> float:
        """Seconds per step of global batch `bsz` on `gpus` GPUs (packed placement)."""

        n = min(gpus, self.useful_gpus(bsz))
        local = math.ceil(bsz / n - 1e-8)
        accum = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        step, sync = self._step(n, atomic)
        return step + accum * (step - sync)

    def duration(self, gpus: int, bsz: int) -> float:
        return self.iterations(bsz) * self.iter_time(gpus, bsz)

    def speedup(self, requested: int, bsz: int, top: int) -> Speedup:
        base = self.iter_time(requested, bsz)
        rates = [0.0] + [base / self.iter_time(g, bsz) for g in range(1, top + 1)]
        return Speedup(tuple(rates), f"measured:{self.name}")


def _packed(n: int) -> str:
    """Placement id of n GPUs packed GPUS_PER_NODE per node, as Pollux normalises it
    (lexicographically smallest rotation)."""

    parts: tuple[int, ...] = ()
    while sum(parts) < n:
        parts = (*parts, min(n - sum(parts), GPUS_PER_NODE))
    best = min(parts[i:] + parts[:i] for i in range(len(parts)))
    return "".join(map(str, best))


def load_profiles(directory: Path) -> dict[str, AppProfile]:
    if not directory.is_dir():
        raise SpecError(f"application profiles: {directory} is not a directory")
    out = {}
    for sub in sorted(directory.iterdir()):
        if sub.is_dir() and sub.name in MAX_EPOCHS:
            out[sub.name] = AppProfile.load(sub)
    if not out:
        raise SpecError(f"application profiles: nothing usable in {directory}")
    return out
