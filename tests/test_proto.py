"""Pods and Nodes read from protobuf (sources.proto) against the same objects read from
JSON, as the REAL API server serves each: every object read the same way gives the
same cache key and record, whether straight (a bound pod, a node) or the usual way (an
unbound pod, a finished one); a KubeSource asking for protobuf keeps what one asking for
JSON keeps; and what cannot be read says so and leaves the cache to JSON."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient
from kubeserver import ApiError, EnvTest, object_path
from protopages import delimited, envelope

from autoscaler.read.kube import proto
from autoscaler.read.kube.pages import _key, proto_readers
from autoscaler.read.kube.source import KubeSource
from autoscaler.read.kube.wire import reader
from autoscaler.read.parse import decoders
from autoscaler.settings import Settings

OPTIONS = Settings.model_validate({}).read_options()
# one reader per kind for the module, as a cache keeps one: what it remembers of one
# object (a spec's holding, a pool's labels) must hold for the next
READERS = {kind: proto_readers(kind, OPTIONS) for kind in ("Pod", "Node")}
GPU = "nvidia.com/gpu"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _get(envtest: EnvTest, path: str, accept: str) -> bytes:
    req = urllib.request.Request(envtest.url + path)
    req.add_header("Authorization", f"Bearer {envtest.token}")
    req.add_header("Accept", accept)
    with urllib.request.urlopen(req, context=envtest._context(), timeout=30) as resp:
        body: bytes = resp.read()
    return body


def _item(envtest: EnvTest, obj: dict[str, Any]) -> tuple[bytes, bytes]:
    """The object as the server sends it in a LIST, in JSON and in protobuf."""
    meta = obj["metadata"]
    ns = f"/namespaces/{meta['namespace']}" if "namespace" in meta else ""
    plural = "pods" if obj["kind"] == "Pod" else "nodes"
    path = f"/api/v1{ns}/{plural}?fieldSelector=metadata.name%3D{meta['name']}"
    listed = json.loads(_get(envtest, path, "application/json"))["items"]
    _, _, items = proto.list_page(_get(envtest, path, proto.ACCEPT))
    assert len(listed) == len(items) == 1
    return json.dumps(listed[0]).encode(), items[0]


def _both(envtest: EnvTest, obj: dict[str, Any]) -> tuple[Any, Any, bool]:
    """(key and record from JSON, from protobuf, whether protobuf's was straight). The
    usual way from protobuf (the dict the decoders read) is checked for every object,
    straight or not: a cache without the decoders' options reads each so."""
    kind = obj["kind"]
    as_json, as_proto = _item(envtest, obj)
    wire = reader(kind)(as_json)
    usual = _key(wire), decoders(OPTIONS)[kind](wire)
    readers = READERS[kind]
    assert readers is not None and readers.fast is not None
    obj_read = readers.wire(as_proto)
    assert (_key(obj_read), decoders(OPTIONS)[kind](obj_read)) == usual
    taken = readers.fast(as_proto)
    return usual, taken if taken is not None else usual, taken is not None


def _pod(ns: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    spec = {"containers": [{"name": "main", "image": "busybox"}], **spec}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, **meta},
        "spec": spec,
    }


