"""Reclaim only where it pays (autoscaler/plan/payoff.py, planner rule 3): the estimates from
what jobs declare of their run, the trade, and the planner's decision, one table each;
the annotations as parse.py reads them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from builders import NOW, ago, ej, gang, policy, pytorchjob, snap
from builders import settings as app_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.model import (
    ClusterSnapshot,
    NodeGpus,
    ObjectRef,
    Plugin,
    QueueState,
    UnmanagedJob,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.reasons import Reason
from autoscaler.plan import payoff
from autoscaler.plan.planner import plan
from autoscaler.read.parse import Priorities, parse_job

RUNTIME = "elastic-autoscaler.io/expected-runtime-seconds"
PROGRESS = "elastic-autoscaler.io/progress"


def declared(job, runtime=None, progress=None):
    return replace(job, expected_runtime_seconds=runtime, progress=progress)


# ---- what is left of a job ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("started", "runtime", "progress", "left"),
    [
        (ago(1000), None, None, None),  # declared nothing
        (ago(1000), 4000.0, None, 3000.0),  # expected run less what it ran
        (None, 4000.0, None, 4000.0),  # not started: all of it
        (ago(5000), 4000.0, None, None),  # past its estimate: no estimate left
        (ago(1000), None, 0.25, 3000.0),  # a quarter in 1000 s: 3000 s more at that pace
        (ago(1000), 9999.0, 0.5, 1000.0),  # progress wins over the expected run time
        (ago(1000), None, 1.0, 0.0),  # done
        (ago(1000), None, 0.0, None),  # no progress yet says nothing of the pace
        (None, None, 0.5, None),  # progress without a start: no pace
        (ago(1000), 4000.0, 0.0, 3000.0),  # ... then the expected run time answers
    ],
)
def test_remaining_seconds(started, runtime, progress, left):
    job = declared(ej("a", started=started), runtime, progress)
    assert payoff.remaining_seconds(job, NOW) == left


@pytest.mark.parametrize(
    ("job", "runtime", "start_gpus", "run"),
    [
        # declared for the 4 workers it asks for; its gang starts it at 2: twice as long
        (ej("w", min=2, replicas=4, active=0), 3600.0, 2, 7200.0),
        (ej("w", min=2, replicas=2, active=0), 3600.0, 2, 3600.0),  # asks for its gang
        (ej("w", min=2, replicas=4, active=0, gpw=2), 3600.0, 4, 7200.0),  # by GPUs
        (ej("w", min=2, replicas=4, active=0), None, 2, None),  # declared nothing
        # a job that ran (its gang waits again) is read as it declares: 4000 - 1000 s
        (ej("w", min=2, replicas=4, active=0, started=ago(1000)), 4000.0, 2, 3000.0),
    ],
)
def test_a_waiting_gangs_declared_run_is_read_at_its_gangs_size(job, runtime, start_gpus, run):
    assert payoff.run_at_start(declared(job, runtime), NOW, start_gpus) == run


@pytest.mark.parametrize(
    ("sizes", "ratio"),
    [
        ([(2, 1)] * 4, 2.0),  # (workers, minimum) of each running job
        ([(2, 1), (1, 1), (1, 1), (1, 1)], 1.25),
        # a mean over jobs, as the run times are: the 56-worker job counts once
        ([(56, 16), (1, 1), (1, 1), (1, 1)], 1.625),
        ([(1, 2), (2, 2)], 1.0),  # one below its minimum counts 1, not less
        ([(3, 0)], 1.0),  # no minimum to measure from
        ([], 1.0),  # nothing running
    ],
)
def test_growth_ratio(sizes, ratio):
    assert payoff.growth_ratio(sizes) == ratio


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0, 1e5), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 64), st.integers(0, 16)), max_size=20),
)
def test_a_newcomer_at_its_gangs_size_runs_no_shorter_than_the_runs_did(runs, sizes):
    """Whatever the queue's jobs run at, the newcomer's run at its gang's size is never
    shorter than the runs' mean, at most the largest growth times it: a swap the rule
    refused before #47 it still refuses."""
    growth = payoff.growth_ratio(sizes)
    times = payoff.RunTimes.of(runs, [], growth)
    top = max([1.0] + [a / m for a, m in sizes if m > 0])
    assert 1.0 <= growth <= top * (1 + 1e-12)
    assert times.mean() <= times.at_start() <= top * times.mean() * (1 + 1e-12)


@pytest.mark.parametrize(
    ("shortfall", "ending", "wait"),
    [
        (2, [(600.0, 2), (60.0, 1)], 600.0),  # 1 GPU at 60 s, the second at 600 s
        (1, [(600.0, 2), (60.0, 1)], 60.0),
        (4, [(600.0, 2), (60.0, 1)], None),  # the declared jobs cannot free enough
        (1, [], None),  # nobody declared: unknown
    ],
)
def test_gang_wait(shortfall, ending, wait):
    assert payoff.gang_wait(shortfall, ending) == wait


@pytest.mark.parametrize(
    ("free", "ending", "gangs", "at"),
    [
        (0, [(60.0, 1), (600.0, 2)], [(2, None)], [600.0]),  # gang_wait's walk for one gang
        (1, [(600.0, 2)], [(1, None), (2, None)], [0.0, 600.0]),  # free now, then in order
        # the first gang's GPUs come back at its end (100 + 50 s) before e's at 600 s
        (0, [(100.0, 2), (600.0, 2)], [(2, 50.0), (2, None)], [100.0, 150.0]),
        # strictly in order: the 1-GPU gang does not pass the 4-GPU one ahead of it
        (1, [(600.0, 4)], [(4, None), (1, None)], [600.0, 600.0]),
        # a gang whose run is unknown holds its GPUs past the walk: the next never starts
        (0, [(100.0, 2)], [(2, None), (2, 60.0)], [100.0]),
        (0, [], [(1, 60.0)], []),  # nothing known frees: no start
    ],
)
def test_starts(free, ending, gangs, at):
    assert payoff.starts(free, ending, gangs) == at


