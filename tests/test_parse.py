"""Parsing objects shaped like the real CRDs (tests/crds) into the model."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from builders import (
    DELETE,
    NOW,
    edit,
    podgroup,
    policy,
    priority_class,
    pytorchjob,
    queue_obj,
    settings,
    vcjob,
)

from autoscaler.core.model import (
    ElasticJob,
    InvalidGroup,
    ObjectRef,
    PendingGroup,
    UnmanagedJob,
)
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan
from autoscaler.read.parse import (
    Priorities,
    RawObjects,
    build_snapshot,
    decode_queue,
    parse_job,
    parse_podgroup,
)
from autoscaler.read.snapshot_file import free_gpu_states

P = settings()
NOPRIO = Priorities({})


def parsed(obj, settings=P, prio=NOPRIO):
    return parse_job(obj, settings.read_options(), prio)


def test_elastic_job_fields():
    job = parsed(
        pytorchjob(
            min_replicas=2,
            max_replicas=8,
            replicas=4,
            active=3,
            gpus=2,
            annotations={"elastic-autoscaler.io/last-scale-time": "2026-11-22T09:00:00Z"},
        )
    )
    assert isinstance(job, ElasticJob)
    assert (job.min_replicas, job.max_replicas, job.replicas, job.active) == (2, 8, 4, 3)
    assert job.gpus_per_worker == 2 and job.queue == "team-a"
    assert job.last_scale_time.isoformat() == "2026-11-22T09:00:00+00:00"
    assert job.resource_version == "42" and job.ref.uid == "uid-ml-job"
    assert job.started is not None and job.has_min_available


def test_older_min_max_keys_are_accepted():
    obj = pytorchjob(min_replicas=None, max_replicas=None, replicas=2)
    obj["spec"]["elasticPolicy"].update({"min": 1, "max": 6})
    job = parsed(obj)
    assert (job.min_replicas, job.max_replicas) == (1, 6)


@pytest.mark.parametrize(
    ("min_r", "max_r", "replicas", "bounds"),
    [
        (None, None, 3, (3, 3)),
        (None, 4, 4, (4, 4)),
        (2, None, 2, (2, 2)),
        (None, 2, 3, None),
    ],  # only max: min = max = 2, and replicas 3 is outside
)
def test_missing_bounds_default_like_the_operator(min_r, max_r, replicas, bounds):
    job = parsed(
        pytorchjob(min_replicas=min_r, max_replicas=max_r, replicas=replicas, active=replicas)
    )
    if bounds is None:
        assert job.reason is Reason.INVALID_REPLICAS
    else:
        assert (job.min_replicas, job.max_replicas) == bounds


QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


def _annotated(queue: str | None, annotation: str | None, paused: bool = False) -> dict:
    notes = {QUEUE_ANNOTATION: annotation} if annotation else {}
    if paused:
        notes["elastic-autoscaler.io/paused"] = "true"
    return pytorchjob("job", queue=queue, annotations=notes)


@pytest.mark.parametrize(
    ("obj", "group_queue", "queue", "warned"),
    [
        (_annotated("team-x", None), None, "team-x", ""),
        (_annotated(None, None), None, "default", ""),
        # the annotation: training-operator copies it onto the PodGroup's annotations only
        (
            _annotated(None, "team-y"),
            None,
            "default",
            "spec.runPolicy.schedulingPolicy.queue is unset",
        ),
        (
            _annotated("team-x", "team-y"),
            None,
            "team-x",
            "spec.runPolicy.schedulingPolicy.queue is team-x",
        ),
        (_annotated("team-y", "team-y"), None, "team-y", ""),
        # once the PodGroup exists, its spec.queue is where Volcano runs the job
        (_annotated(None, "team-y"), "default", "default", "its PodGroup's spec.queue is default"),
        (_annotated("team-x", None), "team-z", "team-z", ""),
        (_annotated("team-y", "team-y"), "team-y", "team-y", ""),
        # a job we do not manage is warned too (its GPUs count in the queue it runs in)
        (_annotated(None, "team-y", paused=True), "default", "default", "PodGroup"),
    ],
    ids=[
        "spec",
        "nothing",
        "annotation-only",
        "both-differ",
        "both-agree",
        "podgroup-default",
        "podgroup-moved",
        "podgroup-agrees",
        "unmanaged",
    ],
)
def test_a_kubeflow_jobs_queue_is_the_one_volcano_runs_it_in(obj, group_queue, queue, warned):
    """Its PodGroup's spec.queue once the PodGroup exists, else what training-operator
    writes there (runPolicy.schedulingPolicy.queue, else default); an annotation
    scheduling.volcano.sh/queue-name naming another queue is a warning on the job that
    says where it runs and how to set it (plan, status and an Event carry it)."""
    groups = ()
    if group_queue is not None:
        groups = (podgroup("job", queue=group_queue, phase="Running", owner="job"),)
    snapshot = build_snapshot(RawObjects(jobs=(obj,), podgroups=groups), {}, P.read_options())
    (job,) = snapshot.jobs + snapshot.unmanaged
    assert job.queue == queue
    assert list(snapshot.queues) == [queue]
    if not warned:
        assert job.queue_warning == ""
        return
    assert warned in job.queue_warning
    assert f"Volcano schedules it in queue {queue}" in job.queue_warning
    assert "set spec.runPolicy.schedulingPolicy.queue: team-y" in job.queue_warning
    (d,) = plan(snapshot, policy(), NOW).decisions  # shown with it, said as an Event
    assert d.queue == queue
    assert d.warnings == (job.queue_warning,) and job.queue_warning in d.notes


def test_gpus_limits_else_requests_summed_over_containers_and_resource_names():
    obj = pytorchjob(gpus=1)
    containers = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers.append({"name": "sidecar", "resources": {"requests": {"nvidia.com/gpu": "2"}}})
    containers.append({"name": "vendor", "resources": {"limits": {"baidu.com/a800": 4}}})
    assert parsed(obj).gpus_per_worker == 3
    custom = settings(gpu_resource_names=["nvidia.com/gpu", "baidu.com/a800"])
    assert parsed(obj, custom).gpus_per_worker == 7


def _with_requests(obj, requests):
    c = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    c["resources"]["requests"] = requests
    return obj


def test_equal_limits_and_requests_count_once():
    assert parsed(_with_requests(pytorchjob(gpus=2), {"nvidia.com/gpu": "2"})).gpus_per_worker == 2


def test_limits_and_requests_that_differ_are_invalid_and_name_both():
    # Kubernetes refuses such a pod: its workers never run, its GPUs must not be promised
    job = parsed(_with_requests(pytorchjob(gpus=1, replicas=3, active=1), {"nvidia.com/gpu": 2}))
    assert isinstance(job, UnmanagedJob) and job.reason is Reason.INVALID_SPEC
    assert "limits[nvidia.com/gpu]=1" in job.message
    assert "requests[nvidia.com/gpu]=2" in job.message
    assert job.inflight_gpus == 0  # no phantom in-flight GPUs cut other jobs' growth


@pytest.mark.parametrize(
    ("value", "gpus"),
    [
        (8, 8),
        ("8", 8),
        ("+8", 8),
        ("1e3", 1000),
        ("1E3", 1000),
        ("2k", 2000),
        ("4000m", 4),
        ("8.0", 8),
        (2.0, 2),
        ("0", 0),
    ],
)
def test_gpu_quantities_in_the_api_grammar(value, gpus):
    from autoscaler.read.fields import parse_quantity

    assert parse_quantity(value, "f") == gpus


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("500m", "whole number of GPUs, got '500m' (= 0.5)"),
        ("1.5", "whole number of GPUs, got '1.5' (= 1.5)"),
        ("1e-1", "whole number of GPUs"),
        ("-2", "must not be negative"),
        ("1e9", "out of range"),
        ("1e999", "out of range"),
        ("two", "must be a Kubernetes quantity"),
        (True, "must be a quantity"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        ([], "must be a Kubernetes quantity"),
    ],
)
def test_bad_gpu_quantities_say_what_is_wrong(value, message):
    from autoscaler.read.fields import BadField, parse_quantity

    with pytest.raises(BadField, match=r"^f ") as err:
        parse_quantity(value, "f")
    assert message in str(err.value)


def test_a_job_being_deleted_is_never_managed():
    job = parsed(
        edit(
            pytorchjob(replicas=2, active=2, max_replicas=8),
            "metadata.deletionTimestamp",
            "2026-11-22T10:00:00Z",
        )
    )
    assert isinstance(job, UnmanagedJob) and job.reason is Reason.TERMINATING
    assert "metadata.deletionTimestamp" in job.message


def test_priority_from_priority_class_objects():
    prio = Priorities.parse([priority_class("high", 1000), priority_class("std", 5, True)])
    assert parsed(pytorchjob(priority_class="high"), prio=prio).priority == 1000
    assert parsed(pytorchjob(), prio=prio).priority == 5  # the global default
    assert parsed(pytorchjob(priority_class="nope"), prio=prio).priority == 5


BAD = [
    (
        "min above max",
        pytorchjob(min_replicas=5, max_replicas=2),
        Reason.INVALID_POLICY,
        "spec.elasticPolicy.minReplicas",
    ),
    ("zero min", pytorchjob(min_replicas=0), Reason.INVALID_POLICY, "minReplicas"),
    ("min as string", pytorchjob(min_replicas="2"), Reason.INVALID_POLICY, "minReplicas"),
    ("replicas as string", pytorchjob(replicas="3"), Reason.INVALID_REPLICAS, "Worker.replicas"),
    ("negative replicas", pytorchjob(replicas=-1), Reason.INVALID_REPLICAS, "Worker.replicas"),
    ("huge replicas", pytorchjob(replicas=10**9), Reason.INVALID_REPLICAS, "Worker.replicas"),
    ("bool replicas", pytorchjob(replicas=True), Reason.INVALID_REPLICAS, "Worker.replicas"),
    (
        "replicas above max",
        pytorchjob(replicas=9, max_replicas=4),
        Reason.INVALID_REPLICAS,
        "outside the elastic range",
    ),
    (
        "missing worker",
        edit(pytorchjob(), "spec.pytorchReplicaSpecs.Worker", DELETE),
        Reason.INVALID_SPEC,
        "spec.pytorchReplicaSpecs.Worker",
    ),
    ("zero gpus", pytorchjob(gpus=0), Reason.INVALID_SPEC, "requests no GPU"),
    ("fractional gpus", pytorchjob(gpus="500m"), Reason.INVALID_SPEC, "nvidia.com/gpu"),
    (
        "unknown gpu resource",
        pytorchjob(resource="amd.com/gpu"),
        Reason.INVALID_SPEC,
        "requests no GPU",
    ),
    (
        "no containers",
        edit(pytorchjob(), "spec.pytorchReplicaSpecs.Worker.template.spec", {}),
        Reason.INVALID_SPEC,
        "containers",
    ),
    (
        "operator hpa",
        edit(pytorchjob(), "spec.elasticPolicy.metrics", [{"type": "Resource"}]),
        Reason.OPERATOR_HPA,
        "elasticPolicy.metrics",
    ),
    (
        "paused",
        pytorchjob(annotations={"elastic-autoscaler.io/paused": "true"}),
        Reason.PAUSED,
        "paused",
    ),
    (
        "garbage last-scale-time",
        pytorchjob(annotations={"elastic-autoscaler.io/last-scale-time": "yesterday"}),
        Reason.INVALID_ANNOTATION,
        "last-scale-time",
    ),
    (
        "naive last-scale-time",
        pytorchjob(annotations={"elastic-autoscaler.io/last-scale-time": "2026-11-22T09:00:00"}),
        Reason.INVALID_ANNOTATION,
        "time zone",
    ),
    (
        "not elastic",
        edit(pytorchjob(), "spec.elasticPolicy", DELETE),
        Reason.NOT_ELASTIC,
        "elasticPolicy",
    ),
    (
        "elasticPolicy not a mapping",
        edit(pytorchjob(), "spec.elasticPolicy", [1]),
        Reason.INVALID_POLICY,
        "elasticPolicy",
    ),
    (
        "active garbage",
        edit(pytorchjob(), "status.replicaStatuses.Worker.active", "x"),
        Reason.INVALID_SPEC,
        "status.replicaStatuses.Worker.active",
    ),
    (
        "succeeded",
        pytorchjob(conditions=[{"type": "Succeeded", "status": "True"}]),
        Reason.FINISHED,
        "Succeeded",
    ),
    (
        "failed",
        pytorchjob(conditions=[{"type": "Failed", "status": "True"}]),
        Reason.FINISHED,
        "Failed",
    ),
    (
        "terminating",
        edit(pytorchjob(), "metadata.deletionTimestamp", "2026-11-22T10:00:00Z"),
        Reason.TERMINATING,
        "deletionTimestamp",
    ),
    (
        "limits differ from requests",
        edit(
            pytorchjob(gpus=1),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers.0.resources.requests",
            {"nvidia.com/gpu": 4},
        ),
        Reason.INVALID_SPEC,
        "differs from",
    ),
    ("suspended", edit(pytorchjob(), "spec.runPolicy.suspend", True), Reason.SUSPENDED, "suspend"),
    ("no spec", edit(pytorchjob(), "spec", DELETE), Reason.INVALID_SPEC, "spec"),
    ("very long name", pytorchjob(name="x" * 300), Reason.INVALID_SPEC, "metadata.name"),
    ("no name", edit(pytorchjob(), "metadata.name", DELETE), Reason.INVALID_SPEC, "metadata.name"),
]


@pytest.mark.parametrize(("case", "obj", "reason", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_jobs_are_reported_with_the_field(case, obj, reason, field):
    job = parsed(obj)
    assert isinstance(job, UnmanagedJob), case
    assert job.reason is reason
    assert field in job.message


def test_unicode_names_are_fine():
    job = parsed(pytorchjob(name="trainer-λ", namespace="équipe"))
    assert isinstance(job, ElasticJob) and job.ref.name == "trainer-λ"


def test_unmanaged_job_keeps_its_inflight_gpus():
    job = parsed(edit(pytorchjob(replicas=4, active=1, gpus=2), "spec.elasticPolicy", DELETE))
    assert job.reason is Reason.NOT_ELASTIC and job.inflight_gpus == 6


def test_finished_job_holds_nothing():
    job = parsed(pytorchjob(conditions=[{"type": "Succeeded", "status": "True"}]))
    assert job.inflight_gpus == 0


@pytest.mark.parametrize(
    ("obj", "gpus", "phase"),
    [
        (podgroup(gpus=4), 4, "Pending"),
        (podgroup(gpus="8", phase="Inqueue"), 8, "Inqueue"),
        (podgroup(gpus=2, key="requests.nvidia.com/gpu"), 2, "Pending"),
        (
            podgroup(phase="Unknown", conditions=[{"type": "Unschedulable", "status": "True"}]),
            4,
            "Unknown",
        ),
    ],
)
def test_waiting_podgroups(obj, gpus, phase):
    g = parse_podgroup(obj, P.read_options(), NOPRIO)
    assert isinstance(g, PendingGroup) and g.gpus == gpus and g.phase == phase


@pytest.mark.parametrize(
    "obj",
    [
        podgroup(phase="Running"),
        podgroup(phase="Completed"),
        podgroup(phase="Unknown"),
    ],
)
def test_podgroups_that_need_no_room(obj):
    assert parse_podgroup(obj, P.read_options(), NOPRIO) is None


def test_podgroup_owner_priority_and_queue():
    prio = Priorities.parse([priority_class("high", 1000)])
    g = parse_podgroup(
        podgroup(owner="trainer", priority_class="high", queue="team-z"), P.read_options(), prio
    )
    assert g.owner.name == "trainer" and g.owner.kind == "PyTorchJob"
    assert g.priority == 1000 and g.queue == "team-z"


@pytest.mark.parametrize(
    ("objects", "job_kinds", "orphan"),
    [
        # its job is there: a gang to make room for
        ([pytorchjob("t2", replicas=4, active=0)], None, ""),
        # deleted (its PodGroup waits for the garbage collector)
        ([pytorchjob("other")], None, "is gone, or not among the watched jobs"),
        # nothing of the kind is left, but the kind is watched (the daemon's caches say)
        ([], ("PyTorchJob",), "is gone, or not among the watched jobs"),
        # being deleted (a finalizer, or foreground deletion)
        (
            [edit(pytorchjob("t2", replicas=4, active=0), "metadata.deletionTimestamp", "x")],
            None,
            "is being deleted",
        ),
        # a job of the same name made since: not the owner the PodGroup names
        (
            [edit(pytorchjob("t2", replicas=4, active=0), "metadata.uid", "uid-new")],
            None,
            "a job of that name now is another",
        ),
        # a kind nobody watches here: nothing says its job is gone
        ([], (), ""),
    ],
)
def test_a_waiting_gang_whose_job_is_gone_is_marked(objects, job_kinds, orphan):
    from dataclasses import replace

    from autoscaler.read.parse import Records, assemble

    group = podgroup("t2", owner="t2", gpus=4)
    records = Records.decode(RawObjects.from_objects([*objects, group]), P.read_options())
    records = replace(records, job_kinds=job_kinds) if job_kinds is not None else records
    (g,) = assemble(records).pending
    assert (orphan in g.orphan) if orphan else g.orphan == ""


@pytest.mark.parametrize(
    ("selector", "deleted", "orphan"),
    [
        # no label_selector: every job of the kind is watched, so not found is gone
        (False, (), "is gone, or not among the watched jobs"),
        (False, ("ml", "t2", ""), "seen deleted"),
        # label_selector: not found may be a job outside it, real: its gang is served
        (True, (), ""),
        # ... unless the caches saw it deleted
        (True, ("ml", "t2", ""), "seen deleted"),
        (True, ("ml", "t2", "uid-t2"), "seen deleted"),
        # a deleted job of that name, but not the owner (another uid), or elsewhere
        (True, ("ml", "t2", "uid-old"), ""),
        (True, ("other", "t2", ""), ""),
        (True, ("ml", "t3", ""), ""),
    ],
)
def test_under_a_label_selector_only_a_job_seen_deleted_is_gone(selector, deleted, orphan):
    from dataclasses import replace

    from autoscaler.read.parse import Records, assemble

    group = edit(podgroup("t2", owner="t2", gpus=4), "metadata.ownerReferences.0.uid", "uid-t2")
    records = Records.decode(RawObjects.from_objects([group]), P.read_options())
    tombstones = (ObjectRef(deleted[0], deleted[1], "PyTorchJob", deleted[2]),) if deleted else ()
    records = replace(
        records, job_kinds=("PyTorchJob",), job_selector=selector, deleted_jobs=tombstones
    )
    (g,) = assemble(records).pending
    assert (orphan in g.orphan) if orphan else g.orphan == ""


def test_podgroup_with_garbage_min_resources():
    g = parse_podgroup(podgroup(gpus="lots"), P.read_options(), NOPRIO)
    assert isinstance(g, InvalidGroup) and "spec.minResources[nvidia.com/gpu]" in g.message


def test_snapshot_marks_queues_without_a_reading_unknown():
    raw = RawObjects.from_objects(
        [
            {
                "kind": "List",
                "items": [pytorchjob("a", queue="team-a"), pytorchjob("b", queue="team-b")],
            },
            queue_obj("team-a"),
            queue_obj("team-c", "Closed"),
        ]
    )
    snap = build_snapshot(raw, free_gpu_states({"team-a": 2, "team-c": 5}), P.read_options())
    assert snap.queues["team-a"].free_gpus == 2
    assert snap.queues["team-b"].free_gpus is None
    assert snap.queues["team-b"].problem is Reason.METRICS_MISSING
    assert snap.queues["team-c"].state == "Closed"


def test_duplicates_are_reported_and_same_name_in_other_namespace_is_distinct():
    raw = RawObjects.from_objects(
        [pytorchjob("a", "ns1"), pytorchjob("a", "ns1"), pytorchjob("a", "ns2")]
    )
    snap = build_snapshot(raw, free_gpu_states({"team-a": 2}), P.read_options())
    assert len(snap.jobs) == 2
    assert [u.reason for u in snap.unmanaged] == [Reason.DUPLICATE]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, Reason.METRICS_MISSING),
        (float("nan"), Reason.METRICS_INVALID),
        (-1, Reason.METRICS_INVALID),
        ("six", Reason.METRICS_INVALID),
    ],
)
def test_bad_free_gpu_values_hold_the_queue(value, reason):
    state = free_gpu_states({"q": value})["q"]
    assert state.free_gpus is None and state.problem is reason


def test_a_priority_class_resolves_on_records_decoded_before_it_came():
    """Jobs are decoded once, when they arrive; a PriorityClass seen later gives them
    their priority when the snapshot is assembled, as if it had been there first."""
    from dataclasses import replace

    from autoscaler.read.parse import Records, decode_job
    from autoscaler.read.records import PriorityValue

    free = free_gpu_states({"team-a": 2})
    a, b = pytorchjob("a"), pytorchjob("b")
    records = Records(jobs=(decode_job(a, P.read_options()), decode_job(b, P.read_options())))
    first = build_snapshot(records, free, P.read_options())
    assert first.jobs[0] is records.jobs[0].job  # nothing to resolve: the record itself
    assert first == build_snapshot(RawObjects.from_objects([a, b]), free, P.read_options())
    later = replace(records, priorities=(PriorityValue("x", 1, True),))
    second = build_snapshot(later, free, P.read_options())
    assert [j.priority for j in second.jobs] == [1, 1]
    assert second == build_snapshot(
        RawObjects.from_objects([a, b, priority_class("x", 1, True)]), free, P
    )


def test_cross_check_holds_a_queue_that_disagrees_with_the_api():
    from autoscaler.read.live import cross_check_free

    def q(name, deserved, allocated):
        obj = queue_obj(name)
        obj["spec"]["deserved"] = {"nvidia.com/gpu": deserved}
        obj["status"]["allocated"] = {"nvidia.com/gpu": allocated, "cpu": "10"}
        return obj

    free = free_gpu_states({"agree": 4, "near": 5, "off": 12, "no-spec": 3})
    queues = [q("agree", 8, "4"), q("near", "8", 4), q("off", 8, 4), queue_obj("no-spec")]
    out = cross_check_free(free, [decode_queue(o, P.read_options()) for o in queues])
    assert out["agree"].free_gpus == 4 and out["near"].free_gpus == 5
    assert out["no-spec"].free_gpus == 3
    assert out["off"].free_gpus is None and out["off"].problem is Reason.METRICS_INVALID
    assert "spec.deserved 8 - status.allocated 4" in out["off"].message


def test_cross_check_compares_the_allocated_metric_with_queue_status():
    from autoscaler.core.model import QueueState, VolcanoQueue
    from autoscaler.read.live import cross_check_free

    def state(name, allocated):
        return QueueState(name, None, volcano=VolcanoQueue(name, allocated=allocated))

    def q(name, allocated):
        obj = queue_obj(name)
        obj["status"]["allocated"] = {"nvidia.com/gpu": allocated}
        return obj

    free = {"agree": state("agree", 4), "near": state("near", 5), "off": state("off", 12)}
    queues = [q("agree", "4"), q("near", "4"), q("off", "4")]
    out = cross_check_free(free, [decode_queue(o, P.read_options()) for o in queues])
    assert out["agree"] is free["agree"] and out["near"] is free["near"]
    assert out["off"].problem is Reason.METRICS_INVALID
    assert "Prometheus says 12 GPUs allocated" in out["off"].message


@pytest.mark.parametrize(
    "obj",
    [b[1] for b in BAD]
    + [
        pytorchjob(),
        podgroup(),
        podgroup(owner="x", phase="Inqueue"),
        edit(pytorchjob(), "metadata.annotations", "garbage"),
        edit(pytorchjob(), "spec.pytorchReplicaSpecs.Worker.template.spec.containers", "nope"),
    ],
    ids=[b[0] for b in BAD] + ["job", "pg", "pg-owner", "ann-garbage", "containers-garbage"],
)
def test_what_a_cache_keeps_is_what_a_snapshot_file_gives(obj):
    """A watch cache decodes each object once, as it arrives, and keeps only the record:
    what it keeps plans exactly like the whole object read from a snapshot file,
    managed fields and kubectl's copy of the object notwithstanding."""
    from autoscaler.read.parse import Records, decoders

    whole = edit(obj, "metadata.managedFields", [{"manager": "kubectl", "fieldsV1": {}}])
    annotations = whole["metadata"].get("annotations")
    if isinstance(annotations, dict):  # kubectl apply's copy of the whole object
        annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{" + "x" * 5000 + "}"
    record = decoders(P.read_options())[whole["kind"]](whole)
    free = free_gpu_states({"team-a": 2})
    if whole.get("kind") == "PodGroup":
        assert record.group == parse_podgroup(whole, P.read_options(), NOPRIO)
        cached = Records(groups=(record,))
    else:
        assert record.job == parsed(whole)
        cached = Records(jobs=(record,))
    assert build_snapshot(cached, free, P.read_options()) == build_snapshot(
        RawObjects.from_objects([whole]), free, P
    )


