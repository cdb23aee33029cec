"""Fit by shape: would the scheduler bind a pod of this shape on one of these nodes, and
how many such pods fit? Pure (no I/O, no clock), deterministic; shared by the planner
and the simulator.

The filters are the scheduler's own (kube-scheduler's, which Volcano's `predicates`
plugin runs), judged from a node and a pod shape (model.PodShape, read by
autoscaler/read/podspec.py):

- NodeResourcesFit: every resource the pod requests (GPUs, CPU, memory, RDMA and other
  extended resources, one of the node's `pods`) free on the node: allocatable less what
  its bound, unfinished pods request;
- NodeAffinity: the node's labels match the pod's `nodeSelector`, and one term of its
  required node affinity (In, NotIn, Exists, DoesNotExist, Gt, Lt on labels; In, NotIn on
  the field metadata.name); a term with no requirement matches no node;
- TaintToleration: every NoSchedule and NoExecute taint tolerated (PreferNoSchedule
  repels nothing);
- NodeUnschedulable: a cordoned node only for a pod tolerating
  node.kubernetes.io/unschedulable:NoSchedule; a node that is not Ready takes nothing;
- NodePorts: a host port (hostNetwork pods take their container ports) free on the
  node, so such pods fit one per node.

Not judged (said in `plan` for the jobs that use them): inter-pod affinity, topology
spread, volumes.

API (plain: shapes and nodes in, placements out):

    placer = Placer(nodes, gpu_names)   # model.Node, with what bound pods request
    placer.state()                      # the room so far: Placer(nodes, names, start=it)
    placer.fits(shape, limit)           # pods of `shape` that fit now; nothing taken
    placer.place(shape, count)          # room taken for up to `count`, best fit; how many
    placer.place_all(pods)              # a gang, [(shape, count)]: all of it or nothing
    placer.unplaced(pods)               # how many of each find no room (nothing taken)
    placer.admits_node(shape, name)     # the named node's filters admit the shape
    placer.take_gpus(gpus)              # a gang known by its GPUs alone: emptiest nodes
    placer.release(node, shape)         # a pod that goes gives its node's room back
    placer.free_on(node)                # the named node's free room now
    with placer.trial(): ...            # what is placed or released inside is undone
    make_room(placer, pods, holders)    # which workers a reclaim takes so a gang fits
    placer.explain(shape, more)         # why no more than `more` fit, in words
    placer.idle_gpus                    # GPUs free on Ready, uncordoned nodes
    admits(shape, node)                 # the filters a node's labels, taints and state
                                        # decide alone: None, or the Misfit

Placement is best fit (the fullest node that still fits: Volcano's binpack keeps whole
nodes for large workers), pod by pod in the caller's order: this cycle's grants and
gangs, in plan order, each taking what it takes before the next is judged.

Fast at scale: nodes are grouped into classes by what the filters read (labels but the
hostname, taints, Ready, cordoned), the filters run once per shape and class; within a
class, nodes with the same free room and host ports are one bucket (a name list), so a
placement scans buckets, not nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

from autoscaler.core.model import (
    GPU_RESOURCE,
    MILLI,
    PODS,
    HostPort,
    Labels,
    Node,
    PodShape,
    Quantities,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)

REPEL = frozenset({"NoSchedule", "NoExecute"})
HOSTNAME_LABEL = "kubernetes.io/hostname"
NAME_FIELD = "metadata.name"
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")

# why a node does not take a pod, in the order the filters are tried
NOT_READY = "not-ready"
CORDONED = "cordoned"
SELECTOR = "node-selector"
AFFINITY = "node-affinity"
TAINT = "taint"
RESOURCES = "resources"
PORTS = "host-ports"


@dataclass(frozen=True, slots=True)
class Misfit:
    """Why a node does not take a pod: `kind` (one of the constants above) and, for a
    taint, which; for resources, which are short."""

    kind: str
    detail: str = ""


# ---- the filters ----------------------------------------------------------------------------


def tolerates(t: Toleration, taint: Taint) -> bool:
    """The toleration matches the taint (k8s ToleratesTaint): same effect or none; same
    key, or no key with Exists; Exists, or Equal and the same value."""
    if t.effect and t.effect != taint.effect:
        return False
    if not t.key:
        return t.operator == "Exists"
    if t.key != taint.key:
        return False
    if t.operator == "Exists":
        return True
    return t.operator in ("Equal", "") and t.value == taint.value


def untolerated(shape: PodShape, node: Node) -> Taint | None:
    """The first NoSchedule/NoExecute taint of the node that the pod does not tolerate."""
    for taint in node.taints:
        if taint.effect in REPEL and not any(tolerates(t, taint) for t in shape.tolerations):
            return taint
    return None


def label(node: Node, key: str) -> str | None:
    if key == HOSTNAME_LABEL and node.hostname:
        return node.hostname
    for k, v in node.labels:
        if k == key:
            return v
    return None


def requirement_matches(req: Requirement, value: str | None) -> bool:
    """One requirement against the label's (or field's) value, None when absent."""
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(req.values) == 1:
        try:
            have, bound = int(value), int(req.values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False  # an unknown operator, or Gt/Lt without one integer: the term fails


def term_matches(term: SelectorTerm, node: Node) -> bool:
    if not term.expressions and not term.fields:
        return False
    for req in term.fields:
        if req.key != NAME_FIELD or req.operator not in ("In", "NotIn"):
            return False
        if not requirement_matches(req, node.name):
            return False
    return all(requirement_matches(r, label(node, r.key)) for r in term.expressions)


def matches_selector(shape: PodShape, node: Node) -> bool:
    return all(label(node, k) == v for k, v in shape.node_selector)


def matches_affinity(shape: PodShape, node: Node) -> bool:
    terms = shape.affinity
    return terms is None or any(term_matches(t, node) for t in terms)


def admits(shape: PodShape, node: Node) -> Misfit | None:
    """What the node's state, labels and taints decide alone (not its free room)."""
    if not node.schedulable:
        return Misfit(NOT_READY)
    if node.cordoned and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in shape.tolerations):
        return Misfit(CORDONED)
    if not matches_selector(shape, node):
        return Misfit(SELECTOR)
    if not matches_affinity(shape, node):
        return Misfit(AFFINITY)
    taint = untolerated(shape, node)
    if taint is not None:
        return Misfit(TAINT, str(taint))
    return None