@pytest.mark.parametrize(
    ("backlog", "after", "taken", "gained"),
    [
        # one gang, nothing else waiting: its wait, as gang_wait says
        (payoff.Backlog((), [(2, 3600.0)], (), 0), None, 2, (600.0, 600.0)),
        # two short gangs behind it start at e's end (600 s) instead of w's (4200 s)
        (
            payoff.Backlog((), [(2, 3600.0)], [(1, 60.0), (1, 60.0)], 0),
            None,
            2,
            (600.0, 600.0 + 2 * 3600.0),
        ),
        # ... but the victim, 2 GPUs short, ends at 9000 s instead of 7200 s: the 4-GPU
        # gang behind, which its 4 GPUs would have started then, starts 1800 s later
        (
            payoff.Backlog((), [(2, None)], [(4, None)], 0),
            [(600.0, 2), (9000.0, 2)],
            2,
            (600.0, 600.0 - 1800.0),
        ),
        # a gang ahead that still waits takes what frees first, either way
        (payoff.Backlog([(2, None)], [(2, None)], (), 0), None, 2, (7200.0, 7200.0)),
        # the gang's own wait unknown: nothing is known of the reclaim's worth
        (payoff.Backlog((), [(9, None)], (), 0), None, 9, None),
    ],
)
def test_reclaim_gain(backlog, after, taken, gained):
    ending = [(600.0, 2), (7200.0, 4)]
    got = payoff.reclaim_gain(backlog, ending, ending if after is None else after, taken)
    assert got == (gained if gained is None else (*gained, None))


def test_the_walk_says_when_the_victims_are_grown_back():
    # w starts now, s behind it at e's end (600 s) and done at 660 s: then 2 GPUs are
    # free with no gang waiting, and the victims get back the 2 they gave
    backlog = payoff.Backlog((), [(2, 3600.0)], [(1, 60.0)], 0)
    ending = [(600.0, 2), (7200.0, 4)]
    assert payoff.reclaim_gain(backlog, ending, ending, 2, grow_back=2) == (600.0, 4200.0, 660.0)
    # a gang behind whose run is unknown holds its GPUs: not before v's end
    backlog = payoff.Backlog((), [(2, 3600.0)], [(1, None)], 0)
    assert payoff.reclaim_gain(backlog, ending, ending, 2, grow_back=2)[2] == 3600.0


_ENDS = st.lists(st.tuples(st.integers(1, 10_000).map(float), st.integers(1, 8)), max_size=6).map(
    sorted
)


@settings(max_examples=300, deadline=None)
@given(
    free=st.integers(0, 4),
    ending=_ENDS,
    needs=st.lists(st.integers(1, 8), min_size=1, max_size=4),
)
def test_with_nothing_else_waiting_the_walk_is_the_pairwise_wait(free, ending, needs):
    # the gangs a reclaim serves, no gang ahead or behind, none ending within the walk:
    # the backlog's gain is the sum of their waits, each as gang_wait says for what it
    # and those before it need (the trade before the walk)
    short = sum(needs) - free
    waits = []
    for k in range(len(needs)):
        need = sum(needs[: k + 1]) - free
        waits.append(0.0 if need <= 0 else payoff.gang_wait(need, ending))
    backlog = payoff.Backlog((), [(n, None) for n in needs], (), free)
    gained = payoff.reclaim_gain(backlog, ending, ending, max(short, 0))
    if None in waits or short <= 0:  # unknown, or no GPU short: the walk says nothing
        assert gained is None
    else:
        assert gained == (sum(waits), sum(waits), None)


@settings(max_examples=300, deadline=None)
@given(
    ending=_ENDS,
    served=st.lists(st.integers(1, 4), min_size=1, max_size=2),
    behind=st.lists(st.tuples(st.integers(1, 4), st.integers(1, 5000).map(float)), max_size=5),
    late=st.lists(st.integers(0, 5000).map(float), min_size=6, max_size=6),
)
def test_a_victim_returning_its_gpus_later_never_makes_a_reclaim_pay_more(
    ending, served, behind, late
):
    # the same reclaim, the victims' ends moved later: no gang starts sooner
    backlog = payoff.Backlog((), [(n, 600.0) for n in served], behind, 0)
    later = sorted((at + dt, gpus) for (at, gpus), dt in zip(ending, late, strict=False))
    sooner = payoff.reclaim_gain(backlog, ending, ending, sum(served))
    worse = payoff.reclaim_gain(backlog, ending, later, sum(served))
    if sooner is not None and worse is not None:
        assert worse[1] <= sooner[1] + 1e-6


@pytest.mark.parametrize(
    ("workers", "taken", "remaining", "gang_runtime", "loss"),
    [
        (4, 2, 7200.0, 3600.0, 30 + 3600.0),  # 2 of 4 while the gang's job runs: x1
        (4, 1, 7200.0, 3600.0, 30 + 1200.0),  # 1 of 4: the 3 left do its work 1/3 slower
        (4, 2, 600.0, 3600.0, 30 + 600.0),  # it ends before the gang's job does
        (4, 2, None, 3600.0, 30 + 3600.0),  # its own run unknown: the gang's
        (4, 2, 7200.0, None, None),  # the gang's run unknown: no estimate
        (4, 2, None, None, None),  # nothing known
        (2, 2, 600.0, 3600.0, 30 + 600.0),  # stopped outright: it waits all it had left
        (4, 0, 600.0, 3600.0, 0.0),  # only unplaced workers: nothing lost
    ],
)
def test_victim_loss(workers, taken, remaining, gang_runtime, loss):
    assert payoff.victim_loss(workers, taken, remaining, gang_runtime, 30.0) == loss