def _container(name: str = "main", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", **fields}


def _owner(kind: str, api: str, name: str, controller: bool | None) -> dict[str, Any]:
    out = {"apiVersion": api, "kind": kind, "name": name, "uid": str(uuid.uuid4())}
    if controller is not None:
        out["controller"] = controller
    return out


WORKER_LABELS = {
    "training.kubeflow.org/replica-type": "worker",
    "training.kubeflow.org/replica-index": "3",
    "training.kubeflow.org/job-name": "t",
}


def _pods(ns: str, node: str) -> list[tuple[dict[str, Any], bool, dict[str, Any] | None]]:
    """(pod, taken straight, status to set) for every way a pod is read."""
    gpus = {"requests": {GPU: "2", "cpu": "8", "memory": "64Gi"}, "limits": {GPU: "2"}}
    kubeflow = [_owner("PyTorchJob", "kubeflow.org/v1", "t", True)]
    affinity = {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "accelerator", "operator": "In", "values": ["a100", "h100"]},
                            {"key": "pool", "operator": "NotIn", "values": ["cpu"]},
                            {"key": "gpu", "operator": "Exists"},
                            {"key": "spot", "operator": "DoesNotExist"},
                            {"key": "gen", "operator": "Gt", "values": ["3"]},
                            {"key": "age", "operator": "Lt", "values": ["9"]},
                        ]
                    },
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 5,
                    "preference": {"matchExpressions": [{"key": "z", "operator": "Exists"}]},
                }
            ],
        },
        "podAntiAffinity": {
            REQUIRED: [{"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}]
        },
        "podAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": {"topologyKey": "zone", "labelSelector": {}}}
            ]
        },
    }
    shaped = {
        "nodeSelector": {"accelerator": "a100", "pool": "train"},
        "affinity": affinity,
        "tolerations": [
            {"operator": "Exists"},
            {"key": GPU, "operator": "Equal", "value": "present", "effect": "NoSchedule"},
            {"key": "evict", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0},
            {"key": "plain"},
        ],
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
            {"maxSkew": 2, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway"},
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "emptyDir": {}},
            {
                "name": "eph",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}},
                        }
                    }
                },
            },
        ],
        "containers": [_container(resources=gpus, ports=[{"containerPort": 23456}])],
    }
    sidecars = {
        "initContainers": [
            _container("sidecar", restartPolicy="Always", resources={"requests": {"cpu": "2"}}),
            _container("init", resources={"limits": {"cpu": "16", "memory": "1Gi"}}),
        ],
        "containers": [
            _container(
                resources={"limits": {GPU: "4", "cpu": "4"}}, env=[{"name": "A", "value": "1"}]
            ),
            _container("loader", resources={"requests": {"cpu": "500m", "memory": "1.5Gi"}}),
        ],
    }
    ports = {
        "containers": [
            _container(
                ports=[
                    {"containerPort": 80, "hostPort": 8080},
                    {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
                    {"name": "metrics", "containerPort": 9090},
                ]
            )
        ]
    }
    # with hostNetwork a host port must be the container port (the server defaults it)
    host = {
        "containers": [
            _container(ports=[{"containerPort": 23456}, {"containerPort": 53, "protocol": "UDP"}])
        ]
    }
    volcano = {
        "annotations": {
            "volcano.sh/task-spec": "worker",
            "scheduling.k8s.io/group-name": "vc-job-pg",
        },
        "ownerReferences": [_owner("Job", "batch.volcano.sh/v1alpha1", "vc-job", True)],
    }
    return [
        # bound workers of every kind: straight
        (_pod(ns, "w-3", {"nodeName": node, "containers": [_container(resources=gpus)]},
              labels=WORKER_LABELS, ownerReferences=kubeflow,
              annotations={"scheduling.k8s.io/group-name": "t-pg"}), True, None),
        (_pod(ns, "sidecars", {"nodeName": node, **sidecars}, labels=WORKER_LABELS,
              ownerReferences=kubeflow), True, None),
        (_pod(ns, "hostnet", {"nodeName": node, "hostNetwork": True, **host}), True, None),
        (_pod(ns, "vc-job-worker-7", {"nodeName": node, **ports}, **volcano), True, None),
        (_pod(ns, "shaped-bound", {"nodeName": node, **shaped}), True, {"phase": "Running"}),
        (_pod(ns, "owners", {"nodeName": node}, ownerReferences=[
            _owner("ReplicaSet", "apps/v1", "rs", False),
            _owner("Job", "batch/v1", "other", None),
        ]), True, None),
        # finished, unbound: the usual way
        (_pod(ns, "done", {"nodeName": node}, labels=WORKER_LABELS, ownerReferences=kubeflow),
         False, {"phase": "Succeeded"}),
        (_pod(ns, "shaped", shaped, labels=WORKER_LABELS, ownerReferences=kubeflow), False, None),
        (_pod(ns, "vc-job-worker-8", sidecars, **volcano), False, None),
        (_pod(ns, "gang-only", {**host, "hostNetwork": True},
              annotations={"scheduling.k8s.io/group-name": "pg"}), False, None),
        (_pod(ns, "nobody", shaped), False, None),
    ]  # fmt: skip


def _nodes(prefix: str) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    def node(name: str, spec: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
        meta = {"name": f"{prefix}-{name}", "labels": labels}
        return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}

    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    allocatable = {"cpu": "64", "memory": "512Gi", GPU: "8", "pods": "110", "rdma/hca": "1"}
    taints = [
        {"key": GPU, "value": "present", "effect": "NoSchedule"},
        {"key": "soft", "effect": "PreferNoSchedule"},
        {"key": "drain", "value": "", "effect": "NoExecute"},
    ]
    pool = {"accelerator": "a100", "kubernetes.io/hostname": f"{prefix}-gpu"}
    return [
        (
            node("gpu", {"taints": taints}, pool),
            {"allocatable": allocatable, "conditions": [ready]},
        ),
        (
            node("cordoned", {"unschedulable": True}, {}),
            {"allocatable": {"cpu": "8"}, "conditions": [{**ready, "status": "False"}]},
        ),
        (node("bare", {}, {"kubernetes.io/hostname": "elsewhere"}), None),
        (node("again", {"taints": taints[:1]}, pool), {"allocatable": allocatable}),
    ]


def _gone(envtest: EnvTest, obj: dict[str, Any]) -> None:
    """Deleted at once (no kubelet confirms a bound pod's end): every daemon of the
    session's other tests watches every pod and node of this server."""
    with contextlib.suppress(ApiError):
        envtest.request("DELETE", object_path(obj) + "?gracePeriodSeconds=0")


@pytest.fixture
def make(envtest: EnvTest) -> Iterator[Callable[[dict[str, Any], dict[str, Any] | None], None]]:
    """Creates an object (and sets its status); deletes all it made when the test ends."""
    made: list[dict[str, Any]] = []

    def create(obj: dict[str, Any], status: dict[str, Any] | None) -> None:
        envtest.create(obj)
        made.append(obj)
        if status is not None:
            envtest.patch_status(obj, status)

    yield create
    for obj in reversed(made):
        _gone(envtest, obj)


def test_every_pod_and_node_reads_from_protobuf_as_from_json(
    envtest: EnvTest, real_ns: str, make: Any
):
    prefix = f"proto-{uuid.uuid4().hex[:6]}"
    nodes = _nodes(prefix)
    for obj, status in nodes:
        make(obj, status)
    pods = _pods(real_ns, nodes[0][0]["metadata"]["name"])
    for obj, _, status in pods:
        make(obj, status)
    for obj, _ in nodes:
        usual, read, straight = _both(envtest, obj)
        assert straight, obj["metadata"]["name"]
        assert read == usual, obj["metadata"]["name"]
    for obj, expect_straight, _ in pods:
        usual, read, straight = _both(envtest, obj)
        assert (straight, read) == (expect_straight, usual), obj["metadata"]["name"]
    # each way was read to something: a test whose records are all None could not fail
    empty = {obj["metadata"]["name"] for obj, _, _ in pods if _both(envtest, obj)[0][1] is None}
    assert empty == {"done", "nobody"}  # finished; unbound of no job and no gang


def test_a_holding_is_remembered_by_every_field_it_is_read_from(
    envtest: EnvTest, real_ns: str, make: Any
):
    """Bound pods alike but for one field their holding is read from, read one after the
    other by one reader (a holding is remembered, read.kube.straight): each reads as the
    usual way reads it, never as the pod before it; and pods alike but for what the
    holding does not read (their env, their node) share one holding."""
    requests = {"requests": {"cpu": "4", GPU: "1"}, "limits": {GPU: "1"}}

    def bound(name: str, node: str = "n-1", **spec: Any) -> dict[str, Any]:
        main = _container(resources=requests, **spec.pop("main", {}))
        return _pod(real_ns, f"held-{name}", {"nodeName": node, "containers": [main], **spec})

    init = _container("init", resources={"requests": {"cpu": "16"}})
    sidecar = _container("side", restartPolicy="Always", resources={"requests": {"cpu": "2"}})
    pods = [
        bound("base"),
        bound("init", initContainers=[init]),
        bound("sidecar", initContainers=[sidecar]),
        bound("port", main={"ports": [{"containerPort": 80, "hostPort": 8080}]}),
        bound("hostnet", hostNetwork=True, main={"ports": [{"containerPort": 80}]}),
        # the sidecar's container but its restartPolicy: an init container, done before
        # the main one starts, holds nothing beside it
        bound(
            "plain-init",
            initContainers=[{k: v for k, v in sidecar.items() if k != "restartPolicy"}],
        ),
        bound("alike", node="n-2", main={"env": [{"name": "RANK", "value": "7"}]}),
    ]
    records = []
    for pod in pods:
        make(pod, None)
        usual, read, straight = _both(envtest, pod)
        assert straight and read == usual, pod["metadata"]["name"]
        records.append(read[1])
    holdings = [(r.requests, r.ports, r.gpus) for r in records]
    assert len(set(holdings[:5])) == 5  # each field changed the holding
    assert holdings[5] == holdings[6] == holdings[0] and records[6].node == "n-2"


async def test_a_source_asking_protobuf_keeps_what_one_asking_json_keeps(
    envtest: EnvTest, real_ns: str, real_client: ApiClient, make: Any
):
    prefix = f"proto-{uuid.uuid4().hex[:6]}"
    nodes = _nodes(prefix)
    for obj, status in nodes:
        make(obj, status)
    for obj, _, status in _pods(real_ns, nodes[0][0]["metadata"]["name"]):
        make(obj, status)
    kept = {}
    for ask in (True, False):
        settings = Settings.model_validate({"kube_protobuf": ask, "kube_list_page_size": 3})
        source = KubeSource(
            settings.kube_options(),
            real_client,
            watch_nodes=True,
            watch_pods=True,
            read_options=OPTIONS,
        )
        objects = await source.list_once()
        pages = {c.name: c.counters.proto_pages for c in source._caches}
        assert (pages["Pod(*)"] > 1, pages["Node"] > 1) == (ask, ask)
        assert sum(pages.values()) == pages["Pod(*)"] + pages["Node"]  # CRDs: JSON
        kept[ask] = (objects.nodes, objects.pods)
    assert kept[True] == kept[False]
    mine = [n for n in kept[True][0] if n.name.startswith(prefix)]
    assert len(mine) == len(nodes)


# ---- random pods: any valid spec the server admits reads alike -----------------------------

_NAME = st.text("abcxyz", min_size=1, max_size=4)
_QTY = st.sampled_from(["1", "2", "500m", "1.5", "64Gi", "100M", "0", "3k"])
_RESOURCES = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory", GPU, "rdma/hca"]), _QTY),
        "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), _QTY),
    },
)
_PORT = st.fixed_dictionaries(
    {"containerPort": st.integers(1, 65535)},
    optional={
        "hostPort": st.integers(1, 65535),
        "protocol": st.sampled_from(["TCP", "UDP", "SCTP"]),
        "hostIP": st.sampled_from(["10.0.0.1", "0.0.0.0"]),
    },
)
_TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": _NAME,
        "operator": st.sampled_from(["Exists", "Equal"]),
        "value": _NAME,
        "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
        "tolerationSeconds": st.integers(0, 300),
    },
)
_REQ = st.fixed_dictionaries(
    {"key": _NAME, "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"])},
    optional={"values": st.lists(_NAME, min_size=1, max_size=2)},
)
_SPEC = st.fixed_dictionaries(
    {
        "containers": st.lists(
            st.fixed_dictionaries(
                {"resources": _RESOURCES}, optional={"ports": st.lists(_PORT, max_size=2)}
            ),
            min_size=1,
            max_size=2,
        )
    },
    optional={
        "nodeName": st.just("NODE"),
        "hostNetwork": st.booleans(),
        # a bound pod's holding is remembered by its containers' and these (read.kube.
        # straight): with one reader over every example, a key that missed one would
        # give one example the holding of another
        "initContainers": st.lists(
            st.fixed_dictionaries(
                {"resources": _RESOURCES}, optional={"restartPolicy": st.just("Always")}
            ),
            max_size=2,
        ),
        "nodeSelector": st.dictionaries(_NAME, _NAME, max_size=2),
        "tolerations": st.lists(_TOLERATION, max_size=3),
        "affinity": st.fixed_dictionaries(
            {
                "nodeAffinity": st.fixed_dictionaries(
                    {
                        REQUIRED: st.fixed_dictionaries(
                            {
                                "nodeSelectorTerms": st.lists(
                                    st.fixed_dictionaries(
                                        {},
                                        optional={"matchExpressions": st.lists(_REQ, max_size=2)},
                                    ),
                                    min_size=1,
                                    max_size=2,
                                )
                            }
                        )
                    }
                )
            }
        ),
    },
)


