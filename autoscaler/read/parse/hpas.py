"""HorizontalPodAutoscalers: a job an HPA scales is left to the HPA.

The two would fight over the job's replicas (each resize we made, the HPA would undo,
restarting the job each time), so such a job becomes an `UnmanagedJob` (OPERATOR_HPA)
when the snapshot is assembled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autoscaler.core.model import ElasticJob, UnmanagedJob
from autoscaler.core.reasons import Reason
from autoscaler.read.fields import dig
from autoscaler.read.kinds import BY_NAME
from autoscaler.read.records import HpaTarget

from .jobs import worker_group


def decode_hpa(obj: Mapping[str, Any]) -> HpaTarget | None:
    """An HPA and the job it scales. Any HPA, not only training-operator's: it outlives
    elasticPolicy.metrics (pytorch/hpa.go ReconcileHPA returns early once metrics is gone,
    deleting nothing), and users make their own. A target naming another API group (a
    batch/v1 Job) is not ours; one without apiVersion (training-operator's desiredHPA
    sets only kind and name) might be, so it counts: leaving a job alone by mistake
    costs less than fighting an HPA."""
    namespace = dig(obj, "metadata", "namespace")
    name = dig(obj, "metadata", "name")
    if not (isinstance(namespace, str) and isinstance(name, str)):
        return None
    target = dig(obj, "spec", "scaleTargetRef")
    if not isinstance(target, Mapping):
        return HpaTarget(namespace, name)
    kind, target_name = target.get("kind"), target.get("name")
    if not (isinstance(kind, str) and isinstance(target_name, str)):
        return HpaTarget(namespace, name)
    job_kind = BY_NAME.get(kind)
    api_version = target.get("apiVersion")
    if job_kind is None:
        return HpaTarget(namespace, name)
    if isinstance(api_version, str) and api_version:
        if api_version.split("/")[0] != job_kind.resource.group:
            return HpaTarget(namespace, name)
    return HpaTarget(namespace, name, (namespace, kind, target_name))


def targets_of(hpas: Iterable[HpaTarget]) -> dict[tuple[str, str, str], list[str]]:
    """(namespace, kind, name) of each job an HPA scales -> the HPAs' names."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for h in hpas:
        if h.target is not None:
            found.setdefault(h.target, []).append(h.name)
    return {key: sorted(names) for key, names in found.items()}


def hpa_targets(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], list[str]]:
    """targets_of raw HPA objects."""
    return targets_of(h for o in objects if (h := decode_hpa(o)) is not None)


def _hpa_skip(
    job: ElasticJob | UnmanagedJob, targets: Mapping[tuple[str, str, str], list[str]]
) -> ElasticJob | UnmanagedJob:
    """A job we would resize that an HPA also scales is left alone: the two would fight
    (each resize we make, the HPA undoes, each restarting the job)."""
    if not isinstance(job, ElasticJob) or not targets:
        return job
    hpas = targets.get((job.ref.namespace, job.ref.kind, job.ref.name))
    if not hpas:
        return job
    names = ", ".join(f"{job.ref.namespace}/{n}" for n in hpas)
    return UnmanagedJob(
        job.ref,
        job.queue,
        Reason.OPERATOR_HPA,
        f"{job.ref}: HorizontalPodAutoscaler {names} scales this job; the two would fight "
        "over its replicas, so it is left to the HPA: delete the HPA to let the autoscaler "
        "manage it (training-operator does not delete the one it made for "
        "elasticPolicy.metrics when metrics is removed)",
        replicas=job.replicas,
        min_replicas=job.min_replicas,
        max_replicas=job.max_replicas,
        gpus_per_worker=job.gpus_per_worker,
        inflight_gpus=job.inflight_workers * job.gpus_per_worker,
        queue_warning=job.queue_warning,
        asked_at=job.asked_at,
        workers_group=worker_group(job.workers_at),
        other_gpus=job.other_gpus,
    )