@pytest.mark.parametrize(
    ("back_in", "loss"),
    [
        (600.0, 2 * 30 + 600.0),  # grown back after 600 s: a second restart
        (3600.0, 30 + 3600.0),  # not before the gang's job ends anyway
        (None, 30 + 3600.0),  # unknown: until the gang's job ends
    ],
)
def test_a_victim_grown_back_sooner_loses_less(back_in, loss):
    assert payoff.victim_loss(4, 2, 7200.0, 3600.0, 30.0, back_in) == loss


@pytest.mark.parametrize(
    ("gain", "loss", "factor", "pays"),
    [
        (600.0, 3630.0, 1.0, False),
        (7200.0, 3630.0, 1.0, True),
        (7200.0, 3630.0, 2.5, False),
        (None, 3630.0, 1.0, True),  # the wait is unknown: reclaim as before
        (600.0, 3630.0, 0.0, True),  # the check off
        (600.0, 0.0, 1.0, True),  # no loss known
    ],
)
def test_the_trade(gain, loss, factor, pays):
    assert payoff.Trade(gain, loss).pays(factor) is pays


# ---- the planner's decision -------------------------------------------------------------------
# Queue full (0 free). v runs 4 workers (min 2): the only victim. e runs 2 at its min (not a
# victim) and ends in 600 s if it declares so. Gang g (2 GPUs) belongs to job w, expected
# to run 3600 s. The gang would wait 600 s for e's GPUs. Taking 2 of v's 4 workers costs v
# two restarts (30 s each: shrunk now, grown back when e's GPUs free) and 600 s of 2
# workers' work (at linear speedup, 600 s more for the 2 left): 660 s.


def _scene(*, v=(7200.0, None), e=(600.0, None), w=3600.0, waited=60.0, v_workers=4, w_asks=2):
    started = ago(3600)
    jobs = [
        declared(ej("v", min=2, max=8, replicas=v_workers, started=started), *_run(v, started)),
        declared(ej("e", min=2, max=2, replicas=2, started=started), *_run(e, started)),
        declared(ej("w", min=2, max=4, replicas=w_asks, active=0), w, None),
    ]
    return jobs, [gang("w", 2, owner="w", created=ago(waited))]


def _run(declared_left, started):
    """(remaining, progress) as (expected run time, progress) from the start."""
    left, progress = declared_left
    if left is None:
        return None, progress
    return left + (NOW - started).total_seconds(), progress


@pytest.mark.parametrize(
    ("scene", "pol", "gang_reason", "v_target"),
    [
        # the gang would wait 600 s, v would lose 660 s: it waits
        ({}, {}, Reason.GANG_RECLAIM_UNPAID, 4),
        # e declares nothing: v's own end (7200 s) is the only known one: the gang would
        # wait 7200 s, v would lose 30 s + 3600 s (w's run): reclaim
        ({"e": (None, None)}, {}, Reason.GANG_COVERED, 2),
        # nobody declares anything: today's rule, reclaim
        ({"v": (None, None), "e": (None, None), "w": None}, {}, Reason.GANG_COVERED, 2),
        # v's loss unknown (the gang's job declares no run): it counts nothing
        ({"w": None}, {}, Reason.GANG_COVERED, 2),
        # the check off
        ({}, {"reclaim_payoff_factor": 0}, Reason.GANG_COVERED, 2),
        # e ends in 3000 s: the gang would wait 3000 s, v would lose 60 + 3000 s: not at
        # factor 1, but at 0.5
        ({"e": (3000.0, None)}, {"reclaim_payoff_factor": 0.5}, Reason.GANG_COVERED, 2),
        ({"e": (3000.0, None)}, {}, Reason.GANG_RECLAIM_UNPAID, 4),
        # v reports progress: 90 % in 3600 s, so 400 s left: it would lose 30 + 400 s, but
        # the gang would wait only 400 s (for v's own end)
        ({"v": (None, 0.9)}, {}, Reason.GANG_RECLAIM_UNPAID, 4),
        # the same v with 8 workers, 6 of them above min: losing 2 of 8 for 400 s costs it
        # 30 + 400 x 2/6 s < the 400 s the gang would wait
        ({"v": (None, 0.9), "v_workers": 8}, {}, Reason.GANG_COVERED, 6),
    ],
)
def test_a_reclaim_goes_ahead_only_where_it_pays(scene, pol, gang_reason, v_target):
    jobs, gangs = _scene(**scene)
    p = plan(snap({"q": 0}, jobs, gangs), policy(**pol), NOW)
    assert {g.ref.name: g.reason for g in p.gangs} == {"w": gang_reason}
    v = next(d for d in p.decisions if d.ref.name == "v")
    assert v.target == v_target
    if gang_reason is Reason.GANG_RECLAIM_UNPAID:
        assert "reclaiming for it does not pay (the gang would wait ~" in p.gangs[0].message
    if not scene and not pol:
        assert "wait ~600s; its victims would lose ~660s" in p.gangs[0].message


