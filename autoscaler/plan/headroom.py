"""Headroom: how many more GPUs of a queue's pods the Volcano scheduler will bind now.

Pure (no I/O, no clock). The planner calls it once per queue per cycle; the simulator's
Volcano model calls the same functions, so `simulate` and the daemon agree on what the
scheduler admits. docs/design.md "Headroom" says why each limit exists; in short, measured
on the real scheduler:

- proportion (Volcano's default chart): a task is bound while allocated + task <= deserved,
  and deserved is the queue's share of the cluster water-filled over the queues by weight,
  each capped at its real capability and at its own current `request`. A queue whose pods
  all run has deserved == allocated however many GPUs sit idle, so Volcano's own deserved
  says nothing about room to grow. What counts is the share the queue *would* get if it
  asked for more: the same water-fill with its own request unbounded.
- capacity: a task is bound while allocated + task <= real capacity (capability less the
  other queues' guarantees); admitted gangs (inqueue) hold their part of it.
- both: never more than the GPUs idle on Ready, uncordoned nodes, and a worker only where
  one node admits it whole, by its shape (`fit.Placer`: every resource, labels, taints).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from autoscaler.core.model import ROOT_QUEUE, Bound, Plugin, VolcanoQueue, VolcanoView, is_tree

_EPS = 1e-6
_MAX_ROUNDS = 64  # Volcano's loop ends when nothing changes; each round fills a queue or more


@dataclass(frozen=True, slots=True)
class PluginLimit:
    """A queue's room under its plugin alone, before the cluster's idle GPUs and its own
    in-flight workers: `gpus` (may be negative: over its share), which limit that was, and
    every figure that went into it, for `plan` to show."""

    gpus: float
    bound: Bound
    figures: Mapping[str, float]


def real_capability(q: VolcanoQueue, total: float, total_guarantee: float) -> float:
    """Volcano's realCapability: the cluster less every queue's guarantee but this one's,
    capped at the queue's capability."""
    real = total - total_guarantee + q.guarantee
    return real if q.capability is None else min(real, q.capability)


class Tree:
    """The capacity plugin's queue tree under enableHierarchy, from each queue's
    spec.parent (`VolcanoQueue.parent`; "" or root: a top-level queue). Empty (`on`
    False) for a flat cluster, which is planned exactly as without it.

    What the scheduler checks (its capacity plugin, checkQueueAllocatableHierarchically):
    a task is bound while allocated + task <= real capability at its leaf AND at every
    ancestor; only leaves run jobs. A child's real capability is min(its capability,
    its parent's real capability - the guarantees of the parent's children + its own
    guarantee); root's is unbounded (here: the cluster's GPUs)."""

    def __init__(self, queues: Mapping[str, VolcanoQueue]) -> None:
        self.queues = queues
        self.on = is_tree(q.parent for q in queues.values())
        self.parent: dict[str, str] = {}
        self.children: dict[str, list[str]] = {}
        if not self.on:
            return
        for name, q in sorted(queues.items()):
            up = q.parent if q.parent and q.parent != name else ROOT_QUEUE
            if name == ROOT_QUEUE:
                continue
            self.parent[name] = up
            self.children.setdefault(up, []).append(name)

    def is_parent(self, name: str) -> bool:
        return name in self.children

    def ancestors(self, name: str) -> list[str]:
        """Its ancestors, nearest first, root left out (unbounded); a cycle or a parent
        with no Queue ends the walk."""
        out: list[str] = []
        seen = {name}
        up = self.parent.get(name, ROOT_QUEUE)
        while up != ROOT_QUEUE and up not in seen and up in self.queues:
            out.append(up)
            seen.add(up)
            up = self.parent.get(up, ROOT_QUEUE)
        return out

    def leaves_under(self, name: str) -> list[str]:
        out: list[str] = []
        todo, seen = [name], {name}
        while todo:
            for child in self.children.get(todo.pop(), ()):
                if child in seen:
                    continue
                seen.add(child)
                (todo if self.is_parent(child) else out).append(child)
        return sorted(out)

    def top_guarantee(self) -> float:
        """What root's children guarantee: the flat sum's part under a tree (a parent's
        guarantee already covers its children's)."""
        return sum(self.queues[n].guarantee for n in self.children.get(ROOT_QUEUE, ()))

    def real(self, name: str, total: float) -> float:
        """The queue's real capability as the capacity plugin builds it under hierarchy
        (the class docstring; checkHierarchicalQueue): root's is unbounded, so other
        top-level queues' guarantees take nothing from a top-level queue, and a queue
        with no capability above it is unbounded: read as `total`, the cluster's GPUs
        (nothing binds beyond them)."""
        chain = [name, *self.ancestors(name)]
        real = math.inf
        for n in reversed(chain):
            q = self.queues[n]
            up = self.parent.get(n, ROOT_QUEUE)
            siblings = self.children.get(up, ())
            taken = sum(self.queues[s].guarantee for s in siblings if s in self.queues)
            real = real - taken + q.guarantee
            if q.capability is not None:
                real = min(real, q.capability)
        return min(real, total)

    def used(self, name: str) -> float:
        """What a parent's leaves hold as the scheduler counts it (allocated and
        admitted), summed from the leaves: a parent's own series may be missing."""
        return sum(
            self.queues[n].allocated + self.queues[n].inqueue for n in self.leaves_under(name)
        )


