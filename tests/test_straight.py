"""The records a LIST's bound pods and nodes are built into straight from their bytes
(sources.straight) against the usual way (the whole object through `parse.decoders`):
for every object it takes, the same cache key and the same record, for objects as the
real API server serves them, as written, and with any one field changed to any JSON
value (a hypothesis property); whatever it does not take is read the usual way."""

from __future__ import annotations

import copy
import gc
import json
from typing import Any

import msgspec
import pytest
from builders import edit, podgroup, pytorchjob, with_master
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient, Configuration
from test_wire import CORPUS, JSON, NODE, POD, _changed, _paths, _unbound

from autoscaler.core.model import ElasticJob
from autoscaler.read.kube.pages import _key
from autoscaler.read.kube.straight import straight
from autoscaler.read.kube.wire import read_whole
from autoscaler.read.parse import decoders
from autoscaler.run.wiring import build_sources
from autoscaler.settings import Settings

OPTIONS = Settings.model_validate({}).read_options()
# the other GPU names a cluster may set (gpu_resource_names): the GPUs counted by them
OTHER = Settings.model_validate({"gpu_resource_names": ["amd.com/gpu"]}).read_options()
KINDS = ("Pod", "Node", "PodGroup", "PyTorchJob")


def usual(kind: str, obj: dict[str, Any], options: Any = OPTIONS) -> tuple[Any, Any]:
    """What the cache keeps of the object read the usual way: its key and its record."""
    whole = read_whole(json.dumps(obj).encode())
    return _key(whole), decoders(options)[kind](whole)


# one reader per kind and options for the whole module, as a cache keeps one: what it
# remembers of one object (a spec's holding, a pool's labels) must hold for the next
READERS = {(kind, id(o)): straight(kind, o) for kind in KINDS for o in (OPTIONS, OTHER)}


def check(kind: str, obj: dict[str, Any], options: Any = OPTIONS) -> bool:
    """The straight reader's (key, record) is the usual one's, or it leaves the object to
    the usual way; whether it took it."""
    taken = READERS[kind, id(options)](json.dumps(obj).encode())  # type: ignore[misc]
    if taken is None:
        return False
    assert taken == usual(kind, obj, options)
    return True


OWNED = copy.deepcopy(POD)
OWNED["metadata"]["labels"] = {"training.kubeflow.org/replica-type": "Worker"}  # no index
VOLCANO_POD = copy.deepcopy(POD)
VOLCANO_POD["metadata"].update(
    name="vc-job-worker-7",
    labels={},
    annotations={"volcano.sh/task-spec": "Worker"},
    ownerReferences=[
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "name": "vc-job",
            "controller": True,
        }
    ],
)
OWNED_GROUP = podgroup(phase="Completed", priority_class="high")
OWNED_GROUP["metadata"]["ownerReferences"] = [
    {"apiVersion": "batch/v1", "kind": "Job", "name": "other-group", "uid": "u1"},
    {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "t", "controller": True},
]
A = "elastic-autoscaler.io"
JOBS = [
    pytorchjob(
        annotations={
            f"{A}/last-scale-time": "2026-11-22T09:00:00Z",
            f"{A}/restart-cost-seconds": "90",
            f"{A}/expected-runtime-seconds": "3600",
            f"{A}/progress": "40%",
            "scheduling.volcano.sh/queue-name": "team-b",  # not its queue: warned
        },
        priority_class="high",
        min_available=None,  # growing raises its gang: said
    ),
    pytorchjob(annotations={f"{A}/measured-restart-cost": "75@2026-11-22T09:00:00Z"}, queue=None),
    pytorchjob(annotations={f"{A}/restart-cost-seconds": "soon"}),  # unmanaged
    pytorchjob(annotations={f"{A}/paused": " TRUE "}),
    pytorchjob(replicas=3, active=5),  # more running than asked for: none in flight
    pytorchjob(replicas=1, active=True),  # not a count: unmanaged
    pytorchjob(replicas=9, active=9),  # outside its range
    pytorchjob(gpus=0),
    pytorchjob(min_replicas=None, max_replicas=None, replicas=3, active=3),
    pytorchjob(min_replicas=4, max_replicas=2),
    pytorchjob(conditions=[{"type": "Succeeded", "status": "True"}]),
    pytorchjob(conditions=[{"type": "Suspended", "status": "True"}]),
    pytorchjob(conditions=[{"type": "Running", "status": "True"}]),
    edit(pytorchjob(), "spec.elasticPolicy.metrics", [{"type": "Resource"}]),
    edit(pytorchjob(), "spec.runPolicy.suspend", True),
    edit(pytorchjob(), "spec.elasticPolicy", {"min": 1, "max": 3}),
    edit(pytorchjob(), "status.startTime", "yesterday"),
    edit(pytorchjob(), "metadata.creationTimestamp", None),
    # its Master's GPUs are the job's too (issue 44), however its Master reads
    with_master(pytorchjob()),
    with_master(pytorchjob(), gpus=2, replicas=2),
    with_master(pytorchjob(), gpus="lots"),
    with_master(pytorchjob(), replicas=-1),
]
BARE_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}
TAINTED = copy.deepcopy(NODE)
TAINTED["spec"]["taints"].append({"key": "gone", "effect": "NoExecute", "value": None})
STRAIGHT = [(k, o) for k, o in CORPUS if k in KINDS] + [
    ("Pod", OWNED),
    ("Pod", VOLCANO_POD),
    ("Node", BARE_NODE),
    ("Node", TAINTED),
    ("PodGroup", OWNED_GROUP),
    *(("PyTorchJob", job) for job in JOBS),
    ("PodGroup", podgroup(phase="Running", queue="")),
]


