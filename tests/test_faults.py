"""Fault matrix: the daemon against servers that misbehave, asserting what it DID.

Every case runs the real wiring (the `Daemon` helper of test_loop: wiring.build + real
kubernetes_asyncio client against the fake API server, PrometheusSource against a fake or
real Prometheus, KubeActuator) and checks the same things: no job outside [min, max], no
double grant, no write while data is bad, the metrics and logs say why, and the loop keeps
running (a later cycle with good data plans again).

The process-level faults (kill -9 mid-cycle, SIGTERM, API unreachable at start, secrets in
logs) run the real CLI `python -m autoscaler run` as a subprocess; see the second half.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from builders import NOW, pytorchjob
from fakekube import FakeKubeApi, eventually
from prometheus_client import generate_latest
from promserver import (
    HAVE_PROMETHEUS,
    SKIP_REASON,
    Canned,
    VolcanoExporter,
    fake_prometheus,
    free_port,
    make_tls_files,
    running_exporter,
    running_prometheus,
    sample,
    vector_body,
)
from structlog.testing import capture_logs
from test_loop import Daemon, replicas, set_active, settings_for

from autoscaler.act.results import Outcome
from autoscaler.core.reasons import Reason
from autoscaler.read.live import LiveSource
from autoscaler.read.prometheus.answer import free_gpus_query

TS = NOW.timestamp()
RFC_NOW = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
REPO = Path(__file__).resolve().parents[1]


def metrics_text(d: Daemon) -> str:
    return generate_latest(d.metrics.registry).decode()


def counter(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the Prometheus text, 0 when absent."""

    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    prefix = f"{name}{{{want}}} " if labels else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def patches(api: FakeKubeApi, name: str | None = None) -> int:
    return api.count(method="PATCH", plural="pytorchjobs", name=name)


def resizes(api: FakeKubeApi, name: str) -> int:
    """PATCHes of a job that change its spec (a measured restart cost is annotation only)."""
    return sum(
        1
        for r in api.requests
        if r.method == "PATCH"
        and r.plural == "pytorchjobs"
        and r.name == name
        and isinstance(r.body, dict)
        and "spec" in r.body
    )


def assert_bounds(api: FakeKubeApi) -> None:
    """No job in the fake API is outside its elasticPolicy bounds (rule 1)."""

    for job in api.objects("pytorchjobs"):
        spec = job["spec"]
        r = spec["pytorchReplicaSpecs"]["Worker"]["replicas"]
        lo, hi = spec["elasticPolicy"]["minReplicas"], spec["elasticPolicy"]["maxReplicas"]
        assert lo <= r <= hi, (job["metadata"]["name"], r, lo, hi)


def decision_logs(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e.get("event") == "decision" and e.get("name") == name]


def two_queue_cluster(api: FakeKubeApi) -> None:
    """`a` in team-a (where the fault is) and `b` in team-b (healthy), both growable."""

    api.put(pytorchjob("a", queue="team-a", min_replicas=1, max_replicas=4, replicas=2, active=2))
    api.put(pytorchjob("b", queue="team-b", min_replicas=1, max_replicas=4, replicas=2, active=2))


GOOD = vector_body(sample("team-a", 2000, TS), sample("team-b", 2000, TS))


def with_team_b(*team_a: dict[str, Any]) -> dict[str, Any]:
    return vector_body(*team_a, sample("team-b", 2000, TS))


# ---- Prometheus faults ---------------------------------------------------------------------


@dataclass(frozen=True)
class PromFault:
    """One bad Prometheus answer. `reason`: what job `a` holds with; `kind`: the
    source_errors_total kind counted (None: nothing counted); `cycle_wide`: the whole cycle
    holds (b too) rather than just team-a; `why`: text the logs must carry."""

    id: str
    answer: Canned | None  # None: nothing listens (Prometheus down)
    reason: Reason
    kind: str | None
    cycle_wide: bool
    why: str
    settings: dict[str, Any] = field(default_factory=dict)
    b_holds: bool = False  # team-b holds too although the cycle itself is "ok"

    @property
    def all_hold(self) -> bool:
        return self.cycle_wide or self.b_holds