def water_fill(
    total: float, queues: Iterable[tuple[str, float, float, float, float]]
) -> dict[str, float]:
    """Volcano proportion's deserved per queue, on one resource: rounds that hand out what
    remains by weight to the queues not yet satisfied, each capped at its real capability
    and its request, at least its guarantee. `queues`: (name, weight, request, real
    capability, guarantee). Follows the plugin's OnSessionOpen loop."""
    rows = list(queues)
    deserved = {name: 0.0 for name, *_ in rows}
    active = rows  # the queues not yet satisfied, in order (each round drops the met)
    remaining = total
    for _ in range(_MAX_ROUNDS):
        weights = sum(row[1] for row in active)
        if weights <= 0:
            break
        before = remaining
        grew = shrank = 0.0
        unmet = []
        for row in active:
            name, weight, request, real_cap, guarantee = row
            old = deserved[name]
            d = min(old + remaining * weight / weights, real_cap, request)
            if not (request <= d + _EPS or abs(d - old) <= _EPS):
                unmet.append(row)
            d = max(d, guarantee)
            deserved[name] = d
            if d > old:
                grew += d - old
            else:
                shrank += old - d
        active = unmet
        remaining = remaining - grew + shrank
        if remaining <= _EPS or abs(remaining - before) <= _EPS:
            break
    return deserved


def plugin_limit(
    name: str,
    view: VolcanoView,
    wanted: Mapping[str, float],
) -> PluginLimit | None:
    """Room for queue `name` under `view.plugin`; None when it cannot be known (no
    cluster total for proportion, no real capacity for capacity).

    `wanted`: GPUs each queue would ask for beyond its current request this cycle (its
    elastic jobs' room to max and its waiting gangs). This daemon asks for every queue at
    once, so the share of one is computed against what the others will ask for too, not
    only what they ask for now: otherwise the first queue planned would take the share of
    the next, and without Volcano's reclaim action nothing gives it back."""
    return Limits(view, wanted).limit(name)


