"""The real Kubeflow training-operator beside the real Volcano kit, for end-to-end tests.

`TRAINING_OPERATOR_KIT` names the kit's folder: `start.sh`/`stop.sh` and
`bin/training-operator` (Kubeflow's v1 operator, built from its own source). Started after
the Volcano kit (it exits without the PodGroup CRD), it turns a PyTorchJob or PaddleJob
into a Volcano PodGroup, pods and headless Services, and writes the job's status, exactly
as in a cluster; the real vc-scheduler binds those pods and kwok runs them. It is started
with `--no-webhook`: its webhook server listens on all interfaces (the binary has no flag
for its host), and these tests are not about its validation. `stop.sh` stops exactly the
process `start.sh` recorded, by PID.

What the kit is not: there is no garbage collector, so deleting a job leaves its pods,
Services, PodGroup and HPA (`clean_kubeflow` deletes them all, jobs first).

The helpers below are synchronous (the test's own requests against the real server).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeserver import ApiError, EnvTest
from volcanokit import (
    GPU,
    PODGROUPS,
    PODS,
    PodView,
    VolcanoKit,
    kit_problem,
    start_retrying,
)

KIT_ENV = "TRAINING_OPERATOR_KIT"
START_SECONDS = 120.0
PYTORCHJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
PADDLEJOBS = "/apis/kubeflow.org/v1/namespaces/{ns}/paddlejobs"
SERVICES = "/api/v1/namespaces/{ns}/services"
HPAS = "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers"
JOB_LABEL = "training.kubeflow.org/job-name"
TYPE_LABEL = "training.kubeflow.org/replica-type"
PADDLE_OPT_IN = "elastic-autoscaler.io/paddle-elastic"


def operator_problem() -> str | None:
    """Why the real training-operator (and the Volcano kit it needs) cannot run here (a
    skip reason), or None."""
    problem = kit_problem()
    if problem:
        return f"training-operator needs the Volcano kit: {problem}"
    folder = os.environ.get(KIT_ENV)
    if not folder:
        return (
            f"{KIT_ENV} is not set (point it at the training-operator kit: start.sh, "
            "stop.sh, bin/training-operator)"
        )
    root = Path(folder)
    for name in ("start.sh", "stop.sh", "bin/training-operator"):
        if not os.access(root / name, os.X_OK):
            return f"{KIT_ENV}={folder} has no executable {name}"
    return None


@dataclass
class TrainingOperator:
    """The operator's process against `api`, its state (env file, log) in `state`."""

    folder: Path
    api: EnvTest
    state: Path
    env: dict[str, str] = field(default_factory=dict)

    def start(self) -> None:
        """Run the kit's start.sh (three ports picked: `volcanokit.start_retrying`)."""
        start_retrying("training-operator", self._run_start, self.log_tail, self._undo_start)

    def _run_start(self) -> subprocess.CompletedProcess[str]:
        answer = subprocess.run(
            [
                str(self.folder / "start.sh"),
                str(self.api.kubeconfig(name="training-operator")),
                str(self.state),
                "--no-webhook",
            ],
            capture_output=True,
            text=True,
            timeout=START_SECONDS,
            check=False,
        )
        self._read_env()  # even on failure: whatever it started is stopped by stop()
        return answer

    def _undo_start(self) -> None:
        self.stop()
        self.env.clear()
        (self.state / "training-operator.env").unlink(missing_ok=True)

    def stop(self) -> None:
        if (self.state / "training-operator.env").exists():
            subprocess.run([str(self.folder / "stop.sh"), str(self.state)], timeout=60, check=False)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = (self.state / "training-operator.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def _read_env(self) -> None:
        with contextlib.suppress(OSError):
            for line in (self.state / "training-operator.env").read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    self.env[key.strip()] = value.strip()


@contextlib.contextmanager
def training_operator(kit: VolcanoKit) -> Iterator[TrainingOperator]:
    """The operator beside a running Volcano kit (state under the kit's folder), stopped
    on exit whatever happened inside."""
    problem = operator_problem()
    if problem:
        raise RuntimeError(problem)
    operator = TrainingOperator(Path(os.environ[KIT_ENV]), kit.api, kit.state.parent / "to")
    try:
        operator.start()
        yield operator
    finally:
        operator.stop()


# ---- objects -------------------------------------------------------------------------------


def _template(resources: dict[str, str], *, restart: str = "OnFailure") -> dict[str, Any]:
    return {
        "restartPolicy": restart,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "example.com/train:1",
                        "resources": {"requests": resources, "limits": resources},
                    }
                ]
            }
        },
    }


