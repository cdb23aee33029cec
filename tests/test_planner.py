"""One table per planner rule (DESIGN.md "Planner rules"). Model objects in, Plan out."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import NOW, ago, ej, gang, orphan, policy, snap

from autoscaler.core.model import (
    ClusterSnapshot,
    ObjectRef,
    PendingGroup,
    QueueState,
    UnmanagedJob,
)
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan


def targets(p) -> dict[str, tuple[int | None, Reason]]:
    return {d.ref.name: (d.target, d.reason) for d in p.decisions}


def gang_reasons(p) -> dict[str, Reason]:
    return {g.ref.name: g.reason for g in p.gangs}


# ---- rule 1: bounds, invalid jobs never scaled -----------------------------------------


def test_growth_stops_at_max():
    p = plan(snap({"q": 100}, [ej("a", min=1, max=5, replicas=2)]), policy(), NOW)
    assert targets(p)["a"] == (5, Reason.SCALE_UP_IDLE_GPUS)


def test_reclaim_stops_at_min_and_skips_gang_it_cannot_cover():
    jobs = [ej("a", min=3, max=8, replicas=5)]
    p = plan(snap({"q": 0}, jobs, [gang("big", 3)]), policy(), NOW)
    assert targets(p)["a"] == (5, Reason.NO_IDLE_GPUS)
    assert gang_reasons(p)["big"] == Reason.GANG_UNCOVERABLE


def test_unmanaged_job_is_reported_and_never_changed():
    bad = UnmanagedJob(
        ObjectRef("ml", "bad"),
        "q",
        Reason.INVALID_POLICY,
        "min > max",
        replicas=4,
        gpus_per_worker=1,
    )
    p = plan(snap({"q": 10}, [], [], [bad]), policy(), NOW)
    d = p.decisions[0]
    assert (d.current, d.target, d.reason, d.changed) == (4, 4, Reason.INVALID_POLICY, False)
    assert p.actions == ()


# ---- rule 2: in-flight accounting ---------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "jobs", "expected_b"),
    [
        # a asked for 3 workers not yet running: only 1 of 4 free GPUs is really idle
        (4, [ej("a", replicas=5, active=2, max=8), ej("b", replicas=1, max=8)], 2),
        # releasing GPUs (spec below active) never feed growth
        (0, [ej("a", replicas=2, active=6, max=8), ej("b", replicas=1, max=8)], 1),
        # an unmanaged job's promised workers count too
        (2, [ej("b", replicas=1, max=8)], 1),
    ],
)
def test_inflight_and_releasing_are_not_free(free, jobs, expected_b):
    unmanaged = []
    if len(jobs) == 1:
        unmanaged = [
            UnmanagedJob(
                ObjectRef("ml", "fixed"), "q", Reason.NOT_ELASTIC, "x", replicas=4, inflight_gpus=2
            )
        ]
    p = plan(snap({"q": free}, jobs, [], unmanaged), policy(), NOW)
    assert targets(p)["b"][0] == expected_b


def test_job_whose_own_podgroup_waits_counts_once_as_gang():
    # own gang needs 4; its 4 unstarted workers are not also in flight, so 4 free GPUs fit it
    waiting = ej("w", replicas=4, active=0, min=2, max=4)
    p = plan(
        snap({"q": 4}, [waiting, ej("b", replicas=1)], [gang("w", 4, owner="w")]), policy(), NOW
    )
    assert gang_reasons(p)["w"] == Reason.GANG_FITS
    assert targets(p)["w"] == (4, Reason.OWN_GANG_WAITING)
    assert targets(p)["b"] == (1, Reason.NO_IDLE_GPUS)


def test_own_podgroup_matched_by_name_without_owner_reference():
    waiting = ej("w", replicas=4, active=0, min=2, max=4)
    p = plan(snap({"q": 4}, [waiting], [gang("w", 4)]), policy(), NOW)
    assert targets(p)["w"][1] == Reason.OWN_GANG_WAITING
    assert gang_reasons(p)["w"] == Reason.GANG_FITS


# ---- rule 3: waiting gangs first -----------------------------------------------------------


def test_gang_that_fits_takes_its_share_before_growth():
    p = plan(snap({"q": 6}, [ej("a", replicas=2, max=8)], [gang("g", 4)]), policy(), NOW)
    assert gang_reasons(p)["g"] == Reason.GANG_FITS
    assert targets(p)["a"] == (4, Reason.SCALE_UP_IDLE_GPUS)


def test_reclaim_takes_as_few_whole_workers_as_cover_the_gang():
    jobs = [ej("a", min=1, max=8, replicas=6, gpw=2)]
    p = plan(snap({"q": 1}, jobs, [gang("g", 4)]), policy(), NOW)
    # shortfall 3 GPUs, 2 GPUs a worker: 2 workers
    assert targets(p)["a"] == (4, Reason.RECLAIM_FOR_PENDING)
    assert gang_reasons(p)["g"] == Reason.GANG_COVERED
    assert p.queues["q"].reclaimed_gpus == 4


def test_victims_lowest_priority_then_most_reclaimable():
    jobs = [
        ej("hi", min=1, max=8, replicas=8, priority=100),
        ej("few", min=3, max=8, replicas=5),
        ej("many", min=1, max=8, replicas=7),
    ]
    p = plan(snap({"q": 0}, jobs, [gang("g", 4, priority=100)]), policy(), NOW)
    t = targets(p)
    assert t["many"] == (3, Reason.RECLAIM_FOR_PENDING)
    assert t["few"][0] == 5 and t["hi"][0] == 8


@pytest.mark.parametrize(
    ("any_priority", "hi", "lo", "gang_reason"),
    [
        # default: extra workers never keep another job from its minimum; the lowest priority
        # gives first (lo has 1 extra GPU, hi gives the other)
        (True, 7, 1, Reason.GANG_COVERED),
        # reclaim_from_higher_priority=false, the old rule: only jobs of priority <= the gang's
        (False, 8, 2, Reason.GANG_UNCOVERABLE),
    ],
)
def test_victims_of_any_priority_lowest_first_unless_configured(any_priority, hi, lo, gang_reason):
    jobs = [
        ej("hi", min=1, max=8, replicas=8, priority=100),
        ej("lo", min=1, max=8, replicas=2, priority=50),
    ]
    p = plan(
        snap({"q": 0}, jobs, [gang("g", 2, priority=0)]),
        policy(reclaim_from_higher_priority=any_priority),
        NOW,
    )
    assert (targets(p)["hi"][0], targets(p)["lo"][0]) == (hi, lo)
    assert gang_reasons(p)["g"] == gang_reason


@pytest.mark.parametrize("order", ["most-workers", "least-work-lost"])
def test_any_priority_rule_holds_for_both_victim_orders(order):
    jobs = [ej("hi", min=1, max=8, replicas=8, priority=100)]
    p = plan(snap({"q": 0}, jobs, [gang("g", 2, priority=0)]), policy(victim_order=order), NOW)
    assert targets(p)["hi"][0] == 6 and gang_reasons(p)["g"] == Reason.GANG_COVERED


def test_gangs_served_by_priority_then_age_and_huge_gang_is_skipped():
    jobs = [ej("a", min=1, max=8, replicas=4)]
    gangs = [
        gang("huge", 50, created=ago(100)),
        gang("old", 2, created=ago(90)),
        gang("new", 2, created=ago(10)),
        gang("urgent", 1, created=ago(5), priority=10),
    ]
    p = plan(snap({"q": 2}, jobs, gangs), policy(), NOW)
    g = gang_reasons(p)
    assert g == {
        "huge": Reason.GANG_UNCOVERABLE,
        "urgent": Reason.GANG_FITS,
        "old": Reason.GANG_COVERED,
        "new": Reason.GANG_COVERED,
    }
    assert targets(p)["a"][0] == 1


def _orphan(name: str, gpus: int, **kw) -> PendingGroup:
    return replace(gang(name, gpus, owner=name, **kw), orphan=f"its PyTorchJob ml/{name} is gone")


@pytest.mark.parametrize(
    ("free", "gangs", "a", "reasons"),
    [
        # a deleted job's leftover PodGroup: nobody shrinks for it
        (0, [_orphan("gone", 4)], 8, {"gone": Reason.GANG_OWNER_GONE}),
        # nor is a share of what is free kept for it: growth takes it
        (2, [_orphan("gone", 2)], 8, {"gone": Reason.GANG_OWNER_GONE}),
        # waited past max_gang_wait_seconds: it starves nothing
        (0, [_orphan("gone", 4, created=ago(10_000))], 8, {"gone": Reason.GANG_OWNER_GONE}),
        # ahead of a live gang (older, higher priority): the live one is served
        (
            0,
            [_orphan("gone", 4, priority=9, created=ago(500)), gang("live", 2, owner="live")],
            6,
            {"gone": Reason.GANG_OWNER_GONE, "live": Reason.GANG_COVERED},
        ),
    ],
)
def test_a_gang_whose_owner_is_gone_is_no_reason_to_shrink(free, gangs, a, reasons):
    jobs = [ej("a", min=2, max=8, replicas=8 if free == 0 else 6)]
    p = plan(snap({"q": free}, jobs, gangs), policy(max_gang_wait_seconds=600), NOW)
    assert targets(p)["a"][0] == a
    assert gang_reasons(p) == reasons
    gone = next(g for g in p.gangs if g.ref.name == "gone")
    assert gone.victims == () and "is gone" in gone.message
    if "live" not in reasons:
        assert [act.reason for act in p.actions] in ([], [Reason.SCALE_UP_IDLE_GPUS])


@pytest.mark.parametrize(
    ("need", "cool_target", "free_target", "reason", "words"),
    [
        # enough workers free to give now: taken at once, the cooling job left alone
        (2, 5, 1, Reason.GANG_COVERED, ""),
        # not enough without the cooling job: nothing taken, and it says what it waits
        # for and until when (the job's last resize 20 s ago + the 60 s cooldown)
        (
            3,
            5,
            3,
            Reason.GANG_UNCOVERABLE,
            "it waits for the reclaim cooldown of ml/cool (reclaim_cooldown_seconds=60), "
            "until 2026-11-22T10:00:40Z (in 40s)",
        ),
        # more than both could ever give: no cooldown to wait for
        (9, 5, 3, Reason.GANG_UNCOVERABLE, ""),
    ],
)
def test_a_gang_takes_workers_free_now_or_says_whose_cooldown_it_waits_for(
    need, cool_target, free_target, reason, words
):
    jobs = [
        ej("cool", min=1, max=8, replicas=5, last=ago(20)),
        ej("free", min=1, max=8, replicas=3),
    ]
    p = plan(snap({"q": 0}, jobs, [gang("g", need)]), policy(reclaim_cooldown_seconds=60), NOW)
    assert (targets(p)["cool"][0], targets(p)["free"][0]) == (cool_target, free_target)
    (g,) = p.gangs
    assert g.reason is reason
    if words:
        assert g.message.endswith(words), g.message
        assert "in its reclaim cooldown until 2026-11-22T10:00:40Z" in g.blockers[0]
    else:
        assert "reclaim cooldown of" not in g.message


def test_released_gpus_count_for_gangs():
    jobs = [ej("a", min=1, max=8, replicas=2, active=5)]
    p = plan(snap({"q": 0}, jobs, [gang("g", 3)]), policy(), NOW)
    assert gang_reasons(p)["g"] == Reason.GANG_FITS
    assert targets(p)["a"] == (2, Reason.RELEASING)


def test_starving_gang_blocks_growth_and_later_gangs():
    gangs = [gang("starved", 20, created=ago(4000)), gang("small", 1, created=ago(10))]
    blocking = policy(starving_gang_blocks_later_gangs=True)
    p = plan(snap({"q": 3}, [ej("a", replicas=2, max=8)], gangs), blocking, NOW)
    assert gang_reasons(p) == {"starved": Reason.GANG_UNCOVERABLE, "small": Reason.GANG_BLOCKED}
    assert targets(p)["a"] == (2, Reason.GANG_STARVING)
    assert p.queues["q"].reason == Reason.GANG_STARVING


def test_starving_gang_that_does_not_block_later_gangs_still_stops_growth():
    gangs = [gang("starved", 20, created=ago(4000)), gang("small", 1, created=ago(10))]
    jobs = [ej("a", min=1, replicas=3, max=8)]
    p = plan(snap({"q": 0}, jobs, gangs), policy(starving_gang_blocks_later_gangs=False), NOW)
    assert gang_reasons(p) == {"starved": Reason.GANG_UNCOVERABLE, "small": Reason.GANG_COVERED}
    assert targets(p)["a"] == (2, Reason.RECLAIM_FOR_PENDING)
    p = plan(snap({"q": 3}, jobs, gangs), policy(starving_gang_blocks_later_gangs=False), NOW)
    assert gang_reasons(p)["small"] == Reason.GANG_FITS
    assert targets(p)["a"] == (3, Reason.GANG_STARVING)


# A gang not covered keeps what is free: its shortfall is the same whether a grows into
# the free GPUs or not (grown workers are reclaimable as the free GPUs were), so growing
# buys a only the time until the gang is covered, for two restarts (the growth, and the
# reclaim that takes it back). Before, a grew into them (5, ScaleUpIdleGpus) in every row.
@pytest.mark.parametrize(
    ("free", "gangs", "a_target", "a_reason", "served"),
    [
        # a young gang of 20 with 3 free and 0 reclaimable (a at its min)
        (3, [("big", 20)], 2, Reason.GANG_WAITING, set()),
        # a smaller gang behind it that fits is still served; the GPU left stays free
        (3, [("big", 20), ("small", 2)], 2, Reason.GANG_WAITING, {"small"}),
        # nothing free: nothing of the gang's to keep, the hold says why as before
        (0, [("big", 20)], 2, Reason.NO_IDLE_GPUS, set()),
    ],
)
def test_a_gang_not_covered_keeps_what_is_free(free, gangs, a_target, a_reason, served):
    jobs = [ej("a", min=2, replicas=2, max=8)]
    p = plan(snap({"q": free}, jobs, [gang(n, g) for n, g in gangs]), policy(), NOW)
    assert targets(p)["a"] == (a_target, a_reason)
    assert gang_reasons(p)["big"] == Reason.GANG_UNCOVERABLE
    assert {n for n, r in gang_reasons(p).items() if r == Reason.GANG_FITS} == served
    if a_reason is Reason.GANG_WAITING:
        why = next(d.message for d in p.decisions if d.ref.name == "a")
        assert "big waits for GPUs to free (not covered: 17 short)" in why


def test_a_gang_waiting_only_for_reclaim_cooldowns_keeps_what_is_free():
    # b's 2 extra workers were resized 30 s ago (reclaim cooldown 60 s): the gang of 4 is
    # 1 short now and covered within 30 s; a growing into the free GPU now would be taken
    # back then (before: a 2 -> 3, ScaleUpIdleGpus)
    jobs = [ej("a", min=2, replicas=2, max=8), ej("b", min=2, replicas=4, max=8, last=ago(30))]
    p = plan(snap({"q": 1}, jobs, [gang("g", 4)]), policy(reclaim_cooldown_seconds=60), NOW)
    assert gang_reasons(p)["g"] == Reason.GANG_UNCOVERABLE
    assert targets(p)["a"] == (2, Reason.GANG_WAITING)


def test_reclaim_cooldown_protects_recent_victims():
    jobs = [ej("a", min=1, max=8, replicas=6, last=ago(30))]
    p = plan(snap({"q": 0}, jobs, [gang("g", 2)]), policy(reclaim_cooldown_seconds=60), NOW)
    assert targets(p)["a"][0] == 6
    assert gang_reasons(p)["g"] == Reason.GANG_UNCOVERABLE
    p = plan(snap({"q": 0}, jobs, [gang("g", 2)]), policy(reclaim_cooldown_seconds=20), NOW)
    assert targets(p)["a"] == (4, Reason.RECLAIM_FOR_PENDING)


def test_least_work_lost_prefers_the_victim_that_restarts_fewer_gpus():
    jobs = [ej("big", min=1, max=16, replicas=16), ej("small", min=1, max=4, replicas=3)]
    gangs = [gang("g", 2)]
    most = plan(snap({"q": 0}, jobs, gangs), policy(), NOW)
    least = plan(snap({"q": 0}, jobs, gangs), policy(victim_order="least-work-lost"), NOW)
    assert targets(most)["big"][0] == 14 and targets(most)["small"][0] == 3
    assert targets(least)["small"][0] == 1 and targets(least)["big"][0] == 16


# ---- rule 4: growth ----------------------------------------------------------------------


def test_fill_grows_smallest_job_first_to_its_max_in_one_step():
    jobs = [ej("big", replicas=6, max=12), ej("small", replicas=1, max=4)]
    p = plan(snap({"q": 5}, jobs), policy(), NOW)
    assert targets(p) == {
        "big": (8, Reason.SCALE_UP_IDLE_GPUS),
        "small": (4, Reason.SCALE_UP_IDLE_GPUS),
    }


def test_fill_priority_before_size():
    jobs = [ej("big", replicas=6, max=12, priority=5), ej("small", replicas=1, max=4)]
    p = plan(snap({"q": 3}, jobs), policy(), NOW)
    assert targets(p)["big"][0] == 9 and targets(p)["small"] == (1, Reason.NO_IDLE_GPUS)


def test_fair_is_max_min_in_workers():
    jobs = [ej("a", replicas=1, max=10), ej("b", replicas=3, max=10), ej("c", replicas=6, max=7)]
    p = plan(snap({"q": 6}, jobs), policy(growth_policy="fair"), NOW)
    t = targets(p)
    assert (t["a"][0], t["b"][0], t["c"][0]) == (5, 5, 6)


def test_growth_in_whole_workers_of_each_jobs_size():
    p = plan(snap({"q": 5}, [ej("a", replicas=1, gpw=4, max=4)]), policy(), NOW)
    assert targets(p)["a"] == (2, Reason.SCALE_UP_IDLE_GPUS)
    assert p.queues["q"].granted_gpus == 4


def test_fractional_free_gpus_round_down():
    p = plan(snap({"q": 2.9}, [ej("a", replicas=1, max=8)]), policy(), NOW)
    assert targets(p)["a"][0] == 3


def test_reserve_is_left_idle():
    p = plan(snap({"q": 5}, [ej("a", replicas=1, max=8)]), policy(reserve_gpus_per_queue=2), NOW)
    assert targets(p)["a"][0] == 4


def test_job_with_workers_in_flight_is_not_grown_again():
    p = plan(snap({"q": 10}, [ej("a", replicas=4, active=2, max=8)]), policy(), NOW)
    assert targets(p)["a"] == (4, Reason.IN_FLIGHT)


def test_payoff_rule_skips_growth_of_a_job_that_just_started():
    jobs = [
        ej("young", replicas=2, max=4, started=ago(20)),
        ej("old", replicas=2, max=4, started=ago(3600)),
    ]
    p = plan(snap({"q": 4}, jobs), policy(growth_payoff_factor=2.0), NOW)
    assert targets(p)["young"] == (2, Reason.NOT_WORTH_RESTART)
    assert targets(p)["old"] == (4, Reason.SCALE_UP_IDLE_GPUS)


# ---- rule 5: trim unplaced workers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("since", "active", "min_r", "expected"),
    [
        (400, 3, 1, (3, Reason.TRIM_UNPLACED)),
        (200, 3, 1, (6, Reason.IN_FLIGHT)),  # not yet timed out
        (400, 1, 2, (2, Reason.TRIM_UNPLACED)),  # never below min
        (400, 6, 1, (6, Reason.NO_IDLE_GPUS)),  # all placed: nothing to trim
    ],
)
def test_trim_unplaced_after_timeout(since, active, min_r, expected):
    jobs = [ej("a", replicas=6, active=active, min=min_r, max=8, last=ago(since))]
    p = plan(snap({"q": 0}, jobs), policy(unplaced_timeout_seconds=300), NOW)
    assert targets(p)["a"] == expected


@pytest.mark.parametrize(
    ("active", "nodes", "expected"),
    [
        (2, ("n1", "n2", "n3", "n4", "n5", "n6"), (6, Reason.IN_FLIGHT)),  # status lags
        (2, ("n1", "n2", "n3", "n4", "", ""), (4, Reason.TRIM_UNPLACED)),  # 2 Pending
        (2, ("n1", "n2"), (2, Reason.TRIM_UNPLACED)),  # no pods for the rest
        (5, ("n1", "n2", "n3", "", "", ""), (5, Reason.TRIM_UNPLACED)),  # pods not seen
        (2, ("n1", "n2", "n3", "n4", "n5", "n6", "n7"), (6, Reason.IN_FLIGHT)),  # old extra
    ],
    ids=["all-bound", "two-pending", "no-pods", "active-ahead", "index-beyond"],
)
def test_trim_counts_workers_bound_though_the_operator_status_lags(active, nodes, expected):
    """training-operator updates replicaStatuses.Worker.active pod by pod, seconds late
    when it is busy (and not at all while it restarts): a worker whose pod is bound is
    placed, whatever active says, and is never trimmed as unplaced."""
    job = replace(ej("a", replicas=6, active=active, min=1, last=ago(400)), worker_nodes=nodes)
    p = plan(snap({"q": 0}, [job]), policy(unplaced_timeout_seconds=300), NOW)
    assert targets(p)["a"] == expected


def test_trim_ignores_jobs_we_never_resized():
    p = plan(snap({"q": 0}, [ej("a", replicas=6, active=2)]), policy(), NOW)
    assert targets(p)["a"] == (6, Reason.IN_FLIGHT)


def test_trimmed_gpus_become_idle_for_others():
    jobs = [ej("a", replicas=6, active=3, min=1, max=8, last=ago(400)), ej("b", replicas=1, max=8)]
    p = plan(snap({"q": 3}, jobs), policy(), NOW)
    # free 3 - in-flight 3 = 0, trim frees 3
    assert targets(p)["b"] == (4, Reason.SCALE_UP_IDLE_GPUS)


# ---- rule 6: cooldown -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("since", "grows"), [(100, False), (299, False), (300, True), (5000, True)]
)
def test_cooldown_blocks_growth(since, grows):
    p = plan(
        snap({"q": 4}, [ej("a", replicas=2, max=8, last=ago(since))]),
        policy(cooldown_seconds=300),
        NOW,
    )
    assert (targets(p)["a"][1] == Reason.SCALE_UP_IDLE_GPUS) is grows
    if not grows:
        assert targets(p)["a"] == (2, Reason.COOLDOWN)


def test_last_scale_time_in_the_future_holds_the_job():
    future = NOW.replace(hour=12)
    p = plan(snap({"q": 4}, [ej("a", replicas=2, last=future)], [gang("g", 6)]), policy(), NOW)
    assert targets(p)["a"] == (2, Reason.CLOCK_SKEW)


# ---- rule 7: min step -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "max_r", "expected"),
    [
        (1, 8, (2, Reason.MIN_STEP)),
        (2, 8, (4, Reason.SCALE_UP_IDLE_GPUS)),
        (1, 3, (3, Reason.SCALE_UP_IDLE_GPUS)),
    ],  # a step that reaches max is always taken
)
def test_min_step(free, max_r, expected):
    p = plan(snap({"q": free}, [ej("a", replicas=2, max=max_r)]), policy(min_step_workers=2), NOW)
    assert targets(p)["a"] == expected


# ---- rule 9: missing data holds ------------------------------------------------------------


def test_queue_without_reading_holds_everything_in_it():
    jobs = [ej("a", queue="known", replicas=1), ej("b", queue="unknown", replicas=6, min=1)]
    s = snap({"known": 4}, jobs, [gang("g", 4, queue="unknown")])
    s = replace(
        s,
        queues={
            **s.queues,
            "unknown": QueueState("unknown", None, Reason.METRICS_MISSING, "no series"),
        },
    )
    p = plan(s, policy(), NOW)
    assert targets(p)["a"][1] == Reason.SCALE_UP_IDLE_GPUS
    assert targets(p)["b"] == (6, Reason.METRICS_MISSING)
    assert gang_reasons(p)["g"] == Reason.METRICS_MISSING


def test_queue_missing_from_snapshot_is_unknown_not_zero():
    s = ClusterSnapshot(
        queues={}, jobs=(ej("a", queue="x", replicas=6, min=1),), pending=(gang("g", 2, queue="x"),)
    )
    p = plan(s, policy(), NOW)
    assert targets(p)["a"] == (6, Reason.METRICS_MISSING)


def test_cycle_wide_problem_holds_every_queue():
    s = replace(
        snap({"q": 10}, [ej("a", replicas=1)]),
        problem=Reason.METRICS_UNAVAILABLE,
        message="prometheus down",
    )
    p = plan(s, policy(), NOW)
    assert p.actions == () and targets(p)["a"][1] == Reason.METRICS_UNAVAILABLE


def test_closed_queue_holds():
    s = snap({"q": 10}, [ej("a", replicas=1)])
    s = replace(s, queues={"q": QueueState("q", 10, state="Closed")})
    assert targets(plan(s, policy(), NOW))["a"][1] == Reason.QUEUE_CLOSED


# ---- rule 8 and determinism ---------------------------------------------------------------


def test_every_job_and_gang_has_a_reason_and_message():
    jobs = [ej("a", replicas=2), ej("b", replicas=8, max=8), ej("c", replicas=3, last=ago(5))]
    p = plan(snap({"q": 3}, jobs, [gang("g", 1)]), policy(), NOW)
    assert len(p.decisions) == 3 and len(p.gangs) == 1
    assert all(d.message for d in p.decisions) and all(g.message for g in p.gangs)


# ---- the Queue object's capacity: a physical bound on growth --------------------------------


def _capped(free: float, capacity: int | None, *jobs, pending=()):
    state = QueueState("q", free, capacity_gpus=capacity)
    return plan(
        ClusterSnapshot(queues={"q": state}, jobs=tuple(jobs), pending=tuple(pending)),
        policy(cooldown_seconds=0),
        NOW,
    )


def test_growth_never_takes_a_queue_above_its_capacity_whatever_prometheus_says():
    # Prometheus (garbage or lagging) says 16 free; the Queue allows 8 and 2 are held
    p = _capped(16, 8, ej("a", replicas=2, active=2, max=20))
    d = p.decisions[0]
    assert d.target == 8 and d.reason is Reason.SCALE_UP_IDLE_GPUS


def test_a_queue_at_capacity_holds_growth_and_says_why():
    p = _capped(6, 8, ej("a", replicas=4, active=4, max=8), ej("b", replicas=4, active=4, max=8))
    assert [d.target for d in p.decisions] == [4, 4]
    assert {d.reason for d in p.decisions} == {Reason.QUEUE_CAPACITY}
    assert "may hold 8 GPU(s)" in p.decisions[0].message


def test_capacity_counts_admitted_gangs_and_workers_still_running():
    g = gang("g", 3)
    # a: spec 2 but 3 still running (releasing); the gang takes 3 of the 10 free
    p = _capped(
        10,
        10,
        ej("a", replicas=2, active=3, max=8),
        ej("b", replicas=1, active=1, max=8),
        pending=[g],
    )
    by_name = {d.ref.name: d for d in p.decisions}
    assert by_name["b"].target == 1 + (10 - 3 - 1 - 3)  # room: 10 - (3 + 1) - 3 = 3


# A job whose own PodGroup waits counts once, as that gang: at its spec when the gang is
# served this cycle, not at all when it is not (Volcano binds none of its pods). Queue
# capability 10; job a runs 2 of max 8 (min 2: nothing to reclaim); job w (spec 6) waits
# for its own 6-GPU gang. Before the fix w counted 6 GPUs whether or not its gang was
# served, so a gang never admitted blocked growth for good. A gang not covered keeps
# what is free for itself (rule 3): a holds beside it, by that rule, not by the bound.
@pytest.mark.parametrize(
    ("free", "gangs", "a_target", "a_reason", "gang_reason"),
    [
        # own gang does not fit (5 < 6) and is not served: w holds nothing, the 5 free
        # are the gang's
        (5, [("w", 6, "w")], 2, Reason.GANG_WAITING, Reason.GANG_UNCOVERABLE),
        # own gang fits: served, so w counts at its spec: room 10 - 2 - 6 = 2
        (10, [("w", 6, "w")], 4, Reason.SCALE_UP_IDLE_GPUS, Reason.GANG_FITS),
        # rows without an own gang: w runs 6 of 6. A served gang no job here owns counts
        # its GPUs: room 10 - 2 - 6 - 3 < 0
        (10, [("g", 3, None)], 2, Reason.QUEUE_CAPACITY, Reason.GANG_FITS),
        # an unserved gang no job here owns counts nothing (room 10 - 2 - 6 = 2), and keeps
        # what is free
        (5, [("g", 6, None)], 2, Reason.GANG_WAITING, Reason.GANG_UNCOVERABLE),
    ],
)
def test_capacity_counts_a_waiting_job_once_as_its_gang(
    free, gangs, a_target, a_reason, gang_reason
):
    own = any(owner for _, _, owner in gangs)
    w = ej("w", min=6, max=6, replicas=6, active=0 if own else 6)
    pending = [gang(n, gpus, owner=owner) for n, gpus, owner in gangs]
    p = _capped(free, 10, ej("a", min=2, replicas=2, max=8), w, pending=pending)
    assert targets(p)["a"] == (a_target, a_reason)
    assert set(gang_reasons(p).values()) == {gang_reason}


@pytest.mark.parametrize(
    ("waited", "a_target", "a_reason"),
    [
        # a young gang that cannot be covered keeps the 5 free (rule 3)
        (60, 2, Reason.GANG_WAITING),
        (4000, 2, Reason.GANG_STARVING),  # waited > max_gang_wait_seconds: growth stops
    ],
)
def test_the_starvation_guard_decides_growth_under_a_queue_capability(waited, a_target, a_reason):
    # capability 8, a at 2 (its min), w waits for its own 6-GPU gang with 5 GPUs free.
    # Before the fix w's 6 GPUs filled the capability whatever the gang's age: a held
    # HoldQueueCapacity at 2 in both rows. The gang's own rules decide: it keeps what is
    # free while young, and starves the queue's growth once it has waited too long.
    w = ej("w", min=6, max=6, replicas=6, active=0)
    pending = [gang("w", 6, owner="w", created=ago(waited))]
    state = QueueState("q", 5, capacity_gpus=8)
    s = ClusterSnapshot(queues={"q": state}, jobs=(ej("a", min=2, replicas=2, max=8), w))
    p = plan(replace(s, pending=tuple(pending)), policy(max_gang_wait_seconds=1800), NOW)
    assert targets(p)["a"] == (a_target, a_reason)
    assert gang_reasons(p)["w"] == Reason.GANG_UNCOVERABLE


def test_no_capacity_known_means_no_bound():
    p = _capped(16, None, ej("a", replicas=2, active=2, max=20))
    assert p.decisions[0].target == 18


# ---- in-flight GPUs bounded in time: workers with no pod at all (HoldNoPods) --------------


def _no_pods_snap(pods, *, asked_seconds_ago: float, free: int = 4):
    grow = ej("grow", replicas=1, max=10)
    return replace(snap({"q": free}, [grow], [], [orphan(asked_seconds_ago)]), pods_by_owner=pods)


@pytest.mark.parametrize(
    ("pods", "asked", "grows_to", "noted"),
    [
        # no pod at all for 10 min: its 3 GPUs no longer count, the 4 free go to growth
        pytest.param({}, 600, 5, True, id="no-pods-after-timeout"),
        # 5 min is the timeout itself: still counted (1 free GPU left)
        pytest.param({}, 300, 2, False, id="within-timeout"),
        # its pods exist (unbound): they count, whatever the time
        pytest.param({("ml", "PaddleJob", "orphan"): 3}, 600, 2, False, id="pods-exist"),
        # one pod of 3: the two without one stop counting
        pytest.param({("ml", "PaddleJob", "orphan"): 1}, 600, 4, True, id="some-pods"),
        # pods not watched: nothing is said to have none
        pytest.param(None, 600, 2, False, id="pods-unknown"),
    ],
)
def test_workers_without_pods_stop_counting_after_the_timeout(pods, asked, grows_to, noted):
    p = plan(_no_pods_snap(pods, asked_seconds_ago=asked), policy(), NOW)
    assert targets(p)["grow"][0] == grows_to
    orphan = next(d for d in p.decisions if d.ref.name == "orphan")
    assert orphan.reason is Reason.INVALID_POLICY
    assert any("HoldNoPods" in n and "is its operator running?" in n for n in orphan.notes) == noted


def test_elastic_job_whose_workers_never_got_pods_holds_no_pods():
    job = replace(ej("stuck", replicas=5, active=2, max=8), asked_at=ago(600))
    grow = ej("grow", replicas=1, max=10)
    s = replace(snap({"q": 3}, [job, grow]), pods_by_owner={("ml", "PyTorchJob", "stuck"): 2})
    p = plan(s, policy(), NOW)
    t, reason = targets(p)["stuck"]
    assert (t, reason) == (5, Reason.NO_PODS)
    d = next(d for d in p.decisions if d.ref.name == "stuck")
    assert d.message.startswith("no pods for 3 of its workers after 10m: is its operator running?")
    assert targets(p)["grow"][0] == 4  # the 3 free GPUs are not kept for "stuck"