# ---- pods per job, and when a job's workers were asked for (HoldNoPods) ------------------


def _pod(name: str, owner: str | None, *, node: str = "", phase: str = "Pending", gpus: int = 1):
    meta: dict = {"name": name, "namespace": "ml"}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": owner,
                "controller": True,
            }
        ]
    spec: dict = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }


def test_unbound_pods_count_for_their_job_and_only_bound_ones_use_nodes():
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1"},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    pods = [
        _pod("w0", "job", node="n1", phase="Running"),
        _pod("w1", "job"),  # not bound yet: it exists
        _pod("w2", "job", phase="Succeeded"),  # finished: gone
        _pod("other", None, node="n1", phase="Running", gpus=2),
    ]
    raw = RawObjects.from_objects([pytorchjob(replicas=4, active=1), node, *pods])
    s = build_snapshot(raw, free_gpu_states({"team-a": 2}), P.read_options())
    assert s.pods_by_owner == {("ml", "PyTorchJob", "job"): 2}
    no_pods = build_snapshot(
        RawObjects.from_objects([pytorchjob(replicas=4, active=1)]),
        free_gpu_states({"team-a": 2}),
        P.read_options(),
    )
    assert no_pods.pods_by_owner is None  # no pod listed: unknown, not none


def test_asked_at_is_the_latest_dated_write_to_the_job_not_its_status():
    job = pytorchjob(replicas=4, active=1)
    job["metadata"]["creationTimestamp"] = "2026-11-22T08:00:00Z"
    job["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Update", "time": "2026-11-22T09:00:00Z"},
        {
            "manager": "operator",
            "operation": "Update",
            "subresource": "status",
            "time": "2026-11-22T09:30:00Z",
        },
    ]
    parsed = parse_job(job, P.read_options(), Priorities({}))
    assert parsed.asked_at == datetime(2026, 11, 22, 9, 0, tzinfo=UTC)


