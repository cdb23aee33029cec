"""Queues sharing one cluster, against the REAL Volcano scheduler under both plugins
(docs/design.md "Sharing a cluster between queues"): every queue grows to what it is
owed, and a queue's waiting gang gets back what another queue borrowed of its share.

The same kit and daemon wiring as test_real_volcano.py (the session's cluster of each
plugin, 4 nodes x 8 GPUs): each queue sets both `deserved` (what the capacity plugin
owes it) and a `weight` in the same ratio (what the proportion plugin shares by), so the
same expectations hold under either plugin.
"""

from __future__ import annotations

import time

import pytest
import test_real_volcano
from test_real_volcano import (
    INTERVAL,
    Scene,
    running_within_two_cycles,
    settled,
    stamp,
)
from volcanokit import podgroup_phases, unschedulable_pods, wait_running

pytestmark = [pytest.mark.prometheus, pytest.mark.asyncio(loop_scope="module")]

scene = test_real_volcano.scene  # the fixture: a namespace and queues of its own


def owed_queues(scene: Scene, deserved: dict[str, int]) -> dict[str, str]:
    """Queues by suffix, each deserved its GPUs, weight in the same ratio."""
    unit = min(deserved.values())
    return {
        s: scene.queue(s, weight=d // unit, deserved_gpus=d, capability_gpus=32)
        for s, d in deserved.items()
    }


async def all_bound(scene: Scene, daemon, names: list[str]) -> dict[str, int]:
    """Each job's workers as the daemon sized them, every one bound and Running within
    two cycles of its resize."""
    sizes = {n: scene.workers(n) for n in names}
    for name in names:
        for resize in daemon.scales(name)[-1:]:
            await running_within_two_cycles(scene, name, resize)
    return sizes


@pytest.mark.timeout(150)
async def test_two_queues_each_grow_to_what_they_are_owed(scene: Scene) -> None:
    """The issue's case: two queues owed 16 each, each running an elastic job at 2 (max
    24) and a rigid gang of 4, 20 GPUs idle. The first queue planned used to take 20 and
    the second none (capacity); now each grows by the 10 it is owed, and the scheduler
    binds every worker."""
    q = owed_queues(scene, {"a": 16, "b": 16})
    for s in ("a", "b"):
        scene.job(f"el-{s}", q[s], replicas=2, min_available=2, max_replicas=24)
        scene.job(f"rigid-{s}", q[s], replicas=4, min_available=4)
    for s in ("a", "b"):
        await settled(scene, q[s], {f"el-{s}": 2, f"rigid-{s}": 4})

    async with scene.daemon() as daemon:
        for s in ("a", "b"):
            await daemon.resized(f"el-{s}", cycles=4)
        await daemon.cycles_pass(1)
        sizes = await all_bound(scene, daemon, ["el-a", "el-b"])
        assert sizes == {"el-a": 12, "el-b": 12}, (sizes, daemon.why("el-b"))
        assert unschedulable_pods(scene.api, scene.ns) == []


@pytest.mark.timeout(150)
async def test_three_queues_of_different_shares_each_grow_to_theirs(scene: Scene) -> None:
    """Owed 8, 16 and 8 of 32: each queue's job (at 2, max 30) grows to exactly its
    share, and nothing any queue asked for stays unbound."""
    q = owed_queues(scene, {"a": 8, "b": 16, "c": 8})
    for s in q:
        scene.job(f"el-{s}", q[s], replicas=2, min_available=2, max_replicas=30)
    for s in q:
        await settled(scene, q[s], {f"el-{s}": 2})

    async with scene.daemon() as daemon:
        for s in q:
            await daemon.resized(f"el-{s}", cycles=4)
        await daemon.cycles_pass(1)
        sizes = await all_bound(scene, daemon, [f"el-{s}" for s in q])
        assert sizes == {"el-a": 8, "el-b": 16, "el-c": 8}, (sizes, daemon.why("el-b"))
        assert unschedulable_pods(scene.api, scene.ns) == []


@pytest.mark.timeout(180)
async def test_a_lent_share_comes_back_to_its_queues_gang(scene: Scene) -> None:
    """Queues A and B owed 16 each. A's elastic job grows 2 -> 30 into B's idle share
    (nobody wanted it). B's gang of 20 arrives, beyond B's share: it takes nothing from A.
    B's gang of 8 arrives, within B's share: A gives back 8 workers (ReclaimForQueue) and
    the scheduler runs the gang within two cycles of that."""
    q = owed_queues(scene, {"a": 16, "b": 16})
    scene.job("lender", q["a"], replicas=2, min_available=2, max_replicas=30)
    scene.job("b-rigid", q["b"], replicas=2, min_available=2)
    await settled(scene, q["a"], {"lender": 2})
    await settled(scene, q["b"], {"b-rigid": 2})

    env_cooldown = {"AUTOSCALER_RECLAIM_COOLDOWN_SECONDS": "3"}
    async with scene.daemon(extra_env=env_cooldown) as daemon:
        grown = await daemon.resized("lender")
        assert grown["to"] == 30, daemon.why("lender")
        await running_within_two_cycles(scene, "lender", grown)

        scene.job("too-big", q["b"], replicas=20, min_available=20)
        await daemon.cycles_pass(2)
        assert scene.workers("lender") == 30, daemon.why("lender")
        assert len(daemon.scales("lender")) == 1

        scene.job("gang", q["b"], replicas=8, min_available=8)
        deadline = time.monotonic() + 4 * INTERVAL + 10
        while len(daemon.scales("lender")) < 2:
            assert time.monotonic() < deadline, daemon.why("lender")
            await daemon.cycles_pass(1)
        back = daemon.scales("lender")[1]
        assert (back["reason"], back["to"]) == ("ReclaimForQueue", 22), daemon.why("lender")
        left = stamp(back) + 2 * INTERVAL - time.time()
        await wait_running(scene.api, scene.ns, "gang", 8, deadline_seconds=max(left, 1))
        await daemon.cycles_pass(1)
        assert scene.workers("lender") == 22  # not grown back into the gang's GPUs
        assert podgroup_phases(scene.api, scene.ns).get("too-big") in ("Pending", "Inqueue")


@pytest.mark.timeout(120)
async def test_a_gang_with_gpus_in_limits_only_gets_its_room(scene: Scene) -> None:
    """Most manifests write `limits: {nvidia.com/gpu: 1}` only: Volcano's controller then
    writes the PodGroup's minResources with no GPU in it. The daemon reads the gang's need
    from its Job's template: an elastic job holding 28 of 32 GPUs (min 4) gives back the
    4 workers the gang of 8 lacks, and the scheduler runs all 8 of the gang's pods."""
    queue = scene.queue("lim")
    scene.job("elastic", queue, replicas=28, min_available=4, max_replicas=28)
    await settled(scene, queue, {"elastic": 28})

    async with scene.daemon() as daemon:
        await daemon.first_cycle()
        scene.job("gang", queue, replicas=8, min_available=8, limits_only=True)
        resize = await daemon.resized("elastic", cycles=4)
        assert (resize["reason"], resize["to"]) == ("ReclaimForPending", 24), daemon.why("elastic")
        left = stamp(resize) + 2 * INTERVAL - time.time()
        await wait_running(scene.api, scene.ns, "gang", 8, deadline_seconds=max(left, 1))
        await daemon.cycles_pass(1)
        assert scene.workers("elastic") == 24
        assert unschedulable_pods(scene.api, scene.ns) == []


@pytest.mark.timeout(120)
async def test_a_job_whose_pods_never_appear_stops_holding_its_queues_room(scene: Scene) -> None:
    """No training-operator runs beside this kit: a PyTorchJob's pods never appear. Its 2
    workers count as GPUs in flight only for no_pods_timeout_seconds (0 here); then an
    elastic job of the same queue grows into every idle GPU (all 32, not 30), the
    scheduler binds them, and the plan says why on the stuck job (HoldNoPods)."""
    queue = scene.queue("np")
    scene.job("elastic", queue, replicas=2, min_available=2, max_replicas=40)
    await settled(scene, queue, {"elastic": 2})
    worker = {
        "replicas": 2,
        "template": {
            "spec": {
                "containers": [
                    {"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ]
            }
        },
    }
    stuck = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "stuck", "namespace": scene.ns},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"queue": queue}},
            "pytorchReplicaSpecs": {"Worker": worker},
        },
    }
    scene.api.create(stuck)
    try:
        async with scene.daemon(extra_env={"AUTOSCALER_NO_PODS_TIMEOUT_SECONDS": "0"}) as daemon:
            resize = await daemon.resized("elastic")
            assert resize["to"] == scene.volcano.kit.gpus, daemon.why("elastic")
            await running_within_two_cycles(scene, "elastic", resize)
            assert unschedulable_pods(scene.api, scene.ns) == []
        planned = scene.plan({"AUTOSCALER_NO_PODS_TIMEOUT_SECONDS": "0"})
        (job,) = [j for j in planned["jobs"] if j["name"] == "stuck"]
        assert any(n.startswith("HoldNoPods: no pods for 2 of its workers") for n in job["notes"])
    finally:
        scene.api.delete(stuck)