def per_node(shape: PodShape) -> bool:
    """The shape names single nodes (the hostname label, metadata.name): its filters run
    per node, not once per class."""
    if any(k == HOSTNAME_LABEL for k, _ in shape.node_selector):
        return True
    return any(
        t.fields or any(r.key == HOSTNAME_LABEL for r in t.expressions)
        for t in shape.affinity or ()
    )


def ports_conflict(taken: Iterable[HostPort], wanted: Iterable[HostPort]) -> bool:
    """A wanted host port is taken (same protocol and port; same address, or either on
    every address)."""
    for w in wanted:
        for t in taken:
            if (
                w.port == t.port
                and w.protocol == t.protocol
                and (w.ip == t.ip or w.ip in ("", "0.0.0.0") or t.ip in ("", "0.0.0.0"))
            ):
                return True
    return False


def how_many(free: Mapping[str, int], shape: PodShape) -> int:
    """Pods of the shape that fit in `free` room, by resources alone (a resource the
    node does not have is 0, but for its pod count when it gives none)."""
    count = -1
    for name, want in shape.requests:
        if want <= 0:
            continue
        if name == PODS and PODS not in free:
            continue
        n = free.get(name, 0) // want
        if n <= 0:
            return 0
        count = n if count < 0 else min(count, n)
    return 1_000_000 if count < 0 else count


def short_of(free: Mapping[str, int], shape: PodShape) -> list[str]:
    """The resources one more pod of the shape lacks."""
    return [
        name
        for name, want in shape.requests
        if want > 0 and not (name == PODS and PODS not in free) and free.get(name, 0) < want
    ]


# ---- the nodes, as this cycle places pods on them --------------------------------------------

_Key = tuple[Quantities, tuple[HostPort, ...]]  # free room, host ports taken


@dataclass(slots=True)
class _Class:
    """Nodes the filters cannot tell apart (labels but the hostname, taints, state), by
    free room: bucket key -> node names."""

    node: Node  # one of them: what the filters read
    buckets: dict[_Key, list[str]] = field(default_factory=dict)


