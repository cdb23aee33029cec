"""Faults a cluster hands the daemon, on a real kube-apiserver: a write the cluster refuses
(a real ValidatingAdmissionPolicy), a Queue deleted under its jobs, an API server that
goes away and comes back.

Each failed before its fix: the refused job kept its queue's idle GPUs every cycle (its
neighbour never grew) and no Event said why; a job whose Queue was deleted grew 1 -> 4 on
metrics still served; after an outage the first resize waited out a per-job back-off.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from builders import pytorchjob
from kubernetes_asyncio.client import ApiClient
from kubeserver import ApiError, EnvTest
from promserver import fake_prometheus
from test_faults import counter, metrics_text
from test_loop import Daemon, free_body, settings_for

from autoscaler.act.actuator import KubeActuator
from autoscaler.act.results import Outcome
from autoscaler.core.model import Decision, ObjectRef, Plan
from autoscaler.core.reasons import Reason
from autoscaler.settings import Settings

KF = "/apis/kubeflow.org/v1"


def _create_job(envtest: EnvTest, ns: str, name: str, **kw: Any) -> dict[str, Any]:
    labels = kw.pop("labels", None)
    obj = pytorchjob(name, ns, **kw)
    active = obj.pop("status")["replicaStatuses"]["Worker"]["active"]
    obj["metadata"] = {"name": name, "namespace": ns, **({"labels": labels} if labels else {})}
    envtest.create(obj)
    envtest.patch_status(obj, {"replicaStatuses": {"Worker": {"active": active}}})
    return envtest.get(obj)


def _replicas(envtest: EnvTest, ns: str, name: str) -> int:
    obj = envtest.request("GET", f"{KF}/namespaces/{ns}/pytorchjobs/{name}")
    return int(obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])


def _decision(plan: Plan, name: str) -> Decision:
    return next(d for d in plan.decisions if d.ref.name == name)


def _events(envtest: EnvTest, ns: str, name: str) -> list[dict[str, Any]]:
    items = envtest.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


async def _until(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds:g}s: {what}"
        await asyncio.sleep(0.05)


def _freeze_policy(envtest: EnvTest, ns: str, name: str, reason: str) -> None:
    """What a platform team writes: jobs labelled frozen=true keep their worker count."""
    envtest.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["kubeflow.org"],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["pytorchjobs"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.metadata.labels) || "
                        "!('frozen' in object.metadata.labels) || "
                        "object.metadata.labels['frozen'] != 'true' || "
                        "object.spec.pytorchReplicaSpecs['Worker'].replicas == "
                        "oldObject.spec.pytorchReplicaSpecs['Worker'].replicas",
                        "message": "frozen jobs keep their size",
                        "reason": reason,
                    }
                ],
            },
        }
    )
    envtest.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": f"{name}-binding"},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
                },
            },
        }
    )


def _refused_now(envtest: EnvTest, ns: str, name: str) -> bool:
    """The policy is in force (a server-side dry run of a resize is denied)."""
    try:
        envtest.request(
            "PATCH",
            f"{KF}/namespaces/{ns}/pytorchjobs/{name}?dryRun=All",
            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}},
            content_type="application/merge-patch+json",
        )
    except ApiError as exc:
        return "frozen jobs keep their size" in exc.body
    return False


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("reason", "status"), [("Forbidden", 403), ("Invalid", 422)])
async def test_a_refused_resize_holds_that_job_and_its_neighbour_takes_the_idle_gpus(
    envtest: EnvTest, real_ns: str, reason: str, status: int
) -> None:
    ns, queue, policy = real_ns, f"{real_ns}-q", f"{real_ns}-frozen"
    envtest.apply_queue(queue)
    _freeze_policy(envtest, ns, policy, reason)
    # fill grows the smallest job first: the frozen one would take all 3 idle GPUs
    _create_job(
        envtest, ns, "frozen", queue=queue, replicas=1, active=1, max_replicas=4,
        labels={"frozen": "true"},
    )  # fmt: skip
    _create_job(envtest, ns, "neighbour", queue=queue, replicas=2, active=2, max_replicas=5)
    await _until(lambda: _refused_now(envtest, ns, "frozen"), 30, "the policy in force")

    now = datetime.now(UTC)
    async with (
        fake_prometheus(free_body(**{queue: 3})) as prom,
        Daemon(envtest, settings_for(prom.url, namespaces=[ns])) as d,
    ):
        first = await d.controller.run_once(now)
        assert first.result == "ok"  # a refusal is an answer, not a failure
        [denied] = first.applied.results
        assert (denied.decision.ref.name, denied.outcome) == ("frozen", Outcome.DENIED)
        assert f"HTTP {status}" in denied.message and policy in denied.message

        # the next cycle knows before it plans: the frozen job holds, its share moves on
        second = await d.controller.run_once(now + timedelta(seconds=1))
        frozen = _decision(second.plan, "frozen")
        assert frozen.reason is Reason.WRITE_REFUSED and not frozen.changed
        assert policy in frozen.message and "frozen jobs keep their size" in frozen.message
        neighbour = _decision(second.plan, "neighbour")
        assert (neighbour.reason, neighbour.target) == (Reason.SCALE_UP_IDLE_GPUS, 5)
        assert [r.outcome for r in second.applied.results] == [Outcome.APPLIED]
        assert (_replicas(envtest, ns, "frozen"), _replicas(envtest, ns, "neighbour")) == (1, 5)

        third = await d.controller.run_once(now + timedelta(seconds=2))
        assert _decision(third.plan, "frozen").reason is Reason.WRITE_REFUSED
        assert third.applied.results == ()  # not asked again

        # one Event on the job says why: once per refusal, not per cycle
        warned = [e for e in _events(envtest, ns, "frozen") if e["reason"] == "HoldRefused"]
        assert len(warned) == 1 and warned[0]["type"] == "Warning", warned
        assert policy in warned[0]["message"] and "frozen jobs keep" in warned[0]["message"]
        text = metrics_text(d)
        assert counter(text, "elastic_autoscaler_writes_total", result="denied") == 1
        assert counter(text, "elastic_autoscaler_writes_total", result="error") == 0

        # the job changes (unfrozen) and the neighbour's workers run: asked again, lands
        unfrozen = envtest.request(
            "PATCH",
            f"{KF}/namespaces/{ns}/pytorchjobs/frozen",
            {"metadata": {"labels": {"frozen": "false"}}},
            content_type="application/merge-patch+json",
        )["metadata"]["resourceVersion"]
        envtest.patch_status(
            pytorchjob("neighbour", ns), {"replicaStatuses": {"Worker": {"active": 5}}}
        )
        # the cache holds the unfrozen version (of its labels it keeps nothing: none is read)
        await d.seen("PyTorchJob", "frozen", lambda j: j.resource_version == unfrozen)
        await d.seen("PyTorchJob", "neighbour", lambda j: j.active == 5)
        fourth = await d.controller.run_once(now + timedelta(seconds=3))
        assert [(r.decision.ref.name, r.outcome) for r in fourth.applied.results] == [
            ("frozen", Outcome.APPLIED)
        ]
        assert _replicas(envtest, ns, "frozen") == 4
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        suffix = "-binding" if kind.endswith("Binding") else ""
        envtest.delete(
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": policy + suffix},
            }
        )


@pytest.mark.timeout(60)
async def test_a_job_whose_queue_was_deleted_holds_whatever_its_metrics_say(
    envtest: EnvTest, real_ns: str
) -> None:
    ns, kept, gone = real_ns, f"{real_ns}-kept", f"{real_ns}-gone"
    envtest.apply_queue(kept)
    envtest.apply_queue(gone)
    _create_job(envtest, ns, "a", queue=kept, replicas=1, active=1, max_replicas=4)
    _create_job(envtest, ns, "b", queue=gone, replicas=1, active=1, max_replicas=4)
    envtest.delete({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                    "metadata": {"name": gone}})  # fmt: skip
    async with (
        # Volcano still serves the deleted queue's metrics for a while
        fake_prometheus(free_body(**{kept: 3, gone: 3})) as prom,
        Daemon(envtest, settings_for(prom.url, namespaces=[ns])) as d,
    ):
        queues = lambda: {q.name for q in d.kube.objects().queues}  # noqa: E731
        await _until(lambda: kept in queues() and gone not in queues(), 10, "queues seen")
        result = await d.controller.run_once(datetime.now(UTC))
        a, b = _decision(result.plan, "a"), _decision(result.plan, "b")
        assert (a.reason, a.target) == (Reason.SCALE_UP_IDLE_GPUS, 4)
        assert (b.reason, b.target) == (Reason.QUEUE_MISSING, 1)
        assert f"queue {gone}" in b.message and "no Queue object" in b.message
        assert result.plan.queues[gone].reason is Reason.QUEUE_MISSING
        assert (_replicas(envtest, ns, "a"), _replicas(envtest, ns, "b")) == (4, 1)


@pytest.mark.timeout(90)
async def test_no_write_back_off_outlives_an_api_server_outage(
    envtest: EnvTest, real_ns: str
) -> None:
    """The API server goes away mid-drain and comes back: the first resize goes at once,
    not after a per-job back-off earned while nothing could have landed."""
    job = _create_job(envtest, real_ns, "j", queue="q", replicas=1, active=1, max_replicas=4)
    decision = Decision(
        ref=ObjectRef(real_ns, "j", uid=job["metadata"]["uid"]),
        queue="q",
        current=1,
        target=4,
        reason=Reason.SCALE_UP_IDLE_GPUS,
        message="3 idle GPUs",
        min_replicas=1,
        max_replicas=4,
        gpus_per_worker=1,
        resource_version=job["metadata"]["resourceVersion"],
    )
    now = datetime.now(UTC)
    plan = Plan(now=now, decisions=(decision,))
    async with ApiClient(envtest.configuration()) as client:
        actuator = KubeActuator(Settings(kube_request_timeout_seconds=2).actuator_options(), client)
        envtest.stop_apiserver()
        try:
            down = await actuator.apply(plan, now)
        finally:
            envtest.start_apiserver()
        assert [r.outcome for r in down.results] == [Outcome.ERROR]
        assert down.retry_in is not None and down.retry_in <= 1  # the loop comes back soon
        await _until(lambda: actuator.pacer.retry_in() == 0, 5, "the 1 s pause over")
        back = await actuator.apply(plan, now + timedelta(seconds=2))
        assert [r.outcome for r in back.results] == [Outcome.APPLIED], back.results
        assert actuator.backoff_until(ObjectRef(real_ns, "j")) is None
    assert _replicas(envtest, real_ns, "j") == 4
