"""The daemon end to end against servers that speak the real protocols: the fake API server
(real kubernetes_asyncio client) and a Prometheus HTTP API. Time is injected (`now`)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from datetime import timedelta

import pytest
import structlog
from builders import NOW, ej, podgroup, pytorchjob, snap
from fakekube import FakeKubeApi, eventually
from kubernetes_asyncio.client import ApiClient
from promserver import fake_prometheus, sample, vector_body

from autoscaler.act.dry_run import DryRunActuator
from autoscaler.act.results import Outcome
from autoscaler.core.model import ClusterSnapshot
from autoscaler.core.options import ServerOptions
from autoscaler.core.reasons import Reason
from autoscaler.report.metrics import Metrics
from autoscaler.run.daemon import wants_early_cycle
from autoscaler.run.driver import next_start
from autoscaler.run.loop import Controller
from autoscaler.run.wiring import Parts, build
from autoscaler.settings import Settings

LOCAL = ServerOptions(listen_host="127.0.0.1", listen_port=0)  # a free port, this host only

ANNOTATION = "elastic-autoscaler.io/last-scale-time"


def free_body(**free: float):
    # Volcano milli-units, as the default query's divisor expects
    return vector_body(*(sample(q, v * 1000, NOW.timestamp()) for q, v in free.items()))


def settings_for(prom_url: str, **kw) -> Settings:
    # the fake Prometheus answers free GPUs per queue, as one custom query would
    base = dict(
        prometheus_url=prom_url,
        free_gpus_query="elastic_autoscaler_test_free_gpus",
        leader_election=False,
        prometheus_retries=0,
        prometheus_timeout_seconds=2,
        max_metric_age_seconds=10**9,
        cycle_deadline_seconds=20,
        kube_request_timeout_seconds=5,
    )
    base.update(kw)
    return Settings(**base)


class Daemon:
    """The daemon's real parts, from the one builder `run` uses (autoscaler/run/wiring.py),
    started as `run` starts them (caches, elector, status writer, HTTP on a free port);
    the test runs the cycles (`controller.run_once(now)`) or the driver itself."""

    def __init__(
        self,
        api: FakeKubeApi,
        settings: Settings,
        *,
        dry_run: bool = False,
        may_write=None,
        clock=time.monotonic,
    ) -> None:
        if dry_run:
            settings = settings.model_copy(update={"dry_run": True})
        self.api, self.settings = api, settings
        self.client = ApiClient(api.configuration())
        self.parts = build(settings, self.client, server=LOCAL, out=None, clock=clock)
        self.kube, self.prometheus = self.parts.kube, self.parts.prometheus
        self.metrics, self.controller = self.parts.metrics, self.parts.controller
        self.driver, self.elector = self.parts.driver, self.parts.elector
        if may_write is not None:  # leadership as the test scripts it
            self.controller.may_write = may_write
        self._running: contextlib.AbstractAsyncContextManager[Parts] | None = None

    async def __aenter__(self) -> Daemon:
        self._running = self.parts.running()
        try:
            await self._running.__aenter__()
            await self.kube.wait_synced(5)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            if self._running is not None:
                await self._running.__aexit__(*exc)
        finally:
            self._running = None
            await self.client.close()

    async def leading(self, within: float = 10) -> None:
        """Until this daemon holds the Lease (at once without leader election)."""
        await eventually(lambda: self.elector.is_leader, within, message="leadership")

    def stop_electing(self) -> asyncio.Task:
        """Cancel this daemon's elector (it releases the Lease, as at shutdown)."""
        task = next(t for t in self.parts.tasks if t.get_name() == "leader-election")
        task.cancel()
        return task

    async def seen(self, kind: str, name: str, check=lambda o: True) -> None:
        """The cache holds `kind` `name` and `check` holds for what it decoded to (an
        ElasticJob or UnmanagedJob; a PodGroup's PendingGroup, InvalidGroup or None)."""

        def has() -> bool:
            objs = self.kube.objects()
            if kind == "PodGroup":
                found = [(g.ref, g.group) for g in objs.podgroups]
            else:
                found = [(r.job.ref, r.job) for r in objs.jobs]
            return any(ref.name == name and ref.kind == kind and check(o) for ref, o in found)

        await eventually(has, message=f"{kind} {name} in the cache")