# ---- a waiting gang's need: its pods, else its job's templates, else minResources ---------


def _gangs(*objects):
    s = build_snapshot(RawObjects.from_objects(objects), free_gpu_states({"team-a": 0}), P)
    return {g.ref.name: g for g in s.pending}, {g.ref.name: g.message for g in s.invalid_groups}


def test_a_gang_with_gpus_in_limits_only_is_seen_from_its_jobs_template():
    """Volcano's controller writes minResources from the template's requests: GPUs in
    limits only leave none in it. The gang's need comes from its Job's template: 3 pods
    (spec.minAvailable) of 2 GPUs."""
    job = vcjob("rigid", replicas=4, min_available=3, max_replicas=None, gpus=2, phase="Pending")
    pg = edit(podgroup("rigid-pg", owner="rigid", owner_kind="Job"), "spec.minResources", {})
    pending, _ = _gangs(job, pg)
    g = pending["rigid-pg"]
    assert (g.gpus, g.need_from) == (6, "template")
    assert [n for _, n in g.pods] == [3]


@pytest.mark.parametrize(("min_available", "gpus"), [(None, 1 + 4), (3, 1 + 2)])
def test_a_pytorchjob_gang_counts_its_master_as_the_operator_does(min_available, gpus):
    job = pytorchjob("pt", replicas=4, active=0, min_available=min_available)
    master = job["spec"]["pytorchReplicaSpecs"]["Worker"] | {"replicas": 1}
    job = edit(job, "spec.pytorchReplicaSpecs.Master", master)
    pending, _ = _gangs(job, edit(podgroup("pt", owner="pt"), "spec.minResources", {}))
    assert (pending["pt"].gpus, pending["pt"].need_from) == (gpus, "template")