def _named(spec: dict[str, Any], node: str) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    for i, c in enumerate(spec["containers"]):
        c.update(name=f"c{i}", image="busybox")
    for i, c in enumerate(spec.get("initContainers", ())):
        c.update(name=f"i{i}", image="busybox")
    if "nodeName" in spec:
        spec["nodeName"] = node
    return spec


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(spec=_SPEC, owned=st.booleans())
def test_any_pod_the_server_admits_reads_from_protobuf_as_from_json(
    envtest: EnvTest, real_ns: str, spec: dict[str, Any], owned: bool
):
    meta: dict[str, Any] = {"annotations": {"scheduling.k8s.io/group-name": "pg"}}
    if owned:
        meta = {
            "labels": WORKER_LABELS,
            "ownerReferences": [_owner("PyTorchJob", "kubeflow.org/v1", "t", True)],
        }
    pod = _pod(real_ns, f"p-{uuid.uuid4().hex[:10]}", _named(spec, "some-node"), **meta)
    try:
        envtest.create(pod)
    except ApiError as exc:
        assert exc.status == 422, exc.body  # invalid: nothing to read
        return
    try:
        usual, read, _ = _both(envtest, pod)
    finally:
        _gone(envtest, pod)
    assert read == usual
    assert usual[1] is not None