@pytest.mark.parametrize(
    ("w_asks", "gang_reason", "v_target"),
    [
        # w declares 3600 s at the 2 workers of its gang; e declares nothing, v ends in
        # 6000 s: the gang would wait 6000 s, v would lose 30 + 3600 s: reclaim
        (2, Reason.GANG_COVERED, 2),
        # w declares 3600 s at the 4 workers it asks for: at its gang's 2 it runs 7200 s,
        # longer than v has left: v would lose 30 s + its whole 6000 s left at half speed,
        # more than the gang's wait (before #47 w was read at 3600 s, and v swapped)
        (4, Reason.GANG_RECLAIM_UNPAID, 4),
    ],
)
def test_a_gangs_declared_run_is_weighed_at_the_size_it_starts_at(w_asks, gang_reason, v_target):
    jobs, gangs = _scene(v=(6000.0, None), e=(None, None), w_asks=w_asks)
    p = plan(snap({"q": 0}, jobs, gangs), policy(), NOW)
    assert {g.ref.name: g.reason for g in p.gangs} == {"w": gang_reason}, p.gangs[0].message
    assert next(d for d in p.decisions if d.ref.name == "v").target == v_target
    if gang_reason is Reason.GANG_RECLAIM_UNPAID:
        assert "the gang would wait ~6000s; its victims would lose ~6030s" in p.gangs[0].message


def test_a_gang_refused_a_reclaim_still_starves_growth():
    jobs, gangs = _scene(waited=4000)
    gangs = [replace(gangs[0], gpus=3)]  # 1 GPU free, 2 short: the scene's trade again
    jobs.append(ej("x", min=1, max=8, replicas=1))  # would grow into anything free
    p = plan(snap({"q": 1}, jobs, gangs), policy(max_gang_wait_seconds=1800), NOW)
    assert p.gangs[0].reason is Reason.GANG_RECLAIM_UNPAID
    assert "max_gang_wait_seconds=1800" in p.gangs[0].message
    x = next(d for d in p.decisions if d.ref.name == "x")
    assert (x.target, x.reason) == (1, Reason.GANG_STARVING)


def _line(*, v=(7200.0, 4), e=(600.0, 2), w=3600.0, behind=()):
    """A full queue (0 free): v runs v[1] workers (min 2) with v[0] s left, e runs e[1]
    (min = max) with e[0] s left; gang w (2 GPUs, its job runs `w` s) waits, and behind
    it `behind`'s gangs (name, GPUs, run), each of a job of that size."""
    started = ago(3600)
    (v_left, v_workers), (e_left, e_workers) = v, e
    jobs = [
        declared(ej("v", min=2, max=8, replicas=v_workers, started=started), v_left + 3600),
        declared(
            ej("e", min=e_workers, max=e_workers, replicas=e_workers, started=started),
            e_left + 3600,
        ),
        declared(ej("w", min=2, max=4, replicas=2, active=0), w),
    ]
    gangs = [gang("w", 2, owner="w", created=ago(60))]
    for k, (name, gpus, run) in enumerate(behind):
        made = ago(30 - k)
        jobs.append(
            declared(ej(name, min=gpus, max=gpus, replicas=gpus, active=0, created=made), run)
        )
        gangs.append(gang(name, gpus, owner=name, created=made))
    return snap({"q": 0}, jobs, gangs)


def test_victims_passed_over_stay_victims_for_the_next_gang():
    # w alone would take 2 of v's 5 workers: it waits 1800 s otherwise (v's end), but v,
    # short of 2, ends at 30 + 1800 x 5/3 = 3030 s instead, so s behind (1 GPU), which v's
    # end would start at 1800 s, starts at 3000 s (e's end): the queue gains 1800 - 1200
    # = 600 s, v loses 30 + 1800 x 2/3 = 1230 s: w waits. s is weighed with w: what v
    # frees goes to w first (Volcano admits in order), so the reclaim covers both (3
    # GPUs), and their waits (1800 + 1800 s) beat v's loss (30 + 1800 x 3/2 s): v gives 3
    p, again = _replanned(_line(v=(1800.0, 5), e=(3000.0, 2), behind=[("s", 1, 60.0)]))
    assert {g.ref.name: g.reason for g in p.gangs} == {
        "w": Reason.GANG_COVERED,
        "s": Reason.GANG_COVERED,
    }
    assert next(d for d in p.decisions if d.ref.name == "v").target == 2
    w, s = sorted(p.gangs, key=lambda g: g.ref.name, reverse=True)
    assert "covered by the reclaim made for PodGroup ml/s behind it" in w.message
    assert "waits behind PodGroup ml/w" in s.message and s.gpus == 1
    v = next(d for d in p.decisions if d.ref.name == "v")
    assert v.message.endswith("to make room for PodGroup ml/w, ml/s")  # both it serves
    assert again.actions == ()  # the next plan sees both fit in what v releases


def test_a_gang_behind_a_refused_one_is_not_served_by_a_reclaim_that_serves_it():
    # v may give 2 GPUs. For w alone: it would wait 600 s (e's end) and s behind it 1800
    # s (v's end); with the reclaim w starts now, s at 600 s (e's), and v ends at 30 +
    # 1800 x 4/2 s: the queue gains 600 + 1200 s, v loses 30 + 1800 s: w waits. A
    # reclaim for s (1, behind) would free what Volcano gives w first once it is enough
    # (the next plan would serve w from it and weigh s again): counted with w, 3 GPUs,
    # nobody covers it, nothing is taken
    p, again = _replanned(_line(v=(1800.0, 4), behind=[("s", 1, 3600.0)]))
    assert {g.ref.name: g.reason for g in p.gangs} == {
        "w": Reason.GANG_RECLAIM_UNPAID,
        "s": Reason.GANG_UNCOVERABLE,
    }
    w = next(g for g in p.gangs if g.ref.name == "w")
    assert "the queue's waiting gangs in all would start ~1800s sooner" in w.message
    assert "its victims would lose ~1830s" in w.message
    s = next(g for g in p.gangs if g.ref.name == "s")
    assert "counted with PodGroup ml/w ahead of it" in s.message
    assert p.actions == () and again.actions == ()