@pytest.mark.parametrize(("kind", "obj"), STRAIGHT, ids=lambda v: str(v)[:40])
@pytest.mark.parametrize("options", [OPTIONS, OTHER], ids=["nvidia", "amd"])
def test_a_bound_pod_a_node_or_a_gang_not_waiting_is_taken_with_the_usual_record(
    kind, obj, options
):
    if kind == "PyTorchJob":  # one it may resize, every worker it asked for running
        job = usual(kind, obj, options)[1].job
        expected = isinstance(job, ElasticJob) and job.active >= job.replicas
    else:
        expected = {
            "Node": True,
            "Pod": bool(obj.get("spec", {}).get("nodeName")),
            "PodGroup": obj.get("status", {}).get("phase") not in ("Pending", "Inqueue", "Unknown"),
        }[kind]
    assert check(kind, obj, options) == expected


def test_what_it_does_not_take_is_left_to_the_usual_way():
    # an unbound pod (its shape), a finished one, a node without a name, types the API
    # server would not serve
    finished = copy.deepcopy(POD)
    finished["status"]["phase"] = "Succeeded"
    odd_label = copy.deepcopy(NODE)
    odd_label["metadata"]["labels"]["gpus"] = 8
    unhashable = copy.deepcopy(NODE)
    unhashable["spec"]["taints"][0]["effect"] = ["NoSchedule"]
    unschedulable = podgroup(
        phase="Unknown", conditions=[{"type": "Unschedulable", "status": "True"}]
    )
    long_name = podgroup("x" * 254, phase="Running")
    for kind, obj in [
        ("PodGroup", unschedulable),  # the usual way: a gang waiting
        ("PodGroup", long_name),  # the usual way: an invalid one
        ("PodGroup", podgroup(phase="Inqueue")),
        ("Pod", _unbound(POD)),
        ("Pod", finished),
        ("Node", {"kind": "Node", "metadata": {}}),
        ("Node", odd_label),
        ("Node", unhashable),
        ("PyTorchJob", with_master(pytorchjob(), replicas="one")),  # a type the API refuses
    ]:
        assert straight(kind, OPTIONS)(json.dumps(obj).encode()) is None  # type: ignore[misc]


def test_only_pods_nodes_podgroups_and_pytorchjobs_have_a_straight_reader():
    assert straight("PaddleJob", OPTIONS) is None
    assert straight("Job", OPTIONS) is None
    assert straight("Queue", OPTIONS) is None