# ---- what cannot be read ---------------------------------------------------------------------


def test_an_answer_that_is_not_the_envelope_says_so():
    with pytest.raises(proto.ProtoError, match="not a protobuf answer"):
        proto.list_page(b'{"kind": "PodList"}')
    with pytest.raises(proto.ProtoError, match="envelope unreadable"):
        proto.list_page(proto.MAGIC + b"\xff\xff\xff")
    with pytest.raises(proto.ProtoError, match="Pod unreadable"):
        proto.parse("Pod", b"\x0a\x05ab")


def test_a_failure_sent_in_protobuf_reads_as_its_json_status(envtest: EnvTest, real_ns: str):
    path = object_path(_pod(real_ns, "absent", {}))
    req = urllib.request.Request(envtest.url + path)
    req.add_header("Authorization", f"Bearer {envtest.token}")
    req.add_header("Accept", proto.ACCEPT)
    with pytest.raises(urllib.error.HTTPError) as failed:
        urllib.request.urlopen(req, context=envtest._context(), timeout=30)
    body = failed.value.read()
    assert proto.is_proto(body)
    status = json.loads(proto.status_json(body))
    assert (status["code"], status["reason"]) == (404, "NotFound")
    assert "absent" in status["message"]
    assert proto.status_json(b"not protobuf") == b"not protobuf"


