"""Each job kind resized the way its real operator runs it: the rules, as tables.

The tests named after a training-operator function (kubeflow/training-operator, v1
branch, pkg/controller.v1/...) pin what our parser and planner make of that function's
behaviour, case by case, without a cluster. The behaviour itself is run on the REAL
operator (v1.9, beside the real Volcano scheduler) in tests/test_real_operator.py, in a
test of the same upstream name; each docstring here says which, and why the table stays
(a case per input, in milliseconds, where the real operator shows one case). Volcano's
controller and webhook: tests/test_real_volcano_jobs.py. HPAs are read from a real API
server below.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
from builders import NOW, ej, gang, hpa, paddlejob, policy, pytorchjob, snap, vcjob
from fakekube import eventually
from kubeserver import ApiError, EnvTest
from promserver import fake_prometheus
from test_loop import Daemon, free_body, settings_for

from autoscaler.core.model import ElasticJob, UnmanagedJob
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan
from autoscaler.read.kinds.kubeflow import PADDLEJOB_KIND, PYTORCHJOB_KIND
from autoscaler.read.parse import (
    Priorities,
    RawObjects,
    Records,
    build_snapshot,
    decode_hpa,
    decode_job,
    hpa_targets,
    parse_job,
)
from autoscaler.read.records import HpaTarget
from autoscaler.read.snapshot_file import parse_snapshot_data
from autoscaler.settings import Settings

S = Settings()
NOPRIO = Priorities({})
OPT_IN = "elastic-autoscaler.io/paddle-elastic"


def _parse(obj: dict[str, Any]) -> ElasticJob | UnmanagedJob:
    return parse_job(obj, S.read_options(), NOPRIO)


def _no_min_available(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["spec"]["runPolicy"]["schedulingPolicy"].pop("minAvailable", None)
    return obj


# ---- pkg/controller.v1/common/job.go ReconcileJobs ----------------------------------------


@pytest.mark.parametrize(
    ("obj", "gang_grows"),
    [
        (pytorchjob(min_available=2), False),
        (pytorchjob(min_available=None), True),  # minMember := totalReplicas
        (paddlejob(min_available=1), False),
        (paddlejob(min_available=None), True),  # the same ReconcileJobs for every kind
        (vcjob(), False),  # Volcano's gang is spec.minAvailable, untouched by a resize
    ],
    ids=["pytorch-min", "pytorch-no-min", "paddle-min", "paddle-no-min", "vcjob"],
)
def test_pkg_controller_v1_common_job_go_ReconcileJobs_min_member_is_all_replicas(
    obj: dict[str, Any], gang_grows: bool
) -> None:
    """`minMember := totalReplicas` unless `runPolicy.SchedulingPolicy.MinAvailable` is set:
    growing a job without it raises its gang, and the message says what to set. On the
    real operator: test_real_operator.py::
    test_pkg_controller_v1_common_job_go_ReconcileJobs_without_min_available_stalls
    (minMember 2 -> 4 with the replicas, 2 with minAvailable); this table covers every
    kind's parse, which needs no operator."""
    job = _parse(obj)
    assert isinstance(job, ElasticJob), job
    assert bool(job.gang_grows) is gang_grows
    assert job.has_min_available is not gang_grows
    if gang_grows:
        assert "runPolicy.schedulingPolicy.minAvailable is not set" in job.gang_grows
        assert "stalls" in job.gang_grows


