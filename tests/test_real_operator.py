"""PyTorchJobs and PaddleJobs resized end to end on the REAL training-operator.

The `kubeflow` fixture (conftest.py) gives the session's stack of one plugin: an API
server, Volcano's scheduler (`proportion`, then `capacity`), its controller-manager and
kwok as the kubelet of 6 nodes x 8 GPUs, a real Prometheus scraping Volcano every second,
and Kubeflow's own training-operator (tests/operatorkit.py, `--no-webhook`). A job here
is what a user applies: the operator makes its PodGroup, pods and Services and writes its
status, the scheduler binds the pods, kwok runs them; nothing of the job's status is
written by a test.

The daemon is wired as `run` wires it (test_loop.Daemon: autoscaler/run/wiring.py, its caches
watching the real server, its Prometheus source reading the real Prometheus with the
default series); the test runs its cycles with an injected clock, so cooldowns and
timeouts pass without sleeping. What is checked is what a platform team would check:
every worker asked for is bound and Running, the operator's status agrees, and a gang
that waits gets what it needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from conftest import PROPORTION_ONLY, RealKubeflow
from kubeserver import ApiError, EnvTest
from operatorkit import (
    HPAS,
    clean_kubeflow,
    describe_job,
    job_path,
    paddlejob_body,
    podgroup,
    pods_of,
    pytorchjob_body,
    replica_status,
    set_workers,
    until,
    view,
    wait_podgroup,
    wait_workers_running,
    worker_replicas,
)
from test_loop import Daemon
from test_real_volcano import LEASE_NAMESPACE, REPO, daemon_env
from volcanokit import apply_queue, delete_queue

from autoscaler.core.model import ElasticJob
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339
from autoscaler.report.status.doc import JobEntry, ResizeState
from autoscaler.report.status.view import explain_text
from autoscaler.run.loop import CycleResult
from autoscaler.settings import Settings

pytestmark = [pytest.mark.prometheus, pytest.mark.asyncio(loop_scope="module")]

MEASURED = "elastic-autoscaler.io/measured-restart-cost"
LAST_SCALE = "elastic-autoscaler.io/last-scale-time"


@dataclass
class Corner:
    """One test's corner of the shared cluster: its namespace and queues."""

    kf: RealKubeflow
    ns: str
    home: Path
    queues: list[str] = field(default_factory=list)
    clock: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def api(self) -> EnvTest:
        return self.kf.api

    def queue(self, suffix: str, **spec: Any) -> str:
        name = f"{self.ns}-{suffix}"
        apply_queue(self.api, name, **spec)
        self.queues.append(name)
        return name

    def job(self, body: dict[str, Any]) -> dict[str, Any]:
        self.api.create(body)
        return body

    def settings(self, **kw: Any) -> Settings:
        """Default settings but where things are; no cooldowns (a test resizes one job
        twice within seconds; its clock is injected anyway)."""
        base: dict[str, Any] = {
            "prometheus_url": self.kf.prometheus.url,
            "namespaces": [self.ns],
            "leader_election": False,
            "cooldown_seconds": 0,
            "cooldown_restart_cost_factor": 0,
            "reclaim_cooldown_seconds": 0,
            "kube_request_timeout_seconds": 5,
        }
        base.update(kw)
        return Settings(**base)

    @contextlib.asynccontextmanager
    async def daemon(self, **kw: Any) -> AsyncIterator[Daemon]:
        async with Daemon(self.api, self.settings(**kw)) as d:  # type: ignore[arg-type]
            yield d

    def tick(self, seconds: float = 1) -> datetime:
        """The injected clock, moved on: real time or later, never back."""
        self.clock = max(self.clock + timedelta(seconds=seconds), datetime.now(UTC))
        return self.clock

    def plan(self) -> dict[str, Any]:
        """`elastic-autoscaler plan -o json` against the live cluster (writes nothing)."""
        answer = subprocess.run(
            [sys.executable, "-m", "autoscaler", "plan", "-o", "json"],
            cwd=REPO,
            env=daemon_env(self.kf, self.ns, self.home),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert answer.returncode == 0, answer.stderr[-2000:]
        result: dict[str, Any] = json.loads(answer.stdout)
        return result


@pytest_asyncio.fixture(loop_scope="module")
async def corner(kubeflow: RealKubeflow, tmp_path: Path) -> AsyncIterator[Corner]:
    api = kubeflow.api
    with contextlib.suppress(Exception):  # where the status object lives
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}})
    corner = Corner(kubeflow, api.create_namespace("kf"), tmp_path)
    try:
        yield corner
    finally:
        clean_kubeflow(api, corner.ns)
        for queue in corner.queues:
            delete_queue(api, queue)


