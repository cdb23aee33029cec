"""Volcano Jobs resized as Volcano's real controller and admission webhook take them.

The real kit (`$VOLCANO_KIT`: the session's `proportion` stack of conftest.py, its
vc-scheduler, vc-controller-manager and kwok GPU nodes beside the real API server) plus
its admission webhook (the kit's webhook-start.sh, for this module only) turn the Job
into a PodGroup and pods, default and validate it on create and on every patch we send.
The daemon is wired as `run` wires it; only the free-GPU number comes from a canned
Prometheus answer (what it says is not what these tests are about;
tests/test_real_volcano.py is).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import PROPORTION_ONLY, VolcanoCluster
from kubeserver import ApiError, EnvTest
from promserver import fake_prometheus
from test_loop import Daemon, free_body, settings_for
from volcanokit import (
    KIT_ENV,
    VolcanoKit,
    clean_namespace,
    delete_queue,
    kit_problem,
    start_retrying,
)

from autoscaler.core.model import ElasticJob
from autoscaler.core.reasons import Reason
from autoscaler.read.parse import Priorities, parse_job
from autoscaler.settings import Settings

GPU = "nvidia.com/gpu"
MAX = "elastic-autoscaler.io/max-replicas"
WEBHOOK = ("webhook-start.sh", "webhook-stop.sh", "bin/vc-webhook-manager")


def _kit_problem() -> str | None:
    problem = kit_problem()
    if problem:
        return problem
    folder = Path(os.environ[KIT_ENV])
    for name in WEBHOOK:
        if not os.access(folder / name, os.X_OK):
            return f"{KIT_ENV}={folder} has no executable {name} (the admission webhook)"
    if shutil.which("openssl") is None:
        return "the kit's webhook-start.sh needs openssl on PATH"
    return None


pytestmark = [
    pytest.mark.skipif(_kit_problem() is not None, reason=str(_kit_problem())),
    PROPORTION_ONLY,
]


def _run(script: Path, *args: str, timeout: float = 180) -> None:
    done = subprocess.run(
        [str(script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script.name} failed ({done.returncode}): {done.stderr[-2000:]}")


def _start_webhook(folder: Path, kit: VolcanoKit) -> None:
    """The kit's webhook-start.sh (two ports picked: `volcanokit.start_retrying`); on a
    failure the script has stopped what it started."""
    log = kit.state / "vc-webhook-manager.log"
    start_retrying(
        "vc-webhook-manager",
        lambda: subprocess.run(
            [
                str(folder / "webhook-start.sh"),
                str(kit.api.kubeconfig(name="volcano")),
                str(kit.state),
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        ),
        lambda: log.read_text(errors="replace")[-2000:] if log.exists() else "",
        lambda: None,
    )


@pytest.fixture(scope="module")
def kit(volcano_cluster: VolcanoCluster) -> Iterator[VolcanoKit]:
    """The session's `proportion` stack (conftest.py), its nodes 4 x 4 GPUs, no
    training-operator, and for this module the kit's admission webhook, which the kit's
    own webhook-stop.sh unregisters and stops (by recorded PID) when the module is done."""
    folder = Path(os.environ[KIT_ENV])
    volcano_cluster.stop_operator()
    kit = volcano_cluster.kit
    kit.shape_nodes(4, gpus_per_node=4)
    _start_webhook(folder, kit)
    try:
        yield kit
    finally:
        _run(folder / "webhook-stop.sh", str(kit.state), timeout=60)


@pytest.fixture
def ns(kit: VolcanoKit) -> Iterator[str]:
    """A fresh namespace and its queue `<ns>-q` (the test makes it), emptied and deleted
    afterwards: the next tests on the shared cluster find every GPU free."""
    namespace = kit.api.create_namespace("vc")
    try:
        yield namespace
    finally:
        clean_namespace(kit.api, namespace)
        delete_queue(kit.api, f"{namespace}-q")


# ---- helpers ---------------------------------------------------------------------------


def _vcjob(
    name: str,
    ns: str,
    queue: str,
    replicas: int,
    *,
    max_replicas: int | None = None,
    min_available: int | None = None,
    task_min: int | None = None,
) -> dict[str, Any]:
    """One task `worker` of 1-GPU pods; no minAvailable unless given (the webhook then
    defaults both)."""
    resources = {GPU: "1", "cpu": "1"}
    task: dict[str, Any] = {
        "name": "worker",
        "replicas": replicas,
        "template": {
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [
                    {
                        "name": "train",
                        "image": "example.com/train:1",
                        "resources": {"requests": resources, "limits": resources},
                    }
                ],
            }
        },
    }
    if task_min is not None:
        task["minAvailable"] = task_min
    spec: dict[str, Any] = {"schedulerName": "volcano", "queue": queue, "tasks": [task]}
    if min_available is not None:
        spec["minAvailable"] = min_available
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if max_replicas is not None:
        meta["annotations"] = {MAX: str(max_replicas)}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": meta,
        "spec": spec,
    }


def _running(job: dict[str, Any]) -> int:
    counts = job.get("status", {}).get("taskStatusCount", {}).get("worker", {})
    return int(counts.get("phase", {}).get("Running", 0))


def _phase(obj: dict[str, Any]) -> str:
    """A Volcano Job's status.state.phase (a Queue's status.state is a string: "")."""
    state = obj.get("status", {}).get("state")
    return str(state.get("phase", "")) if isinstance(state, dict) else ""


async def _until(
    api: EnvTest, job: dict[str, Any], what: str, ok: Any, seconds: float = 60
) -> tuple[dict[str, Any], list[str]]:
    """Poll the real server until `ok(job)`; the job and every phase seen on the way."""
    phases: list[str] = []
    deadline = time.monotonic() + seconds
    while True:
        live = api.get(job)
        if not phases or phases[-1] != _phase(live):
            phases.append(_phase(live))
        if ok(live):
            return live, phases
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what}: not within {seconds:.0f}s; last status {live.get('status')}"
            )
        await asyncio.sleep(0.3)


def _parsed(live: dict[str, Any]) -> ElasticJob:
    job = parse_job(live, Settings().read_options(), Priorities({}))
    assert isinstance(job, ElasticJob), job
    return job


def _settings(prom_url: str, ns: str) -> Settings:
    # no cooldown: these tests resize one job twice within seconds
    return settings_for(
        prom_url,
        namespaces=[ns],
        cooldown_seconds=0,
        cooldown_restart_cost_factor=0,
        reclaim_cooldown_seconds=0,
    )


# ---- the tests ------------------------------------------------------------------------------


@pytest.mark.timeout(240)
async def test_a_volcano_job_created_without_min_available_grows_and_shrinks_as_the_webhook_allows(
    kit: VolcanoKit, ns: str
) -> None:
    api = kit.api
    queue = f"{ns}-q"
    api.apply_queue(queue, capability={GPU: "8"})
    await _until(api, _queue(queue), "queue open", _queue_open)
    job = api.create(_vcjob("train", ns, queue, 2, max_replicas=6))

    # what the webhook leaves on the object: task minAvailable = replicas, gang = their sum
    assert job["spec"]["minAvailable"] == 2
    assert job["spec"]["tasks"][0]["minAvailable"] == 2
    live, _ = await _until(api, job, "2 workers running", lambda j: _running(j) == 2)
    group = await _podgroup_when_made(api, ns, "train")
    await _until(api, group, "its PodGroup Running", _group_running)
    parsed = _parsed(live)
    assert (parsed.min_replicas, parsed.max_replicas, parsed.replicas) == (2, 6, 2)

    # grow: 2 -> 6 into idle GPUs; the webhook admits the JSON patch, the controller
    # creates the pods, the scheduler binds them, and the Job never leaves Running
    async with (
        fake_prometheus(free_body(**{queue: 4})) as prom,
        Daemon(api, _settings(prom.url, ns)) as d,  # type: ignore[arg-type]
    ):
        await d.seen("Job", "train")
        grown = await d.controller.run_once(_now())
    assert grown.result == "ok", grown.message
    assert [(a.ref.name, a.current, a.target, a.reason) for a in grown.plan.actions] == [
        ("train", 2, 6, Reason.SCALE_UP_IDLE_GPUS)
    ]
    live, phases = await _until(api, job, "6 workers running", lambda j: _running(j) == 6)
    assert set(phases) == {"Running"}, phases
    assert live["spec"]["tasks"][0]["replicas"] == 6
    assert live["spec"]["tasks"][0]["minAvailable"] == 2  # never touched
    assert live["spec"]["minAvailable"] == 2

    # the webhook's floor, which our minimum follows: replicas below a task's minAvailable
    # are refused
    with pytest.raises(ApiError) as refused:
        api.request(
            "PATCH",
            f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/train",
            [{"op": "replace", "path": "/spec/tasks/0/replicas", "value": 1}],
            content_type="application/json-patch+json",
        )
    assert refused.value.status in (400, 403, 422) and "minAvailable" in refused.value.body

    # shrink: a real gang of 4 GPUs cannot be placed (6 of the queue's 8 are taken); the
    # daemon takes back what it lacks, no lower than the task's minAvailable, and Volcano
    # then runs the gang
    gang = api.create(_vcjob("gang", ns, queue, 4, min_available=4))
    group = await _podgroup_when_made(api, ns, "gang")
    await _until(api, group, "gang waits", _waiting)
    async with (
        fake_prometheus(free_body(**{queue: 2})) as prom,
        Daemon(api, _settings(prom.url, ns)) as d,  # type: ignore[arg-type]
    ):
        await d.seen("Job", "train")
        await d.seen("PodGroup", group["metadata"]["name"])
        shrunk = await d.controller.run_once(_now())
    assert shrunk.result == "ok", shrunk.message
    assert [(a.ref.name, a.current, a.target, a.reason) for a in shrunk.plan.actions] == [
        ("train", 6, 4, Reason.RECLAIM_FOR_PENDING)
    ]
    (covered,) = shrunk.plan.gangs
    assert covered.reason is Reason.GANG_COVERED
    live, phases = await _until(api, job, "4 workers left", lambda j: _running(j) == 4)
    assert set(phases) == {"Running"}, phases
    await _until(api, gang, "the gang runs", lambda j: _running(j) == 4)


@pytest.mark.timeout(180)
async def test_pending_pods_within_replicas_minus_min_available_keep_the_job_running(
    kit: VolcanoKit, ns: str
) -> None:
    """The controller turns a Job to phase Pending only when its Pending pods exceed
    replicas - minAvailable. Growth (ours, capped at the queue's capability, or anyone's
    past it) leaves the Job Running; a gang minimum raised over the line flips it, and the
    parser then holds its growth."""
    api = kit.api
    queue = f"{ns}-q"
    api.apply_queue(queue, capability={GPU: "3"})
    await _until(api, _queue(queue), "queue open", _queue_open)
    job = api.create(_vcjob("capped", ns, queue, 1, max_replicas=4, min_available=1, task_min=1))
    await _until(api, job, "1 worker running", lambda j: _running(j) == 1)
    group = await _podgroup_when_made(api, ns, "capped")
    await _until(api, group, "its PodGroup Running", _group_running)

    # ours: Prometheus says 3 free, the Queue allows 3 in all: 1 -> 3, never Pending
    async with (
        fake_prometheus(free_body(**{queue: 3})) as prom,
        Daemon(api, _settings(prom.url, ns)) as d,  # type: ignore[arg-type]
    ):
        await d.seen("Job", "capped")
        grown = await d.controller.run_once(_now())
    assert [(a.ref.name, a.target) for a in grown.plan.actions] == [("capped", 3)]
    live, phases = await _until(api, job, "3 running", lambda j: _running(j) == 3)
    assert set(phases) == {"Running"}, phases

    # one more, past the capability: 1 Pending <= 4 - 1, the Job stays Running
    api.request(
        "PATCH",
        f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/capped",
        [{"op": "replace", "path": "/spec/tasks/0/replicas", "value": 4}],
        content_type="application/json-patch+json",
    )
    # the controller decides the phase in the same status write that counts the pod
    live, phases = await _until(
        api, job, "1 pod pending", lambda j: j["status"].get("pending") == 1
    )
    assert set(phases) == {"Running"} and _phase(live) == "Running", (phases, live["status"])
    assert not _parsed(live).grow_blocked

    # the gang raised to 4 with one pod unplaceable: 1 Pending > 4 - 4 flips it
    api.request(
        "PATCH",
        f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/capped",
        {"spec": {"minAvailable": 4}},
        content_type="application/merge-patch+json",
    )
    live, _ = await _until(api, job, "phase Pending", lambda j: _phase(j) == "Pending")
    assert "replicas - minAvailable" in _parsed(live).grow_blocked


# ---- small readers ---------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(UTC)


def _queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
    }


def _queue_open(q: dict[str, Any]) -> bool:
    return q.get("status", {}).get("state") == "Open"


def _podgroup_of(api: EnvTest, ns: str, job: str) -> dict[str, Any]:
    groups = api.request("GET", f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups")
    for pg in groups["items"]:
        owners = pg["metadata"].get("ownerReferences") or []
        if any(o.get("name") == job for o in owners):
            pg.setdefault("apiVersion", "scheduling.volcano.sh/v1beta1")
            pg.setdefault("kind", "PodGroup")
            return dict(pg)
    raise AssertionError(f"no PodGroup of {ns}/{job} yet")


async def _podgroup_when_made(api: EnvTest, ns: str, job: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        try:
            return _podgroup_of(api, ns, job)
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


def _group_running(pg: dict[str, Any]) -> bool:
    return pg.get("status", {}).get("phase") == "Running"


def _waiting(pg: dict[str, Any]) -> bool:
    """Admitted or not, its gang cannot be placed: what the daemon reads as waiting."""
    status = pg.get("status", {})
    unschedulable = any(
        c.get("type") == "Unschedulable" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return status.get("phase") in ("Pending", "Inqueue") and unschedulable
