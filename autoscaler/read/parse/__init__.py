"""Raw Kubernetes objects -> the frozen model. The only place that reads raw dicts.

Each object is decoded once, alone, into the record its watch cache keeps (`decoders`:
a `JobRecord`, `GroupRecord`, `QueueSpec`, ...); `assemble` then resolves what depends
on other objects (priority values, HPAs, pods per node) and `build_snapshot` joins that
with the free-GPU reading. Adding a field read from a job is its reader here (or in its
kind) and its field in the model. Every malformed object becomes an `UnmanagedJob` /
`InvalidGroup` whose message names the object and the field; nothing here raises on bad
input.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any

from autoscaler.core.model import (
    MILLI,
    PODS,
    ClusterSnapshot,
    ElasticJob,
    HostPort,
    InvalidGroup,
    Node,
    ObjectRef,
    PendingGroup,
    Plugin,
    PodShape,
    Quantities,
    QueueState,
    Reason,
    UnmanagedJob,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.options import ReadOptions
from autoscaler.core.resources import (
    UNBOUNDED_AT_ZERO,
    VOLCANO_QUEUE_ANNOTATION,
    WAITING_PHASES,
)
from autoscaler.read.fields import (
    MAX_RUNTIME_SECONDS,
    BadField,
    dig,
    fraction_field,
    parse_quantity,
    parse_time,
    read_measured,
    seconds_field,
    show,
)
from autoscaler.read.kinds import BY_NAME, KIND_NAMES, KINDS, JobKind, NotManaged, kind_of
from autoscaler.read.kinds.base import Workers
from autoscaler.read.kinds.kubeflow import PYTORCHJOB_KIND
from autoscaler.read.podspec import (
    finished_pod,
    frozen,
    is_extended,
    items,
    milli,
    read_node,
    read_pod_use,
    read_shape,
)
from autoscaler.read.records import (
    GroupRecord,
    HpaTarget,
    JobRecord,
    PodUse,
    PriorityValue,
    QueueSpec,
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HPA_KIND = "HorizontalPodAutoscaler"
DEFAULT_QUEUE = "default"
MAX_NAME_LENGTH = 253


@dataclass(frozen=True, slots=True)
class RawObjects:
    """Raw objects by kind, as read from the API or a snapshot file."""

    jobs: tuple[Mapping[str, Any], ...] = ()
    podgroups: tuple[Mapping[str, Any], ...] = ()
    queues: tuple[Mapping[str, Any], ...] = ()
    priorityclasses: tuple[Mapping[str, Any], ...] = ()
    nodes: tuple[Mapping[str, Any], ...] = ()
    pods: tuple[Mapping[str, Any], ...] = ()
    hpas: tuple[Mapping[str, Any], ...] = ()  # autoscaling/v2 HorizontalPodAutoscalers
    # what from_objects left out, counted: "ConfigMap (v1)", "no kind", "not a mapping"
    ignored: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objects: Iterable[Any]) -> RawObjects:
        """Sort a mixed list (e.g. `kubectl get ... -o yaml` items) by kind; a `List` is
        flattened; objects of kinds we do not use (or without a kind) are left out and
        counted in `ignored`, for the caller to warn about."""

        buckets: dict[str, list[Mapping[str, Any]]] = {
            "jobs": [],
            "PodGroup": [],
            "Queue": [],
            "PriorityClass": [],
            "Node": [],
            "Pod": [],
            HPA_KIND: [],
        }
        ignored: dict[str, int] = {}
        stack = list(objects)
        stack.reverse()
        while stack:
            obj = stack.pop()
            if not isinstance(obj, Mapping):
                ignored["not a mapping"] = ignored.get("not a mapping", 0) + 1
                continue
            kind = obj.get("kind")
            if (
                isinstance(kind, str)
                and kind.endswith("List")
                and isinstance(obj.get("items"), list)
            ):
                stack.extend(reversed(obj["items"]))
            elif kind_of(obj) is not None:
                buckets["jobs"].append(obj)
            elif kind in buckets:
                buckets[kind].append(obj)
            else:
                what = _kind_words(kind, obj.get("apiVersion"))
                ignored[what] = ignored.get(what, 0) + 1
        return cls(
            jobs=tuple(buckets["jobs"]),
            podgroups=tuple(buckets["PodGroup"]),
            queues=tuple(buckets["Queue"]),
            priorityclasses=tuple(buckets["PriorityClass"]),
            nodes=tuple(buckets["Node"]),
            pods=tuple(buckets["Pod"]),
            hpas=tuple(buckets[HPA_KIND]),
            ignored=ignored,
        )


def _kind_words(kind: Any, api_version: Any) -> str:
    if not isinstance(kind, str) or not kind:
        return "no kind"
    return f"{kind} ({api_version})" if isinstance(api_version, str) else kind


def ignored_words(ignored: Mapping[str, int]) -> str:
    """`3 object(s) ignored: 2 ConfigMap (v1), 1 no kind`, or "" when none were."""
    if not ignored:
        return ""
    total = sum(ignored.values())
    detail = ", ".join(f"{n} {what}" for what, n in sorted(ignored.items()))
    return f"{total} object(s) of kinds not planned ignored: {detail}"


def _created(meta: Mapping[str, Any]) -> datetime:
    return created_at(meta.get("creationTimestamp"))


def created_at(value: Any) -> datetime:
    """metadata.creationTimestamp as read (any JSON), EPOCH where it is not a time."""
    try:
        return parse_time(value, "metadata.creationTimestamp")
    except BadField:
        return EPOCH  # hand-written snapshots omit it; oldest-first is a safe default


def _ref(obj: Mapping[str, Any], kind: str, *, namespaced: bool = True) -> ObjectRef:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise BadField("metadata is missing")
    name = meta.get("name")
    namespace = meta.get("namespace", "default" if namespaced else "")
    if not isinstance(name, str) or not name:
        raise BadField("metadata.name is missing")
    if len(name) > MAX_NAME_LENGTH:
        raise BadField(f"metadata.name is longer than {MAX_NAME_LENGTH} characters")
    if namespaced and (not isinstance(namespace, str) or not namespace):
        raise BadField("metadata.namespace is missing")
    uid = meta.get("uid")
    return ObjectRef(namespace or "", name, kind, uid if isinstance(uid, str) else "")


def _fallback_ref(obj: Any, kind: str) -> ObjectRef:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    namespace = meta.get("namespace")
    name = name[:MAX_NAME_LENGTH] if isinstance(name, str) and name else "<no name>"
    namespace = namespace if isinstance(namespace, str) and namespace else "<no namespace>"
    return ObjectRef(namespace, name, kind)


# ---- priorities and queues ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Priorities:
    values: Mapping[str, int]
    default: int = 0

    def of(self, name: Any) -> int:
        if isinstance(name, str) and name in self.values:
            return self.values[name]
        return self.default

    @classmethod
    def parse(cls, objects: Iterable[Mapping[str, Any]]) -> Priorities:
        return cls.of_records(r for o in objects if (r := decode_priority_class(o)) is not None)

    @classmethod
    def of_records(cls, records: Iterable[PriorityValue]) -> Priorities:
        values: dict[str, int] = {}
        default = 0
        for r in records:
            values[r.name] = r.value
            if r.global_default:
                default = r.value
        return cls(values, default)


NO_PRIORITIES = Priorities({})


def decode_priority_class(obj: Mapping[str, Any]) -> PriorityValue | None:
    """A PriorityClass's name and value, or None when it has no usable value."""
    name = dig(obj, "metadata", "name")
    value = obj.get("value")
    if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int):
        return None
    return PriorityValue(name, value, obj.get("globalDefault") is True)


