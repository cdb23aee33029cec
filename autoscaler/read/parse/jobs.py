"""Jobs of the managed kinds: an `ElasticJob` the planner may resize, or why not.

`parse_job` reads one job through its kind (kinds/: where the fields live) into the
range, replicas and shape the planner resizes, with the schedule our annotations keep
(last resize, restart cost, declared run time, progress); any field it cannot use makes
the job an `UnmanagedJob` whose message names that field. `decode_job` is what a watch
cache keeps of a job: that, with its priority left to resolve, its queue annotation
checked (`in_queue`) and the pods its gang holds by its templates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from autoscaler.core.model import ElasticJob, UnmanagedJob
from autoscaler.core.options import ReadOptions
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import VOLCANO_QUEUE_ANNOTATION
from autoscaler.read.fields import (
    MAX_RUNTIME_SECONDS,
    BadField,
    dig,
    fraction_field,
    parse_time,
    read_measured,
    seconds_field,
)
from autoscaler.read.kinds import BY_NAME, JobKind, NotManaged, kind_of
from autoscaler.read.kinds.base import Workers, kueue_message, kueue_owner
from autoscaler.read.kinds.kubeflow import PYTORCHJOB_KIND
from autoscaler.read.podspec import items
from autoscaler.read.records import JobRecord

from .nodes import shape_gpus
from .objects import DEFAULT_QUEUE, _created, _fallback_ref, _ref
from .queues import NO_PRIORITIES, Priorities


def parse_job(
    obj: Mapping[str, Any],
    options: ReadOptions,
    priorities: Priorities,
    kind: JobKind | None = None,
) -> ElasticJob | UnmanagedJob:
    """One job of a managed kind -> an ElasticJob the planner may resize, or why not;
    its kind (by the object's kind, else PyTorchJob) says where the fields live."""
    kind = kind or kind_of(obj) or PYTORCHJOB_KIND
    try:
        ref = _ref(obj, kind.resource.kind)
    except BadField as exc:
        fallback = _fallback_ref(obj, kind.resource.kind)
        return UnmanagedJob(fallback, DEFAULT_QUEUE, Reason.INVALID_SPEC, str(exc))
    queue, meta = kind.queue(obj), obj["metadata"]

    def unmanaged(reason: Reason, message: str, **known: Any) -> UnmanagedJob:
        return UnmanagedJob(ref, queue, reason, f"{ref}: {message}", **known)

    if not isinstance(obj.get("spec"), Mapping):
        return unmanaged(Reason.INVALID_SPEC, "spec is missing")
    if (done := kind.finished(obj)) is not None:
        return unmanaged(*done, started=_started(obj), completed=_completed(obj))
    # What the job holds and is owed, known before deciding whether we manage it, so that
    # even a job we leave alone keeps its promised GPUs in the queue's accounting.
    try:
        workers = kind.workers(obj, options)
    except NotManaged as exc:
        return unmanaged(exc.reason, exc.message, **exc.known)
    known = _known(meta, workers, options)
    try:
        min_r, max_r = _elastic_range(obj, kind, workers, options, known)
        schedule = schedule_facts(meta.get("annotations") or {}, options)
    except NotManaged as exc:
        return unmanaged(exc.reason, exc.message, **known)
    return ElasticJob(
        ref=ref,
        queue=queue,
        min_replicas=min_r,
        max_replicas=max_r,
        replicas=workers.replicas,
        active=workers.active,
        gpus_per_worker=workers.gpus_per_worker,
        created=_created(meta),
        priority=priorities.of(kind.priority_class(obj)),
        last_scale_time=schedule.last_scale,
        started=_started(obj),
        resource_version=rv if isinstance(rv := meta.get("resourceVersion"), str) else "",
        gang_grows=kind.gang_grows(obj),
        grow_blocked=kind.grow_blocked(obj),
        workers_at=workers.at,
        shape=workers.shape,
        restart_cost_seconds=schedule.restart_cost,
        restart_cost_source=schedule.cost_source,
        measured_for=schedule.measured_for,
        expected_runtime_seconds=schedule.expected_runtime,
        progress=schedule.progress,
        asked_at=known["asked_at"],
        other_gpus=workers.other_gpus,
    )


def _known(meta: Mapping[str, Any], workers: Workers, options: ReadOptions) -> dict[str, Any]:
    """What a job holds and is owed, for its UnmanagedJob too."""
    gpw = workers.gpus_per_worker
    inflight = max(0, workers.replicas - workers.active) * gpw
    return {
        "replicas": workers.replicas,
        "gpus_per_worker": gpw or None,
        "inflight_gpus": inflight,
        "asked_at": _asked_at(meta, options) if inflight else None,
        "workers_group": worker_group(workers.at),
        "other_gpus": workers.other_gpus,
    }


def worker_group(at: str) -> str:
    """The worker group's name on its pods (podspec._worker_of) from where its kind
    finds it (kinds.base.Workers.at): the elastic task of a Volcano Job, else Worker."""
    return at.partition(":")[2].lower() or "worker"


def _asked_at(meta: Mapping[str, Any], options: ReadOptions) -> datetime:
    """The latest write to the job's spec or metadata that can be dated from the object
    itself, so a restarted daemon dates it alike: its creation, our last-scale-time
    annotation, and each `metadata.managedFields` entry that is not a status write (a
    replicas edit by kubectl, the API or us moves its manager's time). Later writes only
    make it later: the safe side (in-flight workers count longer)."""
    times = [_created(meta)]
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping):
        last = read_time(annotations.get(options.annotations.last_scale))
        if last is not None:
            times.append(last)
    for entry in items(meta.get("managedFields")):
        if isinstance(entry, Mapping) and entry.get("subresource") != "status":
            when = read_time(entry.get("time"))
            if when is not None:
                times.append(when)
    return max(times)


