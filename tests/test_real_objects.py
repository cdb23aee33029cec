"""The daemon's cycle against the real API server: objects a real cluster holds that it
must never resize, and the Queue object's capacity as a bound on growth.

The free-GPU reading comes from a fake Prometheus (the point here is the API objects);
the Kubernetes side is the real one: real CRD validation, finalizers, managedFields,
resourceVersions, Events.
"""

from __future__ import annotations

from typing import Any

from builders import NOW, pytorchjob
from kubeserver import EnvTest
from promserver import fake_prometheus
from test_loop import Daemon, free_body, settings_for

from autoscaler.core.reasons import Reason


def _created(envtest: EnvTest, obj: dict[str, Any], active: int) -> dict[str, Any]:
    """Create a job as a user would, then its status as the operator would."""
    body = {k: v for k, v in obj.items() if k != "status"}
    body["metadata"] = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in ("uid", "resourceVersion", "creationTimestamp")
    }
    envtest.create(body)
    return envtest.patch_status(body, {"replicaStatuses": {"Worker": {"active": active}}})


def _queue(envtest: EnvTest, name: str, capability: int | None = None) -> None:
    spec: dict[str, Any] = {"weight": 1}
    if capability is not None:
        spec["capability"] = {"nvidia.com/gpu": str(capability)}
    envtest.apply(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def _events(envtest: EnvTest, namespace: str) -> list[str]:
    items = envtest.request("GET", f"/api/v1/namespaces/{namespace}/events")["items"]
    return [e["involvedObject"]["name"] for e in items]


async def test_terminating_and_unrunnable_jobs_are_never_resized(
    envtest: EnvTest, real_ns: str
) -> None:
    queue = f"{real_ns}-q"
    _queue(envtest, queue)
    # a finalizer keeps the deleted job: deletionTimestamp set, still listed
    doomed = pytorchjob("doomed", real_ns, queue=queue, replicas=2, max_replicas=8)
    doomed["metadata"]["finalizers"] = ["example.com/keep"]
    _created(envtest, doomed, active=2)
    envtest.request("DELETE", f"/apis/kubeflow.org/v1/namespaces/{real_ns}/pytorchjobs/doomed")
    # limits 1, requests 2: Kubernetes would refuse its pods
    odd = pytorchjob("odd", real_ns, queue=queue, replicas=2, max_replicas=8)
    worker = odd["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["template"]["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "2"}
    _created(envtest, odd, active=1)
    fine = pytorchjob("fine", real_ns, queue=queue, replicas=1, max_replicas=4)
    _created(envtest, fine, active=1)
    before = {
        n: envtest.get(pytorchjob(n, real_ns))["metadata"]["resourceVersion"]
        for n in ("doomed", "odd")
    }

    async with fake_prometheus(free_body(**{queue: 3})) as prom:
        settings = settings_for(prom.url, namespaces=[real_ns], cooldown_seconds=0)
        async with Daemon(envtest, settings) as d:
            result = await d.controller.run_once(NOW)
    assert result.result == "ok", result.message
    reasons = {d.ref.name: d.reason for d in result.plan.decisions}
    assert reasons == {
        "doomed": Reason.TERMINATING,
        "odd": Reason.INVALID_SPEC,
        "fine": Reason.SCALE_UP_IDLE_GPUS,
    }  # the cycle did write: it works
    assert [a.ref.name for a in result.plan.actions] == ["fine"]
    # 3 free: the odd job's phantom in-flight GPU (2 asked, 1 runs) must not cut it to 3
    assert (
        envtest.get(pytorchjob("fine", real_ns))["spec"]["pytorchReplicaSpecs"]["Worker"][
            "replicas"
        ]
        == 4
    )
    after = {
        n: envtest.get(pytorchjob(n, real_ns))["metadata"]["resourceVersion"]
        for n in ("doomed", "odd")
    }
    assert after == before
    assert set(_events(envtest, real_ns)) == {"fine"}


async def test_growth_is_capped_by_the_queue_objects_capability(
    envtest: EnvTest, real_ns: str
) -> None:
    """Prometheus says 16 free GPUs (garbage, or a query that no longer matches); the
    Queue allows 8, of which the job holds 2: it grows to 8, not 18."""
    queue = f"{real_ns}-cap"
    _queue(envtest, queue, capability=8)
    _created(
        envtest, pytorchjob("big", real_ns, queue=queue, replicas=2, max_replicas=20), active=2
    )
    async with fake_prometheus(free_body(**{queue: 16})) as prom:
        settings = settings_for(prom.url, namespaces=[real_ns], cooldown_seconds=0)
        async with Daemon(envtest, settings) as d:
            grown = await d.controller.run_once(NOW)
            assert [(a.ref.name, a.target) for a in grown.plan.actions] == [("big", 8)]
    job = envtest.get(pytorchjob("big", real_ns))
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 8