def decode_queue(obj: Mapping[str, Any], options: ReadOptions) -> QueueSpec | None:
    """A Queue's state, and its spec as the scheduler reads it: weight defaults to 1, an
    unreadable figure counts as unset. None for a Queue without a name."""
    name = dig(obj, "metadata", "name")
    if not isinstance(name, str) or not name:
        return None
    state = dig(obj, "status", "state")
    weight = dig(obj, "spec", "weight")
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight <= 0:
        weight = 1
    raw_capability = dig(obj, "spec", "capability")
    problems: list[str] = []
    try:
        capability = gpu_sum(raw_capability, options, "spec.capability")
    except BadField as e:
        capability = None
        problems.append(f"Queue {name}: {e}; it bounds nothing")
    limits = capability_limits(raw_capability, name, options.gpu_resource_names, problems)
    guarantee = readable_gpus(
        dig(obj, "spec", "guarantee", "resource"), options, "spec.guarantee.resource"
    )
    return QueueSpec(
        name,
        state=state if isinstance(state, str) and state else "Open",
        weight=float(weight),
        capability=None if capability is None else float(capability),
        guarantee=float(guarantee or 0),
        deserved=readable_gpus(dig(obj, "spec", "deserved"), options, "spec.deserved"),
        allocated=readable_gpus(dig(obj, "status", "allocated"), options, "status.allocated"),
        limits=limits,
        problems=tuple(problems),
    )


def _volcano_bounds(name: str, gpu_names: tuple[str, ...]) -> bool:
    """Whether Volcano's queue plugins bound a resource of this name other than GPUs: cpu,
    memory and the scalar resources its Resource keeps (ephemeral-storage, hugepages-*,
    extended and kubernetes.io/ resources), not `pods` (never compared) nor quota
    counts (count/*)."""
    if name in gpu_names or name == PODS or name.startswith("count/"):
        return False
    return (
        name in ("cpu", "memory", "ephemeral-storage")
        or name.startswith("hugepages-")
        or is_extended(name)
        or "kubernetes.io/" in name
    )


