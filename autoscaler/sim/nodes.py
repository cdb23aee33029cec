"""Node pools for the simulator (`simulate --nodes FILE`): nodes with GPUs, CPUs, labels
and taints, on which every pod is bound where the scheduler's own filters admit it, by
the daemon's fit (autoscaler/plan/fit/filters.py: `admits` for labels, selectors and taints,
`how_many` for the room), so a heterogeneous cluster is replayed through the same fit
the planner plans with.

The pools file is a CSV, one row per pool:

    pool,count,gpus,cpus,labels,taints
    a100,2,8,64,accelerator=a100,
    h100,2,8,64,accelerator=h100,nvidia.com/gpu=present:NoSchedule

`labels`: `key=value` pairs separated by `;`; `taints`: `key[=value]:Effect` separated
by `;` (NoSchedule or NoExecute repel pods that do not tolerate them). Nodes are named
`<pool>-<i>`. A job's worker shape comes from the trace (`cpus_per_worker`,
`node_selector`, `tolerations` columns; workload.worker_shape).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from autoscaler.core.model import Node
from autoscaler.core.shapes import GPU_RESOURCE, MILLI, Labels, PodShape, Taint, Toleration
from autoscaler.plan.fit import admits, how_many

from .workload import SpecError

CPU = "cpu"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    count: int
    gpus: int
    cpus: int
    labels: Labels = ()
    taints: tuple[Taint, ...] = ()


@dataclass(slots=True)
class SimNode:
    """One node: what the filters read (`node`: labels, taints) and its room."""

    node: Node
    allocatable: dict[str, int]
    used: dict[str, int] = field(default_factory=dict)
    pods: int = 0

    def free(self) -> dict[str, int]:
        return {k: v - self.used.get(k, 0) for k, v in self.allocatable.items()}

    @property
    def used_gpus(self) -> int:
        return self.used.get(GPU_RESOURCE, 0) // MILLI


class Nodes:
    """The cluster's nodes and the pods bound on them: best fit (the fullest node that
    still fits, as Volcano's binpack), a pod at a time."""

    def __init__(self, pools: tuple[PoolSpec, ...]) -> None:
        self.pools = pools
        self.nodes: list[SimNode] = []
        for p in pools:
            for i in range(p.count):
                node = Node(
                    f"{p.name}-{i}",
                    p.gpus,
                    labels=p.labels,
                    taints=p.taints,
                    resources=_quantities({GPU_RESOURCE: p.gpus * MILLI, CPU: p.cpus * MILLI}),
                )
                self.nodes.append(SimNode(node, dict(node.resources)))
        self.by_name = {n.node.name: n for n in self.nodes}
        self._admitted: dict[tuple[PodShape, str], bool] = {}

    @property
    def gpus(self) -> int:
        return sum(p.count * p.gpus for p in self.pools)

    def _admits(self, shape: PodShape, n: SimNode) -> bool:
        key = (shape, n.node.name)
        hit = self._admitted.get(key)
        if hit is None:
            hit = self._admitted[key] = admits(shape, n.node) is None
        return hit

    def place(self, shape: PodShape) -> str | None:
        """Bind one pod of the shape on the fullest node that admits it and has room."""
        best: SimNode | None = None
        for n in self.nodes:
            if self._admits(shape, n) and how_many(n.free(), shape) >= 1:
                if best is None or n.free()[GPU_RESOURCE] < best.free()[GPU_RESOURCE]:
                    best = n
        if best is None:
            return None
        for k, v in shape.requests:
            best.used[k] = best.used.get(k, 0) + v
        best.pods += 1
        return best.node.name

    def place_all(self, shape: PodShape, count: int) -> list[str] | None:
        """A gang: `count` pods bound, or none."""
        names: list[str] = []
        for _ in range(count):
            name = self.place(shape)
            if name is None:
                for bound in names:
                    self.release(bound, shape)
                return None
            names.append(name)
        return names

    def release(self, name: str, shape: PodShape) -> None:
        n = self.by_name[name]
        for k, v in shape.requests:
            n.used[k] = n.used.get(k, 0) - v
        n.pods -= 1

    def view(self, shapes: bool) -> tuple[Node, ...]:
        """The nodes as the daemon reads them: with `shapes` their labels, taints and
        every resource; without, GPUs alone (the rule before node fit by shape)."""
        if not shapes:
            return tuple(Node(n.node.name, n.node.allocatable, n.used_gpus) for n in self.nodes)
        return tuple(
            Node(
                n.node.name,
                n.node.allocatable,
                n.used_gpus,
                labels=n.node.labels,
                taints=n.node.taints,
                resources=n.node.resources,
                requested=_quantities(n.used),
            )
            for n in self.nodes
        )