@pytest.mark.parametrize("free", [1, 4, 64])
def test_pkg_controller_v1_control_podgroup_control_go_DelayPodCreationDueToPodGroup_no_growth(
    free: int,
) -> None:
    """A grown gang the queue cannot admit turns the PodGroup Pending, and
    DelayPodCreationDueToPodGroup (Pending or no phase) stops ReconcileJobs before
    ReconcilePods: no pod is created or deleted. However many GPUs are free, a job
    without minAvailable is held with its own reason; with one, it grows. A planner
    table over free-GPU readings (a reading the real stack gives one of at a time); the
    real operator holding a grown gang's pods, and the daemon leaving that job alone, are
    test_real_operator.py::
    test_pkg_controller_v1_common_job_go_ReconcileJobs_without_min_available_stalls."""
    bare = _parse(pytorchjob("bare", min_available=None, replicas=1, active=1, max_replicas=8))
    gang_ok = _parse(pytorchjob("ok", min_available=1, replicas=1, active=1, max_replicas=8))
    assert isinstance(bare, ElasticJob) and isinstance(gang_ok, ElasticJob)
    p = plan(snap({"team-a": free}, [bare, gang_ok]), policy(), NOW)
    by = {d.ref.name: d for d in p.decisions}
    assert by["bare"].reason is Reason.NO_MIN_AVAILABLE
    assert by["bare"].target == 1 and not by["bare"].changed
    assert "minAvailable" in by["bare"].message
    assert by["ok"].reason is Reason.SCALE_UP_IDLE_GPUS
    assert by["ok"].target == 1 + min(free, 7)


@pytest.mark.parametrize(
    ("phase", "says"),
    [
        ("Pending", "has not admitted its gang yet"),
        ("Inqueue", "its pods are not all bound yet"),
        ("Unknown", "its pods exist but Volcano has not placed the whole gang"),
    ],
)
def test_a_job_held_for_its_own_podgroup_is_told_its_name_and_phase(phase: str, says: str) -> None:
    """What `explain` says of a job whose own PodGroup waits: which PodGroup, in which
    phase, and what that phase means for its pods (Unknown: a grown gang without
    minAvailable, its new pods made and none bound; test_real_operator.py shows it)."""
    job = replace(ej("job", replicas=4, active=2), gang_grows="no minAvailable")
    own = replace(gang("job", 4, owner="job"), phase=phase)
    (d,) = plan(snap({"q": 1}, [job], [own]), policy(), NOW).decisions
    assert d.reason is Reason.OWN_GANG_WAITING
    assert d.message.startswith(f"its own PodGroup ml/job is {phase} (4 GPU(s)): "), d.message
    assert says in d.message


def test_pkg_controller_v1_common_job_go_ReconcileJobs_shrinking_lowers_min_member() -> None:
    """Shrinking a job without minAvailable lowers minMember with its replicas: a smaller
    gang never blocks, so such a job still gives workers to a waiting gang. The planner's
    side; the real operator lowering minMember when the stalled job is shrunk back (and
    Volcano then running it) is test_real_operator.py::
    test_pkg_controller_v1_common_job_go_ReconcileJobs_without_min_available_stalls."""
    bare = replace(ej("bare", replicas=6, min=2), gang_grows="no minAvailable")
    p = plan(snap({"q": 0}, [bare], [gang("newcomer", 3)]), policy(), NOW)
    (d,) = p.decisions
    assert (d.reason, d.target) == (Reason.RECLAIM_FOR_PENDING, 3)


def test_grow_without_min_available_is_the_setting_that_grows_them_anyway() -> None:
    """For clusters whose scheduler does not enforce the PodGroup: growth, with the note
    that says what it raises."""
    bare = replace(ej("bare", replicas=2, max=6), gang_grows="no minAvailable")
    held = plan(snap({"q": 4}, [bare]), policy(), NOW)
    assert held.decisions[0].reason is Reason.NO_MIN_AVAILABLE
    grown = plan(snap({"q": 4}, [bare]), policy(grow_without_min_available=True), NOW)
    (d,) = grown.decisions
    assert (d.reason, d.target) == (Reason.SCALE_UP_IDLE_GPUS, 6)
    assert any("minAvailable" in n for n in d.notes)
    assert S.planner_policy().grow_without_min_available is False  # off by default


def test_a_job_at_max_without_min_available_says_at_max() -> None:
    bare = replace(ej("bare", replicas=8, max=8), gang_grows="no minAvailable")
    assert plan(snap({"q": 4}, [bare]), policy(), NOW).decisions[0].reason is Reason.AT_MAX


# ---- pkg/controller.v1/paddlepaddle/envvar.go setPodEnv -----------------------------------