def replicas(api: FakeKubeApi, name: str, ns: str = "ml") -> int:
    return api.get("pytorchjobs", ns, name)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]


def set_active(api: FakeKubeApi, name: str, active: int, ns: str = "ml") -> None:
    api.patch(
        "pytorchjobs", ns, name, {"status": {"replicaStatuses": {"Worker": {"active": active}}}}
    )


async def test_full_cycle_grows_reclaims_and_records_why(api):
    api.put(
        pytorchjob("small", queue="team-a", min_replicas=1, max_replicas=4, replicas=2, active=2)
    )
    api.put(
        pytorchjob("elastic", queue="team-b", min_replicas=2, max_replicas=8, replicas=6, active=6)
    )
    api.put(podgroup("newcomer", queue="team-b", gpus=3))
    async with (
        fake_prometheus(free_body(**{"team-a": 2, "team-b": 0})) as prom,
        Daemon(api, settings_for(prom.url)) as d,
    ):
        result = await d.controller.run_once(NOW)
        assert result.result == "ok"
        assert replicas(api, "small") == 4
        assert replicas(api, "elastic") == 3
        job = api.get("pytorchjobs", "ml", "small")
        assert job["metadata"]["annotations"][ANNOTATION] == "2026-11-22T10:00:00Z"
        patches = [r for r in api.writes("pytorchjobs")]
        assert {r.content_type for r in patches} == {"application/merge-patch+json"}
        assert all(r.body["metadata"]["resourceVersion"] for r in patches)
        events = api.objects("events", "ml")
        reasons = {(e["involvedObject"]["name"], e["reason"]) for e in events}
        assert reasons == {("small", "ScaleUpIdleGpus"), ("elastic", "ReclaimForPending")}
        assert prom.hits == 1
        text = _metrics_text(d.metrics)
        assert (
            'elastic_autoscaler_actions_total{direction="up",kind="PyTorchJob",queue="team-a",'
            'reason="ScaleUpIdleGpus"} 1.0' in text
        )
        assert 'elastic_autoscaler_queue_reclaimed_gpus{queue="team-b"} 3.0' in text


async def test_steady_cycle_makes_no_list_and_empty_plan_no_write(api):
    api.put(
        pytorchjob("full", queue="team-a", min_replicas=1, max_replicas=2, replicas=2, active=2)
    )
    async with (
        fake_prometheus(free_body(**{"team-a": 5})) as prom,
        Daemon(api, settings_for(prom.url)) as d,
    ):
        lists_before = api.count(verb="list")
        for i in range(3):
            result = await d.controller.run_once(NOW + timedelta(seconds=i))
            assert result.plan.decisions[0].reason is Reason.AT_MAX
            assert result.plan.actions == ()
        assert api.count(verb="list") == lists_before
        # no job and no Event written: only the status object (what the cycles decided)
        assert {w.plural for w in api.writes()} <= {"configmaps"}


async def test_cooldown_survives_a_daemon_restart(api):
    api.put(pytorchjob("j", queue="team-a", min_replicas=1, max_replicas=8, replicas=2, active=2))
    async with fake_prometheus(free_body(**{"team-a": 2})) as prom:
        # the flat cooldown: the measured restart (120 s, a cycle later) would lengthen it
        settings = settings_for(prom.url, cooldown_seconds=300, cooldown_restart_cost_factor=0)
        async with Daemon(api, settings) as first:
            await first.controller.run_once(NOW)
        assert replicas(api, "j") == 4
        set_active(api, "j", 4)  # the new workers landed; the queue still shows 2 free
        async with Daemon(api, settings) as second:  # a new process: no memory of the resize
            await second.seen("PyTorchJob", "j", lambda j: j.active == 4)
            held = await second.controller.run_once(NOW + timedelta(seconds=120))
            assert held.plan.decisions[0].reason is Reason.COOLDOWN
            assert replicas(api, "j") == 4
            grown = await second.controller.run_once(NOW + timedelta(seconds=301))
            assert grown.plan.decisions[0].reason is Reason.SCALE_UP_IDLE_GPUS
            assert replicas(api, "j") == 6


