"""The daemon end to end on real parts: a real kube-apiserver (real CRDs, resourceVersions,
managedFields, Events) and a real Prometheus scraping a Volcano-shaped exporter, read with
the default query, through the wiring `run` uses (leader election, status object, the
pruned caches and their triggers). One scenario, in the order a cluster lives it:

grow into idle GPUs -> a gang arrives and exactly what it needs is reclaimed -> `plan`
writes nothing -> the daemon restarts and keeps the cooldown from the annotation. A paused
job sits beside it all and is never written.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from builders import podgroup, pytorchjob
from kubeserver import EnvTest
from promserver import (
    HAVE_PROMETHEUS,
    SKIP_REASON,
    VolcanoExporter,
    running_exporter,
    running_prometheus,
)
from test_loop import Daemon

from autoscaler.core.reasons import Reason
from autoscaler.read.prometheus.answer import free_gpus_query
from autoscaler.run.daemon import live_plan
from autoscaler.settings import Settings

pytestmark = [pytest.mark.prometheus, pytest.mark.skipif(not HAVE_PROMETHEUS, reason=SKIP_REASON)]

LAST = "elastic-autoscaler.io/last-scale-time"
REASON = "elastic-autoscaler.io/last-scale-reason"


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    """As a user creates it: no server-set metadata; status only where the CRD has no
    status subresource (a PodGroup's is written with it; a job's by the operator)."""
    if obj["kind"] != "PodGroup":
        obj = {k: v for k, v in obj.items() if k != "status"}
    obj["metadata"] = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in ("uid", "resourceVersion", "creationTimestamp")
    }
    return obj


def _job(envtest: EnvTest, ns: str, name: str) -> dict[str, Any]:
    return envtest.get(pytorchjob(name, ns))


def _replicas(envtest: EnvTest, ns: str, name: str) -> int:
    return int(_job(envtest, ns, name)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])


def _set_active(envtest: EnvTest, ns: str, name: str, active: int) -> None:
    envtest.patch_status(pytorchjob(name, ns), {"replicaStatuses": {"Worker": {"active": active}}})


def _events(envtest: EnvTest, ns: str) -> list[tuple[str, str]]:
    items = envtest.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    return sorted((e["involvedObject"]["name"], e["reason"]) for e in items)


async def _scraped(prom, settings: Settings, queue: str, free: float) -> None:
    """Until Prometheus answers the default query with `free` GPUs for `queue`."""
    query = free_gpus_query(settings.prometheus_options())
    deadline = time.monotonic() + 20
    while True:
        body = await prom.query(query)
        parts = {
            s["metric"].get("elastic_autoscaler_part"): float(s["value"][1])
            for s in body["data"]["result"]
            if s["metric"].get("queue_name") == queue
        }
        if parts.get("deserved", 0) - parts.get("allocated", 0) == free * 1000:
            return
        assert time.monotonic() < deadline, f"Prometheus never showed {free} free: {parts}"
        await asyncio.sleep(0.2)


@pytest.mark.timeout(120)
async def test_grow_reclaim_plan_and_restart_on_real_parts(
    envtest: EnvTest, real_ns: str, monkeypatch
) -> None:
    ns, queue = real_ns, f"{real_ns}-q"
    envtest.apply_queue(queue)
    for name, replicas, notes in (
        ("a", 2, {}),
        ("paused", 1, {"elastic-autoscaler.io/paused": "true"}),
    ):
        envtest.create(
            _strip(
                pytorchjob(
                    name,
                    ns,
                    queue=queue,
                    replicas=replicas,
                    max_replicas=6,
                    min_replicas=1,
                    annotations=notes,
                )
            )
        )
        _set_active(envtest, ns, name, replicas)
        envtest.create(
            _strip(podgroup(name, ns, queue=queue, gpus=replicas, phase="Running", owner=name))
        )
    paused_rv = _job(envtest, ns, "paused")["metadata"]["resourceVersion"]

    exporter = VolcanoExporter()
    exporter.set_queue(queue, deserved=8000, allocated=3000)  # 5 free
    async with running_exporter(exporter), running_prometheus([exporter.target]) as prom:
        settings = Settings(
            prometheus_url=prom.url,
            namespaces=[ns],
            lease_namespace=ns,  # the status object is written there, as by `run`
            prometheus_retries=0,
            cooldown_seconds=600,
            reclaim_cooldown_seconds=0,
            kube_request_timeout_seconds=5,
        )
        await _scraped(prom, settings, queue, 5)

        # 1. grow: a takes the 5 idle GPUs up to its max of 6 (2 -> 6 needs 4)
        start = datetime.now(UTC)
        async with Daemon(envtest, settings) as d:
            await d.leading()
            grown = await d.controller.run_once(start)
        assert grown.result == "ok", grown.message
        assert [(x.ref.name, x.target) for x in grown.plan.actions] == [("a", 6)]
        a = _job(envtest, ns, "a")
        assert a["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 6
        assert a["metadata"]["annotations"][REASON] == "ScaleUpIdleGpus"
        assert _events(envtest, ns) == [("a", "ScaleUpIdleGpus")]

        # 2. the workers run; a gang of 3 GPUs arrives with 1 free: reclaim exactly 2
        _set_active(envtest, ns, "a", 6)
        exporter.set_queue(queue, deserved=8000, allocated=7000)
        envtest.create(_strip(podgroup("gang", ns, queue=queue, gpus=3, phase="Pending")))
        await _scraped(prom, settings, queue, 1)
        later = start + timedelta(seconds=30)
        async with Daemon(envtest, settings) as d:
            await d.leading()
            await d.seen("PodGroup", "gang")
            reclaimed = await d.controller.run_once(later)
        assert reclaimed.result == "ok", reclaimed.message
        assert [(x.ref.name, x.target, x.reason) for x in reclaimed.plan.actions] == [
            ("a", 4, Reason.RECLAIM_FOR_PENDING)
        ]
        assert _replicas(envtest, ns, "a") == 4
        assert ("a", "ReclaimForPending") in _events(envtest, ns)

        # 3. `plan` against the live cluster prints and writes nothing
        _set_active(envtest, ns, "a", 4)
        envtest.delete(podgroup("gang", ns))
        exporter.set_queue(queue, deserved=8000, allocated=5000)
        await _scraped(prom, settings, queue, 3)
        rv = _job(envtest, ns, "a")["metadata"]["resourceVersion"]
        kubeconfig = envtest.kubeconfig()
        planned = await asyncio.to_thread(
            live_plan,
            settings.model_copy(update={"kubeconfig": kubeconfig}),
            later + timedelta(seconds=1),
        )
        assert {d.ref.name: d.reason for d in planned.decisions}["a"] is Reason.COOLDOWN
        assert _job(envtest, ns, "a")["metadata"]["resourceVersion"] == rv

        # 4. a new daemon (a restart) keeps the cooldown: it is on the job, not in memory
        async with Daemon(envtest, settings) as d:
            await d.leading()
            held = await d.controller.run_once(later + timedelta(seconds=60))
        assert {x.ref.name: x.reason for x in held.plan.decisions}["a"] is Reason.COOLDOWN
        assert held.plan.actions == ()
        assert _replicas(envtest, ns, "a") == 4

    # the paused job was never written, and nothing was written about it
    assert _job(envtest, ns, "paused")["metadata"]["resourceVersion"] == paused_rv
    assert all(name != "paused" for name, _ in _events(envtest, ns))
