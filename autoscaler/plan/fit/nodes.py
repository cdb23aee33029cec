"""The nodes as this cycle places pods on them: classes and buckets.

Grouping is what makes fit fast at scale: nodes are grouped into classes by what the
filters read (labels but the hostname, taints, Ready, cordoned), so the filters run once
per shape and class; within a class, nodes with the same free room and host ports are
one bucket (a name list), so a placement scans buckets, not nodes.

`_Buckets`, the Placer's base (placer.py), keeps the books: it moves node names between
buckets as the Placer takes and gives back room, and records the moves (`_Move`,
`_Snapshot`) so that a trial can be undone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

from autoscaler.core.model import Node
from autoscaler.core.shapes import GPU_RESOURCE, MILLI, HostPort, Labels, Quantities, Taint

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


class _Buckets:
    """The books of a Placer: each node's class and bucket as pods are placed and
    released, moving a node between buckets, and undoing moves (a trial). The Placer
    (placer.py) decides what moves; keeping the books here keeps undo in one place."""

    def __init__(self, nodes: Iterable[Node], start: _Grouping | None) -> None:
        self._all: Sequence[Node] = nodes if isinstance(nodes, tuple | list) else tuple(nodes)
        # built when first asked for (a cycle that places nothing by name needs neither)
        self._nodes_by_name: dict[str, Node] | None = None
        self._where: dict[str, tuple[_Class, _Key]] | None = None
        # what to undo (a trial, `unplaced`): moves and bulk releases, in order
        self._undo: list[_Move | _Snapshot] | None = None
        self._dicts: dict[Quantities, dict[str, int]] = {}
        grouping = _grouped(self._all) if start is None else start
        self._classes = {
            ckey: _Class(node, {key: list(names) for key, names in buckets})
            for ckey, (node, buckets) in grouping.items()
        }
        self.version = 0  # bumped by every change: callers may cache what they read

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

    def _dict(self, free: Quantities) -> dict[str, int]:
        d = self._dicts.get(free)
        if d is None:
            d = self._dicts[free] = dict(free)
        return d

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
        # best fit takes a bucket's last node (placer._best): found there at once; a scan
        # from the front cost the length of the bucket, thousands of idle nodes, per pod
        # placed (#45). A node is in one bucket once, so either finds the same place.
        at = len(names) - 1 if names[-1] == name else names.index(name)
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
            if names[-1] == name:  # the last move is undone first: at the end (as above)
                names.pop()
            else:
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