def _gang_pod(name, group, *, gpus=1, node=""):
    spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "annotations": {"scheduling.k8s.io/group-name": group},
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def test_a_gangs_pods_say_its_need_once_min_member_of_them_exist():
    pg = edit(podgroup("plain", phase="Inqueue"), "spec.minResources", {})  # minMember 2
    pending, _ = _gangs(pg, _gang_pod("a", "plain", gpus=2), _gang_pod("b", "plain", gpus=2))
    assert (pending["plain"].gpus, pending["plain"].need_from) == (4, "pods")
    assert sum(n for _, n in pending["plain"].pods) == 2
    one, _ = _gangs(pg, _gang_pod("a", "plain", gpus=2))  # fewer than minMember: not yet
    assert "plain" not in one  # and nothing else says it needs GPUs: GPU-free


def test_a_gang_whose_need_cannot_be_known_is_shown_with_why():
    pg = edit(podgroup("orphan", owner="gone"), "spec.minResources", {})
    pending, invalid = _gangs(pg)
    assert "orphan" not in pending
    assert "its GPU need cannot be known" in invalid["orphan"]
    assert "PyTorchJob ml/gone is not read" in invalid["orphan"]


def test_a_gang_without_gpus_in_any_source_needs_no_room():
    pending, invalid = _gangs(podgroup("cpu", gpus=0))
    assert pending == {} and invalid == {}