PROM_FAULTS = [
    PromFault("down", None, Reason.METRICS_UNAVAILABLE, "connection", True, "cannot connect"),
    PromFault(
        "slow-past-timeout",
        Canned(GOOD, hold=True),
        Reason.METRICS_UNAVAILABLE,
        "timeout",
        True,
        "no answer within prometheus_timeout_seconds",
        {"prometheus_timeout_seconds": 0.3},
    ),
    PromFault(
        "empty-result",
        Canned(vector_body()),
        Reason.METRICS_MISSING,
        None,
        False,
        "has no series",
        b_holds=True,
    ),
    PromFault(
        "nan",
        Canned(with_team_b(sample("team-a", float("nan"), TS))),
        Reason.METRICS_INVALID,
        "nan",
        False,
        "NaN",
    ),
    PromFault(
        "+inf",
        Canned(with_team_b(sample("team-a", float("inf"), TS))),
        Reason.METRICS_INVALID,
        "inf",
        False,
        "+inf",
    ),
    PromFault(
        "-inf",
        Canned(with_team_b(sample("team-a", float("-inf"), TS))),
        Reason.METRICS_INVALID,
        "inf",
        False,
        "-inf",
    ),
    PromFault(
        "negative",
        Canned(with_team_b(sample("team-a", -3000, TS))),
        Reason.METRICS_INVALID,
        "negative",
        False,
        "negative",
    ),
    PromFault(
        "duplicate-series",
        Canned(
            with_team_b(
                sample("team-a", 2000, TS, instance="s1"), sample("team-a", 9000, TS, instance="s2")
            )
        ),
        Reason.METRICS_INVALID,
        "duplicate",
        False,
        "2 series for one queue",
    ),
    PromFault(
        "wrong-label-one-series",
        Canned(with_team_b(sample(None, 2000, TS, queue="team-a"))),
        Reason.METRICS_MISSING,
        "missing_label",
        False,
        "has no series",
    ),
    PromFault(
        "wrong-label-all-series",
        Canned(
            vector_body(
                sample(None, 2000, TS, queue="team-a"), sample(None, 2000, TS, queue="team-b")
            )
        ),
        Reason.METRICS_INVALID,
        "missing_label",
        True,
        "no series has the queue label",
    ),
    PromFault(
        "stale-sample",
        Canned(with_team_b(sample("team-a", 2000, TS - 3600))),
        Reason.METRICS_STALE,
        "stale",
        False,
        "3600s old",
        {"max_metric_age_seconds": 300},
    ),
    PromFault(
        "future-sample",
        Canned(with_team_b(sample("team-a", 2000, TS + 3600))),
        Reason.CLOCK_SKEW,
        "clock_skew",
        False,
        "ahead of our clock",
        {"max_metric_age_seconds": 300},
    ),
    PromFault(
        "garbage-body",
        Canned(b"<html>502 Bad Gateway</html>", content_type="text/html"),
        Reason.METRICS_INVALID,
        "garbage",
        True,
        "garbage answer",
    ),
    PromFault(
        "truncated-json",
        Canned(json.dumps(GOOD)[:40]),
        Reason.METRICS_INVALID,
        "garbage",
        True,
        "not JSON",
    ),
    PromFault(
        "error-envelope",
        Canned(
            {"status": "error", "errorType": "execution", "error": "query timed out"}, status=503
        ),
        Reason.METRICS_UNAVAILABLE,
        "http_5xx",
        True,
        "HTTP 503",
    ),
    PromFault(
        "auth-401",
        Canned(b"Unauthorized", status=401),
        Reason.METRICS_UNAVAILABLE,
        "auth",
        True,
        "HTTP 401",
    ),
    PromFault(
        "auth-403",
        Canned(b"Forbidden", status=403),
        Reason.METRICS_UNAVAILABLE,
        "auth",
        True,
        "HTTP 403",
    ),
    PromFault("tls-untrusted", Canned(GOOD), Reason.METRICS_UNAVAILABLE, "tls", True, "TLS failed"),
    PromFault(
        "too-large",
        Canned(with_team_b(sample("team-a", 2000, TS, junk="x" * 4096))),
        Reason.METRICS_INVALID,
        "too_large",
        True,
        "prometheus_max_response_bytes",
        {"prometheus_max_response_bytes": 1024},
    ),
    PromFault(
        "scalar-not-vector",
        Canned({"status": "success", "data": {"resultType": "scalar", "result": [TS, "4"]}}),
        Reason.METRICS_INVALID,
        "non_vector",
        True,
        "scalar",
    ),
]


@contextlib.asynccontextmanager
async def prometheus_for(case: PromFault, tmp_path: Path):
    if case.answer is None:
        yield f"http://127.0.0.1:{free_port()}", None
        return
    ssl_context = None
    if case.id.startswith("tls"):
        ssl_context = make_tls_files(tmp_path).server_context()  # a CA the daemon never saw
    # the fault first, then a good answer: the next cycle must plan again
    async with fake_prometheus(case.answer, Canned(GOOD), ssl_context=ssl_context) as prom:
        yield prom.url, prom


@pytest.mark.parametrize("case", PROM_FAULTS, ids=[c.id for c in PROM_FAULTS])
async def test_prometheus_fault_holds_and_says_why(api, tmp_path, case: PromFault):
    two_queue_cluster(api)
    async with prometheus_for(case, tmp_path) as (url, prom):
        settings = settings_for(url, **case.settings)
        async with Daemon(api, settings) as d:
            with capture_logs() as logs:
                first = await d.controller.run_once(NOW)
            assert first.result == ("hold" if case.cycle_wide else "ok")
            by_name = {x.ref.name: x for x in first.plan.decisions}
            assert by_name["a"].reason is case.reason, by_name["a"].message
            assert case.why.lower() in by_name["a"].message.lower()
            assert by_name["a"].target == by_name["a"].current == 2
            assert patches(api, "a") == 0  # no write while its data is bad
            assert_bounds(api)
            if case.all_hold:
                assert by_name["b"].reason is case.reason
                assert patches(api) == 0
            else:  # the rest of the cluster is still planned
                assert by_name["b"].reason is Reason.SCALE_UP_IDLE_GPUS
                assert replicas(api, "b") == 4
            # metrics say why
            text = metrics_text(d)
            if case.kind is not None:
                assert (
                    counter(
                        text,
                        "elastic_autoscaler_source_errors_total",
                        kind=case.kind,
                        source="prometheus",
                    )
                    >= 1
                )
            result = "hold" if case.cycle_wide else "ok"
            assert counter(text, "elastic_autoscaler_cycles_total", result=result) == 1
            # logs say why: the decision line for `a` carries reason and message
            lines = decision_logs(logs, "a")
            assert lines and lines[0]["reason"] == case.reason.value
            assert case.why.lower() in lines[0]["message"].lower()
            cycle = [e for e in logs if e.get("event") == "cycle"]
            assert cycle and cycle[0]["result"] == result
            if case.cycle_wide:
                assert case.why.lower() in cycle[0]["message"].lower()

            if prom is None or case.id.startswith("tls"):
                return  # nothing will ever answer well at that address
            # the loop keeps running: Prometheus recovers, the next cycle plans team-a
            set_active(api, "b", replicas(api, "b"))
            second = await d.controller.run_once(NOW + timedelta(seconds=30))
            assert second.result == "ok", second.message
            grown = {x.ref.name: x.target for x in second.plan.actions}
            want = {"a": 4, "b": 4} if case.all_hold else {"a": 4}
            assert grown == want, [(x.ref.name, x.reason, x.message) for x in second.plan.decisions]
            assert replicas(api, "a") == 4
            assert_bounds(api)