async def cycle(d: Daemon, now: datetime) -> CycleResult:
    result = await d.controller.run_once(now)
    assert result.result.value == "ok", result.message
    return result


def actions(result: CycleResult) -> list[tuple[str, int, int, Reason]]:
    assert result.plan is not None
    return [(a.ref.name, a.current, a.target, a.reason) for a in result.plan.actions]


def decision(result: CycleResult, name: str) -> Any:
    assert result.plan is not None
    return next(d for d in result.plan.decisions if d.ref.name == name)


def resize_state(d: Daemon, name: str) -> str | None:
    doc = d.controller.last_status
    assert doc is not None
    entry = next((j for j in doc.jobs if j.name == name), None)
    return entry.resize.state.value if entry and entry.resize else None


async def settled(corner: Corner, obj: dict[str, Any], workers: int, queue: str) -> None:
    """Until the job's workers run, its PodGroup is Running and Prometheus shows its queue
    with them allocated and nothing inqueue (the capacity plugin counts a gang twice until
    the scheduler writes its phase)."""
    name = obj["metadata"]["name"]
    await wait_workers_running(corner.api, obj, workers)
    await wait_podgroup(corner.api, corner.ns, name, "Running")
    await corner.kf.wait_scraped(queue, allocated=workers, inqueue=0)


async def cached(d: Daemon, obj: dict[str, Any], active: int) -> None:
    """Until the daemon's cache holds the job with the operator's `active`."""
    await d.seen(obj["kind"], obj["metadata"]["name"], lambda j: j.active == active)


# ---- grown into idle GPUs, shrunk for a waiting gang ---------------------------------------


