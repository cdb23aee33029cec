"""What each queue of a shared cluster is owed, and how idle GPUs are shared out.

Pure (no I/O, no clock). docs/design.md "Sharing a cluster between queues" says the rules
in words; in short:

- capacity plugin: a queue's `deserved` is its Queue's `spec.deserved` capped at its real
  capability, at least its guarantee (Volcano's capacity plugin, `buildQueueAttrs`); a
  queue with neither is best-effort. Idle GPUs go first to the queues below their
  deserved, water-filled on allocated/deserved (the plugin's `updateQueueAttrShare` and
  `compareShareWithDeserved`: the queue with the lowest share is served first), each up
  to what it is owed and asks for; then to best-effort queues (their share is fixed at 1,
  so Volcano serves them before any queue beyond its deserved), by weight; then beyond
  deserved, again on allocated/deserved.
- proportion plugin: a queue's share is the water-fill of the cluster over every queue's
  request plus what it asks for this cycle (headroom.water_fill), as the plugin's
  `OnSessionOpen` computes deserved.

A queue holding more than that (what it lent while nobody else asked) is where a waiting
gang of a queue within its own share takes elastic workers back from (the plugins'
`AddReclaimableFn`: a victim's queue must hold more than its deserved).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from autoscaler.core.model import VolcanoQueue

_EPS = 1e-9
_ROUNDS = 100  # bisection steps: far below a GPU for any cluster


def deserved_of(q: VolcanoQueue, real: float) -> float | None:
    """The capacity plugin's deserved: spec.deserved capped at `real`, the queue's real
    capability (headroom.real_capability), at least its guarantee; None for a
    best-effort queue (neither set)."""
    if q.spec_deserved is None and q.guarantee <= 0:
        return None
    deserved = min(q.spec_deserved or 0.0, real)
    return max(deserved, q.guarantee)


@dataclass(frozen=True, slots=True)
class Ask:
    """One queue's part in sharing: GPUs it holds now (`used`: allocated, admitted and
    asked for), its deserved (None: best-effort), weight, how many more its plugin lets
    it hold (`room`) and how many more it asks for this cycle (`want`)."""

    name: str
    used: float
    deserved: float | None
    weight: float
    room: float
    want: float

    @property
    def most(self) -> float:
        return max(0.0, min(self.room, self.want))


def capacity_allotments(idle: int, asks: Iterable[Ask]) -> dict[str, int]:
    """Idle GPUs each queue may take this cycle under the capacity plugin (see the module
    docstring), whole GPUs; the sum never exceeds `idle`."""
    rows = sorted(asks, key=lambda a: a.name)
    given = {a.name: 0.0 for a in rows}
    left = float(max(0, idle))
    owed = [a for a in rows if a.deserved is not None and a.deserved > 0]
    # 1. up to deserved, lowest allocated/deserved first
    below = [
        (a.name, a.used, a.deserved or 0.0, min(a.most, (a.deserved or 0.0) - a.used)) for a in owed
    ]
    left -= _level_fill(left, below, given)
    # 2. best-effort queues, by weight
    best_effort = [a for a in rows if a.deserved is None or a.deserved <= 0]
    left -= _level_fill(left, [(a.name, 0.0, a.weight, a.most) for a in best_effort], given)
    # 3. beyond deserved, lowest allocated/deserved first
    left -= _level_fill(
        left,
        [(a.name, a.used + given[a.name], a.deserved or 0.0, a.most - given[a.name]) for a in owed],
        given,
    )
    return _whole(given, {a.name: a.most for a in rows}, idle)


def _level_fill(
    amount: float, items: list[tuple[str, float, float, float]], given: dict[str, float]
) -> float:
    """Water-fill `amount` over items (name, base, scale, cap): each gets
    clamp(level x scale - base, 0, cap) for the level that spends `amount` (or every cap,
    when they fit). Adds to `given`; returns what was spent."""
    items = [(n, b, s, c) for n, b, s, c in items if c > _EPS and s > 0]
    if not items or amount <= _EPS:
        return 0.0

    def spent(level: float) -> float:
        return sum(min(c, max(0.0, level * s - b)) for _, b, s, c in items)

    high = max((b + c) / s for _, b, s, c in items)
    if spent(high) <= amount + _EPS:
        level = high
    else:
        low = 0.0
        for _ in range(_ROUNDS):
            mid = (low + high) / 2
            if spent(mid) > amount:
                high = mid
            else:
                low = mid
        level = low
    total = 0.0
    for n, b, s, c in items:
        part = min(c, max(0.0, level * s - b))
        given[n] += part
        total += part
    return total


def _whole(given: dict[str, float], most: dict[str, float], idle: int) -> dict[str, int]:
    """Whole GPUs: each part rounded down, then what rounding left handed out one GPU at a
    time, largest remainder first (then name), never above what a queue may take."""
    out = {n: math.floor(g + _EPS) for n, g in given.items()}
    spare = max(0, idle) - sum(out.values())
    order = sorted(given, key=lambda n: (-(given[n] - out[n]), n))
    for n in order:
        if spare <= 0:
            break
        if given[n] - out[n] > _EPS and out[n] + 1 <= most[n] + _EPS:
            out[n] += 1
            spare -= 1
    return out