@pytest.mark.skipif(not HAVE_PROMETHEUS, reason=SKIP_REASON)
@pytest.mark.prometheus
async def test_real_prometheus_target_down_holds_then_recovers(api):
    """Where staleness really comes from: the scrape target fails, Prometheus marks its
    series stale, the default query returns nothing for the queue, the queue holds."""

    api.put(pytorchjob("a", queue="team-a", min_replicas=1, max_replicas=4, replicas=2, active=2))
    exporter = VolcanoExporter()
    exporter.set_queue("team-a", deserved=4000, allocated=2000)
    async with running_exporter(exporter), running_prometheus([exporter.target]) as prom:
        # the real default query: deserved and allocated read apart
        settings = settings_for(prom.url, prometheus_timeout_seconds=5, free_gpus_query=None)
        query = free_gpus_query(settings.prometheus_options())
        async with Daemon(api, settings) as d:
            exporter.failing = True
            scrapes = exporter.scrapes

            async def stale() -> bool:
                body = await prom.query(query)
                return exporter.scrapes > scrapes and not body["data"]["result"]

            deadline = time.monotonic() + 20
            while not await stale():
                assert time.monotonic() < deadline, "series never went stale"
                await asyncio.sleep(0.2)
            now = datetime.now(UTC)
            held = await d.controller.run_once(now)
            assert held.plan.decisions[0].reason is Reason.METRICS_MISSING
            assert patches(api) == 0
            exporter.failing = False

            async def fresh() -> bool:
                body = await prom.query(query)
                return bool(body["data"]["result"])

            deadline = time.monotonic() + 20
            while not await fresh():
                assert time.monotonic() < deadline, "series never came back"
                await asyncio.sleep(0.2)
            grown = await d.controller.run_once(datetime.now(UTC))
            assert [(x.ref.name, x.target) for x in grown.plan.actions] == [("a", 4)]
            assert replicas(api, "a") == 4


# ---- API server faults on the write path ------------------------------------------------------


class AfterRead:
    """The live source, then `hook` runs after the cycle read its snapshot: another writer
    acts between our read and our patch."""

    def __init__(self, inner: LiveSource, hook) -> None:
        self.inner, self.hook = inner, hook

    async def read(self, now):
        snapshot = await self.inner.read(now)
        if self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return snapshot


def one_job(api: FakeKubeApi) -> None:
    api.put(pytorchjob("j", queue="team-a", min_replicas=1, max_replicas=4, replicas=2, active=2))


ONE_QUEUE = vector_body(sample("team-a", 2000, TS))


async def test_api_404_on_patch_object_deleted_between_read_and_patch(api):
    one_job(api)
    api.put(pytorchjob("k", queue="team-a", min_replicas=1, max_replicas=1, replicas=1, active=1))
    async with fake_prometheus(ONE_QUEUE) as prom, Daemon(api, settings_for(prom.url)) as d:
        d.controller.source = AfterRead(
            d.controller.source, lambda: api.delete("pytorchjobs", "ml", "j")
        )
        with capture_logs() as logs:
            first = await d.controller.run_once(NOW)
        assert first.result == "ok"
        assert [r.outcome for r in first.applied.results] == [Outcome.GONE]
        assert api.get("pytorchjobs", "ml", "j") is None  # a patch never resurrects it
        scale = [e for e in logs if e.get("event") == "scale"]
        assert scale[0]["outcome"] == "gone" and "not found" in scale[0]["message"]
        assert counter(metrics_text(d), "elastic_autoscaler_writes_total", result="gone") == 1
        assert api.objects("events", "ml") == []  # no Event about a job that is gone
        await eventually(lambda: len(d.kube.objects().jobs) == 1)
        second = await d.controller.run_once(NOW + timedelta(seconds=30))
        assert second.result == "ok" and second.plan.actions == ()
        assert [x.ref.name for x in second.plan.decisions] == ["k"]
        assert_bounds(api)


async def test_api_409_on_patch_writes_nothing_and_next_cycle_uses_fresh_data(api):
    """Another writer resizes the job between our read and our patch: our patch carries
    the old resourceVersion, so it is refused (409) instead of overwriting theirs; the next
    cycle plans from the new size and never grants the same GPUs twice."""

    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom, Daemon(api, settings_for(prom.url)) as d:

        def user_resizes() -> None:
            # dated as a real API server dates it (a managedFields entry at the write's
            # time; this fake keeps none): the new worker was asked for just now, so it
            # is in flight, not a worker whose pod never came (HoldNoPods)
            written = {"manager": "kubectl-patch", "operation": "Update", "time": RFC_NOW}
            api.patch(
                "pytorchjobs",
                "ml",
                "j",
                {
                    "metadata": {"managedFields": [written]},
                    "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}},
                },
            )

        d.controller.source = AfterRead(d.controller.source, user_resizes)
        first = await d.controller.run_once(NOW)
        assert [r.outcome for r in first.applied.results] == [Outcome.CONFLICT]
        assert replicas(api, "j") == 3  # theirs, not ours
        assert counter(metrics_text(d), "elastic_autoscaler_writes_total", result="conflict") == 1
        await d.seen("PyTorchJob", "j", lambda j: j.replicas == 3)
        second = await d.controller.run_once(NOW + timedelta(seconds=30))
        # their extra worker is in flight (3 asked, 2 running): Prometheus, which lags,
        # still shows 2 free, yet nothing is granted on top of a pending resize
        assert second.plan.actions == ()
        assert second.plan.decisions[0].reason is Reason.IN_FLIGHT
        assert patches(api) == 1
        set_active(api, "j", 3)  # it lands; Prometheus now shows the 1 GPU left
        prom.answers[:] = [Canned(vector_body(sample("team-a", 1000, TS)))]
        await d.seen("PyTorchJob", "j", lambda j: j.active == 3)
        third = await d.controller.run_once(NOW + timedelta(seconds=60))
        assert [(x.ref.name, x.target) for x in third.plan.actions] == [("j", 4)]
        assert replicas(api, "j") == 4
        assert_bounds(api)


