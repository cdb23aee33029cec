"""A Volcano Queue's `spec.capability` in every dimension it names other than GPUs (CPU,
memory, RDMA, ...), as both queue plugins judge a task against it.

The capacity plugin binds a task while `allocated + reserved + task <= realCapability`
and the proportion plugin while `allocated + task <= deserved` (deserved is capped at
realCapability, which is capped at capability), each compared only in the dimensions
the task itself requests (`LessEqualWithDimensionAndResourcesName`): a worker that asks
no memory is never stopped by a memory capability, and a queue already over its CPU
capability still binds pods that ask no CPU. A capability of 0 (or none) for CPU or
memory means unlimited (both plugins set it to infinity); 0 of an extended resource is
a bound of 0. GPUs are bounded elsewhere (headroom.py, planner `_capped`): this module
is every other dimension.

Pure: no I/O, no clock. docs/design.md "Queue capability" says how `held` is counted.
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.core.shapes import MILLI, PodShape, Quantities


def amount_words(name: str, milli: int) -> str:
    """`100 CPU`, `400Gi memory`, `4 rdma/hca`: an amount in the units people use."""
    if name == "cpu":
        return f"{_num(milli / MILLI)} CPU"
    if name == "memory":
        return f"{_num(milli / MILLI / 2**30)}Gi memory"
    return f"{_num(milli / MILLI)} {name}"


def _num(x: float) -> str:
    return f"{x:g}" if x == int(x) or x >= 10 else f"{x:.3g}"


def add(into: dict[str, int], shape: PodShape, count: int) -> None:
    """`count` pods of `shape` added to what a queue holds (nothing for count <= 0)."""
    if count <= 0:
        return
    for name, value in shape.requests:
        into[name] = into.get(name, 0) + value * count


class QueueQuota:
    """What one queue's capability still lets its workers take this cycle, in every
    dimension it names: `limits` (milli-units) less `held` (what its pods hold and what
    is promised to them). Grants take from it in plan order (`take`)."""

    def __init__(self, queue: str, limits: Quantities, held: Mapping[str, int]) -> None:
        self.queue = queue
        self.limits = dict(limits)
        self.held = {name: held.get(name, 0) for name in self.limits}

    def _rooms(self, shape: PodShape) -> list[tuple[str, int]]:
        """(dimension, workers of `shape` its room admits) for each dimension the
        capability names that the shape requests."""
        return [
            (name, max(0, (cap - self.held[name]) // ask))
            for name, cap in self.limits.items()
            if (ask := shape.amount(name)) > 0
        ]

    def fits(self, shape: PodShape, most: int) -> int:
        """How many of `most` workers of `shape` the capability admits: the smallest,
        over the dimensions it names that the shape requests, of room // request."""
        return max(0, min([most, *(n for _, n in self._rooms(shape))]))

    def take(self, shape: PodShape, count: int) -> None:
        for name in self.limits:
            self.held[name] += shape.amount(name) * max(0, count)

    def binding(self, shape: PodShape) -> str:
        """The dimension that admits the fewest workers of `shape` ("" when none)."""
        rooms = self._rooms(shape)
        return min(rooms, key=lambda r: r[1])[0] if rooms else ""

    def words(self, shape: PodShape, more: int, shape_words: str) -> str:
        """`queue a may hold 100 CPU by its Queue object; its jobs hold 96 CPU: 0 more
        workers (1 GPU, 8 CPU)`: why growth stops at `more` workers."""
        name = self.binding(shape)
        if not name:
            return ""
        return (
            f"queue {self.queue} may hold {amount_words(name, self.limits[name])} by its "
            f"Queue object (spec.capability[{name}]); its jobs hold "
            f"{amount_words(name, self.held[name])}: {more} more worker(s) ({shape_words})"
        )


def beyond(limits: Quantities, pods: tuple[tuple[PodShape, int], ...]) -> tuple[str, int]:
    """The first dimension of `limits` that the pods together ask more of than the
    capability allows, and how much they ask ("", 0 when none): Volcano never admits
    such a gang (its minimum alone is over the queue's capability), whatever is reclaimed."""
    for name, cap in limits:
        need = sum(shape.amount(name) * count for shape, count in pods)
        if need > cap:
            return name, need
    return "", 0
