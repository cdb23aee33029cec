"""Our fixtures and the example snapshot are objects the real CRDs accept.

Parsing tests are only as good as the objects they parse: every valid job, PodGroup and
Queue the tests build, the example cluster of README's first command and the simulator's
objects must pass the openAPIV3Schema of the real CRDs in tests/crds, as the API server
would check them. Status is validated too: its schema is what the operators write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from builders import podgroup, pytorchjob, queue_obj

REPO = Path(__file__).resolve().parents[1]
CRDS = Path(__file__).resolve().parent / "crds"


def _validators() -> dict[tuple[str, str], jsonschema.Draft4Validator]:
    """(apiVersion, kind) -> a validator of its openAPIV3Schema, per served version."""
    out: dict[tuple[str, str], jsonschema.Draft4Validator] = {}
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for name in (
        "kubeflow.org_pytorchjobs",
        "scheduling.volcano.sh_podgroups",
        "scheduling.volcano.sh_queues",
    ):
        for crd in yaml.load_all((CRDS / f"{name}.yaml").read_text(), Loader=loader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served", True):
                    api = f"{spec['group']}/{version['name']}"
                    schema = version["schema"]["openAPIV3Schema"]
                    out[(api, spec["names"]["kind"])] = jsonschema.Draft4Validator(schema)
    return out


SCHEMAS = _validators() if CRDS.is_dir() else {}


def check(obj: dict[str, Any]) -> None:
    key = (obj["apiVersion"], obj["kind"])
    assert key in SCHEMAS, f"no CRD in {CRDS} serves {key}"
    SCHEMAS[key].validate(obj)


def test_the_crds_we_read_are_all_present() -> None:
    for key in [
        ("kubeflow.org/v1", "PyTorchJob"),
        ("scheduling.volcano.sh/v1beta1", "PodGroup"),
        ("scheduling.volcano.sh/v1beta1", "Queue"),
    ]:
        assert key in SCHEMAS


@pytest.mark.parametrize(
    "obj",
    [
        pytorchjob(),
        pytorchjob(min_replicas=None, max_replicas=8, priority_class="high", min_available=None),
        pytorchjob(queue=None, replicas=0, active=0, conditions=[]),
        podgroup(),
        podgroup(
            owner="job",
            priority_class="high",
            phase="Inqueue",
            conditions=[{"type": "Unschedulable", "status": "True"}],
        ),
        queue_obj("team-a"),
    ],
    ids=["job", "job-min-defaulted", "job-no-queue", "podgroup", "podgroup-owned", "queue"],
)
def test_fixture_objects_match_the_crds(obj: dict[str, Any]) -> None:
    check(obj)


def test_a_schema_violation_is_caught() -> None:
    # the check itself must be able to fail: replicas as a string is not an int32
    bad = pytorchjob()
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        check(bad)


def test_example_snapshot_objects_match_the_crds() -> None:
    snapshot = yaml.safe_load((REPO / "config" / "example-snapshot.yaml").read_text())
    checked = 0
    for obj in snapshot["objects"]:
        if (obj["apiVersion"], obj["kind"]) in SCHEMAS:
            check(obj)
            checked += 1
    assert checked >= 5
