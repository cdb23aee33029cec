"""Making room: which workers a reclaim takes so that a gang's pods fit on the nodes.

A queue owed GPUs gets them back from elastic workers of other jobs; but GPUs freed on
nodes its pods cannot use, or scattered so that no node takes a whole pod, start
nothing. `make_room` picks the workers to take node by node, as the scheduler will see
the room they leave (the Placer of placer.py, tried and undone), the cheapest first:
lowest priority, fewest jobs restarted, fewest workers.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.core.shapes import MILLI, PodShape

from .filters import ports_conflict, short_of
from .placer import Placer


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


_Pods = tuple[tuple[PodShape, int], ...]


@dataclass(slots=True)
class RoomMemo:
    """What `make_room` calls over the same nodes leave for later ones; valid while the
    Placer is not changed outside its trials (`clear()` where it is).

    `failed`: rooms found impossible, by the caller's key. `greedy`: per holders and
    caps, the last greedy phase run (its pods, and the cuts it ended with, or None when
    it fell back to every worker at once). A gang behind gangs refused a reclaim is
    weighed with all of them (rule 3b), its pods after theirs: the greedy phase for
    those pods passes through exactly the state the run for the pods ahead ended in
    (each step serves the first pod in order that finds no node, and pods ahead are
    placed the same whatever follows them), so it starts there. Without it, G refused
    gangs cost G^2 x (jobs + nodes)."""

    failed: dict[Hashable, Room] = field(default_factory=dict)
    greedy: dict[Hashable, tuple[_Pods, tuple[int, ...] | None]] = field(default_factory=dict)

    def clear(self) -> None:
        self.failed.clear()
        self.greedy.clear()

    def start(self, key: Hashable, pods: _Pods) -> tuple[int, ...] | None:
        """The greedy state to start from for `pods`: the cuts a run for a prefix of
        them ended with (() when none is kept: from nothing taken), None when that run
        fell back (so will this one)."""
        kept = self.greedy.get(key)
        if kept is None:
            return ()
        ran, cuts = kept
        if len(ran) > len(pods) or pods[: len(ran)] != ran:
            return ()
        return cuts


def make_room(
    placer: Placer,
    pods: Sequence[tuple[PodShape, int]],
    holders: Sequence[Holder],
    gpus: int = 0,
    caps: Mapping[str, float] | None = None,
    memo: tuple[RoomMemo, Hashable] | None = None,
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
    the check, as the planner then does it.

    `memo`: a RoomMemo and the key of these holders and caps in it (the same Room,
    found from where a run for the pods ahead of these ended)."""
    search = _RoomSearch(placer, pods, holders, caps or {})
    return search.run(gpus, memo)


_PORTS = " host ports"  # in a node's lack: no resource name has a space


class _RoomSearch:
    """One `make_room` call's search: `cuts[h]` is how many workers of holder h go so far.

    Greedy, pod by pod: release the cuts, place the gang in order, and for the first pod
    that finds no room free the cheapest node that can take it (`_cheapest`); then drop
    any job a later pod's room made needless (`_prune`), and take more workers until the
    queue's GPUs are covered (`_cover_gpus`). When freeing one node at a time finds
    nothing, every worker gone is tried at once (`_fallback`), which also says why not.
    Every try runs inside `placer.trial()`, so the Placer is left as it was."""

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

    def run(self, gpus: int, memo: tuple[RoomMemo, Hashable] | None = None) -> Room:
        if not self._greedy(memo):
            return self._fallback(gpus)
        self._prune()
        if not self._cover_gpus(gpus):
            return Room(None, self._gpus_words(gpus))
        return Room(tuple(self.cuts))

    def _greedy(self, memo: tuple[RoomMemo, Hashable] | None) -> bool:
        """Room pod by pod: False when a pod finds no node that can be freed for it."""
        pods = tuple(self.pods)
        if memo is not None:
            start = memo[0].start(memo[1], pods)
            if start is None:
                return False
            if start:
                self.cuts = list(start)
        ok = self._greedy_steps()
        if memo is not None:
            memo[0].greedy[memo[1]] = (pods, tuple(self.cuts) if ok else None)
        return ok

    def _greedy_steps(self) -> bool:
        while True:
            with self.placer.trial():
                self._release(self.cuts)
                short = self._first_unplaced()
                more = None if short is None else self._cheapest(short)
            if short is None:
                return True
            if more is None:
                return False
            for h, cut in more.items():
                self.cuts[h] = cut

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
        order = sorted(giving, key=lambda h: (-self.holders[h].priority, -h))
        if self._alike():
            self._prune_alike(order)
        else:
            self._prune_each(order)

    def _prune_each(self, order: list[int]) -> None:
        for h in order:
            kept, self.cuts[h] = self.cuts[h], 0
            if not self._fits_with(self.cuts):
                self.cuts[h] = kept

    def _alike(self) -> bool:
        """The pods are of one shape and no pod involved holds a host port: then they all
        fit exactly when the nodes have room for as many (each node takes what its room
        allows, whatever the others take), and a job's workers kept are its room taken
        again."""
        return len(self.shapes) == 1 and not any(
            s.host_ports for s in (*self.shapes, *(h.shape for h in self.holders))
        )

    def _prune_alike(self, order: list[int]) -> None:
        """_prune for alike pods: every cut released once, each job tried by taking its
        workers' room again and counting the pods the nodes take (not placing them all
        once per job tried: a gang weighed with the G gangs refused ahead of it would
        place all their pods once per job giving, G^3 over a queue's gangs)."""
        (shape,) = self.shapes
        count = sum(n for _, n in self.pods)
        with self.placer.trial():
            self._release(self.cuts)
            for h in order:
                holder = self.holders[h]
                gone = [name for name in holder.nodes[: self.cuts[h]] if name]
                for name in gone:
                    self.placer.occupy(name, holder.shape)
                if self.placer.fits(shape, count) >= count:
                    self.cuts[h] = 0
                    continue
                for name in gone:
                    self.placer.release(name, holder.shape)

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
