"""PyTorchJobs and PaddleJobs resized end to end on the REAL training-operator.

The `kubeflow` fixture (conftest.py) runs a fresh API server, Volcano's scheduler
(`proportion`, then `capacity`), its controller-manager and kwok as the kubelet of 6 nodes
x 8 GPUs, a real Prometheus scraping Volcano every second, and Kubeflow's own
training-operator (tests/operatorkit.py, `--no-webhook`). A job here is what a user
applies: the operator makes its PodGroup, pods and Services and writes its status, the
scheduler binds the pods, kwok runs them; nothing of the job's status is written by a test.

The daemon is wired as `run` wires it (test_loop.Daemon: autoscaler/wiring.py, its caches
watching the real server, its Prometheus source reading the real Prometheus with the
default series); the test runs its cycles with an injected clock, so cooldowns and
timeouts pass without sleeping. What is checked is what a platform team would check:
every worker asked for is bound and Running, the operator's status agrees, and a gang
that waits gets what it needs.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import RealKubeflow
from kubeserver import EnvTest
from operatorkit import (
    clean_kubeflow,
    podgroup,
    pods_of,
    pytorchjob_body,
    until,
    view,
    wait_podgroup,
    wait_workers_running,
    worker_replicas,
)
from test_loop import Daemon
from test_real_volcano import LEASE_NAMESPACE, REPO, daemon_env
from volcanokit import apply_queue, delete_queue

from autoscaler.loop import CycleResult
from autoscaler.model import Reason
from autoscaler.settings import Settings
from autoscaler.status import ResizeState

pytestmark = [pytest.mark.prometheus, pytest.mark.asyncio(loop_scope="module")]

MEASURED = "elastic-autoscaler.io/measured-restart-cost"
PROPORTION_ONLY = pytest.mark.parametrize("kubeflow", ["proportion"], indirect=True)


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
