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
from autoscaler.core.shapes import GPU_RESOURCE, MILLI, PodShape, Requirement, SelectorTerm

from .placer import Placer

_UNLABELLED = Requirement(NODE_GROUP_LABEL, "DoesNotExist")
_NOWHERE = Requirement(NODE_GROUP_LABEL, "In", ())  # no node: strict, no group named


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
        most: int | None = None
        for res, left in self.left[group].items():
            want = shape.amount(res)
            if want > 0:
                n = max(0, left) // want
                most = n if most is None else min(most, n)
        return most

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
