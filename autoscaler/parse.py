"""Raw Kubernetes objects -> the frozen model. The only place that reads raw dicts.

Every malformed object becomes an `UnmanagedJob` / `InvalidGroup` whose message names the
object and the field; nothing here raises on bad input.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from .model import (
    ClusterSnapshot,
    ElasticJob,
    InvalidGroup,
    ObjectRef,
    PendingGroup,
    QueueState,
    Reason,
    UnmanagedJob,
)
from .resources import FINISHED_CONDITIONS, VOLCANO_QUEUE_ANNOTATION, WAITING_PHASES
from .settings import Settings

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DEFAULT_QUEUE = "default"
MAX_NAME_LENGTH = 253
MAX_REPLICAS = 100_000  # far above any real job; guards arithmetic against hostile values


class BadField(ValueError):
    """A field that cannot be used; str() is the message for the user."""


@dataclass(frozen=True, slots=True)
class RawObjects:
    """Raw objects by kind, as read from the API or a snapshot file."""

    jobs: tuple[Mapping[str, Any], ...] = ()
    podgroups: tuple[Mapping[str, Any], ...] = ()
    queues: tuple[Mapping[str, Any], ...] = ()
    priorityclasses: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def from_objects(cls, objects: Iterable[Any]) -> RawObjects:
        """Sort a mixed list (e.g. `kubectl get ... -o yaml` items) by kind; a `List` is
        flattened; kinds we do not use are ignored."""

        buckets: dict[str, list[Mapping[str, Any]]] = {
            "PyTorchJob": [],
            "PodGroup": [],
            "Queue": [],
            "PriorityClass": [],
        }
        stack = list(objects)
        stack.reverse()
        while stack:
            obj = stack.pop()
            if not isinstance(obj, Mapping):
                continue
            kind = obj.get("kind")
            if (
                isinstance(kind, str)
                and kind.endswith("List")
                and isinstance(obj.get("items"), list)
            ):
                stack.extend(reversed(obj["items"]))
            elif kind in buckets:
                buckets[kind].append(obj)
        return cls(
            jobs=tuple(buckets["PyTorchJob"]),
            podgroups=tuple(buckets["PodGroup"]),
            queues=tuple(buckets["Queue"]),
            priorityclasses=tuple(buckets["PriorityClass"]),
        )


# ---- small field readers --------------------------------------------------------------


def dig(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _int_field(value: Any, field: str, *, minimum: int = 0, maximum: int = MAX_REPLICAS) -> int:
    # bool is an int subclass: `replicas: true` is garbage, not 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadField(f"{field} must be an integer, got {_show(value)}")
    if value < minimum or value > maximum:
        raise BadField(f"{field} must be between {minimum} and {maximum}, got {value}")
    return value


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
_SUFFIX = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
MAX_GPUS = 1_000_000


def parse_quantity(value: Any, field: str) -> int:
    """A whole-number Kubernetes quantity of an extended resource (GPUs come whole).

    Accepts the API's quantity grammar (`8`, `1e3`, `2k`, `4000m`); the message says what
    the value means when it is not a whole number of GPUs."""

    if isinstance(value, bool):
        raise BadField(f"{field} must be a quantity (a number of GPUs), got {_show(value)}")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise BadField(f"{field} must be a finite number of GPUs, got {_show(value)}")
        number = Decimal(repr(value))
    elif isinstance(value, str) and len(value) <= 64 and (match := _QUANTITY.match(value.strip())):
        number = Decimal(match["number"])
        if match["suffix"]:
            number *= _SUFFIX[match["suffix"]]
        elif match["exponent"]:
            exponent = int(match["exponent"])
            if abs(exponent) > 30:
                raise BadField(f"{field} is out of range: {_show(value)}")
            number = number.scaleb(exponent)
        if match["sign"] == "-":
            number = -number
    else:
        raise BadField(
            f"{field} must be a Kubernetes quantity such as 2 or 1e3, got {_show(value)}"
        )
    if number < 0:
        raise BadField(f"{field} must not be negative, got {_show(value)}")
    if number > MAX_GPUS:
        raise BadField(f"{field} is out of range: {_show(value)} is more than {MAX_GPUS} GPUs")
    if number != number.to_integral_value():
        raise BadField(
            f"{field} must be a whole number of GPUs, got {_show(value)} (= {number.normalize():f})"
        )
    return int(number)


def parse_time(value: Any, field: str) -> datetime:
    if not isinstance(value, str) or not value:
        raise BadField(f"{field} must be an RFC 3339 time, got {_show(value)}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise BadField(f"{field} must be an RFC 3339 time, got {_show(value)}") from None
    if parsed.tzinfo is None:
        raise BadField(f"{field} must carry a time zone (RFC 3339), got {_show(value)}")
    return parsed.astimezone(UTC)


def _created(meta: Mapping[str, Any]) -> datetime:
    try:
        return parse_time(meta.get("creationTimestamp"), "metadata.creationTimestamp")
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
        values: dict[str, int] = {}
        default = 0
        for obj in objects:
            name = dig(obj, "metadata", "name")
            value = obj.get("value")
            if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int):
                continue
            values[name] = value
            if obj.get("globalDefault") is True:
                default = value
        return cls(values, default)


def parse_queue_states(objects: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    states: dict[str, str] = {}
    for obj in objects:
        name = dig(obj, "metadata", "name")
        if isinstance(name, str) and name:
            state = dig(obj, "status", "state")
            states[name] = state if isinstance(state, str) and state else "Open"
    return states


def parse_queue_capacities(
    objects: Iterable[Mapping[str, Any]], settings: Settings
) -> dict[str, int]:
    """GPUs each Queue lets its jobs hold, by the API's own account: `spec.capability`,
    else `spec.deserved` (what our query lets it grow into), for `gpu_resource_names`.
    A queue that sets neither, or sets them unreadably, has no bound here."""
    capacities: dict[str, int] = {}
    for obj in objects:
        name = dig(obj, "metadata", "name")
        if not isinstance(name, str) or not name:
            continue
        for field in ("capability", "deserved"):
            try:
                gpus = gpu_sum(dig(obj, "spec", field), settings, f"spec.{field}")
            except BadField:
                gpus = None
            if gpus is not None:
                capacities[name] = gpus
                break
    return capacities


def gpu_sum(resources: Any, settings: Settings, field: str) -> int | None:
    if not isinstance(resources, Mapping):
        return None
    present = [n for n in settings.gpu_resource_names if n in resources]
    if not present:
        return None
    return sum(parse_quantity(resources[n], f"{field}[{n}]") for n in present)


# ---- jobs -----------------------------------------------------------------------------


def job_queue(obj: Mapping[str, Any]) -> str:
    queue = dig(obj, "spec", "runPolicy", "schedulingPolicy", "queue")
    if isinstance(queue, str) and queue:
        return queue
    queue = dig(obj, "metadata", "annotations", VOLCANO_QUEUE_ANNOTATION)
    if isinstance(queue, str) and queue:
        return queue
    return DEFAULT_QUEUE


def gpus_per_worker(template: Any, resource_names: Iterable[str], field: str) -> int:
    """GPUs one worker pod asks for: per container, limits (else requests) of every
    configured resource name, summed over containers. Init containers run before, not
    beside, the main ones, so they do not add to what a running worker holds."""

    containers = dig(template, "spec", "containers")
    if not isinstance(containers, list) or not containers:
        raise BadField(f"{field}.spec.containers is missing")
    total = 0
    for i, container in enumerate(containers):
        resources = dig(container, "resources")
        limits = dig(resources, "limits") or {}
        requests = dig(resources, "requests") or {}
        if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
            raise BadField(f"{field}.spec.containers[{i}].resources must be a mapping")
        for name in resource_names:
            where = f"{field}.spec.containers[{i}].resources"
            limit = (
                parse_quantity(limits[name], f"{where}.limits[{name}]") if name in limits else None
            )
            request = (
                parse_quantity(requests[name], f"{where}.requests[{name}]")
                if name in requests
                else None
            )
            # Kubernetes refuses a pod whose extended-resource request and limit differ:
            # such a worker never runs, and planning its GPUs would promise phantom ones.
            if limit is not None and request is not None and limit != request:
                raise BadField(
                    f"{where}.limits[{name}]={limit} differs from "
                    f"{where}.requests[{name}]={request}: Kubernetes rejects such a pod"
                )
            total += limit if limit is not None else (request or 0)
    return total


def _finished_or_suspended(obj: Mapping[str, Any]) -> tuple[Reason, str] | None:
    conditions = dig(obj, "status", "conditions")
    if isinstance(conditions, list):
        for cond in conditions:
            if dig(cond, "status") == "True" and dig(cond, "type") in FINISHED_CONDITIONS:
                return Reason.FINISHED, f"job has condition {cond['type']}"
        for cond in conditions:
            if dig(cond, "status") == "True" and dig(cond, "type") == "Suspended":
                return Reason.SUSPENDED, "job has condition Suspended"
    if dig(obj, "spec", "runPolicy", "suspend") is True:
        return Reason.SUSPENDED, "spec.runPolicy.suspend is true"
    return None


def parse_job(
    obj: Mapping[str, Any], settings: Settings, priorities: Priorities
) -> ElasticJob | UnmanagedJob:
    """One PyTorchJob -> an ElasticJob the planner may resize, or why it may not."""

    try:
        ref = _ref(obj, "PyTorchJob")
    except BadField as exc:
        return UnmanagedJob(
            _fallback_ref(obj, "PyTorchJob"), DEFAULT_QUEUE, Reason.INVALID_SPEC, str(exc)
        )
    queue = job_queue(obj)
    meta = obj["metadata"]
    spec = obj.get("spec")

    def unmanaged(reason: Reason, message: str, **known: Any) -> UnmanagedJob:
        return UnmanagedJob(ref, queue, reason, f"{ref}: {message}", **known)

    if not isinstance(spec, Mapping):
        return unmanaged(Reason.INVALID_SPEC, "spec is missing")
    done = _finished_or_suspended(obj)
    if done is not None:
        return unmanaged(*done)

    # What the job holds and is owed, known before deciding whether we manage it, so that
    # even a job we leave alone keeps its promised GPUs in the queue's accounting.
    worker = dig(spec, "pytorchReplicaSpecs", "Worker")
    if not isinstance(worker, Mapping):
        return unmanaged(Reason.INVALID_SPEC, "spec.pytorchReplicaSpecs.Worker is missing")
    try:
        replicas = _int_field(worker.get("replicas", 1), "spec.pytorchReplicaSpecs.Worker.replicas")
    except BadField as exc:
        return unmanaged(Reason.INVALID_REPLICAS, str(exc))
    try:
        gpw = gpus_per_worker(
            worker.get("template"),
            settings.gpu_resource_names,
            "spec.pytorchReplicaSpecs.Worker.template",
        )
    except BadField as exc:
        return unmanaged(Reason.INVALID_SPEC, str(exc), replicas=replicas)
    active_raw = dig(obj, "status", "replicaStatuses", "Worker", "active")
    try:
        active = (
            0
            if active_raw is None
            else _int_field(active_raw, "status.replicaStatuses.Worker.active")
        )
    except BadField as exc:
        return unmanaged(Reason.INVALID_SPEC, str(exc), replicas=replicas, gpus_per_worker=gpw)
    inflight = max(0, replicas - active) * gpw
    known = {"replicas": replicas, "gpus_per_worker": gpw or None, "inflight_gpus": inflight}
    if meta.get("deletionTimestamp") is not None:
        # a finalizer keeps it alive; a resize now would restart a job that is going away
        return unmanaged(
            Reason.TERMINATING,
            "metadata.deletionTimestamp is set: the job is being deleted",
            **known,
        )

    elastic = spec.get("elasticPolicy")
    if elastic is None:
        return unmanaged(Reason.NOT_ELASTIC, "spec.elasticPolicy is not set", **known)
    if not isinstance(elastic, Mapping):
        return unmanaged(Reason.INVALID_POLICY, "spec.elasticPolicy must be a mapping", **known)
    if elastic.get("metrics"):
        return unmanaged(
            Reason.OPERATOR_HPA,
            "spec.elasticPolicy.metrics is set: training-operator scales it with its own HPA",
            **known,
        )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        return unmanaged(
            Reason.INVALID_ANNOTATION, "metadata.annotations must be a mapping", **known
        )
    paused = annotations.get(settings.paused_annotation)
    if isinstance(paused, str) and paused.strip().lower() == "true":
        return unmanaged(
            Reason.PAUSED, f'annotation {settings.paused_annotation} is "true"', **known
        )

    try:
        min_r, max_r = _elastic_bounds(elastic, replicas)
    except BadField as exc:
        return unmanaged(Reason.INVALID_POLICY, str(exc), **known)
    known.update(min_replicas=min_r, max_replicas=max_r)
    if gpw == 0:
        names = ", ".join(settings.gpu_resource_names)
        return unmanaged(
            Reason.INVALID_SPEC,
            f"spec.pytorchReplicaSpecs.Worker.template requests no GPU ({names})",
            **known,
        )
    if not min_r <= replicas <= max_r:
        return unmanaged(
            Reason.INVALID_REPLICAS,
            f"spec.pytorchReplicaSpecs.Worker.replicas={replicas} is outside "
            f"elasticPolicy [{min_r}, {max_r}]",
            **known,
        )

    last_scale = None
    raw_last = annotations.get(settings.last_scale_annotation)
    if raw_last is not None:
        try:
            last_scale = parse_time(
                raw_last, f"metadata.annotations[{settings.last_scale_annotation}]"
            )
        except BadField as exc:
            return unmanaged(Reason.INVALID_ANNOTATION, str(exc), **known)
    started = None
    raw_start = dig(obj, "status", "startTime")
    if raw_start is not None:
        try:
            started = parse_time(raw_start, "status.startTime")
        except BadField:
            started = None  # only an estimate of progress; its absence is not an error

    sched = dig(spec, "runPolicy", "schedulingPolicy")
    rv = meta.get("resourceVersion")
    return ElasticJob(
        ref=ref,
        queue=queue,
        min_replicas=min_r,
        max_replicas=max_r,
        replicas=replicas,
        active=active,
        gpus_per_worker=gpw,
        created=_created(meta),
        priority=priorities.of(dig(sched, "priorityClass")),
        last_scale_time=last_scale,
        started=started,
        resource_version=rv if isinstance(rv, str) else "",
        has_min_available=dig(sched, "minAvailable") is not None,
    )


def _elastic_bounds(elastic: Mapping[str, Any], replicas: int) -> tuple[int, int]:
    """minReplicas/maxReplicas (or the older min/max), defaulted as training-operator's
    setElasticPolicy does: one bound missing takes the other's value, both missing take
    the Worker's replicas."""

    def bound(new: str, old: str) -> int | None:
        if elastic.get(new) is not None:
            return _int_field(elastic[new], f"spec.elasticPolicy.{new}", minimum=1)
        if elastic.get(old) is not None:
            return _int_field(elastic[old], f"spec.elasticPolicy.{old}", minimum=1)
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
    obj: Mapping[str, Any], settings: Settings, priorities: Priorities
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
        for name in settings.gpu_resource_names:
            if name in min_resources:
                gpus += parse_quantity(min_resources[name], f"spec.minResources[{name}]")
            elif f"requests.{name}" in min_resources:
                gpus += parse_quantity(
                    min_resources[f"requests.{name}"], f"spec.minResources[requests.{name}]"
                )
    except BadField as exc:
        return InvalidGroup(ref, queue, f"{ref}: {exc}")
    if gpus == 0:
        return None
    return PendingGroup(
        ref=ref,
        queue=queue,
        gpus=gpus,
        created=_created(obj["metadata"]),
        priority=priorities.of(spec.get("priorityClassName")),
        owner=_owner(obj, ref.namespace),
        phase=phase,
    )