@pytest.mark.parametrize(
    ("status", "retry_after", "outcome", "blocked_until"),
    [
        (429, 30, Outcome.THROTTLED, 30),  # the server's Retry-After, past the write budget
        (500, 1, Outcome.ERROR, 1),  # nothing landed: the server's failure, a 1 s pause
        (503, 1, Outcome.ERROR, 1),  # (the fake sends Retry-After with 429 only)
    ],
    ids=["429", "500", "503"],
)
async def test_api_throttled_or_failing_waits_then_applies(
    api, status, retry_after, outcome, blocked_until
):
    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom, Daemon(api, settings_for(prom.url)) as d:
        clock = [1000.0]
        d.controller.actuator.pacer.clock = lambda: clock[0]  # the pacer's time, injected
        api.fail_next("PATCH", r"/pytorchjobs/j$", status, retry_after=retry_after)
        with capture_logs() as logs:
            first = await d.controller.run_once(NOW)
        assert [r.outcome for r in first.applied.results] == [outcome]
        assert first.result == "write_failed"  # nothing landed
        assert first.applied.retry_in == blocked_until  # the driver's early cycle
        assert replicas(api, "j") == 2
        assert patches(api) == 1
        if outcome is Outcome.ERROR:
            warn = [e for e in logs if e.get("event") == "scale"]
            assert warn[0]["log_level"] == "warning" and f"HTTP {status}" in warn[0]["message"]
        # before the server's time (and further than this cycle's write budget, 10 s,
        # would wait for it): the plan still wants it, but no request is made
        early = blocked_until / 2
        clock[0] += early
        held = await d.controller.run_once(NOW + timedelta(seconds=early))
        assert [r.outcome for r in held.applied.results] == [Outcome.DEFERRED]
        assert patches(api) == 1
        clock[0] += blocked_until - early
        done = await d.controller.run_once(NOW + timedelta(seconds=blocked_until))
        assert [r.outcome for r in done.applied.results] == [Outcome.APPLIED]
        assert done.result == "ok"
        assert replicas(api, "j") == 4 and patches(api) == 2
        text = metrics_text(d)
        assert counter(text, "elastic_autoscaler_writes_total", result=outcome.value) == 1
        assert counter(text, "elastic_autoscaler_writes_total", result="deferred") == 1
        assert counter(text, "elastic_autoscaler_writes_total", result="applied") == 1
        throttles = counter(text, "elastic_autoscaler_write_throttles_total")
        assert throttles == (1 if status == 429 else 0)
        assert_bounds(api)


async def test_api_request_timeout_on_patch_backs_off_and_never_doubles(api):
    """The patch hangs past kube_request_timeout_seconds. Whether or not the server applied
    it, we must not grant twice: a retry carries the old resourceVersion (409 if it did
    land) and the next plan counts the workers in flight."""

    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom:
        settings = settings_for(prom.url, kube_request_timeout_seconds=0.3)
        async with Daemon(api, settings) as d:
            api.fail_next("PATCH", r"/pytorchjobs/j$", 0, delay=1.0)
            clock = [1000.0]
            d.controller.actuator.pacer.clock = lambda: clock[0]  # the pacer's time
            first = await d.controller.run_once(NOW)
            assert [(r.outcome, r.message.split(";")[0]) for r in first.applied.results] == [
                (Outcome.ERROR, "request timed out")
            ]
            assert first.result == "write_failed"  # counted and seen, never called ok
            for seconds in (5, 11, 60):
                clock[0] = 1000.0 + seconds
                await d.controller.run_once(NOW + timedelta(seconds=seconds))
            assert replicas(api, "j") == 4
            assert_bounds(api)


async def test_cycles_whose_writes_fail_are_not_ok_and_readiness_follows(api):
    """Every patch answers 500: the cycles say so in their result and metric, and /readyz
    turns false once no good cycle happened for ready_max_age_seconds."""

    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom:
        settings = settings_for(prom.url, ready_max_age_seconds=100)
        clock = [1000.0]
        async with Daemon(api, settings, clock=lambda: clock[0]) as d:
            driver = d.driver
            api.fail_next("PATCH", r"/pytorchjobs/j$", 500, times=100)
            failed = await d.controller.run_once(NOW)
            assert failed.result == "write_failed"
            assert [r.outcome for r in failed.applied.results] == [Outcome.ERROR]
            assert (
                counter(metrics_text(d), "elastic_autoscaler_cycles_total", result="write_failed")
                == 1
            )
            assert not driver.ready()[0]  # no good cycle yet
            clock[0] += 200  # past the back-off: the write is tried again, and fails again
            again = await d.controller.run_once(NOW + timedelta(seconds=200))
            assert again.result == "write_failed"
            ready, why = driver.ready()
            assert not ready and "no successful cycle" in why
            assert replicas(api, "j") == 2


@pytest.mark.parametrize("how", ["clean-close", "abrupt-close", "410-gone"])
async def test_watch_interrupted_cache_recovers_and_cycle_sees_changes(api, how):
    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom, Daemon(api, settings_for(prom.url)) as d:
        watches = api.count(plural="pytorchjobs", watch=True)
        lists = api.count(plural="pytorchjobs", verb="list")
        if how == "410-gone":
            api.fail_next("GET", "pytorchjobs", 500, watch=True)  # first resume fails...
        api.close_watches("pytorchjobs", abrupt=how == "abrupt-close")
        api.put(
            pytorchjob("late", queue="team-a", min_replicas=1, max_replicas=3, replicas=1, active=1)
        )
        if how == "410-gone":
            api.compact()  # ...and by the time it retries, its version is forgotten
        await d.seen("PyTorchJob", "late")
        assert api.count(plural="pytorchjobs", watch=True) > watches
        if how == "410-gone":
            assert api.count(plural="pytorchjobs", verb="list") > lists
        result = await d.controller.run_once(NOW)
        assert result.result == "ok"
        # 2 free: fill grows the smaller job (late: 1 worker) to its max of 3 first
        assert {x.ref.name: x.target for x in result.plan.actions} == {"late": 3}