class RacingSource:
    """The live source, then another writer edits the job before our patch lands."""

    def __init__(self, inner, api: FakeKubeApi) -> None:
        self.inner, self.api, self.raced = inner, api, False

    async def read(self, now):
        snapshot = await self.inner.read(now)
        if not self.raced:
            self.raced = True
            self.api.patch("pytorchjobs", "ml", "j", {"metadata": {"labels": {"edited": "y"}}})
        return snapshot


async def test_concurrent_writer_causes_409_and_the_next_cycle_applies(api):
    api.put(pytorchjob("j", queue="team-a", min_replicas=1, max_replicas=8, replicas=2, active=2))
    async with (
        fake_prometheus(free_body(**{"team-a": 2})) as prom,
        Daemon(api, settings_for(prom.url)) as d,
    ):
        d.controller.source = RacingSource(d.controller.source, api)
        first = await d.controller.run_once(NOW)
        assert [r.outcome for r in first.applied.results] == [Outcome.CONFLICT]
        assert replicas(api, "j") == 2
        assert api.get("pytorchjobs", "ml", "j")["metadata"]["labels"]["edited"] == "y"
        # the cache holds the edited version (of its labels it keeps nothing: none is read)
        edited = api.get("pytorchjobs", "ml", "j")["metadata"]["resourceVersion"]
        await d.seen("PyTorchJob", "j", lambda j: j.resource_version == edited)
        second = await d.controller.run_once(NOW + timedelta(seconds=5))
        assert [r.outcome for r in second.applied.results] == [Outcome.APPLIED]
        assert replicas(api, "j") == 4
        assert api.get("pytorchjobs", "ml", "j")["metadata"]["labels"]["edited"] == "y"


async def test_watch_expiring_relists_and_the_cycle_sees_new_objects(api):
    api.put(pytorchjob("a", queue="team-a", replicas=2, active=2, max_replicas=2))
    async with (
        fake_prometheus(free_body(**{"team-a": 1})) as prom,
        Daemon(api, settings_for(prom.url)) as d,
    ):
        lists = api.count(verb="list")
        watches = api.count(plural="pytorchjobs", watch=True)
        # the job watch drops and its first retry fails; meanwhile history is compacted,
        # so resuming from the last resourceVersion gets 410 Gone
        api.fail_next("GET", "pytorchjobs", 500, watch=True)
        api.close_watches("pytorchjobs")
        await eventually(lambda: api.count(plural="pytorchjobs", watch=True) > watches)
        api.put(pytorchjob("b", queue="team-a", replicas=1, active=1, max_replicas=3))
        api.compact()
        await d.seen("PyTorchJob", "b")
        assert api.count(verb="list") > lists  # 410 Gone forced a relist
        result = await d.controller.run_once(NOW)
        assert {x.ref.name: x.target for x in result.plan.actions} == {"b": 2}


async def test_prometheus_down_holds_everything_and_writes_nothing(api):
    api.put(pytorchjob("j", queue="team-a", replicas=2, active=2))
    async with Daemon(api, settings_for("http://127.0.0.1:9")) as d:
        writes = len(api.writes())
        result = await d.controller.run_once(NOW)
        assert result.result == "hold"
        assert result.plan.decisions[0].reason is Reason.METRICS_UNAVAILABLE
        assert len(api.writes()) == writes
        assert (
            'elastic_autoscaler_source_errors_total{kind="connection",source="prometheus"}'
            in _metrics_text(d.metrics)
        )


async def test_dry_run_and_live_plan_write_nothing(api, capsys, tmp_path, monkeypatch):
    api.put(pytorchjob("j", queue="team-a", replicas=2, active=2, max_replicas=8))
    async with fake_prometheus(free_body(**{"team-a": 4})) as prom:
        async with Daemon(api, settings_for(prom.url), dry_run=True) as d:
            result = await d.controller.run_once(NOW)
            assert [r.outcome for r in result.applied.results] == [Outcome.DRY_RUN]
        # no job, no Event, no Lease: only the status object, which a dry run writes
        # too when no live daemon owns it (report/status/writer.py)
        assert {w.plural for w in api.writes()} <= {"configmaps"} and replicas(api, "j") == 2
        written = len(api.writes())
        # `plan` without --snapshot: one live cycle, printed, nothing written
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        monkeypatch.setenv("AUTOSCALER_KUBECONFIG", str(kubeconfig))
        monkeypatch.setenv("AUTOSCALER_PROMETHEUS_URL", prom.url)
        monkeypatch.setenv("AUTOSCALER_MAX_METRIC_AGE_SECONDS", str(10**9))
        monkeypatch.setenv("AUTOSCALER_FREE_GPUS_QUERY", "elastic_autoscaler_test_free_gpus")
        from autoscaler.cli import main

        code = await asyncio.to_thread(
            main, ["plan", "-o", "json", "--now", "2026-11-22T10:00:00Z"]
        )
        out = capsys.readouterr().out
        assert code == 0 and '"to": 6' in out
        assert len(api.writes()) == written


