"""Kubeflow training-operator jobs: PyTorchJob and PaddleJob.

Both keep their workers in `spec.<x>ReplicaSpecs.Worker`, their elastic range in
`spec.elasticPolicy` and their queue and priority in `spec.runPolicy.schedulingPolicy`
(never in the annotation `scheduling.volcano.sh/queue-name`, which training-operator
copies only into its PodGroup's annotations);
they differ only in the replica-spec field. A resize is one merge patch of the Worker's
replicas and our annotations, pinned to the resourceVersion we planned on. PaddleJob's
CRD also has a /scale subresource; we do not use it, because a /scale write cannot carry
the last-scale annotation in the same request, and a resize without it would escape the
cooldown if the second write failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from autoscaler.core.options import ReadOptions
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import (
    FINISHED_CONDITIONS,
    MERGE_PATCH,
    PADDLEJOB,
    PYTORCHJOB,
    ResourceKind,
)
from autoscaler.read.fields import BadField, dig, int_field
from autoscaler.read.podspec import PADDLE_PORT, PYTORCH_PORT

from .base import NotManaged, Workers, Write, read_workers, replica_gpus
from .gang import GangPods, kubeflow_gang

DEFAULT_QUEUE = "default"


class KubeflowJob:
    """A Kubeflow training-operator kind (PyTorchJob, PaddleJob): replica specs by
    role, Worker the one resized."""

    def __init__(
        self,
        resource: ResourceKind,
        replica_specs: str,
        default_port: tuple[str, str, int] | None = None,
    ) -> None:
        self.resource = resource
        self.replica_specs = replica_specs  # e.g. pytorchReplicaSpecs
        # the port training-operator adds to every pod's default container: with
        # hostNetwork a host port, so such workers fit one per node
        self.default_port = default_port

    def __repr__(self) -> str:
        return f"KubeflowJob({self.resource.kind})"

    queue_field = "spec.runPolicy.schedulingPolicy.queue"
    operator = "training-operator"

    def queue(self, obj: Mapping[str, Any]) -> str:
        # what training-operator writes into its PodGroup's spec.queue (common/job.go
        # ReconcileJobs): schedulingPolicy.queue, else Volcano's default. Not the
        # annotation scheduling.volcano.sh/queue-name: the operator copies the job's
        # annotations onto the PodGroup's, where Volcano does not read a queue.
        queue = dig(obj, "spec", "runPolicy", "schedulingPolicy", "queue")
        if isinstance(queue, str) and queue:
            return queue
        return DEFAULT_QUEUE

    def priority_class(self, obj: Mapping[str, Any]) -> Any:
        return dig(obj, "spec", "runPolicy", "schedulingPolicy", "priorityClass")

    def finished(self, obj: Mapping[str, Any]) -> tuple[Reason, str] | None:
        found = dig(obj, "status", "conditions")
        if isinstance(found, list):
            for cond in found:
                if dig(cond, "status") == "True" and dig(cond, "type") in FINISHED_CONDITIONS:
                    return Reason.FINISHED, f"job has condition {cond['type']}"
            for cond in found:
                if dig(cond, "status") == "True" and dig(cond, "type") == "Suspended":
                    return Reason.SUSPENDED, "job has condition Suspended"
        if dig(obj, "spec", "runPolicy", "suspend") is True:
            return Reason.SUSPENDED, "spec.runPolicy.suspend is true"
        return None

    def gang(self, obj: Mapping[str, Any], options: ReadOptions) -> GangPods | None:
        return kubeflow_gang(obj, self.replica_specs, options, self.default_port)

    def workers(self, obj: Mapping[str, Any], options: ReadOptions) -> Workers:
        where = f"spec.{self.replica_specs}.Worker"
        worker = dig(obj, "spec", self.replica_specs, "Worker")
        if not isinstance(worker, Mapping):
            raise NotManaged(Reason.INVALID_SPEC, f"{where} is missing")
        active = dig(obj, "status", "replicaStatuses", "Worker", "active")
        workers = read_workers(
            worker,
            where,
            1,
            active,
            "status.replicaStatuses.Worker.active",
            options,
            default_port=self.default_port,
        )
        # common/job.go: every replica type is a pod of the job's PodGroup (minMember is
        # their sum unless minAvailable says less), so a Master's GPUs are the job's too
        other = sum(
            replica_gpus(
                spec.get("replicas", 1),
                spec.get("template"),
                f"spec.{self.replica_specs}.{name}.template",
                options,
                self.default_port,
            )
            for name, spec in dig(obj, "spec", self.replica_specs).items()
            if name != "Worker" and isinstance(spec, Mapping)
        )
        return replace(workers, other_gpus=other) if other else workers

    def bounds(
        self, obj: Mapping[str, Any], workers: Workers, options: ReadOptions
    ) -> tuple[int, int]:
        elastic = dig(obj, "spec", "elasticPolicy")
        if elastic is None:
            raise NotManaged(Reason.NOT_ELASTIC, "spec.elasticPolicy is not set")
        if not isinstance(elastic, Mapping):
            raise NotManaged(Reason.INVALID_POLICY, "spec.elasticPolicy must be a mapping")
        self._check_elastic(obj, elastic, options)
        try:
            return elastic_bounds(elastic, workers.replicas)
        except BadField as exc:
            raise NotManaged(Reason.INVALID_POLICY, str(exc), range_error=True) from None

    def _check_elastic(
        self, obj: Mapping[str, Any], elastic: Mapping[str, Any], options: ReadOptions
    ) -> None:
        """What besides elasticPolicy the kind needs before it may be resized."""
        # pytorch/hpa.go ReconcileHPA: elasticPolicy.metrics makes an HPA of the same name
        if elastic.get("metrics"):
            raise NotManaged(
                Reason.OPERATOR_HPA,
                "spec.elasticPolicy.metrics is set: training-operator scales it with its own "
                "HorizontalPodAutoscaler; remove metrics (and that HPA) to let the autoscaler "
                "manage it",
            )

    def gang_grows(self, obj: Mapping[str, Any]) -> str:
        # common/job.go ReconcileJobs: minMember = the sum of all replicas unless
        # schedulingPolicy.minAvailable is set, written over the PodGroup on every sync
        # (SyncPodGroup); while the PodGroup is Pending no pod is created or deleted
        # (control/podgroup_control.go DelayPodCreationDueToPodGroup)
        return self.gang_grows_at(dig(obj, "spec", "runPolicy", "schedulingPolicy", "minAvailable"))

    def gang_grows_at(self, min_available: Any) -> str:
        """`gang_grows` of a job whose schedulingPolicy.minAvailable is this (None: unset)."""
        if min_available is not None:
            return ""
        return (
            "spec.runPolicy.schedulingPolicy.minAvailable is not set: training-operator "
            "then makes the PodGroup's minMember all of the job's replicas, so growing "
            "raises the gang, and while a grown gang waits for room its PodGroup is "
            "Pending and training-operator creates and deletes no pods (the job stalls); "
            "only shrunk until you set minAvailable (usually minReplicas plus the master)"
        )

    def grow_blocked(self, obj: Mapping[str, Any]) -> str:
        return ""  # a PodGroup that waits is its own gang (HoldOwnGangWaiting)

    def write(self, at: str, target: int, annotations: Mapping[str, str], rv: str) -> Write:
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if rv:
            metadata["resourceVersion"] = rv
        body = {
            "metadata": metadata,
            "spec": {self.replica_specs: {"Worker": {"replicas": target}}},
        }
        return Write(body, MERGE_PATCH)

    def workers_name(self, at: str) -> str:
        return "Worker"


def elastic_bounds(elastic: Mapping[str, Any], replicas: int) -> tuple[int, int]:
    """minReplicas/maxReplicas (or the older min/max), defaulted as training-operator's
    setElasticPolicy does: one bound missing takes the other's value, both missing take
    the Worker's replicas."""

    def bound(new: str, old: str) -> int | None:
        if elastic.get(new) is not None:
            return int_field(elastic[new], f"spec.elasticPolicy.{new}", minimum=1)
        if elastic.get(old) is not None:
            return int_field(elastic[old], f"spec.elasticPolicy.{old}", minimum=1)
        return None

    min_r, max_r = bound("minReplicas", "min"), bound("maxReplicas", "max")
    if min_r is None and max_r is None:
        min_r = max_r = max(1, replicas)
    elif min_r is None:
        min_r = max_r
    elif max_r is None:
        max_r = min_r
    assert min_r is not None and max_r is not None
    if min_r > max_r:
        raise BadField(f"spec.elasticPolicy.minReplicas={min_r} is above maxReplicas={max_r}")
    return min_r, max_r