async def test_api_list_failing_at_start_holds_until_synced(api):
    """The first LISTs fail (500): the cycle holds, writes nothing and says why; once the
    caches sync, it plans."""

    one_job(api)
    api.fail_next("GET", "pytorchjobs", 500, times=2, watch=False)
    async with fake_prometheus(ONE_QUEUE) as prom:
        settings = settings_for(prom.url)
        d = Daemon(api, settings)
        await d.kube.start()
        try:
            held = await d.controller.run_once(NOW)
            assert held.result == "hold"
            assert "not synced" in held.message
            assert patches(api) == 0
            assert (
                counter(
                    metrics_text(d),
                    "elastic_autoscaler_source_errors_total",
                    kind="not_synced",
                    source="kubernetes",
                )
                == 1
            )
            await d.kube.wait_synced(10)
            ok = await d.controller.run_once(NOW + timedelta(seconds=1))
            assert ok.result == "ok" and replicas(api, "j") == 4
        finally:
            await d.__aexit__(None, None, None)


async def test_api_lost_after_sync_plans_on_cache_then_holds_when_stale(api):
    """The API server goes away mid-run: the caches keep the last picture, which is fine
    for a while, but past kube_max_stale_seconds it may hide a new gang or a resize, so
    every queue holds (no write) and says why; when the API returns, planning resumes."""

    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom:
        settings = settings_for(prom.url, kube_max_stale_seconds=0.5)
        async with Daemon(api, settings) as d:
            api.fail_next("GET", "pytorchjobs", 500, times=10**6)  # lists and watches fail
            api.close_watches("pytorchjobs")
            await eventually(lambda: d.kube.objects().failing_seconds > 0.5, 10)
            held = await d.controller.run_once(NOW)
            assert held.result == "hold" and "Kubernetes caches failing for" in held.message
            assert "PyTorchJob" in held.message and "HTTP 500" in held.message
            assert held.plan.decisions[0].reason is Reason.METRICS_UNAVAILABLE
            assert patches(api) == 0
            assert (
                counter(
                    metrics_text(d),
                    "elastic_autoscaler_source_errors_total",
                    kind="stale",
                    source="kubernetes",
                )
                == 1
            )
            api.clear_faults()  # the API is back
            await eventually(lambda: d.kube.objects().failing_seconds == 0, 30)
            ok = await d.controller.run_once(NOW + timedelta(seconds=60))
            assert ok.result == "ok" and replicas(api, "j") == 4


async def test_a_stalled_watch_is_restarted_and_holds_writes_while_it_lasts(api):
    """A proxy that stops forwarding: the job watch's connection stays open and carries
    nothing, and new watches get no answer. Past watch_stall_seconds the watch is
    restarted; until one connects again the cache may be stale, so every write holds
    (HoldCacheStale), /readyz fails and the metrics show the cache's age and the stall.
    When the proxy forwards again, the next watch resumes from the last version (no
    LIST), sees what it missed (a human's resize), and cycles plan on that again."""

    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom:
        settings = settings_for(prom.url, watch_stall_seconds=0.3)
        async with Daemon(api, settings) as d:
            await eventually(lambda: api.watchers("pytorchjobs") == 1)
            lists = api.count(method="GET", plural="pytorchjobs", watch=False)
            api.stall_watches("pytorchjobs")
            api.patch(
                "pytorchjobs",
                "ml",
                "j",
                {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}},
            )
            # the job watch's stall: with watch_stall_seconds 0.3 another quiet cache's
            # watch may stall (and reconnect) first
            await eventually(
                lambda: any(s.startswith("PyTorchJob(*)") for s in d.kube.objects().stalled), 5
            )
            assert not d.kube.current
            text = metrics_text(d)
            assert (
                counter(text, "elastic_autoscaler_kube_cache_stalled", cache="PyTorchJob(*)") == 1
            )
            assert (
                counter(text, "elastic_autoscaler_kube_cache_age_seconds", cache="PyTorchJob(*)")
                > 0.25
            )
            assert d.driver.ready() == (
                False,
                "Kubernetes caches not current (listing, reconnecting to the API, or a watch "
                "stalled)",
            )
            held = await d.controller.run_once(NOW)
            assert held.result == "hold" and patches(api) == 0
            assert held.plan.decisions[0].reason is Reason.CACHE_STALE
            assert "watch delivered nothing" in held.plan.decisions[0].message
            assert replicas(api, "j") == 3  # what the stale cache did not see
            api.unstall_watches()
            await eventually(lambda: d.kube.current and d.kube.objects().stalled == (), 5)
            assert (
                counter(
                    metrics_text(d), "elastic_autoscaler_kube_cache_stalled", cache="PyTorchJob"
                )
                == 0
            )
            await d.seen("PyTorchJob", "j", lambda j: j.replicas == 3)
            assert api.count(method="GET", plural="pytorchjobs", watch=False) == lists  # no LIST
            ok = await d.controller.run_once(NOW + timedelta(seconds=60))
            assert ok.result == "ok" and ok.plan.decisions[0].current == 3  # planned afresh


async def test_a_cache_answered_again_lifts_the_write_pause_and_calls_a_cycle(api):
    """Writes paused for an outage (the pause doubled to 16 s) resume when the API
    server answers the caches again: the pause is lifted and an early cycle called."""
    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom:
        async with Daemon(api, settings_for(prom.url)) as d:
            pacer = d.parts.actuator.pacer
            for _ in range(5):
                pacer.unavailable(pacer.ticket())
            assert pacer.retry_in() > 10
            triggered: list[bool] = []
            d.driver.trigger = lambda urgent=False: triggered.append(urgent)
            api.fail_next("GET", "pytorchjobs", 500, times=10**6)
            api.close_watches("pytorchjobs")
            await eventually(lambda: not d.kube.current, 5)
            assert pacer.retry_in() > 10 and triggered == []
            api.clear_faults()
            await eventually(lambda: d.kube.current, 10)
            assert pacer.retry_in() == 0 and triggered == [False]
            ok = await d.controller.run_once(NOW)
            assert ok.result == "ok" and replicas(api, "j") == 4


async def test_bookmarks_keep_a_quiet_watch_from_counting_as_stalled(api):
    """A quiet resource's watch says nothing but its bookmarks: those are enough."""
    one_job(api)
    async with fake_prometheus(ONE_QUEUE) as prom:
        async with Daemon(api, settings_for(prom.url, watch_stall_seconds=0.5)) as d:
            await eventually(lambda: api.watchers("pytorchjobs") == 1)
            for _ in range(10):  # 1 s of a bookmark every 0.1 s
                api.send_bookmarks()
                await asyncio.sleep(0.1)
            assert d.kube.stats()["stalls"] == 0 and d.kube.objects().stalled == ()


