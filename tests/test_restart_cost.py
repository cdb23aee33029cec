"""Per-job restart cost: from the job's annotation, else measured by the daemon after
its resize (kept on the job), else the setting; used by the cooldown, the payoff rule and
the least-work-lost victim order, and shown in `plan`."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from builders import NOW, ago, ej, gang, policy, pytorchjob, settings, snap
from kubernetes_asyncio.client import ApiClient
from promserver import (
    HAVE_PROMETHEUS,
    SKIP_REASON,
    VolcanoExporter,
    running_exporter,
    running_prometheus,
)
from test_actuator import decide, job
from test_loop import Daemon
from test_real_daemon import _scraped, _strip

from autoscaler.act.actuator import KubeActuator
from autoscaler.core.model import Measurement, ObjectRef, Plan, UnmanagedJob
from autoscaler.core.policy import PlannerPolicy
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339
from autoscaler.plan.planner import plan
from autoscaler.read.parse import Priorities, parse_job
from autoscaler.report.render import plan_to_dict, plan_to_table
from autoscaler.settings import Settings

S = settings()
COST = "elastic-autoscaler.io/restart-cost-seconds"
MEASURED = "elastic-autoscaler.io/measured-restart-cost"
LAST = "elastic-autoscaler.io/last-scale-time"


def costed(job, seconds, source="annotation", measured_for=None):
    return replace(
        job,
        restart_cost_seconds=seconds,
        restart_cost_source=source,
        measured_for=measured_for,
    )


def reasons(p):
    return {d.ref.name: (d.target, d.reason) for d in p.decisions}


# ---- where the cost comes from ---------------------------------------------------------


@pytest.mark.parametrize(
    ("notes", "cost", "source"),
    [
        ({}, None, ""),
        ({COST: "120"}, 120.0, "annotation"),
        ({COST: 45}, 45.0, "annotation"),
        ({MEASURED: "95@2026-11-22T09:00:00Z"}, 95.0, "measured"),
        # the owner's word wins over our measurement
        ({COST: "15", MEASURED: "95@2026-11-22T09:00:00Z"}, 15.0, "annotation"),
        # our own annotation, garbled: ignored (and measured again), never fatal
        ({MEASURED: "soon"}, None, ""),
        ({MEASURED: "95@yesterday"}, None, ""),
    ],
)
def test_restart_cost_is_read_from_the_job(notes, cost, source):
    job = parse_job(pytorchjob(annotations=notes), S.read_options(), Priorities({}))
    assert job.restart_cost_seconds == cost and job.restart_cost_source == source


@pytest.mark.parametrize("value", ["fast", "-5", "nan", "1e9", True])
def test_a_bad_restart_cost_annotation_names_the_field(value):
    job = parse_job(pytorchjob(annotations={COST: value}), S.read_options(), Priorities({}))
    assert isinstance(job, UnmanagedJob) and job.reason is Reason.INVALID_ANNOTATION
    assert f"metadata.annotations[{COST}]" in job.message


# ---- where it is used ---------------------------------------------------------------------


def test_cooldown_grows_with_the_jobs_restart_cost():
    pol = policy(cooldown_seconds=300, cooldown_restart_cost_factor=10)
    slow = costed(ej("slow", replicas=2, last=ago(400)), 60.0)  # cooldown 600 s
    quick = costed(ej("quick", replicas=2, last=ago(400)), 15.0)  # cooldown 300 s
    default = ej("default", replicas=2, last=ago(400))  # 30 s default: 300 s
    p = plan(snap({"q": 30}, [slow, quick, default]), pol, NOW)
    got = reasons(p)
    assert got["slow"][1] is Reason.COOLDOWN
    assert "cooldown 600s (10 x its restart cost 60s)" in next(
        d.message for d in p.decisions if d.ref.name == "slow"
    )
    assert got["quick"][1] is Reason.SCALE_UP_IDLE_GPUS
    assert got["default"][1] is Reason.SCALE_UP_IDLE_GPUS


def test_factor_zero_keeps_the_flat_cooldown():
    slow = costed(ej("slow", replicas=2, last=ago(400)), 250.0)
    p = plan(
        snap({"q": 30}, [slow]), policy(cooldown_seconds=300, cooldown_restart_cost_factor=0), NOW
    )
    assert reasons(p)["slow"][1] is Reason.SCALE_UP_IDLE_GPUS


def test_payoff_rule_uses_the_jobs_restart_cost():
    # ran 1000 s; +2 workers on 2 save ~500 s
    pol = policy(growth_payoff_factor=2)
    cheap = costed(ej("cheap", replicas=2, max=4, started=ago(1000)), 100.0)  # 200 < 500
    dear = costed(ej("dear", replicas=2, max=4, started=ago(1000)), 300.0)  # 600 > 500
    got = reasons(plan(snap({"q": 2}, [dear]), pol, NOW))
    assert got["dear"][1] is Reason.NOT_WORTH_RESTART
    got = reasons(plan(snap({"q": 2}, [cheap]), pol, NOW))
    assert got["cheap"][1] is Reason.SCALE_UP_IDLE_GPUS


def test_least_work_lost_takes_the_job_whose_restart_is_cheapest():
    pol = policy(victim_order="least-work-lost", reclaim_cooldown_seconds=0)
    bert = costed(ej("bert", replicas=4, min=1), 120.0)
    ncf = costed(ej("ncf", replicas=4, min=1), 15.0)
    p = plan(snap({"q": 0}, [bert, ncf], [gang("g", 2)]), pol, NOW)
    got = reasons(p)
    assert got["ncf"] == (2, Reason.RECLAIM_FOR_PENDING)
    assert got["bert"][1] is not Reason.RECLAIM_FOR_PENDING


# ---- measuring ----------------------------------------------------------------------------


def test_a_resized_job_whose_workers_all_run_is_measured_once():
    resized = ago(100)
    running = ej("a", replicas=4, active=4, last=resized)
    starting = ej("b", replicas=4, active=2, last=resized)
    done = costed(ej("c", replicas=4, last=resized), 80.0, "measured", resized)
    owned = costed(ej("d", replicas=4, last=resized), 40.0, "annotation")
    again = costed(ej("e", replicas=4, last=resized), 50.0, "measured", ago(3000))
    waited = ej("f", replicas=4, last=ago(301))  # over unplaced_timeout: queueing, not restart
    p = plan(snap({"q": 0}, [running, starting, done, owned, again, waited]), policy(), NOW)
    assert p.measurements == (
        Measurement(ObjectRef("ml", "a"), 100.0, resized, "1"),
        Measurement(ObjectRef("ml", "e"), 75.0, resized, "1"),  # averaged with the last
    )
    assert p.actions == ()  # a measurement is not a resize


def test_plan_shows_the_estimate_and_where_it_came_from():
    jobs = [
        costed(ej("a"), 240.0),
        costed(ej("b"), 95.0, "measured", ago(50)),
        ej("c"),
    ]
    p = plan(snap({"q": 0}, jobs), PlannerPolicy(restart_cost_seconds=30), NOW)
    doc = {j["name"]: j for j in plan_to_dict(p)["jobs"]}
    assert (doc["a"]["restart_cost_seconds"], doc["a"]["restart_cost_source"]) == (
        240.0,
        "annotation",
    )
    assert doc["b"]["restart_cost_source"] == "measured"
    assert (doc["c"]["restart_cost_seconds"], doc["c"]["restart_cost_source"]) == (30, "default")
    table = plan_to_table(p)
    assert "RESTART" in table and "240s annotation" in table and "95s measured" in table


# ---- keeping it on the job ------------------------------------------------------------------


async def test_a_measurement_is_kept_on_the_job_and_rides_along_with_a_resize(kube):
    """One annotation by merge patch pinned to the resourceVersion; a job resized in the
    same cycle gets it inside its resize patch (a second write would meet a 409)."""
    a, b = kube.put(job("a")), kube.put(job("b"))
    resized = ago(90)
    measure = [
        Measurement(ObjectRef("team-a", n, uid=o["metadata"].get("uid", "")), 90.0, resized, rv)
        for n, o, rv in (
            ("a", a, a["metadata"]["resourceVersion"]),
            ("b", b, b["metadata"]["resourceVersion"]),
        )
    ]
    kube.reset_requests()
    async with ApiClient(kube.configuration()) as client:
        actuator = KubeActuator(settings(kube_request_timeout_seconds=2).actuator_options(), client)
        result = await actuator.apply(
            Plan(now=NOW, decisions=(decide(b, 4),), measurements=tuple(measure)), NOW
        )
    assert result.ok
    patches = [r for r in kube.requests if r.verb == "patch"]
    assert sorted(r.name for r in patches) == ["a", "b"]  # one write each
    value = f"90@{resized.strftime('%Y-%m-%dT%H:%M:%SZ')}"
    for name in ("a", "b"):
        assert kube.get("pytorchjobs", "team-a", name)["metadata"]["annotations"][MEASURED] == value
    only_a = next(r for r in patches if r.name == "a")
    assert only_a.body == {
        "metadata": {
            "annotations": {MEASURED: value},
            "resourceVersion": a["metadata"]["resourceVersion"],
        }
    }
    assert (
        kube.get("pytorchjobs", "team-a", "b")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        == 4
    )


@pytest.mark.timeout(90)
async def test_the_daemon_measures_on_a_real_server_and_a_restart_keeps_it(envtest, real_ns):
    """A job we resized 80 s ago whose workers all run: the next cycle writes what it
    took onto the job; a new daemon (a restart) plans with it and measures nothing more."""
    if not HAVE_PROMETHEUS:
        pytest.skip(SKIP_REASON)
    ns, queue = real_ns, f"{real_ns}-q"
    envtest.apply_queue(queue)
    start = datetime.now(UTC).replace(microsecond=0)
    resized = start - timedelta(seconds=80)
    obj = pytorchjob("j", ns, queue=queue, replicas=3, annotations={LAST: rfc3339(resized)})
    envtest.create(_strip(obj))
    envtest.patch_status(obj, {"replicaStatuses": {"Worker": {"active": 3}}})
    exporter = VolcanoExporter()
    exporter.set_queue(queue, deserved=3000, allocated=3000)  # nothing free: no resize
    async with running_exporter(exporter), running_prometheus([exporter.target]) as prom:
        s = Settings(
            prometheus_url=prom.url,
            namespaces=[ns],
            leader_election=False,
            prometheus_retries=0,
            kube_request_timeout_seconds=5,
        )
        await _scraped(prom, s, queue, 0)
        async with Daemon(envtest, s) as d:
            first = await d.controller.run_once(start)
        assert first.result == "ok" and first.plan.actions == ()
        assert [(m.ref.name, m.seconds) for m in first.plan.measurements] == [("j", 80.0)]
        notes = envtest.get(obj)["metadata"]["annotations"]
        assert notes[MEASURED] == f"80@{rfc3339(resized)}"
        async with Daemon(envtest, s) as d:
            await d.seen("PyTorchJob", "j", lambda j: j.measured_for is not None)
            again = await d.controller.run_once(start + timedelta(seconds=60))
        job = next(x for x in again.plan.decisions if x.ref.name == "j")
        assert (job.restart_cost_seconds, job.restart_cost_source) == (80.0, "measured")
        assert again.plan.measurements == ()


@pytest.mark.parametrize(
    ("notes", "active", "early"),
    [
        ({LAST: "2026-11-22T09:58:00Z"}, 2, True),  # resized, all workers run: measure now
        ({LAST: "2026-11-22T09:58:00Z"}, 1, False),  # still starting
        ({}, 2, False),  # never resized by us
        ({LAST: "2026-11-22T09:58:00Z", MEASURED: "40@2026-11-22T09:58:00Z"}, 2, False),
        ({LAST: "2026-11-22T09:58:00Z", MEASURED: "40@2026-11-22T08:00:00Z"}, 2, True),
        ({LAST: "2026-11-22T09:58:00Z", COST: "60"}, 2, False),  # the owner said
    ],
)
def test_a_resized_job_whose_workers_all_run_triggers_an_early_cycle(notes, active, early):
    """The trigger is the planner's own test (ElasticJob.awaits_restart_measure) on the
    record the cache keeps: a change that makes it true gets a cycle that measures."""
    from autoscaler.read.parse import decode_job
    from autoscaler.run.daemon import restart_done

    obj = pytorchjob(replicas=2, active=active, annotations=notes)
    record = decode_job(obj, S.read_options())
    assert restart_done(record) is early
    assert record.awaits_restart_measure is early
