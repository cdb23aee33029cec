"""The records of the objects a sync reads by the ten thousand, built straight from the
bytes: bound Pods and Nodes.

The caches' usual way (`read.kube.wire`, then `parse.decoders`) reads the declared fields
into plain dicts and walks them with the decoders, which check every step's type. At
10k jobs a sync reads ~50k bound pods and 16k-26k nodes, and that walk was about half of
the daemon's CPU beyond the server's own floor (docs/benchmarks.md, the sync).
Here the same fields are declared as msgspec Structs whose types
are those the API server validates (strings, string maps, lists of objects), so msgspec
checks the types in C while it reads, and a record is made of attributes.

Each reader returns the object's cache key and its record, or None for an object it
does not take: one whose fields are of other types than declared (a Struct's type
check failed), or that the usual way decodes in a way not repeated here (an unbound or
finished pod, a node without a name). The cache then reads that object the usual way,
so every record and every message is the decoders' (`tests/test_straight.py` pins each
reader's record to the usual one, for served, written and randomly changed objects).

Pods and Nodes LISTed in protobuf (`read.kube.proto`) are read by `proto_straight`'s
readers: the message's fields have the JSON names, so `pod_record` and `node_record`
build the record from either; what a holding or an allocatable is remembered by is the
served bytes of the fields read (`tests/test_proto.py`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from autoscaler.core.model import ElasticJob, Node, ObjectRef
from autoscaler.core.options import ReadOptions
from autoscaler.core.resources import FINISHED_CONDITIONS, VOLCANO_QUEUE_ANNOTATION, WAITING_PHASES
from autoscaler.core.shapes import MILLI, HostPort, Labels, PodShape, Quantities, Taint
from autoscaler.read.fields import MAX_REPLICAS, BadField
from autoscaler.read.kinds.base import NotManaged, replica_gpus, template_facts
from autoscaler.read.kinds.kubeflow import PYTORCHJOB_KIND, elastic_bounds
from autoscaler.read.parse import (
    DEFAULT_QUEUE,
    MAX_NAME_LENGTH,
    Schedule,
    created_at,
    in_queue,
    owner_of,
    schedule_facts,
    started_at,
)
from autoscaler.read.podspec import (
    FINISHED_POD_PHASES,
    HOSTNAME_LABEL,
    KUBEFLOW_INDEX_LABEL,
    KUBEFLOW_ROLE_LABEL,
    PYTORCH_PORT,
    REPEL,
    VOLCANO_INDEX_ANNOTATION,
    VOLCANO_TASK_ANNOTATION,
    frozen,
    intern,
    pod_holds,
    quantities,
)
from autoscaler.read.records import GroupRecord, JobRecord, PodUse

from . import proto
from .wire import _Template

__all__ = ["Straight", "node_record", "pod_record", "proto_straight", "straight"]

Key = tuple[str, str]
# an object's bytes -> (its cache key, its record), or None: read it the usual way
Straight = Callable[[bytes | msgspec.Raw], "tuple[Key, Any] | None"]

GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # as parse._GROUP_ANNOTATION

# Fields the usual way reads alike whether null or absent default to None; a field
# typed Any takes any JSON, as the usual way's dicts do.


class _Owner(msgspec.Struct, gc=False):
    kind: Any = None
    name: Any = None
    controller: Any = None


class _Meta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[_Owner] | None = None


class _Container(msgspec.Struct, gc=False):
    """What a bound pod's holding reads of a container (`podspec.pod_holds`)."""

    name: Any = None
    resources: Any = None
    ports: Any = None
    restartPolicy: Any = None


class _PodSpec(msgspec.Struct, gc=False):
    nodeName: str = ""
    containers: list[_Container] | None = None
    initContainers: list[_Container] | None = None
    overhead: Any = None
    hostNetwork: Any = None


class _PodStatus(msgspec.Struct, gc=False):
    phase: str | None = None


class _Pod(msgspec.Struct, gc=False):
    metadata: _Meta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


class _Taint(msgspec.Struct, gc=False):
    key: Any = None
    value: Any = None
    effect: Any = None


class _NodeSpec(msgspec.Struct, gc=False):
    taints: list[_Taint] | None = None
    unschedulable: Any = None


class _Condition(msgspec.Struct, gc=False):
    type: Any = None
    status: Any = None


class _NodeStatus(msgspec.Struct, gc=False):
    allocatable: Any = None
    conditions: list[_Condition] | None = None