def test_pods_of_one_spec_share_what_they_hold():
    read = straight("Pod", OPTIONS)
    assert read is not None
    one, two = copy.deepcopy(POD), copy.deepcopy(POD)
    two["metadata"]["name"] = "train-worker-4"
    two["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": "4"}]  # not read
    first, second = read(json.dumps(one).encode()), read(json.dumps(two).encode())
    assert first is not None and second is not None
    assert first[1].requests is second[1].requests
    # and a spec that holds otherwise is read anew, not taken from the memo
    two["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "3"
    third = read(json.dumps(two).encode())
    assert third is not None and third == usual("Pod", two)
    assert (first[1].gpus, third[1].gpus) == (2, 3)


@pytest.mark.parametrize(
    ("kind", "obj"), [("Pod", POD), ("PyTorchJob", JOBS[0]), ("PodGroup", OWNED_GROUP)]
)
def test_the_records_a_sync_makes_by_the_ten_thousand_are_not_walked_by_the_collector(kind, obj):
    # read/records.py: a sync makes one per object; the collector walking ~70k of them
    # (and a frozen dataclass's __init__) was ~55 ms of a sync's CPU at 10k jobs
    taken = READERS[kind, id(OPTIONS)](json.dumps(obj).encode())  # type: ignore[misc]
    assert taken is not None
    for record in (taken[1], usual(kind, obj)[1]):
        assert not gc.is_tracked(record), type(record).__name__
        with pytest.raises(AttributeError):  # still frozen
            setattr(record, "group" if kind == "Pod" else "queue", "x")


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_field_changed_to_any_value_is_read_alike(data):
    kind, obj = data.draw(st.sampled_from(STRAIGHT))
    path = data.draw(st.sampled_from(_paths(obj)))
    check(kind, _changed(obj, path, data.draw(JSON)))


async def test_the_daemons_caches_take_the_bulk_kinds_straight_and_the_rest_as_before():
    """The caches `run` builds read bound pods, nodes, PodGroups and PyTorchJobs
    straight; what a LIST page holds is kept as before: an unbound pod its usual record,
    an object over max_object_bytes dropped and reported."""
    client = ApiClient(Configuration())
    settings = Settings(node_fit=True, max_object_bytes=8192)
    kube, prometheus = build_sources(settings, client)
    prometheus.close()
    caches = {c.resource.kind: c for c in kube._caches}
    assert {k for k, c in caches.items() if c._fast is not None} == set(KINDS)
    unbound = _unbound(POD)
    unbound["metadata"]["name"] = "train-worker-4"
    big = copy.deepcopy(POD)
    big["metadata"]["name"] = "train-worker-5"
    big["metadata"]["annotations"]["note"] = "x" * 8192
    cache = caches["Pod"]
    fresh: dict[Any, Any] = {}
    dropped: set[Any] = set()
    for obj in (POD, unbound, big):
        cache._take(msgspec.Raw(json.dumps(obj).encode()), fresh, dropped)
    assert fresh == dict(usual("Pod", o, settings.read_options()) for o in (POD, unbound))
    assert set(cache.oversized) == dropped == {("ml", "train-worker-5")}
    await client.close()


# one value of each JSON kind, the ones a field of another kind trips on
EVERY_KIND = (True, 7, -1.5, "x", None, [], {}, [1], {"a": 1})


@pytest.mark.parametrize(("kind", "obj"), STRAIGHT, ids=[k for k, _ in STRAIGHT])
def test_every_field_set_to_every_kind_of_value_is_read_alike(kind, obj):
    """The property above, every field and every kind of value: what hypothesis might
    not draw in one run (a field holding `true` where a list belongs), checked always."""
    for path in _paths(obj):
        for value in EVERY_KIND:
            check(kind, _changed(obj, path, value))


@pytest.mark.parametrize(("kind", "obj"), STRAIGHT, ids=[k for k, _ in STRAIGHT])
def test_the_usual_decoders_take_any_value_in_any_field(kind, obj):
    """What a snapshot file (not checked by an API server) may hold: a value of any kind
    in any field reads as that field missing or invalid, never as a crash."""
    decode = decoders(OPTIONS)[kind]
    for path in _paths(obj):
        for value in EVERY_KIND:
            decode(_changed(obj, path, value))