# ---- leadership and concurrency ------------------------------------------------------------


async def test_lease_lost_mid_cycle_stops_writing_at_once(api):
    """A real elector leads; mid-plan the API stops accepting its renewals and the first
    patch hangs past what the Lease covers. That patch is cancelled when the Lease runs
    out (less its margin: it is fenced to the Lease), so it never lands; everything after
    it is not written. (With max_parallel_writes=N, up to N writes started while leading
    may be in flight when the lease is lost; none starts after, and none outlives the
    Lease. Pinned serial here to see that edge.)"""

    for name in ("a", "b", "c"):
        api.put(
            pytorchjob(name, queue="team-a", min_replicas=1, max_replicas=2, replicas=1, active=1)
        )
    async with fake_prometheus(vector_body(sample("team-a", 3000, TS))) as prom:
        settings = settings_for(
            prom.url,
            leader_election=True,
            lease_namespace="ml",
            lease_duration_seconds=1.0,
            lease_renew_deadline_seconds=0.5,
            lease_retry_period_seconds=0.1,
            max_parallel_writes=1,
        )
        async with Daemon(api, settings) as d:
            elector = d.elector  # the daemon's own: it is what stops the writes
            await eventually(lambda: elector.is_leader, 5)
            api.fail_next("PUT", "/leases/", 500, times=1000)  # renewals fail from now
            api.fail_next("PATCH", r"/pytorchjobs/a$", 0, delay=1.0)  # a slow write
            with capture_logs() as logs:
                result = await d.controller.run_once(NOW)
            outcomes = {r.decision.ref.name: r.outcome for r in result.applied.results}
            assert outcomes == {
                "a": Outcome.NOT_LEADER,
                "b": Outcome.NOT_LEADER,
                "c": Outcome.NOT_LEADER,
            }
            assert patches(api) == 1  # sent while leading, cancelled when the Lease ran out
            await eventually(lambda: api.delayed_now == 0, 5)  # the server dropped it
            assert replicas(api, "a") == 1
            assert api.objects("events", "ml") == []
            assert "Lease would run out" in result.applied.results[0].message
            assert (
                counter(metrics_text(d), "elastic_autoscaler_writes_total", result="not_leader")
                == 3
            )
            assert any(e.get("event") == "leader-lost" for e in logs)
            assert_bounds(api)


class Barrier:
    """Both daemons read the same world before either writes: a deterministic race."""

    def __init__(self, inner: LiveSource, barrier: asyncio.Barrier) -> None:
        self.inner, self.barrier = inner, barrier

    async def read(self, now):
        snapshot = await self.inner.read(now)
        await self.barrier.wait()
        return snapshot


async def test_two_daemons_racing_without_leader_election_stay_consistent(api):
    """Leader election off and two replicas (a misconfiguration): both plan from the same
    read and both patch. resourceVersion makes the second patch a 409, so the job is grown
    once, not twice, and the loser's next cycle sees the workers in flight."""

    api.put(pytorchjob("j", queue="team-a", min_replicas=1, max_replicas=8, replicas=2, active=2))
    api.put(pytorchjob("k", queue="team-a", min_replicas=1, max_replicas=8, replicas=4, active=4))
    async with fake_prometheus(vector_body(sample("team-a", 3000, TS))) as prom:
        settings = settings_for(prom.url)
        async with Daemon(api, settings) as one, Daemon(api, settings) as two:
            barrier = asyncio.Barrier(2)
            one.controller.source = Barrier(one.controller.source, barrier)
            two.controller.source = Barrier(two.controller.source, barrier)
            r1, r2 = await asyncio.gather(
                one.controller.run_once(NOW), two.controller.run_once(NOW)
            )
            outcomes = sorted(r.outcome.value for x in (r1, r2) for r in x.applied.results)
            assert outcomes == ["applied", "conflict"]
            assert replicas(api, "j") == 5 and replicas(api, "k") == 4  # 3 free GPUs, once
            assert patches(api) == 2
            for d in (one, two):
                await d.seen("PyTorchJob", "j", lambda j: j.replicas == 5)
            # Prometheus still says 3 free (it lags): in-flight accounting stops a regrant
            again = await asyncio.gather(
                one.controller.run_once(NOW + timedelta(seconds=60)),
                two.controller.run_once(NOW + timedelta(seconds=60)),
            )
            assert all(x.plan.actions == () for x in again)
            assert patches(api) == 2
            assert_bounds(api)


# ---- the real process: kill -9, SIGTERM, API unreachable, secrets ------------------------------


@dataclass
class Proc:
    """`python -m autoscaler run` as a child process, JSON logs read line by line."""

    process: asyncio.subprocess.Process
    lines: list[dict[str, Any]] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    reader: asyncio.Task | None = None

    async def _read(self) -> None:
        assert self.process.stderr is not None
        async for line in self.process.stderr:
            text = line.decode(errors="replace").rstrip("\n")
            self.raw.append(text)
            with contextlib.suppress(ValueError):
                event = json.loads(text)
                if isinstance(event, dict):
                    self.lines.append(event)

    def events(self, event: str, /, **match: Any) -> list[dict[str, Any]]:
        return [
            e
            for e in self.lines
            if e.get("event") == event and all(e.get(k) == v for k, v in match.items())
        ]

    @property
    def port(self) -> int:
        listening = self.events("listening")
        return int(listening[0]["port"]) if listening else 0

    async def wait_for(self, name: str, within: float = 15.0, /, **match: Any) -> dict[str, Any]:
        def found():
            if self.process.returncode is not None and not self.events(name, **match):
                raise AssertionError(
                    f"daemon exited {self.process.returncode}:\n" + "\n".join(self.raw[-30:])
                )
            got = self.events(name, **match)
            return got[-1] if got else None

        try:
            return await eventually(found, within, 0.02, f"log event {name} {match}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n" + "\n".join(self.raw[-30:])) from None

    async def stop(self, sig: int = signal.SIGTERM, within: float = 15.0) -> int:
        if self.process.returncode is None:
            self.process.send_signal(sig)
        code = await asyncio.wait_for(self.process.wait(), within)
        if self.reader is not None:
            await asyncio.wait_for(self.reader, 5)
        return code


