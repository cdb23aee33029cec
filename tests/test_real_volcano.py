"""The daemon end to end against the REAL Volcano scheduler, under both queue plugins.

The `volcano` fixture (conftest.py) gives the session's API server with Volcano's
scheduler (`proportion`, then `capacity`), its controller-manager and kwok as the kubelet
of 4 nodes x 8 GPUs, and a real Prometheus scraping the scheduler and the controller every
second.
The daemon runs as `python -m autoscaler run`, the wiring production uses, with default
settings except its URLs and intervals; `plan` runs as the CLI. Elastic jobs are Volcano
Jobs (the kit has no training-operator): one task `worker`, 1 GPU per pod, with the
`elastic-autoscaler.io/max-replicas` annotation.

What is checked is what a platform team would check: the workers the daemon asks for are
bound and Running (the scheduler agrees), none is left Unschedulable, nothing leaves
[min, max], and a gang that waits gets what it needs.

The real-kit modules' tests share one cluster per plugin for the session (a fresh one
costs ~20 s): each works in its own namespace and queues, and leaves them empty (there is
no garbage collector).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from kubeserver import EnvTest
from test_faults import Proc, daemon_process
from volcanokit import (
    RealVolcano,
    apply_queue,
    bound_gpus,
    clean_namespace,
    create_vcjob,
    delete_queue,
    describe,
    get_vcjob,
    job_pods,
    unschedulable_pods,
    wait_podgroup_phase,
    wait_running,
    workers,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.asyncio(loop_scope="module")]

REPO = Path(__file__).resolve().parents[1]
INTERVAL = 3.0  # the daemon's cycle; a replicas patch is Running in ~1-2 s on the kit
LEASE_NAMESPACE = "elastic-autoscaler"  # the default lease_namespace


def daemon_env(volcano: RealVolcano, namespace: str, home: Path) -> dict[str, str]:
    """Default settings, except where things are and how often to look."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    env.update(
        {
            "AUTOSCALER_KUBECONFIG": str(volcano.api.kubeconfig(name="daemon")),
            "AUTOSCALER_PROMETHEUS_URL": volcano.prometheus.url,
            "AUTOSCALER_NAMESPACES": json.dumps([namespace]),
            "AUTOSCALER_INTERVAL_SECONDS": str(INTERVAL),
            "AUTOSCALER_MIN_INTERVAL_SECONDS": "1",
            "AUTOSCALER_LISTEN_HOST": "127.0.0.1",
            "AUTOSCALER_LISTEN_PORT": "0",
            "AUTOSCALER_LOG_FORMAT": "json",
            "PYTHONPATH": str(REPO),
            "HOME": str(home),  # no ~/.kube/config of the machine running the tests
        }
    )
    return env


def stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"]).timestamp()