def _free(node: Node) -> Quantities:
    alloc = dict(node.resources) if node.resources else {GPU_RESOURCE: node.allocatable * MILLI}
    used = dict(node.requested) if node.requested or node.resources else {}
    if not node.resources and not node.requested and node.used:
        used = {GPU_RESOURCE: node.used * MILLI}
    return tuple(sorted((k, v - used.get(k, 0)) for k, v in alloc.items()))


class _Move(NamedTuple):
    """One node moved between buckets (to undo): from, to, its place in `was`."""

    name: str
    cls: _Class
    was: _Key
    now: _Key
    at: int


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """Buckets as they were before a bulk release (None: there was none), and where
    its nodes were (to undo)."""

    buckets: tuple[tuple[_Class, _Key, list[str] | None], ...]
    where: dict[str, tuple[_Class, _Key]]


_ClassKey = tuple[Labels, tuple[Taint, ...], bool, bool]
_Grouping = dict[_ClassKey, tuple[Node, tuple[tuple[_Key, tuple[str, ...]], ...]]]
# the last grouping, by the identity of the nodes it was made of: a steady cluster hands
# the planner the same nodes tuple every cycle (the snapshot is assembled again only when
# a cache changed), and grouping 20k nodes is most of a Placer's cost
_LAST: list[tuple[Sequence[Node], _Grouping]] = []


def _grouped(nodes: Sequence[Node]) -> _Grouping:
    """Nodes into classes (what the filters read) and, within each, buckets of equal
    free room and host ports. The readers intern what nodes share, so equal label sets,
    taints and resource lists are one object: nodes are grouped by identity first (a
    hash of a few integers per node, not of its nested tuples), then by value."""
    if _LAST and _LAST[0][0] is nodes:
        return _LAST[0][1]
    same: dict[tuple[int, ...], tuple[Node, list[str]]] = {}
    for n in nodes:
        key = (
            id(n.labels),
            id(n.taints),
            n.schedulable,
            n.cordoned,
            id(n.resources),
            id(n.requested),
            n.allocatable,
            n.used,
            id(n.ports),
        )
        found = same.get(key)
        if found is None:
            same[key] = (n, [n.name])
        else:
            found[1].append(n.name)
    classes: dict[_ClassKey, tuple[Node, dict[_Key, list[str]]]] = {}
    for n, names in same.values():
        ckey = (n.labels, n.taints, n.schedulable, n.cordoned)
        cls = classes.setdefault(ckey, (n, {}))
        cls[1].setdefault((_free(n), n.ports), []).extend(names)
    grouping = {
        ckey: (node, tuple((key, tuple(names)) for key, names in buckets.items()))
        for ckey, (node, buckets) in classes.items()
    }
    _LAST[:] = [(nodes, grouping)]
    return grouping