def capability_limits(
    resources: Any, queue: str, gpu_names: tuple[str, ...], problems: list[str]
) -> Quantities:
    """A Queue's spec.capability in every dimension but GPUs, milli-units, as Volcano
    reads it: 0 CPU or memory is unlimited (left out), 0 of another resource is a bound
    of 0. An unreadable figure is left out (no bound from it) and said in `problems`,
    naming the Queue and the field."""
    if resources is None:
        return ()
    if not isinstance(resources, Mapping):
        problems.append(
            f"Queue {queue}: spec.capability must be a mapping of resource to quantity, "
            f"got {show(resources)}; it bounds nothing"
        )
        return ()
    out: dict[str, int] = {}
    for res, value in resources.items():
        if not isinstance(res, str) or not _volcano_bounds(res, gpu_names):
            continue
        amount = milli(value)
        if amount is None:
            problems.append(
                f"Queue {queue}: spec.capability[{res}] must be a non-negative quantity "
                f"such as 100 or 400Gi, got {show(value)}; it bounds nothing"
            )
        elif amount or res not in UNBOUNDED_AT_ZERO:
            out[res] = amount
    return tuple(sorted(out.items()))


def queue_capacities(specs: Iterable[QueueSpec]) -> dict[str, int]:
    """GPUs each Queue lets its jobs hold by the API's own account: `spec.capability`, for
    `gpu_resource_names`. Not `spec.deserved`: under the capacity plugin a queue borrows
    beyond it up to its capability, and the proportion plugin does not read it. A queue
    that sets no capability, or sets it unreadably, has no bound here."""
    return {q.name: int(q.capability) for q in specs if q.capability is not None}


def decode_node(obj: Mapping[str, Any], options: ReadOptions) -> Node | None:
    """A node as the scheduler's filters see it (podspec.read_node): labels, taints,
    allocatable of every resource, Ready, cordoned. What its bound pods request is
    filled in when the snapshot is assembled."""
    return read_node(obj, options.gpu_resource_names)


def decode_pod(obj: Mapping[str, Any], options: ReadOptions) -> PodUse | None:
    """What an unfinished pod holds on its node (every resource: any pod can hold what a
    worker needs), which worker it is and its PodGroup; an unbound one (node "") says
    which job and gang it belongs to and its shape: a job's workers with no pod at all
    stop counting (HoldNoPods), a gang's pods say what it needs (resolve_gangs). None
    for a finished pod, or an unbound one of no job and no PodGroup."""
    if finished_pod(obj):
        return None
    ns = dig(obj, "metadata", "namespace")
    ns = ns if isinstance(ns, str) else ""
    group = dig(obj, "metadata", "annotations", _GROUP_ANNOTATION)
    # one string per gang, shared by its pods
    group = sys.intern(f"{ns}/{group}") if isinstance(group, str) and group else ""
    use = read_pod_use(obj, options.gpu_resource_names, group)
    if use is not None:
        return use
    owner = _owner(obj, ns) if ns else None
    if owner is not None and owner.kind.split(".")[0] not in KIND_NAMES:
        owner = None
    if owner is None and not group:
        return None
    shape = read_shape(
        dig(obj, "spec"), extended_resource_toleration=options.extended_resource_toleration
    )
    return PodUse(
        "",
        shape_gpus(shape, options),
        owner=(owner.namespace, owner.kind, owner.name, "") if owner is not None else None,
        group=group,
        shape=shape,
    )


def pods_by_owner(pods: Iterable[PodUse]) -> dict[tuple[str, str, str], int]:
    """Unfinished pods, bound or not, per job that made them: (namespace, kind, name)."""
    out: dict[tuple[str, str, str], int] = {}
    for p in pods:
        if p.owner is not None:
            key = p.owner[:3]
            out[key] = out.get(key, 0) + 1
    return out


def nodes_in_use(nodes: Iterable[Node], pods: Iterable[PodUse]) -> tuple[Node, ...]:
    """Each node with what its bound pods request of every resource, and the host ports
    they hold, by name (sorted by name)."""
    requested: dict[str, dict[str, int]] = {}
    gpus: dict[str, int] = {}
    ports: dict[str, list[HostPort]] = {}
    for pod in pods:
        if not pod.node:
            continue  # unbound: holds nothing on a node yet
        into = requested.setdefault(pod.node, {})
        for name, value in pod.requests:
            into[name] = into.get(name, 0) + value
        gpus[pod.node] = gpus.get(pod.node, 0) + pod.gpus
        if pod.ports:
            ports.setdefault(pod.node, []).extend(pod.ports)
    out = [
        replace(
            n,
            used=gpus.get(n.name, 0),
            requested=frozen(requested[n.name]),
            ports=tuple(ports.get(n.name, ())),
        )
        if n.name in requested
        else n
        for n in nodes
    ]
    return tuple(sorted(out, key=lambda n: n.name))