async def test_an_unreadable_protobuf_page_fails_the_list_and_the_cache_asks_json_after(
    envtest: EnvTest, real_client: ApiClient, make: Any
):
    node, status = _nodes(f"proto-{uuid.uuid4().hex[:6]}")[0]
    make(node, status)
    settings = Settings.model_validate({"kube_protobuf": True})
    source = KubeSource(settings.kube_options(), real_client, watch_nodes=True, watch_pods=True)
    caches = {c.name: c for c in source._caches}
    nodes, pods = caches["Node"], caches["Pod(*)"]
    with pytest.raises(proto.ProtoError, match="envelope unreadable"):
        nodes._read_page(proto.MAGIC + b"\x12\x03\x0a\x01\xff")
    with pytest.raises(proto.ProtoError, match="Pod unreadable"):
        pods._take_proto(b"\x0a\x05ab", {}, set())  # one item of a page that was read
    assert (nodes._proto, pods._proto) == (None, None)
    objects = await asyncio.wait_for(source.list_once(), 30)  # JSON now
    assert (nodes.counters.proto_pages, pods.counters.proto_pages) == (0, 0)
    assert node["metadata"]["name"] in {n.name for n in objects.nodes}


async def test_the_daemons_caches_ask_protobuf_for_pods_and_nodes_and_drop_what_is_too_big(
    envtest: EnvTest, real_ns: str, make: Any
):
    """The caches `run` builds (wiring.build_sources) read Pods and Nodes from protobuf,
    straight where they can; with kube_protobuf off, none does. A protobuf item over
    max_object_bytes is sized as served, dropped and reported, as a JSON one is."""
    from kubernetes_asyncio.client import Configuration

    from autoscaler.run.wiring import build_sources

    node, status = _nodes(f"proto-{uuid.uuid4().hex[:6]}")[0]
    make(node, status)
    bound = {"nodeName": node["metadata"]["name"]}
    small = _pod(real_ns, "small", bound)
    big = _pod(real_ns, "big", bound, annotations={"n": "x" * 9000})
    for pod in (small, big):
        make(pod, None)
    client = ApiClient(Configuration())
    for ask in (True, False):
        settings = Settings(node_fit=True, max_object_bytes=8192, kube_protobuf=ask)
        kube, prometheus = build_sources(settings, client)
        prometheus.close()
        caches = {c.resource.kind: c for c in kube._caches}
        asking = {k for k, c in caches.items() if c._proto is not None}
        assert asking == ({"Pod", "Node"} if ask else set())
        straight = {k for k, c in caches.items() if c._proto is not None and c._proto.fast}
        assert straight == asking
    settings = Settings(node_fit=True, max_object_bytes=8192)
    kube, prometheus = build_sources(settings, client)
    prometheus.close()
    cache = next(c for c in kube._caches if c.resource.kind == "Pod")
    fresh: dict[Any, Any] = {}
    dropped: set[Any] = set()
    for pod in (small, big):
        cache._take_proto(_item(envtest, pod)[1], fresh, dropped)
    assert set(fresh) == {(real_ns, "small")}
    assert fresh[(real_ns, "small")] == _both(envtest, small)[0][1]
    assert set(cache.oversized) == dropped == {(real_ns, "big")}
    await client.close()