@pytest.mark.parametrize(
    ("annotations", "elastic", "reason", "says"),
    [
        ({}, True, Reason.NOT_ELASTIC, "PADDLE_NNODES = the total replicas"),
        ({OPT_IN: "true"}, True, None, ""),
        ({OPT_IN: " True "}, True, None, ""),
        ({OPT_IN: "false"}, True, Reason.NOT_ELASTIC, "does not run Paddle's elastic launcher"),
        ({OPT_IN: "yes"}, True, Reason.INVALID_ANNOTATION, f"metadata.annotations[{OPT_IN}]"),
        ({OPT_IN: "true"}, False, Reason.NOT_ELASTIC, "spec.elasticPolicy is not set"),
    ],
    ids=["no-opt-in", "opt-in", "opt-in-spaced", "opted-out", "not-a-bool", "no-elastic-policy"],
)
def test_pkg_controller_v1_paddlepaddle_envvar_go_setPodEnv_fixes_PADDLE_NNODES(
    annotations: dict[str, str], elastic: bool, reason: Reason | None, says: str
) -> None:
    """setPodEnv gives every pod PADDLE_NNODES = getTotalReplicas(job) when it is created:
    a resized PaddleJob's new workers disagree with the old ones unless the job runs
    Paddle's elastic launcher, which only the job can say (our annotation). The
    annotation's parse, value by value; the real operator writing PADDLE_NNODES 1 then
    3, 3 on a PaddleJob grown 1 -> 3, and the daemon leaving one without the opt-in
    alone, are test_real_operator.py::
    test_pkg_controller_v1_paddlepaddle_envvar_go_setPodEnv_a_paddlejob_needs_the_opt_in."""
    obj = paddlejob(elastic_launcher=False, annotations=annotations)
    if not elastic:
        del obj["spec"]["elasticPolicy"]
    job = _parse(obj)
    if reason is None:
        assert isinstance(job, ElasticJob), job
        assert (job.min_replicas, job.max_replicas) == (1, 4)
    else:
        assert isinstance(job, UnmanagedJob), job
        assert job.reason is reason and says in job.message, job.message
        assert job.replicas == 2  # its GPUs still count in the queue


def test_pkg_controller_v1_paddlepaddle_paddlepaddle_controller_go_Reconcile_makes_no_hpa() -> None:
    """The PaddleJob controller never calls ReconcileHPA: elasticPolicy.metrics makes no
    HPA there, so it does not take the job from us (a real HPA would, see below). On the
    real operator (a PaddleJob with metrics gets no HPA): test_real_operator.py::
    test_pkg_controller_v1_paddlepaddle_envvar_go_setPodEnv_a_paddlejob_needs_the_opt_in."""
    obj = paddlejob()
    obj["spec"]["elasticPolicy"]["metrics"] = [{"type": "Resource"}]
    assert isinstance(_parse(obj), ElasticJob)
    torch = pytorchjob()
    torch["spec"]["elasticPolicy"]["metrics"] = [{"type": "Resource"}]
    skipped = _parse(torch)
    assert isinstance(skipped, UnmanagedJob) and skipped.reason is Reason.OPERATOR_HPA
    assert PADDLEJOB_KIND is not PYTORCHJOB_KIND


# ---- pkg/controller.v1/pytorch/hpa.go ReconcileHPA / desiredHPA ---------------------------

# desiredHPA writes the target as kind and name only (no apiVersion); today's API server
# refuses that on create (the test below), but a stored or hand-written one may lack it
OPERATOR_HPA = hpa("job", target="job", api_version=None)