def parse_nodes(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], options: ReadOptions
) -> tuple[Node, ...]:
    """Each node as the scheduler sees it, with what its bound, unfinished pods request
    (a pod's request as the scheduler counts it: podspec.pod_requests), from raw objects."""
    return nodes_in_use(
        (n for o in nodes if (n := decode_node(o, options)) is not None),
        (p for o in pods if (p := decode_pod(o, options)) is not None),
    )


def worker_nodes(pods: Iterable[PodUse]) -> dict[tuple[str, str, str, str], tuple[str, ...]]:
    """(namespace, kind, name, worker group) of each job -> the node of each worker by
    index ("" where no pod of that index is bound)."""
    found: dict[tuple[str, str, str, str], dict[int, str]] = {}
    for pod in pods:
        if pod.owner is not None and pod.index >= 0:
            found.setdefault(pod.owner, {})[pod.index] = pod.node
    return {
        owner: tuple(by_index.get(i, "") for i in range(max(by_index) + 1))
        for owner, by_index in found.items()
    }


def volcano_view(
    plugin: Plugin,
    states: Mapping[str, QueueState],
    specs: Iterable[QueueSpec],
    nodes: tuple[Node, ...] | None,
    gpu_names: tuple[str, ...] = ("nvidia.com/gpu",),
) -> tuple[VolcanoView, dict[str, QueueState]]:
    """The view headroom is computed from: each queue's metrics joined with its Queue
    object's weight, capability and guarantee (the object is what the scheduler reads)."""
    by_name = {q.name: q for q in specs}
    queues: dict[str, VolcanoQueue] = {}
    out = dict(states)
    for name, state in states.items():
        vq = state.volcano
        if vq is None:
            continue
        spec = by_name.get(name)
        if spec is not None:
            vq = replace(
                vq,
                weight=spec.weight,
                capability=spec.capability,
                guarantee=spec.guarantee,
                spec_deserved=None if spec.deserved is None else float(spec.deserved),
            )
            out[name] = replace(state, volcano=vq)
        queues[name] = vq
    # A Queue without series is an idle one (under proportion the scheduler exports
    # nothing for a queue that never had a job): it still takes part in the water-fill
    # with what its waiting gangs will ask for, and its guarantee still counts. Its own
    # jobs, if any, hold: that queue's state stays unknown.
    for name, spec in by_name.items():
        if name not in queues:
            queues[name] = VolcanoQueue(
                name,
                weight=spec.weight,
                capability=spec.capability,
                guarantee=spec.guarantee,
                spec_deserved=None if spec.deserved is None else float(spec.deserved),
            )
    return VolcanoView(plugin, queues, nodes, gpu_names=gpu_names), out


def readable_gpus(resources: Any, options: ReadOptions, field: str) -> int | None:
    """gpu_sum, or None where the figure cannot be read: it then bounds nothing (the
    API server validated these objects; an unreadable one is not ours to report)."""
    try:
        return gpu_sum(resources, options, field)
    except BadField:
        return None


def gpu_sum(resources: Any, options: ReadOptions, field: str) -> int | None:
    if not isinstance(resources, Mapping):
        return None
    present = [n for n in options.gpu_resource_names if n in resources]
    if not present:
        return None
    return sum(parse_quantity(resources[n], f"{field}[{n}]") for n in present)


