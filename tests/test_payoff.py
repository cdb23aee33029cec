"""Reclaim only where it pays (autoscaler/payoff.py, planner rule 3): the estimates from
what jobs declare of their run, the trade, and the planner's decision, one table each;
the annotations as parse.py reads them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from builders import NOW, ago, ej, gang, policy, pytorchjob, settings, snap

from autoscaler import payoff
from autoscaler.model import (
    ClusterSnapshot,
    NodeGpus,
    ObjectRef,
    Plugin,
    QueueState,
    Reason,
    UnmanagedJob,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.parse import Priorities, parse_job
from autoscaler.planner import plan

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


def _scene(*, v=(7200.0, None), e=(600.0, None), w=3600.0, waited=60.0, v_workers=4):
    started = ago(3600)
    jobs = [
        declared(ej("v", min=2, max=8, replicas=v_workers, started=started), *_run(v, started)),
        declared(ej("e", min=2, max=2, replicas=2, started=started), *_run(e, started)),
        declared(ej("w", min=2, max=4, replicas=2, active=0), w, None),
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


def test_a_gang_refused_a_reclaim_still_starves_growth():
    jobs, gangs = _scene(waited=4000)
    gangs = [replace(gangs[0], gpus=3)]  # 1 GPU free, 2 short: the scene's trade again
    jobs.append(ej("x", min=1, max=8, replicas=1))  # would grow into anything free
    p = plan(snap({"q": 1}, jobs, gangs), policy(max_gang_wait_seconds=1800), NOW)
    assert p.gangs[0].reason is Reason.GANG_RECLAIM_UNPAID
    assert "max_gang_wait_seconds=1800" in p.gangs[0].message
    x = next(d for d in p.decisions if d.ref.name == "x")
    assert (x.target, x.reason) == (1, Reason.GANG_STARVING)


def test_victims_passed_over_stay_victims_for_the_next_gang():
    # the first gang's reclaim does not pay (v has 4 spare workers: it would wait 600 s,
    # v lose 30 + 3600 * 2/4 s); the 1-GPU gang behind it, whose job runs 60 s, is
    # weighed with it: what v frees goes to w first (Volcano admits in order), so the
    # reclaim covers both (3 GPUs) and their waits (600 + 7200 s) beat v's loss
    # (30 + 3600 * 3/3 s, the longest of their runs): v gives 3 to both
    jobs, gangs = _scene(v_workers=6)
    short = declared(ej("s", min=1, max=1, replicas=1, active=0, created=ago(30)), 60.0, None)
    gangs.append(gang("s", 1, owner="s", created=ago(30)))
    snapshot = snap({"q": 0}, [*jobs, short], gangs)
    p, again = _replanned(snapshot)
    assert {g.ref.name: g.reason for g in p.gangs} == {
        "w": Reason.GANG_COVERED,
        "s": Reason.GANG_COVERED,
    }
    assert next(d for d in p.decisions if d.ref.name == "v").target == 3
    w, s = sorted(p.gangs, key=lambda g: g.ref.name, reverse=True)
    assert "covered by the reclaim made for PodGroup ml/s behind it" in w.message
    assert "waits behind PodGroup ml/w" in s.message and s.gpus == 1
    v = next(d for d in p.decisions if d.ref.name == "v")
    assert v.message.endswith("to make room for PodGroup ml/w, ml/s")  # both it serves
    assert again.actions == ()  # the next plan sees both fit in what v releases


def test_a_gang_behind_a_refused_one_is_not_served_by_a_reclaim_that_serves_it():
    # v may give 2 GPUs; w (2) was refused them. A reclaim for s (1, behind) would free
    # what Volcano gives w first once it is enough (the next plan would serve w from it
    # and weigh s again): counted with w, 3 GPUs, nobody covers it, nothing is taken
    jobs, gangs = _scene()
    short = declared(ej("s", min=1, max=1, replicas=1, active=0, created=ago(30)), 60.0, None)
    gangs.append(gang("s", 1, owner="s", created=ago(30)))
    p, again = _replanned(snap({"q": 0}, [*jobs, short], gangs))
    assert {g.ref.name: g.reason for g in p.gangs} == {
        "w": Reason.GANG_RECLAIM_UNPAID,
        "s": Reason.GANG_UNCOVERABLE,
    }
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
    job = parse_job(pytorchjob(annotations=notes), settings().read_options(), Priorities({}))
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
    job = parse_job(pytorchjob(annotations={key: value}), settings().read_options(), Priorities({}))
    assert isinstance(job, UnmanagedJob) and job.reason is Reason.INVALID_ANNOTATION
    assert f"metadata.annotations[{key}]" in job.message


def test_now_is_the_only_clock():
    # the same job a minute later has a minute less left: time comes from `now`
    job = declared(ej("a", started=ago(1000)), 4000.0)
    later = NOW + timedelta(seconds=60)
    assert payoff.remaining_seconds(job, later) == payoff.remaining_seconds(job, NOW) - 60


def test_a_gang_behind_others_that_wait_waits_longer():
    # w2 (as big as w, behind it) waits for the GPUs w takes first: weighed with w, the
    # reclaim covers both (4 of v's 4 spare GPUs); their waits (600 s, and until v's end,
    # 7200 s) beat v's loss (30 s + 3600 s * 4/2): both are served, v gives 4
    jobs, gangs = _scene(v_workers=6)
    w2 = declared(ej("w2", min=2, max=4, replicas=2, active=0, created=ago(30)), 3600.0)
    gangs.append(gang("w2", 2, owner="w2", created=ago(30)))
    p, again = _replanned(snap({"q": 0}, [*jobs, w2], gangs))
    assert {g.ref.name: g.reason for g in p.gangs} == {
        "w": Reason.GANG_COVERED,
        "w2": Reason.GANG_COVERED,
    }
    assert next(d for d in p.decisions if d.ref.name == "v").target == 2
    assert again.actions == ()
    # w2's job runs 10 h: v would lose its 2 workers until v's own end, 30 + 7200 * 4/2
    # s, more than both gain: both wait
    long = replace(w2, expected_runtime_seconds=36000.0)
    p, again = _replanned(snap({"q": 0}, [*jobs, long], gangs))
    assert [g.reason for g in p.gangs] == [Reason.GANG_RECLAIM_UNPAID] * 2
    w2 = next(g for g in p.gangs if g.ref.name == "w2")
    assert "with PodGroup ml/w ahead of it does not pay" in w2.message
    assert p.actions == () and again.actions == ()


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


def _swap_scene(runs, *, age=300.0, victim_max=2, victim_replicas=2):
    """Four 1-GPU jobs grown to 2 workers `age` seconds into their run, a 1-GPU gang
    waiting, nothing free, nothing declared; `runs` the queue's finished runs."""
    jobs = [
        ej(f"a{i}", min=1, max=victim_max, replicas=victim_replicas, started=ago(age))
        for i in range(4)
    ]
    jobs.append(ej("w", min=1, max=2, replicas=1, active=0, created=ago(30)))
    return snap({"q": 0}, jobs, [gang("w", 1, owner="w", created=ago(30))], _finished(runs))