class Limits:
    """plugin_limit for every queue of one view: what the queues share (the cluster
    total, the guarantees, the proportion plugin's water-fill rows) is worked out once,
    not once per queue (100 queues: 10k rows a cycle)."""

    def __init__(self, view: VolcanoView, wanted: Mapping[str, float]) -> None:
        self.view = view
        self.total = view.total_gpus
        # capacity under hierarchy (a flat cluster: off, and everything as before)
        self.tree = Tree(view.queues if view.plugin is Plugin.CAPACITY else {})
        self.total_guarantee = (
            self.tree.top_guarantee()
            if self.tree.on
            else sum(v.guarantee for v in view.queues.values())
        )
        # (name, weight, request, real capability, guarantee, has jobs), in name order
        self._rows: list[tuple[str, float, float, float, float, bool]] = []
        if view.plugin is not Plugin.CAPACITY and self.total is not None:
            for q in sorted(view.queues.values(), key=lambda v: v.name):
                extra = wanted.get(q.name, 0.0)
                asks = q.request + q.allocated + q.inqueue + extra > 0
                real = real_capability(q, self.total, self.total_guarantee)
                self._rows.append(
                    (q.name, max(q.weight, 0.0), q.request + extra, real, q.guarantee, asks)
                )

    def shares(self) -> dict[str, float]:
        """Proportion: each queue's deserved when every queue asks for its request plus
        what it wants this cycle (the plugin's water-fill with no queue unbounded): what
        a queue is owed, and what one holding more has lent (shares.py)."""
        if self.total is None or self.view.plugin is Plugin.CAPACITY:
            return {}
        rows = [(n, w, r, real, g) for n, w, r, real, g, asks in self._rows if asks]
        return water_fill(self.total, rows)

    def owned(self) -> dict[str, float]:
        """Proportion: each queue's deserved if every queue with jobs (running, waiting
        or asked for: those in the water-fill) asked for the whole cluster, its weight's
        part of it (capped at its real capability, at least its guarantee): what it
        keeps whoever of them asks. What a queue holds beyond it is the others' idle
        share, borrowed: theirs once they ask. A queue without jobs Volcano leaves out
        of the fill, as `shares`."""
        if self.total is None or self.view.plugin is Plugin.CAPACITY:
            return {}
        rows = [(n, w, math.inf, real, g) for n, w, _, real, g, asks in self._rows if asks]
        return water_fill(self.total, rows)

    def limit(self, name: str) -> PluginLimit | None:
        """Room for queue `name` (see plugin_limit)."""
        view, total = self.view, self.total
        q = view.queues.get(name)
        if q is None:
            return None
        if view.plugin is Plugin.CAPACITY:
            if self.tree.on and q.real_capacity is None and total is not None:
                # no series, or the int64 ceiling (unbounded): as the plugin builds it
                q = replace(q, real_capacity=self.tree.real(name, total))
            return _capacity_limit(q, total, self.total_guarantee)
        if total is None:
            return None
        # this queue asks unbounded; a queue without jobs Volcano leaves out of the fill
        rows = [
            (other, weight, math.inf if other == name else request, real, guarantee)
            for other, weight, request, real, guarantee, asks in self._rows
            if asks or other == name
        ]
        share = water_fill(total, rows)[name]
        cap = real_capability(q, total, self.total_guarantee)
        capped = share >= cap - _EPS and q.capability is not None
        figures = {
            "share": share,
            "allocated": q.allocated,
            "cluster_gpus": float(total),
        }
        if q.capability is not None:
            figures["capability"] = q.capability
        return PluginLimit(
            share - q.allocated, Bound.CAPABILITY if capped else Bound.SHARE, figures
        )


def _capacity_limit(
    q: VolcanoQueue, total: float | None, total_guarantee: float
) -> PluginLimit | None:
    """The capacity plugin: real capacity (the scheduler's series, else computed from the
    cluster total) less allocated and inqueue; None without either."""
    real = q.real_capacity
    if real is None:
        if total is None:
            return None
        real = real_capability(q, total, total_guarantee)
    bound = (
        Bound.CAPABILITY
        if q.capability is not None and abs(real - q.capability) <= _EPS
        else Bound.REAL_CAPACITY
    )
    figures = {"real_capacity": real, "allocated": q.allocated, "inqueue": q.inqueue}
    return PluginLimit(real - q.allocated - q.inqueue, bound, figures)
