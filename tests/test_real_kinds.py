"""A PyTorchJob, a PaddleJob and a Volcano Job side by side in one queue, managed by the
daemon wired as `run` wires it, on a real kube-apiserver (the real CRDs of all three)
and a real Prometheus: they grow into idle GPUs, give workers back to a waiting gang,
and keep their cooldown. Each write is the kind's own (merge patch or JSON patch), pinned
to the resourceVersion, with an Event on the right object."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from builders import paddlejob, podgroup, pytorchjob, vcjob
from kubeserver import EnvTest
from promserver import (
    HAVE_PROMETHEUS,
    SKIP_REASON,
    VolcanoExporter,
    running_exporter,
    running_prometheus,
)
from test_loop import Daemon
from test_real_daemon import _scraped, _strip

from autoscaler.core.reasons import Reason
from autoscaler.settings import Settings

pytestmark = [pytest.mark.prometheus, pytest.mark.skipif(not HAVE_PROMETHEUS, reason=SKIP_REASON)]

REASON = "elastic-autoscaler.io/last-scale-reason"


def _workers(obj: dict[str, Any]) -> int:
    spec = obj["spec"]
    if obj["kind"] == "PyTorchJob":
        return int(spec["pytorchReplicaSpecs"]["Worker"]["replicas"])
    if obj["kind"] == "PaddleJob":
        return int(spec["paddleReplicaSpecs"]["Worker"]["replicas"])
    return int(next(t for t in spec["tasks"] if t["name"] == "worker")["replicas"])


def _set_running(envtest: EnvTest, obj: dict[str, Any], n: int) -> None:
    if obj["kind"] == "Job":
        status = {
            "state": {"phase": "Running"},
            "running": n,
            "taskStatusCount": {"worker": {"phase": {"Running": n}}},
        }
    else:
        status = {
            "conditions": [{"type": "Running", "status": "True", "reason": "JobRunning"}],
            "replicaStatuses": {"Worker": {"active": n}},
        }
    envtest.patch_status(obj, status)


@pytest.mark.timeout(120)
async def test_three_kinds_in_one_queue_grow_reclaim_and_cool_down(
    envtest: EnvTest, real_ns: str
) -> None:
    ns, queue = real_ns, f"{real_ns}-q"
    envtest.apply_queue(queue)
    jobs = [
        pytorchjob("pt", ns, queue=queue, replicas=1, min_replicas=1, max_replicas=4),
        paddlejob("pd", ns, queue=queue, replicas=1, min_replicas=1, max_replicas=4),
        vcjob("vc", ns, queue=queue, replicas=1, min_available=1, max_replicas=4),
    ]
    for obj in jobs:
        envtest.create(_strip(obj))
        _set_running(envtest, obj, 1)

    def current() -> dict[str, int]:
        return {o["kind"]: _workers(envtest.get(o)) for o in jobs}

    exporter = VolcanoExporter()
    exporter.set_queue(queue, deserved=9000, allocated=3000)  # 6 free
    async with running_exporter(exporter), running_prometheus([exporter.target]) as prom:
        settings = Settings(
            prometheus_url=prom.url,
            namespaces=[ns],
            leader_election=False,
            prometheus_retries=0,
            growth_policy="fair",
            cooldown_seconds=600,
            reclaim_cooldown_seconds=0,
            kube_request_timeout_seconds=5,
        )
        await _scraped(prom, settings, queue, 6)

        # 1. grow: six idle GPUs, shared fairly: each kind 1 -> 3, each written its way
        start = datetime.now(UTC)
        async with Daemon(envtest, settings) as d:
            for o in jobs:
                await d.seen(o["kind"], o["metadata"]["name"])
            grown = await d.controller.run_once(start)
        assert grown.result == "ok", grown.message
        assert sorted((x.ref.kind, x.target) for x in grown.plan.actions) == [
            ("Job", 3),
            ("PaddleJob", 3),
            ("PyTorchJob", 3),
        ]
        assert current() == {"PyTorchJob": 3, "PaddleJob": 3, "Job": 3}
        for o in jobs:
            live = envtest.get(o)
            assert live["metadata"]["annotations"][REASON] == "ScaleUpIdleGpus"
        vc = envtest.get(jobs[2])
        assert [t["name"] for t in vc["spec"]["tasks"]] == ["worker"]  # only replicas changed
        assert vc["spec"]["minAvailable"] == 1  # the gang stays at its minimum
        events = envtest.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        involved = sorted(
            (e["involvedObject"]["kind"], e["involvedObject"]["apiVersion"], e["reason"])
            for e in events
        )
        assert involved == [
            ("Job", "batch.volcano.sh/v1alpha1", "ScaleUpIdleGpus"),
            ("PaddleJob", "kubeflow.org/v1", "ScaleUpIdleGpus"),
            ("PyTorchJob", "kubeflow.org/v1", "ScaleUpIdleGpus"),
        ]

        # 2. all run; a gang of 4 GPUs arrives with none free: 4 workers are reclaimed,
        # whole jobs' extras first (most reclaimable workers, then name order)
        for o in jobs:
            _set_running(envtest, o, 3)
        exporter.set_queue(queue, deserved=9000, allocated=9000)
        envtest.create(_strip(podgroup("gang", ns, queue=queue, gpus=4, phase="Pending")))
        await _scraped(prom, settings, queue, 0)
        later = start + timedelta(seconds=30)
        async with Daemon(envtest, settings) as d:
            await d.seen("PodGroup", "gang")
            reclaimed = await d.controller.run_once(later)
        assert reclaimed.result == "ok", reclaimed.message
        assert sorted((x.ref.kind, x.target, x.reason) for x in reclaimed.plan.actions) == [
            ("PaddleJob", 1, Reason.RECLAIM_FOR_PENDING),
            ("PyTorchJob", 1, Reason.RECLAIM_FOR_PENDING),
        ]
        assert current() == {"PyTorchJob": 1, "PaddleJob": 1, "Job": 3}

        # 3. the gang runs elsewhere and GPUs free up: every job is in its cooldown
        envtest.delete(podgroup("gang", ns))
        for o, n in zip(jobs, (1, 1, 3), strict=True):
            _set_running(envtest, o, n)
        exporter.set_queue(queue, deserved=9000, allocated=5000)
        await _scraped(prom, settings, queue, 4)
        async with Daemon(envtest, settings) as d:
            held = await d.controller.run_once(later + timedelta(seconds=60))
        reasons = {x.ref.kind: x.reason for x in held.plan.decisions}
        assert reasons == {
            "PyTorchJob": Reason.COOLDOWN,
            "PaddleJob": Reason.COOLDOWN,
            "Job": Reason.COOLDOWN,
        }
        assert held.plan.actions == ()
        assert current() == {"PyTorchJob": 1, "PaddleJob": 1, "Job": 3}