def _quantities(values: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(values.items()))


def read_pools(path: Path) -> tuple[PoolSpec, ...]:
    """The pools file (module docstring); SpecError naming the row and column."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        raise SpecError(f"cannot read --nodes {path}: {exc.strerror or exc}") from None
    pools = []
    for row, r in enumerate(rows, start=2):

        def number(col: str, r: dict[str, str] = r, row: int = row) -> int:
            text = (r.get(col) or "").strip()
            try:
                value = int(text)
            except ValueError:
                raise SpecError(
                    f"--nodes {path} row {row}, column {col}: {text!r} is not a whole number"
                ) from None
            if value < 0:
                raise SpecError(f"--nodes {path} row {row}, column {col}: {value} < 0")
            return value

        name = (r.get("pool") or "").strip() or f"pool{row - 1}"
        where = f"--nodes {path} row {row}"
        pools.append(
            PoolSpec(
                name,
                number("count"),
                number("gpus"),
                number("cpus"),
                parse_labels(r.get("labels") or "", where),
                parse_taints(r.get("taints") or "", where),
            )
        )
    if not pools or not any(p.count * p.gpus for p in pools):
        raise SpecError(f"--nodes {path}: no pool with GPUs")
    return tuple(pools)


def parse_labels(text: str, where: str) -> Labels:
    """`key=value;key=value` (also a trace's node_selector)."""
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise SpecError(f"{where}: {part!r} is not key=value")
        out.append((key.strip(), value.strip()))
    return tuple(sorted(out))


def parse_taints(text: str, where: str) -> tuple[Taint, ...]:
    """`key[=value]:Effect;...`."""
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        head, colon, effect = part.rpartition(":")
        if not colon or effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            raise SpecError(f"{where}: {part!r} is not key[=value]:NoSchedule|NoExecute")
        key, _, value = head.partition("=")
        out.append(Taint(key.strip(), value.strip(), effect))
    return tuple(out)


def parse_tolerations(text: str, where: str) -> tuple[Toleration, ...]:
    """`key[=value][:Effect];...`: Equal with a value, Exists without."""
    out = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        head, colon, effect = part.rpartition(":") if ":" in part else (part, "", "")
        if colon and effect not in ("NoSchedule", "NoExecute", "PreferNoSchedule"):
            raise SpecError(f"{where}: {part!r} is not key[=value][:Effect]")
        key, eq, value = head.partition("=")
        op = "Equal" if eq else "Exists"
        out.append(Toleration(key.strip(), op, value.strip(), effect))
    return tuple(out)


def worker_shape(
    gpus_per_worker: int, cpus: float, selector: Labels, tolerations: tuple[Toleration, ...]
) -> PodShape | None:
    """A worker's pod as the trace describes it; None when it asks only for GPUs."""
    if not cpus and not selector and not tolerations:
        return None
    requests = {GPU_RESOURCE: gpus_per_worker * MILLI}
    if cpus:
        requests[CPU] = round(cpus * MILLI)
    return PodShape(_quantities(requests), node_selector=selector, tolerations=tolerations)
