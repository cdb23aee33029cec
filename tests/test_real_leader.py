"""Two replicas with leader election on a real API server (real Lease semantics, real
resourceVersion conflicts): one writer; the other takes over once the leader is killed;
a leader stopped by SIGTERM gives its Lease up at once."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import aiohttp
import pytest
from builders import pytorchjob
from kubeserver import EnvTest
from promserver import fake_prometheus
from test_faults import daemon_env, daemon_process, live_body


def _job(ns: str, queue: str, name: str) -> dict:
    job = pytorchjob(name, ns, queue=queue, replicas=1, active=1, max_replicas=2)
    job.pop("status")
    job["metadata"] = {"name": name, "namespace": ns}
    return job


async def _followed(port: int) -> bool:
    """The replica ran follower cycles (they are counted, not logged)."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        text = await resp.text()
    return (
        'elastic_autoscaler_cycles_total{result="follower"} ' in text
        and "elastic_autoscaler_is_leader 0.0" in text
    )


async def eventually_async(check, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, f"not within {within}s: {what}"
        await asyncio.sleep(0.1)


def _holder(envtest: EnvTest, ns: str) -> str:
    lease = envtest.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/elastic-autoscaler"
    )
    return str(lease["spec"].get("holderIdentity") or "")


@pytest.mark.timeout(120)
async def test_one_writer_failover_after_kill_and_release_on_sigterm(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    queue = f"{real_ns}-q"
    envtest.apply_queue(queue)  # a job whose Queue is missing holds
    for name in ("a", "b"):
        envtest.create(_job(real_ns, queue, name))
        envtest.patch_status(
            _job(real_ns, queue, name), {"replicaStatuses": {"Worker": {"active": 1}}}
        )
    kubeconfig = envtest.kubeconfig()
    async with fake_prometheus(live_body(**{queue: 1})) as prom:

        def env(identity: str) -> dict[str, str]:
            return daemon_env(
                tmp_path,
                kubeconfig,
                prom.url,
                namespaces=f'["{real_ns}"]',
                leader_election="true",
                identity=identity,
                lease_namespace=real_ns,
                lease_duration_seconds=4,
                lease_renew_deadline_seconds=3,
                lease_retry_period_seconds=0.5,
                interval_seconds=1,
                min_interval_seconds=0,
                cooldown_seconds=0,
            )

        async with daemon_process(env("r1")) as r1:
            await r1.wait_for("leader-acquired", 30)
            async with daemon_process(env("r2")) as r2:
                await r2.wait_for("listening", 30)
                await r1.wait_for("cycle", 30, result="ok")
                await eventually_async(lambda: _followed(r2.port), 30, "r2 follower cycles")
                assert _holder(envtest, real_ns) == "r1"
                # one GPU free: the leader grows one job; the follower writes nothing
                await r1.wait_for("scale", 30)
                assert not r2.events("scale") and not r2.events("leader-acquired")

                r1.process.send_signal(signal.SIGKILL)  # no release: the Lease must expire
                await r1.process.wait()
                killed = time.monotonic()
                await r2.wait_for("leader-acquired", 30)
                took = time.monotonic() - killed
                assert _holder(envtest, real_ns) == "r2"
                assert took <= 4 + 3 + 2, f"failover took {took:.1f}s"  # duration + slack
                await r2.wait_for("cycle", 30, result="ok")

                assert await r2.stop(signal.SIGTERM) == 0
                assert _holder(envtest, real_ns) == ""  # released, not left to expire
    replicas = sorted(
        envtest.get(_job(real_ns, queue, n))["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        for n in ("a", "b")
    )
    assert replicas == [1, 2]  # one free GPU, granted once across both replicas