@pytest.mark.parametrize(
    ("hpas", "skipped"),
    [
        ([], False),
        ([OPERATOR_HPA], True),
        ([hpa("mine", target="job")], True),  # a user's own, with apiVersion
        ([hpa("mine", target="job", api_version="kubeflow.org/v2")], True),  # any version
        ([hpa("other-ns", "team", target="job")], False),
        ([hpa("other-name", target="job-2")], False),
        ([hpa("other-kind", target="job", kind="PaddleJob")], False),
        ([hpa("deploy", target="job", kind="Deployment", api_version="apps/v1")], False),
        ([hpa("b", target="job"), hpa("a", target="job", api_version=None)], True),
    ],
    ids=[
        "none",
        "operator-made",
        "users-own",
        "other-version",
        "other-namespace",
        "other-name",
        "other-kind",
        "a-deployment",
        "two",
    ],
)
def test_pkg_controller_v1_pytorch_hpa_go_ReconcileHPA_leaves_its_hpa_behind(
    hpas: list[dict[str, Any]], skipped: bool
) -> None:
    """ReconcileHPA returns early once elasticPolicy.metrics is nil, deleting nothing: the
    HPA it made outlives the field (and users make their own). Any HPA scaling the job
    takes it out of our hands, named in the message. Which HPAs match, case by case (a
    stored one without apiVersion the API server no longer accepts, so only a table has
    it); the real operator leaving its HPA when metrics go, and the daemon leaving the job
    alone until it is deleted, is test_real_operator.py::
    test_pkg_controller_v1_pytorch_hpa_go_ReconcileHPA_leaves_its_hpa_when_metrics_go."""
    job = pytorchjob("job")  # no metrics
    snapshot = build_snapshot(RawObjects(jobs=(job,), hpas=tuple(hpas)), {}, S.read_options())
    if not skipped:
        assert [j.ref.name for j in snapshot.jobs] == ["job"]
        return
    (u,) = snapshot.unmanaged
    assert u.reason is Reason.OPERATOR_HPA
    for h in hpas:
        assert f"ml/{h['metadata']['name']}" in u.message
    assert (u.min_replicas, u.max_replicas, u.replicas, u.gpus_per_worker) == (1, 4, 2, 1)
    p = plan(snapshot, policy(), NOW)
    assert p.actions == () and p.decisions[0].reason is Reason.OPERATOR_HPA


def test_an_hpa_of_a_volcano_job_is_matched_by_its_api_group() -> None:
    vc = vcjob("vc")
    mine = hpa("h", target="vc", kind="Job", api_version="batch.volcano.sh/v1alpha1")
    batch = hpa("k8s", target="vc", kind="Job", api_version="batch/v1")  # not a Volcano Job
    assert hpa_targets([mine, batch]) == {("ml", "Job", "vc"): ["h"]}
    snapshot = build_snapshot(RawObjects(jobs=(vc,), hpas=(batch,)), {}, S.read_options())
    assert [j.ref.name for j in snapshot.jobs] == ["vc"]


def test_an_hpa_does_not_hide_why_a_job_is_not_managed_anyway() -> None:
    """Finished, invalid or not-elastic jobs keep their own reason: the HPA matters only
    for a job we would resize."""
    done = pytorchjob("job", conditions=[{"type": "Succeeded", "status": "True"}])
    snapshot = build_snapshot(RawObjects(jobs=(done,), hpas=(OPERATOR_HPA,)), {}, S.read_options())
    assert snapshot.unmanaged[0].reason is Reason.FINISHED


def test_an_hpa_that_appears_later_is_seen_though_the_job_did_not_change() -> None:
    """A job is decoded once, when it arrives; an HPA comes and goes on its own, and
    is resolved against the job's record when the snapshot is assembled."""
    record = decode_job(pytorchjob("job"), S.read_options())
    first = build_snapshot(Records(jobs=(record,)), {}, S.read_options())
    assert [j.ref.name for j in first.jobs] == ["job"]
    hpas = (decode_hpa(OPERATOR_HPA),)
    second = build_snapshot(Records(jobs=(record,), hpas=hpas), {}, S.read_options())
    assert second.jobs == () and second.unmanaged[0].reason is Reason.OPERATOR_HPA
    third = build_snapshot(Records(jobs=(record,)), {}, S.read_options())
    assert [j.ref.name for j in third.jobs] == ["job"]


