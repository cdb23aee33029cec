"""The status document (autoscaler/report/status/), pure: one cycle and the last document in,
the next document out. Resize states, `since`, bounds at 10k jobs, change detection,
the ConfigMap round trip, and the views `status` and `explain` print."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from builders import NOW, ago, ej, gang, policy, snap

from autoscaler.core.model import ClusterSnapshot, ObjectRef, UnmanagedJob
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan
from autoscaler.read.snapshot_file import load_snapshot_file
from autoscaler.report.status.build import WriteOutcome, build_status, changed
from autoscaler.report.status.codec import dump, from_data, to_data
from autoscaler.report.status.doc import DATA_KEY, MAX_BYTES, Cycle, ResizeState, StatusError
from autoscaler.report.status.view import explain_text, status_table
from autoscaler.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
OK = Cycle("ok")


def cycle(snapshot: ClusterSnapshot, previous=None, outcome: str | None = "applied", at=NOW, **kw):
    """Plan `snapshot` at `at`, every action written with `outcome`, and build the status."""
    p = plan(snapshot, policy(cooldown_seconds=300, cooldown_restart_cost_factor=0), at)
    writes = [
        WriteOutcome(a.ref.namespace, a.ref.name, a.ref.kind, outcome, kw.pop("message", ""))
        for a in p.actions
        if outcome is not None
    ]
    return build_status(snapshot, p, OK, previous, writes, cooldown_seconds=300, **kw)


def entry(doc, name: str):
    (found,) = [j for j in doc.jobs if j.name == name]
    return found


def test_a_resize_goes_requested_running_settled_then_leaves_the_list():
    grow = cycle(snap({"q": 2}, [ej("a", replicas=2, max=4)]))
    a = entry(grow, "a")
    assert (a.reason, a.target) == ("ScaleUpIdleGpus", 4)
    assert a.resize.state is ResizeState.REQUESTED
    assert (a.resize.from_replicas, a.resize.to_replicas, a.resize.since) == (2, 4, NOW)

    # written: spec 4, 2 workers still starting (Prometheus shows no free GPUs any more)
    later = NOW + timedelta(seconds=60)
    starting = snap({"q": 0}, [ej("a", replicas=4, active=2, max=4, last=NOW)])
    doc = cycle(starting, grow, at=later)
    assert entry(doc, "a").resize.state is ResizeState.REQUESTED

    running = snap({"q": 0}, [ej("a", replicas=4, max=4, last=NOW)])
    doc = cycle(running, doc, at=later + timedelta(seconds=60))
    assert entry(doc, "a").resize.state is ResizeState.RUNNING
    doc = cycle(running, doc, at=later + timedelta(seconds=120))
    settled = entry(doc, "a").resize
    assert settled.state is ResizeState.SETTLED and settled.since == later + timedelta(seconds=120)
    # listed as settled until the cooldown of that resize ends, then no resize state
    doc = cycle(running, doc, at=NOW + timedelta(seconds=299))
    assert entry(doc, "a").resize.state is ResizeState.SETTLED
    doc = cycle(running, doc, at=NOW + timedelta(seconds=301))
    assert entry(doc, "a").resize is None and entry(doc, "a").reason == "HoldAtMax"


def test_a_refused_write_is_rejected_with_the_apis_message_and_stays_while_it_holds():
    refused = "HTTP 403 Forbidden: admission webhook denied the request: replicas too large"
    doc = cycle(snap({"q": 2}, [ej("a", max=4)]), outcome="error", message=refused)
    r = entry(doc, "a").resize
    assert r.state is ResizeState.REJECTED and r.message == refused and r.to_replicas == 4
    assert doc.jobs[0].name == "a"  # refused jobs are listed first
    # refused again next cycle: since is kept
    again = cycle(
        snap({"q": 2}, [ej("a", max=4)]),
        doc,
        outcome="denied",
        message=refused,
        at=NOW + timedelta(minutes=2),
    )
    assert entry(again, "a").resize.since == NOW
    # the plan no longer wants it (no room now): the refusal is moot
    assert entry(cycle(snap({"q": 0}, [ej("a", max=4)]), again), "a").resize is None


@pytest.mark.parametrize(
    ("outcome", "message", "state"),
    [
        ("conflict", "HTTP 409 Conflict", ResizeState.RETRYING),
        ("throttled", "HTTP 429 Too Many Requests", ResizeState.RETRYING),
        ("error", "HTTP 503 Service Unavailable", ResizeState.RETRYING),
        ("error", "HTTP 422 Unprocessable Entity: spec.replicas: Invalid", ResizeState.REJECTED),
        ("refused", "target 9 outside [1, 4]", ResizeState.REJECTED),
        ("dry_run", "dry run: not written", ResizeState.WOULD_RESIZE),
    ],
)
def test_write_outcomes_become_resize_states(outcome, message, state):
    doc = cycle(snap({"q": 2}, [ej("a", max=4)]), outcome=outcome, message=message)
    assert entry(doc, "a").resize.state is state


def test_a_job_that_is_gone_has_no_resize_state():
    doc = cycle(snap({"q": 2}, [ej("a", max=4)]), outcome="gone")
    assert entry(doc, "a").resize is None


def test_since_is_kept_while_the_reason_stays_and_reset_when_it_changes():
    held = snap({"q": 0}, [ej("a", max=4)])
    first = cycle(held, at=NOW)
    later = cycle(held, first, at=NOW + timedelta(minutes=10))
    a = entry(later, "a")
    assert a.reason == "HoldNoIdleGpus" and a.since == NOW
    grown = cycle(snap({"q": 2}, [ej("a", max=4)]), later, at=NOW + timedelta(minutes=11))
    assert entry(grown, "a").since == NOW + timedelta(minutes=11)


def test_jobs_are_listed_most_urgent_first_and_gangs_say_what_happens_to_them():
    jobs = [
        ej("at-max", min=4, replicas=4, max=4),
        ej("cooling", replicas=2, max=4, last=ago(30)),
        ej("grows", replicas=2, max=8, queue="r"),
    ]
    doc = cycle(snap({"q": 0, "r": 2}, jobs, [gang("g", 2, queue="q")]))
    assert [j.name for j in doc.jobs] == ["grows", "cooling", "at-max"]
    (g,) = doc.gangs
    assert g.reason == "GangUncoverable" and g.since == ago(60)
    q = doc.queues["q"]
    assert q.pending_gpus == 2 and q.jobs == {"HoldAtMax": 1, "HoldCooldown": 1}


def test_ten_thousand_jobs_fit_the_bound_and_the_rest_is_counted():
    jobs = [ej(f"j{i:05d}", queue=f"q{i % 20}", replicas=4, max=4) for i in range(10_000)]
    jobs += [ej(f"held{i}", queue="q0", replicas=2, max=4) for i in range(30)]
    snapshot = snap({f"q{i}": 0 for i in range(20)}, jobs)
    doc = cycle(snapshot, max_jobs=500)
    assert len(doc.jobs) == 500
    assert all(j.name.startswith("held") for j in doc.jobs[:30])  # held before settled
    assert sum(doc.omitted_jobs.values()) == 10_030 - 500
    assert doc.omitted_jobs == {"HoldAtMax": 9_530}
    assert sum(sum(q.jobs.values()) for q in doc.queues.values()) == 10_030  # complete
    assert len(dump(doc)) < MAX_BYTES
    # the byte bound holds whatever max_jobs says
    big = cycle(snapshot, max_jobs=5000)
    assert len(dump(big)) <= MAX_BYTES and len(big.jobs) < 5000


def test_the_byte_bound_cuts_long_messages_and_lists_fewer():
    jobs = [ej(f"{'x' * 200}-{i}", replicas=2, max=4) for i in range(2000)]
    doc = cycle(snap({"q": 0}, jobs), max_jobs=5000)
    assert len(dump(doc)) <= MAX_BYTES
    assert len(doc.jobs) + sum(doc.omitted_jobs.values()) == 2000


def test_a_steady_cycle_is_not_a_change_but_a_new_reason_is():
    held = snap({"q": 0}, [ej("a", max=4)])
    first = cycle(held)
    second = cycle(held, first, at=NOW + timedelta(minutes=2))
    assert second.time != first.time and not changed(first, second)
    third = cycle(snap({"q": 2}, [ej("a", max=4)]), second)
    assert changed(second, third)
    assert changed(None, first)


def test_the_configmap_data_round_trips_and_garbage_is_named():
    example = load_snapshot_file(ROOT / "config" / "example-snapshot.yaml")
    settings = Settings()
    snapshot = example.snapshot(settings.read_options())
    doc = cycle(snapshot, at=example.now, identity="pod-1", version="1.2.3")
    data = to_data(doc)
    assert list(data) == [DATA_KEY]
    assert from_data(data, "cm") == doc
    parsed = yaml.safe_load(data[DATA_KEY])
    assert parsed["writer"] == {"mode": "live", "identity": "pod-1", "version": "1.2.3"}
    with pytest.raises(StatusError, match=r"cm: no data\.status"):
        from_data({}, "cm")
    with pytest.raises(StatusError, match=r"cm: data\.status is not JSON"):
        from_data({DATA_KEY: "a: 1\n"}, "cm")
    with pytest.raises(StatusError, match=r"cm: data\.status: schema is None"):
        from_data({DATA_KEY: '{"a": 1}'}, "cm")
    broken = data[DATA_KEY].replace('"job": "vision/', '"job": "vision-', 1)
    with pytest.raises(StatusError, match=r"jobs\[\d+\]\.job is not namespace/name"):
        from_data({DATA_KEY: broken}, "cm")


def test_every_job_of_the_example_is_explained():
    """The views: `status` lists what is not settled, `explain` says why each job of the
    example is (not) growing."""
    example = load_snapshot_file(ROOT / "config" / "example-snapshot.yaml")
    snapshot = example.snapshot(Settings().read_options())
    doc = cycle(snapshot, at=example.now)
    table = status_table(doc)
    assert "nlp/bert-pretrain" in table and "requested 8->4" in table
    assert "nlp/llama-eval" in table and "GangCoveredByReclaim" in table
    # jobs the autoscaler does not manage are not "settled": counted apart, by reason
    left_out = "settled job(s) and 5 job(s) not managed (NotElastic 2, SkipOperatorHpa 2, "
    assert left_out + "SkipPaused 1) not shown (-o wide shows them)." in table
    wide = status_table(doc, wide=True)
    assert "nlp/gpt-finetune" in wide and "HoldAtMax" in wide
    reasons = {j.name: j.reason for j in doc.jobs}
    for j in doc.jobs:
        text = explain_text(doc, j)
        assert reasons[j.name] in text and f"queue {j.queue}" in text
    bert = explain_text(doc, entry(doc, "bert-pretrain"))
    assert "It shrinks from 8 to 4" in bert and "<- takes workers from this job" in bert
    assert "It does not grow: it is at its maximum (4 workers)" in explain_text(
        doc, entry(doc, "gpt-finetune")
    )
    assert "given: 6 free GPU(s)" in explain_text(doc, entry(doc, "resnet-small"))


def test_building_the_status_of_10k_jobs_is_cheap():
    """The cycle builds the document; the writer dumps it. Both far below a cycle."""
    jobs = [ej(f"j{i:05d}", queue=f"q{i % 20}", replicas=2, max=4) for i in range(10_000)]
    snapshot = snap({f"q{i}": 0 for i in range(20)}, jobs)
    p = plan(snapshot, policy(), NOW)
    start = time.perf_counter()
    doc = build_status(snapshot, p, OK, None, max_jobs=500)
    again = build_status(snapshot, replace(p, now=NOW + timedelta(minutes=2)), OK, doc)
    elapsed = time.perf_counter() - start
    assert not changed(doc, again)
    assert elapsed < 5.0, elapsed  # measured ~0.2 s for both (docs/benchmarks.md)


def test_a_waiting_gang_is_named_by_its_job_and_explain_says_what_blocks_it():
    """A rigid job's gang shows up under its job (kind/namespace/name) in the status and
    its round trip; `explain` of the job says which gang is its own, what it needs, since
    when, and which elastic job did not give way and why; the PodGroup's name explains
    the gang alone."""
    from autoscaler.core.model import ObjectRef, UnmanagedJob
    from autoscaler.core.reasons import Reason
    from autoscaler.report.status.view import explain_gang_text, gang_of

    rigid = UnmanagedJob(ObjectRef("ml", "rigid"), "q", Reason.NOT_ELASTIC, "no elasticPolicy")
    jobs = [ej("cooling", min=1, replicas=4, max=4, last=ago(20))]
    pg = replace(gang("rigid-pg", 3, owner="rigid"), need_from="template")
    s = replace(snap({"q": 0}, jobs, [pg]), unmanaged=(rigid,))
    doc = cycle(s)
    (g,) = doc.gangs
    assert g.job == "PyTorchJob/ml/rigid" and g.need_from == "template"
    assert any(
        "ml/cooling: 3 worker(s) above its min" in b and "resized 20s ago" in b for b in g.blockers
    )
    assert from_data(to_data(doc), "cm").gangs == doc.gangs
    assert "PyTorchJob/ml/rigid" in status_table(doc)
    text = explain_text(doc, entry(doc, "rigid"))
    assert "Gang:      PodGroup ml/rigid-pg (the gang of PyTorchJob/ml/rigid) in queue q" in text
    assert "needs 3 GPU(s), read from its job's pod templates" in text
    assert f"waiting since {ago(60):%Y-%m-%dT%H:%M:%SZ} (1m)" in text
    assert "GangUncoverable" in text and "reclaim_cooldown_seconds=60" in text
    found = gang_of(doc, "ml", "rigid-pg")
    assert found is not None and "PodGroup ml/rigid-pg" in explain_gang_text(doc, found)
    # `plan` names it too, and says where its need was read
    from autoscaler.report.render import plan_to_dict, plan_to_table

    p = plan(s, policy(), NOW)
    (row,) = plan_to_dict(p)["gangs"]
    assert (row["job"], row["need_from"]) == ("PyTorchJob/ml/rigid", "template")
    assert row["blockers"] and "PyTorchJob/ml/rigid" in plan_to_table(p)


def test_status_and_explain_say_what_node_fit_bounded():
    """Raw objects, as `plan --snapshot` and the daemon read them: GKE-tainted GPU nodes
    and a PyTorchJob whose pods would not tolerate the taint (the admission plugin is off
    in this cluster): `status -o wide` and `explain` say why it does not grow in node
    fit's words, naming the taint."""
    from autoscaler.read.snapshot_file import parse_snapshot_data

    def node(name: str) -> dict:
        return {
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {
                "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
            },
            "status": {
                "allocatable": {"nvidia.com/gpu": "8", "cpu": "64", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "ml", "uid": "u", "resourceVersion": "1"},
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 8},
            "runPolicy": {"schedulingPolicy": {"queue": "q", "minAvailable": 1}},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "pytorch", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                            ]
                        }
                    },
                }
            },
        },
        "status": {"replicaStatuses": {"Worker": {"active": 2}}},
    }
    data = {"free_gpus": {"q": 16}, "objects": [node("n1"), node("n2"), job]}
    options = Settings(extended_resource_toleration=False).read_options()
    snapshot = parse_snapshot_data(data).snapshot(options)
    doc = cycle(snapshot)
    train = entry(doc, "train")
    assert train.reason == "HoldNoNodeFits"
    taint = "nvidia.com/gpu=present:NoSchedule that its workers do not tolerate"
    assert taint in status_table(doc, wide=True)
    assert taint in explain_text(doc, train)
    # with the plugin's toleration (the default), the same job grows into the 16 GPUs
    grown = cycle(parse_snapshot_data(data).snapshot(Settings().read_options()))
    assert entry(grown, "train").reason == "ScaleUpIdleGpus"


