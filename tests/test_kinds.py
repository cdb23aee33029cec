"""The job kinds: PyTorchJob, PaddleJob and Volcano Job read into the same ElasticJob,
each bad field named, each resize written the kind's way."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from builders import (
    DELETE,
    NOW,
    edit,
    ej,
    gang,
    paddlejob,
    policy,
    pytorchjob,
    settings,
    snap,
    vcjob,
    with_master,
)

from autoscaler.core.model import Decision, ElasticJob, ObjectRef, UnmanagedJob
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import JOB_RESOURCES, JSON_PATCH, MERGE_PATCH
from autoscaler.plan.planner import plan
from autoscaler.read.kinds import KINDS, kind_of
from autoscaler.read.kinds.kubeflow import PADDLEJOB_KIND, PYTORCHJOB_KIND
from autoscaler.read.kinds.vcjob import VCJOB_KIND
from autoscaler.read.parse import Priorities, RawObjects, build_snapshot, parse_job
from autoscaler.read.snapshot_file import free_gpu_states

S = settings()
NOPRIO = Priorities({})
MAX = "elastic-autoscaler.io/max-replicas"
PS = {
    "name": "ps",
    "replicas": 1,
    "template": {"spec": {"containers": [{"name": "ps", "image": "x"}]}},
}


def parsed(obj):
    return parse_job(obj, S.read_options(), NOPRIO)


def test_every_kind_is_registered_once_and_known_to_settings():
    assert [k.resource for k in KINDS] == list(JOB_RESOURCES)
    assert len({k.resource.kind for k in KINDS}) == len(KINDS)


@pytest.mark.parametrize(
    ("obj", "kind", "lo", "hi", "replicas", "active", "gpw", "at"),
    [
        (pytorchjob(gpus=2), "PyTorchJob", 1, 4, 2, 2, 2, ""),
        (paddlejob(gpus=2, replicas=3, active=1, max_replicas=6), "PaddleJob", 1, 6, 3, 1, 2, ""),
        (vcjob(), "Job", 1, 4, 2, 2, 1, "0:worker"),
        # gang of 3 with one ps pod: the workers may not go below 2
        (
            vcjob(min_available=3, other_tasks=[PS], max_replicas=5),
            "Job",
            2,
            5,
            2,
            2,
            1,
            "1:worker",
        ),
        # the task's own minAvailable wins when higher
        (vcjob(task_min=2, max_replicas=3), "Job", 2, 3, 2, 2, 1, "0:worker"),
    ],
    ids=["pytorchjob", "paddlejob", "vcjob", "vcjob-gang-of-tasks", "vcjob-task-min"],
)
def test_each_kind_reads_into_the_same_elastic_job(obj, kind, lo, hi, replicas, active, gpw, at):
    job = parsed(obj)
    assert isinstance(job, ElasticJob), job
    assert (job.ref.kind, job.min_replicas, job.max_replicas) == (kind, lo, hi)
    assert (job.replicas, job.active, job.gpus_per_worker, job.workers_at) == (
        replicas,
        active,
        gpw,
        at,
    )
    assert job.queue == "team-a"


BAD = [
    # (case, object, reason, text the message must contain)
    (
        "paddle-no-worker",
        edit(paddlejob(), "spec.paddleReplicaSpecs.Worker", DELETE),
        Reason.INVALID_SPEC,
        "spec.paddleReplicaSpecs.Worker is missing",
    ),
    (
        "paddle-replicas-text",
        edit(paddlejob(), "spec.paddleReplicaSpecs.Worker.replicas", "two"),
        Reason.INVALID_REPLICAS,
        "spec.paddleReplicaSpecs.Worker.replicas must be an integer",
    ),
    (
        "paddle-not-elastic",
        edit(paddlejob(), "spec.elasticPolicy", DELETE),
        Reason.NOT_ELASTIC,
        "spec.elasticPolicy is not set",
    ),
    (
        "paddle-no-elastic-launcher",
        paddlejob(elastic_launcher=False),
        Reason.NOT_ELASTIC,
        "PADDLE_NNODES",
    ),
    (
        "paddle-launcher-annotation-not-a-bool",
        paddlejob(annotations={"elastic-autoscaler.io/paddle-elastic": "yes"}),
        Reason.INVALID_ANNOTATION,
        "metadata.annotations[elastic-autoscaler.io/paddle-elastic]",
    ),
    (
        "paddle-min-above-max",
        paddlejob(min_replicas=5, max_replicas=2),
        Reason.INVALID_POLICY,
        "minReplicas=5 is above maxReplicas=2",
    ),
    (
        "paddle-succeeded",
        paddlejob(conditions=[{"type": "Succeeded", "status": "True"}]),
        Reason.FINISHED,
        "Succeeded",
    ),
    ("vc-no-annotation", vcjob(max_replicas=None), Reason.NOT_ELASTIC, MAX),
    ("vc-annotation-text", vcjob(max_replicas="lots"), Reason.INVALID_ANNOTATION, "'lots'"),
    ("vc-annotation-zero", vcjob(max_replicas=0), Reason.INVALID_ANNOTATION, MAX),
    # numbers out of range are said to be out of range, not "not a number"
    (
        "vc-annotation-negative",
        vcjob(max_replicas=-4),
        Reason.INVALID_ANNOTATION,
        "must be between 1 and 100000, got -4",
    ),
    (
        "vc-annotation-huge",
        vcjob(max_replicas=99999999999),
        Reason.INVALID_ANNOTATION,
        "must be between 1 and 100000, got 99999999999",
    ),
    (
        "vc-number-with-two-tasks",
        vcjob(other_tasks=[PS], annotations={MAX: "4"}),
        Reason.INVALID_ANNOTATION,
        "say which is elastic, e.g. ps=4",
    ),
    (
        "vc-unknown-task",
        vcjob(other_tasks=[PS], elastic_task="ghost"),
        Reason.INVALID_ANNOTATION,
        "task 'ghost', which is not in spec.tasks (ps, worker)",
    ),
    (
        "vc-two-elastic-tasks",
        vcjob(other_tasks=[PS], annotations={MAX: "worker=4,ps=2"}),
        Reason.INVALID_ANNOTATION,
        "one task per Job is elastic",
    ),
    (
        "vc-max-below-min",
        vcjob(min_available=3, replicas=3, running=3, max_replicas=2),
        Reason.INVALID_ANNOTATION,
        "at most 2 worker(s), below the 3",
    ),
    ("vc-no-tasks", edit(vcjob(), "spec.tasks", []), Reason.INVALID_SPEC, "spec.tasks is missing"),
    (
        "vc-task-without-name",
        edit(vcjob(), "spec.tasks", [{"replicas": 2}]),
        Reason.INVALID_SPEC,
        "spec.tasks[0].name is missing",
    ),
    (
        "vc-replicas-negative",
        edit(vcjob(), "spec.tasks", [{**vcjob()["spec"]["tasks"][0], "replicas": -1}]),
        Reason.INVALID_REPLICAS,
        "spec.tasks[0].replicas must be between 0",
    ),
    (
        "vc-running-garbage",
        edit(vcjob(), "status.taskStatusCount.worker.phase.Running", "many"),
        Reason.INVALID_SPEC,
        "status.taskStatusCount[worker].phase.Running",
    ),
    (
        "vc-replicas-above-max",
        vcjob(replicas=6, running=6, max_replicas=4),
        Reason.INVALID_REPLICAS,
        "spec.tasks[0].replicas=6 is outside the elastic range [1, 4]",
    ),
    (
        "vc-no-gpu",
        vcjob(gpus=0),
        Reason.INVALID_SPEC,
        "spec.tasks[0].template requests no GPU",
    ),
    ("vc-completed", vcjob(phase="Completed"), Reason.FINISHED, "status.state.phase is Completed"),
    ("vc-aborted", vcjob(phase="Aborted"), Reason.SUSPENDED, "status.state.phase is Aborted"),
    (
        "vc-paused",
        vcjob(annotations={"elastic-autoscaler.io/paused": "true"}),
        Reason.PAUSED,
        "paused",
    ),
]


@pytest.mark.parametrize(("case", "obj", "reason", "text"), BAD, ids=[b[0] for b in BAD])
def test_bad_fields_of_each_kind_are_named(case, obj, reason, text):
    job = parsed(obj)
    assert isinstance(job, UnmanagedJob), case
    assert job.reason is reason, job.message
    assert text in job.message
    assert job.ref.kind == obj["kind"] and job.ref.name == obj["metadata"]["name"]


def test_a_batch_v1_job_is_not_a_volcano_job():
    batch = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}}
    assert kind_of(batch) is None
    assert kind_of(vcjob()) is VCJOB_KIND and kind_of(paddlejob()) is PADDLEJOB_KIND
    mixed = RawObjects.from_objects([batch, vcjob(), paddlejob(), pytorchjob()])
    assert sorted(o["kind"] for o in mixed.jobs) == ["Job", "PaddleJob", "PyTorchJob"]


def test_same_name_in_two_kinds_is_two_jobs_not_a_duplicate():
    raw = RawObjects.from_objects([pytorchjob("a"), vcjob("a"), paddlejob("a")])
    s = build_snapshot(raw, free_gpu_states({"team-a": 4}), S.read_options())
    assert sorted(j.ref.kind for j in s.jobs) == ["Job", "PaddleJob", "PyTorchJob"]
    assert not s.unmanaged


def test_kubeflow_writes_merge_patch_of_its_own_replica_spec():
    for kind, field in (
        (PYTORCHJOB_KIND, "pytorchReplicaSpecs"),
        (PADDLEJOB_KIND, "paddleReplicaSpecs"),
    ):
        w = kind.write("", 5, {"a/b": "c"}, "17")
        assert w.content_type == MERGE_PATCH
        assert w.body == {
            "metadata": {"annotations": {"a/b": "c"}, "resourceVersion": "17"},
            "spec": {field: {"Worker": {"replicas": 5}}},
        }


def test_vcjob_writes_a_json_patch_pinned_to_version_and_task():
    w = VCJOB_KIND.write("1:worker", 3, {"elastic-autoscaler.io/last-scale-time": "t"}, "17")
    assert w.content_type == JSON_PATCH
    assert w.body == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "17"},
        {"op": "test", "path": "/spec/tasks/1/name", "value": "worker"},
        {"op": "replace", "path": "/spec/tasks/1/replicas", "value": 3},
        {
            "op": "add",
            "path": "/metadata/annotations/elastic-autoscaler.io~1last-scale-time",
            "value": "t",
        },
    ]
    with pytest.raises(ValueError, match="locator"):
        VCJOB_KIND.write("", 3, {}, "17")


@pytest.mark.parametrize("obj", [paddlejob(), vcjob(), vcjob(other_tasks=[PS], min_available=2)])
def test_the_cache_record_of_each_kind_is_what_parsing_the_whole_object_gives(obj):
    from autoscaler.read.parse import decoders

    whole = copy.deepcopy(obj)
    whole["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {}}]
    whole["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
        "x" * 5000
    )
    assert decoders(S.read_options())[whole["kind"]](whole).job == parsed(whole)


@pytest.mark.parametrize("kind", ["Job", "PaddleJob", "PyTorchJob"])
def test_a_podgroup_owned_by_the_job_is_its_own_gang(kind):
    """A job whose own gang waits is not grown or shrunk, whatever its kind; a PodGroup
    owned by another kind of the same name is not its gang."""
    job = ej("a", min=1, max=8, replicas=2)
    job = replace(job, ref=replace(job.ref, kind=kind))
    owner = ObjectRef(job.ref.namespace, "a", kind)
    own = replace(gang("a-pg", 4), owner=owner)
    other = replace(own, owner=replace(owner, kind="Job" if kind != "Job" else "PyTorchJob"))
    p = plan(snap({"q": 100}, [job], [own]), policy(), NOW)
    assert p.decisions[0].reason is Reason.OWN_GANG_WAITING
    p = plan(snap({"q": 100}, [job], [other]), policy(), NOW)
    assert p.decisions[0].reason is not Reason.OWN_GANG_WAITING


@pytest.mark.parametrize(
    "obj",
    [
        paddlejob(min_replicas=5, max_replicas=2),
        vcjob(min_available=3, replicas=3, running=3, max_replicas=2),
    ],
    ids=["paddle-min-above-max", "vc-max-below-min"],
)
def test_a_paused_job_with_a_bad_range_is_reported_paused(obj):
    """The owner paused it, maybe to fix the range: paused comes first, as it always did
    for PyTorchJobs (the soak's parse mode checks the same order)."""
    obj["metadata"]["annotations"]["elastic-autoscaler.io/paused"] = "true"
    assert parsed(obj).reason is Reason.PAUSED


GPU_PS = edit(PS, "template.spec.containers.0.resources", {"limits": {"nvidia.com/gpu": 2}})


@pytest.mark.parametrize(
    ("obj", "workers", "other"),
    [
        (with_master(pytorchjob(replicas=3, active=3)), 3, 1),
        (with_master(pytorchjob(replicas=3, active=3), gpus=2, replicas=2), 3, 4),
        (with_master(paddlejob(replicas=2, active=2), gpus=1), 2, 1),
        (with_master(pytorchjob(replicas=3, active=3), gpus=0), 3, 0),  # a CPU Master
        (with_master(pytorchjob(replicas=3, active=3), gpus="one"), 3, 0),  # shown, not read
        (with_master(pytorchjob(replicas=3, active=3), replicas=True), 3, 0),
        (vcjob(other_tasks=[GPU_PS], min_available=2), 2, 2),
        (vcjob(other_tasks=[PS], min_available=2), 2, 0),
    ],
)
def test_a_jobs_gpus_count_its_master_and_other_tasks_beside_its_workers(obj, workers, other):
    """Issue 44: a job is shown with the GPUs it holds, its gang's other pods (a
    Master, a Volcano Job's other tasks) included; only its workers are resized."""
    job = parsed(obj)
    assert isinstance(job, ElasticJob)
    assert (job.replicas, job.other_gpus) == (workers, other)
    d = plan(snap({"team-a": 0}, [job]), policy(), NOW).decisions[0]
    assert d.gpus == workers * job.gpus_per_worker + other


def test_a_rigid_job_with_a_master_counts_its_gpus_with_the_master():
    """Issue 44's case: a rigid PyTorchJob, 3 Workers and a Master of 1 GPU each, holds 4
    GPUs; the plan reports it with 3 workers and 4 GPUs."""
    rigid = edit(with_master(pytorchjob(replicas=3, active=3)), "spec.elasticPolicy", DELETE)
    job = parsed(rigid)
    assert isinstance(job, UnmanagedJob) and job.reason is Reason.NOT_ELASTIC
    assert (job.replicas, job.gpus_per_worker, job.other_gpus) == (3, 1, 1)
    snapshot = build_snapshot(
        RawObjects(jobs=(rigid,)), free_gpu_states({"team-a": 0}), S.read_options()
    )
    (d,) = plan(snapshot, policy(), NOW).decisions
    assert (d.current, d.gpus) == (3, 4)


def test_a_decisions_gpus_are_unknown_where_its_workers_are():
    d = Decision(ObjectRef("ml", "a"), "q", None, None, Reason.INVALID_SPEC, "bad", other_gpus=1)
    assert d.gpus is None
    assert Decision(ObjectRef("ml", "a"), "q", 2, 2, Reason.AT_MAX, "", gpus_per_worker=2).gpus == 4
