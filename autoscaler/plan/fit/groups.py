"""Node groups: Volcano's nodegroup plugin as node fit sees it, for one queue.

The plugin's node filter admits a queue's pod on a node only where the node's group
(label volcano.sh/nodegroup-name) is one the queue may use (`NodeGroups.allows`; in
strict mode an unlabelled node takes no queue's pod, outside it only a queue's that
names no group), and only while what the queue's bound pods request on that group's
nodes, plus the pod, stays within the queue's limit for the group on every resource
the limit names (annotation volcano.sh/nodegroup-resource-limits); a group without a
limit is unlimited, and what a limited group cannot take overflows to the queue's other
groups. So a worker's shape is narrowed to those nodes (one more required node-affinity
requirement, which the Placer's filters already judge), group by group where a limit
counts the workers placed there, and each limit is consumed as workers are placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from autoscaler.core.model import NODE_GROUP_LABEL, NodeGroups, PendingGroup
from autoscaler.core.shapes import (
    GPU_RESOURCE,
    MILLI,
    PodShape,
    Quantities,
    Requirement,
    SelectorTerm,
)

from .placer import Placer

_UNLABELLED = Requirement(NODE_GROUP_LABEL, "DoesNotExist")
_NOWHERE = Requirement(NODE_GROUP_LABEL, "In", ())  # no node: strict, no group named


def with_taken(rules: NodeGroups, taken: tuple[tuple[str, Quantities], ...]) -> NodeGroups:
    """The rules with `taken` (GroupFit.taken: workers in flight) added to what the
    queue's pods hold on each group, so its limits are consumed by them first."""
    if not taken:
        return rules
    held = {g: dict(q) for g, q in rules.allocated}
    for g, used in taken:
        mine = held.setdefault(g, {})
        for res, v in used:
            mine[res] = mine.get(res, 0) + v
    allocated = tuple(sorted((g, tuple(sorted(q.items()))) for g, q in held.items()))
    return replace(rules, allocated=allocated)


def narrowed(shape: PodShape, req: Requirement) -> PodShape:
    """The shape with `req` required of its node as well (ANDed into each of its
    affinity terms, or its one term)."""
    terms = shape.affinity
    if terms is None:
        return replace(shape, affinity=(SelectorTerm((req,)),))
    return replace(
        shape, affinity=tuple(replace(t, expressions=(*t.expressions, req)) for t in terms)
    )