@pytest.mark.timeout(120)
async def test_grown_into_idle_gpus_then_shrunk_for_a_waiting_pytorchjob_gang(
    corner: Corner,
) -> None:
    """An elastic PyTorchJob (elasticPolicy 2..8, minAvailable 2) in a queue of 8 GPUs:
    `plan` says 2 -> 8, `run` does exactly that, the operator adds workers 2..7 and the
    scheduler binds them all; the status object follows the operator (requested until its
    status counts 8 active, then running, then settled) and the restart cost is measured
    when replicaStatuses says so. A rigid PyTorchJob gang of 4 then waits (its PodGroup
    Pending or Inqueue, no pod bound): the daemon takes back 4 workers, the operator
    deletes the highest indices, and the gang's pods are created, bound and Running."""
    api = corner.api
    queue = corner.queue("q", capability_gpus=8)
    job = corner.job(
        pytorchjob_body(
            "elastic", corner.ns, queue=queue, workers=2, max_replicas=8, min_available=2
        )
    )
    await settled(corner, job, 2, queue)
    before = {p["metadata"]["uid"] for p in pods_of(api, corner.ns, "elastic")}

    planned = corner.plan()
    assert [(a["name"], a["from"], a["to"]) for a in planned["actions"]] == [("elastic", 2, 8)], (
        planned["jobs"]
    )

    async with corner.daemon() as d:
        await cached(d, job, 2)
        grown = await cycle(d, corner.tick())
        assert actions(grown) == [("elastic", 2, 8, Reason.SCALE_UP_IDLE_GPUS)]
        resized_at = corner.clock
        assert resize_state(d, "elastic") == ResizeState.REQUESTED
        assert worker_replicas(api, job) == 8

        pods = await wait_workers_running(api, job, 8)
        names = [p["metadata"]["name"] for p in pods]
        assert names == [f"elastic-worker-{i}" for i in range(8)]
        kept = {p["metadata"]["uid"] for p in pods} & before
        assert kept == before  # the running workers were not recreated
        assert (podgroup(api, corner.ns, "elastic") or {})["spec"]["minMember"] == 2

        await cached(d, job, 8)
        ran = await cycle(d, resized_at + timedelta(seconds=7))
        assert resize_state(d, "elastic") == ResizeState.RUNNING
        assert ran.plan is not None
        (measured,) = ran.plan.measurements
        # from the resize (its annotation, to the second) to the cycle that saw 8 active
        took = resized_at + timedelta(seconds=7) - measured.resized
        assert measured.seconds == pytest.approx(took.total_seconds())
        await until(
            "the measured restart cost on the job",
            lambda: (api.get(job)["metadata"].get("annotations") or {}).get(MEASURED),
        )
        await cycle(d, corner.tick())
        assert resize_state(d, "elastic") == ResizeState.SETTLED

        gang = corner.job(pytorchjob_body("gang", corner.ns, queue=queue, workers=4))
        # the queue is full: Volcano leaves the gang's PodGroup Pending (the operator then
        # makes no pods) or admits it Inqueue with its pods Unschedulable
        await until(
            "the gang waits",
            lambda: (
                (podgroup(api, corner.ns, "gang") or {}).get("status", {}).get("phase")
                in ("Pending", "Inqueue")
            ),
        )
        await d.seen("PodGroup", "gang", lambda g: g is not None)
        shrunk = await cycle(d, corner.tick())
        assert actions(shrunk) == [("elastic", 8, 4, Reason.RECLAIM_FOR_PENDING)]
        assert shrunk.plan is not None
        assert [(g.ref.name, g.reason) for g in shrunk.plan.gangs] == [
            ("gang", Reason.GANG_COVERED)
        ]
        pods = await wait_workers_running(api, job, 4)
        assert [p["metadata"]["name"] for p in pods] == [f"elastic-worker-{i}" for i in range(4)]
        await wait_workers_running(api, gang, 4)
        assert all(view(p).running for p in pods_of(api, corner.ns, "gang"))


# ---- what the operator does that we must not fight ------------------------------------------


def entry(d: Daemon, name: str) -> JobEntry:
    doc = d.controller.last_status
    assert doc is not None
    return next(j for j in doc.jobs if j.name == name)


def as_our_resize(api: EnvTest, obj: dict[str, Any], replicas: int, at: datetime) -> None:
    """The job resized to `replicas` with our last-scale annotation, as a daemon that
    planned on a reading the scheduler no longer agrees with would have written it."""
    specs = "pytorchReplicaSpecs" if obj["kind"] == "PyTorchJob" else "paddleReplicaSpecs"
    api.request(
        "PATCH",
        job_path(obj),
        {
            "metadata": {"annotations": {LAST_SCALE: rfc3339(at)}},
            "spec": {specs: {"Worker": {"replicas": replicas}}},
        },
        content_type="application/merge-patch+json",
    )


