"""Pods replaced on the real API server, as a kubelet restarting them is seen (deleted,
created again bound to a node, Running through /status): the daemon's next snapshot is
assembled from what changed (parse.delta), equal to the whole assembly of its records,
with the very objects of the cycle before for the jobs and nodes none of whose pods
changed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from builders import NOW, pytorchjob
from fakekube import eventually
from kubeserver import EnvTest
from promserver import fake_prometheus
from test_loop import Daemon, free_body, settings_for

from autoscaler.read.parse import assemble, delta

ALLOCATABLE = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti", "pods": "110"}


def _node(envtest: EnvTest, name: str) -> None:
    envtest.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    envtest.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        {"status": {"allocatable": ALLOCATABLE, "capacity": ALLOCATABLE}},
        content_type="application/merge-patch+json",
    )


def _worker(ns: str, job: dict[str, Any], index: int, node: str) -> dict[str, Any]:
    """A worker pod as training-operator makes it, bound to `node`."""
    name = job["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-worker-{index}",
            "namespace": ns,
            "labels": {
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(index),
            },
            "annotations": {"scheduling.k8s.io/group-name": name},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": name,
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "pytorch",
                    "image": "train:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "4"}},
                }
            ],
        },
    }


def _replace(envtest: EnvTest, pod: dict[str, Any]) -> None:
    """Deleted, created again, then Running: a kubelet's restart as the API sees it."""
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods"
    envtest.request("DELETE", f"{path}/{meta['name']}?gracePeriodSeconds=0")
    envtest.create(pod)
    envtest.request(
        "PATCH",
        f"{path}/{meta['name']}/status",
        {"status": {"phase": "Running"}},
        content_type="application/merge-patch+json",
    )


@pytest.fixture
def nodes(envtest: EnvTest, real_ns: str) -> Iterator[list[str]]:
    """4 nodes of 8 GPUs, deleted after the test with the pods bound to them: the API
    server is shared, and a later test's daemon would see them (their GPUs taken, node
    fit on where it expects no nodes at all)."""
    names = [f"{real_ns}-n{i}" for i in range(4)]
    for name in names:
        _node(envtest, name)
    try:
        yield names
    finally:
        envtest.request("DELETE", f"/api/v1/namespaces/{real_ns}/pods?gracePeriodSeconds=0")
        for name in names:
            envtest.request("DELETE", f"/api/v1/nodes/{name}")


async def test_replaced_pods_are_assembled_from_what_changed(
    envtest: EnvTest, real_ns: str, nodes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = f"{real_ns}-q"
    jobs = []
    for i in range(3):
        job = pytorchjob(f"job-{i}", real_ns, queue=queue, replicas=2, max_replicas=4)
        body = {k: v for k, v in job.items() if k != "status"}
        body["metadata"] = {"name": f"job-{i}", "namespace": real_ns}
        jobs.append(envtest.create(body))
    # job-0 on n0, job-1 on n1, job-2 on n3; n2 empty
    pods = {
        (j, w): _worker(real_ns, jobs[j], w, nodes[j if j < 2 else 3])
        for j in range(3)
        for w in range(2)
    }
    for pod in pods.values():
        envtest.create(pod)

    async with fake_prometheus(free_body(**{queue: 2})) as prom:
        settings = settings_for(prom.url, namespaces=[real_ns], node_fit=True)
        async with Daemon(envtest, settings, dry_run=True) as d:
            await d.controller.run_once(NOW)
            source = d.controller.source
            before = source._assembled[1]
            wholes: list[Any] = []
            whole = delta.assemble
            monkeypatch.setattr(delta, "assemble", lambda r: wholes.append(r) or whole(r))
            # job-0's worker-1 restarted on another node; job-1's worker-0 gone for good
            _replace(envtest, {**pods[0, 1], "spec": {**pods[0, 1]["spec"], "nodeName": nodes[2]}})
            envtest.request(
                "DELETE", f"/api/v1/namespaces/{real_ns}/pods/job-1-worker-0?gracePeriodSeconds=0"
            )
            cache = next(c for c in d.kube._caches if c.resource.kind == "Pod")

            def seen() -> bool:
                moved = cache.items.get((real_ns, "job-0-worker-1"))
                return (
                    moved is not None
                    and moved.node == nodes[2]
                    and ((real_ns, "job-1-worker-0") not in cache.items)
                )

            await eventually(seen, 10, message="the pods' events")
            await d.controller.run_once(NOW)
            records, after = source._assembled
    assert after == assemble(records)
    assert wholes == []  # assembled from what changed
    was = {j.ref.name: j for j in before.jobs if j.ref.namespace == real_ns}
    now = {j.ref.name: j for j in after.jobs if j.ref.namespace == real_ns}
    assert now["job-2"] is was["job-2"]
    assert now["job-0"].worker_nodes == (nodes[0], nodes[2])
    assert now["job-1"].worker_nodes == ("", nodes[1])
    same = {n.name for n in after.nodes or () if any(n is m for m in before.nodes or ())}
    assert nodes[3] in same and not {nodes[0], nodes[1], nodes[2]} & same
    assert {n.name for n in after.nodes or ()} - set(nodes) <= same