def test_a_refused_gang_holds_its_queues_growth():
    # 1 GPU free, the gang short 2: the scene's trade, refused. x could grow into the
    # free GPU, but then the gang would be short 3 and the next plan weigh another
    # trade: x holds (the GPUs that free are the gang's)
    jobs, gangs = _scene()
    gangs = [replace(gangs[0], gpus=3)]
    jobs.append(ej("x", min=1, max=8, replicas=1))
    p, again = _replanned(snap({"q": 1}, jobs, gangs))
    assert p.gangs[0].reason is Reason.GANG_RECLAIM_UNPAID
    x = next(d for d in p.decisions if d.ref.name == "x")
    assert (x.target, x.reason) == (1, Reason.GANG_WAITING)
    assert "PodGroup ml/w waits for GPUs to free" in x.message
    assert again.actions == ()


def _replanned(snapshot, pol=None):
    """The plan, and the plan of its result applied (the actuator's writes: replicas and
    the last-scale time; status as it was): idempotence wants no action in the second."""
    pol = pol or policy()
    first = plan(snapshot, pol, NOW)
    targets = {d.ref: d.target for d in first.actions}
    jobs = tuple(
        replace(j, replicas=targets[j.ref], last_scale_time=NOW) if j.ref in targets else j
        for j in snapshot.jobs
    )
    return first, plan(replace(snapshot, jobs=jobs), pol, NOW)


# ---- the annotations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("notes", "runtime", "progress"),
    [
        ({}, None, None),
        ({RUNTIME: "14400"}, 14400.0, None),
        ({RUNTIME: 3 * 86400}, 3 * 86400.0, None),  # longer than a day is fine
        ({PROGRESS: "0.4"}, None, 0.4),
        ({PROGRESS: " 40% "}, None, 0.4),
        ({PROGRESS: 1}, None, 1.0),
        ({RUNTIME: "600", PROGRESS: "0.5"}, 600.0, 0.5),
    ],
)
def test_the_run_a_job_declares_is_read_from_its_annotations(notes, runtime, progress):
    job = parse_job(pytorchjob(annotations=notes), app_settings().read_options(), Priorities({}))
    assert (job.expected_runtime_seconds, job.progress) == (runtime, progress)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (RUNTIME, "soon"),
        (RUNTIME, "-1"),
        (RUNTIME, "1e12"),
        (RUNTIME, True),
        (PROGRESS, "1.5"),
        (PROGRESS, "-0.1"),
        (PROGRESS, "150%"),
        (PROGRESS, "half"),
        (PROGRESS, "nan"),
        (PROGRESS, False),
    ],
)
def test_a_bad_run_annotation_names_the_field(key, value):
    job = parse_job(
        pytorchjob(annotations={key: value}), app_settings().read_options(), Priorities({})
    )
    assert isinstance(job, UnmanagedJob) and job.reason is Reason.INVALID_ANNOTATION
    assert f"metadata.annotations[{key}]" in job.message


def test_now_is_the_only_clock():
    # the same job a minute later has a minute less left: time comes from `now`
    job = declared(ej("a", started=ago(1000)), 4000.0)
    later = NOW + timedelta(seconds=60)
    assert payoff.remaining_seconds(job, later) == payoff.remaining_seconds(job, NOW) - 60


def test_a_gang_behind_others_that_wait_waits_longer():
    # w2 (as big as w, behind it) starts at v's end (1800 s) with w either way, unless
    # the reclaim delays v: alone, w's reclaim (2 of v's 6) gains 1800 s for w and
    # costs w2 930 s (v ends at 30 + 1800 x 6/4 = 2730 s), v loses 30 + 1800 x 2/4 s:
    # w waits. w2 is weighed with w: the reclaim covers both (4 of v's 4 spare); their
    # waits (1800 + 1800 s) against v's loss (30 + 1800 x 4/2 s): both wait
    p, again = _replanned(_line(v=(1800.0, 6), e=(3000.0, 2), behind=[("w2", 2, 3600.0)]))
    assert [g.reason for g in p.gangs] == [Reason.GANG_RECLAIM_UNPAID] * 2
    w2 = next(g for g in p.gangs if g.ref.name == "w2")
    assert "with PodGroup ml/w ahead of it does not pay" in w2.message
    assert "the gang would wait ~3600s; its victims would lose ~3630s" in w2.message
    assert p.actions == () and again.actions == ()
    # v runs 7: w's reclaim alone keeps v's end (1800 x 7/5 + 30 = 2550 s) before e's,
    # w gains 1800 s, w2 loses 750, v 30 + 1800 x 2/5 = 750 s: w alone is served, and
    # w2 is not (v was resized by this plan: its workers wait for the next)
    p, again = _replanned(_line(v=(1800.0, 7), e=(3000.0, 2), behind=[("w2", 2, 3600.0)]))
    assert {g.ref.name: g.reason for g in p.gangs} == {
        "w": Reason.GANG_COVERED,
        "w2": Reason.GANG_UNCOVERABLE,
    }
    assert next(d for d in p.decisions if d.ref.name == "v").target == 5
    assert again.actions == ()


# ---- the backlog: what a reclaim for the head of the line buys the gangs behind it ----------