@dataclass
class Scene:
    """One test's corner of the shared cluster: its namespace, its queues, its daemon."""

    volcano: RealVolcano
    ns: str
    home: Path
    queues: list[str] = field(default_factory=list)

    @property
    def api(self) -> EnvTest:
        return self.volcano.api

    def queue(self, suffix: str, **spec: Any) -> str:
        name = f"{self.ns}-{suffix}"
        apply_queue(self.api, name, **spec)
        self.queues.append(name)
        return name

    def job(self, name: str, queue: str, **kw: Any) -> None:
        create_vcjob(self.api, name, self.ns, queue=queue, **kw)

    def workers(self, name: str) -> int:
        return workers(self.api, self.ns, name)

    def bounds_kept(self, jobs: dict[str, tuple[int, int]]) -> None:
        for name, (lo, hi) in jobs.items():
            n = self.workers(name)
            assert lo <= n <= hi, f"{name} has {n} workers, outside [{lo}, {hi}]"

    def env(self) -> dict[str, str]:
        return daemon_env(self.volcano, self.ns, self.home)

    @contextlib.asynccontextmanager
    async def daemon(self, extra_env: dict[str, str] | None = None) -> AsyncIterator[Daemon]:
        async with daemon_process({**self.env(), **(extra_env or {})}) as proc:
            daemon = Daemon(proc, self)
            try:
                yield daemon
            except BaseException:
                print("daemon log:\n" + "\n".join(proc.raw[-40:]))
                raise
            finally:
                await proc.stop()

    def plan(self, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
        """`elastic-autoscaler plan -o json` against the live cluster (writes nothing)."""
        answer = subprocess.run(
            [sys.executable, "-m", "autoscaler", "plan", "-o", "json"],
            cwd=REPO,
            env={**self.env(), **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert answer.returncode == 0, answer.stderr[-2000:]
        try:
            result: dict[str, Any] = json.loads(answer.stdout)
        except ValueError:
            raise AssertionError(
                f"`plan -o json` printed more than the plan's JSON on stdout:\n"
                f"{answer.stdout[:600]}"
            ) from None
        return result


@dataclass
class Daemon:
    """The running daemon, read through its JSON log."""

    proc: Proc
    scene: Scene

    def decisions(self, name: str) -> list[dict[str, Any]]:
        return self.proc.events("decision", name=name)

    def scales(self, name: str | None = None) -> list[dict[str, Any]]:
        match = {} if name is None else {"name": name}
        return self.proc.events("scale", outcome="applied", **match)

    def cycles(self) -> list[dict[str, Any]]:
        return self.proc.events("cycle")

    def why(self, name: str) -> str:
        said = [
            f"{d['reason']} {d.get('current')}->{d.get('target')}: {d.get('message')}"
            for d in self.decisions(name)[-3:]
        ]
        cycles = [
            {k: c.get(k) for k in ("result", "reasons", "message") if k in c}
            for c in self.cycles()[-2:]
        ]
        return f"the daemon said about {name}: {said}; last cycles: {cycles}"

    async def resized(self, name: str, *, cycles: float = 3) -> dict[str, Any]:
        """The first applied resize of `name`, waiting up to `cycles` daemon intervals
        after its first cycle; fails with what the daemon decided instead."""
        await self.first_cycle()
        deadline = time.monotonic() + cycles * INTERVAL
        while True:
            done = self.scales(name)
            if done:
                return done[0]
            if time.monotonic() > deadline or self.proc.process.returncode is not None:
                raise AssertionError(
                    f"no resize of {name} within {cycles:g} cycles; {self.why(name)}\n"
                    f"{describe(self.scene.api, self.scene.ns)}"
                )
            await asyncio.sleep(0.1)

    async def first_cycle(self, within: float = 30) -> None:
        await self.proc.wait_for("cycle", within)

    async def cycles_pass(self, n: int) -> None:
        """Until `n` more cycles have finished."""
        seen = len(self.cycles())
        deadline = time.monotonic() + n * INTERVAL + 15
        while len(self.cycles()) < seen + n:
            assert time.monotonic() < deadline, f"fewer than {n} cycles in time"
            await asyncio.sleep(0.1)


async def settled(scene: Scene, queue: str, jobs: dict[str, int]) -> None:
    """Until each job runs its pods, its PodGroup is Running, and Prometheus shows the
    queue with them allocated and nothing inqueue. Until a PodGroup says Running (the
    scheduler writes it at a session's end, later under load) the capacity plugin counts
    its gang twice, allocated and inqueue, and a daemon started then rightly sees that
    much less room, as the scheduler does."""
    for name, n in jobs.items():
        await wait_running(scene.api, scene.ns, name, n, deadline_seconds=30)
        await wait_podgroup_phase(scene.api, scene.ns, name, "Running", deadline_seconds=30)
    await scene.volcano.wait_scraped(queue, allocated=sum(jobs.values()), inqueue=0)


async def running_within_two_cycles(scene: Scene, name: str, resize: dict[str, Any]) -> None:
    """Every worker of `name` the resize asked for is bound and Running within 2 cycles
    of the resize."""
    left = stamp(resize) + 2 * INTERVAL - time.time()
    await wait_running(scene.api, scene.ns, name, int(resize["to"]), deadline_seconds=left)


@pytest_asyncio.fixture(loop_scope="module")
async def scene(volcano: RealVolcano, tmp_path: Path) -> AsyncIterator[Scene]:
    """A fresh namespace on the shared cluster, emptied afterwards with its queues."""
    api = volcano.api
    with contextlib.suppress(Exception):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}})
    # the tests before left nothing bound (or the cluster is not what the test thinks)
    deadline = time.monotonic() + 30
    while bound_gpus(api):
        assert time.monotonic() < deadline, f"{bound_gpus(api)} GPUs still bound"
        await asyncio.sleep(0.2)
    scene = Scene(volcano, api.create_namespace("vc"), tmp_path)
    try:
        yield scene
    finally:
        clean_namespace(api, scene.ns)
        for queue in scene.queues:
            delete_queue(api, queue)


# ---- a. idle GPUs -> growth the scheduler binds ------------------------------------------------