def _elastic_range(
    obj: Mapping[str, Any],
    kind: JobKind,
    workers: Workers,
    options: ReadOptions,
    known: dict[str, Any],
) -> tuple[int, int]:
    """[min, max] of a job we may resize, else NotManaged with why. The order is what a
    user reads first: going away, then another queue system's (Kueue), then a malformed
    bound, then paused, then the range itself. `known` gains the range once it is read."""
    meta = obj["metadata"]
    if meta.get("deletionTimestamp") is not None:
        # a finalizer keeps it alive; a resize now would restart a job that is going away
        raise NotManaged(
            Reason.TERMINATING, "metadata.deletionTimestamp is set: the job is being deleted"
        )
    bad_range: NotManaged | None = None
    try:
        min_r, max_r = kind.bounds(obj, workers, options)
    except NotManaged as exc:
        bad_range = exc
    if kueue := kueue_owner(obj):
        # another queue system sizes it, whatever its range or our annotations say
        if bad_range is None:
            known.update(min_replicas=min_r, max_replicas=max_r)
        raise NotManaged(Reason.KUEUE_MANAGED, kueue_message(kueue))
    if bad_range is not None and not bad_range.range_error:
        raise bad_range
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise NotManaged(Reason.INVALID_ANNOTATION, "metadata.annotations must be a mapping")
    paused = annotations.get(options.annotations.paused)
    if isinstance(paused, str) and paused.strip().lower() == "true":
        raise NotManaged(Reason.PAUSED, f'annotation {options.annotations.paused} is "true"')
    if bad_range is not None:
        raise bad_range
    known.update(min_replicas=min_r, max_replicas=max_r)
    if workers.gpus_per_worker == 0:
        names = ", ".join(options.gpu_resource_names)
        raise NotManaged(
            Reason.INVALID_SPEC,
            f"{workers.field.removesuffix('.replicas')}.template requests no GPU ({names})",
        )
    if not min_r <= workers.replicas <= max_r:
        raise NotManaged(
            Reason.INVALID_REPLICAS,
            f"{workers.field}={workers.replicas} is outside the elastic range [{min_r}, {max_r}]",
        )
    return min_r, max_r


@dataclass(frozen=True)
class Schedule:
    """What our annotations say of a job's past resizes and their cost, and of its run."""

    last_scale: datetime | None = None
    restart_cost: float | None = None
    cost_source: str = ""
    measured_for: datetime | None = None
    expected_runtime: float | None = None
    progress: float | None = None


def schedule_facts(annotations: Mapping[str, Any], options: ReadOptions) -> Schedule:
    """The last resize, the restart cost (the user's, else our measurement) and what the
    job declares of its run; a malformed one of the user's is NotManaged
    (INVALID_ANNOTATION), ours is measured again."""
    names = options.annotations
    last_scale = None
    try:
        raw_last = annotations.get(names.last_scale)
        if raw_last is not None:
            last_scale = parse_time(raw_last, f"metadata.annotations[{names.last_scale}]")
        run = _run_facts(annotations, options)
        key = names.restart_cost
        if annotations.get(key) is not None:
            cost = seconds_field(annotations[key], f"metadata.annotations[{key}]")
            return Schedule(last_scale, cost, "annotation", None, *run)
    except BadField as exc:
        raise NotManaged(Reason.INVALID_ANNOTATION, str(exc)) from None
    measured = read_measured(annotations.get(names.measured_restart_cost))
    if measured is not None:
        return Schedule(last_scale, measured[0], "measured", measured[1], *run)
    return Schedule(last_scale, None, "", None, *run)