@pytest.mark.parametrize(
    ("line", "w_reason", "v_target", "words"),
    [
        # The scene's trade (w would wait 600 s, v lose 660 s) with two 1-GPU gangs of
        # 60 s behind w: without the reclaim they wait for w's end (4200 s: w takes
        # e's 2 GPUs at 600 s); with it they start at 600 s on e's GPUs. The queue gains
        # 600 + 2 x 3600 s, v loses 30 + 3600 s (w's run; v is grown back only at its
        # end, 7200 s, when the queue has freed enough for all of them): reclaim. The
        # pairwise trade (600 s against 3630 s) refused it.
        (
            {"behind": [("s1", 1, 60.0), ("s2", 1, 60.0)]},
            Reason.GANG_COVERED,
            2,
            "",
        ),
        # The reverse: v (6 workers) ends in 1000 s, when w and the two 2-GPU gangs
        # behind it would all start on its GPUs. Pairwise w gains 1000 s and v loses 30
        # + 1000 x 2/4 s: it paid. But v, short of 2, ends at 30 + 1000 x 6/4 = 1530 s
        # and holds the gangs behind 530 s each: the queue gains 1000 - 2 x 530 s, less
        # than v's loss: w waits.
        (
            {
                "v": (1000.0, 6),
                "e": (36000.0, 2),
                "behind": [("b1", 2, 36000.0), ("b2", 2, 36000.0)],
            },
            Reason.GANG_RECLAIM_UNPAID,
            6,
            "the gang would wait ~1000s, the queue's waiting gangs in all would start ~60s "
            "later; its victims would lose ~530s",
        ),
        # v (4 workers, 1800 s left) gives 2: w starts now, s behind it (60 s) at e's end
        # (600 s) instead of v's (1800 s). When s ends, at 660 s, no gang waits: v is grown
        # back then (a second restart), so it loses 2 x 30 + 660 s, not 30 + 1800 s (until
        # its end, as the running jobs' ends alone said): the queue gains 600 + 1200 s
        (
            {"v": (1800.0, 4), "behind": [("s", 1, 60.0)]},
            Reason.GANG_COVERED,
            2,
            "",
        ),
    ],
)
def test_a_reclaim_is_weighed_by_what_it_buys_the_backlog(line, w_reason, v_target, words):
    p, again = _replanned(_line(**line))
    w = next(g for g in p.gangs if g.ref.name == "w")
    assert w.reason is w_reason
    assert next(d for d in p.decisions if d.ref.name == "v").target == v_target
    assert words in w.message
    assert again.actions == ()


# ---- what other queues hold of the gang's share is owed, not traded ---------------------------
# Capacity plugin, 32 GPUs, queues a and b deserve 16 each, no GPU idle. Queue a grew into
# b's share (a holds 20: 4 beyond its 16). In b: v runs 7 workers (declares 2 h left), e
# runs 5 (min = max) and ends in 60 s; w waits for its gang of 4 GPUs (runs 1 h). Within
# b, reclaiming for the gang waits only for e's end: the gang would wait 60 s.


def _shares_scene(v_min: int) -> ClusterSnapshot:
    started = ago(3600)
    queues = {
        q: VolcanoQueue(q, allocated=held, capability=32, real_capacity=32, spec_deserved=16)
        for q, held in (("a", 20.0), ("b", 12.0))
    }
    nodes = tuple(NodeGpus(f"n{i}", 8, 8) for i in range(4))
    view = VolcanoView(Plugin.CAPACITY, queues, nodes)
    jobs = [
        ej("a1", queue="a", min=18 if v_min == 5 else 2, max=32, replicas=20),
        declared(ej("v", queue="b", min=v_min, max=8, replicas=7, started=started), 10800.0),
        declared(ej("e", queue="b", min=5, max=5, replicas=5, started=started), 3660.0),
        declared(ej("w", queue="b", min=4, max=4, replicas=4, active=0), 3600.0),
    ]
    return ClusterSnapshot(
        queues={q: QueueState(q, None, volcano=vq) for q, vq in queues.items()},
        jobs=tuple(jobs),
        pending=(gang("w", 4, queue="b", owner="w"),),
        volcano=view,
    )


def test_a_gang_gets_its_share_back_where_a_reclaim_in_its_queue_does_not_pay():
    # v alone could cover the gang (6 workers above min 1), but taking 4 of its 7
    # workers costs it 2 restarts + 60 s x 4/3 = 140 s against the 60 s the gang would
    # wait: not in its queue. Queue a holds 4 GPUs of b's share: they come back.
    p = plan(_shares_scene(v_min=1), policy(), NOW)
    t = {d.ref.name: (d.target, d.reason) for d in p.decisions}
    assert t["a1"] == (16, Reason.RECLAIM_FOR_QUEUE)
    assert t["v"][0] == 7
    assert p.gangs[0].reason is Reason.GANG_COVERED


def test_the_part_of_a_cover_taken_in_the_gangs_queue_is_weighed():
    # v can give 2 workers (min 5), a only 2 GPUs (its job at min 18): the gang needs
    # both. v's part does not pay (60 + 60 x 2/5 s against 60 s): the gang waits, and
    # nothing is taken from a either (alone it does not start the gang).
    p = plan(_shares_scene(v_min=5), policy(), NOW)
    t = {d.ref.name: d.target for d in p.decisions}
    assert (t["a1"], t["v"]) == (20, 7)
    assert p.gangs[0].reason is Reason.GANG_RECLAIM_UNPAID
    # with the check off the same cover goes ahead: 2 from each queue
    p = plan(_shares_scene(v_min=5), policy(reclaim_payoff_factor=0), NOW)
    t = {d.ref.name: d.target for d in p.decisions}
    assert (t["a1"], t["v"]) == (18, 5)


def test_replanning_after_the_share_came_back_changes_nothing():
    # the plan applied: a1 asked down to 16, its 4 workers still being released
    s = _shares_scene(v_min=1)
    a1 = next(j for j in s.jobs if j.ref.name == "a1")
    after = replace(a1, replicas=16, last_scale_time=NOW)
    s = replace(s, jobs=tuple(after if j is a1 else j for j in s.jobs))
    # nothing more is taken: not from a1 (in reclaim cooldown), not from v (the
    # in-queue reclaim still does not pay)
    assert plan(s, policy(), NOW).actions == ()