@PROPORTION_ONLY
@pytest.mark.timeout(90)
async def test_pkg_controller_v1_common_job_go_ReconcileJobs_without_min_available_stalls(
    corner: Corner,
) -> None:
    """Why a job without runPolicy.schedulingPolicy.minAvailable is never grown, on the
    real operator: its PodGroup's minMember is all replicas, so growing 2 -> 4 in a queue
    with room for 1 more raises the gang to 4; the operator creates both new pods anyway
    (the PodGroup was Running, not Pending) and Volcano binds neither (not even the one
    that fits), while the job's status still says 2 active. The daemon leaves such a job
    alone (HoldNoMinAvailable), and `explain` names its PodGroup as Unknown with its
    pods existing."""
    api = corner.api
    queue = corner.queue("q", capability_gpus=3)
    job = corner.job(pytorchjob_body("bare", corner.ns, queue=queue, workers=2, max_replicas=8))
    await settled(corner, job, 2, queue)
    assert (podgroup(api, corner.ns, "bare") or {})["spec"]["minMember"] == 2

    async with corner.daemon() as d:
        await cached(d, job, 2)
        held = await cycle(d, corner.tick())
        assert actions(held) == []
        assert decision(held, "bare").reason is Reason.NO_MIN_AVAILABLE

        set_workers(api, job, 4)  # what growing it would do
        group = await until(
            "its PodGroup Unknown, the gang unschedulable",
            lambda: (
                (g := podgroup(api, corner.ns, "bare"))
                and g["status"].get("phase") == "Unknown"
                and any(c.get("type") == "Unschedulable" for c in g["status"].get("conditions", []))
                and g
            ),
            describe=lambda: describe_job(api, corner.ns, "bare"),
        )
        assert group["spec"]["minMember"] == 4
        pods = [view(p) for p in pods_of(api, corner.ns, "bare", "worker")]
        assert [(p.name, p.running) for p in pods] == [
            ("bare-worker-0", True),
            ("bare-worker-1", True),
            ("bare-worker-2", False),  # 1 GPU of the queue is free: still not bound
            ("bare-worker-3", False),
        ], describe_job(api, corner.ns, "bare")
        assert replica_status(api, job)["active"] == 2  # nothing in its status says so

        await d.seen("PodGroup", "bare", lambda g: g is not None and g.phase == "Unknown")
        stalled = await cycle(d, corner.tick())
        assert actions(stalled) == []
        said = entry(d, "bare")
        assert said.reason == Reason.OWN_GANG_WAITING.value
        text = explain_text(d.controller.last_status, said)  # type: ignore[arg-type]
        assert f"its own PodGroup {corner.ns}/bare is Unknown" in text, text
        assert "its pods exist but Volcano has not placed the whole gang" in text, text

    set_workers(api, job, 2)  # shrunk back, the gang follows and Volcano runs it again
    await wait_workers_running(api, job, 2)
    group = await wait_podgroup(api, corner.ns, "bare", "Running")
    assert group["spec"]["minMember"] == 2


@pytest.mark.timeout(90)
async def test_a_job_grown_past_what_its_queue_binds_is_trimmed_to_what_runs(
    corner: Corner,
) -> None:
    """With minAvailable the PodGroup stays Running when a job is grown past its queue:
    the extra pods stay Pending (Unschedulable) and the rest run. After
    unplaced_timeout_seconds (5 here, the clock injected) the daemon gives them back
    (TrimUnplaced), the operator deletes the highest indices, and nothing is left
    Pending."""
    api = corner.api
    queue = corner.queue("q", capability_gpus=4)
    job = corner.job(
        pytorchjob_body("over", corner.ns, queue=queue, workers=2, max_replicas=8, min_available=2)
    )
    await settled(corner, job, 2, queue)
    resized = corner.tick()
    as_our_resize(api, job, 6, resized)

    def two_pending() -> bool:
        pods = [view(p) for p in pods_of(api, corner.ns, "over", "worker")]
        return (
            len(pods) == 6
            and sum(p.running for p in pods) == 4
            and all(p.unschedulable for p in pods if not p.running)
        )

    await until(
        "4 running, 2 Unschedulable",
        two_pending,
        describe=lambda: describe_job(api, corner.ns, "over"),
    )
    assert (podgroup(api, corner.ns, "over") or {})["status"]["phase"] == "Running"

    async with corner.daemon(unplaced_timeout_seconds=5) as d:
        await cached(d, job, 4)
        early = await cycle(d, resized + timedelta(seconds=4))
        assert actions(early) == [] and decision(early, "over").reason is Reason.IN_FLIGHT
        late = await cycle(d, resized + timedelta(seconds=6))
        assert actions(late) == [("over", 6, 4, Reason.TRIM_UNPLACED)]
        pods = await wait_workers_running(api, job, 4)
        assert [p["metadata"]["name"] for p in pods] == [f"over-worker-{i}" for i in range(4)]


