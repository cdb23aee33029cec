"""What every job kind says about its objects (see autoscaler/read/kinds/__init__.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autoscaler.core.options import ReadOptions
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import ResourceKind
from autoscaler.core.shapes import PodShape
from autoscaler.read.fields import BadField, dig, gpus_per_worker, int_field
from autoscaler.read.podspec import encoded, read_shape

from .gang import GangPods


class NotManaged(Exception):
    """The job is left alone, for `reason`; `message` names the field."""

    def __init__(
        self, reason: Reason, message: str, *, range_error: bool = False, **known: Any
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        # a bad min/max (not a missing or foreign elastic policy): a paused job is
        # reported as paused first, as the owner may be fixing it
        self.range_error = range_error
        self.known = known  # what could be read: replicas, gpus_per_worker


@dataclass(frozen=True, slots=True)
class Workers:
    """The resizable worker group of one job, as read from the object."""

    replicas: int  # what the spec asks for
    active: int  # what runs
    gpus_per_worker: int
    field: str  # where `replicas` lives, for messages: spec.pytorchReplicaSpecs.Worker.replicas
    # where the group is, for the kind's own write: "" when the kind has one fixed place
    # (kubeflow jobs), "<index>:<name>" of the elastic task of a Volcano Job
    at: str = ""
    shape: PodShape | None = None  # one worker's pod, as the scheduler will judge it
    group: str = "worker"  # the worker group's name on its pods (podspec._worker_of)
    # GPUs of the job's other pods its gang counts (a Master, a Volcano Job's other
    # tasks): held beside the workers, never resized (replica_gpus)
    other_gpus: int = 0


@dataclass(frozen=True, slots=True)
class Write:
    """One request that sets a job's worker count (and our annotations)."""

    body: Any
    content_type: str


class JobKind(Protocol):
    """What the daemon needs of a job kind: where it keeps its queue, workers and
    policy, and how its replicas are written (read/kinds/ holds one per kind)."""

    resource: ResourceKind
    queue_field: str  # where the job names its queue, e.g. spec.queue
    operator: str  # who turns the job into a PodGroup and pods, named in messages

    def queue(self, obj: Mapping[str, Any]) -> str:
        """The Volcano queue the job's pods are scheduled in."""

    def priority_class(self, obj: Mapping[str, Any]) -> Any:
        """The PriorityClass name the job's gang carries (unvalidated)."""

    def finished(self, obj: Mapping[str, Any]) -> tuple[Reason, str] | None:
        """FINISHED or SUSPENDED with why, or None for a job that may run."""

    def workers(self, obj: Mapping[str, Any], options: ReadOptions) -> Workers:
        """The worker group; raises NotManaged (naming the field) when it cannot be read."""

    def bounds(
        self, obj: Mapping[str, Any], workers: Workers, options: ReadOptions
    ) -> tuple[int, int]:
        """min and max workers; raises NotManaged (NOT_ELASTIC, INVALID_POLICY, ...)."""

    def gang_grows(self, obj: Mapping[str, Any]) -> str:
        """Why growing the job would raise its gang (its operator sizes the gang from
        the replicas), naming what to set; "" when the gang stays at its minimum. The
        planner then only shrinks it (HoldNoMinAvailable)."""

    def grow_blocked(self, obj: Mapping[str, Any]) -> str:
        """Why growing the job now would stall it in its operator; "" when it may grow."""

    def write(self, at: str, target: int, annotations: Mapping[str, str], rv: str) -> Write:
        """The patch that sets the worker count to `target` and our annotations, pinned
        to resourceVersion `rv` (the server answers 409 if the job changed)."""

    def workers_name(self, at: str) -> str:
        """The worker group for people: "Worker", "task worker"."""

    def gang(self, obj: Mapping[str, Any], options: ReadOptions) -> GangPods | None:
        """The pods its PodGroup's minMember holds, by shape, as its operator counts
        them (kinds.gang); None when the templates cannot be read."""


KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_QUEUE_LABEL = f"{KUEUE_GROUP}/queue-name"
KUEUE_WORKLOAD_LABEL = f"{KUEUE_GROUP}/prebuilt-workload-name"


