"""Capacity and quota bounds: how much the Queue object lets the queue hold (rule 4's
ceiling).

A queue's `capability` caps what its jobs may grow into, whatever Prometheus reads as
free: in GPUs (`_capped`, `_room_by_capacity`) and in every other dimension the Queue
names (`_quota`, `_within_quota`: CPU, memory, extended resources, quota.py). A job
whose own gang waits counts once, as that gang (rule 2). A job cut by the bound holds
with HoldQueueCapacity."""

from __future__ import annotations

from autoscaler.core.model import ObjectRef, PendingGroup
from autoscaler.core.reasons import Reason

from .fit import describe_shape
from .quota import QueueQuota, add
from .state import QueuePlanState
from .work import _Job, _waits_for_own_gang, own_gangs_waiting


class CapabilityRules(QueuePlanState):
    """Rule mixin: the Queue object's capability as a bound on growth, in GPUs and in
    every other dimension it names."""

    def _capped(self, pool: int) -> tuple[int, str]:
        """The growth pool cut to what the Queue object's capability still allows, and
        why, when it cut."""
        room = self._room_by_capacity()
        cap, other = self.state.capacity_gpus, self.state.other_gpus
        if room is None or cap is None or room >= pool:
            return pool, ""
        return max(0, room), (
            f"queue {self.state.name} may hold {cap} GPU(s) by its Queue object; its "
            f"jobs and admitted gangs would hold {cap - room}"
            + (f" ({other} of them in pods other than elastic workers)" if other else "")
        )

    def _room_by_capacity(self) -> int | None:
        """GPUs the queue's jobs may still grow by before they hold more than the Queue
        object allows, None without a bound. A physical cap whatever Prometheus reads:
        jobs at their planned size (or what still runs, if more), unmanaged jobs at
        their spec, the gangs given a share this cycle that no job here owns, and the
        queue's bound pods outside those worker groups (masters, launchers, plain pods:
        Volcano counts them too).

        A job whose own PodGroup waits is counted once, as that gang (rule 2): at its
        spec if the gang was served this cycle (its pods will bind), not at all if not
        (Volcano admits none of its pods; counting it anyway blocked all growth while
        any gang could not fit, and `max_gang_wait_seconds` could never matter)."""
        cap = self.state.capacity_gpus
        if cap is None:
            return None
        served, unserved_owners = self._served()
        held = self.state.other_gpus + sum(
            max(w.target, w.job.active) * w.job.gpus_per_worker
            for w in self.work
            if not _waits_for_own_gang(w.job.ref, unserved_owners)
        )
        held += sum(
            (u.replicas or 0) * (u.gpus_per_worker or 0)
            for u in self.listed.by_spec  # the others hold none by spec
            if not _waits_for_own_gang(u.ref, unserved_owners)
        )
        known = {(w.job.ref.namespace, w.job.ref.name) for w in self.work}
        known |= self.listed.names
        for g in self.pending:
            owned = g.owner is not None and (g.owner.namespace, g.owner.name) in known
            if g.ref in served and not owned:
                held += g.gpus
        return cap - held

    def _served(self) -> tuple[set[ObjectRef], dict[tuple[str, str, str], PendingGroup]]:
        """The gangs given a share this cycle, and the jobs whose own gang waits unserved
        (Volcano binds none of their pods: not counted)."""
        served = {g.ref for g in self.gangs if g.reason in (Reason.GANG_FITS, Reason.GANG_COVERED)}
        return served, own_gangs_waiting([g for g in self.pending if g.ref not in served])

    def _quota(self) -> QueueQuota | None:
        """What the Queue object's capability in its other dimensions (CPU, memory,
        extended resources) still admits (quota.py): less what the queue's bound pods
        request (every pod of its PodGroups, as Volcano counts allocated), each job's
        workers asked for and not bound yet (at its planned size, or what still runs if
        more), and the pods of gangs served this cycle that no job here owns. Without
        the pod watch no pod is known bound: jobs count at their planned size."""
        s = self.state
        if not s.limits:
            return None
        held = dict(s.allocated)
        served, unserved_owners = self._served()
        for w in self.work:
            j = w.job
            # workers with a node ("" where none): in `allocated` already
            unbound = max(w.target, j.active) - len(j.worker_nodes) + j.worker_nodes.count("")
            if unbound > 0 and not (
                unserved_owners and _waits_for_own_gang(j.ref, unserved_owners)
            ):
                add(held, j.worker_shape, unbound)
        known = (
            {(w.job.ref.namespace, w.job.ref.name) for w in self.work} if self.pending else set()
        )
        for g in self.pending:
            owned = g.owner is not None and (g.owner.namespace, g.owner.name) in known
            if g.ref in served and not owned:
                for shape, count in g.pods:
                    add(held, shape, count)
        return QueueQuota(s.name, s.limits, held)

    def _node_fits(self, w: _Job, extra: int) -> int:
        """Workers of w that fit on nodes now (at most `extra`): on its queue's node
        groups within their limits, where the nodegroup plugin runs (fit.GroupFit)."""
        assert self.nodes is not None
        shape = w.job.worker_shape
        if self.groups is not None:
            return self.groups.fits(shape, extra)
        return self.nodes.fits(shape, extra)

    def _node_place(self, w: _Job, extra: int) -> int:
        """`extra` workers of w placed (as `_node_fits` counts them); how many."""
        assert self.nodes is not None
        shape = w.job.worker_shape
        if self.groups is not None:
            return self.groups.place(shape, extra)
        return self.nodes.place(shape, extra)

    def _node_words(self, w: _Job, fits: int) -> str:
        """Why no more than `fits` workers of w fit, in node fit's words (a node group
        at its limit named first)."""
        assert self.nodes is not None
        shape = w.job.worker_shape
        if self.groups is not None:
            return self.groups.words(shape, fits, self.nodes.gpu_names)
        return self.nodes.explain(shape, fits)

    def _within_quota(self, w: _Job, extra: int) -> int:
        """`extra` more workers of w cut to what the queue's capability admits in every
        dimension it names; held (HoldQueueCapacity) or noted when it cut."""
        quota = self.quota
        if quota is None or extra <= 0:
            return extra
        shape = w.job.worker_shape
        fits = quota.fits(shape, extra)
        if fits < extra:
            names = self.snapshot.volcano.gpu_names if self.snapshot.volcano else ()
            words = quota.words(shape, fits, describe_shape(shape, names or ("nvidia.com/gpu",)))
            w.fit_note = words
            self._keep_size(w, Reason.QUEUE_CAPACITY, words)
        return fits