class PaddleJob(KubeflowJob):
    """training-operator v1 runs a PaddleJob with no elasticity of its own: its controller
    never reads spec.elasticPolicy, and each pod gets PADDLE_NNODES = the job's total
    replicas at the moment the pod is created (paddlepaddle/envvar.go setPodEnv). A resize
    starts workers that disagree with the running ones about the world size, unless the
    job runs Paddle's elastic launcher (membership in etcd, PADDLE_NNODES=min:max set in
    its own command line over the operator's). So a PaddleJob is resized only when it says
    so: the annotation <prefix>/paddle-elastic: "true"."""

    def __repr__(self) -> str:
        return "PaddleJob()"

    def _check_elastic(
        self, obj: Mapping[str, Any], elastic: Mapping[str, Any], options: ReadOptions
    ) -> None:
        # no ReconcileHPA for PaddleJob: elasticPolicy.metrics makes no HPA; a user's HPA
        # is found by the HPA cache like any other
        key = options.annotations.paddle_elastic
        annotations = dig(obj, "metadata", "annotations")
        value = annotations.get(key) if isinstance(annotations, Mapping) else None
        if value is None:
            raise NotManaged(
                Reason.NOT_ELASTIC,
                "training-operator v1 does not resize a PaddleJob elastically: it never reads "
                "spec.elasticPolicy and gives each pod PADDLE_NNODES = the total replicas when "
                "the pod is created, so added workers disagree with the running ones about the "
                f'world size; annotate the job {key}: "true" once it runs Paddle\'s elastic '
                "launcher (PADDLE_MASTER=etcd://... PADDLE_NNODES=MIN:MAX python -m "
                "paddle.distributed.launch ...)",
            )
        if not isinstance(value, str) or value.strip().lower() not in ("true", "false"):
            raise NotManaged(
                Reason.INVALID_ANNOTATION,
                f'metadata.annotations[{key}] must be "true" or "false", got {value!r}',
            )
        if value.strip().lower() == "false":
            raise NotManaged(
                Reason.NOT_ELASTIC,
                f'annotation {key} is "false": the job does not run Paddle\'s elastic launcher',
            )


PYTORCHJOB_KIND = KubeflowJob(PYTORCHJOB, "pytorchReplicaSpecs", PYTORCH_PORT)
PADDLEJOB_KIND = PaddleJob(PADDLEJOB, "paddleReplicaSpecs", PADDLE_PORT)