# ---- swaps without declared runs: the queue's own run times ------------------------------


def test_run_times_by_kaplan_meier():
    # finished 100, 200, 300 s; one job running for 150 s (at least that long)
    runs = payoff.RunTimes.of([100.0, 200.0, 300.0], [150.0])
    assert runs.mean() == pytest.approx(212.5)  # 100 + 50 x 0.75 + 50 x 0.75 + 100 x 0.375
    assert runs.remaining(150.0) == pytest.approx(100.0)  # the 200 and the 300 s runs
    assert runs.remaining(0.0) == pytest.approx(runs.mean())
    assert runs.remaining(300.0) == 0.0  # nothing seen beyond: restricted to 300 s
    assert (runs.known_beyond(150.0), runs.known_beyond(300.0)) == (2, 0)


@pytest.mark.parametrize(
    ("left", "newcomer", "restarts", "factor", "short"),
    [
        (1700.0, 2000.0, 60.0, 1.0, True),
        (2100.0, 2000.0, 60.0, 1.0, False),  # it has more left than the newcomer's run
        (2050.0, 2000.0, 60.0, 1.0, True),  # ... but not more than the swap's restarts
        (1700.0, 2000.0, 60.0, 0.5, False),
        (1700.0, 2000.0, 60.0, 0.0, False),  # the check off
        (None, 2000.0, 60.0, 1.0, False),  # not known
    ],
)
def test_swap_short(left, newcomer, restarts, factor, short):
    assert payoff.swap_short(left, newcomer, restarts, factor) is short


def _finished(runs, queue="q"):
    """Finished jobs of the queue as parse.py reads them: start and completion."""
    return [
        UnmanagedJob(
            ObjectRef("ml", f"done-{i}"),
            queue,
            Reason.FINISHED,
            "job has condition Succeeded",
            started=ago(100_000 + run),
            completed=ago(100_000),
        )
        for i, run in enumerate(runs)
    ]


# half the runs short, half long (the ITP slices' 1-GPU jobs are bimodal too)
BIMODAL = [500.0] * 30 + [3000.0] * 30
# three runs in four short, one long: a newcomer is most likely short
HEAVY_TAILED = [100.0] * 90 + [20_000.0] * 30


def _swap_scene(runs, *, age=300.0, victim_max=2, victim_replicas=2, running=4, grown=None):
    """`running` 1-GPU jobs `age` seconds into their run, the first `grown` of them (all
    by default) grown to `victim_replicas` workers, the others at their 1; a 1-GPU gang
    waiting, nothing free, nothing declared; `runs` the queue's finished runs."""
    grown = running if grown is None else grown
    jobs = [
        ej(
            f"a{i:02}",
            min=1,
            max=victim_max,
            replicas=victim_replicas if i < grown else 1,
            started=ago(age),
        )
        for i in range(running)
    ]
    jobs.append(ej("w", min=1, max=2, replicas=1, active=0, created=ago(30)))
    return snap({"q": 0}, jobs, [gang("w", 1, owner="w", created=ago(30))], _finished(runs))


@pytest.mark.parametrize(
    ("runs", "scene", "pol", "reason"),
    [
        # 40 runs of 2000 s: a newcomer runs ~2000 s, a victim 300 s in has ~1700 s
        # left: fewer jobs faster; the gang waits for GPUs to free
        ([2000.0] * 40, {}, {}, Reason.GANG_RECLAIM_UNPAID),
        ([], {}, {}, Reason.GANG_COVERED),  # no history, a small queue: today's rule
        ([2000.0] * 29, {}, {}, Reason.GANG_COVERED),  # too few runs to say
        # the victims are older than any run seen finish: their run left is not known
        ([2000.0] * 40, {"age": 2500.0}, {}, Reason.GANG_COVERED),
        # heavy-tailed runs: a job 300 s in is likely a long one (~19,700 s left) and a
        # newcomer likely short (~5,560 s on average, ~11,100 s at its 1 worker as the
        # jobs grew to 2): the newcomer goes first
        (HEAVY_TAILED, {}, {}, Reason.GANG_COVERED),
        ([2000.0] * 40, {}, {"reclaim_payoff_factor": 0}, Reason.GANG_COVERED),  # off
        # a worker of a large job is not a swap: not weighed this way
        ([2000.0] * 40, {"victim_max": 8, "victim_replicas": 8}, {}, Reason.GANG_COVERED),
        # the newcomer's run at the size it starts at (#47). Runs of 500 and 3000 s: a
        # newcomer runs ~1828 s as the queue's jobs ran, a victim 600 s in has ~2400 s
        # left at its 2 workers. The jobs ran at 2x their minimum: at its 1 worker the
        # newcomer runs ~3656 s, longer than the victim has left: no swap (before #47,
        # 2400 > 1828 + 60 s of restarts swapped)
        (BIMODAL, {"age": 600.0}, {}, Reason.GANG_RECLAIM_UNPAID),
        # one job of four grown: the runs ran at ~1.25x, the newcomer ~2285 s at its size
        (BIMODAL, {"age": 600.0, "grown": 1}, {}, Reason.GANG_COVERED),
        # half of them grown (1.5x, ~2742 s): no swap
        (BIMODAL, {"age": 600.0, "grown": 2}, {}, Reason.GANG_RECLAIM_UNPAID),
    ],
)
def test_without_declared_runs_a_swap_is_weighed_by_the_queues_run_times(runs, scene, pol, reason):
    snapshot = _swap_scene(runs, **scene)
    p, again = _replanned(snapshot, policy(**pol))
    w = next(g for g in p.gangs if g.ref.name == "w")
    assert w.reason is reason
    taken = [d for d in p.actions if d.reason is Reason.RECLAIM_FOR_PENDING]
    assert len(taken) == (0 if reason is Reason.GANG_RECLAIM_UNPAID else 1)
    if reason is Reason.GANG_RECLAIM_UNPAID:
        assert again.actions == ()
    if reason is Reason.GANG_RECLAIM_UNPAID and runs == [2000.0] * 40:
        assert "nothing declared; by queue q's run times (40 finished, 4 running" in w.message
        assert (
            "a newcomer runs ~4000s at its gang's size (~2000s as the queue's jobs ran, at "
            "2.00x their minimum) and its victims have at most ~1700s left" in w.message
        )