def _owner(obj: Mapping[str, Any], namespace: str) -> ObjectRef | None:
    owners = dig(obj, "metadata", "ownerReferences")
    if not isinstance(owners, list):
        return None
    candidates = [o for o in owners if isinstance(o, Mapping)]
    controller = [o for o in candidates if o.get("controller") is True] or candidates
    for o in controller:
        name, kind = o.get("name"), o.get("kind")
        if isinstance(name, str) and isinstance(kind, str):
            uid = o.get("uid")
            return ObjectRef(namespace, name, kind, uid if isinstance(uid, str) else "")
    return None


# ---- the snapshot ---------------------------------------------------------------------


class ParseCache:
    """Parsed jobs and PodGroups kept across cycles by (namespace, name, resourceVersion):
    a steady cycle parses only what changed. Cleared when the PriorityClasses change
    (priorities are part of what is parsed). Objects without a resourceVersion (snapshot
    files) are always parsed."""

    def __init__(self) -> None:
        self._priorities: Priorities | None = None
        self._entries: dict[tuple[str, str, str], Any] = {}
        self._next: dict[tuple[str, str, str], Any] = {}

    def start(self, priorities: Priorities) -> None:
        if priorities != self._priorities:
            self._priorities, self._entries = priorities, {}
        self._next = {}

    def finish(self) -> None:
        self._entries, self._next = self._next, {}  # drop what was not seen this cycle

    def get(self, kind: str, obj: Mapping[str, Any], parse: Any) -> Any:
        meta = obj.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        if not isinstance(meta, Mapping) or not isinstance(rv, str) or not rv:
            return parse(obj)
        key = (kind, f"{meta.get('namespace')}/{meta.get('name')}", rv)
        value = self._entries.get(key, _MISSING)
        if value is _MISSING:
            value = parse(obj)
        self._next[key] = value
        return value


