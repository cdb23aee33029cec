"""Builders for tests: raw objects shaped like the real CRDs, and model objects."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from autoscaler.core.model import (
    ClusterSnapshot,
    ElasticJob,
    ObjectRef,
    PendingGroup,
    QueueState,
    UnmanagedJob,
)
from autoscaler.core.policy import PlannerPolicy
from autoscaler.core.reasons import Reason
from autoscaler.settings import Settings

NOW = datetime(2026, 11, 22, 10, 0, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(hours=2)


def policy(**overrides: Any) -> PlannerPolicy:
    return PlannerPolicy(**overrides)


def settings(**overrides: Any) -> Settings:
    return Settings(**overrides)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def ej(
    name: str,
    *,
    queue: str = "q",
    min: int = 1,
    max: int = 8,
    replicas: int = 2,
    active: int | None = None,
    gpw: int = 1,
    priority: int = 0,
    last: datetime | None = None,
    created: datetime = LONG_AGO,
    started: datetime | None = None,
    namespace: str = "ml",
) -> ElasticJob:
    return ElasticJob(
        ref=ObjectRef(namespace, name),
        queue=queue,
        min_replicas=min,
        max_replicas=max,
        replicas=replicas,
        active=replicas if active is None else active,
        gpus_per_worker=gpw,
        created=created,
        priority=priority,
        last_scale_time=last,
        started=started,
        resource_version="1",
    )


def gang(
    name: str,
    gpus: int,
    *,
    queue: str = "q",
    priority: int = 0,
    created: datetime | None = None,
    owner: str | None = None,
    namespace: str = "ml",
) -> PendingGroup:
    return PendingGroup(
        ref=ObjectRef(namespace, name, "PodGroup"),
        queue=queue,
        gpus=gpus,
        created=ago(60) if created is None else created,
        priority=priority,
        owner=ObjectRef(namespace, owner, "PyTorchJob") if owner else None,
    )


def snap(
    free: dict[str, float | None] | None = None,
    jobs: list[ElasticJob] = (),  # type: ignore[assignment]
    pending: list[PendingGroup] = (),  # type: ignore[assignment]
    unmanaged: list[UnmanagedJob] = (),  # type: ignore[assignment]
) -> ClusterSnapshot:
    free = {"q": 0} if free is None else free
    queues = {q: QueueState(q, v) for q, v in free.items()}
    return ClusterSnapshot(
        queues=queues, jobs=tuple(jobs), pending=tuple(pending), unmanaged=tuple(unmanaged)
    )


# ---- raw objects -----------------------------------------------------------------------


def pytorchjob(
    name: str = "job",
    namespace: str = "ml",
    *,
    queue: str | None = "team-a",
    min_replicas: Any = 1,
    max_replicas: Any = 4,
    replicas: Any = 2,
    active: Any = 2,
    gpus: Any = 1,
    resource: str = "nvidia.com/gpu",
    annotations: dict[str, Any] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    priority_class: str | None = None,
    min_available: int | None = 2,
) -> dict[str, Any]:
    """A PyTorchJob as `kubectl get -o yaml` prints it (kubeflow.org/v1)."""

    sched: dict[str, Any] = {}
    if queue is not None:
        sched["queue"] = queue
    if priority_class:
        sched["priorityClass"] = priority_class
    if min_available is not None:
        sched["minAvailable"] = min_available
    elastic: dict[str, Any] = {"rdzvBackend": "c10d"}
    if min_replicas is not None:
        elastic["minReplicas"] = min_replicas
    if max_replicas is not None:
        elastic["maxReplicas"] = max_replicas
    container = {
        "name": "pytorch",
        "image": "example.com/train:1",
        "resources": {"limits": {resource: gpus, "cpu": "4"}},
    }
    obj: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-22T08:00:00Z",
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "elasticPolicy": elastic,
            "runPolicy": {"cleanPodPolicy": "None", "schedulingPolicy": sched},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": replicas,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container]}},
                },
            },
        },
        "status": {
            "conditions": conditions
            if conditions is not None
            else [{"type": "Created", "status": "True"}, {"type": "Running", "status": "True"}],
            "replicaStatuses": {"Worker": {"active": active}},
            "startTime": "2026-11-22T08:01:00Z",
        },
    }
    return obj


def with_master(job: dict[str, Any], gpus: Any = 1, replicas: Any = 1) -> dict[str, Any]:
    """A copy of a Kubeflow job (pytorchjob, paddlejob) with a Master of `replicas` pods
    of `gpus` GPUs each, running: its gang counts it, the autoscaler never resizes it."""
    out = copy.deepcopy(job)
    specs = next(v for k, v in out["spec"].items() if k.endswith("ReplicaSpecs"))
    master = copy.deepcopy(specs["Worker"])
    master["replicas"] = replicas
    master["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = gpus
    out["spec"] = {**out["spec"]}
    specs_key = next(k for k in out["spec"] if k.endswith("ReplicaSpecs"))
    out["spec"][specs_key] = {"Master": master, **specs}
    if isinstance(out.get("status"), dict):
        out["status"].setdefault("replicaStatuses", {})["Master"] = {"active": replicas}
    return out


def paddlejob(
    name: str = "paddle", namespace: str = "ml", *, elastic_launcher: bool = True, **kw: Any
) -> dict[str, Any]:
    """A PaddleJob (kubeflow.org/v1): a PyTorchJob's shape with paddleReplicaSpecs;
    `elastic_launcher` adds our opt-in annotation (it runs Paddle's elastic launcher)."""
    obj = pytorchjob(name, namespace, **kw)
    obj["kind"] = "PaddleJob"
    if elastic_launcher:
        obj["metadata"]["annotations"].setdefault("elastic-autoscaler.io/paddle-elastic", "true")
    obj["spec"]["elasticPolicy"].pop("rdzvBackend", None)
    obj["spec"]["paddleReplicaSpecs"] = obj["spec"].pop("pytorchReplicaSpecs")
    obj["spec"]["paddleReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = (
        "paddle"
    )
    return obj


def vcjob(
    name: str = "vc",
    namespace: str = "ml",
    *,
    queue: str = "team-a",
    replicas: Any = 2,
    running: Any = 2,
    max_replicas: Any = 4,
    min_available: Any = 1,
    task_min: Any = None,
    gpus: Any = 1,
    other_tasks: list[dict[str, Any]] | None = None,
    annotations: dict[str, Any] | None = None,
    phase: str = "Running",
    priority_class: str | None = None,
    elastic_task: str = "worker",
) -> dict[str, Any]:
    """A Volcano Job (batch.volcano.sh/v1alpha1) with an elastic task `worker` and the
    max-replicas annotation (a number with one task, task=number with several)."""
    task: dict[str, Any] = {
        "name": "worker",
        "replicas": replicas,
        "template": {
            "spec": {
                "restartPolicy": "OnFailure",
                "containers": [
                    {
                        "name": "train",
                        "image": "example.com/train:1",
                        "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "4"}},
                    }
                ],
            }
        },
    }
    if task_min is not None:
        task["minAvailable"] = task_min
    tasks = [*(other_tasks or []), task]
    notes = dict(annotations or {})
    if max_replicas is not None:
        value = str(max_replicas) if len(tasks) == 1 else f"{elastic_task}={max_replicas}"
        notes.setdefault("elastic-autoscaler.io/max-replicas", value)
    spec: dict[str, Any] = {
        "queue": queue,
        "schedulerName": "volcano",
        "minAvailable": min_available,
        "tasks": tasks,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "42",
            "creationTimestamp": "2026-11-22T08:00:00Z",
            "annotations": notes,
        },
        "spec": spec,
        "status": {
            "state": {"phase": phase},
            "minAvailable": min_available,
            "running": running,
            "taskStatusCount": {"worker": {"phase": {"Running": running}}},
        },
    }