async def test_lost_leadership_stops_writes_mid_plan(api):
    for name in ("a", "b", "c"):
        api.put(pytorchjob(name, queue="team-a", replicas=1, active=1, max_replicas=2))
    leading = iter([True, False, False])
    async with (
        fake_prometheus(free_body(**{"team-a": 3})) as prom,
        Daemon(api, settings_for(prom.url), may_write=lambda: next(leading)) as d,
    ):
        result = await d.controller.run_once(NOW)
        outcomes = [r.outcome for r in result.applied.results]
        assert outcomes == [Outcome.APPLIED, Outcome.NOT_LEADER, Outcome.NOT_LEADER]
        assert len(api.writes("pytorchjobs")) == 1


async def test_leader_handover_between_two_daemons(api):
    api.put(pytorchjob("j", queue="team-a", replicas=1, active=1, max_replicas=8))
    async with fake_prometheus(free_body(**{"team-a": 1})) as prom:
        settings = settings_for(
            prom.url,
            leader_election=True,
            lease_namespace="ml",
            lease_duration_seconds=1.0,
            lease_renew_deadline_seconds=0.6,
            lease_retry_period_seconds=0.1,
        )
        async with contextlib.AsyncExitStack() as stack:
            daemons = [
                await stack.enter_async_context(
                    Daemon(api, settings.model_copy(update={"identity": ident}))
                )
                for ident in ("one", "two")
            ]
            electors = [d.elector for d in daemons]
            await eventually(lambda: any(e.is_leader for e in electors), 5)
            assert sum(e.is_leader for e in electors) == 1
            first = next(i for i, e in enumerate(electors) if e.is_leader)
            other = 1 - first
            assert daemons[other].driver.is_leader() is False
            # the follower does not plan or write; the leader does
            daemons[other].controller.follower_cycle(NOW)
            assert api.writes("pytorchjobs") == []
            await daemons[first].controller.run_once(NOW)
            assert replicas(api, "j") == 2
            stopped = daemons[first].stop_electing()  # the leader stops: it releases the Lease
            with contextlib.suppress(asyncio.CancelledError):
                await stopped
            assert not electors[first].is_leader
            await eventually(lambda: electors[other].is_leader, 5)
            set_active(api, "j", 2)
            api.patch(
                "pytorchjobs",
                "ml",
                "j",
                {"metadata": {"annotations": {ANNOTATION: "2026-11-22T09:00:00Z"}}},
            )
            await daemons[other].seen(
                "PyTorchJob",
                "j",
                lambda j: j.active == 2,
            )
            await daemons[other].controller.run_once(NOW)
            assert replicas(api, "j") == 3


async def test_driver_runs_early_cycles_and_stops_cleanly(api):
    api.put(pytorchjob("j", queue="team-a", replicas=2, active=2, max_replicas=2))
    async with (
        fake_prometheus(free_body(**{"team-a": 0})) as prom,
        Daemon(api, settings_for(prom.url, interval_seconds=3600, min_interval_seconds=0)) as d,
    ):
        driver = d.driver
        task = asyncio.create_task(driver.run())
        await eventually(lambda: driver.cycles == 1)
        driver.trigger()
        await eventually(lambda: driver.cycles == 2)
        assert driver.alive()[0] and driver.ready()[0]
        driver.stop()
        await asyncio.wait_for(task, 5)
        assert driver.cycles == 2


