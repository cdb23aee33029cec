"""Shares lent across queues come back (rule 3, "Sharing a cluster between queues" in
docs/design.md).

A queue holding more than its own share lent the rest while nobody asked. A waiting
gang of a queue within its share takes elastic workers back from such queues, by the
rules of reclaim inside a queue (victims.py), never taking a queue below its share.
Volcano's default actions never reclaim across queues: without this, the gang waits
until the lender's jobs end. Rule 3c (`_Lenders.on_loan`): a gang does not take its own
queue's workers that are on loan, since nothing gives a gang back."""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoscaler.core.model import ClusterSnapshot, PendingGroup, Plugin
from autoscaler.core.policy import PlannerPolicy
from autoscaler.core.reasons import Reason

from .cluster import _Cluster
from .headroom import real_capability
from .inflight import NoPods
from .shares import deserved_of
from .victims import _VictimPool, may_give_way
from .work import _EPS, _gpus_of, _Job, _plans, _waits_for_own_gang, own_gangs_waiting


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every queue planner of one plan reads beside its own queue."""

    no_pods: NoPods
    lenders: _Lenders | None


class _Lenders:
    """Lent shares come back (docs/design.md "Sharing a cluster between queues"): a
    queue holding more than its own share lent the rest while nobody asked; a waiting
    gang of a queue within its share takes elastic workers back from such queues, by the
    rules of reclaim inside a queue (_VictimPool), never taking a queue below its share
    by more than part of one worker. Volcano's default actions never reclaim across
    queues: without this, the gang waits until the lender's jobs end."""

    def __init__(
        self,
        shares: dict[str, float],
        best_effort: set[str],
        held: dict[str, float],
        usable: set[str],
        work: dict[str, list[_Job]],
        policy: PlannerPolicy,
        snapshot: ClusterSnapshot,
    ) -> None:
        self.shares, self.best_effort, self.held = shares, best_effort, held
        self.usable, self.work, self.policy = usable, work, policy
        # what each queue keeps whoever asks (its deserved under capacity, its weight's
        # part of the cluster among the queues with jobs under proportion): beyond it, it
        # holds others' idle share
        self.owned = dict(shares)
        # what locks a job in its own queue's accounting (_account), known before that
        # queue is planned: a job taken here must not be locked there at its old size
        self.own = own_gangs_waiting(list(snapshot.pending))
        self.refusals = {(r.ref.namespace, r.ref.name, r.ref.kind): r for r in snapshot.refusals}
        self.cluster: _Cluster | None = None  # under hierarchy: its tree and ancestors' room
        # Each queue's jobs that may lend, as a victim pool, indexed once and kept while
        # none of them changes (`touched`, from every decision on a job: its target,
        # reason or lock), so that G gangs asking over J jobs do not test every job of
        # every other queue again per gang (a gangs x jobs term, #45). The plain scan,
        # `_lendable`, is what the index holds: the same pools, the same plans.
        self._version: dict[str, int] = {}
        self._pools: dict[str, tuple[int, list[_Job], _VictimPool]] = {}
        self._ordered: dict[tuple[str, float], tuple[int, list[_Job]]] = {}
        self.released: dict[int, int] = {}  # workers being released, credited (`releasing`)
        # each queue's jobs releasing workers (spec below active), found once per plan:
        # every gang short of its share asked every job of every other queue again
        # (gangs x jobs, #45); a job's spec and active count do not change in a plan
        self._releasing: dict[str, list[_Job]] = {}
        self.stale = self._stale(snapshot)  # GPUs still counted, no longer held (`releasing`)

    @classmethod
    def of(
        cls,
        snapshot: ClusterSnapshot,
        cluster: _Cluster,
        work: dict[str, list[_Job]],
        policy: PlannerPolicy,
    ) -> _Lenders | None:
        """Each queue's share and what it holds (allocated + admitted), by its plugin:
        capacity, its deserved (shares.deserved_of; a best-effort queue is owed
        nothing); proportion, the water-fill of everyone's asks (Limits.shares)."""
        view, total = cluster.view, cluster.view.total_gpus
        if view.plugin is Plugin.GIVEN or total is None:
            return None
        shares, best_effort = cluster.limits.shares(), set()
        tree = cluster.tree
        if view.plugin is Plugin.CAPACITY:
            for name, q in view.queues.items():
                # under hierarchy deserved is not capped at the real capability
                real = (
                    math.inf
                    if tree.on
                    else real_capability(q, total, cluster.limits.total_guarantee)
                )
                deserved = deserved_of(q, real)
                shares[name] = deserved or 0.0
                if deserved is None:
                    best_effort.add(name)
        held = {name: q.allocated + q.inqueue for name, q in view.queues.items()}
        # what a lender is still releasing is credited to the gang it went to (`releasing`)
        usable = {name for name, state in snapshot.queues.items() if _plans(state) and name in held}
        if tree.on:
            usable = {n for n in usable if not tree.is_parent(n)}  # its leaves lend
        lenders = cls(shares, best_effort, held, usable, work, policy, snapshot)
        if tree.on:
            lenders.cluster = cluster
        if view.plugin is Plugin.PROPORTION:
            lenders.owned = cluster.limits.owned()
        return lenders

    def within(self, g: PendingGroup) -> str:
        """ "" when g's queue, with g, stays within its share; else why not."""
        q = g.queue
        if q not in self.shares or q in self.best_effort:
            return f"queue {q} is owed no share (no deserved, no guarantee)"
        adds = 0 if g.phase == "Inqueue" else g.gpus  # an admitted gang is in inqueue
        held, share = self.held.get(q, 0.0), self.shares[q]
        if held + adds > share + _EPS:
            return (
                f"queue {q} would hold {held + adds:g} GPU(s) with it, beyond its share "
                f"{share:g}: nothing is taken back from other queues for it"
            )
        return ""

    def on_loan(self, g: PendingGroup, locked: float) -> str:
        """Rule 3c: "" when g's queue, its gangs holding `locked` GPUs (its jobs' minimum
        and the gangs served this plan), may start g by taking its own elastic workers;
        else why not. Beyond what the queue keeps whoever asks (`owned`), the GPUs its
        elastic workers hold are on loan: given back in one restart when another
        queue's gang asks for its share (rule 3, lent shares). A gang started on them
        holds them until its job ends, and no give-back reaches a gang, so the lenders'
        shares would wait on the borrower's run times. Volcano still starts g on GPUs
        that free (its own plugin's rule); only the reclaim is not made."""
        q = g.queue
        owned = self.owned.get(q)
        if owned is None or q in self.best_effort or locked + g.gpus <= owned + _EPS:
            return ""
        return (
            f"queue {q}'s gangs hold {locked:g} GPU(s) at their jobs' minimum; with it "
            f"{locked + g.gpus:g}, beyond the {owned:g} the queue keeps whoever asks: its "
            "elastic workers are on loan from other queues' shares and are not turned "
            "into a gang's, which nothing gives back until its job ends"
        )

    def pools(self, g: PendingGroup) -> list[tuple[str, float, _VictimPool]]:
        """The other queues over their share, most over first: (queue, GPUs over, its
        jobs that may lend as victims)."""
        pools = []
        for name in self._others(g):
            over = min(self._over(name), self._over_above(g, name))
            if over <= _EPS:  # gives nothing: its jobs are not asked
                continue
            jobs, pool = self._pool(name)
            if jobs:
                pools.append((name, over, pool))
        return pools

    def touched(self, queue: str) -> None:
        """A job of `queue` was decided on (its target, reason or lock changed): its
        pool is indexed again when next asked."""
        self._version[queue] = self._version.get(queue, 0) + 1

    def ordered(self, name: str, pool: _VictimPool, limit: float) -> list[_Job]:
        """pool.ordered(limit) for a pool `pools` gave, kept while its queue is
        untouched (by nodes, every gang asks for every lender's jobs in order)."""
        version = self._version.get(name, 0)
        kept = self._ordered.get((name, limit))
        if kept is None or kept[0] != version or self._pools[name][2] is not pool:
            kept = self._ordered[(name, limit)] = (version, pool.ordered(limit))
        return kept[1]

    def _pool(self, name: str) -> tuple[list[_Job], _VictimPool]:
        """The queue's jobs that may lend and their pool, indexed again only after a
        job of the queue was decided on (`touched`) or the pool was taken from."""
        version = self._version.get(name, 0)
        kept = self._pools.get(name)
        if kept is None or kept[0] != version:
            jobs = self._lendable(name)
            kept = self._pools[name] = (version, jobs, _VictimPool(jobs, self.policy))
        return kept[1], kept[2]

    def _lendable(self, name: str) -> list[_Job]:
        """The plain scan: every job of the queue that may lend now, in its work order."""
        return [w for w in self.work.get(name, ()) if self._may_lend(w)]

    def _others(self, g: PendingGroup) -> list[str]:
        """The other queues that may lend to g, in the order they are asked: most over
        their share first, nearest in the tree first under hierarchy."""
        by_over = sorted(self.usable - {g.queue}, key=lambda n: (-self._over(n), n))
        return self._nearest(g, by_over)

    def _nearest(self, g: PendingGroup, names: list[str]) -> list[str]:
        """Under hierarchy, the lenders whose workers free room where g's queue lacks it:
        under its nearest ancestor too full for g (a cousin's GPUs would not make that
        ancestor's room), nearest in the tree first (siblings, then up: as the
        capacity plugin orders victims); `names` as they are otherwise."""
        cluster = self.cluster
        if cluster is None:
            return names
        tree = cluster.tree
        up = tree.ancestors(g.queue)
        adds = 0 if g.phase == "Inqueue" else g.gpus
        full = [a for a in up if cluster.room_above.get(a, math.inf) < adds - _EPS]
        if full:
            under = set(tree.leaves_under(full[0]))
            names = [n for n in names if n in under]

        def distance(name: str) -> int:
            theirs = set(tree.ancestors(name))
            return next((i for i, a in enumerate(up) if a in theirs), len(up))

        return sorted(names, key=distance)  # stable: most over first at each distance

    def _over_above(
        self, g: PendingGroup, name: str, given: dict[str, float] | None = None
    ) -> float:
        """Under a tree, with the capacity plugin's ancestorReclaimLevel L > 0: how much
        queue `name` may give g at most, by its ancestors 1..L levels above it that g's
        queue does not share at the same level: each must hold more than its deserved
        (one with no deserved bounds nothing), as the plugin's reclaimableFn checks;
        `given`: GPUs lenders already gave (no longer held). Unbounded otherwise (L 0:
        only each queue's own deserved counts)."""
        level, cluster = self.policy.capacity_ancestor_reclaim_level, self.cluster
        if cluster is None or level <= 0:
            return math.inf
        tree, given = cluster.tree, given or {}
        mine, theirs = tree.ancestors(g.queue), tree.ancestors(name)
        over = math.inf
        for k, a in enumerate(theirs[:level]):
            if (k < len(mine) and mine[k] == a) or a in self.best_effort or a not in self.shares:
                continue
            held = sum(self.held.get(n, 0.0) - given.get(n, 0.0) for n in tree.leaves_under(a))
            over = min(over, held - self.shares[a])
        return over

    def cover(self, g: PendingGroup, short: int, limit: float) -> list[tuple[_Job, int]] | None:
        """Victims in other queues over their share that cover `short` GPUs for g, most
        over first, each queue's by _VictimPool's order; None when they cannot."""
        pools = self.pools(g)
        if sum(min(over, pool.reclaimable(limit)) for _, over, pool in pools) < short:
            return None
        taken: list[tuple[_Job, int]] = []
        given: dict[str, float] = {}  # under a tree: what each lender gave so far
        for name, over, pool in pools:
            if short <= 0:
                break
            if given:  # lenders under one ancestor share what it holds over its deserved
                over = min(over, self._over_above(g, name, given))
            if over <= _EPS:
                continue
            self.touched(name)  # `take` changes the pool: the next ask builds it afresh
            part = pool.take(math.ceil(min(short, over)), limit)
            short -= _gpus_of(part)
            taken += part
            given[name] = given.get(name, 0.0) + _gpus_of(part)
        if short > 0:
            return None
        self.charge(g, taken)
        return taken

    def releasing(self, g: PendingGroup, short: int) -> tuple[list[tuple[_Job, int]], int]:
        """Rule 2 across queues: GPUs other queues over their share are releasing,
        credited to g up to `short`, each once per plan, never more than their queue
        holds beyond its share: (workers of jobs whose spec is below what runs, their
        pods still on their nodes; GPUs Volcano still counts as a queue's allocated that
        its jobs no longer hold). Both are what an earlier cycle gave back: they come
        back as g's share (and as its ancestor's room). Without this the next cycle,
        seeing the lender still over its share and the room still taken, gave the same
        GPUs back a second time (12 -> 8, then 8 -> 4, for one gang)."""
        if short <= 0 or self.within(g):
            return [], 0
        found: list[tuple[_Job, int]] = []
        stale = 0
        for name in self._others(g):
            for w in self._releasing_in(name):
                j, gpw = w.job, w.job.gpus_per_worker
                if short <= 0:
                    continue
                left = j.active - j.replicas - self.released.get(id(w), 0)
                n = min(left, math.floor((self._over(name) + _EPS) / gpw), math.ceil(short / gpw))
                if n > 0:
                    self.released[id(w)] = self.released.get(id(w), 0) + n
                    self._credit(name, n * gpw)
                    short -= n * gpw
                    found.append((w, n))
            gone = math.floor(min(self.stale.get(name, 0.0), self._over(name), short) + _EPS)
            if gone > 0:
                self.stale[name] -= gone
                self._credit(name, gone)
                short, stale = short - gone, stale + gone
        if (found or stale) and short <= 0:
            self.held[g.queue] = self.held.get(g.queue, 0.0) + g.gpus
        return found, stale

    def _releasing_in(self, name: str) -> list[_Job]:
        """The queue's jobs `releasing` may credit, in order: those whose spec is below
        what runs, with GPUs, not waiting for their own gang (the others credit
        nothing, whatever was credited before)."""
        found = self._releasing.get(name)
        if found is None:
            found = self._releasing[name] = [
                w
                for w in self.work.get(name, ())
                if w.job.active > w.job.replicas
                and w.job.gpus_per_worker > 0
                and not _waits_for_own_gang(w.job.ref, self.own)
            ]
        return found

    def _stale(self, snapshot: ClusterSnapshot) -> dict[str, float]:
        """GPUs Volcano still counts as each queue's allocated beyond what its
        jobs hold (spec, or what runs if more) and its other jobs by spec, in a queue one
        of whose jobs was resized within unplaced_timeout_seconds: a shrink's pods are
        gone from the job's status before the scheduler's next session stops counting
        them. Only there: elsewhere such a gap is pods this planner does not list."""
        window = self.policy.unplaced_timeout_seconds
        by_spec: dict[str, int] = {}
        for u in snapshot.unmanaged:
            by_spec[u.queue] = by_spec.get(u.queue, 0) + (u.replicas or 0) * (
                u.gpus_per_worker or 0
            )
        found: dict[str, float] = {}
        for name in self.usable:
            jobs = self.work.get(name, ())
            if not any(w.since is not None and 0 <= w.since <= window for w in jobs):
                continue
            holds = by_spec.get(name, 0) + sum(
                max(w.job.replicas, w.job.active) * w.job.gpus_per_worker + w.job.other_gpus
                for w in jobs
            )
            view = snapshot.volcano.queues.get(name) if snapshot.volcano else None
            admitted = view.inqueue if view is not None else 0.0  # not bound: not in holds
            found[name] = max(0.0, self.held.get(name, 0.0) - admitted - holds)
        return found

    def _credit(self, name: str, gpus: float) -> None:
        """Queue `name` no longer holds `gpus` it is releasing: under hierarchy they are
        its ancestors' room again (a gang served on them takes it, planner._took)."""
        self.held[name] -= gpus
        if self.cluster is not None:
            rooms = self.cluster.room_above
            for a in self.cluster.tree.ancestors(name):
                if a in rooms:
                    rooms[a] += gpus

    def cooling(self, g: PendingGroup, short: int, limit: float) -> tuple[float, str] | None:
        """When only lenders' reclaim cooldowns keep g's share from coming back: (seconds
        until the last cooldown needed ends, the jobs), else None. By GPUs alone, each
        queue giving at most what it holds beyond its share."""
        cool = self.policy.reclaim_cooldown_seconds
        have = 0.0
        cooling: list[tuple[float, tuple[str, str, str], float, _Job]] = []
        for _, over, pool in self.pools(g):
            have += min(over, pool.reclaimable(limit))
        for name in self.usable - {g.queue}:
            over = self._over(name)
            if over <= _EPS:
                continue
            for w in self.work.get(name, ()):
                since, extra = w.since, (w.target - w.job.min_replicas) * w.job.gpus_per_worker
                if since is None or since >= cool or extra <= 0 or w.job.priority > limit:
                    continue
                cooling.append((cool - since, w.skey, min(extra, over), w))
        names: list[str] = []
        for left, _, gives, w in sorted(cooling, key=lambda c: (c[0], c[1])):
            have += gives
            names.append(f"{w.job.ref.namespace}/{w.job.ref.name}")
            if have >= short:
                return left, ", ".join(names)
        return None

    def too_little(self) -> str:
        """Why the lenders cannot cover a gang."""
        why = "other queues hold too little beyond their own share to give back"
        level = self.policy.capacity_ancestor_reclaim_level
        if self.cluster is not None and level > 0:
            why += (
                f"; with ancestorReclaimLevel {level}, a queue in another branch gives back "
                f"only while its ancestors up to {level} level(s) above it hold more than "
                "their deserved"
            )
        return why

    def caps(self) -> dict[str, float]:
        """GPUs each queue holds beyond its share: the most it gives back."""
        return {name: max(0.0, self._over(name)) for name in self.usable}

    def charge(self, g: PendingGroup, taken: list[tuple[_Job, int]]) -> None:
        """g's queue holds g now; the lenders no longer hold what they give it."""
        for w, n in taken:
            self.held[w.job.queue] -= n * w.job.gpus_per_worker
        self.held[g.queue] = self.held.get(g.queue, 0.0) + g.gpus

    def restore(self, g: PendingGroup, taken: list[tuple[_Job, int]]) -> None:
        """Undo what `cover` counted for g: its victims' queues hold their workers again."""
        for w, n in taken:
            self.held[w.job.queue] = self.held.get(w.job.queue, 0.0) + n * w.job.gpus_per_worker
        self.held[g.queue] = self.held.get(g.queue, 0.0) - g.gpus

    def _over(self, name: str) -> float:
        return self.held.get(name, 0.0) - self.shares.get(name, 0.0)

    def _may_lend(self, w: _Job) -> bool:
        """A job whose extra workers may go (victims.may_give_way, as for its own queue's
        gangs), and not one its own queue already decided on (grown, trimmed, held with
        its queue). Its queue may not be planned yet: what would hold it alone there (its
        own gang waiting, a clock skew, a refused resize) is asked here too."""
        reclaimed = w.reason in (Reason.RECLAIM_FOR_PENDING, Reason.RECLAIM_FOR_QUEUE)
        p, since = self.policy, w.since
        refusal = self.refusals.get(w.skey)
        return (
            may_give_way(w, p.reclaim_cooldown_seconds)
            and (not w.locked or reclaimed)
            and not _waits_for_own_gang(w.job.ref, self.own)
            and not (since is not None and -since > p.clock_skew_seconds)
            and not (refusal is not None and refusal.applies_to(w.job))
        )