def podgroup(
    name: str = "pg",
    namespace: str = "ml",
    *,
    queue: str = "team-a",
    gpus: Any = 4,
    phase: str = "Pending",
    key: str = "nvidia.com/gpu",
    owner: str | None = None,
    owner_kind: str = "PyTorchJob",
    priority_class: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "creationTimestamp": "2026-11-22T09:50:00Z",
    }
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "batch.volcano.sh/v1alpha1"
                if owner_kind == "Job"
                else "kubeflow.org/v1",
                "kind": owner_kind,
                "name": owner,
                "uid": f"uid-{namespace}-{owner}",
                "controller": True,
            }
        ]
    spec: dict[str, Any] = {"minMember": 2, "queue": queue, "minResources": {key: gpus}}
    if priority_class:
        spec["priorityClassName"] = priority_class
    status: dict[str, Any] = {"phase": phase}
    if conditions:
        status["conditions"] = conditions
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": meta,
        "spec": spec,
        "status": status,
    }


def queue_obj(name: str, state: str = "Open") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1},
        "status": {"state": state},
    }


def priority_class(name: str, value: int, default: bool = False) -> dict[str, Any]:
    obj = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    if default:
        obj["globalDefault"] = True
    return obj


def edit(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of obj with the dotted path set (or deleted when value is DELETE); a number
    in the path indexes a list."""

    out = copy.deepcopy(obj)
    keys = path.split(".")
    cur = out
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur.setdefault(k, {})
    if value is DELETE:
        cur.pop(keys[-1], None)
    else:
        cur[keys[-1]] = value
    return out


DELETE = object()


def hpa(
    name: str = "hpa",
    namespace: str = "ml",
    *,
    target: str = "job",
    kind: str = "PyTorchJob",
    api_version: str | None = "kubeflow.org/v1",
    min_replicas: int = 1,
    max_replicas: int = 4,
) -> dict[str, Any]:
    """An autoscaling/v2 HorizontalPodAutoscaler scaling a job (api_version None: as
    training-operator's desiredHPA writes its target, kind and name only)."""
    ref: dict[str, Any] = {"kind": kind, "name": target}
    if api_version is not None:
        ref["apiVersion"] = api_version
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-hpa-{name}"},
        "spec": {
            "scaleTargetRef": ref,
            "minReplicas": min_replicas,
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
    }


def orphan(asked_seconds_ago: float) -> UnmanagedJob:
    """A PaddleJob we do not manage (min > max) with 3 GPUs in flight since
    `asked_seconds_ago` and, unless a test gives it pods, none (HoldNoPods)."""
    return UnmanagedJob(
        ObjectRef("ml", "orphan", "PaddleJob"),
        "q",
        Reason.INVALID_POLICY,
        "min > max",
        replicas=3,
        gpus_per_worker=1,
        inflight_gpus=3,
        asked_at=ago(asked_seconds_ago),
    )
