"""Volcano's newer queue model on the REAL scheduler (issue 46): the capacity plugin's
queue tree (`enableHierarchy: true`, Queue spec.parent) and the nodegroup plugin's
per-queue node groups and limits.

Each module-scoped stack is the kit with its own scheduler conf (tests/data/volcano/),
4 nodes x 8 GPUs and a real Prometheus; the daemon runs as `python -m autoscaler run`
with default settings (test_real_volcano.Scene). What is checked is the issue's "Done
when": growth never exceeds an ancestor's room and every asked pod is bound within 2
cycles; a top-level queue with no capability grows; a gang under a full parent gets room
from its sibling and runs; growth stops at a node group's limit and every asked pod is
bound.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from conftest import API_ARGS
from promserver import HAVE_PROMETHEUS, SKIP_REASON, prometheus_server
from test_real_volcano import (
    INTERVAL,
    LEASE_NAMESPACE,
    Scene,
    running_within_two_cycles,
    settled,
    stamp,
)
from volcanokit import (
    GPU,
    RealVolcano,
    clean_namespace,
    delete_queue,
    kit_problem,
    unschedulable_pods,
    volcano_kit,
    wait_running,
)

pytestmark = [pytest.mark.prometheus, pytest.mark.asyncio(loop_scope="module")]

CONFS = Path(__file__).resolve().parent / "data" / "volcano"
NODE_GROUP = "volcano.sh/nodegroup-name"


@contextlib.contextmanager
def stack(conf: str) -> Iterator[RealVolcano]:
    problem = kit_problem()
    if problem:
        pytest.skip(f"real Volcano: {problem}")
    if not HAVE_PROMETHEUS:
        pytest.skip(SKIP_REASON)
    with (
        volcano_kit(str(CONFS / conf), nodes=4, api_args=API_ARGS) as kit,
        prometheus_server(kit.targets) as prometheus,
    ):
        with contextlib.suppress(Exception):
            kit.api.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}}
            )
        yield RealVolcano(kit, prometheus)


@pytest.fixture(scope="module")
def hierarchy() -> Iterator[RealVolcano]:
    with stack("capacity-hierarchy.conf") as volcano:
        yield volcano


@pytest.fixture(scope="module")
def nodegroups() -> Iterator[RealVolcano]:
    with stack("capacity-nodegroup.conf") as volcano:
        yield volcano


class Queues:
    """A test's queues: made parents first, deleted children first."""

    def __init__(self, scene: Scene) -> None:
        self.scene, self.made = scene, list[str]()

    def __call__(
        self,
        suffix: str,
        *,
        parent: str | None = None,
        capability: int | None = None,
        deserved: int | None = None,
        **spec: Any,
    ) -> str:
        name = f"{self.scene.ns}-{suffix}"
        if parent is not None:
            spec["parent"] = parent
        if capability is not None:
            spec["capability"] = {GPU: str(capability)}
        if deserved is not None:
            spec["deserved"] = {GPU: str(deserved)}
        annotations = spec.pop("annotations", None)
        body = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
            "spec": {"weight": 1, **spec},
        }
        self.scene.api.apply(body)
        self.made.append(name)
        return name

    def delete(self) -> None:
        for name in reversed(self.made):
            with contextlib.suppress(Exception):
                delete_queue(self.scene.api, name)


@contextlib.asynccontextmanager
async def corner(volcano: RealVolcano, home: Path) -> AsyncIterator[tuple[Scene, Queues]]:
    scene = Scene(volcano, volcano.api.create_namespace("vq"), home)
    queues = Queues(scene)
    try:
        yield scene, queues
    finally:
        clean_namespace(volcano.api, scene.ns)
        queues.delete()


@pytest_asyncio.fixture(loop_scope="module")
async def tree(hierarchy: RealVolcano, tmp_path: Path) -> AsyncIterator[tuple[Scene, Queues]]:
    async with corner(hierarchy, tmp_path) as found:
        yield found


@pytest_asyncio.fixture(loop_scope="module")
async def groups(nodegroups: RealVolcano, tmp_path: Path) -> AsyncIterator[tuple[Scene, Queues]]:
    async with corner(nodegroups, tmp_path) as found:
        yield found


async def all_bound(scene: Scene, daemon: Any, name: str) -> int:
    """The job's workers as the daemon sized them, every one bound within two cycles."""
    for resize in daemon.scales(name)[-1:]:
        await running_within_two_cycles(scene, name, resize)
    return scene.workers(name)


