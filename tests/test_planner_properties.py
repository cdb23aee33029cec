"""Hypothesis properties of plan() over random snapshots: the invariants of DESIGN.md."""

from __future__ import annotations

import math
import os
from dataclasses import replace

from builders import NOW, ago, policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core.model import ClusterSnapshot, ElasticJob, ObjectRef, PendingGroup, QueueState
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan

QUEUES = ["qa", "qb", "qc"]


@st.composite
def elastic_jobs(draw, index: int) -> ElasticJob:
    min_r = draw(st.integers(1, 6))
    max_r = draw(st.integers(min_r, 12))
    replicas = draw(st.integers(min_r, max_r))
    active = draw(st.integers(0, max_r + 2))
    last = draw(st.one_of(st.none(), st.integers(0, 2000).map(ago)))
    return ElasticJob(
        ref=ObjectRef("ml", f"j{index}"),
        queue=draw(st.sampled_from(QUEUES)),
        min_replicas=min_r,
        max_replicas=max_r,
        replicas=replicas,
        active=active,
        gpus_per_worker=draw(st.sampled_from([1, 1, 2, 4, 8])),
        created=ago(draw(st.integers(0, 10_000))),
        priority=draw(st.sampled_from([0, 0, 10, 100])),
        last_scale_time=last,
        started=draw(st.one_of(st.none(), st.integers(1, 20_000).map(ago))),
        resource_version=str(index),
    )


@st.composite
def snapshots(draw) -> ClusterSnapshot:
    jobs = [draw(elastic_jobs(i)) for i in range(draw(st.integers(0, 10)))]
    pending = []
    for i in range(draw(st.integers(0, 4))):
        owner = None
        if jobs and draw(st.booleans()) and draw(st.booleans()):
            owner = draw(st.sampled_from(jobs)).ref
        pending.append(
            PendingGroup(
                ref=ObjectRef("ml", f"g{i}", "PodGroup"),
                queue=(owner and next(j.queue for j in jobs if j.ref == owner))
                or draw(st.sampled_from(QUEUES)),
                gpus=draw(st.integers(1, 24)),
                created=ago(draw(st.integers(0, 4000))),
                priority=draw(st.sampled_from([0, 10, 100])),
                owner=owner and ObjectRef(owner.namespace, owner.name, "PyTorchJob"),
            )
        )
    queues = {}
    for q in QUEUES:
        free = draw(st.one_of(st.none(), st.floats(0, 40, allow_nan=False)))
        capacity = draw(st.one_of(st.none(), st.integers(0, 60)))
        queues[q] = QueueState(
            q, free, None if free is not None else Reason.METRICS_MISSING, capacity_gpus=capacity
        )
    return ClusterSnapshot(queues=queues, jobs=tuple(jobs), pending=tuple(pending))


policies = st.builds(
    lambda **kw: policy(**kw),
    cooldown_seconds=st.sampled_from([0, 300, 900]),
    cooldown_restart_cost_factor=st.sampled_from([0.0, 10.0]),
    reclaim_cooldown_seconds=st.sampled_from([0, 60]),
    max_gang_wait_seconds=st.sampled_from([600, 1800]),
    unplaced_timeout_seconds=st.sampled_from([60, 300]),
    growth_policy=st.sampled_from(["fill", "fair"]),
    min_step_workers=st.integers(1, 3),
    reserve_gpus_per_queue=st.integers(0, 2),
    victim_order=st.sampled_from(["most-workers", "least-work-lost"]),
    growth_payoff_factor=st.sampled_from([0.0, 0.0, 1.0]),
    starving_gang_blocks_later_gangs=st.booleans(),
    reclaim_from_higher_priority=st.booleans(),
)