class _NodeMeta(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""  # none on a Node; its cache key has it, as the usual way's
    labels: dict[str, str] | None = None


class _Node(msgspec.Struct, gc=False):
    metadata: _NodeMeta | None = None
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None


_ENCODE = msgspec.json.Encoder().encode
_LIMIT = 1024  # distinct holdings, label sets remembered: far above a cluster's
_V = TypeVar("_V")
Held = tuple[Quantities, tuple[HostPort, ...], int]  # (requests, host ports, GPUs)


def _remember(memo: dict[Any, _V], key: Any, value: _V) -> _V:
    """`value` kept under `key`; a memo that reached _LIMIT starts again (it never grows
    without bound on churn)."""
    if len(memo) >= _LIMIT:
        memo.clear()
    memo[key] = value
    return value


def _holding(spec: dict[str, Any], gpu_names: tuple[str, ...]) -> Held:
    """What a pod spec holds (`podspec.pod_holds`), read from the dict the usual way
    reads, and its GPUs."""
    requests, ports = pod_holds(spec)
    amounts = dict(requests)
    return requests, ports, sum(amounts.get(g, 0) for g in gpu_names) // MILLI


def _interned(value: Any) -> str:
    return sys.intern(value) if isinstance(value, str) else ""


def _pod_reader(options: ReadOptions) -> Straight:
    """A bound, unfinished pod: `parse.decode_pod` as it reads one."""
    decode = msgspec.json.Decoder(_Pod).decode
    gpu_names = tuple(options.gpu_resource_names)
    # a pod spec's holding, by what it is read from: (requests, ports, GPUs)
    holds: dict[bytes, Held] = {}

    def held(spec: _PodSpec) -> Held:
        key = _ENCODE((spec.containers, spec.initContainers, spec.overhead, spec.hostNetwork))
        found = holds.get(key)
        if found is None:
            # read as the usual way reads it: the same fields, null and absent alike
            spec_read = {
                "containers": msgspec.to_builtins(spec.containers),
                "initContainers": msgspec.to_builtins(spec.initContainers),
                "overhead": spec.overhead,
                "hostNetwork": spec.hostNetwork,
            }
            found = _remember(holds, key, _holding(spec_read, gpu_names))
        return found

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        try:
            pod = decode(raw)
        except msgspec.ValidationError:
            return None
        return pod_record(pod, held)

    return read


def pod_record(pod: Any, held: Callable[[Any], Held]) -> tuple[Key, Any] | None:
    """A bound, unfinished pod's key and record, of a pod read as `_Pod` (or as its
    protobuf message, whose fields have the same names: read.kube.proto); `held` reads
    what its spec holds (after the node is read: the protobuf reader's clears it). None:
    read it the usual way."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    if meta is None or spec is None or not spec.nodeName:
        return None  # not bound: its shape is read the usual way
    if status is not None and status.phase in FINISHED_POD_PHASES:
        return None
    node = sys.intern(spec.nodeName)
    ns = sys.intern(meta.namespace)
    group = (meta.annotations or {}).get(GROUP_ANNOTATION)
    group = sys.intern(f"{ns}/{group}") if group else ""
    requests, ports, gpus = held(spec)
    owner, index = _worker_of(meta, ns)
    return (ns, meta.name), PodUse(node, gpus, requests, ports, owner, index, group)


def _worker_of(meta: _Meta, ns: str) -> tuple[tuple[str, str, str, str] | None, int]:
    """`podspec._worker_of`, of a pod read as `_Meta` (or its protobuf message)."""
    for controller in meta.ownerReferences or ():
        if controller.controller is True:
            break
    else:
        return None, -1
    labels = meta.labels or {}
    annotations = meta.annotations or {}
    index: str | None
    if KUBEFLOW_ROLE_LABEL in labels:
        group, index = labels.get(KUBEFLOW_ROLE_LABEL), labels.get(KUBEFLOW_INDEX_LABEL)
    else:
        group = annotations.get(VOLCANO_TASK_ANNOTATION)
        index = annotations.get(VOLCANO_INDEX_ANNOTATION) or _name_index(meta.name)
    try:
        number = int(index) if index is not None else -1
    except ValueError:
        number = -1
    owner = (ns, _interned(controller.kind), _interned(controller.name), _interned(group).lower())
    return intern(owner), number


def _name_index(name: str) -> str | None:
    """A Volcano Job's pod is named <job>-<task>-<index> (`podspec._name_index`)."""
    if not name:
        return None
    tail = name.rsplit("-", 1)[-1]
    return tail if tail.isdigit() else None


def _labels_reader() -> Callable[[dict[str, str]], tuple[Labels, str]]:
    """A node's labels as served -> (its labels but its hostname as kept, its hostname),
    remembered: a pool's nodes share them."""
    label_sets: dict[tuple[tuple[str, str], ...], Labels] = {}

    def labels_of(raw: dict[str, str]) -> tuple[Labels, str]:
        hostname = raw.get(HOSTNAME_LABEL)
        key = tuple(raw.items())
        if hostname is not None:
            key = tuple(kv for kv in key if kv[0] != HOSTNAME_LABEL)
        labels = label_sets.get(key)
        if labels is None:
            labels = intern(tuple(sorted((sys.intern(k), sys.intern(v)) for k, v in key)))
            _remember(label_sets, key, labels)
        return labels, sys.intern(hostname) if hostname is not None else ""

    return labels_of


def _allocatable_reader(gpu_names: tuple[str, ...]) -> Callable[[Any], tuple[Quantities, int]]:
    """A node's allocatable as served -> (as kept, its GPUs), remembered: a pool's nodes
    share one."""
    resource_sets: dict[tuple[tuple[str, Any], ...], tuple[Quantities, int]] = {}

    def resources_of(allocatable: Any) -> tuple[Quantities, int]:
        try:
            key = tuple(allocatable.items()) if type(allocatable) is dict else None
            found = resource_sets.get(key) if key is not None else None
        except TypeError:  # a figure that is a list or a map: read anew
            key, found = None, None
        if found is None:
            amounts = quantities(allocatable)
            found = frozen(amounts), sum(amounts.get(g, 0) for g in gpu_names) // MILLI
            if key is not None:
                _remember(resource_sets, key, found)
        return found

    return resources_of


def _node_reader(options: ReadOptions) -> Straight:
    """A Node: `podspec.read_node` as it reads one."""
    decode = msgspec.json.Decoder(_Node).decode
    labels_of = _labels_reader()
    resources_of = _allocatable_reader(tuple(options.gpu_resource_names))

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        try:
            node = decode(raw)
        except msgspec.ValidationError:
            return None
        status = node.status
        allocatable = status.allocatable if status is not None else None
        return node_record(node, labels_of, resources_of(allocatable))

    return read


def node_record(
    node: Any,
    labels_of: Callable[[Any], tuple[Labels, str]],
    resources: tuple[Quantities, int],
) -> tuple[Key, Any] | None:
    """A node's key and record, of a node read as `_Node` (or as its protobuf message:
    read.kube.proto); `resources`: its allocatable as kept and its GPUs. None: read it the
    usual way."""
    meta = node.metadata
    if meta is None or not meta.name:
        return None
    spec, status = node.spec, node.status
    ready = False
    if status is not None and status.conditions:
        for c in status.conditions:  # a loop, not any(): ~1 us a node less at 26k nodes
            if c.type == "Ready" and c.status == "True":
                ready = True
                break
    taints: tuple[Taint, ...] = ()
    if spec is not None and spec.taints:
        try:
            taints = intern(
                tuple(
                    Taint(_interned(t.key), _interned(t.value), _interned(t.effect))
                    for t in spec.taints
                    if t.effect in REPEL
                )
            )
        except TypeError:  # an effect that is no key of a set: the usual way raises
            return None
    labels, hostname = labels_of(meta.labels) if meta.labels else ((), "")
    allocatable, gpus = resources
    return (sys.intern(meta.namespace), meta.name), Node(
        sys.intern(meta.name),
        gpus,
        0,
        ready,
        labels,
        taints,
        allocatable,
        cordoned=spec is not None and spec.unschedulable is True,
        hostname=hostname,
    )


class _GroupMeta(msgspec.Struct, gc=False):
    name: Any = None
    namespace: Any = None
    ownerReferences: Any = None


class _GroupSpec(msgspec.Struct, gc=False):
    queue: Any = None
    priorityClassName: Any = None


class _GroupStatus(msgspec.Struct, gc=False):
    phase: Any = None


class _Group(msgspec.Struct, gc=False):
    metadata: _GroupMeta | None = None
    spec: _GroupSpec | None = None
    status: _GroupStatus | None = None


def _group_reader(options: ReadOptions) -> Straight:
    """A PodGroup that waits for nothing (running, done: nearly all of them):
    `parse.decode_podgroup` as it reads one. A waiting one, or one whose phase is
    Unknown (its conditions say whether it waits), is read the usual way."""
    decode = msgspec.json.Decoder(_Group).decode

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        try:
            group = decode(raw)
        except msgspec.ValidationError:
            return None
        meta = group.metadata
        if meta is None:
            return None
        name, ns = meta.name, meta.namespace
        # what `parse._ref` takes without complaint, with a namespace of its own
        if not (isinstance(name, str) and name and len(name) <= MAX_NAME_LENGTH):
            return None
        if not (isinstance(ns, str) and ns):
            return None
        phase = group.status.phase if group.status is not None else None
        if not isinstance(phase, str):
            phase = ""
        elif phase in WAITING_PHASES or phase == "Unknown":
            return None
        spec = group.spec or _GroupSpec()
        queue, priority = spec.queue, spec.priorityClassName
        ns = sys.intern(ns)
        return (ns, name), GroupRecord(
            ObjectRef(ns, name, "PodGroup"),
            None,
            phase,
            priority if isinstance(priority, str) else None,
            queue if isinstance(queue, str) and queue else DEFAULT_QUEUE,
            owner_of(meta.ownerReferences, ns),
        )

    return read


# ---- PyTorchJobs ------------------------------------------------------------------------


class _Replica(msgspec.Struct, gc=False):
    replicas: int = 1  # training-operator's default
    # as the usual way reads it (read.kube.wire): what `kinds.base.template_facts` keys by
    template: _Template | None = None


class _Scheduling(msgspec.Struct, gc=False):
    queue: Any = None
    priorityClass: Any = None
    minAvailable: Any = None


class _RunPolicy(msgspec.Struct, gc=False):
    suspend: Any = None
    schedulingPolicy: _Scheduling | None = None


class _JobSpec(msgspec.Struct, gc=False):
    pytorchReplicaSpecs: dict[str, _Replica] | None = None
    elasticPolicy: dict[str, Any] | None = None
    runPolicy: _RunPolicy | None = None


class _Active(msgspec.Struct, gc=False):
    active: Any = None


class _JobStatus(msgspec.Struct, gc=False):
    conditions: list[_Condition] | None = None
    replicaStatuses: dict[str, _Active] | None = None
    startTime: Any = None


def _job_schema(options: ReadOptions) -> tuple[Any, tuple[str, ...]] | None:
    """A PyTorchJob as its reader decodes it, and the annotations it reads (ours, under
    the settings' prefix, and Volcano's queue name), in the order its `annotations`
    Struct has them: the others (kubectl's last-applied copy of the job, a few KB) are
    skipped in the bytes. None when two of them are one (no reader then)."""
    names = options.annotations
    keys = (
        names.paused,
        names.last_scale,
        names.restart_cost,
        names.measured_restart_cost,
        names.expected_runtime,
        names.progress,
        VOLCANO_QUEUE_ANNOTATION,
    )
    if len(set(keys)) != len(keys):
        return None
    fields = [f"a{i}" for i in range(len(keys))]
    annotations = msgspec.defstruct(
        "_JobAnnotations",
        [(f, Any, None) for f in fields],
        rename=dict(zip(fields, keys, strict=True)),
        gc=False,
    )
    meta = msgspec.defstruct(
        "_JobMeta",
        [
            *((f, Any, None) for f in ("name", "namespace", "uid", "resourceVersion")),
            ("creationTimestamp", Any, None),
            ("deletionTimestamp", Any, None),
            ("annotations", annotations | None, None),
        ],
        gc=False,
    )
    job = msgspec.defstruct(
        "_Job",
        [
            ("metadata", meta | None, None),
            ("spec", _JobSpec | None, None),
            ("status", _JobStatus | None, None),
        ],
        gc=False,
    )
    return job, keys


_KIND = PYTORCHJOB_KIND.resource.kind
_TEMPLATE_AT = f"spec.{PYTORCHJOB_KIND.replica_specs}.Worker.template"
_STOPPED = (*FINISHED_CONDITIONS, "Suspended")


def _job_reader(options: ReadOptions) -> Straight:
    """A PyTorchJob the planner may resize, every worker it asked for running (nearly
    all of them): `parse.decode_job` as it reads one. Any other (done, suspended,
    paused, not elastic, workers in flight, its gang maybe waiting, any field the usual
    way would complain of) is read the usual way."""
    schema = _job_schema(options)
    if schema is None:
        return lambda raw: None
    decode, keys = msgspec.json.Decoder(schema[0]).decode, schema[1]
    gpu_names, toleration = tuple(options.gpu_resource_names), options.extended_resource_toleration
    schedule_keys = frozenset(keys[1:6])  # what schedule_facts reads
    no_schedule = schedule_facts({}, options)

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        try:
            job = decode(raw)
        except msgspec.ValidationError:
            return None
        meta, spec, status = job.metadata, job.spec, job.status
        if meta is None or spec is None or meta.deletionTimestamp is not None:
            return None
        name, ns = meta.name, meta.namespace
        # what `parse._ref` takes without complaint, with a namespace of its own
        if not (isinstance(name, str) and name and len(name) <= MAX_NAME_LENGTH):
            return None
        if not (isinstance(ns, str) and ns):
            return None
        run = spec.runPolicy or _RunPolicy()
        if run.suspend is True or _stopped(status):
            return None
        worker = (spec.pytorchReplicaSpecs or {}).get("Worker")
        if worker is None or not 0 <= worker.replicas <= MAX_REPLICAS:
            return None
        replicas, active = worker.replicas, _active(status)
        # every worker asked for runs: nothing in flight, no gang that may wait
        if active is None or active < replicas:
            return None
        key = _ENCODE(worker.template)  # plain JSON: read from the bytes
        gpw, shape = template_facts(
            worker.template, _TEMPLATE_AT, gpu_names, toleration, PYTORCH_PORT, key=key
        )
        bounds = _bounds(spec.elasticPolicy, replicas)
        if isinstance(gpw, str) or not gpw or bounds is None:
            return None
        annotations = _annotations_read(meta.annotations, keys)
        paused = annotations.get(keys[0])
        if isinstance(paused, str) and paused.strip().lower() == "true":
            return None
        if not annotations.keys() & schedule_keys:
            schedule = no_schedule  # none of its annotations: what schedule_facts gives
        else:
            try:
                schedule = schedule_facts(annotations, options)
            except NotManaged:
                return None
        return _job_record(
            job, options, replicas, active, gpw, shape, bounds, annotations, schedule
        )

    return read


def _other_gpus(spec: _JobSpec, options: ReadOptions) -> int:
    """The GPUs of its pods besides the Workers (a Master), as `KubeflowJob.workers`
    counts them."""
    return sum(
        replica_gpus(
            r.replicas,
            r.template,
            f"spec.{PYTORCHJOB_KIND.replica_specs}.{role}.template",
            options,
            PYTORCH_PORT,
            key=_ENCODE(r.template),
        )
        for role, r in (spec.pytorchReplicaSpecs or {}).items()
        if role != "Worker"
    )


def _annotations_read(struct: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """A job's annotations that its reader reads (`_job_schema`'s Struct and `keys`), as
    the usual way's dict has them: null is absent there."""
    if struct is None:
        return {}
    values = msgspec.structs.astuple(struct)
    return {k: v for k, v in zip(keys, values, strict=True) if v is not None}


def _job_record(
    job: Any,
    options: ReadOptions,
    replicas: int,
    active: int,
    gpw: int,
    shape: PodShape,
    bounds: tuple[int, int],
    annotations: dict[str, Any],
    schedule: Schedule,
) -> tuple[Key, JobRecord]:
    """The cache key and record of a job `_job_reader` takes, as `parse.decode_job` makes
    them."""
    meta, status = job.metadata, job.status
    run = job.spec.runPolicy or _RunPolicy()
    name, ns, uid, rv = meta.name, meta.namespace, meta.uid, meta.resourceVersion
    policy = run.schedulingPolicy or _Scheduling()
    queue = policy.queue if isinstance(policy.queue, str) and policy.queue else DEFAULT_QUEUE
    elastic = ElasticJob(
        ref=ObjectRef(ns, name, _KIND, uid if isinstance(uid, str) else ""),
        queue=queue,
        min_replicas=bounds[0],
        max_replicas=bounds[1],
        replicas=replicas,
        active=active,
        gpus_per_worker=gpw,
        created=created_at(meta.creationTimestamp),
        last_scale_time=schedule.last_scale,
        started=started_at(status.startTime if status is not None else None),
        resource_version=rv if isinstance(rv, str) else "",
        gang_grows=PYTORCHJOB_KIND.gang_grows_at(policy.minAvailable),
        shape=shape,
        restart_cost_seconds=schedule.restart_cost,
        restart_cost_source=schedule.cost_source,
        measured_for=schedule.measured_for,
        expected_runtime_seconds=schedule.expected_runtime,
        progress=schedule.progress,
        other_gpus=_other_gpus(job.spec, options),  # a Master's
    )
    annotation = annotations.get(VOLCANO_QUEUE_ANNOTATION)
    annotation = annotation if isinstance(annotation, str) and annotation else None
    record = in_queue(elastic, queue, annotation, from_podgroup=False)
    priority = policy.priorityClass
    return (sys.intern(ns), name), JobRecord(
        record, priority if isinstance(priority, str) else None, annotation, None, 0
    )


def _stopped(status: _JobStatus | None) -> bool:
    """A condition the usual way stops at: finished or suspended (`KubeflowJob.finished`)."""
    if status is None or not status.conditions:
        return False
    return any(c.status == "True" and c.type in _STOPPED for c in status.conditions)


def _active(status: _JobStatus | None) -> int | None:
    """Workers running, as `kinds.base.read_workers` reads them; None where it would
    complain."""
    found = (status.replicaStatuses or {}).get("Worker") if status is not None else None
    active = found.active if found is not None else None
    if active is None:
        return 0
    if isinstance(active, bool) or not isinstance(active, int):
        return None
    return active if 0 <= active <= MAX_REPLICAS else None


def _bounds(elastic: dict[str, Any] | None, replicas: int) -> tuple[int, int] | None:
    """[min, max] as `KubeflowJob.bounds` reads them and `parse._elastic_range` checks
    them; None where either would not manage the job."""
    if elastic is None or elastic.get("metrics"):
        return None
    try:
        low, high = elastic_bounds(elastic, replicas)
    except BadField:
        return None
    return (low, high) if low <= replicas <= high else None


def _proto_pod_reader(options: ReadOptions) -> Straight:
    """A bound, unfinished pod from its protobuf bytes (read.kube.proto), as `_pod_reader`
    reads its JSON: read as a BoundPod, only what the record is made of."""
    parse = proto.parse
    gpu_names = tuple(options.gpu_resource_names)
    holds: dict[bytes, Held] = {}

    def held(spec: Any) -> Held:
        # remembered by what the holding reads as served (BoundPodSpec), re-encoded in
        # C: not what else the server sent (an env differs pod by pod), nor the node
        # (`pod_record` read it; the message is this read's own). Two Python tuples of
        # the containers' fields cost ~1.3 us a pod more at 50k bound pods.
        spec.DiscardUnknownFields()
        spec.ClearField("nodeName")
        key = spec.SerializeToString()
        found = holds.get(key)
        if found is None:
            # read as the usual way reads the same spec: the JSON dict it would read
            spec_read = {
                "containers": [proto.container_wire(c) for c in spec.containers],
                "initContainers": [proto.container_wire(c) for c in spec.initContainers],
                "overhead": proto.quantities(spec.overhead) or None,
                "hostNetwork": spec.hostNetwork or None,
            }
            found = _remember(holds, key, _holding(spec_read, gpu_names))
        return found

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        return pod_record(parse("BoundPod", raw), held)

    return read


def _proto_node_reader(options: ReadOptions) -> Straight:
    """A Node from its protobuf bytes (read.kube.proto), as `_node_reader` reads its JSON."""
    parse = proto.parse
    labels_of = _labels_reader()
    resources_of = _allocatable_reader(tuple(options.gpu_resource_names))
    # allocatable by its entries' bytes: a pool's nodes share one
    resource_sets: dict[tuple[bytes, ...], tuple[Quantities, int]] = {}

    def read(raw: bytes | msgspec.Raw) -> tuple[Key, Any] | None:
        node = parse("Node", raw)
        key = tuple(node.status.allocatable)
        resources = resource_sets.get(key)
        if resources is None:
            resources = _remember(resource_sets, key, resources_of(proto.quantities(key)))
        return node_record(node, labels_of, resources)

    return read


def proto_straight(kind: str, options: ReadOptions) -> Straight | None:
    """The straight reader of a LIST's protobuf items of `kind` (Pod, Node), None for
    other kinds (served in JSON only, or read the usual way)."""
    make = {"Pod": _proto_pod_reader, "Node": _proto_node_reader}.get(kind)
    return make(options) if make is not None else None


def straight(kind: str, options: ReadOptions) -> Straight | None:
    """The straight reader of a cache of `kind` (Pod, Node, PodGroup), None for other
    kinds."""
    make = {
        "Pod": _pod_reader,
        "Node": _node_reader,
        "PodGroup": _group_reader,
        "PyTorchJob": _job_reader,
    }.get(kind)
    return make(options) if make is not None else None
