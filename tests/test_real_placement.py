# ruff: noqa: F811  (`scene` is the shared fixture, imported; tests take it by name)
"""Growth only where the next worker can be bound, on the REAL Volcano scheduler, under
both queue plugins: GPU nodes tainted as GKE taints them, two GPU pools chosen by
nodeSelector and by required node affinity, nodes short of CPU, a cordoned node, a
Queue whose capability in CPU binds fewer workers than its GPUs.

The cluster is tests/test_real_volcano.py's (4 kwok nodes x 8 GPUs, 64 CPUs each, a
real Prometheus scraping the scheduler); its API server runs the
ExtendedResourceToleration admission plugin (conftest.py), as GKE, EKS and AKS do, so a
pod asking for `nvidia.com/gpu` tolerates `nvidia.com/gpu:NoSchedule` without saying so. Each test
shapes the nodes (taints, labels, cordon, pods holding CPU) through the API and puts them
back afterwards. The daemon runs as `python -m autoscaler run` with default settings.

In each: the daemon grows the job to what its workers fit, and every worker it asked
for is bound and Running within two cycles; none stays Unschedulable. Each failed on the
daemon before node fit by shape (it dropped every tainted node, and took any worker to
fit any node with an idle GPU).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubeserver import EnvTest
from test_real_volcano import (
    INTERVAL,
    Scene,
    running_within_two_cycles,
    scene,  # noqa: F401  (the fixture, on this module's cluster)
    settled,
    stamp,
)
from volcanokit import job_pods, unschedulable_pods, wait_running

pytestmark = [pytest.mark.prometheus, pytest.mark.asyncio(loop_scope="module")]

GPU = "nvidia.com/gpu"
MAX = "elastic-autoscaler.io/max-replicas"
NODES = [f"gpu-node-{i}" for i in range(1, 5)]
GKE_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}


def patch_node(api: EnvTest, name: str, body: dict[str, Any]) -> None:
    api.request("PATCH", f"/api/v1/nodes/{name}", body, content_type="application/merge-patch+json")


@pytest.fixture
def nodes(scene: Scene) -> Iterator[EnvTest]:
    """The test shapes the nodes; they are put back as the kit made them afterwards."""
    try:
        yield scene.api
    finally:
        for name in NODES:
            patch_node(
                scene.api,
                name,
                {
                    "metadata": {"labels": {"accelerator": None}},
                    "spec": {"taints": None, "unschedulable": None},
                },
            )


def job(
    scene: Scene,
    name: str,
    queue: str,
    replicas: int,
    *,
    max_replicas: int | None = None,
    cpu: str = "1",
    pod_spec: dict[str, Any] | None = None,
    min_available: int | None = None,
) -> None:
    """A Volcano Job of one task `worker` of 1-GPU pods (elastic with `max_replicas`,
    its min the gang's `min_available`, all of them unless said), its pod spec extended
    by `pod_spec` (nodeSelector, affinity...)."""
    resources = {GPU: "1", "cpu": cpu}
    spec: dict[str, Any] = {
        "restartPolicy": "OnFailure",
        "containers": [
            {
                "name": "train",
                "image": "example.com/train:1",
                "resources": {"requests": resources, "limits": resources},
            }
        ],
        **(pod_spec or {}),
    }
    meta: dict[str, Any] = {"name": name, "namespace": scene.ns}
    if max_replicas is not None:
        meta["annotations"] = {MAX: str(max_replicas)}
    scene.api.create(
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": meta,
            "spec": {
                "schedulerName": "volcano",
                "queue": queue,
                "minAvailable": replicas if min_available is None else min_available,
                "tasks": [{"name": "worker", "replicas": replicas, "template": {"spec": spec}}],
            },
        }
    )


def hold_cpu(scene: Scene, node: str, cpu: str) -> None:
    """A pod of another kind (no GPU) bound to `node`, holding `cpu` CPUs there."""
    scene.api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"loader-{node}", "namespace": scene.ns},
            "spec": {
                "nodeName": node,
                "containers": [
                    {
                        "name": "loader",
                        "image": "example.com/loader:1",
                        "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}},
                    }
                ],
            },
        }
    )


async def grows_to(scene: Scene, name: str, target: int, *, cycles: float = 3) -> None:
    """The daemon resizes `name` to `target`, not more; every worker it asked for is
    bound and Running within two cycles, none Unschedulable, and it stays there."""
    async with scene.daemon() as daemon:
        resize = await daemon.resized(name, cycles=cycles)
        assert resize["to"] == target, daemon.why(name)
        await running_within_two_cycles(scene, name, resize)
        await daemon.cycles_pass(1)
        assert scene.workers(name) == target, daemon.why(name)
        assert unschedulable_pods(scene.api, scene.ns) == []


# ---- GKE's GPU taint, tolerated through ExtendedResourceToleration -------------------------


@pytest.mark.timeout(120)
async def test_tainted_gpu_nodes_admit_workers_the_admission_plugin_lets_tolerate(
    scene: Scene,
    nodes: EnvTest,
) -> None:
    """Every node tainted nvidia.com/gpu=present:NoSchedule; the job's template says
    nothing of it, its pods tolerate it by ExtendedResourceToleration: it grows to all
    32 GPUs (before: HoldNoIdleGpus, every tainted node left out)."""
    for name in NODES:
        patch_node(nodes, name, {"spec": {"taints": [GKE_TAINT]}})
    queue = scene.queue("t")
    job(scene, "train", queue, 2, max_replicas=40)
    await settled(scene, queue, {"train": 2})
    await grows_to(scene, "train", 32)


@pytest.mark.timeout(120)
async def test_a_cordoned_node_in_a_tainted_pool_takes_no_worker(
    scene: Scene,
    nodes: EnvTest,
) -> None:
    """The GKE pool again, one node cordoned for maintenance: 24 GPUs take workers."""
    for name in NODES:
        patch_node(nodes, name, {"spec": {"taints": [GKE_TAINT]}})
    patch_node(nodes, NODES[3], {"spec": {"unschedulable": True}})
    queue = scene.queue("c")
    job(scene, "train", queue, 2, max_replicas=40)
    await settled(scene, queue, {"train": 2})
    await grows_to(scene, "train", 24)


# ---- two GPU pools: nodeSelector, required node affinity ----------------------------------


@pytest.mark.timeout(150)
async def test_pools_by_node_selector_and_by_required_affinity(
    scene: Scene,
    nodes: EnvTest,
) -> None:
    """Nodes 1-2 accelerator=a100, 3-4 h100; 12 GPUs of each pool held by a job pinned
    there. An elastic job pinned to a100 by nodeSelector and one pinned to h100 by
    required node affinity each grow by the 2 GPUs idle in their own pool, not by the
    idle GPUs of the cluster (before: 2 -> 6 and 4 workers Pending)."""
    for i, name in enumerate(NODES):
        labels = {"accelerator": "a100" if i < 2 else "h100"}
        patch_node(nodes, name, {"metadata": {"labels": labels}})
    a100 = {"nodeSelector": {"accelerator": "a100"}}
    h100 = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "accelerator", "operator": "In", "values": ["h100"]}
                            ]
                        }
                    ]
                }
            }
        }
    }
    queue = scene.queue("p")
    job(scene, "fill-a", queue, 12, pod_spec=a100)
    job(scene, "fill-h", queue, 12, pod_spec=h100)
    job(scene, "by-selector", queue, 2, max_replicas=8, pod_spec=a100)
    job(scene, "by-affinity", queue, 2, max_replicas=8, pod_spec=h100)
    await settled(scene, queue, {"fill-a": 12, "fill-h": 12, "by-selector": 2, "by-affinity": 2})
    async with scene.daemon() as daemon:
        for name in ("by-selector", "by-affinity"):
            resize = await daemon.resized(name, cycles=4)
            assert resize["to"] == 4, daemon.why(name)
            await running_within_two_cycles(scene, name, resize)
        await daemon.cycles_pass(1)
        assert {n: scene.workers(n) for n in ("by-selector", "by-affinity")} == {
            "by-selector": 4,
            "by-affinity": 4,
        }
        assert unschedulable_pods(scene.api, scene.ns) == []


# ---- nodes short of CPU ----------------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_nodes_short_of_cpu_take_no_worker(
    scene: Scene,
    nodes: EnvTest,
) -> None:
    """Other pods hold 60 of 64 CPUs on nodes 3 and 4; workers ask 1 GPU + 8 CPU: 16 fit
    (8 on each free node), not 32 (before: 24 asked for, 8 left Insufficient cpu)."""
    for name in NODES[2:]:
        hold_cpu(scene, name, "60")
    queue = scene.queue("cpu")
    job(scene, "train", queue, 2, max_replicas=40, cpu="8")
    await settled(scene, queue, {"train": 2})
    await grows_to(scene, "train", 16)


# ---- a Queue's capability in CPU --------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_a_queue_capability_in_cpu_binds_every_worker_asked_for(scene: Scene) -> None:
    """The Queue allows 100 CPU and 16 GPUs; workers ask 1 GPU + 8 CPU: both plugins bind
    12 of them (100 // 8), so the daemon grows 2 -> 12 and every worker is bound (before:
    16 asked for by the GPU capability alone, 4 left Pending on the queue's CPU)."""
    queue = f"{scene.ns}-qcpu"
    scene.api.apply_queue(queue, capability={"cpu": "100", GPU: "16"})
    scene.queues.append(queue)
    job(scene, "train", queue, 2, max_replicas=40, cpu="8")
    await settled(scene, queue, {"train": 2})
    await grows_to(scene, "train", 12)


# ---- a reclaim for a gang that needs most of a node ---------------------------------------------


def worker_nodes(scene: Scene, name: str) -> dict[int, str]:
    """Worker index -> the node its pod is bound to (pods are named <job>-worker-<i>)."""
    return {
        int(p.name.rsplit("-", 1)[1]): p.node or ""
        for p in job_pods(scene.api, scene.ns, name)
        if p.name.startswith(f"{name}-worker-")
    }


@pytest.mark.timeout(120)
async def test_a_gang_needing_most_of_a_node_gets_it_in_one_reclaim(scene: Scene) -> None:
    """An elastic job fills the 4 nodes (32 workers of 1 GPU + 8 CPU, min 1); a gang of
    one pod asking 1 GPU + 60 CPU arrives. In one resize the daemon takes back the
    workers of one whole node (the job's highest indices down to the lowest one on the
    node where that is fewest, as the scheduler placed them), the gang is bound within
    two cycles and nothing else is taken (before: one 8-CPU worker a cycle, a restart
    each, the gang Pending on Insufficient cpu until a node had emptied)."""
    queue = scene.queue("r")
    job(scene, "elastic", queue, 32, max_replicas=32, cpu="8", min_available=1)
    await settled(scene, queue, {"elastic": 32})
    where = worker_nodes(scene, "elastic")
    lowest = {n: min(i for i, m in where.items() if m == n) for n in set(where.values())}
    expected = max(lowest.values())  # the node freed with the fewest workers
    async with scene.daemon() as daemon:
        await daemon.first_cycle()
        job(scene, "gang", queue, 1, cpu="60")  # no annotation: not ours
        resize = await daemon.resized("elastic", cycles=4)
        assert (resize["reason"], resize["to"]) == ("ReclaimForPending", expected), daemon.why(
            "elastic"
        )
        left = stamp(resize) + 2 * INTERVAL - time.time()
        await wait_running(scene.api, scene.ns, "gang", 1, deadline_seconds=max(left, 0))
        await wait_running(scene.api, scene.ns, "elastic", expected, deadline_seconds=5)
        await daemon.cycles_pass(1)
        assert len(daemon.scales("elastic")) == 1, daemon.why("elastic")
        assert unschedulable_pods(scene.api, scene.ns) == []