def test_a_job_changed_since_the_last_status_is_shown_as_it_now_is():
    """The jobs by ref are kept for the same tuple of jobs only: a new tuple (a cache
    changed), or a list changed in place, shows each job as it now is."""
    snapshot = snap({"q": 0}, [ej("a", replicas=2, active=2)])
    first = cycle(snapshot)
    assert entry(first, "a").active == 2
    moved = replace(snapshot, jobs=(replace(snapshot.jobs[0], active=1),))
    assert entry(cycle(moved, first), "a").active == 1
    jobs = [ej("a", replicas=2, active=2)]
    listed = replace(snapshot, jobs=jobs)
    assert entry(cycle(listed), "a").active == 2
    jobs[0] = ej("a", replicas=2, active=0)
    assert entry(cycle(listed), "a").active == 0


def test_finished_jobs_are_listed_after_every_job_that_runs_and_cut_first():
    """A cluster that keeps its finished jobs lists thousands: they must not crowd the
    running jobs out of the list, whatever their names."""
    finished = [
        UnmanagedJob(ObjectRef("ml", f"a-done-{i}"), "q", Reason.FINISHED, "job has condition")
        for i in range(40)
    ]
    jobs = [ej(f"z-run-{i}", replicas=4, max=4) for i in range(10)]
    doc = cycle(snap({"q": 0}, jobs, [], finished), max_jobs=20)
    assert [j.name for j in doc.jobs[:10]] == [f"z-run-{i}" for i in range(10)]
    assert {j.reason for j in doc.jobs[10:]} == {"SkipFinished"}
    assert doc.omitted_jobs == {"SkipFinished": 30}
    table = status_table(doc, wide=True)
    assert table.index("z-run-0") < table.index("a-done-0")


