"""Covering a gang that does not fit: elastic workers reclaimed in its queue, lent
shares given back by other queues (rule 3).

Whole workers, by victims.py's order, and only if that makes the gang fit: by GPUs, or,
where its pods' shapes and the nodes are known, on the nodes its pods go to, of every
resource they ask (fit.make_room, "reclaim by nodes" in docs/design.md). Each reclaim is
weighed first (weigh.py). A gang served takes its nodes' room, so later gangs and growth
see it taken."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import timedelta

from autoscaler.core.model import PendingGroup
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339
from autoscaler.core.shapes import MILLI

from .fit import Holder, Room, describe_shape, room_for
from .victims import _VictimPool, holder_of, may_give_way, victims_of_cuts
from .weigh import WeighRules, _Covered
from .work import _SERVED, _gpus_of, _Job, _running_taken


class ReclaimRules(WeighRules):
    """Rule mixin: who covers a gang's shortfall (victims in its queue, lent shares),
    by GPUs or by nodes, and the reclaim that gives their workers to it."""

    def _cover(
        self, g: PendingGroup, shortfall: int, pool: _VictimPool, gpus_short: int
    ) -> _Covered:
        """Who covers the gang's shortfall: (victims in its queue, jobs of other queues
        giving back its share); why nobody can; or the trade of a reclaim that does not
        pay. Its own queue's elastic workers first, then what
        other queues hold of its share (lent). Rule 3b weighs the reclaim inside the
        queue (its gain: the wait for the GPUs those victims cover); what other queues
        give back is owed, not traded: where the reclaim inside does not pay, the gang
        still gets its share back if that alone covers it. Where the gang's pods and the
        nodes are known, by nodes (_cover_by_nodes); else by GPUs alone."""
        # Elastic workers are created last and destroyed first: by default any job's
        # extra workers may go (lowest priority first), whatever the gang's priority.
        limit = math.inf if self.policy.reclaim_from_higher_priority else g.priority
        if self.nodes is not None and g.pods:
            return self._cover_by_nodes(g, shortfall, pool, limit, max(0, gpus_short))
        lent: list[tuple[_Job, int]] = []
        loan = self._on_loan(g)
        local = 0 if loan else pool.reclaimable(limit)
        if local < shortfall:
            # then from other queues holding more than their share (lent shares)
            found, why = self._lent(g, shortfall - local, limit)
            if found is None:
                return "; ".join(w for w in (loan, why) if w)
            lent = found
        left = shortfall - _gpus_of(lent)
        skip = self._resized_now(g, left) if left > 0 else frozenset()
        victims = pool.take(left, limit, skip) if left > 0 else []
        if skip and _gpus_of(victims) < left:
            pool.put_back(victims)
            if self.lenders is not None and lent:
                self.lenders.restore(g, lent)
            why = (
                "the rest of what could give way was resized by this plan already "
                f"(reclaim_cooldown_seconds={self.policy.reclaim_cooldown_seconds:g})"
            )
            return why  # uncoverable this cycle, as the next plan sees it
        if not victims:
            return victims, lent
        trade = self._swap_check(g, victims, self._reclaim_trade(g, left, victims))
        if trade.pays(self.policy.reclaim_payoff_factor):
            return victims, lent
        pool.put_back(victims)
        if self.lenders is not None and lent:
            self.lenders.restore(g, lent)
        owed, _ = self._lent(g, shortfall, limit)
        if owed is not None:  # its share alone covers it: owed, not weighed
            return [], owed
        return trade

    def _cover_by_nodes(
        self, g: PendingGroup, shortfall: int, pool: _VictimPool, limit: float, gpus_short: int
    ) -> _Covered:
        """_cover where the gang's pods and the nodes are known: the victims are chosen
        by fit.make_room, so that once their workers are gone every pod of the gang
        fits on a node (every resource it asks, not only GPUs), all in this one
        reclaim, with the fewest jobs restarted; workers whose going helps no pod of
        it stay. Counting GPUs alone took one worker a cycle from a node a CPU-heavy
        pod could not use yet (each cycle a restart), or workers on nodes that never
        fit it. The queue's own jobs first, then lent shares; the payoff rule weighs
        the victims of its queue, as by GPUs."""
        loan = self._on_loan(g)
        skip = self._resized_now(g, shortfall)
        local = [] if loan else [w for w in pool.ordered(limit) if id(w) not in skip]
        room, why = self._room(g, local, [], gpus_short), ""
        lenders: list[tuple[_Job, str]] = []
        if room.cuts is None:
            lenders, why = self._lending(g, limit)
            if lenders:
                room = self._room(g, local, lenders, gpus_short)
        if room.cuts is None:
            return "; ".join(w for w in (room.why, loan, why) if w)
        victims, lent = (
            victims_of_cuts(local, room.cuts),
            victims_of_cuts(lenders, room.cuts[len(local) :]),
        )
        if victims:
            trade = self._reclaim_trade(g, shortfall - _gpus_of(lent), victims)
            trade = self._swap_check(g, victims, trade)
            if not trade.pays(self.policy.reclaim_payoff_factor):
                lenders = lenders or self._lending(g, limit)[0]
                owed = self._room(g, [], lenders, gpus_short) if lenders else None
                if owed is None or owed.cuts is None:
                    return trade
                victims, lent = [], victims_of_cuts(lenders, owed.cuts)  # owed, not weighed
        if lent and self.lenders is not None:
            self.lenders.charge(g, lent)
        pool.claim(victims)
        return victims, lent

    def _room(
        self, g: PendingGroup, local: list[_Job], lenders: list[tuple[_Job, str]], gpus: int
    ) -> Room:
        """fit.make_room for g's pods from these victims (lenders: with their queue,
        each queue giving no more than it holds beyond its share)."""
        assert self.nodes is not None
        holders = [self._holder_kept(w) for w in local] + [
            self._holder_kept(w, q) for w, q in lenders
        ]
        caps = self.lenders.caps() if self.lenders is not None and lenders else {}
        # a full queue's waiting gangs are often alike and none fits: asked once each
        # until a gang is placed or a reclaim changes the nodes (cleared there)
        among = (tuple(holders), tuple(sorted(caps.items())))
        key = (g.pods, gpus, among)
        found = self._no_room.failed.get(key)
        if found is None:
            found = room_for(self.nodes, g.pods, holders, gpus, caps, (self._no_room, among))
            if found.cuts is None:
                self._no_room.failed[key] = found
        return found

    def _holder_kept(self, w: _Job, group: str = "") -> Holder:
        """holder_of, remembered while the job's target stays (asked again per gang)."""
        key = (id(w), group)
        found = self._holders.get(key)
        if found is None or found[0] != w.target:
            found = self._holders[key] = (w.target, holder_of(w, group))
        return found[1]

    def _lending(self, g: PendingGroup, limit: float) -> tuple[list[tuple[_Job, str]], str]:
        """Jobs of other queues holding more than their share that may give g's queue
        its share back (with their queue), most over first; or why none may."""
        if self.lenders is None:
            return [], ""
        why = self.lenders.within(g)
        if why:
            return [], why
        lenders = self.lenders
        found = [
            (w, name)
            for name, _, pool in lenders.pools(g)
            for w in lenders.ordered(name, pool, limit)
        ]
        return found, "" if found else "no other queue holds more than its share"

    def _on_loan(self, g: PendingGroup) -> str:
        """Rule 3c (_Lenders.on_loan): why g may not take its own queue's elastic
        workers, "" when it may (or where shares are unknown)."""
        if self.lenders is None:
            return ""
        return self.lenders.on_loan(g, self._locked_gpus())

    def _locked_gpus(self) -> int:
        """GPUs the queue's gangs hold: its running jobs' minimum workers (once per
        plan) and the gangs served so far in this plan (counted in _gang)."""
        if self._locked is None:
            self._locked = sum(
                min(w.job.active, w.job.min_replicas) * w.job.gpus_per_worker for w in self.work
            ) + sum(d.gpus for d in self.gangs if d.reason in _SERVED)
        return self._locked

    def _uncredited(self, g: PendingGroup) -> int:
        """GPUs the gang still needs: an admitted (Inqueue) gang's are already out of
        `free` (the capacity plugin's inqueue), as far as they go."""
        need = g.gpus
        if g.phase == "Inqueue" and self.admitted > 0:
            credit = min(self.admitted, need)
            self.admitted -= credit
            self.credited += credit
            need -= credit
        return need

    def _released_back(self, g: PendingGroup, short: int) -> int:
        """GPUs other queues' jobs are releasing that were given back for g's share
        (_Lenders.releasing), added to what g's queue has being released: taken from
        lenders again instead, they would be given twice (rule 2). Their workers' nodes
        are g's room again."""
        if self.lenders is None or short <= 0:
            return 0
        found, stale = self.lenders.releasing(g, short)
        if self.nodes is not None and g.pods:
            self._no_room.clear()  # the nodes change
            for w, n in found:
                j, end = w.job, w.job.replicas + self.lenders.released[id(w)]
                for i in range(end - n, end):
                    if 0 <= i < len(j.worker_nodes) and j.worker_nodes[i]:
                        self.nodes.release(j.worker_nodes[i], j.worker_shape)
        return _gpus_of(found) + stale

    def _lent(
        self, g: PendingGroup, short: int, limit: float
    ) -> tuple[list[tuple[_Job, int]] | None, str]:
        """Victims in other queues that give back what they hold of g's queue's share,
        or None and why not ("" when there are no shares to speak of)."""
        if self.lenders is None:
            return None, ""
        why = self.lenders.within(g)
        if why:
            return None, why
        found = self.lenders.cover(g, short, limit)
        if found is None:
            why = self.lenders.too_little()
            cooling = self.lenders.cooling(g, short, limit)
            if cooling is not None:
                left, names = cooling
                until = rfc3339(self.now + timedelta(seconds=left))
                why = (
                    "what other queues hold of its share is in their jobs' reclaim "
                    f"cooldown: it waits for {names} (reclaim_cooldown_seconds="
                    f"{self.policy.reclaim_cooldown_seconds:.0f}), until {until} (in {left:.0f}s)"
                )
        return found, why

    def _reclaim(
        self,
        g: PendingGroup,
        victims: list[tuple[_Job, int]],
        pool: _VictimPool,
        idle: int,
        releasing: int,
        lent: Iterable[tuple[_Job, int]] = (),
        ahead: Sequence[PendingGroup] = (),
    ) -> tuple[int, int]:
        """Take the victims' workers for gang `g`: those never placed come back as idle,
        running ones are released; `lent`'s, other queues', are all the gang's (what
        they free is not this queue's idle). `ahead`: gangs refused a reclaim alone that
        this one serves too (a victim names them all). Returns the new idle and releasing
        GPUs."""
        left: list[str] = []
        self._no_room.clear()  # the nodes and the victims change
        for w, workers in (*victims, *lent):  # in make_room's order: the room it planned
            left += self._release_workers(w, workers, g)
        served = [f"{x.ref.namespace}/{x.ref.name}" for x in (*ahead, g)]
        given = self._give_back(g, lent, served)
        releasing += given
        gained = 0
        for w, workers in victims:
            j = w.job
            unplaced = workers - _running_taken(w, workers)
            idle += unplaced * j.gpus_per_worker
            releasing += (workers - unplaced) * j.gpus_per_worker
            gained += workers * j.gpus_per_worker
            w.target -= workers
            w.victim_of = [*(w.victim_of or ()), *served]
            self._decide(
                w,
                w.target,
                Reason.RECLAIM_FOR_PENDING,
                f"{j.replicas} -> {w.target} worker(s) to make room for PodGroup "
                f"{', '.join(w.victim_of)}",
            )
            pool.taken(w, workers)
        self.reclaimed += gained + given
        message = (
            f"{g.ref} needs {g.gpus} GPU(s): {gained} reclaimed from {len(victims)} elastic job(s)"
        )
        lent = list(lent)
        if lent:
            queues = sorted({w.job.queue for w, _ in lent})
            message += (
                f", {given} given back from {len(lent)} job(s) of queue(s) "
                f"{', '.join(queues)} holding more than their share"
            )
        message += self._room_words(g, left)
        self._gang(g, Reason.GANG_COVERED, message, tuple(w.key for w, _ in (*victims, *lent)))
        return idle, releasing

    def _give_back(
        self, g: PendingGroup, lent: Iterable[tuple[_Job, int]], served: list[str]
    ) -> int:
        """Lent shares come back: each job of another queue gives its workers to g (and
        to `served`, the gangs this reclaim serves)."""
        given = 0
        for w, workers in lent:
            j = w.job
            gpus = workers * j.gpus_per_worker
            given += gpus
            target = w.target - workers
            w.victim_of = [*(w.victim_of or ()), *served]
            self._decide(
                w,
                target,
                Reason.RECLAIM_FOR_QUEUE,
                f"{j.replicas} -> {target} worker(s): gives back {gpus} GPU(s) of queue "
                f"{g.queue}'s share to its gang {g.ref.namespace}/{g.ref.name} (queue "
                f"{j.queue} holds more than its own share)",
            )
        return given

    def _node_short(self, g: PendingGroup) -> tuple[int, bool]:
        """GPUs of the gang's pods that no node takes now, and whether every pod finds a
        node (a pod without GPUs, a launcher asking most of a node's CPUs, may not:
        the gang does not start then either). (0, True) where its pods' shapes or the
        nodes are unknown, when GPUs alone decide."""
        if self.nodes is None or not g.pods:
            return 0, True
        left = self.nodes.unplaced(g.pods)
        names = self.nodes.gpu_names
        gpus = sum(
            n * sum(shape.amount(r) for r in names) // MILLI
            for (shape, _), n in zip(g.pods, left, strict=True)
        )
        return gpus, not any(left)

    def _place_gang(self, g: PendingGroup) -> None:
        """The gang's pods take their nodes' room now, so later gangs and growth see it
        taken (pods whose shapes are unknown take GPUs from the emptiest nodes later)."""
        if self.nodes is None or not g.pods:
            return
        self._no_room.clear()  # the nodes changed
        names = self.nodes.gpu_names
        for shape, count in g.pods:
            placed = self.nodes.place(shape, count)
            self.placed_gang_gpus += placed * sum(shape.amount(r) for r in names) // MILLI

    def _release_workers(self, w: _Job, workers: int, g: PendingGroup) -> list[str]:
        """The victim's `workers` highest-index workers go: their nodes' room comes back
        for the gang (only a gang whose pods' shapes are known is placed by them).
        Returns the nodes they leave."""
        if self.nodes is None or not g.pods:
            return []
        where, left = w.job.worker_nodes, []
        for i in range(w.target - 1, w.target - 1 - workers, -1):
            if 0 <= i < len(where) and where[i]:
                self.nodes.release(where[i], w.job.worker_shape)
                left.append(where[i])
        return left

    def _room_words(self, g: PendingGroup, left: Iterable[str]) -> str:
        """Where the reclaim made room for the gang's pods, in words: the nodes its
        victims' workers leave that its pods may use ("" by GPUs alone)."""
        nodes = self.nodes
        if nodes is None or not g.pods:
            return ""
        shapes = tuple(dict.fromkeys(shape for shape, _ in g.pods))  # in the gang's order
        names = sorted({n for n in left if any(nodes.admits_node(s, n) for s in shapes)})
        what = "; ".join(describe_shape(s, nodes.gpu_names) for s in shapes)
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        return f"; node fit: room for its pods ({what}) on node(s) {shown or 'none'}"

    def _victims(self) -> list[_Job]:
        """Jobs whose extra workers a waiting gang may take: above min, out of reclaim
        cooldown, with a trustworthy annotation and not waiting for their own gang."""
        if not self.pending:
            return []
        cool = self.policy.reclaim_cooldown_seconds
        return [w for w in self.work if may_give_way(w, cool)]