_MISSING = object()


def build_snapshot(
    raw: RawObjects,
    free: Mapping[str, QueueState],
    settings: Settings,
    *,
    problem: Reason | None = None,
    message: str = "",
    cache: ParseCache | None = None,
) -> ClusterSnapshot:
    """Parse everything once. `free` holds what the free-GPU source said per queue; a queue
    that jobs or gangs use but `free` lacks is unknown (held), never zero. A `cache`
    (the daemon keeps one; settings must not change between cycles) reuses what was
    parsed for objects whose resourceVersion did not change."""

    priorities = Priorities.parse(raw.priorityclasses)
    queue_states = parse_queue_states(raw.queues)
    capacities = parse_queue_capacities(raw.queues, settings)
    cache = cache or ParseCache()
    cache.start(priorities)

    def job(obj: Mapping[str, Any]) -> ElasticJob | UnmanagedJob:
        return parse_job(obj, settings, priorities)

    def group(obj: Mapping[str, Any]) -> PendingGroup | InvalidGroup | None:
        return parse_podgroup(obj, settings, priorities)

    jobs: list[ElasticJob] = []
    unmanaged: list[UnmanagedJob] = []
    seen: set[tuple[str, str]] = set()
    for obj in raw.jobs:
        parsed = cache.get("PyTorchJob", obj, job)
        key = (parsed.ref.namespace, parsed.ref.name)
        if key in seen:
            unmanaged.append(
                UnmanagedJob(
                    parsed.ref,
                    parsed.queue,
                    Reason.DUPLICATE,
                    f"{parsed.ref}: appears more than once",
                )
            )
            continue
        seen.add(key)
        (jobs if isinstance(parsed, ElasticJob) else unmanaged).append(parsed)

    pending: list[PendingGroup] = []
    invalid: list[InvalidGroup] = []
    for obj in raw.podgroups:
        parsed_group = cache.get("PodGroup", obj, group)
        if isinstance(parsed_group, PendingGroup):
            pending.append(parsed_group)
        elif isinstance(parsed_group, InvalidGroup):
            invalid.append(parsed_group)
    cache.finish()

    names = set(free) | {j.queue for j in jobs} | {u.queue for u in unmanaged}
    names |= {g.queue for g in pending}
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
        capacity = capacities.get(name)
        if capacity != state.capacity_gpus:
            state = replace(state, capacity_gpus=capacity)
        queues[name] = state
    return ClusterSnapshot(
        queues=queues,
        jobs=tuple(jobs),
        unmanaged=tuple(unmanaged),
        pending=tuple(pending),
        invalid_groups=tuple(invalid),
        problem=problem,
        message=message,
    )
