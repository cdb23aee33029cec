"""The planning state of one queue (`QueuePlanState`), which every rule reads and
changes: the queue's jobs as work, its waiting gangs, the decisions made so far.

The rules are mixins over this one state (capability.py, trim.py, weigh.py,
reclaim.py, gangs.py, growth.py), joined in planner.QueuePlanner: a rule reads the
state it needs and decides through `_decide` (a job fixed for this cycle) or
`_keep_size` (why a job that could still change keeps its size)."""

from __future__ import annotations

import math
from datetime import datetime

from autoscaler.core.model import (
    ClusterSnapshot,
    Decision,
    ElasticJob,
    GangDecision,
    ObjectRef,
    PendingGroup,
    QueueState,
)
from autoscaler.core.policy import PlannerPolicy
from autoscaler.core.reasons import Reason

from . import payoff
from .fit import GroupFit, Holder, Placer, RoomMemo
from .inflight import NoPods
from .kept import _Decided, _decision
from .lenders import _Shared
from .listing import _Listed
from .quota import QueueQuota
from .work import _EPS, _SERVED, _Job


class QueuePlanState:
    """A queue's planning state for one plan: its jobs (`work`, each a `_Job`), its
    waiting gangs by priority then age, the gang decisions made, the GPUs granted,
    reclaimed and trimmed, the cluster's nodes shared by every queue, and the memos the
    rules keep while the queue is planned. Holds no rule: the rule mixins do."""

    def __init__(
        self,
        state: QueueState,
        work: list[_Job],
        listed: _Listed,
        pending: list[PendingGroup],
        snapshot: ClusterSnapshot,
        policy: PlannerPolicy,
        now: datetime,
        nodes: Placer | None = None,
        shared: _Shared | None = None,
    ) -> None:
        self.state = state
        self.policy = policy
        self.now = now
        self.snapshot = snapshot
        self.nodes = nodes  # shared by every queue of the cycle
        # the nodegroup plugin's rules over those nodes, for this queue's workers
        self.groups = (
            GroupFit(state.name, state.node_groups, nodes)
            if nodes is not None and state.node_groups is not None
            else None
        )
        shared = shared or _Shared(NoPods(None, 0, now), None)
        self.no_pods, self.lenders = shared.no_pods, shared.lenders
        self.admitted = math.floor(state.admitted_gpus + _EPS)
        self.credited = 0  # gang GPUs served from `admitted`: not bound yet, need nodes
        self.placed_gang_gpus = 0  # GPUs of gangs' pods placed on nodes by their shape
        self.node_fit_limited = False
        self.work = work
        self.listed = listed  # the queue's unmanaged jobs
        if self.groups is not None:  # its gangs' pods go only where its workers may
            pending = [self.groups.narrow_gang(g) for g in pending]
        self.pending = sorted(
            pending, key=lambda g: (-g.priority, g.created, g.ref.namespace, g.ref.name)
        )
        self.gangs: list[GangDecision] = []
        self.granted = self.reclaimed = self.trimmed = 0
        self._ends: list[tuple[float, int]] | None = None  # see weigh.py, _ending
        self._end_ids: list[int] = []  # the job (id of its _Job) of each of _ends
        self._walked: list[payoff.Gang | None] | None = None  # see weigh.py, _walk_gangs
        self._runs: dict[ObjectRef, float | None] = {}  # each waiting gang's job's run left
        self._next = 0  # index in `pending` of the first gang behind the one served now
        self._run_times: payoff.RunTimes | None = None  # see weigh.py, _queue_runs
        self._run_times_read = False
        self._cold = (0, 0)  # below the floor: (finished runs, running jobs), _queue_runs
        # the first gang refused a reclaim (rule 3b: it does not pay) / not covered (rule
        # 3), each waiting for GPUs to free, so nothing grows into them: its message, ""
        self.waits_for = self.uncovered = ""
        # rule 3b: gangs refused a reclaim and still waiting (gang, GPUs it needs, its
        # decision's index): a reclaim for a gang behind them frees GPUs Volcano gives
        # them first, so it is weighed for all of them (_weigh_behind)
        self._refused: list[tuple[PendingGroup, int, int]] = []
        self._members: list[tuple[PendingGroup, int]] = []  # those weighed together now
        self._locked: int | None = None  # see reclaim.py, _locked_gpus
        # the Queue object's capability in its other dimensions, once gangs are served
        self.quota: QueueQuota | None = None
        self._no_room = RoomMemo()  # see reclaim.py, _room
        self._holders: dict[tuple[int, str], tuple[int, Holder]] = {}  # reclaim.py, _holder_kept

    def _beyond_group_limits(self, g: PendingGroup) -> bool:
        """A waiting gang whose pods cannot fit its queue's node-group limits even with
        every elastic worker of the queue on those groups gone (fit.GroupFit.gang_beyond):
        the nodegroup plugin binds none of it there, and no reclaim (another queue's
        workers, or this one's elsewhere) makes that room. It gets nothing this cycle,
        as a gang Volcano never admits. A job whose workers' nodes are not known may
        free room anywhere: the gang is then left to the other rules."""
        if self.groups is None or not g.pods:
            return False
        freeable: dict[str, dict[str, int]] = {}
        for w in self.work:
            j = w.job
            extra = j.worker_nodes[j.min_replicas :]
            if j.active > j.min_replicas and not j.worker_nodes:
                return False
            for node in extra:
                group = self.groups.group_of(node) if node else None
                if group is None:
                    continue
                mine = freeable.setdefault(group, {})
                for res, v in j.worker_shape.requests:
                    mine[res] = mine.get(res, 0) + v
        why = self.groups.gang_beyond(g.pods, freeable)
        if not why:
            return False
        self._gang(
            g,
            Reason.GANG_UNCOVERABLE,
            f"{g.ref} needs {g.gpus} GPU(s) on the node groups of queue {self.state.name}, "
            f"beyond their limits even with every elastic worker of the queue there gone "
            f"({why}): Volcano's nodegroup plugin binds none of its pods until the queue's "
            "own pods on those groups end; nothing is reclaimed for it",
        )
        return True

    def pods_missing(self, j: ElasticJob) -> str:
        """HoldNoPods' message when some of j's workers have had no pod for too long."""
        n = self.no_pods.of_job(j)
        return self.no_pods.words(n, j.asked_at) if n else ""

    def _decide(self, w: _Job, target: int, reason: Reason, message: str) -> None:
        w.target, w.reason, w.message, w.locked = target, reason, message, True
        if self.lenders is not None:  # its queue's lenders' pool is stale now
            self.lenders.touched(w.job.queue)

    def decisions(self, memo: _Decided) -> list[Decision]:
        """Each job's decision, in the work's order; one the last plan made for the same
        job object with the same outcome is that plan's (`_Decided`)."""
        default_cost = self.policy.restart_cost_seconds
        last, made = memo
        out = []
        for w in self.work:
            j, target, reason, message = w.job, w.target, w.reason, w.message
            reason = reason or Reason.NO_IDLE_GPUS
            seen = last.get(id(j))
            if (
                seen is None
                or seen[0] is not j
                or seen[1] != target
                or seen[2] is not reason
                or seen[3] != message
                or seen[4] != default_cost
            ):
                seen = (j, target, reason, message, default_cost, _decision(j, w, default_cost))
            made[id(j)] = seen
            out.append(seen[5])
        return out

    def _gang(
        self,
        g: PendingGroup,
        reason: Reason,
        message: str,
        victims: tuple[ObjectRef, ...] = (),
        blockers: tuple[str, ...] = (),
    ) -> None:
        self.gangs.append(
            GangDecision(
                g.ref, g.queue, g.gpus, reason, message, victims, g.owner, g.need_from, blockers
            )
        )
        if self._locked is not None and reason in _SERVED:
            self._locked += g.gpus

    @staticmethod
    def _keep_size(w: _Job, reason: Reason, message: str) -> None:
        # an unlocked job's target is still its replicas: a hold only says why
        w.reason, w.message = reason, message