def _run_facts(
    annotations: Mapping[str, Any], options: ReadOptions
) -> tuple[float | None, float | None]:
    """The job's expected run time (s) and reported progress (0..1), None where it
    declares none; BadField for a malformed one."""
    names = options.annotations
    runtime = progress = None
    if (raw := annotations.get(names.expected_runtime)) is not None:
        field = f"metadata.annotations[{names.expected_runtime}]"
        runtime = seconds_field(raw, field, MAX_RUNTIME_SECONDS)
    if (raw := annotations.get(names.progress)) is not None:
        progress = fraction_field(raw, f"metadata.annotations[{names.progress}]")
    return runtime, progress


def _started(obj: Mapping[str, Any]) -> datetime | None:
    return started_at(dig(obj, "status", "startTime"))


def _completed(obj: Mapping[str, Any]) -> datetime | None:
    """status.completionTime of a finished job, None where absent or not a time."""
    return _time_or_none(dig(obj, "status", "completionTime"), "status.completionTime")


def started_at(raw_start: Any) -> datetime | None:
    """status.startTime as read (any JSON), None where it is absent or not a time."""
    return _time_or_none(raw_start, "status.startTime")


def _time_or_none(raw: Any, name: str) -> datetime | None:
    """A status time as read (any JSON), None where it is absent or not a time: these
    times only feed estimates (progress, run times); their absence is not an error."""
    if raw is None:
        return None
    try:
        return parse_time(raw, name)
    except BadField:
        return None


def read_time(value: Any) -> datetime | None:
    """An RFC 3339 time, or None where it is not one."""
    try:
        return parse_time(value, "time")
    except BadField:
        return None


def decode_job(
    obj: Mapping[str, Any], options: ReadOptions, kind: JobKind | None = None
) -> JobRecord:
    """parse_job, with the priority left to resolve: the PriorityClass may come later;
    and the queue annotation, checked against the queue the job runs in."""
    kind = kind or kind_of(obj) or PYTORCHJOB_KIND
    job = parse_job(obj, options, NO_PRIORITIES, kind)
    name = kind.priority_class(obj)
    annotation = dig(obj, "metadata", "annotations", VOLCANO_QUEUE_ANNOTATION)
    annotation = annotation if isinstance(annotation, str) and annotation else None
    if annotation is not None:
        job = in_queue(job, job.queue, annotation, from_podgroup=False)
    gang = kind.gang(obj, options) if _may_wait(job) else None
    gpus = 0 if gang is None else sum(n * shape_gpus(s, options) for s, n in gang)
    deleting = dig(obj, "metadata", "deletionTimestamp") is not None
    return JobRecord(job, name if isinstance(name, str) else None, annotation, gang, gpus, deleting)


def _may_wait(job: ElasticJob | UnmanagedJob) -> bool:
    """Whether the job's gang may be waiting: not when it is done, nor when every worker
    it asked for runs (the common case, and reading its templates costs a third of its
    decoding)."""
    if isinstance(job, ElasticJob):
        return job.active < job.replicas
    if job.reason in (Reason.FINISHED, Reason.SUSPENDED):
        return False
    return job.replicas is None or not job.gpus_per_worker or job.inflight_gpus > 0


def in_queue(
    job: ElasticJob | UnmanagedJob, queue: str, annotation: str | None, *, from_podgroup: bool
) -> ElasticJob | UnmanagedJob:
    """The job in `queue`, the one Volcano runs it in (its PodGroup's spec.queue once
    that exists, else what its operator will write there), warned when its annotation
    scheduling.volcano.sh/queue-name names another: Volcano reads a job's queue from its
    PodGroup's spec, never from that annotation, so a user who set it expects a queue
    the job does not get (and `plan` would otherwise look at the wrong one)."""
    warning = ""
    if annotation is not None and annotation != queue:
        kind = BY_NAME.get(job.ref.kind)
        field = kind.queue_field if kind else "the job's queue field"
        owner = kind.operator if kind else "its operator"
        where = (
            f"its PodGroup's spec.queue is {queue}"
            if from_podgroup
            else f"{field} is {'unset' if queue == DEFAULT_QUEUE else queue}"
        )
        warning = (
            f"annotation {VOLCANO_QUEUE_ANNOTATION}={annotation} is not its queue ({owner} "
            f"ignores it): {where}, so Volcano schedules it in queue {queue} and it is "
            f"planned there; to run it in {annotation}, set {field}: {annotation}"
        )
    if queue == job.queue and warning == job.queue_warning:
        return job
    return replace(job, queue=queue, queue_warning=warning)