@PROPORTION_ONLY
@pytest.mark.timeout(90)
async def test_a_job_whose_operator_status_lags_is_not_mistaken_for_stalled(
    corner: Corner,
) -> None:
    """The operator writes replicaStatuses.Worker.active pod by pod, seconds late when it
    is busy, not at all while it is down. Here it is frozen (SIGSTOP) once it made the
    pods of a resize 2 -> 6, with the scheduler frozen too until then: the 4 new pods are
    bound and Running while the status says 2. Past unplaced_timeout_seconds the daemon
    does not trim them (they are bound: the pod watch says so); once the operator wakes,
    its status catches up."""
    api, kit, operator = corner.api, corner.kf.kit, corner.kf.operator
    assert operator is not None
    queue = corner.queue("q", capability_gpus=8)
    job = corner.job(
        pytorchjob_body("lag", corner.ns, queue=queue, workers=2, max_replicas=8, min_available=2)
    )
    await settled(corner, job, 2, queue)
    scheduler = int(kit.env["VC_SCHEDULER_PID"])
    frozen = int(operator.env["TRAINING_OPERATOR_PID"])
    resized = corner.tick()
    try:
        os.kill(scheduler, signal.SIGSTOP)
        as_our_resize(api, job, 6, resized)
        await until(
            "6 worker pods made", lambda: len(pods_of(api, corner.ns, "lag", "worker")) == 6
        )
        os.kill(frozen, signal.SIGSTOP)
        os.kill(scheduler, signal.SIGCONT)
        await until(
            "6 workers bound and Running",
            lambda: all(view(p).running for p in pods_of(api, corner.ns, "lag", "worker")),
            describe=lambda: describe_job(api, corner.ns, "lag"),
        )
        assert replica_status(api, job)["active"] == 2  # the status lags behind its pods

        await corner.kf.wait_scraped(queue, allocated=6)
        async with corner.daemon(unplaced_timeout_seconds=5) as d:
            owner = (corner.ns, "PyTorchJob", "lag", "worker")
            await until(
                "the 6 bound workers in the pod cache",
                lambda: (
                    sum(bool(p.node) for p in d.kube.objects().records.pods if p.owner == owner)
                    == 6
                ),
                describe=lambda: str(
                    [p for p in d.kube.objects().records.pods if p.owner and p.owner[2] == "lag"]
                ),
            )
            late = await cycle(d, resized + timedelta(seconds=30))
            assert actions(late) == [], decision(late, "lag")
            assert decision(late, "lag").reason is Reason.IN_FLIGHT
    finally:
        os.kill(scheduler, signal.SIGCONT)
        os.kill(frozen, signal.SIGCONT)
    await wait_workers_running(api, job, 6)


