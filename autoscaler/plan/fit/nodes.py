"""The nodes as this cycle places pods on them: classes and buckets.

Grouping is what makes fit fast at scale: nodes are grouped into classes by what the
filters read (labels but the hostname, taints, Ready, cordoned), so the filters run once
per shape and class; within a class, nodes with the same free room and host ports are
one bucket (a name list), so a placement scans buckets, not nodes. The Placer
(placer.py) moves node names between buckets as it takes and gives back room, and
records the moves (`_Move`, `_Snapshot`) so that a trial can be undone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from autoscaler.core.model import (
    GPU_RESOURCE,
    MILLI,
    HostPort,
    Labels,
    Node,
    Quantities,
    Taint,
)

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