@pytest.mark.timeout(90)
async def test_grows_into_idle_gpus_and_every_worker_is_bound(scene: Scene) -> None:
    """One queue, 32 idle GPUs but 2: the job grows, bounded by the cluster (max 40), and
    the scheduler binds every worker asked for within two cycles."""
    queue = scene.queue("a")
    scene.job("train", queue, replicas=2, min_available=2, max_replicas=40)
    await settled(scene, queue, {"train": 2})

    async with scene.daemon() as daemon:
        resize = await daemon.resized("train")
        assert resize["reason"] == "ScaleUpIdleGpus"
        assert resize["to"] == scene.volcano.kit.gpus, daemon.why("train")
        await running_within_two_cycles(scene, "train", resize)
        assert unschedulable_pods(scene.api, scene.ns) == []


# ---- b. two queues, one cluster ----------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_two_queues_grow_into_what_the_scheduler_gives_them(scene: Scene) -> None:
    """Two queues of weight 1 on 32 GPUs, a job of 2 in each that could take 24: both
    grow, together they fill the cluster and no more, and no worker asked for stays
    Unschedulable (the daemon's picture of one queue counts what it gave the other)."""
    qa, qb = scene.queue("a"), scene.queue("b")
    for name, queue in (("left", qa), ("right", qb)):
        scene.job(name, queue, replicas=2, min_available=2, max_replicas=24)
    for name, queue in (("left", qa), ("right", qb)):
        await settled(scene, queue, {name: 2})

    async with scene.daemon() as daemon:
        for name in ("left", "right"):
            await daemon.resized(name, cycles=4)
        asked = {name: scene.workers(name) for name in ("left", "right")}
        assert sum(asked.values()) == scene.volcano.kit.gpus, (asked, daemon.why("right"))
        for name, n in asked.items():
            resize = daemon.scales(name)[-1]
            await running_within_two_cycles(scene, name, resize)
            assert 2 < n <= 24
        await daemon.cycles_pass(1)
        assert unschedulable_pods(scene.api, scene.ns) == []
        assert {name: scene.workers(name) for name in asked} == asked  # no flapping


# ---- c. a capability bounds growth -------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_queue_capability_bounds_growth(scene: Scene) -> None:
    """A queue capped at 6 GPUs with 30 idle in the cluster: the job grows to 6, not to
    its max of 8, and all 6 are bound; nothing asked for is left Unschedulable."""
    queue = scene.queue("cap", capability_gpus=6)
    scene.job("capped", queue, replicas=2, min_available=2, max_replicas=8)
    await settled(scene, queue, {"capped": 2})

    async with scene.daemon() as daemon:
        resize = await daemon.resized("capped")
        assert resize["to"] == 6, daemon.why("capped")
        await running_within_two_cycles(scene, "capped", resize)
        await daemon.cycles_pass(1)
        assert scene.workers("capped") == 6
        assert unschedulable_pods(scene.api, scene.ns) == []


# ---- d. a waiting gang gets elastic workers back -----------------------------------------------


@pytest.mark.timeout(90)
async def test_waiting_gang_gets_elastic_workers_and_is_bound(scene: Scene) -> None:
    """An elastic job holds 28 of 32 GPUs (min 4); a gang of 8 that is not elastic
    arrives: the daemon takes back exactly the 4 workers the gang lacks (no more: the
    gang's own request is not headroom it competes with) and the scheduler binds all 8
    of the gang's pods and keeps the job's 24."""
    queue = scene.queue("g")
    scene.job("elastic", queue, replicas=28, min_available=4, max_replicas=28)
    await settled(scene, queue, {"elastic": 28})

    async with scene.daemon() as daemon:
        await daemon.first_cycle()
        scene.job("gang", queue, replicas=8, min_available=8)  # no annotation: not ours
        resize = await daemon.resized("elastic", cycles=4)
        assert (resize["reason"], resize["to"]) == ("ReclaimForPending", 24), daemon.why("elastic")
        left = stamp(resize) + 2 * INTERVAL - time.time()
        await wait_running(scene.api, scene.ns, "gang", 8, deadline_seconds=max(left, 0))
        await wait_running(scene.api, scene.ns, "elastic", 24, deadline_seconds=5)
        await wait_podgroup_phase(scene.api, scene.ns, "gang", "Running", deadline_seconds=5)
        await daemon.cycles_pass(1)
        assert scene.workers("elastic") == 24  # not grown back into the gang's GPUs
        assert unschedulable_pods(scene.api, scene.ns) == []


# ---- e. plan agrees with run -------------------------------------------------------------------