common = settings(
    max_examples=int(os.environ.get("PLANNER_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def apply(snapshot: ClusterSnapshot, p) -> ClusterSnapshot:
    """The plan applied as the actuator writes it (spec replicas and the last-scale-time
    annotation); free GPUs and status stay as they were."""

    targets = {d.ref: d.target for d in p.actions}
    jobs = tuple(
        replace(j, replicas=targets[j.ref], last_scale_time=NOW) if j.ref in targets else j
        for j in snapshot.jobs
    )
    return replace(snapshot, jobs=jobs)


@common
@given(snapshots(), policies)
def test_bounds(snapshot, pol):
    result = plan(snapshot, pol, NOW)
    by_ref = {j.ref: j for j in snapshot.jobs}
    for d in result.decisions:
        j = by_ref[d.ref]
        assert j.min_replicas <= d.target <= j.max_replicas


@common
@given(snapshots(), policies)
def test_deterministic(snapshot, pol):
    assert plan(snapshot, pol, NOW) == plan(snapshot, pol, NOW)
    shuffled = replace(
        snapshot, jobs=tuple(reversed(snapshot.jobs)), pending=tuple(reversed(snapshot.pending))
    )
    assert plan(shuffled, pol, NOW) == plan(snapshot, pol, NOW)


@common
@given(snapshots(), policies)
def test_idempotent(snapshot, pol):
    first = plan(snapshot, pol, NOW)
    second = plan(apply(snapshot, first), pol, NOW)
    assert second.actions == (), [
        (d.ref.name, d.current, d.target, d.reason) for d in second.actions
    ]


@common
@given(snapshots(), policies)
def test_cooldowns(snapshot, pol):
    by_ref = {j.ref: j for j in snapshot.jobs}
    for d in plan(snapshot, pol, NOW).actions:
        last = by_ref[d.ref].last_scale_time
        since = math.inf if last is None else (NOW - last).total_seconds()
        if d.reason is Reason.SCALE_UP_IDLE_GPUS:
            assert since >= pol.cooldown_seconds
        if d.reason is Reason.RECLAIM_FOR_PENDING:
            assert since >= pol.reclaim_cooldown_seconds


def _queue_facts(snapshot, result, pol, queue):
    jobs = [j for j in snapshot.jobs if j.queue == queue]
    own = {g.owner.name for g in snapshot.pending if g.queue == queue and g.owner}
    own |= {g.ref.name for g in snapshot.pending if g.queue == queue}
    counted = [j for j in jobs if j.ref.name not in own]
    inflight = sum(j.inflight_workers * j.gpus_per_worker for j in counted)
    releasing = sum(j.releasing_workers * j.gpus_per_worker for j in counted)
    decided = {d.ref: d for d in result.decisions if d.queue == queue}
    growth = sum(
        (decided[j.ref].target - j.replicas) * j.gpus_per_worker
        for j in jobs
        if decided[j.ref].target > j.replicas
    )
    shrink = sum(
        (j.replicas - decided[j.ref].target) * j.gpus_per_worker
        for j in jobs
        if decided[j.ref].target < j.replicas
    )
    return jobs, inflight, releasing, growth, shrink


@common
@given(snapshots(), policies)
def test_no_overcommit(snapshot, pol):
    result = plan(snapshot, pol, NOW)
    for queue, state in snapshot.queues.items():
        _, inflight, releasing, growth, shrink = _queue_facts(snapshot, result, pol, queue)
        if state.free_gpus is None:
            assert growth == 0 and shrink == 0
            continue
        idle = math.floor(state.free_gpus + 1e-9) - inflight
        # growth only ever uses idle GPUs (plus what trims and reclaims of unplaced
        # workers give back), never GPUs being released, and leaves the reserve
        assert growth <= max(0, idle + shrink - pol.reserve_gpus_per_queue)
        served = sum(
            g.gpus
            for g in result.gangs
            if g.queue == queue and g.reason in (Reason.GANG_FITS, Reason.GANG_COVERED)
        )
        assert served + growth == 0 or served + growth <= idle + releasing + shrink


@common
@given(snapshots(), policies)
def test_gangs_first(snapshot, pol):
    """Nothing grows while a waiting gang that reclaim could cover is left uncovered."""

    result = plan(snapshot, pol, NOW)
    for queue, state in snapshot.queues.items():
        if state.free_gpus is None:
            continue
        jobs, inflight, releasing, growth, _ = _queue_facts(snapshot, result, pol, queue)
        if growth == 0:
            continue
        gangs = sorted(
            (g for g in snapshot.pending if g.queue == queue),
            key=lambda g: (-g.priority, g.created, g.ref),
        )
        decided = {g.ref: g.reason for g in result.gangs}
        # a trimmed job's cut workers are counted once, as trimmed, not again as reclaimable
        trimmed_to = {d.ref: d.target for d in result.decisions if d.reason is Reason.TRIM_UNPLACED}
        own = {g.owner.name for g in gangs if g.owner} | {g.ref.name for g in gangs}
        idle = math.floor(state.free_gpus + 1e-9) - inflight
        served = 0
        for g in gangs:
            reason = decided[g.ref]
            assert reason is not Reason.GANG_BLOCKED
            if reason in (Reason.GANG_FITS, Reason.GANG_COVERED):
                served += g.gpus
                continue
            assert reason is Reason.GANG_UNCOVERABLE
            reclaimable = 0
            for j in jobs:
                last = j.last_scale_time
                cool = (
                    last is not None and (NOW - last).total_seconds() < pol.reclaim_cooldown_seconds
                )
                lower = j.priority <= g.priority or pol.reclaim_from_higher_priority
                if lower and not cool and j.ref.name not in own:
                    size = trimmed_to.get(j.ref, j.replicas)
                    reclaimable += (size - j.min_replicas) * j.gpus_per_worker
            trimmed = result.queues[queue].trimmed_gpus
            assert g.gpus > idle + trimmed + releasing + reclaimable - served


@common
@given(snapshots(), policies)
def test_every_job_and_gang_accounted_for(snapshot, pol):
    result = plan(snapshot, pol, NOW)
    assert {d.ref for d in result.decisions} == {j.ref for j in snapshot.jobs}
    assert {g.ref for g in result.gangs} == {g.ref for g in snapshot.pending}
    assert all(d.message for d in result.decisions)


@common
@given(snapshots(), policies)
def test_growth_never_takes_a_queue_above_its_capacity(snapshot, pol):
    """Whatever the free-GPU reading says, a queue that grows ends at most at what its
    Queue object allows: jobs at their target (or what still runs), gangs given a share."""
    result = plan(snapshot, pol, NOW)
    owners = {(j.ref.namespace, j.ref.name) for j in snapshot.jobs}
    served = {g.ref for g in result.gangs if g.reason in (Reason.GANG_FITS, Reason.GANG_COVERED)}
    by_ref = {j.ref: j for j in snapshot.jobs}
    for name, state in snapshot.queues.items():
        grown = [d for d in result.actions if d.queue == name and d.target > by_ref[d.ref].replicas]
        if state.capacity_gpus is None or not grown:
            continue
        # a job whose own gang waits unserved binds nothing this cycle (counted once,
        # as that gang)
        unserved = {
            (g.owner.namespace, g.owner.name) if g.owner else (g.ref.namespace, g.ref.name)
            for g in snapshot.pending
            if g.queue == name and g.ref not in served
        }
        held = sum(
            max(d.target, by_ref[d.ref].active) * by_ref[d.ref].gpus_per_worker
            for d in result.decisions
            if d.queue == name and (d.ref.namespace, d.ref.name) not in unserved
        )
        held += sum(
            g.gpus
            for g in snapshot.pending
            if g.queue == name
            and g.ref in served
            and not (g.owner and (g.owner.namespace, g.owner.name) in owners)
        )
        assert held <= state.capacity_gpus, (name, held, state.capacity_gpus)