class Placer:
    """The nodes' free room, taken as this cycle places pods (see the module docstring)."""

    def __init__(
        self,
        nodes: Iterable[Node],
        gpu_names: Sequence[str] = (GPU_RESOURCE,),
        start: _Grouping | None = None,
    ) -> None:
        """`start`: another Placer's `state()` on these same nodes, to go on from."""
        self.gpu_names = tuple(gpu_names)
        self._all: Sequence[Node] = nodes if isinstance(nodes, tuple | list) else tuple(nodes)
        # built when first asked for (a cycle that places nothing by name needs neither)
        self._nodes_by_name: dict[str, Node] | None = None
        self._where: dict[str, tuple[_Class, _Key]] | None = None
        # what to undo (a trial, `unplaced`): moves and bulk releases, in order
        self._undo: list[_Move | _Snapshot] | None = None
        self._dicts: dict[Quantities, dict[str, int]] = {}
        # a bucket's free room in the order a shape compares nodes by (best fit)
        self._ranks: dict[tuple[Quantities, tuple[str, ...]], tuple[int, ...]] = {}
        self._admit: dict[tuple[PodShape, int], Misfit | None] = {}
        grouping = _grouped(self._all) if start is None else start
        self._classes = {
            ckey: _Class(node, {key: list(names) for key, names in buckets})
            for ckey, (node, buckets) in grouping.items()
        }
        self.version = 0  # bumped by every change: callers may cache what they read
        self._fits: dict[PodShape, tuple[int, int]] = {}  # shape -> (version, count)
        self._idle: tuple[int, int] = (-1, 0)  # (version, idle GPUs)
        self._free_gpus: dict[Quantities, int] = {}  # free room -> GPUs in it
        self._explained: dict[tuple[PodShape, int], tuple[int, str]] = {}

    @property
    def _nodes(self) -> dict[str, Node]:
        if self._nodes_by_name is None:
            self._nodes_by_name = {n.name: n for n in self._all}
        return self._nodes_by_name

    def _locate(self, name: str) -> tuple[_Class, _Key] | None:
        if self._where is None:
            self._where = {
                n: (cls, key)
                for cls in self._classes.values()
                for key, names in cls.buckets.items()
                for n in names
            }
        return self._where.get(name)

    def state(self) -> _Grouping:
        """The nodes' room as placed so far, for `Placer(nodes, gpu_names, start=...)`."""
        return {
            ckey: (cls.node, tuple((key, tuple(names)) for key, names in cls.buckets.items()))
            for ckey, cls in self._classes.items()
        }

    # -- reading --------------------------------------------------------------------------

    def _dict(self, free: Quantities) -> dict[str, int]:
        d = self._dicts.get(free)
        if d is None:
            d = self._dicts[free] = dict(free)
        return d

    def _misfit(self, shape: PodShape, cls: _Class) -> Misfit | None:
        key = (shape, id(cls))
        if key not in self._admit:
            self._admit[key] = admits(shape, cls.node)
        return self._admit[key]

    def _room(self, shape: PodShape, cls: _Class, key: _Key) -> int:
        """Pods of the shape one node of this bucket takes."""
        free, ports = key
        n = how_many(self._dict(free), shape)
        if n and shape.host_ports:
            n = 0 if ports_conflict(ports, shape.host_ports) else 1
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
            count = self._count(shape)
            self._fits[shape] = (self.version, count)
        return count if limit is None else min(count, limit)

    def _count(self, shape: PodShape) -> int:
        one_by_one, count = per_node(shape), 0
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

    # -- taking and giving back -------------------------------------------------------------

    def _move(
        self,
        name: str,
        cls: _Class,
        key: _Key,
        free: Mapping[str, int],
        ports: tuple[HostPort, ...],
    ) -> None:
        """Node `name` of bucket `key` of `cls` now has `free` room and `ports` taken."""
        self._relocate(name, cls, key, (tuple(sorted(free.items())), ports))

    def _relocate(self, name: str, cls: _Class, key: _Key, to: _Key) -> None:
        names = cls.buckets[key]
        at = names.index(name)
        del names[at]
        if not names:
            del cls.buckets[key]
        cls.buckets.setdefault(to, []).append(name)
        if self._where is not None:
            self._where[name] = (cls, to)
        if self._undo is not None:
            self._undo.append(_Move(name, cls, key, to, at))
        self.version += 1

    def _revert(self, changes: list[_Move | _Snapshot]) -> None:
        """Undo `changes`, last first, each node back at its place in its bucket: best
        fit breaks ties by that order, so a trial leaves no trace on later placements."""
        for change in reversed(changes):
            if isinstance(change, _Snapshot):
                self._restore(change)
                continue
            name, cls, was, now, at = change
            names = cls.buckets[now]
            names.remove(name)
            if not names:
                del cls.buckets[now]
            cls.buckets.setdefault(was, []).insert(at, name)
            if self._where is not None:
                self._where[name] = (cls, was)
            self.version += 1

    def _restore(self, snap: _Snapshot) -> None:
        for cls, key, names in snap.buckets:
            if names is None:
                cls.buckets.pop(key, None)
            else:
                cls.buckets[key] = names
        if self._where is not None:
            self._where.update(snap.where)
        self.version += 1

    @contextmanager
    def trial(self) -> Iterator[None]:
        """Whatever is placed or released inside is undone at the end."""
        outer, self._undo = self._undo, []
        try:
            yield
        finally:
            moves, self._undo = self._undo, outer
            self._revert(moves)

    def _take(self, name: str, cls: _Class, key: _Key, shape: PodShape, count: int) -> None:
        free, ports = key
        d = dict(free)
        for res, want in shape.requests:
            if res in d or res != PODS:
                d[res] = d.get(res, 0) - want * count
        self._move(name, cls, key, d, ports + shape.host_ports)

    def _best(self, shape: PodShape) -> tuple[str, _Class, _Key, int] | None:
        """The fullest node that takes one more pod of the shape (its name, class and
        bucket), and how many it takes."""
        one_by_one = per_node(shape)
        order = _rank_order(shape, self.gpu_names)
        best: tuple[tuple[int, ...], str, _Class, _Key, int] | None = None
        for cls in self._classes.values():
            if not one_by_one and self._misfit(shape, cls) is not None:
                continue
            for key, names in cls.buckets.items():
                room = self._room(shape, cls, key)
                if not room:
                    continue
                fitting = self._names(shape, names, one_by_one)
                if not fitting:
                    continue
                rank = self._ranks.get((key[0], order))
                if rank is None:
                    d = self._dict(key[0])
                    rank = self._ranks[(key[0], order)] = tuple([d.get(r, 0) for r in order])
                if best is None or rank < best[0] or (rank == best[0] and fitting[-1] < best[1]):
                    best = (rank, fitting[-1], cls, key, room)
        return None if best is None else best[1:]

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
        where = self._locate(name)
        if where is None:
            return
        cls, key = where
        free, ports = key
        d = dict(free)
        for res, want in shape.requests:
            if res in d:
                d[res] += want
        left = list(ports)
        for p in shape.host_ports:
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

    def _bulk(self, moves: list[tuple[str, _Class, _Key, _Key]]) -> None:
        """Nodes from bucket to bucket, (name, class, from, to) each; the buckets they
        leave filtered once. Recorded as the buckets were, to undo."""
        if not moves:
            return
        touched = {(id(cls), k): (cls, k) for _, cls, key, to in moves for k in (key, to)}
        if self._undo is not None:
            was = tuple(
                (cls, k, list(cls.buckets[k]) if k in cls.buckets else None)
                for cls, k in touched.values()
            )
            where = {name: (cls, key) for name, cls, key, _ in moves}
            self._undo.append(_Snapshot(was, where))
        leaving: dict[tuple[int, _Key], set[str]] = {}
        for name, cls, key, _ in moves:
            leaving.setdefault((id(cls), key), set()).add(name)
        for ident, names in leaving.items():
            cls, key = touched[ident]
            kept = [n for n in cls.buckets[key] if n not in names]
            if kept:
                cls.buckets[key] = kept
            else:
                del cls.buckets[key]
        for name, cls, _, to in moves:
            cls.buckets.setdefault(to, []).append(name)
            if self._where is not None:
                self._where[name] = (cls, to)
        self.version += 1

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