# ---- the queue tree ---------------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_a_tree_grows_leaves_within_every_ancestor(tree: tuple[Scene, Queues]) -> None:
    """dept-a may hold 16 (team-a2 holds 10): team-a1's job grows 2 -> 6, not 10, and all
    6 are bound; dept-b sets no capability (its real capacity series is the int64
    ceiling): team-b1's job grows too. Nothing is left Unschedulable."""
    scene, queue = tree
    dept_a = queue("dept-a", capability=16)
    a1, a2 = queue("a1", parent=dept_a), queue("a2", parent=dept_a)
    dept_b = queue("dept-b")
    b1 = queue("b1", parent=dept_b)
    scene.job("hold-a2", a2, replicas=10, min_available=10)
    scene.job("el-a1", a1, replicas=2, min_available=2, max_replicas=10)
    scene.job("el-b1", b1, replicas=2, min_available=2, max_replicas=8)
    await settled(scene, a2, {"hold-a2": 10})
    await settled(scene, a1, {"el-a1": 2})
    await settled(scene, b1, {"el-b1": 2})

    async with scene.daemon() as daemon:
        a1_grown = await daemon.resized("el-a1")
        b1_grown = await daemon.resized("el-b1")
        assert (a1_grown["to"], b1_grown["to"]) == (6, 8), daemon.why("el-a1")
        await daemon.cycles_pass(1)
        assert await all_bound(scene, daemon, "el-a1") == 6, daemon.why("el-a1")
        assert await all_bound(scene, daemon, "el-b1") == 8, daemon.why("el-b1")
        assert len(daemon.scales("el-a1")) == 1  # never asked past dept-a's room
        assert unschedulable_pods(scene.api, scene.ns) == []
        plan = scene.plan()
        reasons = {name: q.get("reason") for name, q in plan["queues"].items()}
        assert reasons[dept_a] == reasons[dept_b] == "HoldQueueParent", reasons


@pytest.mark.timeout(120)
async def test_a_gang_under_a_full_parent_gets_room_from_its_sibling(
    tree: tuple[Scene, Queues],
) -> None:
    """dept-a (16) is full: team-a2's elastic job holds 12, beyond its deserved 8. A gang
    of 4 in team-a1 (deserved 8, holding 4) arrives: team-a2's job gives back 4 workers
    (ReclaimForQueue) and the gang runs within two cycles; team-b1's job under dept-b,
    beyond its own deserved too, is not touched (its GPUs would not make dept-a's room)."""
    scene, queue = tree
    dept_a = queue("dept-a", capability=16)
    a1 = queue("a1", parent=dept_a, deserved=8)
    a2 = queue("a2", parent=dept_a, deserved=8)
    dept_b = queue("dept-b")
    b1 = queue("b1", parent=dept_b, deserved=1)
    scene.job("rigid-a1", a1, replicas=4, min_available=4)
    scene.job("el-a2", a2, replicas=12, min_available=2, max_replicas=12)
    scene.job("el-b1", b1, replicas=8, min_available=1, max_replicas=8)
    await settled(scene, a1, {"rigid-a1": 4})
    await settled(scene, a2, {"el-a2": 12})
    await settled(scene, b1, {"el-b1": 8})

    # the reclaim cooldown at its default: el-a2 was never resized by us, so it may give
    # way at once, and the cooldown then keeps the next cycle (a second after, before
    # Prometheus has scraped el-a2's 8) from cutting it again for the same gang
    async with scene.daemon() as daemon:
        await daemon.first_cycle()
        scene.job("gang", a1, replicas=4, min_available=4)
        back = await daemon.resized("el-a2", cycles=6)
        assert (back["reason"], back["to"]) == ("ReclaimForQueue", 8), daemon.why("el-a2")
        left = stamp(back) + 2 * INTERVAL - time.time()
        await wait_running(scene.api, scene.ns, "gang", 4, deadline_seconds=max(left, 1))
        await daemon.cycles_pass(1)
        assert scene.workers("el-b1") == 8 and daemon.scales("el-b1") == []
        assert scene.workers("el-a2") == 8


# ---- node groups ------------------------------------------------------------------------


def label_nodes(scene: Scene, groups: dict[str, str]) -> None:
    for node, group in groups.items():
        scene.api.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            {"metadata": {"labels": {NODE_GROUP: group}}},
            content_type="application/merge-patch+json",
        )
    scene.volcano.kit.wait_sessions(2)


def affinity(*required: str) -> dict[str, Any]:
    return {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(required)}}


@pytest.mark.timeout(120)
async def test_growth_stops_at_a_node_groups_limit_and_every_pod_is_bound(
    groups: tuple[Scene, Queues],
) -> None:
    """g1 = nodes 1-2, g2 = nodes 3-4. q-ng may use both, at most 4 GPUs on g1; another
    queue holds 8 on g2. q-ng's job at 2 grows to 12 (4 on g1, the rest of g2), not 16,
    every worker bound, and the plan names the bound."""
    scene, queue = groups
    label_nodes(
        scene, {"gpu-node-1": "g1", "gpu-node-2": "g1", "gpu-node-3": "g2", "gpu-node-4": "g2"}
    )
    limits = json.dumps({"g1": {GPU: "4"}})
    q_ng = queue(
        "q-ng",
        affinity=affinity("g1", "g2"),
        annotations={"volcano.sh/nodegroup-resource-limits": limits},
    )
    other = queue("other", affinity=affinity("g2"))
    scene.job("hold-g2", other, replicas=8, min_available=8)
    scene.job("el", q_ng, replicas=2, min_available=2, max_replicas=16)
    await settled(scene, other, {"hold-g2": 8})
    await settled(scene, q_ng, {"el": 2})

    async with scene.daemon() as daemon:
        grown = await daemon.resized("el")
        assert grown["to"] == 12, daemon.why("el")
        await daemon.cycles_pass(1)
        assert await all_bound(scene, daemon, "el") == 12, daemon.why("el")
        assert len(daemon.scales("el")) == 1
        assert unschedulable_pods(scene.api, scene.ns) == []
        said = [d.get("message", "") for d in daemon.decisions("el")]
        assert any(f"node group g1: queue {q_ng} at its limit of 4 GPUs" in m for m in said), said