def daemon_env(tmp_path: Path, kubeconfig: Path, prom_url: str, **extra: Any) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    env.update(
        {
            "AUTOSCALER_KUBECONFIG": str(kubeconfig),
            "AUTOSCALER_PROMETHEUS_URL": prom_url,
            "AUTOSCALER_FREE_GPUS_QUERY": "elastic_autoscaler_test_free_gpus",
            "AUTOSCALER_LEADER_ELECTION": "false",
            "AUTOSCALER_LISTEN_HOST": "127.0.0.1",
            "AUTOSCALER_LISTEN_PORT": "0",
            "AUTOSCALER_INTERVAL_SECONDS": "3600",
            "AUTOSCALER_MIN_INTERVAL_SECONDS": "3600",
            "AUTOSCALER_PROMETHEUS_RETRIES": "0",
            "AUTOSCALER_PROMETHEUS_TIMEOUT_SECONDS": "3",
            "AUTOSCALER_CYCLE_DEADLINE_SECONDS": "10",
            "AUTOSCALER_KUBE_REQUEST_TIMEOUT_SECONDS": "20",
            "AUTOSCALER_LOG_FORMAT": "json",
            "AUTOSCALER_COOLDOWN_SECONDS": "300",
            "PYTHONPATH": str(REPO),
            "HOME": str(tmp_path),  # no ~/.kube/config of the machine running the tests
        }
    )
    env.update({f"AUTOSCALER_{k.upper()}": str(v) for k, v in extra.items()})
    return env