def _rank_order(shape: PodShape, gpu_names: Sequence[str]) -> tuple[str, ...]:
    """Best fit compares nodes by the free room of what the shape asks: GPUs first."""
    asked = [r for r, v in shape.requests if v > 0]
    return tuple(sorted(asked, key=lambda r: (r not in gpu_names, r)))


# ---- making room: the workers a reclaim takes so a gang's pods fit ----------------------------


@dataclass(frozen=True, slots=True)
class Holder:
    """Workers a reclaim may take, as the nodes see them: one job's workers above its
    minimum, highest index first (the operators delete those first), the node each runs
    on ("" where none is bound) and the shape they share. `priority`: lower gives first;
    `group`: holders whose GPUs given together are bounded by `caps[group]`."""

    shape: PodShape
    nodes: tuple[str, ...]
    priority: int = 0
    group: str = ""


@dataclass(frozen=True, slots=True)
class Room:
    """What a reclaim takes: per holder, how many of its workers go (the first ones of
    its `nodes`); or `cuts` None when no choice of them makes the pods fit, and why."""

    cuts: tuple[int, ...] | None
    why: str = ""


def make_room(
    placer: Placer,
    pods: Sequence[tuple[PodShape, int]],
    holders: Sequence[Holder],
    gpus: int = 0,
    caps: Mapping[str, float] | None = None,
) -> Room:
    """The workers to take so that every pod of `pods` (a gang, in order) fits on the
    nodes once they are gone, and the workers gone on nodes the pods' shapes admit free
    at least `gpus` GPUs (a queue's share short of the gang's); nothing taken (and why)
    when no choice does it. Nothing of `placer` is changed.

    A pod that finds no node gets room on the node where it costs least: lowest
    priority first, then the fewest jobs restarted (a job already giving workers
    restarts anyway), then the fewest workers; a worker elsewhere frees nothing the pod
    can use and is taken only where a higher-index one it must go before is needed.
    Releasing the planned workers in holder order and then placing `pods` in order is
    the check, as the planner then does it."""
    search = _RoomSearch(placer, pods, holders, caps or {})
    return search.run(gpus)


