"""The Placer: the nodes' free room, taken as this cycle places pods, and why no more
fit, in words.

Placement is best fit (the fullest node that still fits: Volcano's binpack keeps whole
nodes for large workers), pod by pod in the caller's order: this cycle's grants and
gangs, in plan order, each taking what it takes before the next is judged. The filters
(filters.py) run once per shape and node class (nodes.py), per node only for a shape
that names nodes. What a Placer takes inside `trial()` is undone, so the planner and the
room search (room.py) can try a choice and leave no trace.

The explanations (`explain`, `describe_shape`) live beside the Placer because they
read its classes and buckets the way placing does: where a shape fits, and where the
idle GPUs that do not take it are, and why.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from autoscaler.core.model import Node
from autoscaler.core.shapes import GPU_RESOURCE, MILLI, PODS, HostPort, PodShape, Quantities

from .filters import (
    AFFINITY,
    CORDONED,
    NOT_READY,
    PORTS,
    RESOURCES,
    SELECTOR,
    TAINT,
    Misfit,
    admits,
    how_many,
    per_node,
    ports_conflict,
    short_of,
)
from .nodes import _Buckets, _Class, _Grouping, _Key


class Placer(_Buckets):
    """The nodes' free room, taken as this cycle places pods (its API: the package
    docstring, autoscaler/plan/fit/__init__.py)."""

    def __init__(
        self,
        nodes: Iterable[Node],
        gpu_names: Sequence[str] = (GPU_RESOURCE,),
        start: _Grouping | None = None,
    ) -> None:
        """`start`: another Placer's `state()` on these same nodes, to go on from."""
        self.gpu_names = tuple(gpu_names)
        super().__init__(nodes, start)
        # a bucket's free room in the order a shape compares nodes by (best fit)
        self._ranks: dict[tuple[Quantities, tuple[str, ...]], tuple[int, ...]] = {}
        self._admit: dict[tuple[PodShape, int], Misfit | None] = {}
        self._fits: dict[PodShape, tuple[int, int]] = {}  # shape -> (version, count)
        self._by_node: dict[PodShape, bool] = {}  # shape -> its filters run node by node
        self._moves: list[tuple[_Class, _Key, _Key] | None] = []  # by the version made
        # per shape judged by class: (version, the buckets that take a pod as a heap)
        self._heaps: dict[PodShape, tuple[int, list[_Entry]]] = {}
        self._pushed = itertools.count()  # ties never compare a class or a key
        self._orders: dict[PodShape, tuple[str, ...]] = {}  # shape -> its rank's resources
        self._idle: tuple[int, int] = (-1, 0)  # (version, idle GPUs)
        self._free_gpus: dict[Quantities, int] = {}  # free room -> GPUs in it
        # pods of a shape one bucket's node takes: a bucket is its free room (and host
        # ports), so the answer stays while the bucket does. Growth asks it of every
        # bucket per pod placed (_best), the most of a plan at 10k jobs (#45)
        self._rooms: dict[tuple[PodShape, _Key], int] = {}
        # the same per shape by the identity of a bucket's key, which hashes a tuple of
        # tuples: _best reads every bucket per pod placed. The key is held in the entry,
        # so its id is not reused while the entry lives
        self._seen: dict[PodShape, dict[int, tuple[_Key, int, tuple[int, ...]]]] = {}
        self._explained: dict[tuple[PodShape, int], tuple[int, str]] = {}

    # -- reading --------------------------------------------------------------------------

    def _misfit(self, shape: PodShape, cls: _Class) -> Misfit | None:
        key = (shape, id(cls))
        if key not in self._admit:
            self._admit[key] = admits(shape, cls.node)
        return self._admit[key]

    def _room(self, shape: PodShape, cls: _Class, key: _Key) -> int:
        """Pods of the shape one node of this bucket takes."""
        n = self._rooms.get((shape, key))
        if n is None:
            free, ports = key
            n = how_many(self._dict(free), shape)
            if n and shape.host_ports:
                n = 0 if ports_conflict(ports, shape.host_ports) else 1
            self._rooms[(shape, key)] = n
        return n

    def _names(self, shape: PodShape, names: list[str], one_by_one: bool) -> list[str]:
        if not one_by_one:
            return names
        return [n for n in names if admits(shape, self._nodes[n]) is None]

    def fits(self, shape: PodShape, limit: int | None = None) -> int:
        """Pods of the shape that fit now (at most `limit`), nothing taken. Remembered
        until the next change: in a full cluster every job of a shape asks the same."""
        cached = self._fits.get(shape)
        if cached is not None and cached[0] == self.version:
            count = cached[1]
        else:
            moved = None if cached is None else self._recount(shape, *cached)
            count = self._count(shape) if moved is None else moved
            self._fits[shape] = (self.version, count)
        return count if limit is None else min(count, limit)

    def _count(self, shape: PodShape) -> int:
        one_by_one, count = per_node(shape), 0
        self._by_node[shape] = one_by_one
        for cls in self._classes.values():
            if not one_by_one and self._misfit(shape, cls) is not None:
                continue
            for key, names in cls.buckets.items():
                room = self._room(shape, cls, key)
                if room:
                    count += room * len(self._names(shape, names, one_by_one))
        return count

    @property
    def idle_gpus(self) -> int:
        """GPUs free on Ready, uncordoned nodes (whatever their labels and taints)."""
        if self._idle[0] == self.version:
            return self._idle[1]
        total = 0
        for cls in self._classes.values():
            if not cls.node.schedulable or cls.node.cordoned:
                continue
            for (free, _), names in cls.buckets.items():
                gpus = self._free_gpus.get(free)
                if gpus is None:
                    d = self._dict(free)
                    gpus = self._free_gpus[free] = sum(max(0, d.get(g, 0)) for g in self.gpu_names)
                total += gpus * len(names)
        self._idle = (self.version, total // MILLI)
        return total // MILLI

    def _relocate(self, name: str, cls: _Class, key: _Key, to: _Key) -> None:
        """A node moves between buckets (nodes.py), noted by the version it makes: what
        `fits` counted and `_best`'s heaps are brought up to date move by move."""
        super()._relocate(name, cls, key, to)
        moves = self._moves  # moves[v - 1]: the change that made version v, if a move
        moves.extend([None] * (self.version - 1 - len(moves)))
        moves.append((cls, key, to))

    def _since(self, version: int) -> list[tuple[_Class, _Key, _Key]] | None:
        """The moves since `version`, in order; None when a change since was not a move
        (undone, or many at once) or there were more than going through them is worth."""
        if self.version - version > _CATCH_UP:
            return None
        moves = self._moves[version : self.version]
        if len(moves) < self.version - version or None in moves:
            return None
        return moves  # type: ignore[return-value]

    def _push(self, heap: list[_Entry], shape: PodShape, cls: _Class, key: _Key) -> None:
        """The bucket as it now is into a shape's heap, if it stands and takes a pod."""
        names = cls.buckets.get(key)
        if names:
            _, room, rank = self._seen_fit(shape, cls, key)
            if room:
                heapq.heappush(heap, (rank, names[-1], next(self._pushed), cls, key, room))

    def _recount(self, shape: PodShape, version: int, count: int) -> int | None:
        """The pods of a shape judged by class that fit now, from `count` at `version`
        and the moves since: one node of a class that admits the shape takes room(to)
        pods instead of room(key). None when a change since was not a move, or there
        were more moves than counting every bucket costs. Growth asks `fits` before
        every place: counting every bucket again was a third of a plan that places
        thousands of workers (#45)."""
        moves = None if self._by_node.get(shape, True) else self._since(version)
        if moves is None:
            return None
        for cls, key, to in moves:
            if self._misfit(shape, cls) is None:
                count += self._room(shape, cls, to) - self._room(shape, cls, key)
        return count

    # -- taking and giving back -------------------------------------------------------------

    def _take(self, name: str, cls: _Class, key: _Key, shape: PodShape, count: int) -> None:
        free, ports = key
        d = dict(free)
        for res, want in shape.requests:
            if res in d or res != PODS:
                d[res] = d.get(res, 0) - want * count
        self._move(name, cls, key, d, ports + shape.host_ports)

    def _best(self, shape: PodShape) -> tuple[str, _Class, _Key, int] | None:
        """The fullest node that takes one more pod of the shape (its name, class and
        bucket), and how many it takes: the least (rank, last node's name) of the
        buckets that take one, as a scan of every bucket finds it (`_scan_best`), from
        a heap of the buckets kept for the shape. Best fit takes a bucket's last node,
        which moves to another bucket: only those two buckets change, and both are
        pushed again (the moves since the shape was last placed, `_since`); an entry
        whose bucket is gone or has another last node now is dropped when it comes
        up. Any other change (an undone trial, a bulk release) makes the heap anew.
        Scanning every bucket per pod placed was most of a first plan (#45)."""
        if self._node_wise(shape):
            return self._scan_best(shape)
        kept = self._heaps.get(shape)
        moves = None if kept is None else self._since(kept[0])
        if kept is None or moves is None:
            heap = self._heap(shape)
        else:
            heap = kept[1]
            for cls, key, to in moves:  # the two buckets of each move, as they now are
                if self._misfit(shape, cls) is None:
                    self._push(heap, shape, cls, key)
                    self._push(heap, shape, cls, to)
        self._heaps[shape] = (self.version, heap)
        while heap:
            _, last, _, cls, key, room = heap[0]
            buckets = cls.buckets.get(key)
            if buckets and buckets[-1] == last:
                return last, cls, key, room
            heapq.heappop(heap)
        return None

    def _heap(self, shape: PodShape) -> list[_Entry]:
        """Every bucket that takes a pod of the shape (judged by class), as a heap."""
        heap: list[_Entry] = []
        for cls in self._classes.values():
            if self._misfit(shape, cls) is not None:
                continue
            for key, names in cls.buckets.items():
                _, room, rank = self._seen_fit(shape, cls, key)
                if room:
                    heap.append((rank, names[-1], next(self._pushed), cls, key, room))
        heapq.heapify(heap)
        return heap

    def _node_wise(self, shape: PodShape) -> bool:
        found = self._by_node.get(shape)
        if found is None:
            found = self._by_node[shape] = per_node(shape)
        return found

    def _scan_best(self, shape: PodShape) -> tuple[str, _Class, _Key, int] | None:
        one_by_one = per_node(shape)
        seen = self._seen.get(shape)
        if seen is None:
            seen = self._seen[shape] = {}
        best: tuple[tuple[int, ...], str, _Class, _Key, int] | None = None
        for cls in self._classes.values():
            if not one_by_one and self._misfit(shape, cls) is not None:
                continue
            for key, names in cls.buckets.items():
                # every bucket is read per pod placed: no call but for a bucket not seen
                found = seen.get(id(key))
                if found is None or found[0] is not key:
                    found = seen[id(key)] = self._bucket_fit(shape, cls, key)
                _, room, rank = found
                if not room:
                    continue
                if one_by_one:
                    names = self._names(shape, names, one_by_one)
                    if not names:
                        continue
                if best is None or rank < best[0] or (rank == best[0] and names[-1] < best[1]):
                    best = (rank, names[-1], cls, key, room)
        return None if best is None else best[1:]

    def _seen_fit(
        self, shape: PodShape, cls: _Class, key: _Key
    ) -> tuple[_Key, int, tuple[int, ...]]:
        """`_bucket_fit`, kept per shape by the identity of the bucket's key."""
        seen = self._seen.get(shape)
        if seen is None:
            seen = self._seen[shape] = {}
        found = seen.get(id(key))
        if found is None or found[0] is not key:
            found = seen[id(key)] = self._bucket_fit(shape, cls, key)
        return found

    def _bucket_fit(
        self, shape: PodShape, cls: _Class, key: _Key
    ) -> tuple[_Key, int, tuple[int, ...]]:
        """(the bucket's key, pods of the shape one of its nodes takes, its best-fit rank)."""
        room = self._room(shape, cls, key)
        order = self._orders.get(shape)
        if order is None:
            order = self._orders[shape] = _rank_order(shape, self.gpu_names)
        rank = self._ranks.get((key[0], order))
        if rank is None:
            d = self._dict(key[0])
            rank = self._ranks[(key[0], order)] = tuple([d.get(r, 0) for r in order])
        return key, room, rank

    def place(self, shape: PodShape, count: int) -> int:
        """Take room for up to `count` pods of the shape, best fit; how many were placed."""
        placed = 0
        while placed < count:
            found = self._best(shape)
            if found is None:
                break
            name, cls, key, room = found
            n = min(room, count - placed)
            self._take(name, cls, key, shape, n)
            placed += n
        return placed

    def place_all(self, pods: Sequence[tuple[PodShape, int]]) -> bool:
        """A gang: room for every pod, or (nothing taken) False."""
        return not any(self.unplaced(pods, keep=True))

    def unplaced(self, pods: Sequence[tuple[PodShape, int]], *, keep: bool = False) -> list[int]:
        """How many pods of each (shape, count) find no room, placed in order; nothing
        is kept unless `keep` and every pod found room."""
        outer, self._undo = self._undo, []
        left = [count - self.place(shape, count) for shape, count in pods]
        moves, self._undo = self._undo, outer
        if any(left) or not keep:
            self._revert(moves)
        elif outer is not None:
            outer.extend(moves)
        return left

    def admits_node(self, shape: PodShape, name: str) -> bool:
        """Node `name` (known) admits a pod of the shape, room aside."""
        if not per_node(shape):  # the filters read what the node's class shares
            where = self._locate(name)
            return where is not None and self._misfit(shape, where[0]) is None
        node = self._nodes.get(name)
        return node is not None and admits(shape, node) is None

    def free_on(self, name: str) -> dict[str, int] | None:
        """The free room of node `name` now (None: not a node we know)."""
        where = self._locate(name)
        return None if where is None else dict(where[1][0])

    def ports_on(self, name: str) -> tuple[HostPort, ...]:
        """The host ports the pods on node `name` hold now."""
        where = self._locate(name)
        return () if where is None else where[1][1]

    def release(self, name: str, shape: PodShape) -> None:
        """A pod of the shape leaves node `name`: its room comes back."""
        self._shift(name, shape, +1)

    def occupy(self, name: str, shape: PodShape) -> None:
        """A pod of the shape (no host ports) is back on node `name`: `release` undone,
        to the room it gave back."""
        assert not shape.host_ports
        self._shift(name, shape, -1)

    def _shift(self, name: str, shape: PodShape, sign: int) -> None:
        """The room of node `name` given back (+1) or taken again (-1) for a pod of the
        shape: only what the node lists; a pod leaving frees its host ports."""
        where = self._locate(name)
        if where is None:
            return
        cls, key = where
        free, ports = key
        d = dict(free)
        for res, want in shape.requests:
            if res in d:
                d[res] += sign * want
        left = list(ports)
        for p in shape.host_ports if sign > 0 else ():
            if p in left:
                left.remove(p)
        self._move(name, cls, key, d, tuple(left))

    def release_all(self, pods: Iterable[tuple[str, PodShape]]) -> None:
        """Many pods leave their nodes at once, (node, shape) each: as `release` one by
        one, but each bucket is rebuilt once (one at a time, each pod scans its
        bucket: a reclaim weighing every worker of a big queue releases thousands)."""
        gone: dict[str, tuple[_Class, _Key, dict[str, int], list[HostPort]]] = {}
        for name, shape in pods:
            if name not in gone:
                where = self._locate(name)
                if where is None:
                    continue
                cls, key = where
                gone[name] = (cls, key, dict(key[0]), list(key[1]))
            d, ports = gone[name][2], gone[name][3]
            for res, want in shape.requests:
                if res in d:
                    d[res] += want
            for p in shape.host_ports:
                if p in ports:
                    ports.remove(p)
        moves = [
            (name, cls, key, (tuple(sorted(d.items())), tuple(ports)))
            for name, (cls, key, d, ports) in gone.items()
        ]
        self._bulk([m for m in moves if m[3] != m[2]])

    def take_gpus(self, gpus: int) -> None:
        """GPUs a gang takes whose pods' shapes are unknown: from the emptiest Ready,
        uncordoned nodes first (the worst case for later workers: a grant never counts
        on room such a gang may fill)."""
        left = gpus * MILLI
        while left > 0:
            found = self._emptiest()
            if found is None:
                return
            name, cls, key, gpu, idle = found
            used = min(left, idle)
            d = dict(key[0])
            d[gpu] -= used
            self._move(name, cls, key, d, key[1])
            left -= used

    def _emptiest(self) -> tuple[str, _Class, _Key, str, int] | None:
        best: tuple[int, str, _Class, _Key, str] | None = None
        for cls in self._classes.values():
            if not cls.node.schedulable or cls.node.cordoned:
                continue
            for key, names in cls.buckets.items():
                d = self._dict(key[0])
                for g in self.gpu_names:
                    idle = d.get(g, 0)
                    if idle > 0 and (best is None or (idle, names[0]) > (best[0], best[1])):
                        best = (idle, names[0], cls, key, g)
        return None if best is None else (best[1], best[2], best[3], best[4], best[0])

    # -- telling ------------------------------------------------------------------------------

    def explain(self, shape: PodShape, more: int) -> str:
        """Why no more than `more` pods of the shape fit, in words a platform engineer
        acts on: where they fit, and where the idle GPUs that do not take them are.
        Remembered until the next change: a full cluster says the same to every job."""
        found = self._explained.get((shape, more))
        if found is None or found[0] != self.version:
            found = (self.version, _explain(self, shape, more))
            self._explained[(shape, more)] = found
        return found[1]


# a bucket that takes a pod of a shape: (rank, its last node, order pushed, its class,
# its key, pods of the shape one node takes)
_Entry = tuple[tuple[int, ...], str, int, _Class, _Key, int]

# moves since a count (or a heap) past which counting every bucket again is cheaper
_CATCH_UP = 16


def _rank_order(shape: PodShape, gpu_names: Sequence[str]) -> tuple[str, ...]:
    """Best fit compares nodes by the free room of what the shape asks: GPUs first."""
    asked = [r for r, v in shape.requests if v > 0]
    return tuple(sorted(asked, key=lambda r: (r not in gpu_names, r)))


# ---- explanations ---------------------------------------------------------------------------


def describe_shape(shape: PodShape, gpu_names: Sequence[str]) -> str:
    """`1 GPU, 8 CPU, 64Gi memory`: what one pod asks, in the units people use."""
    parts = []
    gpus = sum(shape.amount(g) for g in gpu_names) / MILLI
    if gpus:
        parts.append(f"{_num(gpus)} GPU" + ("s" if gpus != 1 else ""))
    cpu = shape.amount("cpu") / MILLI
    if cpu:
        parts.append(f"{_num(cpu)} CPU")
    memory = shape.amount("memory") / MILLI
    if memory:
        parts.append(f"{_num(memory / 2**30)}Gi memory")
    for name, value in shape.requests:
        if name not in gpu_names and name not in ("cpu", "memory", PODS) and value:
            parts.append(f"{_num(value / MILLI)} {name}")
    return ", ".join(parts) or "no resources"


def _num(x: float) -> str:
    return f"{x:g}" if x == int(x) or x >= 10 else f"{x:.2g}"


@dataclass(slots=True)
class _Tally:
    """What `explain` counts for one shape: the nodes that take one more pod, and the
    others by why not."""

    fit_nodes: int = 0
    # idle GPUs (milli) and nodes, by why they do not take the pod
    gpus: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)

    def add(self, why: str, gpus: int, nodes: int) -> None:
        self.gpus[why] = self.gpus.get(why, 0) + gpus
        self.nodes[why] = self.nodes.get(why, 0) + nodes