@contextlib.asynccontextmanager
async def daemon_process(env: dict[str, str], args: tuple[str, ...] = ("run",)):
    """`python -m autoscaler ARGS` (the image's ENTRYPOINT is the CLI), stderr read."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "autoscaler",
        *args,
        cwd=str(REPO),
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    proc = Proc(process)
    proc.reader = asyncio.create_task(proc._read())
    try:
        yield proc
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if proc.reader is not None:
            proc.reader.cancel()
            await asyncio.gather(proc.reader, return_exceptions=True)


def live_body(**free: float) -> dict[str, Any]:
    """Free GPUs stamped with the wall clock: the child process plans at its real now."""

    return vector_body(*(sample(q, v * 1000, time.time()) for q, v in free.items()))


async def test_killed_mid_cycle_then_restarted_keeps_cooldown_and_finishes(api, tmp_path):
    """kill -9 between two patches of one cycle: `a` landed, `b`'s patch was hanging. The
    restarted process must not resize `a` again (cooldown from its annotation) and must do
    `b` exactly once."""

    api.put(pytorchjob("a", queue="team-a", min_replicas=1, max_replicas=8, replicas=1, active=1))
    api.put(pytorchjob("b", queue="team-b", min_replicas=1, max_replicas=8, replicas=1, active=1))
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.fail_next("PATCH", r"/pytorchjobs/b$", 0, delay=30.0)  # b's write hangs
    async with fake_prometheus(live_body(**{"team-a": 2, "team-b": 2})) as prom:
        env = daemon_env(tmp_path, kubeconfig, prom.url)
        async with daemon_process(env) as first:
            await eventually(lambda: replicas(api, "a") == 3, 20, 0.02, "a's patch")
            await eventually(lambda: patches(api, "b") == 1, 5, 0.01, "b's patch in flight")
            first.process.kill()  # SIGKILL: no cleanup, no "stopped"
            assert await first.process.wait() == -signal.SIGKILL
            assert not first.events("stopped")
        assert replicas(api, "b") == 1  # the hanging write never landed
        job_a = api.get("pytorchjobs", "ml", "a")
        stamp = job_a["metadata"]["annotations"]["elastic-autoscaler.io/last-scale-time"]
        assert (
            abs(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - time.time()) < 60
        )
        # a's workers land; Prometheus (lagging) still shows team-a's 2 GPUs free
        set_active(api, "a", 3)
        prom.answers[:] = [Canned(live_body(**{"team-a": 2, "team-b": 2}))]
        a_resizes = resizes(api, "a")
        async with daemon_process(env) as second:
            cycle = await second.wait_for("cycle", 30)
            assert cycle["result"] == "ok", cycle
            held = second.events("decision", name="a")
            assert held and held[-1]["reason"] == "HoldCooldown", held
            assert resizes(api, "a") == a_resizes  # no second resize within the cooldown
            # its restart was measured (the workers all run) and kept on it
            notes = api.get("pytorchjobs", "ml", "a")["metadata"]["annotations"]
            assert notes["elastic-autoscaler.io/measured-restart-cost"].endswith("@" + stamp)
            assert replicas(api, "a") == 3
            assert replicas(api, "b") == 3  # b done, once
            assert [e["outcome"] for e in second.events("scale")] == ["applied"]
            # SIGTERM: the process finishes and says so, exit 0
            assert await second.stop(signal.SIGTERM) == 0
            assert second.events("stopped")
        assert_bounds(api)


async def test_sigterm_during_a_cycle_finishes_it_then_exits_zero(api, tmp_path):
    """A cycle that can end within the stop's grace (1 s) is finished; one that cannot is
    cancelled (tests/test_real_stop.py)."""
    api.put(pytorchjob("a", queue="team-a", min_replicas=1, max_replicas=8, replicas=1, active=1))
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    api.fail_next("PATCH", r"/pytorchjobs/a$", 0, delay=0.5)  # the cycle is mid-write
    async with fake_prometheus(live_body(**{"team-a": 2})) as prom:
        async with daemon_process(daemon_env(tmp_path, kubeconfig, prom.url)) as proc:
            await eventually(lambda: patches(api, "a") == 1, 20, 0.02, "the patch")
            assert await proc.stop(signal.SIGTERM) == 0
            assert replicas(api, "a") == 3  # the cycle under way was completed
            cycles = proc.events("cycle")
            assert len(cycles) == 1 and cycles[0]["result"] == "ok"
            stopped = proc.events("stopped")
            assert stopped and stopped[0]["cycles"] == 1


class PinnedFakeKubeApi(FakeKubeApi):
    """The fake API server on a socket bound before it starts: 'the API comes up later'.

    Bound but not listening, the port refuses connections (like a server that is down)
    and no other server of the test run can take it in the meantime."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._pinned = self._socket.getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._pinned}"

    async def start(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        await web.SockSite(self._runner, self._socket).start()
        self._port = self._pinned

    async def stop(self) -> None:
        await super().stop()
        self._socket.close()


async def test_api_unreachable_at_start_daemon_stays_alive_then_syncs(tmp_path):
    late = PinnedFakeKubeApi()
    try:
        kubeconfig = late.write_kubeconfig(tmp_path / "kubeconfig")
        async with fake_prometheus(live_body(**{"team-a": 2})) as prom:
            env = daemon_env(
                tmp_path,
                kubeconfig,
                prom.url,
                interval_seconds=0.5,
                min_interval_seconds=0,
                cycle_deadline_seconds=1,
            )
            async with daemon_process(env) as proc, aiohttp.ClientSession() as http:
                await proc.wait_for("listening")
                base = f"http://127.0.0.1:{proc.port}"
                held = await proc.wait_for("cycle", 20, result="hold")
                assert "Kubernetes caches not synced" in held["message"]
                async with http.get(f"{base}/healthz") as r:
                    assert r.status == 200
                async with http.get(f"{base}/readyz") as r:
                    assert r.status == 503 and "caches not current" in await r.text()
                async with http.get(f"{base}/metrics") as r:
                    text = await r.text()
                assert (
                    counter(
                        text,
                        "elastic_autoscaler_source_errors_total",
                        kind="not_synced",
                        source="kubernetes",
                    )
                    >= 1
                )
                assert counter(text, "elastic_autoscaler_writes_total", result="applied") == 0
                # the API comes up: the daemon syncs and plans without a restart
                late.put(
                    pytorchjob(
                        "a", queue="team-a", min_replicas=1, max_replicas=8, replicas=1, active=1
                    )
                )
                async with late:
                    try:
                        await eventually(lambda: replicas(late, "a") == 3, 30, 0.05, "the resize")
                    except AssertionError as exc:
                        raise AssertionError(f"{exc}\n" + "\n".join(proc.raw[-40:])) from None
                    await proc.wait_for("cycle", 10, result="ok")
                    async with http.get(f"{base}/readyz") as r:
                        assert r.status == 200
                    assert proc.process.returncode is None
                    assert await proc.stop() == 0
    finally:
        late._socket.close()  # also when the test fails before it starts


async def test_tokens_never_reach_logs_or_metrics(tmp_path):
    """A kube bearer token and a Prometheus bearer token file; Prometheus answers 401 and
    echoes the token it rejected, as some auth proxies do. Debug logs and /metrics must not
    contain either token."""

    kube_token = "kube-s3cret-token-0123456789abcdef"
    prom_token = "prom-s3cret-token-fedcba9876543210"
    token_file = tmp_path / "prom-token"
    token_file.write_text(prom_token + "\n")
    echo = {
        "status": "error",
        "errorType": "unauthorized",
        "error": f"invalid token: Bearer {prom_token}",
    }
    async with FakeKubeApi(token=kube_token) as api:
        api.put(
            pytorchjob("a", queue="team-a", min_replicas=1, max_replicas=8, replicas=1, active=1)
        )
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        # refused at the start-up check and at the first cycle, then answered
        async with fake_prometheus(
            Canned(echo, status=401), Canned(echo, status=401), Canned(live_body(**{"team-a": 2}))
        ) as prom:
            env = daemon_env(
                tmp_path,
                kubeconfig,
                prom.url,
                log_level="debug",
                prometheus_bearer_token_file=token_file,
                interval_seconds=0.5,
                min_interval_seconds=0,
            )
            async with daemon_process(env) as proc, aiohttp.ClientSession() as http:
                await proc.wait_for("cycle", 20, result="hold")
                await eventually(lambda: replicas(api, "a") == 3, 20, 0.05, "a resize")
                await proc.wait_for("cycle", 10, result="ok")
                async with http.get(f"http://127.0.0.1:{proc.port}/metrics") as r:
                    metrics = await r.text()
                assert await proc.stop() == 0
            assert prom.requests[0]["headers"]["Authorization"] == f"Bearer {prom_token}"
            assert all(r.authorization == f"Bearer {kube_token}" for r in api.requests if r.verb)
        logs = "\n".join(proc.raw)
        assert "HTTP 401" in logs  # the failure is reported...
        for secret in (kube_token, prom_token):
            assert secret not in logs  # ...without the secret
            assert secret not in metrics
        assert "***" in logs  # the echoed token was scrubbed, not just absent


async def test_kube_token_echoed_by_the_server_is_not_logged():
    token = "kube-s3cret-token-0123456789abcdef"
    echo = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": 403,
        "reason": "Forbidden",
        "message": f"token Bearer {token} may not patch",
    }
    async with FakeKubeApi(token=token) as api:
        one_job(api)
        async with fake_prometheus(ONE_QUEUE) as prom, Daemon(api, settings_for(prom.url)) as d:
            api.fail_next("PATCH", "pytorchjobs", 403, body=echo)
            api.fail_next("GET", "pytorchjobs", 401, watch=True, body={**echo, "code": 401})
            with capture_logs() as logs:
                api.close_watches("pytorchjobs")
                result = await d.controller.run_once(NOW)
                await eventually(lambda: any(e.get("event") == "kube.cache_error" for e in logs))
            assert [r.outcome for r in result.applied.results] == [Outcome.DENIED]
            assert "HTTP 403" in result.applied.results[0].message
            leaked = [e for e in logs if token in repr(e)]
            assert leaked == []
            assert token not in metrics_text(d)
            assert token not in repr(api.objects("events", "ml"))  # the refusal's Event