async def wait_job_status_running(
    scene: Scene, name: str, count: int, *, deadline_seconds: float
) -> None:
    started = time.monotonic()
    while True:
        status = get_vcjob(scene.api, scene.ns, name).get("status") or {}
        running = (
            ((status.get("taskStatusCount") or {}).get("worker") or {}).get("phase") or {}
        ).get("Running")
        if running == count:
            return
        if time.monotonic() - started > deadline_seconds:
            raise AssertionError(f"{name}: status shows {running} Running, not {count}")
        await asyncio.sleep(0.1)


@pytest.mark.timeout(90)
async def test_plan_agrees_with_what_run_then_does(scene: Scene) -> None:
    """`plan` on the live cluster lists the resizes; `run` then makes exactly those, and
    the scheduler binds them. `plan` wrote nothing."""
    queue = scene.queue("p")
    jobs = {"small": (1, 4), "big": (2, 12)}
    for name, (lo, hi) in jobs.items():
        scene.job(name, queue, replicas=lo, min_available=lo, max_replicas=hi)
    for name, (lo, _) in jobs.items():
        await wait_running(scene.api, scene.ns, name, lo, deadline_seconds=30)
        # what the planner reads as running is the Job's status, which Volcano's controller
        # writes a moment after the pods run (later under load): until then the job is
        # in flight and `plan` rightly grows nothing
        await wait_job_status_running(scene, name, lo, deadline_seconds=30)
        # and the PodGroup's phase, which the scheduler writes at the end of a session
        # (later under load): while it still says Inqueue the job waits for its own gang
        # and `plan` rightly holds it (HoldOwnGangWaiting)
        await wait_podgroup_phase(scene.api, scene.ns, name, "Running", deadline_seconds=30)
    await scene.volcano.wait_scraped(queue, allocated=3, inqueue=0)
    versions = {n: get_vcjob(scene.api, scene.ns, n)["metadata"]["resourceVersion"] for n in jobs}

    planned = scene.plan()
    targets = {a["name"]: a["to"] for a in planned["actions"]}
    reasons = {j["name"]: (j["reason"], j["message"]) for j in planned["jobs"]}
    assert targets, f"plan grows nothing with 29 idle GPUs: {reasons}"
    assert {
        n: get_vcjob(scene.api, scene.ns, n)["metadata"]["resourceVersion"] for n in jobs
    } == versions

    async with scene.daemon() as daemon:
        for name in targets:
            await daemon.resized(name)
        await daemon.cycles_pass(1)
        assert {n: scene.workers(n) for n in jobs} == {
            n: targets.get(n, lo) for n, (lo, _) in jobs.items()
        }
        for name in targets:
            await running_within_two_cycles(scene, name, daemon.scales(name)[0])
        assert unschedulable_pods(scene.api, scene.ns) == []


# ---- f. the scheduler restarts under the daemon ------------------------------------------------


@pytest.mark.timeout(120)
async def test_scheduler_restart_under_the_daemon_harms_nothing(scene: Scene) -> None:
    """The daemon has grown a job; the scheduler is killed, a second elastic job arrives
    while it is down, and it comes back on the same ports (its metrics reset). Nothing
    leaves [min, max], no job is resized twice, and every worker asked for is bound."""
    queue = scene.queue("r")
    bounds = {"first": (2, 20), "second": (2, 20)}
    scene.job("first", queue, replicas=2, min_available=2, max_replicas=20)
    await settled(scene, queue, {"first": 2})

    async with scene.daemon() as daemon:
        resize = await daemon.resized("first")
        await running_within_two_cycles(scene, "first", resize)

        kit = scene.volcano.kit
        pid = kit.env["VC_SCHEDULER_PID"]
        # the scheduler dies with the new job unscheduled; a daemon cycle runs without it
        kit.stop_scheduler(kill=True)
        scene.job("second", queue, replicas=2, min_available=2, max_replicas=20)
        await daemon.cycles_pass(1)
        kit.start_scheduler()
        assert kit.env["VC_SCHEDULER_PID"] != pid

        await wait_running(scene.api, scene.ns, "second", 2, deadline_seconds=30)
        grown = await daemon.resized("second", cycles=4)
        await running_within_two_cycles(scene, "second", grown)
        await daemon.cycles_pass(2)
        scene.bounds_kept(bounds)
        for name in bounds:
            assert len(daemon.scales(name)) == 1, (name, daemon.scales(name))
        assert sum(scene.workers(n) for n in bounds) <= kit.gpus
        assert unschedulable_pods(scene.api, scene.ns) == []
        assert all(p.running for p in job_pods(scene.api, scene.ns))
