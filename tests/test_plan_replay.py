"""The Placer a plan answers from the last plan's log (plan/fit/replay.py) while it asks
the same of the same room: a plan made with the memory of earlier plans is the plan made
from scratch (an empty PlanMemory, as `memory.reset()` leaves it), over random sequences
of cycles where the snapshot is the same object or changed (a job resized, started or
resized long ago, the nodes listed anew, a gang come or gone, another reading of free
GPUs) and the time moves on by steps that cross cooldowns and waits. Node fit, gangs
with pod shapes (reclaim by nodes) and lent shares between queues are all exercised.
And the lenders' jobs releasing workers, found once per plan, plan as a scan of every
job per gang."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from builders import NOW, ago, ej, gang, policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fit import node, shape
from test_lenders_index import GANG, JOB
from test_lenders_index import _snapshot as lent_snapshot

from autoscaler.core.model import ClusterSnapshot, Plugin, QueueState, VolcanoView
from autoscaler.plan.fit import Placer, Replay
from autoscaler.plan.kept import PlanMemory
from autoscaler.plan.lenders import _Lenders
from autoscaler.plan.planner import plan
from autoscaler.plan.work import _waits_for_own_gang

SHAPES = [shape(1, 8), shape(2, 30), shape(4, 8), shape(1, 8, selector={"pool": "a"})]


@st.composite
def fitted(draw: st.DrawFn) -> ClusterSnapshot:
    """Queues q0..q2 with given free GPUs, nodes of 8 GPUs and 64 CPUs (some labelled
    pool=a), elastic jobs with shapes and bound workers, gangs with pods or without."""
    names = [f"n{i}" for i in range(draw(st.integers(2, 7)))]
    nodes = [
        node(
            n,
            used_gpus=draw(st.integers(0, 8)),
            used_cpu=draw(st.integers(0, 64)),
            labels={"pool": "a"} if i % 2 else None,
        )
        for i, n in enumerate(names)
    ]
    jobs = []
    for i in range(draw(st.integers(1, 8))):
        s = draw(st.sampled_from(SHAPES))
        lo = draw(st.integers(1, 2))
        replicas = lo + draw(st.integers(0, 3))
        last = draw(st.sampled_from([None, 10, 200, 4000]))
        job = ej(
            f"j{i}",
            queue=f"q{i % 3}",
            min=lo,
            max=replicas + draw(st.integers(0, 6)),
            replicas=replicas,
            active=draw(st.integers(0, replicas)),
            priority=draw(st.sampled_from([0, 100])),
            last=None if last is None else ago(last),
        )
        where = tuple(draw(st.sampled_from(names)) for _ in range(replicas))
        jobs.append(replace(job, gpus_per_worker=s.amount("nvidia.com/gpu") // 1000, shape=s))
        jobs[-1] = replace(jobs[-1], worker_nodes=where)
    gangs = []
    for i in range(draw(st.integers(0, 3))):
        s = draw(st.sampled_from(SHAPES))
        n = draw(st.integers(1, 4))
        g = gang(f"g{i}", n * s.amount("nvidia.com/gpu") // 1000, queue=f"q{i % 3}")
        pods = ((s, n),) if draw(st.booleans()) else ()  # () : known by its GPUs alone
        gangs.append(replace(g, pods=pods, created=ago(draw(st.integers(0, 900)))))
    free = {f"q{q}": float(draw(st.integers(0, 12))) for q in range(3)}
    return ClusterSnapshot(
        queues={q: QueueState(q, v) for q, v in free.items()},
        jobs=tuple(jobs),
        pending=tuple(gangs),
        volcano=VolcanoView(Plugin.GIVEN, {}, tuple(nodes)),
    )


@st.composite
def lent(draw: st.DrawFn) -> ClusterSnapshot:
    """test_lenders_index's clusters: queues sharing the nodes under Volcano's plugins,
    gangs that take lent shares back."""
    return lent_snapshot(
        draw(st.sampled_from([Plugin.CAPACITY, Plugin.PROPORTION])),
        draw(st.lists(JOB, min_size=1, max_size=16)),
        draw(st.lists(GANG, min_size=1, max_size=5)),
        draw(st.lists(st.integers(0, 40), min_size=4, max_size=4)),
        draw(st.sampled_from([0, 1])),
    )


STEP = st.tuples(
    st.sampled_from(["same", "same", "same", "job", "started", "nodes", "gang", "free"]),
    st.integers(0, 15),
    st.sampled_from([0, 1, 29, 31, 299, 301, 3600]),  # seconds on
)


def _changed(s: ClusterSnapshot, what: str, i: int) -> ClusterSnapshot:
    """The snapshot a later cycle hands over: the same object, or one thing new."""
    jobs = list(s.jobs)
    j = jobs[i % len(jobs)] if jobs else None
    if what == "job" and j is not None:  # resized, a moment ago
        jobs[i % len(jobs)] = replace(j, replicas=j.min_replicas, last_scale_time=NOW)
        return replace(s, jobs=tuple(jobs))
    if what == "started" and j is not None:  # every worker running
        jobs[i % len(jobs)] = replace(j, active=j.replicas)
        return replace(s, jobs=tuple(jobs))
    if what == "nodes" and s.volcano is not None and s.volcano.nodes is not None:
        return replace(s, volcano=replace(s.volcano, nodes=tuple(list(s.volcano.nodes))))
    if what == "gang":
        return replace(s, pending=s.pending[1:] if s.pending else s.pending)
    if what == "free":
        queues = {
            n: replace(q, free_gpus=float(i)) if q.free_gpus is not None else q
            for n, q in s.queues.items()
        }
        return replace(s, queues=queues)
    return s


def _run(s: ClusterSnapshot, steps: list[Any], pol: Any) -> None:
    memory, t = PlanMemory(), NOW
    for what, i, dt in [("same", 0, 0), *steps]:
        t += timedelta(seconds=dt)
        s = _changed(s, what, i)
        kept = plan(s, pol, t, memory=memory)
        fresh = plan(s, pol, t, memory=PlanMemory())
        assert kept.decisions == fresh.decisions  # targets, reasons, messages
        assert kept.gangs == fresh.gangs
        assert kept.queues == fresh.queues
        assert kept == fresh


@settings(max_examples=150, deadline=None)
@given(fitted(), st.lists(STEP, max_size=8), st.sampled_from(["fill", "fair"]))
def test_a_plan_with_the_kept_placer_is_the_plan_made_anew(s, steps, growth):
    _run(s, steps, policy(growth_policy=growth, cooldown_seconds=300, max_gang_wait_seconds=600))


@settings(max_examples=100, deadline=None)
@given(lent(), st.lists(STEP, max_size=6))
def test_with_lent_shares_a_plan_with_the_kept_placer_is_the_plan_made_anew(s, steps):
    _run(s, steps, policy(cooldown_seconds=300))


def _steady() -> ClusterSnapshot:
    nodes = tuple(node(f"n{i}", used_gpus=i % 3) for i in range(6))
    jobs = tuple(
        replace(ej(f"j{i}", max=6, replicas=2, active=1), shape=SHAPES[0]) for i in range(4)
    )
    return ClusterSnapshot(
        queues={"q": QueueState("q", 12.0)},
        jobs=jobs,
        volcano=VolcanoView(Plugin.GIVEN, {}, nodes),
    )


def test_a_steady_plan_answers_every_call_from_the_log_and_makes_no_room():
    s, memory = _steady(), PlanMemory()
    first = plan(s, policy(), NOW, memory=memory)
    placer = memory.placed
    assert isinstance(placer, Replay) and placer.calls
    later = plan(s, policy(), NOW + timedelta(seconds=5), memory=memory)
    again = memory.placed
    assert isinstance(again, Replay) and again is not placer
    assert again.calls == placer.calls and "_classes" not in vars(again)  # never made
    assert later.decisions == plan(s, policy(), NOW + timedelta(seconds=5)).decisions
    assert [d.target for d in later.decisions] == [d.target for d in first.decisions]


def test_at_the_first_call_that_differs_the_room_is_made_as_the_calls_left_it():
    nodes = [node(f"n{i}", used_gpus=i) for i in range(4)]
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("place", (SHAPES[0], 3)),
        ("fits", (SHAPES[1], None)),
        ("take_gpus", (5,)),
        ("place", (SHAPES[2], 1)),
    ]
    base = Placer(nodes)
    start = base.state()
    first = Replay(nodes, ("nvidia.com/gpu",), start)
    for what, args in calls:
        getattr(first, what)(*args)
    # the same two calls, then another: answered from the log, then made and placed on
    second = Replay(nodes, ("nvidia.com/gpu",), start, first.calls)
    assert second.place(SHAPES[0], 3) == first.calls[0][2]
    assert second.fits(SHAPES[1]) == first.calls[1][2]
    assert "_classes" not in vars(second)
    plain = Placer(nodes, start=start)
    plain.place(SHAPES[0], 3)
    assert second.place(SHAPES[3], 2) == plain.place(SHAPES[3], 2)
    assert second.state() == plain.state()
    assert second.idle_gpus == plain.idle_gpus
    # a trial (anything not logged) ends the log: what follows is placed, not answered
    third = Replay(nodes, ("nvidia.com/gpu",), start, first.calls)
    with third.trial():
        third.place(SHAPES[0], 8)
    assert third.place(SHAPES[0], 3) == Placer(nodes, start=start).place(SHAPES[0], 3)
    assert len(third.calls) == 0


def _plain_releasing(self: _Lenders, name: str) -> list[Any]:
    """Every job of the queue, as `releasing` scanned them before the index."""
    return [
        w
        for w in self.work.get(name, ())
        if w.job.gpus_per_worker > 0 and not _waits_for_own_gang(w.job.ref, self.own)
    ]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lent(), st.lists(st.integers(0, 3), min_size=16, max_size=16))
def test_jobs_releasing_found_once_plan_as_every_job_scanned(
    monkeypatch: pytest.MonkeyPatch, s: ClusterSnapshot, more: list[int]
) -> None:
    """Lenders whose spec is below what runs (given back by an earlier cycle) are
    credited to a gang short of its share: found once per plan per queue
    (_Lenders._releasing_in), the plan of a scan of every job per gang."""
    jobs = tuple(replace(j, active=j.replicas + more[i % len(more)]) for i, j in enumerate(s.jobs))
    s = replace(s, jobs=jobs)
    indexed = plan(s, policy(), NOW, memory=PlanMemory())
    with monkeypatch.context() as m:
        m.setattr(_Lenders, "_releasing_in", _plain_releasing)
        plain = plan(s, policy(), NOW, memory=PlanMemory())
    assert indexed == plain
