"""Lent shares with the lenders indexed once per plan (lenders._Lenders._pool, #45) make
the same plan as the plain scan, every job of every other queue tested again for each
gang (_Lenders._lendable): the index is speed, not policy."""

from __future__ import annotations

from typing import Any

import pytest
from builders import NOW, ago, ej, gang, policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core.model import (
    ClusterSnapshot,
    NodeGpus,
    Plugin,
    QueueState,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.policy import VictimOrder
from autoscaler.core.reasons import Reason
from autoscaler.plan.kept import PlanMemory
from autoscaler.plan.lenders import _Lenders
from autoscaler.plan.planner import plan
from autoscaler.plan.victims import _VictimPool


def _plain_pool(self: _Lenders, name: str) -> tuple[list[Any], _VictimPool]:
    jobs = self._lendable(name)
    return jobs, _VictimPool(jobs, self.policy)


def _plain_ordered(self: _Lenders, name: str, pool: _VictimPool, limit: float) -> list[Any]:
    return pool.ordered(limit)


JOB = st.tuples(
    st.integers(0, 3),  # queue
    st.integers(1, 3),  # min
    st.integers(0, 6),  # max above min
    st.integers(0, 6),  # replicas above min (capped at max)
    st.sampled_from([1, 2, 4]),  # GPUs a worker
    st.sampled_from([0, 0, 100]),  # priority
    st.sampled_from([None, 30, 4000]),  # seconds since the last resize
)
GANG = st.tuples(st.integers(0, 3), st.integers(1, 12), st.sampled_from([0, 100]))


def _snapshot(
    plugin: Plugin, jobs: list[Any], gangs: list[Any], deserved: list[int], idle: int = 0
):
    made = []
    for i, (q, lo, span, up, gpw, prio, last) in enumerate(jobs):
        hi = lo + span
        made.append(
            ej(
                f"j{i}",
                queue=f"q{q}",
                min=lo,
                max=hi,
                replicas=min(hi, lo + up),
                gpw=gpw,
                priority=prio,
                last=None if last is None else ago(last),
            )
        )
    held = {f"q{q}": 0.0 for q in range(4)}
    for j in made:
        held[j.queue] += j.active * j.gpus_per_worker
    used = int(sum(held.values()))
    nodes = tuple(
        NodeGpus(f"n{i}", 8, min(8, max(0, used - 8 * i))) for i in range(-(-used // 8) + idle)
    )
    queues = {
        name: VolcanoQueue(name, allocated=h, request=h, spec_deserved=float(deserved[i]))
        for i, (name, h) in enumerate(held.items())
    }
    view = VolcanoView(plugin, queues, nodes)
    pending = [
        gang(f"g{i}", gpus, queue=f"q{q}", priority=prio, created=ago(100 - i))
        for i, (q, gpus, prio) in enumerate(gangs)
    ]
    states = {q: QueueState(q, None, volcano=v) for q, v in queues.items()}
    return ClusterSnapshot(queues=states, jobs=tuple(made), pending=tuple(pending), volcano=view)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plugin=st.sampled_from([Plugin.CAPACITY, Plugin.PROPORTION]),
    order=st.sampled_from(list(VictimOrder)),
    jobs=st.lists(JOB, min_size=1, max_size=24),
    gangs=st.lists(GANG, min_size=1, max_size=8),
    deserved=st.lists(st.integers(0, 40), min_size=4, max_size=4),
    idle=st.sampled_from([0, 0, 1]),  # idle nodes: lenders may grow first
)
def test_indexed_lenders_plan_as_the_plain_scan(
    monkeypatch: pytest.MonkeyPatch, plugin, order, jobs, gangs, deserved, idle
) -> None:
    snap = _snapshot(plugin, jobs, gangs, deserved, idle)
    p = policy(victim_order=order)
    indexed = plan(snap, p, NOW, memory=PlanMemory())
    with monkeypatch.context() as m:
        m.setattr(_Lenders, "_pool", _plain_pool)
        m.setattr(_Lenders, "ordered", _plain_ordered)
        plain = plan(snap, p, NOW, memory=PlanMemory())
    assert indexed.decisions == plain.decisions
    assert indexed.gangs == plain.gangs
    assert indexed.queues == plain.queues


def test_a_lender_decided_on_after_its_pool_was_indexed_is_indexed_again() -> None:
    """Two gangs of q0 take back what q1 lent: the second sees the first's victim at
    its new size (the pool is indexed again once a job of q1 was decided on)."""
    snap = _snapshot(
        Plugin.CAPACITY,
        [(1, 1, 7, 7, 1, 0, None), (1, 1, 7, 7, 1, 0, None)],
        [(0, 4, 0), (0, 4, 0)],
        [16, 2, 0, 0],
    )
    p = plan(snap, policy(), NOW, memory=PlanMemory())
    covered = [g for g in p.gangs if g.reason is Reason.GANG_COVERED]
    assert len(covered) == 2
    given_back = {d.ref.name: d.target for d in p.decisions if d.reason is Reason.RECLAIM_FOR_QUEUE}
    assert sum(8 - t for t in given_back.values()) == 8  # 4 + 4 GPUs, no worker twice