@PROPORTION_ONLY
@pytest.mark.timeout(90)
async def test_pkg_controller_v1_pytorch_hpa_go_ReconcileHPA_leaves_its_hpa_when_metrics_go(
    corner: Corner,
) -> None:
    """elasticPolicy.metrics makes the operator create an HPA (SkipOperatorHpa while it is
    set); removing metrics leaves that HPA behind (ReconcileHPA returns early), and the
    job stays alone, the HPA named, until the HPA is deleted: then it grows."""
    api = corner.api
    queue = corner.queue("q", capability_gpus=4)
    job = corner.job(
        pytorchjob_body(
            "scaled",
            corner.ns,
            queue=queue,
            workers=1,
            max_replicas=3,
            min_available=1,
            metrics=True,
        )
    )
    hpa_path = HPAS.format(ns=corner.ns) + "/scaled"
    hpa = await until("the operator's HPA", lambda: _get(api, hpa_path))
    await settled(corner, job, 1, queue)
    async with corner.daemon() as d:
        await d.seen("PyTorchJob", "scaled")
        scaled = await cycle(d, corner.tick())
        assert actions(scaled) == []
        said = decision(scaled, "scaled")
        assert said.reason is Reason.OPERATOR_HPA
        assert "spec.elasticPolicy.metrics is set" in said.message

        api.request(
            "PATCH",
            job_path(job),
            [{"op": "remove", "path": "/spec/elasticPolicy/metrics"}],
            content_type="application/json-patch+json",
        )
        await d.seen("PyTorchJob", "scaled", lambda j: isinstance(j, ElasticJob))
        left = await cycle(d, corner.tick())
        assert actions(left) == []
        said = decision(left, "scaled")
        assert said.reason is Reason.OPERATOR_HPA
        assert f"HorizontalPodAutoscaler {corner.ns}/scaled" in said.message
        kept = _get(api, hpa_path)
        assert kept and kept["metadata"]["uid"] == hpa["metadata"]["uid"]  # left behind

        api.request("DELETE", hpa_path)
        await until("the HPA gone from the cache", lambda: not d.kube.objects().hpas)
        grown = await cycle(d, corner.tick())
        assert actions(grown) == [("scaled", 1, 3, Reason.SCALE_UP_IDLE_GPUS)]
    await wait_workers_running(api, job, 3)


@PROPORTION_ONLY
@pytest.mark.timeout(90)
async def test_pkg_controller_v1_paddlepaddle_envvar_go_setPodEnv_a_paddlejob_needs_the_opt_in(
    corner: Corner,
) -> None:
    """Two PaddleJobs with elasticPolicy: the one without our opt-in is left alone
    (NotElastic); the one with it is grown 1 -> 3 and its new workers run. Their
    PADDLE_NNODES show why the opt-in is the job's to give: the operator writes the
    total replicas when a pod is created, so the first worker says 1, the new ones 3."""
    api = corner.api
    queue = corner.queue("q", capability_gpus=6)
    plain = corner.job(
        paddlejob_body(
            "plain",
            corner.ns,
            queue=queue,
            workers=1,
            max_replicas=3,
            min_available=1,
            opt_in=False,
        )
    )
    opted = corner.job(
        paddlejob_body(
            "opted", corner.ns, queue=queue, workers=1, max_replicas=3, min_available=1, opt_in=True
        )
    )
    for obj in (plain, opted):
        await wait_workers_running(api, obj, 1)
        await wait_podgroup(api, corner.ns, obj["metadata"]["name"], "Running")
    # paddlepaddle_controller.go Reconcile makes no HPA, elasticPolicy.metrics or not
    assert api.request("GET", HPAS.format(ns=corner.ns))["items"] == []
    await corner.kf.wait_scraped(queue, allocated=2, inqueue=0)

    async with corner.daemon() as d:
        await cached(d, opted, 1)
        await d.seen("PaddleJob", "plain", lambda j: True)
        grown = await cycle(d, corner.tick())
    assert actions(grown) == [("opted", 1, 3, Reason.SCALE_UP_IDLE_GPUS)]
    assert decision(grown, "plain").reason is Reason.NOT_ELASTIC
    pods = await wait_workers_running(api, opted, 3)
    nnodes = [_env(p, "PADDLE_NNODES") for p in pods]
    assert nnodes == ["1", "3", "3"]
    assert worker_replicas(api, plain) == 1


def _get(api: EnvTest, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = api.request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def _env(pod: dict[str, Any], name: str) -> str | None:
    for var in pod["spec"]["containers"][0].get("env") or []:
        if var.get("name") == name:
            return str(var.get("value"))
    return None


# ---- the seed's own job, as its user wrote it ---------------------------------------------

SEED = Path(__file__).parent / "data" / "seed-pytorchjob.yaml"
VENDOR = "baidu.com/a800_80g_cgpu"
RDMA = "rdma/hca"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


def made_elastic(seed: dict[str, Any]) -> dict[str, Any]:
    """The seed's PyTorchJob made elastic the way README says: elasticPolicy (3..8
    Workers, c10d) and runPolicy.schedulingPolicy.minAvailable 4 (the 3 Workers of its
    minimum plus the Master); nothing else changed."""
    job = copy.deepcopy(seed)
    job["spec"]["elasticPolicy"] = {"minReplicas": 3, "maxReplicas": 8, "rdzvBackend": "c10d"}
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 4}}
    return job