def kueue_owner(obj: Mapping[str, Any]) -> str:
    """Why Kueue owns this job's size ("" when it does not): Kueue admits a job by its
    replica counts (its Workload's PodSets), and when a running job's counts stop matching
    its Workload it suspends the job (the operator deletes every pod), deletes the
    Workload and queues a new one behind the waiting work; Kueue refuses its elastic opt-in
    for these kinds. A job is Kueue's when it carries the queue-name label (or the older
    annotation), a prebuilt Workload's label, or an owner reference into Kueue's API group."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return ""
    for where in ("labels", "annotations"):
        marks = meta.get(where)
        if not isinstance(marks, Mapping):
            continue
        for key in (KUEUE_QUEUE_LABEL, KUEUE_WORKLOAD_LABEL):
            value = marks.get(key)
            if isinstance(value, str) and value:
                return f"{where[:-1]} {key}={value}"
    for owner in meta.get("ownerReferences") or ():
        if not isinstance(owner, Mapping):
            continue
        api = owner.get("apiVersion")
        if isinstance(api, str) and api.split("/")[0] == KUEUE_GROUP:
            return f"owned by {owner.get('kind') or 'an object'} {owner.get('name') or ''} ({api})"
    return ""


def kueue_message(mark: str) -> str:
    """The message of a job Kueue owns (`mark`: kueue_owner's words)."""
    return (
        f"Kueue manages this job ({mark}): Kueue admits it by its replica counts, and a "
        "resize would make Kueue suspend it (every pod deleted) and queue it again behind "
        "the waiting work, so the autoscaler leaves it alone; its GPUs still count in its "
        "Volcano queue"
    )


def read_workers(
    group: Mapping[str, Any],
    where: str,
    default_replicas: int,
    active: Any,
    active_field: str,
    options: ReadOptions,
    at: str = "",
    default_port: tuple[str, str, int] | None = None,
) -> Workers:
    """A worker group (`group` at `where`: its replicas and pod template) and the count
    of its running workers (`active`, read from `active_field`), each bad field named;
    its worker's shape as the created pod will be (`default_port`: what its operator
    adds to the pod, podspec.read_shape)."""
    try:
        replicas = int_field(group.get("replicas", default_replicas), f"{where}.replicas")
    except BadField as exc:
        raise NotManaged(Reason.INVALID_REPLICAS, str(exc)) from None
    gpw, shape = template_facts(
        group.get("template"),
        f"{where}.template",
        tuple(options.gpu_resource_names),
        options.extended_resource_toleration,
        default_port,
    )
    if isinstance(gpw, str):
        raise NotManaged(Reason.INVALID_SPEC, gpw, replicas=replicas)
    try:
        running = 0 if active is None else int_field(active, active_field)
    except BadField as exc:
        raise NotManaged(
            Reason.INVALID_SPEC, str(exc), replicas=replicas, gpus_per_worker=gpw
        ) from None
    name = at.partition(":")[2].lower() or "worker"
    return Workers(replicas, running, gpw, f"{where}.replicas", at, shape, name)


def template_facts(
    template: Any,
    field: str,
    gpu_names: tuple[str, ...],
    extended_resource_toleration: bool,
    default_port: tuple[str, str, int] | None,
    *,
    key: bytes | None = None,
) -> tuple[int | str, PodShape]:
    """A worker template's GPUs per worker (or why they cannot be read, the message of
    `fields.gpus_per_worker`) and its pod's shape, remembered by the template as read
    (`podspec.encoded`): the jobs of a cluster repeat a few dozen templates, and reading
    one costs ~8 us of a job's ~25 (measured at 10k jobs). `key`: the
    template's JSON, from a caller that read it from JSON (so `encoded` would give the
    same bytes, without checking that it reads back as itself)."""
    key = key if key is not None else encoded(template)
    memo_key = (key, field, gpu_names, extended_resource_toleration, default_port)
    found = _TEMPLATES.get(memo_key) if key is not None else None
    if found is not None:
        return found
    gpw: int | str
    try:
        gpw = gpus_per_worker(template, gpu_names, field)
    except BadField as exc:
        gpw = str(exc)
    shape = read_shape(
        dig(template, "spec"),
        extended_resource_toleration=extended_resource_toleration,
        default_port=default_port,
    )
    if key is not None:
        if len(_TEMPLATES) >= TEMPLATES_LIMIT:  # never grows without bound on churn
            _TEMPLATES.clear()
        _TEMPLATES[memo_key] = gpw, shape
    return gpw, shape


def replica_gpus(
    replicas: Any,
    template: Any,
    field: str,
    options: ReadOptions,
    default_port: tuple[str, str, int] | None,
    *,
    key: bytes | None = None,
) -> int:
    """GPUs that `replicas` pods of `template` (at `field`) ask for: a Master's, another
    task's. Only shown (with the job's own count), never planned with: what cannot be
    read counts 0 rather than leaving the job unmanaged for a field it does not resize."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas <= 0:
        return 0
    gpus, _ = template_facts(
        template,
        field,
        tuple(options.gpu_resource_names),
        options.extended_resource_toleration,
        default_port,
        key=key,
    )
    return replicas * gpus if isinstance(gpus, int) else 0


TEMPLATES_LIMIT = 1024
_TEMPLATES: dict[tuple[Any, ...], tuple[int | str, PodShape]] = {}
