"""podspec remembers what it read of a pod spec (a shape, what a bound pod holds) by the
JSON it was read from: a remembered answer is always the one a fresh read gives (the
key covers every field read), and the memory is bounded."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler import podspec
from autoscaler.model import HostPort
from autoscaler.podspec import PYTORCH_PORT, read_pod_use, read_shape

GPU = "nvidia.com/gpu"
AMOUNT = st.sampled_from(["1", "2", "500m", "8Gi", 4, "x"])
RESOURCES = st.dictionaries(st.sampled_from([GPU, "cpu", "memory", "rdma/hca"]), AMOUNT)
PORT = st.fixed_dictionaries(
    {"containerPort": st.sampled_from([80, 23456])},
    optional={"hostPort": st.sampled_from([0, 8080]), "name": st.just("pytorchjob-port")},
)
CONTAINER = st.fixed_dictionaries(
    {"name": st.sampled_from(["pytorch", "side"])},
    optional={
        "resources": st.fixed_dictionaries(
            {}, optional={"limits": RESOURCES, "requests": RESOURCES}
        ),
        "ports": st.lists(PORT, max_size=2),
        "restartPolicy": st.just("Always"),
    },
)
SPEC = st.fixed_dictionaries(
    {"nodeName": st.sampled_from(["n1", "n2"]), "containers": st.lists(CONTAINER, max_size=2)},
    optional={
        "initContainers": st.lists(CONTAINER, max_size=2),
        "overhead": RESOURCES,
        "hostNetwork": st.booleans(),
        "nodeSelector": st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"])),
        "tolerations": st.lists(
            st.fixed_dictionaries({"key": st.just(GPU), "operator": st.just("Exists")}), max_size=1
        ),
    },
)


def _pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ml"}, "spec": spec, "status": {}}


def _fresh(spec: dict[str, Any]) -> tuple[Any, Any]:
    podspec._SHAPES.clear()
    podspec._HOLDS.clear()
    return read_shape(spec, default_port=PYTORCH_PORT), read_pod_use(_pod(spec), (GPU,))


@settings(max_examples=300, deadline=None)
@given(st.lists(SPEC, min_size=2, max_size=6))
def test_a_remembered_read_is_a_fresh_read(specs):
    """Read in turn (each after the others were remembered), every spec reads as it
    reads with nothing remembered."""
    fresh = [_fresh(copy.deepcopy(s)) for s in specs]
    for spec in specs:  # warm: the others' answers are remembered
        read_shape(spec, default_port=PYTORCH_PORT)
        read_pod_use(_pod(spec), (GPU,))
    for spec, (shape, use) in zip(specs, fresh, strict=True):
        assert read_shape(spec, default_port=PYTORCH_PORT) == shape
        assert read_pod_use(_pod(spec), (GPU,)) == use


def test_the_memory_is_bounded():
    for n in range(podspec._SHAPES_LIMIT + 10):
        spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": f"{n}m"}}}]}
        read_shape(spec)
        read_pod_use(_pod({**spec, "nodeName": "n"}), (GPU,))
    assert 0 < len(podspec._SHAPES) <= podspec._SHAPES_LIMIT
    assert 0 < len(podspec._HOLDS) <= podspec._SHAPES_LIMIT


def test_a_spec_that_is_not_plain_json_is_read_without_memory():
    """A snapshot file's YAML may hold what JSON does not (a date, a number as a key),
    which would encode as a string does: read anew, not taken for that string."""
    import datetime

    plain = {"containers": [{"name": "c", "resources": {"limits": {GPU: "1"}}}]}
    for selector in ({"1": "x"}, {"since": "2026-01-01"}):
        as_json = read_shape({**plain, "nodeSelector": selector})
        assert dict(as_json.node_selector) == selector
    odd = read_shape({**plain, "nodeSelector": {1: "x"}})
    assert dict(odd.node_selector) == {"": "x"}  # a key that is not a string: unreadable
    dated = read_shape({**plain, "nodeSelector": {"since": datetime.date(2026, 1, 1)}})
    assert dict(dated.node_selector) == {"since": ""}
    ports = [{"containerPort": 80, "hostPort": 80}]
    as_list = read_pod_use(_pod({**plain, "nodeName": "n", "containers": [{"ports": ports}]}), ())
    as_tuple = read_pod_use(_pod({**plain, "nodeName": "n", "containers": ({"ports": ports},)}), ())
    assert as_list is not None and as_tuple is not None
    # read alike: both are sequences
    assert as_list.ports == as_tuple.ports == (HostPort(80, "TCP", ""),)