def test_a_field_read_later_from_its_bytes_that_cannot_be_read_says_so():
    """Maps and sub-messages declared as bytes are read when a memo misses: one that is
    not what it should be is a ProtoError too (the cache turns to JSON), not a crash."""
    node = proto.parse("Node", b"\x1a\x04\x12\x02\xff\xff")  # status.allocatable: [b"\xff\xff"]
    with pytest.raises(proto.ProtoError, match="QuantityEntry unreadable"):
        proto.quantities(node.status.allocatable)
    pod = proto.parse("Pod", b"\x12\x06\x12\x04\x42\x02\xff\xff")  # a container's resources
    with pytest.raises(proto.ProtoError, match="ResourceRequirements unreadable"):
        proto.pod_wire(pod)


# ---- the continue token read from a page's first bytes ------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    version=st.text(alphabet="0123456789", min_size=1, max_size=12),
    token=st.text(max_size=300),
    remaining=st.none() | st.integers(0, 2**40),
    items=st.lists(st.binary(max_size=300), max_size=4),
    kind=st.sampled_from(["PodList", "NodeList", "A" * 200]),
)
def test_a_pages_first_bytes_give_its_continue_token_or_nothing_never_another(
    version: str, token: str, remaining: int | None, items: list[bytes], kind: str
):
    """Every prefix of a page gives None (more bytes needed) or the very token the
    whole page reads as (`list_page`): a guess is never wrong, only early."""
    body = envelope(version, token, remaining, items, kind)
    assert proto.list_page(body)[1] == token
    answers = [proto.continue_ahead(body[:cut]) for cut in range(len(body) + 1)]
    assert {a for a in answers if a is not None} == {token}
    # it is known once the list's metadata has arrived, before its first item (found
    # from the end: an item's bytes may be the metadata's too)
    trailer = delimited(4, b"application/vnd.kubernetes.protobuf")
    items_at = len(body) - len(trailer) - sum(len(delimited(2, item)) for item in items)
    assert proto.continue_ahead(body[: items_at + 1]) == token


def test_first_bytes_laid_out_otherwise_say_so():
    with pytest.raises(proto.ProtoError, match="not a protobuf answer"):
        proto.continue_ahead(b'{"kind": "PodList", "metadata": {"continue": "x"}}')
    # the list's items before its metadata: no token guessed, the page is read whole
    listed = delimited(2, b"item") + delimited(1, delimited(3, b"x"))
    with pytest.raises(proto.ProtoError, match="metadata is not its first field"):
        proto.continue_ahead(proto.MAGIC + delimited(2, listed))
    with pytest.raises(proto.ProtoError, match="not length-delimited"):
        proto.continue_ahead(proto.MAGIC + b"\x08\x01")


def test_each_real_page_names_the_next_in_its_first_bytes(
    envtest: EnvTest, real_ns: str, make: Any
):
    """The API server's own pages of a pod LIST in protobuf (a page a pod): the token
    is read from the bytes before the first item, and it is the page's own."""
    for i in range(3):
        make(_pod(real_ns, f"paged-{i}", {}), None)
    path, token, pages = f"/api/v1/namespaces/{real_ns}/pods?limit=1", "", 0
    while True:
        body = _get(envtest, path + (f"&continue={token}" if token else ""), proto.ACCEPT)
        _, token, items = proto.list_page(body)
        head = body[: body.index(items[0])] if items else body
        assert proto.continue_ahead(head) == token
        assert proto.continue_ahead(head[: len(head) // 2]) in (None, token)
        pages += 1
        if not token:
            break
    assert pages == 3
