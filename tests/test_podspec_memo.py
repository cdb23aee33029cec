"""podspec remembers what it read of a pod spec (a shape, what a bound pod holds) by the
JSON it was read from: a remembered answer is always the one a fresh read gives (the
key covers every field read), and the memory is bounded."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.shapes import HostPort
from autoscaler.read import podspec
from autoscaler.read.kinds import base
from autoscaler.read.kinds.base import NotManaged, read_workers
from autoscaler.read.podspec import PYTORCH_PORT, read_pod_use, read_shape
from autoscaler.settings import Settings

GPU = "nvidia.com/gpu"
OPTIONS = Settings.model_validate({}).read_options()
OTHER = Settings.model_validate({"gpu_resource_names": ["rdma/hca"]}).read_options()
NO_TOLERATION = Settings.model_validate({"extended_resource_toleration": False}).read_options()
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


READ_AS = [  # where the group is, the settings, the port its operator adds
    ("spec.x.Worker", OPTIONS, PYTORCH_PORT),
    ("spec.y.Worker", OPTIONS, PYTORCH_PORT),
    ("spec.x.Worker", OPTIONS, None),
    ("spec.x.Worker", OTHER, PYTORCH_PORT),
    ("spec.x.Worker", NO_TOLERATION, PYTORCH_PORT),
]


def _workers(template: Any, how: int = 0) -> Any:
    """A Kubeflow worker group of this template as read_workers reads it (`how`: an
    entry of READ_AS): its Workers, or the NotManaged it raises (reason, message, what
    it knew)."""
    group = {"replicas": 2, "template": template}
    where, options, port = READ_AS[how]
    try:
        return read_workers(group, where, 1, 1, "status.x", options, default_port=port)
    except NotManaged as exc:
        return exc.reason, exc.message, exc.known


@settings(max_examples=300, deadline=None)
@given(st.lists(SPEC, min_size=2, max_size=6), st.data())
def test_a_remembered_template_is_a_fresh_read(specs, data):
    """A worker template's GPUs per worker (or why not) and its shape, remembered by the
    template as read (kinds.base.template_facts): the same as read with nothing
    remembered, whatever was read before."""
    # a template as a job carries it, or one that is no template at all
    templates = [
        {"spec": s} if data.draw(st.booleans()) else data.draw(st.sampled_from([None, {}, []]))
        for s in specs
    ]
    ways = [data.draw(st.integers(0, len(READ_AS) - 1)) for _ in templates]

    def fresh(template: Any, how: int) -> Any:
        base._TEMPLATES.clear()
        podspec._SHAPES.clear()
        return _workers(copy.deepcopy(template), how)

    expected = [fresh(t, how) for t, how in zip(templates, ways, strict=True)]
    for template in templates:  # warm: each template read every way
        for how in range(len(READ_AS)):
            _workers(template, how)
    assert [_workers(t, how) for t, how in zip(templates, ways, strict=True)] == expected


def test_a_remembered_template_is_bounded():
    for n in range(base.TEMPLATES_LIMIT + 10):
        template = {"spec": {"containers": [{"name": "c", "resources": {"limits": {GPU: n}}}]}}
        assert _workers(template).gpus_per_worker == n
    assert 0 < len(base._TEMPLATES) <= base.TEMPLATES_LIMIT