async def test_an_urgent_trigger_is_not_held_back(api):
    # a trigger waits min_interval_seconds (an hour here) after the last cycle's start;
    # an urgent one, even one that comes while another is held back, runs a cycle at once
    api.put(pytorchjob("j", queue="team-a", replicas=2, active=2, max_replicas=2))
    async with (
        fake_prometheus(free_body(**{"team-a": 0})) as prom,
        Daemon(api, settings_for(prom.url, interval_seconds=3600, min_interval_seconds=3600)) as d,
    ):
        driver = d.driver
        task = asyncio.create_task(driver.run())
        await eventually(lambda: driver.cycles == 1)
        driver.trigger()
        driver.trigger(urgent=True)
        await eventually(lambda: driver.cycles == 2)
        driver.stop()
        await asyncio.wait_for(task, 5)


async def test_a_gang_bound_beside_idle_gpus_calls_a_cycle_at_once(api):
    # team-a has 4 GPUs free; the first cycle serves pg's 1-GPU gang and grows j 1 -> 2,
    # leaving 2 idle. pg is then bound (Running): its job has started at the size it asked
    # for, and a cycle at once grows it while it starts, not min_interval_seconds later
    api.put(pytorchjob("j", queue="team-a", replicas=1, active=1, max_replicas=2))
    api.put(podgroup("pg", queue="team-a", gpus=1, phase="Pending"))
    async with (
        fake_prometheus(free_body(**{"team-a": 4})) as prom,
        Daemon(api, settings_for(prom.url, interval_seconds=3600, min_interval_seconds=3600)) as d,
    ):
        driver = d.driver
        task = asyncio.create_task(driver.run())
        await eventually(lambda: driver.cycles == 1)
        assert d.controller.idle_queues == {"team-a"}
        api.put(podgroup("pg", queue="team-a", gpus=1, phase="Running"))
        await eventually(lambda: driver.cycles == 2)
        driver.stop()
        await asyncio.wait_for(task, 5)


@pytest.mark.parametrize(
    ("events", "bound"),
    [
        # seen waiting, then Running: bound, once
        ([("ADDED", "Pending"), ("MODIFIED", "Running")], [None, "team-a"]),
        (
            [("ADDED", "Inqueue"), ("MODIFIED", "Running"), ("MODIFIED", "Running")],
            [None, "team-a", None],
        ),
        # never seen waiting (running when the daemon started): not a start it saw
        ([("ADDED", "Running")], [None]),
        # deleted while waiting: forgotten
        ([("ADDED", "Pending"), ("DELETED", "Pending"), ("ADDED", "Running")], [None, None, None]),
        # waiting, then done without running (e.g. its job deleted): no start
        ([("ADDED", "Pending"), ("MODIFIED", "Completed")], [None, None]),
    ],
)
def test_gang_starts_tells_a_gang_bound_after_it_waited(events, bound):
    from autoscaler.read.parse import decoders
    from autoscaler.run.triggers import GangStarts

    decode = decoders(Settings().read_options())["PodGroup"]
    starts = GangStarts()
    seen = [
        starts.bound(etype, decode(podgroup("pg", queue="team-a", phase=phase)))
        for etype, phase in events
    ]
    assert seen == bound


def test_next_start_debounces_triggers():
    s = Settings(interval_seconds=120, min_interval_seconds=15)
    assert next_start(100.0, 101.0, s.loop_options(), triggered=False) == 119.0
    assert next_start(100.0, 101.0, s.loop_options(), triggered=True) == 14.0
    assert next_start(100.0, 130.0, s.loop_options(), triggered=True) == 0.0


def _no_phase(obj):
    obj = copy.deepcopy(obj)
    del obj["status"]
    return obj


_UNSCHEDULABLE = [{"type": "Unschedulable", "status": "True"}]


