"""The caches' lean decode (sources.wire) against the whole decode it replaced: for every
kind, the record a decoder makes of the declared fields is the record it made of the
whole object, for objects as the real API server serves them (tests/data/served/), as
users and the builders write them, and for any object with one field changed to any
JSON value (a hypothesis property: what is not declared is never read, and a field of
an unexpected type is read whole, with the decoder's own message)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from builders import edit, paddlejob, podgroup, pytorchjob, vcjob
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core.resources import JOB_RESOURCES
from autoscaler.read.kube.wire import read_whole, reader
from autoscaler.read.parse import decoders
from autoscaler.settings import Settings

DATA = Path(__file__).parent / "data"
OPTIONS = Settings.model_validate({}).read_options()
DECODE = decoders(OPTIONS)
JOB_KINDS = {r.kind for r in JOB_RESOURCES}


def _read(kind: str) -> Any:
    return reader(kind, job=kind in JOB_KINDS)


def outcome(kind: str, body: bytes, read: Any) -> tuple[Any, ...]:
    """What the cache keeps of an object read by `read`: its record, or the error."""
    try:
        obj = read(body)
        return ("record", DECODE[kind](obj) if isinstance(obj, dict) else obj)
    except Exception as exc:  # the same failure, with the same message, is the same outcome
        return ("error", type(exc).__name__, str(exc))


def assert_same(kind: str, obj: Any) -> None:
    body = json.dumps(obj).encode()
    assert outcome(kind, body, _read(kind)) == outcome(kind, body, read_whole)


def served() -> list[tuple[str, dict[str, Any]]]:
    """Objects as the real API server served them (managedFields, defaults, status)."""
    out = []
    for path in sorted((DATA / "served").glob("*.json")):
        obj = json.loads(path.read_text())
        out.append((obj["kind"], obj))
    return out


POD_SPEC: dict[str, Any] = {
    "nodeName": "gpu-1",
    "hostNetwork": True,
    "nodeSelector": {"accelerator": "a100"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]},
                ]
            }
        },
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]},
    },
    "topologySpreadConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}],
    "overhead": {"cpu": "100m"},
    "containers": [
        {
            "name": "pytorch",
            "image": "x",
            "env": [{"name": "A", "value": "b"}],
            "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "8"}},
            "ports": [{"name": "pytorchjob-port", "containerPort": 23456, "hostPort": 23456}],
        }
    ],
    "initContainers": [
        # a sidecar first: the init container after it runs beside it
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
        {"name": "fetch", "resources": {"requests": {"cpu": "16"}}},
    ],
    "volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
        {"name": "shm", "emptyDir": {}},
    ],
}
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-worker-3",
        "namespace": "ml",
        "labels": {
            "training.kubeflow.org/replica-type": "Worker",
            "training.kubeflow.org/replica-index": "3",
        },
        "annotations": {"scheduling.k8s.io/group-name": "train"},
        "ownerReferences": [
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train", "uid": "u"},
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "t", "controller": 1},
            {"kind": "PyTorchJob", "name": "train", "controller": True},
        ],
        "managedFields": [{"manager": "m", "time": "2026-11-22T08:00:00Z", "fieldsV1": {}}],
    },
    "spec": POD_SPEC,
    "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
}
NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-1",
        "labels": {"kubernetes.io/hostname": "gpu-1", "accelerator": "a100"},
    },
    "spec": {
        "unschedulable": True,
        "taints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"},
        ],
    },
    "status": {
        "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
        "capacity": {"nvidia.com/gpu": "8"},
        "conditions": [
            {"type": "MemoryPressure", "status": "False", "message": "ok"},
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        ],
        "images": [{"names": ["registry/x:1"], "sizeBytes": 10}],
    },
}


def _unbound(pod: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    del out["spec"]["nodeName"]
    out["status"]["phase"] = "Pending"
    return out


def _managed(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Update", "time": "2026-11-22T09:00:00Z"},
        {"manager": "op", "subresource": "status", "time": "2026-11-22T09:30:00Z"},
    ]
    return out


def _seed() -> dict[str, Any]:
    obj = yaml.safe_load((DATA / "seed-pytorchjob.yaml").read_text())
    assert isinstance(obj, dict)
    return obj


WRITTEN: list[tuple[str, dict[str, Any]]] = [
    ("PyTorchJob", pytorchjob()),
    ("PyTorchJob", _managed(pytorchjob(replicas=4, active=1))),
    ("PyTorchJob", pytorchjob(annotations={"elastic-autoscaler.io/paused": "true"})),
    ("PyTorchJob", _seed()),
    ("PyTorchJob", edit(pytorchjob(), "metadata.deletionTimestamp", "2026-11-22T10:00:00Z")),
    ("PaddleJob", paddlejob()),
    ("Job", vcjob()),
    ("Job", vcjob(replicas=3, running=1, phase="Pending")),
    ("PodGroup", podgroup(owner="job")),
    ("PodGroup", podgroup(phase="Running")),
    ("Pod", POD),
    ("Pod", _unbound(POD)),
    ("Node", NODE),
]


@pytest.mark.parametrize(("kind", "obj"), WRITTEN + served(), ids=lambda v: str(v)[:40])
def test_the_lean_decode_gives_the_record_of_the_whole_object(kind, obj):
    assert_same(kind, obj)


def test_served_objects_are_pinned():
    """tests/data/served/ holds one object of each kind the caches read in bulk, as the
    real API server serves them (see its README)."""
    assert {kind for kind, _ in served()} >= {"PyTorchJob", "PodGroup", "Pod", "Node"}


def test_what_is_not_read_is_not_decoded():
    pod = reader("Pod")(json.dumps(POD).encode())
    assert "env" not in pod["spec"]["containers"][0]
    assert "managedFields" not in pod["metadata"]
    assert pod["status"] == {"phase": "Running"}
    # bound: what it holds where it runs; not what its shape would need to be placed
    assert set(pod["spec"]) == {"nodeName", "containers", "initContainers", "overhead"} | {
        "hostNetwork"
    }
    unbound = reader("Pod")(json.dumps(_unbound(POD)).encode())
    assert {"tolerations", "affinity", "nodeSelector", "volumes"} <= set(unbound["spec"])
    assert unbound["spec"]["volumes"] == [{"persistentVolumeClaim": {"claimName": "d"}}, {}]
    node = reader("Node")(json.dumps(_managed(NODE)).encode())
    assert set(node["status"]) == {"allocatable", "conditions"}
    assert set(node["metadata"]) == {"name", "labels"}
    assert node["status"]["conditions"][1] == {"type": "Ready", "status": "True"}


@pytest.mark.parametrize("kind", ["PyTorchJob", "PaddleJob"])
def test_a_kubeflow_jobs_templates_are_read_as_pod_specs(kind):
    """Of a template only the pod spec's declared fields are decoded: a job's bulk (its
    containers' env, command, probes; kubectl's copy aside) is skipped, not built."""
    obj = pytorchjob() if kind == "PyTorchJob" else paddlejob()
    field = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "paddleReplicaSpecs"
    worker = obj["spec"][field]["Worker"]
    worker["restartPolicy"] = "OnFailure"
    worker["template"]["metadata"] = {"labels": {"app": "train"}}
    container = worker["template"]["spec"]["containers"][0]
    container.update({"env": [{"name": "A", "value": "b"}], "command": ["torchrun"]})
    read = reader(kind, job=True)(json.dumps(obj).encode())
    got = read["spec"][field]["Worker"]
    assert set(got) == {"replicas", "template"}
    assert set(got["template"]) == {"spec"}
    assert set(got["template"]["spec"]["containers"][0]) <= {"name", "resources", "ports"}
    assert read["spec"]["elasticPolicy"] == obj["spec"]["elasticPolicy"]
    assert_same(kind, obj)


def test_a_field_of_another_type_is_read_whole_and_malformed_json_still_fails():
    odd = copy.deepcopy(POD)
    odd["spec"]["containers"] = "not a list"
    assert reader("Pod")(json.dumps(odd).encode()) == odd
    with pytest.raises(msgspec.DecodeError):
        reader("Pod")(b'{"metadata": ')
    assert reader("Queue") is read_whole


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "x", "1", "True"]),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


def _changed(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    cur: Any = out
    for step in path[:-1]:
        cur = cur[step]
    cur[path[-1]] = value
    return out


CORPUS = WRITTEN + served()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_field_changed_to_any_value_decodes_alike(data):
    kind, obj = data.draw(st.sampled_from(CORPUS))
    path = data.draw(st.sampled_from(_paths(obj)))
    assert_same(kind, _changed(obj, path, data.draw(JSON)))
