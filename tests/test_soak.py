"""The soak (benchmarks/soak.py) in CI: a fast run must find 0 violations, the same seed
must give the same plans, and the checker must catch each kind of broken plan."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from builders import NOW, ago, ej, gang, policy, snap

from autoscaler.core.model import Decision, Plan, QueueState
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan
from benchmarks.soak import (
    History,
    applied_snapshot,
    check_plan,
    main,
    policy_for,
    run_soak,
)

# seeds whose policies differ (fill and fair, reserve, min_step, victim order)
CI_SEEDS = (1, 2, 3, 4, 5, 6)


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_fast_soak_has_no_violations(seed):
    result = run_soak(2000, seed)
    assert [(v.cycle, v.kind, v.detail) for v in result.violations[:5]] == []
    # the run did exercise every kind of action, not an idle cluster
    assert {"ScaleUpIdleGpus", "ReclaimForPending", "TrimUnplaced"} <= set(result.actions)
    assert result.gangs_served > 0 and result.holds > 0


def test_fast_soak_through_the_parse_layer():
    result = run_soak(2000, 7, mode="parse")
    assert [(v.cycle, v.kind, v.detail) for v in result.violations[:5]] == []
    assert sum(result.actions.values()) > 0


@pytest.mark.parametrize("seed", (1, 3, 19))  # 19: where a reclaim took from a job resized
def test_fast_soak_with_declared_runs_has_no_violations(seed):
    # every job declares its run: rule 3b weighs reclaims, and a gang refused one holds
    # its queue's growth, a reclaim behind it is weighed with it, a weighed reclaim
    # takes from no job this plan resized (each broke idempotence or gangs-first)
    result = run_soak(2000, seed, declared=True)
    assert [(v.cycle, v.kind, v.detail) for v in result.violations[:5]] == []


@pytest.mark.parametrize("seed", (2, 4))
def test_fast_soak_of_crowded_queues_has_no_violations(seed):
    # --crowded: 30 jobs and more run in a queue, so before it has run times rule 3b
    # refuses swaps there; the refusals go the way the others do (hold growth, weighed
    # in order), and they happen (else this soaks nothing new)
    result = run_soak(2000, seed, crowded=True)
    assert [(v.cycle, v.kind, v.detail) for v in result.violations[:5]] == []
    assert result.gangs_refused > 0


@pytest.mark.parametrize("seed", (1, 3))
def test_fast_soak_with_finished_runs_listed_has_no_violations(seed):
    # --history: jobs that finished stay listed with their start and completion, so
    # where nothing is declared rule 3b weighs swaps by the queue's run times; refused
    # swaps go the way declared runs' refusals do (hold growth, weighed in order, no
    # second take from a job this plan resized)
    result = run_soak(2000, seed, history=True)
    assert [(v.cycle, v.kind, v.detail) for v in result.violations[:5]] == []


def test_same_seed_same_plans_other_seed_other_plans():
    a, b = run_soak(300, 7), run_soak(300, 7)
    assert a.digest == b.digest and a.actions == b.actions
    assert run_soak(300, 8).digest != a.digest
    # the parse path plans exactly what the model path plans
    assert run_soak(300, 7, mode="parse", policy=policy_for(7)).digest == a.digest


@pytest.mark.parametrize(
    ("cycles", "world"),
    [
        # --declared: every job carries an expected run time, as the annotation says it;
        # the planner then weighs reclaims (rule 3b)
        (600, {"declared": True}),
        # --history: finished jobs listed; their run times weigh swaps (rule 3b), and the
        # parse path reads status.startTime and completionTime as the model has them
        (1000, {"history": True}),
    ],
    ids=["declared", "history"],
)
def test_what_jobs_tell_reaches_the_planner_through_both_paths(cycles, world):
    # the plans differ from the same world's without it, and the parse path plans
    # exactly what the model path plans
    told, plain = run_soak(cycles, 2, **world), run_soak(cycles, 2)
    assert told.digest != plain.digest
    parsed = run_soak(cycles, 2, mode="parse", policy=policy_for(2), **world)
    assert [v for v in parsed.violations if v.kind == "parse"] == []
    assert parsed.digest == told.digest


def test_policies_differ_across_seeds():
    policies = {
        (p.growth_policy, p.min_step_workers, p.reserve_gpus_per_queue, p.victim_order)
        for p in map(policy_for, range(1, 31))
    }
    assert len(policies) > 5


def test_cli_prints_violations_and_runtime(capsys):
    assert main(["--cycles", "50", "--seeds", "1-2"]) == 0
    out = capsys.readouterr().out
    assert "seed=1 mode=model cycles=50 violations=0" in out
    assert "runtime=" in out and "total violations: 0 over 2 seed(s)" in out


# ---- the checker catches broken plans ------------------------------------------------------


P = policy(cooldown_seconds=300, reclaim_cooldown_seconds=60)


def base():
    """Queue q: 4 GPUs free; a job that can grow, one that can give back, a gang that
    does not fit in what is free but can be covered by reclaiming from `big`."""

    return snap(
        {"q": 4, "held": None},
        jobs=[
            ej("small", min=1, max=8, replicas=2),
            ej("big", min=1, max=8, replicas=8, last=ago(3600)),
            ej("frozen", queue="held", min=1, max=8, replicas=2),
        ],
        pending=[gang("waiting", 6)],
    )


def tamper(result: Plan, name: str, target: int, reason: Reason) -> Plan:
    decisions = tuple(
        replace(d, target=target, reason=reason) if d.ref.name == name else d
        for d in result.decisions
    )
    return replace(result, decisions=decisions)


def test_the_real_plan_of_the_base_cluster_is_clean():
    s = base()
    result = plan(s, P, NOW)
    assert check_plan(s, result, P, NOW) == []
    assert {d.ref.name: d.reason for d in result.actions} == {"big": Reason.RECLAIM_FOR_PENDING}


def _broken_cases():
    s = base()
    good = plan(s, P, NOW)
    yield "above-max", s, tamper(good, "small", 9, Reason.SCALE_UP_IDLE_GPUS), "bounds"
    yield "below-min", s, tamper(good, "big", 0, Reason.RECLAIM_FOR_PENDING), "bounds"
    yield "held-queue-changed", s, tamper(good, "frozen", 3, Reason.SCALE_UP_IDLE_GPUS), "hold"
    # grow `small` by 5 with 4 GPUs free, the gang served as well: overcommit
    yield "overcommit", s, tamper(good, "small", 7, Reason.SCALE_UP_IDLE_GPUS), "overcommit"
    # grow into what is free and leave the coverable gang waiting
    greedy = tamper(plan(s, P, NOW), "small", 6, Reason.SCALE_UP_IDLE_GPUS)
    greedy = tamper(greedy, "big", 8, Reason.NO_IDLE_GPUS)
    greedy = replace(
        greedy, gangs=tuple(replace(g, reason=Reason.GANG_UNCOVERABLE) for g in greedy.gangs)
    )
    yield "gangs-first", s, greedy, "gangs-first"
    cooling = replace(
        s,
        jobs=tuple(
            replace(j, last_scale_time=ago(100)) if j.ref.name == "small" else j for j in s.jobs
        ),
    )
    yield (
        "growth-in-cooldown",
        cooling,
        tamper(plan(cooling, P, NOW), "small", 3, Reason.SCALE_UP_IDLE_GPUS),
        "cooldown",
    )
    hot = replace(
        s,
        jobs=tuple(
            replace(j, last_scale_time=ago(10)) if j.ref.name == "big" else j for j in s.jobs
        ),
    )
    yield (
        "reclaim-in-cooldown",
        hot,
        tamper(plan(hot, P, NOW), "big", 2, Reason.RECLAIM_FOR_PENDING),
        "cooldown",
    )
    closed = replace(s, queues={**s.queues, "q": replace(s.queues["q"], state="Closing")})
    yield (
        "closed-queue-changed",
        closed,
        tamper(plan(closed, P, NOW), "small", 3, Reason.SCALE_UP_IDLE_GPUS),
        "hold",
    )
    lost = replace(good, decisions=tuple(d for d in good.decisions if d.ref.name != "small"))
    yield "job-without-decision", s, lost, "accounted"
    wrong = tamper(good, "small", 3, Reason.RECLAIM_FOR_PENDING)
    yield "growth-named-reclaim", s, wrong, "bounds"


BROKEN = list(_broken_cases())


@pytest.mark.parametrize(("case", "snapshot", "broken", "kind"), BROKEN, ids=[b[0] for b in BROKEN])
def test_checker_catches_a_broken_plan(case, snapshot, broken, kind):
    kinds = {v.kind for v in check_plan(snapshot, broken, P, NOW)}
    assert kind in kinds, (case, kinds)


def test_checker_catches_flapping_from_history_alone():
    """The annotation was lost (a user re-applied the job's YAML), so the cooldown rule
    cannot see our last resize; the history still can."""

    s = snap({"q": 4}, jobs=[ej("j", min=1, max=8, replicas=2)])
    history = History()
    shrink = Decision(ej("j").ref, "q", 4, 2, Reason.RECLAIM_FOR_PENDING, "m", 1, 8, 1)
    history.record([shrink], NOW - timedelta(seconds=120))
    result = plan(s, P, NOW)
    assert [d.direction for d in result.actions] == ["up"]
    kinds = {v.kind for v in check_plan(s, result, P, NOW, history)}
    assert kinds == {"flapping"}
    grow = Decision(ej("j").ref, "q", 2, 4, Reason.SCALE_UP_IDLE_GPUS, "m", 1, 8, 1)
    later = History()
    later.record([grow], NOW - timedelta(seconds=30))
    trimmed = tamper(result, "j", 1, Reason.TRIM_UNPLACED)
    assert "flapping" in {v.kind for v in check_plan(s, trimmed, P, NOW, later)}


def test_checker_flags_data_problems_as_holds():
    s = replace(
        base(),
        queues={
            "q": QueueState("q", float("nan")),
            "held": QueueState("held", None, Reason.METRICS_MISSING),
        },
    )
    result = plan(s, P, NOW)
    assert check_plan(s, result, P, NOW) == []
    assert all(not d.changed for d in result.decisions)
    forced = tamper(result, "small", 3, Reason.SCALE_UP_IDLE_GPUS)
    assert "hold" in {v.kind for v in check_plan(s, forced, P, NOW)}


def test_idempotent_after_a_whole_worker_over_reclaim():
    """Found by the soak (seed 10, cycle 2387): a gang served from idle GPUs before a later
    gang's whole-worker reclaim released more than needed; replanning served both from the
    released GPUs and granted the idle one."""
    p = policy(reclaim_cooldown_seconds=0)
    s = snap(
        {"q": 1},
        jobs=[
            ej("a", min=1, max=4, replicas=3, gpw=2),
            ej("b", min=1, max=2, replicas=1, priority=10),
        ],
        pending=[gang("g1", 1, priority=10, created=ago(120)), gang("g2", 3, created=ago(60))],
    )
    first = plan(s, p, NOW)
    assert [
        (d.ref.name, d.target) for d in first.actions if d.reason is Reason.RECLAIM_FOR_PENDING
    ] == [("a", 1)]
    second = plan(applied_snapshot(s, first, NOW), p, NOW)
    assert second.actions == (), [(d.ref.name, d.current, d.target) for d in second.actions]


def _ignores_inflight(snapshot, pol, now):
    """A planner that forgets workers in flight: it grants the same GPUs again."""

    forgetful = replace(
        snapshot, jobs=tuple(replace(j, active=max(j.active, j.replicas)) for j in snapshot.jobs)
    )
    result = plan(forgetful, pol, now)
    by_ref = {j.ref: j for j in snapshot.jobs}
    return replace(
        result,
        decisions=tuple(
            replace(d, current=by_ref[d.ref].replicas) if d.ref in by_ref else d
            for d in result.decisions
        ),
    )


def _no_cooldown(snapshot, pol, now):
    return plan(snapshot, replace(pol, cooldown_seconds=0, reclaim_cooldown_seconds=0), now)


@pytest.mark.parametrize(
    ("broken", "kind"), [(_ignores_inflight, "overcommit"), (_no_cooldown, "cooldown")]
)
def test_soak_catches_a_broken_planner(broken, kind):
    result = run_soak(400, 1, planner=broken)
    assert kind in result.by_kind, result.by_kind


def test_fair_growth_with_min_step_is_idempotent():
    """Found by the soak (seed 11, cycle 713): what was left after the fair re-fill never
    went back to the jobs that dropped out under min_step."""
    p = policy(growth_policy="fair", min_step_workers=2)
    s = snap(
        {"q": 9},
        jobs=[
            ej("a", min=4, max=12, replicas=8),
            ej("b", min=3, max=7, replicas=3, gpw=4),
            ej("c", min=2, max=6, replicas=3, gpw=2),
        ],
    )
    first = plan(s, p, NOW)
    second = plan(applied_snapshot(s, first, NOW), p, NOW)
    assert second.actions == (), [(d.ref.name, d.current, d.target) for d in second.actions]
    assert check_plan(s, first, p, NOW) == []