@pytest.mark.parametrize(
    ("kind", "etype", "obj", "before", "early"),
    [
        ("PodGroup", "ADDED", podgroup(phase="Pending"), None, True),
        ("PodGroup", "ADDED", podgroup(phase="Inqueue"), None, True),
        ("PodGroup", "ADDED", podgroup(phase="Running"), None, False),
        ("PodGroup", "ADDED", _no_phase(podgroup()), None, False),
        # training-operator's gang: created with no phase, then Volcano writes one
        ("PodGroup", "MODIFIED", podgroup(phase="Inqueue"), _no_phase(podgroup()), True),
        ("PodGroup", "MODIFIED", podgroup(phase="Pending"), _no_phase(podgroup()), True),
        # resumed, evicted: waiting again from running
        ("PodGroup", "MODIFIED", podgroup(phase="Pending"), podgroup(phase="Running"), True),
        (
            "PodGroup",
            "MODIFIED",
            podgroup(phase="Unknown", conditions=_UNSCHEDULABLE),
            podgroup(phase="Running"),
            True,
        ),
        # waiting to waiting: the same demand, its early cycle already called
        ("PodGroup", "MODIFIED", podgroup(phase="Inqueue"), podgroup(phase="Pending"), False),
        ("PodGroup", "MODIFIED", podgroup(phase="Pending"), podgroup(phase="Pending"), False),
        ("PodGroup", "MODIFIED", podgroup(phase="Running"), podgroup(phase="Inqueue"), False),
        ("PodGroup", "DELETED", podgroup(phase="Pending"), podgroup(phase="Pending"), False),
        ("PyTorchJob", "DELETED", pytorchjob(), None, True),
        (
            "PyTorchJob",
            "MODIFIED",
            pytorchjob(conditions=[{"type": "Succeeded", "status": "True"}]),
            None,
            True,
        ),
        ("PyTorchJob", "MODIFIED", pytorchjob(), None, False),
        ("Queue", "MODIFIED", {}, None, False),
    ],
)
def test_which_watch_events_trigger_an_early_cycle(kind, etype, obj, before, early):
    from autoscaler.read.parse import decoders

    decode = decoders(Settings().read_options())[kind]
    record = decode(copy.deepcopy(obj))  # what the cache holds
    held = decode(copy.deepcopy(before)) if before is not None else None  # what it held
    assert wants_early_cycle(kind, etype, record, held) is early


def _metrics_text(metrics: Metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


async def test_http_endpoints_follow_the_loop(api):
    import aiohttp

    api.put(pytorchjob("j", queue="team-a", replicas=2, active=2, max_replicas=4))
    async with (
        fake_prometheus(free_body(**{"team-a": 2})) as prom,
        Daemon(api, settings_for(prom.url, interval_seconds=3600)) as d,
    ):
        # the daemon's own server, on the port it was given (a free one)
        base = f"http://127.0.0.1:{d.parts.server.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/readyz") as r:
                assert r.status == 503 and "no successful cycle" in await r.text()
            async with http.get(f"{base}/healthz") as r:
                assert r.status == 200
            await d.controller.run_once(NOW)
            async with http.get(f"{base}/readyz") as r:
                assert r.status == 200
            async with http.get(f"{base}/metrics") as r:
                text = await r.text()
            assert (
                'elastic_autoscaler_job_desired_replicas{kind="PyTorchJob",name="j",'
                'namespace="ml",queue="team-a"} 4.0' in text
            )
            assert 'elastic_autoscaler_cycles_total{result="ok"} 1.0' in text
            # a cycle that overran its deadline long ago: alive fails
            d.controller.health.last_cycle_start -= 10**6
            async with http.get(f"{base}/healthz") as r:
                assert r.status == 503 and "no cycle started" in await r.text()


async def test_caches_failing_too_long_hold_the_cycle_until_they_recover(api):
    api.put(pytorchjob("j", queue="team-a", replicas=2, active=2, max_replicas=4))
    async with (
        fake_prometheus(free_body(**{"team-a": 2})) as prom,
        Daemon(api, settings_for(prom.url, kube_max_stale_seconds=0.05)) as d,
    ):
        api.fail_next("GET", "pytorchjobs", 500, times=10**6)
        api.close_watches("pytorchjobs")
        await eventually(lambda: d.kube.objects().failing_seconds > 0.05)
        held = await d.controller.run_once(NOW)
        assert held.result == "hold" and held.plan.actions == ()
        assert held.plan.decisions[0].reason is Reason.METRICS_UNAVAILABLE
        assert "failing for" in held.plan.decisions[0].message
        assert api.writes("pytorchjobs") == []
        api.clear_faults()
        await eventually(lambda: d.kube.objects().failing_seconds == 0, within=40)
        ok = await d.controller.run_once(NOW)
        assert ok.result == "ok" and replicas(api, "j") == 4