def test_an_hpa_is_kept_as_whom_it_scales_and_nothing_of_how() -> None:
    full = hpa("h", target="job")
    full["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    assert decode_hpa(full) == HpaTarget("ml", "h", ("ml", "PyTorchJob", "job"))
    batch = hpa("k8s", target="vc", kind="Job", api_version="batch/v1")
    assert decode_hpa(batch) == HpaTarget("ml", "k8s", None)  # scales nothing of ours


def test_a_snapshot_file_takes_hpas_and_bad_ones_are_ignored() -> None:
    data = {
        "free_gpus": {"team-a": 8},
        "objects": [
            pytorchjob("job"),
            {"kind": "List", "items": [OPERATOR_HPA]},
            {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"},  # no metadata
            {**hpa("bad"), "spec": {"scaleTargetRef": "job"}},
        ],
    }
    loaded = parse_snapshot_data(data)
    assert len(loaded.raw.hpas) == 3
    snapshot = loaded.snapshot(S.read_options())
    assert snapshot.unmanaged[0].reason is Reason.OPERATOR_HPA
    assert plan(snapshot, policy(), NOW).actions == ()


# ---- the watch: a real API server's HPAs ---------------------------------------------------


@pytest.mark.timeout(60)
async def test_a_job_an_hpa_scales_on_a_real_api_server_is_left_alone_until_it_goes(
    envtest: EnvTest, real_ns: str
) -> None:
    """autoscaling/v2 HPAs listed and watched from a real kube-apiserver: while one scales
    the job, cycles write nothing; once it is deleted, the job grows."""
    ns = real_ns
    job = pytorchjob("job", ns, queue="team-a", replicas=1, active=1, max_replicas=4)
    status = job.pop("status")
    job["metadata"] = {"name": "job", "namespace": ns}
    envtest.create(job)
    envtest.patch_status(job, status)
    made = hpa("job", ns, target="job", api_version=None)
    made["metadata"] = {"name": "job", "namespace": ns}
    with pytest.raises(ApiError, match="apiVersion must specify API group"):
        envtest.create(made)
    made["spec"]["scaleTargetRef"]["apiVersion"] = "kubeflow.org/v1"
    envtest.create(made)
    async with (
        fake_prometheus(free_body(**{"team-a": 3})) as prom,
        Daemon(envtest, settings_for(prom.url, namespaces=[ns])) as d,  # type: ignore[arg-type]
    ):
        await d.seen("PyTorchJob", "job")
        held = await d.controller.run_once(NOW)
        assert held.result == "ok", held.message
        (decision,) = held.plan.decisions
        assert decision.reason is Reason.OPERATOR_HPA
        assert f"HorizontalPodAutoscaler {ns}/job" in decision.message
        assert held.plan.actions == ()
        assert envtest.get(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1

        envtest.delete(made)

        def gone() -> bool:
            return not d.kube.objects().hpas

        await eventually(gone, message="the HPA's deletion in the cache")
        grown = await d.controller.run_once(NOW)
        assert [(a.ref.name, a.target) for a in grown.plan.actions] == [("job", 4)]
    assert envtest.get(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4


# ---- Volcano's job controller: the Pending line ------------------------------------------


def _observed(pending: int, min_available: int, replicas: int = 6) -> dict[str, Any]:
    """A Volcano Job as the real controller left it (tests/test_real_volcano_jobs.py):
    4 workers running, `pending` Pending, spec.minAvailable `min_available`."""
    obj = vcjob(replicas=replicas, running=4, min_available=min_available, max_replicas=8)
    obj["status"]["pending"] = pending
    return obj


@pytest.mark.parametrize(
    ("pending", "min_available", "blocked"),
    [
        (0, 2, False),
        (2, 2, False),  # 2 Pending <= 6 - 2: the controller keeps it Running
        (2, 4, False),  # the line itself: 2 <= 6 - 4
        (2, 5, True),  # 2 > 6 - 5: observed flipping to phase Pending
    ],
)
def test_volcano_job_controller_pending_line_holds_growth(
    pending: int, min_available: int, blocked: bool
) -> None:
    """Volcano's job controller turns a Job whose Pending pods outnumber replicas -
    minAvailable to phase Pending. A grow step adds as many replicas as Pending pods, so
    it never crosses the line itself; a Job over it already is not grown."""
    job = _parse(_observed(pending, min_available))
    assert isinstance(job, ElasticJob), job
    assert bool(job.grow_blocked) is blocked
    job = replace(job, active=job.replicas)  # only the line holds it, not in-flight workers
    p = plan(snap({"team-a": 8}, [job]), policy(), NOW)
    (d,) = p.decisions
    if blocked:
        assert (d.reason, d.target) == (Reason.IN_FLIGHT, 6)
        assert "replicas - minAvailable" in d.message
    else:
        assert (d.reason, d.target) == (Reason.SCALE_UP_IDLE_GPUS, 8)