# ---- jobs -----------------------------------------------------------------------------


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
    queue = kind.queue(obj)
    meta = obj["metadata"]

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
    user reads first: going away, then a malformed bound, then paused, then the range
    itself. `known` gains the range once it is read."""
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
        if not exc.range_error:
            raise
        bad_range = exc
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


# ---- PodGroups ------------------------------------------------------------------------


def _waiting(obj: Mapping[str, Any]) -> str | None:
    phase = dig(obj, "status", "phase")
    if not isinstance(phase, str):
        return None
    if phase in WAITING_PHASES:
        return phase
    if phase == "Unknown":
        conditions = dig(obj, "status", "conditions")
        if isinstance(conditions, list) and any(
            dig(c, "type") == "Unschedulable" and dig(c, "status") == "True" for c in conditions
        ):
            return phase
    return None


def parse_podgroup(
    obj: Mapping[str, Any], options: ReadOptions, priorities: Priorities
) -> PendingGroup | InvalidGroup | None:
    """A waiting PodGroup that needs GPUs, an invalid one, or None (running, done, or
    GPU-free: nothing for the planner to make room for)."""

    try:
        ref = _ref(obj, "PodGroup")
    except BadField as exc:
        return InvalidGroup(_fallback_ref(obj, "PodGroup"), DEFAULT_QUEUE, str(exc))
    phase = _waiting(obj)
    if phase is None:
        return None
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    queue = spec.get("queue")
    queue = queue if isinstance(queue, str) and queue else DEFAULT_QUEUE
    min_resources = spec.get("minResources") or {}
    if not isinstance(min_resources, Mapping):
        return InvalidGroup(ref, queue, f"{ref}: spec.minResources must be a mapping")
    gpus = 0
    try:
        for name in options.gpu_resource_names:
            if name in min_resources:
                gpus += parse_quantity(min_resources[name], f"spec.minResources[{name}]")
            elif f"requests.{name}" in min_resources:
                gpus += parse_quantity(
                    min_resources[f"requests.{name}"], f"spec.minResources[requests.{name}]"
                )
    except BadField as exc:
        return InvalidGroup(ref, queue, f"{ref}: {exc}")
    # gpus 0: minResources names no GPU, which a template with its GPUs in limits only
    # gives too: its pods or its job's templates say what it needs (resolve_gangs)
    min_member = spec.get("minMember")
    return PendingGroup(
        ref=ref,
        queue=queue,
        gpus=gpus,
        created=_created(obj["metadata"]),
        priority=priorities.of(spec.get("priorityClassName")),
        owner=_owner(obj, ref.namespace),
        phase=phase,
        min_member=min_member if isinstance(min_member, int) and min_member > 0 else 0,
    )


def _owner(obj: Mapping[str, Any], namespace: str) -> ObjectRef | None:
    return owner_of(dig(obj, "metadata", "ownerReferences"), namespace)


def owner_of(owners: Any, namespace: str) -> ObjectRef | None:
    """The object's owner by its metadata.ownerReferences (as served: any JSON): its
    controller, else its first reference with a name and a kind."""
    if not isinstance(owners, list):
        return None
    candidates = [o for o in owners if isinstance(o, Mapping)]
    controller = [o for o in candidates if o.get("controller") is True] or candidates
    for o in controller:
        name, kind = o.get("name"), o.get("kind")
        if isinstance(name, str) and isinstance(kind, str):
            api_version = o.get("apiVersion")
            if kind_of({"kind": kind, "apiVersion": api_version}) is None and kind in KIND_NAMES:
                # same kind name, other API group (a batch/v1 Job is no Volcano Job)
                kind = f"{kind}.{str(api_version).split('/')[0]}"
            uid = o.get("uid")
            return ObjectRef(namespace, name, kind, uid if isinstance(uid, str) else "")
    return None


# ---- HorizontalPodAutoscalers ----------------------------------------------------------


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
    )


# ---- one decoder per kind: what a watch cache (or a snapshot file) keeps of an object ----


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
    return JobRecord(job, name if isinstance(name, str) else None, annotation, gang, gpus)


def _may_wait(job: ElasticJob | UnmanagedJob) -> bool:
    """Whether the job's gang may be waiting: not when it is done, nor when every worker
    it asked for runs (the common case, and reading its templates costs a third of its
    decoding)."""
    if isinstance(job, ElasticJob):
        return job.active < job.replicas
    if job.reason in (Reason.FINISHED, Reason.SUSPENDED):
        return False
    return job.replicas is None or not job.gpus_per_worker or job.inflight_gpus > 0


def shape_gpus(shape: PodShape, options: ReadOptions) -> int:
    """Whole GPUs a pod of this shape requests (gpu_resource_names)."""
    return sum(shape.amount(name) for name in options.gpu_resource_names) // MILLI


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


def podgroup_queues(groups: Iterable[GroupRecord]) -> dict[tuple[str, str, str], str]:
    """(namespace, kind, name) of the job that made each PodGroup -> its spec.queue."""
    return {
        (g.owner.namespace, g.owner.kind, g.owner.name): g.queue
        for g in groups
        if g.owner is not None and g.queue
    }


def decode_podgroup(obj: Mapping[str, Any], options: ReadOptions) -> GroupRecord:
    phase = dig(obj, "status", "phase")
    name = dig(obj, "spec", "priorityClassName")
    group = parse_podgroup(obj, options, NO_PRIORITIES)
    queue = dig(obj, "spec", "queue")
    namespace = dig(obj, "metadata", "namespace")
    return GroupRecord(
        group.ref if group is not None else _fallback_ref(obj, "PodGroup"),
        group,
        phase if isinstance(phase, str) else "",
        name if isinstance(name, str) else None,
        queue if isinstance(queue, str) and queue else DEFAULT_QUEUE,
        _owner(obj, namespace) if isinstance(namespace, str) else None,
    )


Decoder = Callable[[Mapping[str, Any]], Any]


def decoders(options: ReadOptions) -> dict[str, Decoder]:
    """Kubernetes kind -> the function that decodes one of its objects into the record
    its cache holds (None: nothing the planner reads). The caches and snapshot files
    use the same ones."""
    out: dict[str, Decoder] = {
        k.resource.kind: partial(decode_job, options=options, kind=k) for k in KINDS
    }
    out.update(
        {
            "PodGroup": partial(decode_podgroup, options=options),
            "Queue": partial(decode_queue, options=options),
            "PriorityClass": decode_priority_class,
            "Node": partial(decode_node, options=options),
            "Pod": partial(decode_pod, options=options),
            HPA_KIND: decode_hpa,
        }
    )
    return out


@dataclass(frozen=True, slots=True)
class Records:
    """Every decoded object a snapshot is assembled from, by kind."""

    jobs: tuple[JobRecord, ...] = ()
    groups: tuple[GroupRecord, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    priorities: tuple[PriorityValue, ...] = ()
    nodes: tuple[Node, ...] = ()
    pods: tuple[PodUse, ...] = ()
    hpas: tuple[HpaTarget, ...] = ()
    # `pods` are every unfinished pod (a pod watch, a snapshot file with pods): a job
    # with none there has none (HoldNoPods); else pods are unknown
    pods_known: bool = False

    @classmethod
    def decode(cls, raw: RawObjects, options: ReadOptions) -> Records:
        """Raw objects (a snapshot file's) through the caches' decoders."""

        def each(objects: Iterable[Mapping[str, Any]], decode: Decoder) -> tuple[Any, ...]:
            return tuple(r for o in objects if (r := decode(o)) is not None)

        by_kind = decoders(options)
        return cls(
            jobs=tuple(decode_job(o, options) for o in raw.jobs),
            groups=each(raw.podgroups, by_kind["PodGroup"]),
            queues=each(raw.queues, by_kind["Queue"]),
            priorities=each(raw.priorityclasses, by_kind["PriorityClass"]),
            nodes=each(raw.nodes, by_kind["Node"]),
            pods=each(raw.pods, by_kind["Pod"]),
            hpas=each(raw.hpas, by_kind[HPA_KIND]),
            pods_known=bool(raw.pods),
        )


# ---- the snapshot ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assembled:
    """What a snapshot takes from the objects alone, whatever Prometheus says: the
    cross-object facts resolved (priorities by PriorityClass name, jobs an HPA scales,
    each node's GPUs in use). The daemon assembles again only when a cache changed."""

    jobs: tuple[ElasticJob, ...]
    unmanaged: tuple[UnmanagedJob, ...]
    pending: tuple[PendingGroup, ...]
    invalid: tuple[InvalidGroup, ...]
    queues: tuple[QueueSpec, ...]
    nodes: tuple[Node, ...] | None
    pods_by_owner: Mapping[tuple[str, str, str], int] | None = None
    # what each queue's bound pods request, for the queues whose capability names a
    # dimension other than GPUs (queue_allocated)
    queue_allocated: Mapping[str, Quantities] = field(default_factory=dict)
    # GPUs each GPU-capped queue's bound pods hold outside its counted worker groups
    # (queue_other_gpus)
    queue_other_gpus: Mapping[str, int] = field(default_factory=dict)


_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


def resolve_gangs(
    pending: list[PendingGroup], records: Records
) -> tuple[list[PendingGroup], list[InvalidGroup]]:
    """Each waiting gang's need, from the first of: its pods, when at least minMember
    of them exist (their requests, a limit counting as the request); its owner's
    templates, as its operator counts the gang (JobRecord.gang); its spec.minResources.
    A gang that needs no GPU by what is known leaves; one whose need cannot be known
    (minResources names no GPU, no pods yet, its job of a kind we read but not read) is
    shown as invalid, with why, not dropped."""
    by_group: dict[str, list[PodUse]] = {}
    if records.pods_known:
        for p in records.pods:
            if p.group:
                by_group.setdefault(p.group, []).append(p)
    gangs = {
        (r.job.ref.namespace, r.job.ref.kind, r.job.ref.name): r
        for r in records.jobs
        if r.gang is not None
    }
    out: list[PendingGroup] = []
    unknown: list[InvalidGroup] = []
    for g in pending:
        resolved = _need_from_pods(g, by_group.get(f"{g.ref.namespace}/{g.ref.name}", ()))
        o = g.owner
        record = gangs.get((o.namespace, o.kind, o.name)) if o is not None else None
        if resolved is None and record is not None and record.gang is not None:
            resolved = replace(g, gpus=record.gang_gpus, pods=record.gang, need_from="template")
        resolved = resolved or g
        if resolved.gpus > 0:
            out.append(resolved)
        elif o is not None and o.kind in KIND_NAMES and record is None:
            unknown.append(
                InvalidGroup(
                    g.ref,
                    g.queue,
                    f"{g.ref}: its GPU need cannot be known: spec.minResources names no GPU, "
                    f"its pods do not exist yet, and {o} is not read (not in a watched "
                    "namespace, or its pod templates are unreadable)",
                )
            )
    return out, unknown


def _need_from_pods(g: PendingGroup, pods: Iterable[PodUse]) -> PendingGroup | None:
    """g with its need from its pods, when at least minMember of them exist."""
    pods = list(pods)
    if not pods or len(pods) < max(1, g.min_member):
        return None
    unbound: dict[PodShape, int] = {}
    for p in pods:
        if not p.node and p.shape is not None:
            unbound[p.shape] = unbound.get(p.shape, 0) + 1
    return replace(g, gpus=sum(p.gpus for p in pods), pods=tuple(unbound.items()), need_from="pods")


def assemble(records: Records) -> Assembled:
    priorities = Priorities.of_records(records.priorities)
    targets = targets_of(records.hpas)
    group_queues = podgroup_queues(records.groups)
    placed = worker_nodes(records.pods) if records.pods else {}
    jobs: list[ElasticJob] = []
    unmanaged: list[UnmanagedJob] = []
    seen: set[tuple[str, str, str]] = set()
    for record in records.jobs:
        job = record.job
        queue = group_queues.get((job.ref.namespace, job.ref.kind, job.ref.name))
        if queue is not None:  # where Volcano runs it, whatever the job says
            job = in_queue(job, queue, record.queue_annotation, from_podgroup=True)
        if isinstance(job, ElasticJob):
            value = priorities.of(record.priority_class)
            if value != job.priority:
                job = replace(job, priority=value)
            job = _with_worker_nodes(job, placed)
            job = _hpa_skip(job, targets)
        key = (job.ref.namespace, job.ref.name, job.ref.kind)
        if key in seen:
            unmanaged.append(
                UnmanagedJob(
                    job.ref, job.queue, Reason.DUPLICATE, f"{job.ref}: appears more than once"
                )
            )
            continue
        seen.add(key)
        if isinstance(job, ElasticJob):
            jobs.append(job)
        else:
            unmanaged.append(job)
    pending: list[PendingGroup] = []
    invalid: list[InvalidGroup] = []
    for g in records.groups:
        group = g.group
        if isinstance(group, PendingGroup):
            value = priorities.of(g.priority_class)
            pending.append(group if value == group.priority else replace(group, priority=value))
        elif isinstance(group, InvalidGroup):
            invalid.append(group)
    pending, unknown = resolve_gangs(pending, records)
    invalid += unknown
    return Assembled(
        tuple(jobs),
        tuple(unmanaged),
        tuple(pending),
        tuple(invalid),
        records.queues,
        nodes_in_use(records.nodes, records.pods) if records.nodes else None,
        pods_by_owner(records.pods) if records.pods_known else None,
        queue_allocated(records) if records.pods_known else {},
        queue_other_gpus(records, jobs, unmanaged) if records.pods_known else {},
    )


def queue_allocated(records: Records) -> dict[str, Quantities]:
    """What the bound, unfinished pods of each queue request, for the queues whose
    Queue object bounds a dimension other than GPUs (others cost nothing). A pod is in
    the queue of its PodGroup (annotation scheduling.k8s.io/group-name -> spec.queue),
    as Volcano counts a queue's allocated."""
    bounded = {q.name for q in records.queues if q.limits}
    if not bounded:
        return {}
    queue_of = {
        f"{g.ref.namespace}/{g.ref.name}": g.queue for g in records.groups if g.queue in bounded
    }
    sums: dict[str, dict[str, int]] = {}
    for p in records.pods:
        if p.node and p.group and (q := queue_of.get(p.group)) is not None:
            into = sums.setdefault(q, {})
            for name, value in p.requests:
                into[name] = into.get(name, 0) + value
    return {q: frozen(amounts) for q, amounts in sums.items()}


def queue_other_gpus(
    records: Records, jobs: Iterable[ElasticJob], unmanaged: Iterable[UnmanagedJob]
) -> dict[str, int]:
    """GPUs the bound, unfinished pods of each queue with a GPU capability hold outside
    the worker groups that the capability rule counts by spec (planner
    `_room_by_capacity`): a PyTorchJob's Master, an MPIJob's launcher, a plain pod of
    the queue's PodGroups, a worker group we cannot read. Volcano counts every one of
    them against the Queue; counting only the workers asked for workers it cannot bind."""
    capped = {q.name for q in records.queues if q.capability is not None}
    if not capped:
        return {}
    queue_of = {
        f"{g.ref.namespace}/{g.ref.name}": g.queue for g in records.groups if g.queue in capped
    }
    counted = {(j.ref.namespace, j.ref.kind, j.ref.name, worker_group(j.workers_at)) for j in jobs}
    counted |= {
        (u.ref.namespace, u.ref.kind, u.ref.name, u.workers_group)
        for u in unmanaged
        if u.workers_group and u.replicas is not None and u.gpus_per_worker
    }
    sums: dict[str, int] = {}
    for p in records.pods:
        if not (p.node and p.gpus and p.group) or (p.index >= 0 and p.owner in counted):
            continue
        if (q := queue_of.get(p.group)) is not None:
            sums[q] = sums.get(q, 0) + p.gpus
    return sums


def _with_worker_nodes(
    job: ElasticJob, placed: Mapping[tuple[str, str, str, str], tuple[str, ...]]
) -> ElasticJob:
    """The job with the node of each of its workers (a new object only when it moved)."""
    ref = job.ref
    nodes = placed.get((ref.namespace, ref.kind, ref.name, worker_group(job.workers_at)), ())
    return job if nodes == job.worker_nodes else replace(job, worker_nodes=nodes)


def build_snapshot(
    objects: RawObjects | Records,
    free: Mapping[str, QueueState],
    options: ReadOptions,
    *,
    problem: Reason | None = None,
    message: str = "",
    plugin: Plugin | None = None,
    queues_listed: bool = False,
    assembled: Assembled | None = None,
) -> ClusterSnapshot:
    """The snapshot of decoded objects (raw ones are decoded first) and `free`, what the
    free-GPU source said per queue; a queue that jobs or gangs use but `free` lacks is
    unknown (held), never zero. `assembled`: `assemble(objects)`, kept by a caller whose
    objects did not change since.

    `queues_listed`: the queues are every Queue of the cluster (a synced watch cache),
    so a queue named by a job or gang but absent there was deleted (or never made) and
    holds (HoldQueueMissing), whatever Prometheus still serves for it. Not set for a
    snapshot file (it may list no Queue at all), and no Queue at all means no Volcano
    queues to check against: Volcano itself always keeps its `default` queue."""

    if assembled is None:
        records = Records.decode(objects, options) if isinstance(objects, RawObjects) else objects
        assembled = assemble(records)
    a = assembled
    queues = _queue_states(a, free, queues_listed)
    view = None
    if plugin is not None:
        view, queues = volcano_view(plugin, queues, a.queues, a.nodes, options.gpu_resource_names)
        if a.nodes is not None and not options.node_fit:
            view = replace(
                view,
                nodes=None,
                cluster_gpus=sum(n.allocatable for n in a.nodes if n.schedulable),
            )
    return ClusterSnapshot(
        queues=queues,
        jobs=a.jobs,
        unmanaged=a.unmanaged,
        pending=a.pending,
        invalid_groups=a.invalid,
        problem=problem,
        message=message,
        volcano=view,
        pods_by_owner=a.pods_by_owner,
    )


def _queue_states(
    a: Assembled, free: Mapping[str, QueueState], queues_listed: bool
) -> dict[str, QueueState]:
    """Every queue a job or gang names, or the free-GPU source reads: its reading (unknown
    where there is none) with what its Queue object says of its state and capacity."""
    queue_states = {q.name: q.state for q in a.queues}
    specs = {q.name: q for q in a.queues}
    capacities = queue_capacities(a.queues)
    names = set(free) | {j.queue for j in a.jobs} | {u.queue for u in a.unmanaged}
    names |= {g.queue for g in a.pending}
    queues: dict[str, QueueState] = {}
    for name in sorted(names):
        state = free.get(name)
        if state is None:
            state = QueueState(
                name,
                None,
                Reason.METRICS_MISSING,
                f"queue {name} has no series in the free-GPU query",
            )
        qstate = queue_states.get(name)
        if qstate is not None and qstate != state.state:
            state = replace(state, state=qstate)
        if qstate is None and queues_listed and queue_states:
            state = replace(
                state,
                problem=Reason.QUEUE_MISSING,
                message=f"queue {name}: no Queue object of that name (deleted, or never "
                "created); Volcano schedules nothing of it, whatever its metrics say",
            )
        capacity = capacities.get(name)
        if capacity != state.capacity_gpus:
            state = replace(state, capacity_gpus=capacity)
        other = a.queue_other_gpus.get(name, 0) if capacity is not None else 0
        if other != state.other_gpus:
            state = replace(state, other_gpus=other)
        spec = specs.get(name)
        if spec is not None and (spec.limits or spec.problems):
            state = replace(
                state,
                limits=spec.limits,
                allocated=a.queue_allocated.get(name, ()),
                notes=spec.problems,
            )
        queues[name] = state
    return queues