async def test_oversized_objects_are_counted_as_source_errors(api):
    big = pytorchjob("big", queue="team-a")
    big["metadata"]["annotations"]["blob"] = "x" * 5000
    api.put(big)
    api.put(pytorchjob("small", queue="team-a", replicas=2, active=2, max_replicas=2))
    async with (
        fake_prometheus(free_body(**{"team-a": 0})) as prom,
        Daemon(api, settings_for(prom.url, max_object_bytes=4096)) as d,
    ):
        result = await d.controller.run_once(NOW)
        assert [x.ref.name for x in result.plan.decisions] == ["small"]
        await d.controller.run_once(NOW)  # counted once, not once a cycle
        assert (
            'elastic_autoscaler_source_errors_total{kind="oversized",source="kubernetes"}'
            " 1.0" in _metrics_text(d.metrics)
        )


class _Fixed:
    """A source that reads the same snapshot every cycle."""

    def __init__(self, snapshot) -> None:
        self.snapshot = snapshot

    async def read(self, now):
        return self.snapshot


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
async def test_decision_lines_at_info_only_when_new_and_every_line_at_debug(level) -> None:
    cap = structlog.testing.LogCapture()
    logger = structlog.wrap_logger(
        None,
        processors=[cap],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level)),
    ).bind()
    # grow: an action every cycle (dry run: nothing changes); held: at max, a steady hold
    cluster = snap({"q": 2}, jobs=[ej("grow", replicas=1, max=3), ej("held", replicas=4, max=4)])
    settings = Settings()
    controller = Controller(
        settings.loop_options(),
        settings.planner_policy(),
        _Fixed(cluster),
        DryRunActuator(),
        Metrics(),
        logger=logger,
    )

    def lines(levels: set[str]) -> list[tuple[str, str]]:
        return sorted(
            (e["name"], e["log_level"])
            for e in cap.entries
            if e["event"] == "decision" and e["log_level"] in levels
        )

    await controller.run_once(NOW)
    assert lines({"info"}) == [("grow", "info"), ("held", "info")]
    # each job's workers and the GPUs it holds, as plan and status count them
    sizes = {e["name"]: (e["current"], e["gpus"]) for e in cap.entries if e["event"] == "decision"}
    assert sizes == {"grow": (1, 1), "held": (4, 4)}
    cap.entries.clear()
    await controller.run_once(NOW)
    assert lines({"info"}) == [("grow", "info")]  # every action; the unchanged hold is not
    expected_debug = [("held", "debug")] if level == "DEBUG" else []
    assert lines({"debug"}) == expected_debug


async def test_a_steady_cycle_logs_what_changed_not_every_job() -> None:
    """The lines of a cycle grow with what changed: a job added among 50 steady holds
    (every later job's place in the plan moves, and every job is a new object, as when
    the caches re-read them) is the one line; the holds are not logged again."""
    cap = structlog.testing.LogCapture()
    logger = structlog.wrap_logger(
        None, processors=[cap], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
    ).bind()
    names = [f"job-{i:02d}" for i in range(0, 100, 2)]
    settings = Settings()

    def cluster(extra: list[str]) -> ClusterSnapshot:
        jobs = [ej(n, replicas=4, max=4) for n in sorted(names + extra)]
        return snap({"q": 0}, jobs=jobs)

    source = _Fixed(cluster([]))
    controller = Controller(
        settings.loop_options(),
        settings.planner_policy(),
        source,
        DryRunActuator(),
        Metrics(),
        logger=logger,
    )
    await controller.run_once(NOW)
    assert sum(e["event"] == "decision" for e in cap.entries) == 50
    cap.entries.clear()
    await controller.run_once(NOW)
    assert [e for e in cap.entries if e["event"] == "decision"] == []
    source.snapshot = cluster(["job-01"])  # a new job near the front
    await controller.run_once(NOW)
    assert [e["name"] for e in cap.entries if e["event"] == "decision"] == ["job-01"]