def test_messages_are_never_cut_and_the_left_out_are_counted_and_pointed_to():
    """Issue 44: the end of a message says what to do. A long message is listed whole in
    every output (the object, `status -o json|wide`, `explain`); a status that must stay
    small lists fewer jobs, each whole, and says how many it left out and how to see one."""
    tail = "; the end says what to do"
    long = "x" * 900 + tail
    unmanaged = [
        UnmanagedJob(ObjectRef("ml", f"plain{i}"), "q", Reason.NOT_ELASTIC, long) for i in range(3)
    ]
    doc = cycle(snap({"q": 0}, [ej("held", replicas=2, max=4)], unmanaged=unmanaged), max_jobs=2)
    listed = [j for j in doc.jobs if j.reason == "NotElastic"]
    assert listed and all(j.message == long for j in listed)
    assert from_data(to_data(doc), "cm").jobs == doc.jobs  # whole through the ConfigMap
    rows = [line for line in status_table(doc, wide=True).splitlines() if "ml/plain" in line]
    assert len(rows) == len(listed) and all(row.endswith(long) for row in rows)
    assert tail in explain_text(doc, listed[0])
    foot = status_table(doc)
    assert "Not listed in the status object" in foot and "2 job(s) (NotElastic 2)" in foot
    assert "`explain NAMESPACE/NAME --live` plans any one now" in foot


@pytest.mark.parametrize("fraction", [0.0, 0.4, 0.5, 0.7])
def test_one_clock_per_answer_every_ago_agrees_with_the_plans_message(fraction):
    """Issue 44: `explain` said "resized 6s ago" (the plan's message, at the cycle's now)
    and "5s ago" (its own count from a `now` cut to whole seconds) in one answer. Every
    "ago" counts from the one `now`, kept whole through the ConfigMap, and rounds alike."""
    at = NOW + timedelta(seconds=fraction)
    doc = cycle(snap({"q": 4}, [ej("a", max=4, last=ago(5))]), at=at)
    read = from_data(to_data(doc), "cm")
    assert read.time == at
    text = explain_text(read, entry(read, "a"))
    said = {int(n) for n in re.findall(r"(\d+)s ago", text)}
    assert len(said) == 1, text
    assert f"resized {said.pop()}s ago" in text