def _tally(placer: Placer, shape: PodShape) -> _Tally:
    """Nodes that take one more pod of the shape, and the idle GPUs of the rest by why
    not: per class and bucket (per node only for a shape that names nodes)."""
    tally = _Tally()
    one_by_one = per_node(shape)
    for cls in placer._classes.values():
        for key, names in cls.buckets.items():
            d = placer._dict(key[0])
            idle = sum(max(0, d.get(g, 0)) for g in placer.gpu_names)
            for name in names if one_by_one else names[:1]:
                weight = 1 if one_by_one else len(names)
                misfit = admits(shape, placer._nodes[name] if one_by_one else cls.node)
                if misfit is None and placer._room(shape, cls, key):
                    tally.fit_nodes += weight
                    continue
                if misfit is None:
                    short = short_of(d, shape)
                    misfit = Misfit(RESOURCES, ", ".join(short)) if short else Misfit(PORTS)
                why = f"{misfit.kind}:{misfit.detail}"
                tally.add(why, idle * weight, weight)
    return tally


_WHY = {
    NOT_READY: "are on nodes that are not Ready",
    CORDONED: "are on cordoned nodes",
    SELECTOR: "do not match its nodeSelector",
    AFFINITY: "do not match its required node affinity",
}


def _explain(placer: Placer, shape: PodShape, more: int) -> str:
    tally = _tally(placer, shape)
    what = describe_shape(shape, placer.gpu_names)
    where = _where_words(shape)
    head = (
        f"node fit: {more} more worker(s) ({what}) fit on the {tally.fit_nodes} node(s){where}"
        if more
        else f"node fit: no node takes one more worker ({what})"
    )
    reasons = []
    for why, milli_gpus in sorted(tally.gpus.items(), key=lambda kv: (-kv[1], kv[0])):
        kind, _, detail = why.partition(":")
        nodes = tally.nodes[why]
        gpus = milli_gpus // MILLI
        if kind == TAINT:
            reasons.append(
                f"{gpus} idle GPU(s) are on {nodes} node(s) tainted {detail} that its "
                "workers do not tolerate"
            )
        elif kind == RESOURCES:
            reasons.append(f"Insufficient {detail} on {nodes} node(s)")
        elif kind == PORTS:
            ports = ", ".join(str(p.port) for p in shape.host_ports)
            reasons.append(f"host port {ports} already taken on {nodes} node(s)")
        elif gpus:
            reasons.append(f"{gpus} idle GPU(s) on {nodes} node(s) elsewhere {_WHY[kind]}")
    return "; ".join([head, *reasons])


def _where_words(shape: PodShape) -> str:
    if shape.node_selector:
        return " with " + ",".join(f"{k}={v}" for k, v in shape.node_selector)
    if shape.affinity is not None:
        return " its required node affinity admits"
    return ""