@pytest.mark.parametrize(
    ("ages", "replicas", "reason"),
    [
        # a (600 s in, ~2400 s left) is longer than a newcomer's ~1770 s as the queue's
        # jobs ran, b (100 s in, ~1670 s left) shorter: before #47 a licensed b beside it
        # and both gave a worker. At its gang's size (2 workers, the jobs' minimum; they
        # run at 2x it) the newcomer runs ~3541 s: both victims are shorter, no swap
        ((600.0, 100.0), 2, Reason.GANG_RECLAIM_UNPAID),
        # a 3000 s in is older than any run seen: its run left unknown, today's rule
        ((3000.0, 100.0), 2, Reason.GANG_COVERED),
        # a worker of a large job is not a swap: not weighed this way
        ((600.0, 100.0), 8, Reason.GANG_COVERED),
    ],
)
def test_a_joint_swap_weighs_each_victim_against_the_newcomer_at_its_size(ages, replicas, reason):
    jobs = [
        ej(name, min=1, max=8, replicas=replicas, started=ago(age))
        for name, age in zip("ab", ages, strict=True)
    ]
    jobs.append(ej("w", min=2, max=4, replicas=2, active=0, created=ago(30)))
    snapshot = snap({"q": 0}, jobs, [gang("w", 2, owner="w", created=ago(30))], _finished(BIMODAL))
    p, again = _replanned(snapshot)
    w = next(g for g in p.gangs if g.ref.name == "w")
    assert w.reason is reason, w.message
    taken = [d for d in p.actions if d.reason is Reason.RECLAIM_FOR_PENDING]
    assert bool(taken) is (reason is Reason.GANG_COVERED)
    if reason is Reason.GANG_RECLAIM_UNPAID:
        assert "a newcomer runs ~3541s at its gang's size (~1770s" in w.message, w.message
        assert "victims have at most ~2400s left (a)" in w.message
        assert again.actions == ()


@pytest.mark.parametrize(
    ("runs", "scene", "pol", "reason"),
    [
        # 30 jobs running and no run finished yet: nothing says who is shorter, the
        # victim's two restarts are certain, and GPUs free as those 30 end: no swap
        ([], {"running": 30}, {}, Reason.GANG_RECLAIM_UNPAID),
        ([2000.0] * 29, {"running": 30}, {}, Reason.GANG_RECLAIM_UNPAID),  # still too few
        # a small queue: the gang could wait a whole run for one job, today's rule
        ([], {"running": 29}, {}, Reason.GANG_COVERED),
        ([], {"running": 30}, {"reclaim_payoff_factor": 0}, Reason.GANG_COVERED),  # off
        # a worker of a large job is not a swap
        ([], {"running": 30, "victim_max": 8, "victim_replicas": 8}, {}, Reason.GANG_COVERED),
        # with the queue's run times the swap is weighed by them (heavy-tailed: it goes)
        (HEAVY_TAILED, {"running": 30}, {}, Reason.GANG_COVERED),
        # a victim that declares its run left is weighed as it declares (unknown gain: as
        # today)
        ([], {"running": 30, "declared": True}, {}, Reason.GANG_COVERED),
    ],
)
def test_before_a_busy_queue_has_run_times_a_swap_waits(runs, scene, pol, reason):
    scene = dict(scene)  # the parameter's own dict stays as given
    declared = scene.pop("declared", False)
    snapshot = _swap_scene(runs, **scene)
    if declared:
        snapshot = replace(
            snapshot,
            jobs=tuple(
                replace(j, expected_runtime_seconds=90_000.0) if j.active else j
                for j in snapshot.jobs
            ),
        )
    p, again = _replanned(snapshot, policy(**pol))
    w = next(g for g in p.gangs if g.ref.name == "w")
    assert w.reason is reason, w.message
    taken = [d for d in p.actions if d.reason is Reason.RECLAIM_FOR_PENDING]
    assert len(taken) == (0 if reason is Reason.GANG_RECLAIM_UNPAID else 1)
    if reason is Reason.GANG_RECLAIM_UNPAID:
        finished = len(runs)
        assert (
            f"nothing declared; queue q has {finished} finished run(s), fewer than the 30 a "
            "swap is weighed by, and 30 jobs running that free GPUs as they end" in w.message
        )
        assert again.actions == ()


def test_a_finished_job_keeps_its_start_and_completion():
    obj = pytorchjob(conditions=[{"type": "Succeeded", "status": "True"}])
    obj["status"]["startTime"] = "2026-11-22T08:00:00Z"
    obj["status"]["completionTime"] = "2026-11-22T09:30:00Z"
    job = parse_job(obj, app_settings().read_options(), Priorities({}))
    assert isinstance(job, UnmanagedJob) and job.reason is Reason.FINISHED
    assert (job.completed - job.started).total_seconds() == 5400.0
    obj["status"]["completionTime"] = "later"  # not a time: no run, no error
    job = parse_job(obj, app_settings().read_options(), Priorities({}))
    assert job.reason is Reason.FINISHED and job.completed is None