def pytorchjob_body(
    name: str,
    namespace: str,
    *,
    queue: str,
    workers: int,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    min_available: int | None = None,
    gpus: int = 1,
    metrics: bool = False,
) -> dict[str, Any]:
    """A PyTorchJob of `workers` Workers, `gpus` GPUs each (requests = limits), in `queue`
    (runPolicy.schedulingPolicy.queue). Elastic when `max_replicas` is given
    (elasticPolicy min/max, c10d); `min_available` sets the gang's size, without it the
    operator makes every replica the gang."""
    spec: dict[str, Any] = {
        "runPolicy": {"schedulingPolicy": {"queue": queue}},
        "pytorchReplicaSpecs": {"Worker": {"replicas": workers, **_template({GPU: str(gpus)})}},
    }
    if min_available is not None:
        spec["runPolicy"]["schedulingPolicy"]["minAvailable"] = min_available
    if max_replicas is not None:
        elastic: dict[str, Any] = {
            "minReplicas": min_replicas or 1,
            "maxReplicas": max_replicas,
            "rdzvBackend": "c10d",
        }
        if metrics:
            elastic["metrics"] = [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ]
        spec["elasticPolicy"] = elastic
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def paddlejob_body(
    name: str,
    namespace: str,
    *,
    queue: str,
    workers: int,
    max_replicas: int,
    min_available: int,
    opt_in: bool,
) -> dict[str, Any]:
    """A collective PaddleJob (Worker only, 1 GPU each) with elasticPolicy (and its
    `metrics`, which the PaddleJob controller never reads); `opt_in`: our annotation
    saying it runs Paddle's elastic launcher."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if opt_in:
        meta["annotations"] = {PADDLE_OPT_IN: "true"}
    worker = _template({GPU: "1"})
    worker["template"]["spec"]["containers"][0]["name"] = "paddle"
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PaddleJob",
        "metadata": meta,
        "spec": {
            "elasticPolicy": {
                "minReplicas": 1,
                "maxReplicas": max_replicas,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 80},
                        },
                    }
                ],
            },
            "runPolicy": {"schedulingPolicy": {"queue": queue, "minAvailable": min_available}},
            "paddleReplicaSpecs": {"Worker": {"replicas": workers, **worker}},
        },
    }


def job_path(obj: dict[str, Any]) -> str:
    base = PYTORCHJOBS if obj["kind"] == "PyTorchJob" else PADDLEJOBS
    return base.format(ns=obj["metadata"]["namespace"]) + "/" + obj["metadata"]["name"]


def set_workers(api: EnvTest, obj: dict[str, Any], replicas: int) -> None:
    """What a user (or we) do to resize: a merge patch of the Worker's replicas."""
    specs = "pytorchReplicaSpecs" if obj["kind"] == "PyTorchJob" else "paddleReplicaSpecs"
    api.request(
        "PATCH",
        job_path(obj),
        {"spec": {specs: {"Worker": {"replicas": replicas}}}},
        content_type="application/merge-patch+json",
    )


def worker_replicas(api: EnvTest, obj: dict[str, Any]) -> int:
    specs = "pytorchReplicaSpecs" if obj["kind"] == "PyTorchJob" else "paddleReplicaSpecs"
    return int(api.get(obj)["spec"][specs]["Worker"]["replicas"])


def replica_status(api: EnvTest, obj: dict[str, Any], kind: str = "Worker") -> dict[str, Any]:
    """status.replicaStatuses.<kind> as the operator wrote it ({} before it did)."""
    status = api.get(obj).get("status") or {}
    found: dict[str, Any] = (status.get("replicaStatuses") or {}).get(kind) or {}
    return found


def pods_of(
    api: EnvTest, namespace: str, job: str, replica_type: str | None = None
) -> list[dict[str, Any]]:
    """The operator's pods of `job` (not deleting), by name; `replica_type`: worker, master."""
    selector = f"{JOB_LABEL}%3D{job}"
    if replica_type:
        selector += f",{TYPE_LABEL}%3D{replica_type}"
    items = api.request("GET", PODS.format(ns=namespace) + f"?labelSelector={selector}")["items"]
    live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return sorted(live, key=lambda p: str(p["metadata"]["name"]))


def view(pod: dict[str, Any]) -> PodView:
    status = pod.get("status") or {}
    scheduled = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    verdict = "True" if scheduled.get("status") == "True" else scheduled.get("reason", "")
    return PodView(
        pod["metadata"]["name"],
        pod["spec"].get("nodeName"),
        status.get("phase", ""),
        verdict,
        scheduled.get("message", ""),
    )