_PORTS = " host ports"  # in a node's lack: no resource name has a space


class _RoomSearch:
    def __init__(
        self,
        placer: Placer,
        pods: Sequence[tuple[PodShape, int]],
        holders: Sequence[Holder],
        caps: Mapping[str, float],
    ) -> None:
        self.placer, self.pods, self.holders, self.caps = placer, pods, holders, caps
        self.cuts = [0] * len(holders)
        names = placer.gpu_names
        self.gpus = [sum(h.shape.amount(g) for g in names) // MILLI for h in holders]
        self._asks = [dict(h.shape.requests) for h in holders]
        self.shapes = tuple(dict.fromkeys(shape for shape, _ in pods))
        self._admits: dict[tuple[PodShape, str], bool] = {}
        self._wanted = PodShape()  # the pod a node is being freed for (_cheapest)

    def run(self, gpus: int) -> Room:
        while True:
            with self.placer.trial():
                self._release(self.cuts)
                short = self._first_unplaced()
                more = None if short is None else self._cheapest(short)
            if short is None:
                break
            if more is None:
                return self._fallback(gpus)
            for h, cut in more.items():
                self.cuts[h] = cut
        self._prune()
        if not self._cover_gpus(gpus):
            return Room(None, self._gpus_words(gpus))
        return Room(tuple(self.cuts))

    # -- the state tried ------------------------------------------------------------------

    def _release(self, cuts: Sequence[int]) -> None:
        self.placer.release_all(
            (name, h.shape)
            for h, cut in zip(self.holders, cuts, strict=True)
            for name in h.nodes[:cut]
            if name
        )

    def _first_unplaced(self) -> PodShape | None:
        """Places the pods in order; the shape of the first that finds no room (the
        ones before it stay placed, so its room is judged beside them)."""
        for shape, count in self.pods:
            if self.placer.place(shape, count) < count:
                return shape
        return None

    def _fits_with(self, cuts: Sequence[int]) -> bool:
        with self.placer.trial():
            self._release(cuts)
            return self._first_unplaced() is None

    def _useful(self, name: str) -> bool:
        """A worker on this node frees room a pod of the gang may take."""
        return bool(name) and any(self._admit(s, name) for s in self.shapes)

    def _admit(self, shape: PodShape, name: str) -> bool:
        key = (shape, name)
        if key not in self._admits:
            self._admits[key] = self.placer.admits_node(shape, name)
        return self._admits[key]

    # -- room for one pod -----------------------------------------------------------------

    def _cheapest(self, shape: PodShape) -> dict[int, int] | None:
        """More workers taken (holder -> its new cut) that give one more pod of `shape`
        a node, the cheapest node's (see make_room); None when no node can be freed
        enough."""
        by_node: dict[str, dict[int, list[int]]] = {}
        for h, holder in enumerate(self.holders):
            for at in range(self.cuts[h], len(holder.nodes)):
                name = holder.nodes[at]
                if name:
                    by_node.setdefault(name, {}).setdefault(h, []).append(at)
        self._wanted, given = shape, self._given(self.cuts)
        best: tuple[tuple[int, int, int, str], dict[int, int]] | None = None
        for name in sorted(by_node):
            free = self.placer.free_on(name)
            if free is None or not self._admit(shape, name):
                continue
            lack = {r: shape.amount(r) - free.get(r, 0) for r in short_of(free, shape)}
            held = self.placer.ports_on(name)
            blocking = sum(1 for p in held if ports_conflict((p,), shape.host_ports))
            if blocking:
                lack[_PORTS] = blocking  # pods holding a port it needs: each must go
            if not lack:
                continue  # it fits here already (only another pod's place kept it out)
            bound = self._bound(lack, by_node[name])
            if bound is None or (best is not None and bound >= best[0][:3]):
                continue  # cannot be freed enough, or not more cheaply than the best
            more = self._on_node(lack, by_node[name], given)
            if more is None:
                continue
            cost = (*self._cost(more), name)
            if best is None or cost < best[0]:
                best = (cost, more)
        return None if best is None else best[1]

    def _on_node(
        self, lack: dict[str, int], where: dict[int, list[int]], given: dict[str, int]
    ) -> dict[int, int] | None:
        """More workers taken (holder -> new cut) that free `lack` on one node from the
        workers `where` (holder -> its workers' positions there, ascending): holders by
        priority, those already giving first, then those that cover it alone with the
        fewest workers."""
        order = sorted(where, key=lambda h: self._rank_on_node(h, where[h], lack))
        more: dict[int, int] = {}
        left, given = dict(lack), dict(given)
        for h in order:
            frees = [(r, self._frees(h, r)) for r in left]
            for at in where[h]:
                cut = more.get(h, self.cuts[h])
                if not self._within_cap(h, given, at + 1 - cut):
                    break
                more[h] = at + 1
                group = self.holders[h].group
                given[group] = given.get(group, 0) + (at + 1 - cut) * self.gpus[h]
                for r, amount in frees:
                    left[r] -= amount
                if all(v <= 0 for v in left.values()):
                    return more
        return None

    def _bound(self, lack: dict[str, int], where: dict[int, list[int]]) -> tuple[int, ...] | None:
        """None when even every worker `where` gone would not free `lack` (caps aside:
        most nodes of a full cluster, no closer look needed); else the least any room
        there can cost, as _cost counts: the lowest priority, the fewest jobs whose
        workers together free it less those already giving, the fewest workers."""
        jobs = workers = 0
        for r, v in lack.items():
            per = [self._frees(h, r) for h in where]
            each = [len(at) * p for at, p in zip(where.values(), per, strict=True)]
            if sum(each) < v:
                return None
            each.sort(reverse=True)
            covered = k = 0
            while covered < v:
                covered, k = covered + each[k], k + 1
            jobs, workers = max(jobs, k), max(workers, -(-v // max(per)))
        giving = sum(1 for h in where if self.cuts[h])
        low = min(self.holders[h].priority for h in where)
        return (low, max(0, jobs - giving), workers)

    def _frees(self, h: int, what: str) -> int:
        """What one worker of holder h gives back of `what`: a resource, or (_PORTS)
        the host ports it holds that the pod being placed needs."""
        if what == _PORTS:
            ports = self.holders[h].shape.host_ports
            return sum(1 for p in ports if ports_conflict((p,), self._wanted.host_ports))
        return self._asks[h].get(what, 0)

    def _rank_on_node(self, h: int, at: list[int], lack: dict[str, int]) -> tuple[int, ...]:
        holder = self.holders[h]
        per = [self._frees(h, r) for r in lack]
        need = max(
            (-(-v // p) if p > 0 else len(at) + 1 for v, p in zip(lack.values(), per, strict=True)),
            default=1,
        )
        alone = need <= len(at)
        workers = (at[need - 1] if alone else at[-1]) + 1 - self.cuts[h]
        return (holder.priority, 0 if self.cuts[h] else 1, 0 if alone else 1, workers, h)

    def _cost(self, more: dict[int, int]) -> tuple[int, int, int]:
        """(highest priority taken, jobs newly restarted, workers taken) of `more`."""
        return (
            max(self.holders[h].priority for h in more),
            sum(1 for h in more if not self.cuts[h]),
            sum(cut - self.cuts[h] for h, cut in more.items()),
        )

    def _given(self, cuts: Sequence[int]) -> dict[str, int]:
        """GPUs each capped group gives at `cuts`."""
        given: dict[str, int] = {}
        for h, cut in enumerate(cuts):
            group = self.holders[h].group
            if cut and group in self.caps:
                given[group] = given.get(group, 0) + cut * self.gpus[h]
        return given

    def _within_cap(self, h: int, given: Mapping[str, int], more: int) -> bool:
        """Holder h may give `more` workers beyond what its group has `given`: the group
        stays within its cap but for part of the last worker (a share is never given
        back by more than that)."""
        cap = self.caps.get(self.holders[h].group)
        return cap is None or given.get(self.holders[h].group, 0) + (more - 1) * self.gpus[h] < cap

    # -- the queue's GPUs, and when greedy room-making fails ------------------------------

    def _freed_gpus(self, cuts: Sequence[int]) -> int:
        return sum(
            self.gpus[h] * sum(1 for name in holder.nodes[: cuts[h]] if self._useful(name))
            for h, holder in enumerate(self.holders)
        )

    def _cover_gpus(self, gpus: int) -> bool:
        """More workers, on nodes the gang's pods may use, until they free `gpus` GPUs
        (only room comes back: the pods still fit): by priority, a job already giving
        first (it restarts anyway), then in holder order."""
        left, given = gpus - self._freed_gpus(self.cuts), self._given(self.cuts)
        order = sorted(
            range(len(self.holders)),
            key=lambda h: (self.holders[h].priority, 0 if self.cuts[h] else 1, h),
        )
        for h in order:
            if left <= 0:
                break
            self.cuts[h], left = self._extend(h, given, left)
        return left <= 0

    def _extend(self, h: int, given: dict[str, int], left: int) -> tuple[int, int]:
        """Holder h's cut past its useful workers while GPUs are `left` to free (not
        past its last useful one), and the GPUs still left; `given` updated."""
        holder, cut = self.holders[h], self.cuts[h]
        last = cut
        for at in range(cut, len(holder.nodes)):
            if left <= 0 or not self._within_cap(h, given, at + 1 - last):
                break
            if self._useful(holder.nodes[at]):
                left -= self.gpus[h]
                group = holder.group
                given[group] = given.get(group, 0) + (at + 1 - last) * self.gpus[h]
                last = at + 1
        return last, left

    def _gpus_words(self, gpus: int) -> str:
        freed = self._freed_gpus(self.cuts)
        return (
            f"elastic workers it may take on nodes its pods fit free {freed} GPU(s) of "
            f"the {gpus} its queue lacks"
        )

    def _all(self) -> list[int]:
        """Every worker each holder may give up to its last on a node the pods may use,
        within its group's cap."""
        cuts, given = [0] * len(self.holders), dict[str, int]()
        for h, holder in enumerate(self.holders):
            for at in range(len(holder.nodes)):
                if not self._within_cap(h, given, at + 1 - cuts[h]):
                    break
                if self._useful(holder.nodes[at]):
                    group = holder.group
                    given[group] = given.get(group, 0) + (at + 1 - cuts[h]) * self.gpus[h]
                    cuts[h] = at + 1
        return cuts

    def _prune(self) -> None:
        """Room made pod by pod may have taken a job a later pod's room made needless
        (the pods then fit elsewhere): each job giving is tried without, the highest
        priority first, and kept only where the pods need it."""
        giving = [h for h, cut in enumerate(self.cuts) if cut]
        if len(giving) < 2:
            return
        for h in sorted(giving, key=lambda h: (-self.holders[h].priority, -h)):
            kept, self.cuts[h] = self.cuts[h], 0
            if not self._fits_with(self.cuts):
                self.cuts[h] = kept

    def _fallback(self, gpus: int) -> Room:
        """Room one pod at a time found none: with every worker gone either the pods
        still do not fit (why, in node fit's words), or they do (pods placed beside
        each other otherwise than one at a time): then pruned as `_prune` does."""
        cuts = self._all()
        # one shape, no caps: each node takes as many such pods as its room allows,
        # whatever goes elsewhere; none could be freed for one more: none ever will
        alone = len(self.shapes) == 1 and not any(h.group in self.caps for h in self.holders)
        if alone or not self._fits_with(cuts):
            return Room(None, self._why_not(cuts))
        self.cuts = cuts
        self._prune()
        if not self._cover_gpus(gpus):
            return Room(None, self._gpus_words(gpus))
        return Room(tuple(self.cuts))

    def _why_not(self, cuts: Sequence[int]) -> str:
        with self.placer.trial():
            self._release(cuts)
            shape = self._first_unplaced()
            assert shape is not None
            words = self.placer.explain(shape, self.placer.fits(shape))
        return f"with every elastic worker it may take gone, its pods still do not fit: {words}"


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
