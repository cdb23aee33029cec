"""Rule 3: serve waiting gangs first, one at a time, by priority then age.

A gang that fits takes its share of the idle GPUs (GPUs being released serve only
gangs); one that does not fit is covered from elastic workers where that pays
(reclaim.py, weigh.py), else skipped, so one huge gang does not block the small ones
behind it. A gang refused a reclaim is weighed again with the gangs behind it (a
reclaim for them frees GPUs Volcano gives it first). A gang refused a reclaim or not
covered holds its queue's growth (the GPUs that free are its); a gang waiting longer
than `max_gang_wait_seconds` stops growth in its queue too (the starvation guard)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from autoscaler.core.model import PendingGroup
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339

from . import payoff
from .quota import amount_words, beyond
from .reclaim import ReclaimRules
from .victims import HELD_ALONE, _VictimPool
from .work import _STILL_WAITING


class GangRules(ReclaimRules):
    """Rule mixin: rule 3, the queue's waiting gangs served in order, each fitting,
    covered, or skipped with the reason and the jobs that did not give way."""

    def _serve_gangs(self, idle: int, releasing: int) -> tuple[int, int, str]:
        p, starving, from_idle = self.policy, "", 0
        pool = _VictimPool(self._victims(), p)
        for at, g in enumerate(self.pending):
            self._next = at + 1
            if g.orphan:
                self._owner_gone(g)
                continue
            if starving and p.starving_gang_blocks_later_gangs:
                self._gang(
                    g, Reason.GANG_BLOCKED, f"{g.ref} waits behind a starving gang: {starving}"
                )
                continue
            if self._never_admitted(g) or self._beyond_group_limits(g):
                continue
            need = self._uncredited(g)
            node_short, placed = self._node_short(g)
            if need > idle + releasing or not placed:
                # what other queues release for it (given back a cycle ago) serves it too
                releasing += self._released_back(g, max(need - (idle + releasing), node_short))
                node_short, placed = self._node_short(g)
            if need <= idle + releasing and placed:
                idle, releasing, from_idle = self._consume(need, idle, releasing, from_idle)
                self._place_gang(g)
                self._gang(
                    g,
                    Reason.GANG_FITS,
                    f"{g.ref} needs {g.gpus} GPU(s): fits in what is free or being released",
                )
                continue
            if self._refused:
                served, idle, releasing, starving = self._weigh_behind(
                    g, need, pool, idle, releasing, starving
                )
                if served:
                    idle, releasing, from_idle = self._consume(served, idle, releasing, from_idle)
                continue
            shortfall = max(need - (idle + releasing), node_short)
            covered = self._cover(g, shortfall, pool, need - (idle + releasing))
            if isinstance(covered, str):  # nobody can cover it
                starving = self._uncoverable(g, shortfall, starving, covered)
                continue
            if isinstance(covered, payoff.Trade):  # a reclaim that does not pay
                starving = self._reclaim_unpaid(g, need, covered, starving)
                continue
            victims, lent = covered
            idle, releasing = self._reclaim(g, victims, pool, idle, releasing, lent)
            idle, releasing, from_idle = self._consume(need, idle, releasing, from_idle)
            self._place_gang(g)
        # A gang served from idle GPUs before a later reclaim released more than that gang
        # needed (whole workers) could as well have taken released ones: trade them, so
        # the plan is what replanning on its result gives (idempotence).
        swap = min(releasing, from_idle)
        return idle + swap, releasing - swap, starving

    def _owner_gone(self, g: PendingGroup) -> None:
        """A gang whose job is being deleted, is gone, or is not watched: no job will run
        in what is made for it, so it is never a reason to shrink anyone, and it neither
        takes a share of what is free nor starves its queue. Volcano still counts it
        where it does (its queue's request, what is inqueue): those figures are read as
        they come."""
        self._gang(
            g,
            Reason.GANG_OWNER_GONE,
            f"{g.ref} needs {g.gpus} GPU(s), but {g.orphan}: nothing is reclaimed or kept "
            "for it (its PodGroup waits for the garbage collector)",
        )

    def _never_admitted(self, g: PendingGroup) -> bool:
        """A gang whose pods together ask more of a dimension than the Queue's capability
        allows is never admitted by Volcano, whatever is reclaimed: it gets nothing (no
        GPUs kept for it, no worker taken back) and does not starve its queue's growth,
        which it could never end."""
        name, need = beyond(self.state.limits, g.pods)
        if not name:
            return False
        cap = dict(self.state.limits)[name]
        self._gang(
            g,
            Reason.GANG_UNCOVERABLE,
            f"{g.ref} asks {amount_words(name, need)} in all, more than queue "
            f"{self.state.name} may ever hold by its Queue object (spec.capability[{name}] "
            f"= {amount_words(name, cap)}): Volcano will not admit it; nothing is reclaimed "
            "for it",
        )
        return True

    def _uncoverable(self, g: PendingGroup, shortfall: int, starving: str, why: str = "") -> str:
        """The gang cannot be covered: skipped, so the small ones behind it may fit; one
        that has waited too long starves its queue's growth. Returns the starving gang.
        `why`: by nodes, what no reclaim frees (node fit's words); by GPUs, why other
        queues give nothing back."""
        message = (
            f"{g.ref} needs {g.gpus} GPU(s); free, releasing and reclaimable "
            f"capacity fall {shortfall} short: skipped" + (f" ({why})" if why else "")
        )
        wait = self._cooldown_wait(g, shortfall)
        if wait:
            message = f"{message}; {wait}"
        if not self.uncovered:
            # What is free is the gang's: its shortfall is the same whether the queue's
            # jobs grow into it or not (grown workers are as reclaimable as free GPUs
            # were), so a growth buys its job the time until the gang is covered and
            # costs two restarts, the growth and the reclaim that takes it back
            # (docs/design.md rule 3, "A gang not covered keeps what is free").
            self.uncovered = (
                f"{g.ref} waits for GPUs to free (not covered: {shortfall} short): "
                f"nothing in queue {g.queue} grows into them"
            )
        return self._skip_gang(g, Reason.GANG_UNCOVERABLE, message, starving)

    def _cooldown_wait(self, g: PendingGroup, shortfall: int) -> str:
        """What a gang not covered now waits for, when it is only victims' reclaim
        cooldowns: the job(s) whose cooldown must end, and when the last of them does
        ("" when what gives way now and what leaves its cooldown never cover it). By
        GPUs alone: where its pods' nodes decide, the next plan says again."""
        p = self.policy
        cool = p.reclaim_cooldown_seconds
        now_gpus, cooling = 0, []
        for w in self.work:
            extra = (w.target - w.job.min_replicas) * w.job.gpus_per_worker
            if extra <= 0 or w.reason in HELD_ALONE:
                continue
            if w.job.priority > g.priority and not p.reclaim_from_higher_priority:
                continue
            if w.since is not None and w.since < cool:
                cooling.append((cool - w.since, w, extra))
            else:
                now_gpus += extra
        waited: list[str] = []
        for left, w, extra in sorted(cooling, key=lambda c: (c[0], c[1].skey)):
            now_gpus += extra
            waited.append(f"{w.job.ref.namespace}/{w.job.ref.name}")
            if now_gpus >= shortfall:
                until = self.now + timedelta(seconds=left)
                return (
                    f"it waits for the reclaim cooldown of {', '.join(waited)} "
                    f"(reclaim_cooldown_seconds={cool:.0f}), until {rfc3339(until)} "
                    f"(in {left:.0f}s)"
                )
        return ""

    def _skip_gang(
        self, g: PendingGroup, reason: Reason, message: str, starving: str, say_why: bool = False
    ) -> str:
        """A gang not served this cycle, with why; one that has waited too long starves
        its queue's growth (the first such), and then says so (after why, with
        `say_why`). Returns the starving gang."""
        p = self.policy
        waited = (self.now - g.created).total_seconds()
        if waited > p.max_gang_wait_seconds and not starving:
            starving = (
                f"{g.ref} has waited {waited:.0f}s (> max_gang_wait_seconds="
                f"{p.max_gang_wait_seconds:.0f}): nothing in queue {g.queue} "
                "grows until it fits"
            )
            message = f"{message}; {starving}" if say_why else starving
        self._gang(g, reason, message, blockers=self._blockers(g))
        return starving

    def _reclaim_unpaid(
        self, g: PendingGroup, need: int, trade: payoff.Trade, starving: str, ahead: str = ""
    ) -> str:
        """The reclaim would cost its victims more than the gang gains: it waits, and
        holds its queue's growth (the GPUs that free are its). `ahead`: the gangs
        weighed with it (_weigh_behind)."""
        with_ahead = f" with {ahead} ahead of it" if ahead else ""
        message = (
            f"{g.ref} needs {g.gpus} GPU(s): reclaiming for it{with_ahead} does not pay "
            f"({trade.describe()}, reclaim_payoff_factor="
            f"{self.policy.reclaim_payoff_factor:g}): it waits for GPUs to free"
        )
        if not self.waits_for:
            self.waits_for = (
                f"{g.ref} waits for GPUs to free (reclaiming for it does not pay): "
                f"nothing in queue {g.queue} grows into them"
            )
        self._refused.append((g, need, len(self.gangs)))
        return self._skip_gang(g, Reason.GANG_RECLAIM_UNPAID, message, starving, say_why=True)

    def _weigh_behind(
        self,
        g: PendingGroup,
        need: int,
        pool: _VictimPool,
        idle: int,
        releasing: int,
        starving: str,
    ) -> tuple[int, int, int, str]:
        """A gang behind gangs refused a reclaim, that does not fit in what is free. Volcano
        admits in order: what a reclaim frees goes to the gangs ahead first (the next plan
        would serve them from it). So the reclaim covers all of them and g, and weighs
        their summed gain; if it pays all are served by it, else g waits with them.
        Returns the GPUs served (to consume), idle, releasing and the starving gang."""
        members = [*((x, n) for x, n, _ in self._refused), (g, need)]
        pods = tuple(p for x, _ in members for p in x.pods)
        known = all(x.pods for x, _ in members)
        group = replace(g, gpus=sum(x.gpus for x, _ in members), pods=pods if known else ())
        total = sum(n for _, n in members)
        node_short, _ = self._node_short(group)
        shortfall = max(total - (idle + releasing), node_short)
        names = ", ".join(str(x.ref) for x, _, _ in self._refused)
        self._members = members
        covered = self._cover(group, shortfall, pool, total - (idle + releasing))
        self._members = []
        if isinstance(covered, str):
            why = f"counted with {names} ahead of it, which what is freed goes to first"
            why += f"; {covered}" if covered else ""
            return 0, idle, releasing, self._uncoverable(g, shortfall, starving, why)
        if isinstance(covered, payoff.Trade):
            return 0, idle, releasing, self._reclaim_unpaid(g, need, covered, starving, names)
        victims, lent = covered
        refused = tuple(x for x, _, _ in self._refused)
        idle, releasing = self._reclaim(group, victims, pool, idle, releasing, lent, refused)
        self._place_gang(group)
        done, ahead = self.gangs[-1], group.gpus - g.gpus
        words = (
            f"needs {g.gpus} GPU(s) and waits behind {names} ({ahead} GPU(s), refused a "
            "reclaim alone; Volcano gives them what is freed first): reclaimed for all,"
        )
        self.gangs[-1] = replace(
            done, gpus=g.gpus, message=done.message.replace(f"needs {group.gpus} GPU(s):", words, 1)
        )
        for x, _, at in self._refused:
            self.gangs[at] = replace(
                self.gangs[at],
                reason=Reason.GANG_COVERED,
                message=f"{x.ref} needs {x.gpus} GPU(s): covered by the reclaim made for "
                f"{g.ref} behind it (Volcano gives what is freed to it first)",
                victims=done.victims,
                blockers=(),
            )
        self._refused, self.waits_for = [], ""
        return total, idle, releasing, self._starving_again(starving)

    def _starving_again(self, starving: str) -> str:
        """The starving gang once gangs refused a reclaim were served after all: the first
        gang still waiting that has waited too long, "" if none."""
        if not starving:
            return starving
        waiting = {d.ref for d in self.gangs if d.reason in _STILL_WAITING}
        limit = self.policy.max_gang_wait_seconds
        for x in self.pending:
            waited = (self.now - x.created).total_seconds()
            if x.ref in waiting and waited > limit:
                return (
                    f"{x.ref} has waited {waited:.0f}s (> max_gang_wait_seconds="
                    f"{limit:.0f}): nothing in queue {x.queue} grows until it fits"
                )
        return ""

    def _blockers(self, g: PendingGroup, most: int = 10) -> tuple[str, ...]:
        """For a gang not covered: each elastic job of its queue above its min, and why
        its extra workers did not give way (the first `most`)."""
        p, out = self.policy, []
        cool = p.reclaim_cooldown_seconds
        loan = self._on_loan(g)
        for w in self.work:
            j, extra = w.job, w.target - w.job.min_replicas
            if extra <= 0:
                continue
            what = f"{j.ref.namespace}/{j.ref.name}: {extra} worker(s) above its min"
            if loan:
                why = "on loan from other queues' shares (see the gang's message)"
            elif w.reason in HELD_ALONE:
                why = f"held ({w.reason})"
            elif w.since is not None and w.since < cool:
                until = rfc3339(self.now + timedelta(seconds=cool - w.since))
                why = (
                    f"resized {w.since:.0f}s ago, in its reclaim cooldown until {until} "
                    f"(reclaim_cooldown_seconds={cool:.0f})"
                )
            elif j.priority > g.priority and not p.reclaim_from_higher_priority:
                why = f"priority {j.priority} above the gang's {g.priority}"
            else:
                why = "could give way, but all such workers together do not cover the gang"
            out.append(f"{what}: {why}")
            if len(out) >= most:
                break
        return tuple(out) or (f"no elastic job of queue {g.queue} is above its minimum",)

    @staticmethod
    def _consume(need: int, idle: int, releasing: int, from_idle: int) -> tuple[int, int, int]:
        # Released GPUs can serve only gangs, so gangs use them before idle ones.
        from_release = min(max(releasing, 0), need)
        used_idle = need - from_release
        return idle - used_idle, releasing - from_release, from_idle + max(0, used_idle)
