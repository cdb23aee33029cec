"""Jobs Kueue manages are left alone (issue 46): a resize would make Kueue suspend the
job (every pod deleted) and queue it again, so such a job gets SkipKueueManaged, is
never written, and its GPUs still count in its Volcano queue."""

from __future__ import annotations

import pytest
from builders import DELETE, NOW, edit, policy, pytorchjob, settings, vcjob
from test_status import cycle

from autoscaler.core.model import ElasticJob, UnmanagedJob
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan
from autoscaler.read.parse import RawObjects, build_snapshot, parse_job
from autoscaler.read.parse.queues import NO_PRIORITIES
from autoscaler.read.snapshot_file import free_gpu_states
from autoscaler.report.status.view import explain_text

P = settings()
QUEUE_NAME = "kueue.x-k8s.io/queue-name"


def parsed(obj):
    return parse_job(obj, P.read_options(), NO_PRIORITIES)


def _labelled(obj, labels):
    return edit(obj, "metadata.labels", labels)


def _owned(obj, api_version, kind="Workload"):
    owner = {"apiVersion": api_version, "kind": kind, "name": "wl-1", "uid": "u1"}
    return edit(obj, "metadata.ownerReferences", [owner])


KUEUE = [
    ("queue-name label", _labelled(pytorchjob(), {QUEUE_NAME: "lq"}), f"label {QUEUE_NAME}=lq"),
    (
        "older queue-name annotation",
        pytorchjob(annotations={QUEUE_NAME: "lq"}),
        f"annotation {QUEUE_NAME}=lq",
    ),
    (
        "prebuilt workload label",
        _labelled(pytorchjob(), {"kueue.x-k8s.io/prebuilt-workload-name": "wl"}),
        "prebuilt-workload-name=wl",
    ),
    ("owned by a Workload", _owned(pytorchjob(), "kueue.x-k8s.io/v1beta1"), "owned by Workload"),
    (
        "not elastic, still Kueue's",
        _labelled(edit(pytorchjob(), "spec.elasticPolicy", DELETE), {QUEUE_NAME: "lq"}),
        QUEUE_NAME,
    ),
    (
        "paused and Kueue's",
        _labelled(
            pytorchjob(annotations={"elastic-autoscaler.io/paused": "true"}), {QUEUE_NAME: "lq"}
        ),
        QUEUE_NAME,
    ),
    ("a Volcano Job", _labelled(vcjob(), {QUEUE_NAME: "lq"}), QUEUE_NAME),
]


@pytest.mark.parametrize(("case", "obj", "mark"), KUEUE, ids=[k[0] for k in KUEUE])
def test_a_job_kueue_manages_is_left_alone_and_says_why(case, obj, mark):
    job = parsed(obj)
    assert isinstance(job, UnmanagedJob), case
    assert job.reason is Reason.KUEUE_MANAGED and job.reason.unmanaged
    assert mark in job.message
    assert "Kueue" in job.message and "suspend" in job.message and "queue it again" in job.message


NOT_KUEUE = [
    ("no marks", pytorchjob()),
    ("empty label", _labelled(pytorchjob(), {QUEUE_NAME: ""})),
    ("another label", _labelled(pytorchjob(), {"app": "train"})),
    ("owned by a JobSet", _owned(pytorchjob(), "jobset.x-k8s.io/v1alpha2", "JobSet")),
    ("labels not a mapping", edit(pytorchjob(), "metadata.labels", ["x"])),
    ("owners not a list", edit(pytorchjob(), "metadata.ownerReferences", "x")),
]


@pytest.mark.parametrize(("case", "obj"), NOT_KUEUE, ids=[k[0] for k in NOT_KUEUE])
def test_other_jobs_are_not_kueues(case, obj):
    assert isinstance(parsed(obj), ElasticJob), case


def test_a_kueue_job_keeps_its_range_and_in_flight_gpus():
    obj = _labelled(pytorchjob(replicas=4, active=1, gpus=2, max_replicas=8), {QUEUE_NAME: "lq"})
    job = parsed(obj)
    assert isinstance(job, UnmanagedJob)
    assert (job.replicas, job.min_replicas, job.max_replicas) == (4, 1, 8)
    assert job.inflight_gpus == 6 and job.gpus_per_worker == 2


def test_the_planner_never_resizes_a_kueue_job_and_counts_its_gpus():
    """Idle GPUs in the queue: the elastic neighbour grows, the Kueue job is listed with
    its reason, and the GPUs it asked for (not running yet) are not given away."""
    kueue_job = _labelled(
        pytorchjob("kq", replicas=4, active=2, max_replicas=8), {QUEUE_NAME: "lq"}
    )
    raw = RawObjects.from_objects([kueue_job, pytorchjob("mine", replicas=2, max_replicas=8)])
    snapshot = build_snapshot(raw, free_gpu_states({"team-a": 6}), P.read_options())
    p = plan(snapshot, policy(growth_payoff_factor=0), NOW)
    by_name = {d.ref.name: d for d in p.decisions}
    assert by_name["kq"].reason is Reason.KUEUE_MANAGED
    assert by_name["kq"].target == by_name["kq"].current == 4
    assert [a.ref.name for a in p.actions] == ["mine"]
    # 6 free, 2 of them asked for by the Kueue job: 4 are left to grow into
    assert p.actions[0].target == 6


def test_explain_says_kueue_would_suspend_it():
    kueue_job = _labelled(pytorchjob("kq"), {QUEUE_NAME: "lq"})
    raw = RawObjects.from_objects([kueue_job])
    snapshot = build_snapshot(raw, free_gpu_states({"team-a": 6}), P.read_options())
    doc = cycle(snapshot)
    (entry,) = [j for j in doc.jobs if j.name == "kq"]
    text = explain_text(doc, entry)
    assert "SkipKueueManaged" in text
    assert "suspend it (every pod deleted) and queue it again" in text