def offer_vendor_gpus(api: EnvTest) -> None:
    """Every node offers 8 GPUs under the vendor's name and RDMA devices, as their device
    plugins would advertise them (written into the status, as a kubelet would)."""
    for node in api.request("GET", "/api/v1/nodes")["items"]:
        extra = {VENDOR: "8", RDMA: "1000"}
        status = {
            "capacity": {**node["status"]["capacity"], **extra},
            "allocatable": {**node["status"]["allocatable"], **extra},
        }
        api.request(
            "PATCH",
            f"/api/v1/nodes/{node['metadata']['name']}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )


def bound_claim(api: EnvTest, namespace: str, claim: str) -> None:
    """The seed's PersistentVolumeClaim and a volume bound to it, bound by hand as the
    PV controller would (there is no controller-manager here): the claim names the
    volume and says the binding is complete, the volume's claimRef names the claim."""
    pvs = "/api/v1/persistentvolumes"
    pvcs = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
    volume = f"{namespace}-{claim}"
    done = {"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
    made = api.request(
        "POST",
        pvcs,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": namespace, "annotations": done},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "1Ti"}},
                "volumeName": volume,
                "storageClassName": "",
            },
        },
    )
    ref = {"namespace": namespace, "name": claim, "uid": made["metadata"]["uid"]}
    api.request(
        "POST",
        pvs,
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": volume,
                "annotations": {"pv.kubernetes.io/bound-by-controller": "yes"},
            },
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": "/mnt/models"},
                "claimRef": ref,
                "storageClassName": "",
            },
        },
    )
    claimed = {"phase": "Bound", "accessModes": ["ReadWriteMany"], "capacity": {"storage": "1Ti"}}
    for path, status in ((f"{pvs}/{volume}", {"phase": "Bound"}), (f"{pvcs}/{claim}", claimed)):
        api.request(
            "PATCH",
            f"{path}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )


async def vendor_scraped(kf: RealKubeflow, queue: str, allocated: int) -> None:
    """Until Prometheus shows `queue` with `allocated` vendor GPUs allocated and none
    inqueue (the capacity plugin counts a gang in both until the scheduler has written
    its PodGroup Running; a daemon started then rightly sees that much less room)."""

    async def seen(part: str) -> float:
        body = await kf.prometheus.query(
            f'volcano_queue_{part}_scalar_resources{{queue_name="{queue}",resource="{VENDOR}"}}'
        )
        result = body["data"]["result"]
        return float(result[0]["value"][1]) / 1000 if result else 0.0

    deadline = datetime.now(UTC) + timedelta(seconds=30)
    while (got := (await seen("allocated"), await seen("inqueue"))) != (allocated, 0):
        assert datetime.now(UTC) < deadline, f"Prometheus shows {VENDOR} (allocated, inqueue) {got}"
        await asyncio.sleep(0.2)


def rigid_gang(namespace: str) -> dict[str, Any]:
    """A rigid PyTorchJob (no elasticPolicy) of 2 Workers x 8 vendor GPUs, its queue named
    only in the annotation, as the seed names its own."""
    body = pytorchjob_body("rigid", namespace, queue="default", workers=2)
    del body["spec"]["runPolicy"]
    body["metadata"]["annotations"] = {QUEUE_ANNOTATION: "s1-q"}
    worker = body["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {VENDOR: "8"},
        "limits": {VENDOR: "8"},
    }
    return body


@pytest.mark.timeout(150)
async def test_the_seeds_pytorchjob_made_elastic_is_grown_one_worker_per_node_and_shrunk(
    kubeflow: RealKubeflow, tmp_path: Path
) -> None:
    """The project's seed manifest as its user wrote it (Master 1 + Worker 3, hostNetwork,
    `limits` only under a vendor GPU name and rdma/hca, the queue in the annotation), made
    elastic as README says, on 6 nodes offering 8 such GPUs each, the daemon told only
    gpu_resource_names. training-operator puts it in queue `default` (the annotation says
    so too here), and so does the daemon. Its workers share the operator's port 23456 on
    the host network, so one fits per node and the Master takes a node: it grows 3 -> 5,
    not into the 8 GPUs idle beside the Master, every pod bound. A rigid gang of 2 x 8
    GPUs then waits (its queue only in the annotation, s1-q: warned that it runs in
    default): one worker is given back and the gang runs beside the Master."""
    api, ns = kubeflow.api, "ai-namespace"
    seed = yaml.safe_load(SEED.read_text())
    job = made_elastic(seed)
    assert {k: v for k, v in job["spec"].items() if k not in ("elasticPolicy", "runPolicy")} == (
        seed["spec"]
    )
    offer_vendor_gpus(api)
    with contextlib.suppress(ApiError):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    bound_claim(api, ns, "cloud-ai-test-pvc-1")
    corner = Corner(kubeflow, ns, tmp_path)
    try:
        api.create(job)
        await wait_workers_running(api, job, 3, master=1)
        group = await wait_podgroup(api, ns, "pytorch-multinode-job", "Running")
        assert group["spec"]["queue"] == "default"
        assert group["spec"]["minMember"] == 4  # the Master counted in the gang
        await vendor_scraped(kubeflow, "default", 24)

        async with corner.daemon(gpu_resource_names=[VENDOR]) as d:
            await cached(d, job, 3)
            grown = await cycle(d, corner.tick())
            assert actions(grown) == [("pytorch-multinode-job", 3, 5, Reason.SCALE_UP_IDLE_GPUS)], (
                decision(grown, "pytorch-multinode-job")
            )
            assert decision(grown, "pytorch-multinode-job").queue == "default"
            workers = await wait_workers_running(api, job, 5, master=1)
            masters = pods_of(api, ns, "pytorch-multinode-job", "master")
            nodes = [p["spec"]["nodeName"] for p in workers + masters]
            assert len(set(nodes)) == 6, nodes  # one pod per node: the host port
            await vendor_scraped(kubeflow, "default", 40)
            await cached(d, job, 5)

            rigid = corner.job(rigid_gang(ns))
            await until(
                "the rigid gang waits",
                lambda: (
                    (podgroup(api, ns, "rigid") or {}).get("status", {}).get("phase")
                    in ("Pending", "Inqueue")
                ),
            )
            await d.seen("PodGroup", "rigid", lambda g: g is not None)
            shrunk = await cycle(d, corner.tick())
            assert actions(shrunk) == [
                ("pytorch-multinode-job", 5, 4, Reason.RECLAIM_FOR_PENDING)
            ], (decision(shrunk, "pytorch-multinode-job"), shrunk.plan and shrunk.plan.gangs)
            warned = decision(shrunk, "rigid")
            assert warned.queue == "default"
            (warning,) = warned.warnings
            assert f"annotation {QUEUE_ANNOTATION}=s1-q is not its queue" in warning
            assert "set spec.runPolicy.schedulingPolicy.queue: s1-q" in warning
            assert warning in entry(d, "rigid").notes  # the status object says it too
            await wait_workers_running(api, job, 4, master=1)
            await wait_workers_running(api, rigid, 2)
            await until(
                "the warning as an Event on the job",
                lambda: [
                    e
                    for e in api.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
                    if e["reason"] == "QueueAnnotationIgnored"
                    and e["involvedObject"]["name"] == "rigid"
                ],
            )
    finally:
        clean_kubeflow(api, ns)
        for path in (
            f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
            "/api/v1/persistentvolumes",
        ):
            with contextlib.suppress(ApiError):
                api.request("DELETE", path)