async def test_a_dry_run_logs_a_planned_resize_once_not_every_cycle() -> None:
    """A dry run writes nothing, so the next cycle plans the same resize: it is logged
    once, and again when its target moves; a live daemon logs an action that repeats
    (its write failed) every cycle."""
    cap = structlog.testing.LogCapture()
    logger = structlog.wrap_logger(
        None, processors=[cap], wrapper_class=structlog.make_filtering_bound_logger(logging.INFO)
    ).bind()
    source = _Fixed(snap({"q": 2}, jobs=[ej("grow", replicas=1, max=3)]))

    def decisions() -> list[tuple[str, int]]:
        found = [(e["name"], e["target"]) for e in cap.entries if e["event"] == "decision"]
        cap.entries.clear()
        return found

    for dry_run, again in ((True, []), (False, [("grow", 3)])):
        settings = Settings(dry_run=dry_run)
        controller = Controller(
            settings.loop_options(),
            settings.planner_policy(),
            source,
            DryRunActuator(),
            Metrics(),
            logger=logger,
        )
        await controller.run_once(NOW)
        assert decisions() == [("grow", 3)]
        await controller.run_once(NOW)
        assert decisions() == again
    source.snapshot = snap({"q": 1}, jobs=[ej("grow", replicas=1, max=3)])
    await controller.run_once(NOW)
    assert decisions() == [("grow", 2)]


async def test_build_info_and_every_counter_series_from_zero(api):
    """Before any cycle: which build runs, and each result/outcome/error series at 0, so
    rate() and alerts see the first increment."""
    async with fake_prometheus(free_body(**{"team-a": 3})) as prom:
        async with Daemon(api, settings_for(prom.url)) as d:
            text = _metrics_text(d.metrics)
    assert 'elastic_autoscaler_build_info{python="' in text
    for line in (
        'elastic_autoscaler_cycles_total{result="ok"} 0.0',
        'elastic_autoscaler_cycles_total{result="write_failed"} 0.0',
        'elastic_autoscaler_writes_total{result="applied"} 0.0',
        'elastic_autoscaler_writes_total{result="throttled"} 0.0',
        'elastic_autoscaler_source_errors_total{kind="connection",source="prometheus"} 0.0',
        'elastic_autoscaler_source_errors_total{kind="bad_query",source="prometheus"} 0.0',
        'elastic_autoscaler_source_errors_total{kind="stale",source="kubernetes"} 0.0',
        'elastic_autoscaler_status_writes_total{result="failed"} 0.0',
    ):
        assert line in text, line


async def test_runs_of_deleted_finished_jobs_still_weigh_swaps(api):
    """A cluster that deletes its finished jobs (ttlSecondsAfterFinished) keeps its run
    times for rule 3b: the daemon remembers the runs it saw finish (run_memory.py)."""
    for i in range(40):  # 40 runs of 2000 s: a newcomer ~4000 s at its 1 worker
        done = pytorchjob(f"done-{i}", conditions=[{"type": "Succeeded", "status": "True"}])
        done["status"]["startTime"] = "2026-11-21T08:00:00Z"
        done["status"]["completionTime"] = "2026-11-21T08:33:20Z"
        api.put(done)
    for i in range(4):  # 1-GPU jobs grown to 2, 300 s in: ~1700 s left each
        job = pytorchjob(f"a{i}", min_replicas=1, max_replicas=2, replicas=2, active=2)
        job["status"]["startTime"] = "2026-11-22T09:55:00Z"
        api.put(job)
    api.put(pytorchjob("w", min_replicas=1, max_replicas=2, replicas=1, active=0))
    api.put(podgroup("w-pg", gpus=1, owner="w"))

    def gang_w(result):
        return next(g for g in result.plan.gangs if g.ref.name == "w-pg")

    async with (
        fake_prometheus(free_body(**{"team-a": 0})) as prom,
        Daemon(api, settings_for(prom.url), dry_run=True) as d,
    ):
        listed = await d.controller.run_once(NOW)
        assert gang_w(listed).reason is Reason.GANG_RECLAIM_UNPAID, gang_w(listed).message
        for i in range(40):
            api.delete("pytorchjobs", "ml", f"done-{i}")
        await eventually(lambda: len(d.kube.objects().jobs) == 5, message="deletions seen")
        gone = await d.controller.run_once(NOW + timedelta(seconds=1))
        assert gang_w(gone).reason is Reason.GANG_RECLAIM_UNPAID, gang_w(gone).message
        assert "(40 finished, 4 running" in gang_w(gone).message
        assert gone.plan.actions == ()
