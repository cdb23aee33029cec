"""RBAC for real: deploy/'s ServiceAccount and roles applied to a real API server, a token
minted for that ServiceAccount (TokenRequest, as a pod's projected token), the daemon run
with it. It must work with no 403, and must be refused everything else: checked with
SelfSubjectAccessReview as the ServiceAccount itself.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import pytorchjob
from fakekube import eventually
from kubeserver import ApiError, EnvTest
from promserver import fake_prometheus
from test_faults import daemon_env, daemon_process, live_body

REPO = Path(__file__).resolve().parents[1]
NS = "elastic-autoscaler"  # where deploy/ puts the daemon, its ServiceAccount and Lease
STATUS = "elastic-autoscaler-status"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")

pytestmark = pytest.mark.skipif(
    shutil.which("kubectl") is None, reason="kubectl renders the kustomizations"
)


def _rbac_objects(target: str) -> list[dict[str, Any]]:
    rendered = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "deploy" / target)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return [o for o in yaml.safe_load_all(rendered) if o and o["kind"] in RBAC_KINDS]


def _apply_rbac(envtest: EnvTest, target: str) -> None:
    objs = _rbac_objects(target)
    # an overlay that drops an object of the base (dry-run: the write ClusterRole, the
    # Lease Role and their bindings) must not inherit it from an earlier apply
    keep = {(o["kind"], o["metadata"]["name"]) for o in objs}
    for obj in _rbac_objects("base"):
        if (obj["kind"], obj["metadata"]["name"]) not in keep:
            envtest.delete(obj)
    for obj in objs:
        envtest.apply(obj)


def _can(
    envtest: EnvTest,
    token: str,
    verb: str,
    resource: str,
    *,
    group: str = "",
    namespace: str = "",
    name: str = "",
    sub: str = "",
) -> bool:
    attrs = {
        "verb": verb,
        "resource": resource,
        "group": group,
        "namespace": namespace,
        "name": name,
        "subresource": sub,
    }
    review = envtest.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {k: v for k, v in attrs.items() if v}},
        },
        token=token,
    )
    return bool(review["status"]["allowed"])


KF, VC, VB = "kubeflow.org", "scheduling.volcano.sh", "batch.volcano.sh"
# (verb, resource, group, namespace, name, subresource) the daemon must NOT be able to do
FORBIDDEN = [
    ("delete", "pytorchjobs", KF, "team", "", ""),
    ("create", "pytorchjobs", KF, "team", "", ""),
    ("update", "pytorchjobs", KF, "team", "j", ""),
    ("patch", "pytorchjobs", KF, "team", "j", "status"),
    ("patch", "pytorchjobs", KF, "team", "j", "scale"),
    ("update", "pytorchjobs", KF, "team", "j", "scale"),
    ("delete", "paddlejobs", KF, "team", "", ""),
    ("patch", "paddlejobs", KF, "team", "j", "scale"),
    ("patch", "paddlejobs", KF, "team", "j", "status"),
    ("create", "jobs", VB, "team", "", ""),
    ("delete", "jobs", VB, "team", "j", ""),
    ("patch", "jobs", VB, "team", "j", "status"),
    ("patch", "jobs", "batch", "team", "j", ""),  # a batch/v1 Job is not ours
    ("patch", "mpijobs", KF, "team", "j", ""),
    ("get", "secrets", "", "team", "", ""),
    ("list", "secrets", "", NS, "", ""),
    ("create", "pods", "", "team", "", ""),
    ("delete", "pods", "", "team", "", ""),
    ("get", "nodes", "", "", "n", ""),
    ("patch", "nodes", "", "", "n", ""),
    ("get", "pods", "", "team", "p", ""),
    ("get", "pods", "", "team", "p", "log"),
    ("create", "pods", "", "team", "p", "exec"),
    ("patch", "events", "", "team", "e", ""),
    ("delete", "events", "", "team", "e", ""),
    ("patch", "podgroups", VC, "team", "pg", ""),
    ("update", "queues", VC, "", "q", ""),
    ("delete", "queues", VC, "", "q", ""),
    ("update", "leases", "coordination.k8s.io", "kube-system", "elastic-autoscaler", ""),
    ("create", "leases", "coordination.k8s.io", "kube-system", "", ""),
    ("update", "leases", "coordination.k8s.io", NS, "someone-elses-lease", ""),
    ("get", "leases", "coordination.k8s.io", NS, "someone-elses-lease", ""),
    ("delete", "leases", "coordination.k8s.io", NS, "elastic-autoscaler", ""),
    ("list", "leases", "coordination.k8s.io", NS, "", ""),
    # the status object: only ours, in our namespace, never listed or deleted
    ("get", "configmaps", "", NS, "elastic-autoscaler-config", ""),
    ("update", "configmaps", "", NS, "someone-elses", ""),
    ("patch", "configmaps", "", "team", "elastic-autoscaler-status", ""),
    ("create", "configmaps", "", "team", "", ""),
    ("delete", "configmaps", "", NS, "elastic-autoscaler-status", ""),
    ("list", "configmaps", "", NS, "", ""),
    ("watch", "configmaps", "", NS, "", ""),
    ("create", "clusterrolebindings", "rbac.authorization.k8s.io", "", "", ""),
    ("impersonate", "serviceaccounts", "", NS, "", ""),
    # HPAs are only listed and watched: a job one scales is left to it, never the HPA
    ("get", "horizontalpodautoscalers", "autoscaling", "team", "h", ""),
    ("patch", "horizontalpodautoscalers", "autoscaling", "team", "h", ""),
    ("delete", "horizontalpodautoscalers", "autoscaling", "team", "h", ""),
    ("create", "horizontalpodautoscalers", "autoscaling", "team", "", ""),
    # the caches list and watch; nothing GETs one object of these kinds
    ("get", "pytorchjobs", KF, "team", "j", ""),
    ("get", "paddlejobs", KF, "team", "j", ""),
    ("get", "jobs", VB, "team", "j", ""),
    ("get", "podgroups", VC, "team", "pg", ""),
    ("get", "queues", VC, "", "q", ""),
    ("get", "priorityclasses", "scheduling.k8s.io", "", "high", ""),
]
NEEDED = [
    ("list", "pytorchjobs", KF, "", "", ""),
    ("watch", "pytorchjobs", KF, "", "", ""),
    ("list", "paddlejobs", KF, "", "", ""),
    ("watch", "jobs", VB, "", "", ""),
    ("list", "podgroups", VC, "", "", ""),
    ("watch", "queues", VC, "", "", ""),
    ("list", "priorityclasses", "scheduling.k8s.io", "", "", ""),
    ("list", "nodes", "", "", "", ""),
    ("watch", "nodes", "", "", "", ""),
    ("list", "pods", "", "", "", ""),
    ("watch", "pods", "", "", "", ""),
    ("list", "horizontalpodautoscalers", "autoscaling", "", "", ""),
    ("watch", "horizontalpodautoscalers", "autoscaling", "", "", ""),
    # the status object, written by the leader and by a dry run alike
    ("get", "configmaps", "", NS, "elastic-autoscaler-status", ""),
    ("patch", "configmaps", "", NS, "elastic-autoscaler-status", ""),
    ("update", "configmaps", "", NS, "elastic-autoscaler-status", ""),
    ("create", "configmaps", "", NS, "", ""),
]
WRITES = [
    ("patch", "pytorchjobs", KF, "team", "j", ""),
    ("patch", "paddlejobs", KF, "team", "j", ""),
    ("patch", "jobs", VB, "team", "j", ""),
    ("create", "events", "", "team", "", ""),
    ("get", "leases", "coordination.k8s.io", NS, "elastic-autoscaler", ""),
    ("update", "leases", "coordination.k8s.io", NS, "elastic-autoscaler", ""),
    ("create", "leases", "coordination.k8s.io", NS, "", ""),
]


def _check(envtest: EnvTest, token: str, rows: list[tuple[str, ...]], allowed: bool) -> None:
    wrong = [
        row
        for row in rows
        if _can(
            envtest, token, row[0], row[1], group=row[2], namespace=row[3], name=row[4], sub=row[5]
        )
        != allowed
    ]
    assert not wrong, f"{'refused' if allowed else 'allowed'}: {wrong}"


async def _status_written(envtest: EnvTest, mode: str) -> None:
    """The daemon wrote its status object with the shipped RBAC (a 403 would be logged)."""

    def written() -> bool:
        try:
            cm = envtest.request("GET", f"/api/v1/namespaces/{NS}/configmaps/{STATUS}")
        except ApiError:
            return False
        return f'"mode": "{mode}"' in cm["data"]["status"]

    await eventually(written, 20, 0.1, f"the status object written ({mode})")


def _job(ns: str, queue: str) -> dict[str, Any]:
    job = pytorchjob("j", ns, queue=queue, replicas=1, active=1, max_replicas=4)
    job.pop("status")
    job["metadata"] = {"name": "j", "namespace": ns}
    return job


@pytest.mark.timeout(120)
async def test_the_shipped_rbac_runs_the_daemon_and_allows_nothing_else(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    with contextlib.suppress(ApiError):
        envtest.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    queue = f"{real_ns}-q"
    envtest.apply_queue(queue)  # a job whose Queue is missing holds
    envtest.create(_job(real_ns, queue))
    envtest.patch_status(_job(real_ns, queue), {"replicaStatuses": {"Worker": {"active": 1}}})

    # live: deploy/base
    _apply_rbac(envtest, "base")
    token = envtest.mint_token(NS, "elastic-autoscaler")
    _check(envtest, token, NEEDED + WRITES, allowed=True)
    _check(envtest, token, FORBIDDEN, allowed=False)
    kubeconfig = envtest.kubeconfig(token, name="elastic-autoscaler")
    async with fake_prometheus(live_body(**{queue: 3})) as prom:
        env = daemon_env(
            tmp_path,
            kubeconfig,
            prom.url,
            namespaces=f'["{real_ns}"]',
            leader_election="true",
            identity="replica-1",
            lease_namespace=NS,
            interval_seconds=3600,
            min_interval_seconds=0,
        )
        async with daemon_process(env) as proc:
            cycle = await proc.wait_for("cycle", 60, result="ok")
            assert cycle["writes"] == {"applied": 1}, cycle
            await _status_written(envtest, "live")
            synced = proc.events("caches synced")
            assert len(synced) == 1 and synced[0]["jobs"] == 1, synced
            assert proc.events("waiting for the Kubernetes API")[0]["url"] == envtest.url
            # and at start it said, asking with a dry run, that it may write its status
            (checked,) = proc.events("status.check")
            assert checked["ok"] is True, checked
            lease = envtest.request(
                "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/elastic-autoscaler"
            )
            assert lease["spec"]["holderIdentity"] == "replica-1"
            assert await proc.stop() == 0
        assert not [line for line in proc.raw if "HTTP 403" in line or "orbidden" in line]
    job = envtest.get(_job(real_ns, queue))
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    events = envtest.request("GET", f"/api/v1/namespaces/{real_ns}/events")["items"]
    assert [e["reason"] for e in events] == ["ScaleUpIdleGpus"]
    released = envtest.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/elastic-autoscaler"
    )
    assert not released["spec"].get("holderIdentity"), released["spec"]  # SIGTERM gave it up

    # dry run: deploy/overlays/dry-run reads only, and the daemon needs no more
    _apply_rbac(envtest, "overlays/dry-run")
    _check(envtest, token, NEEDED, allowed=True)
    _check(envtest, token, FORBIDDEN + WRITES, allowed=False)
    # the user shrinks the job again: there is something to plan
    envtest.request(
        "PATCH",
        f"/apis/{KF}/v1/namespaces/{real_ns}/pytorchjobs/j",
        {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 1}}}},
        content_type="application/merge-patch+json",
    )
    envtest.patch_status(_job(real_ns, queue), {"replicaStatuses": {"Worker": {"active": 1}}})
    rv = envtest.get(_job(real_ns, queue))["metadata"]["resourceVersion"]
    async with fake_prometheus(live_body(**{queue: 3})) as prom:
        env = daemon_env(
            tmp_path,
            kubeconfig,
            prom.url,
            namespaces=f'["{real_ns}"]',
            dry_run="true",
            leader_election="true",
            lease_namespace=NS,
            interval_seconds=3600,
            min_interval_seconds=0,
            cooldown_seconds=0,
            cooldown_restart_cost_factor=0,  # no cooldown at all: the factor would set one
        )
        async with daemon_process(env) as proc:
            cycle = await proc.wait_for("cycle", 60, result="ok")
            assert cycle["writes"] == {"dry_run": 1}, cycle
            await _status_written(envtest, "dry-run")
            assert proc.events("status.check")[0]["ok"] is True  # the overlay keeps it
            assert await proc.stop() == 0
        assert not [line for line in proc.raw if "HTTP 403" in line or "orbidden" in line]
    assert envtest.get(_job(real_ns, queue))["metadata"]["resourceVersion"] == rv
    _apply_rbac(envtest, "base")  # leave the shared server as the base ships it