class GroupFit:
    """One queue's node groups over the cycle's shared Placer: how many workers of a
    shape fit (`fits`), placing them (`place`), and what bounded them (`words`)."""

    def __init__(self, queue: str, rules: NodeGroups, placer: Placer) -> None:
        self.queue, self.rules, self.placer = queue, rules, placer
        self.limits = dict(rules.limits)
        allocated = dict(rules.allocated)
        # what each limited group still admits of each resource its limit names
        self.left: dict[str, dict[str, int]] = {
            g: {res: cap - dict(allocated.get(g, ())).get(res, 0) for res, cap in limit}
            for g, limit in self.limits.items()
        }
        groups = rules.groups()
        self.limited = [g for g in groups if g in self.limits]
        free = tuple(g for g in groups if g not in self.limits)
        # the groups without a limit, with unlabelled nodes where the rules let them in
        self.free_req: Requirement | None = (
            Requirement(NODE_GROUP_LABEL, "In", free)
            if free
            else (_UNLABELLED if rules.unlabelled else None)
        )
        # every node the queue may use, for node fit's words
        self.all_req = Requirement(NODE_GROUP_LABEL, "In", tuple(groups)) if groups else None
        self.capped: list[str] = []  # groups whose limit cut the last `fits`
        self._start = {g: dict(left) for g, left in self.left.items()}
        self._shapes: dict[tuple[PodShape, Requirement], PodShape] = {}

    def narrow_gang(self, g: PendingGroup) -> PendingGroup:
        """A waiting gang of the queue with its pods narrowed to the nodes the queue may
        use (its group limits are not counted for it: the scheduler's overflow to the
        queue's other groups is left to it); a gang known by its GPUs alone as it is."""
        if not g.pods:
            return g
        req = self.all_req or self.free_req or _NOWHERE
        return replace(g, pods=tuple((self._in(shape, req), n) for shape, n in g.pods))

    def _in(self, shape: PodShape, req: Requirement) -> PodShape:
        key = (shape, req)
        found = self._shapes.get(key)
        if found is None:
            found = self._shapes[key] = narrowed(shape, req)
        return found

    def _budget(self, shape: PodShape, group: str) -> int | None:
        """Workers of the shape the group's limit still admits; None: no resource the
        limit names is asked for (the limit does not count them)."""
        return _budget_of(shape, self.left[group])

    def _parts(self, shape: PodShape) -> list[tuple[str, PodShape, int | None]]:
        """(group or "", the shape narrowed to it, its limit's budget), in the plugin's
        score order: each limited group, then the others together."""
        parts: list[tuple[str, PodShape, int | None]] = [
            (g, self._in(shape, Requirement(NODE_GROUP_LABEL, "In", (g,))), self._budget(shape, g))
            for g in self.limited
        ]
        if self.free_req is not None:
            parts.append(("", self._in(shape, self.free_req), None))
        return parts

    def fits(self, shape: PodShape, limit: int) -> int:
        """Workers of the shape that fit now on the nodes the queue may use, within its
        group limits (at most `limit`); nothing taken. `capped`: the groups whose limit
        left room unused on their nodes."""
        self.capped = []
        count = 0
        for group, narrow, budget in self._parts(shape):
            if count >= limit:
                break
            room = self.placer.fits(narrow, limit - count)
            if budget is not None and budget < room:
                self.capped.append(group)
                room = budget
            count += room
        return count

    def place(self, shape: PodShape, count: int) -> int:
        """Up to `count` workers placed, group by group, each limit consumed; how many."""
        placed = 0
        for group, narrow, budget in self._parts(shape):
            if placed >= count:
                break
            want = count - placed if budget is None else min(budget, count - placed)
            n = self.placer.place(narrow, want) if want > 0 else 0
            if group:
                for res in self.left[group]:
                    self.left[group][res] -= shape.amount(res) * n
            placed += n
        return placed

    def group_of(self, node: str) -> str | None:
        """The node's group label; None for a node not known or not labelled."""
        found = self.placer._nodes.get(node)
        return None if found is None else dict(found.labels).get(NODE_GROUP_LABEL)

    def gang_beyond(
        self, pods: Sequence[tuple[PodShape, int]], freeable: dict[str, dict[str, int]]
    ) -> str:
        """ "" when a waiting gang's pods fit within the queue's group limits, counting
        what its own pods on each limited group could free (`freeable`, per resource);
        else what bounds it. Only where every group the queue may use is limited (an
        unlimited group or unlabelled nodes take what overflows: node fit decides)."""
        if self.free_req is not None or not self.limited or not pods:
            return ""
        left = {g: dict(v) for g, v in self.left.items()}
        for g, more in freeable.items():
            for res in left.get(g, {}):
                left[g][res] += more.get(res, 0)
        for shape, count in pods:
            for g in self.limited:
                budget = _budget_of(shape, left[g])
                take = count if budget is None else min(count, budget)
                for res in left[g]:
                    left[g][res] -= shape.amount(res) * take
                count -= take
                if count <= 0:
                    break
            if count > 0:
                names = self.placer.gpu_names
                return "; ".join(self._at_limit(g, names) for g in self.limited)
        return ""

    def taken(self) -> tuple[tuple[str, Quantities], ...]:
        """What `place` took of each limited group's limit, per resource it names (the
        workers in flight: they count against the limit once bound)."""
        out = []
        for g, start in sorted(self._start.items()):
            used = tuple(sorted((r, v - self.left[g][r]) for r, v in start.items()))
            if any(v for _, v in used):
                out.append((g, used))
        return tuple(out)

    def words(self, shape: PodShape, fits: int, gpu_names: Sequence[str]) -> str:
        """Why no more than `fits` workers: each group at its limit, else node fit's
        words on the queue's nodes."""
        if self.capped:
            return "; ".join(self._at_limit(g, gpu_names) for g in self.capped)
        req = self.all_req or self.free_req
        if req is None:
            why = (
                "strict mode: a queue that names no node group fits no node"
                if not self.rules.has_affinity
                else "every group it names is excluded (nodeGroupAntiAffinity)"
            )
            return f"node groups: queue {self.queue} may use no node ({why})"
        groups = ", ".join(self.rules.groups()) or "unlabelled nodes"
        return f"node groups of queue {self.queue} ({groups}): " + self.placer.explain(
            self._in(shape, req), fits
        )

    def _at_limit(self, group: str, gpu_names: Sequence[str]) -> str:
        limit = dict(self.limits[group])
        gpus = sum(limit[n] for n in {*gpu_names, GPU_RESOURCE} if n in limit)
        if gpus:
            what = f"{gpus // MILLI} GPUs"
        else:
            what = ", ".join(f"{res} {v / MILLI:g}" for res, v in sorted(limit.items()))
        return f"node group {group}: queue {self.queue} at its limit of {what}"


def _budget_of(shape: PodShape, left: dict[str, int]) -> int | None:
    """Pods of the shape that `left` (what a group's limit still admits, per resource
    it names) takes; None: the shape asks for none of them."""
    most: int | None = None
    for res, room in left.items():
        want = shape.amount(res)
        if want > 0:
            n = max(0, room) // want
            most = n if most is None else min(most, n)
    return most