def podgroup(api: EnvTest, namespace: str, job: str) -> dict[str, Any] | None:
    """The job's PodGroup (the operator names it after the job), or None."""
    try:
        found: dict[str, Any] = api.request("GET", PODGROUPS.format(ns=namespace) + f"/{job}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def describe_job(api: EnvTest, namespace: str, job: str) -> str:
    """What the operator and the scheduler did with `job`: its PodGroup and pods."""
    group = podgroup(api, namespace, job) or {}
    lines = [
        f"podgroup {job}: spec {group.get('spec')}, phase "
        f"{(group.get('status') or {}).get('phase')}, running "
        f"{(group.get('status') or {}).get('running')}"
    ]
    for pod in pods_of(api, namespace, job):
        v = view(pod)
        lines.append(f"  {v.name}: {v.phase} on {v.node} ({v.scheduled} {v.message[:120]})")
    return "\n".join(lines)


async def until(
    what: str,
    check: Callable[[], Any],
    *,
    seconds: float = 30,
    describe: Callable[[], str] | None = None,
) -> Any:
    """Poll `check` (a synchronous read of the real server) until it answers truthy; its
    answer. Fails with `what` and what `describe` says then (or the last answer)."""
    deadline = time.monotonic() + seconds
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            said = describe() if describe is not None else answer
            raise AssertionError(f"{what}: not within {seconds:g}s; {said}")
        await asyncio.sleep(0.1)


async def wait_workers_running(
    api: EnvTest, obj: dict[str, Any], count: int, *, seconds: float = 30, master: int = 0
) -> list[dict[str, Any]]:
    """Until exactly `count` workers (and `master` masters) of the job exist, each bound
    and Running, and the operator's status says so; the worker pods."""
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]

    def done() -> list[dict[str, Any]] | None:
        pods = pods_of(api, ns, name, "worker")
        masters = pods_of(api, ns, name, "master")
        if len(pods) != count or len(masters) != master:
            return None
        if not all(view(p).running for p in pods + masters):
            return None
        if replica_status(api, obj).get("active", 0) != count:
            return None
        return pods

    try:
        found: list[dict[str, Any]] = await until(
            f"{name}: {count} workers bound and Running", done, seconds=seconds
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe_job(api, ns, name)}") from None
    return found


async def wait_podgroup(
    api: EnvTest, namespace: str, job: str, phase: str, *, seconds: float = 30
) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        group = podgroup(api, namespace, job)
        if group and (group.get("status") or {}).get("phase") == phase:
            return group
        return None

    try:
        found: dict[str, Any] = await until(f"{job}: PodGroup {phase}", done, seconds=seconds)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe_job(api, namespace, job)}") from None
    return found


def clean_kubeflow(api: EnvTest, namespace: str, *, seconds: float = 30) -> None:
    """Delete every Kubeflow job of `namespace`, then what the operator made of them
    (no garbage collector here): jobs first, or the operator recreates their pods;
    PodGroups before the last look, or one left Inqueue keeps counting in its queue."""
    deadline = time.monotonic() + seconds
    for base in (PYTORCHJOBS, PADDLEJOBS):
        with contextlib.suppress(ApiError):
            api.request("DELETE", base.format(ns=namespace))
    for base in (PYTORCHJOBS, PADDLEJOBS):
        while api.request("GET", base.format(ns=namespace))["items"]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kubeflow jobs in {namespace} not deleted")
            time.sleep(0.1)
    left: list[str] = []
    while True:
        # deleted again each round: a pod deleted while its job was being deleted can be
        # recreated by the operator's last reconcile
        for base in (PODGROUPS, PODS, HPAS):
            with contextlib.suppress(ApiError):
                api.request("DELETE", base.format(ns=namespace) + "?gracePeriodSeconds=0")
        with contextlib.suppress(ApiError):
            for svc in api.request("GET", SERVICES.format(ns=namespace))["items"]:
                api.request("DELETE", SERVICES.format(ns=namespace) + "/" + svc["metadata"]["name"])
        time.sleep(0.2)
        left = [
            f"{kind} {o['metadata']['name']} {o['metadata'].get('finalizers') or ''}"
            for kind, base in (("pod", PODS), ("podgroup", PODGROUPS))
            for o in api.request("GET", base.format(ns=namespace))["items"]
        ]
        if not left:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"left in {namespace}: {left}")