@pytest.mark.parametrize(
    ("runs", "scene", "pol", "reason"),
    [
        # 40 runs of 2000 s: a newcomer runs ~2000 s, a victim 300 s in has ~1700 s
        # left: fewer jobs faster; the gang waits for GPUs to free
        ([2000.0] * 40, {}, {}, Reason.GANG_RECLAIM_UNPAID),
        ([], {}, {}, Reason.GANG_COVERED),  # no history: today's rule
        ([2000.0] * 29, {}, {}, Reason.GANG_COVERED),  # too few runs to say
        # the victims are older than any run seen finish: their run left is not known
        ([2000.0] * 40, {"age": 2500.0}, {}, Reason.GANG_COVERED),
        # heavy-tailed runs: a job 300 s in is likely a long one (~19,700 s left) and a
        # newcomer likely short (~10,000 s on average): the newcomer goes first
        ([100.0] * 30 + [20_000.0] * 30, {}, {}, Reason.GANG_COVERED),
        ([2000.0] * 40, {}, {"reclaim_payoff_factor": 0}, Reason.GANG_COVERED),  # off
        # a worker of a large job is not a swap: not weighed this way
        ([2000.0] * 40, {"victim_max": 8, "victim_replicas": 8}, {}, Reason.GANG_COVERED),
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
        assert "nothing declared; by queue q's run times (40 finished, 4 running" in w.message
        assert "a newcomer runs ~2000s and its victims have at most ~1700s left" in w.message
        assert again.actions == ()


def test_a_finished_job_keeps_its_start_and_completion():
    obj = pytorchjob(conditions=[{"type": "Succeeded", "status": "True"}])
    obj["status"]["startTime"] = "2026-11-22T08:00:00Z"
    obj["status"]["completionTime"] = "2026-11-22T09:30:00Z"
    job = parse_job(obj, settings().read_options(), Priorities({}))
    assert isinstance(job, UnmanagedJob) and job.reason is Reason.FINISHED
    assert (job.completed - job.started).total_seconds() == 5400.0
    obj["status"]["completionTime"] = "later"  # not a time: no run, no error
    job = parse_job(obj, settings().read_options(), Priorities({}))
    assert job.reason is Reason.FINISHED and job.completed is None
