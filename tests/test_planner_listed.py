"""Unmanaged jobs (finished ones above all: a cluster that never deletes them lists tens
of thousands) are decided once per job object and sorted once per listing
(listing._listing): the plan is the one a fresh planner makes, in the order every plan
made before (each queue's decisions by namespace, name and kind; a job's before an
unmanaged job's of the same key; unmanaged jobs of one key in the snapshot's order)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta

from builders import NOW, ago, ej, orphan, policy
from hypothesis import given
from hypothesis import strategies as st
from test_planner_properties import QUEUES, common, policies, snapshots

from autoscaler.core.model import ClusterSnapshot, Decision, ObjectRef, QueueState, UnmanagedJob
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan

# the reasons given here to unmanaged jobs: never one the planner gives a job it plans
UNMANAGED = (Reason.FINISHED, Reason.SUSPENDED, Reason.DUPLICATE)
NAMES = [f"j{i}" for i in range(6)] + [f"u{i}" for i in range(6)]  # j*: the jobs' names too


@st.composite
def unmanaged_jobs(draw: st.DrawFn) -> UnmanagedJob:
    """An unmanaged job as parse reads one: finished (its run read), suspended, or a
    duplicate; some with GPUs in flight since a time (their decision may say HoldNoPods);
    names shared with the planned jobs and with each other (ties in the order)."""
    ref = ObjectRef(draw(st.sampled_from(["ml", "zz"])), draw(st.sampled_from(NAMES)))
    reason = draw(st.sampled_from(UNMANAGED))
    gpw = draw(st.sampled_from([None, 1, 2]))
    completed = draw(st.integers(1, 5000))
    return UnmanagedJob(
        ref,
        draw(st.sampled_from(QUEUES)),
        reason,
        f"{ref}: {reason.value}",
        replicas=draw(st.one_of(st.none(), st.integers(0, 4))),
        gpus_per_worker=gpw,
        inflight_gpus=draw(st.sampled_from([0, 0, 2, 4])) if gpw else 0,
        asked_at=draw(st.one_of(st.none(), st.integers(0, 2000).map(ago))),
        queue_warning=draw(st.sampled_from(["", "", "annotation names another queue"])),
        started=ago(completed + draw(st.integers(0, 9000))),
        completed=ago(completed),
    )


@st.composite
def with_unmanaged(draw: st.DrawFn) -> ClusterSnapshot:
    snapshot = draw(snapshots())
    listed = tuple(draw(st.lists(unmanaged_jobs(), max_size=25)))
    pods = draw(st.one_of(st.none(), st.just({("ml", "PyTorchJob", "u1"): 1})))
    return replace(snapshot, unmanaged=listed, pods_by_owner=pods)


@st.composite
def _later(draw: st.DrawFn, u: UnmanagedJob) -> list[UnmanagedJob]:
    """The job as a later listing may have it: the same object, a new one with the same
    fields or another message, or gone."""
    what = draw(st.sampled_from(["same", "same", "same", "copy", "message", "gone"]))
    if what == "copy":
        return [replace(u)]
    if what == "message":
        return [replace(u, message=u.message + " again")]
    return [] if what == "gone" else [u]


@common
@given(with_unmanaged(), policies, st.data())
def test_a_plan_after_another_is_the_plan_of_fresh_objects(snapshot, pol, data):
    """After any earlier plan, the unmanaged jobs listed again (the same objects, new
    ones, some gone, some added, in a new tuple or in the same one): the plan is the
    plan of a deep copy (new objects: nothing remembered matches them)."""
    plan(snapshot, pol, NOW)
    if data.draw(st.booleans()):
        later = snapshot  # a steady cycle: the same tuple
    else:
        kept = [v for u in snapshot.unmanaged for v in data.draw(_later(u))]
        kept += data.draw(st.lists(unmanaged_jobs(), max_size=3))
        later = replace(snapshot, unmanaged=tuple(data.draw(st.permutations(kept))))
    now = NOW + timedelta(seconds=data.draw(st.sampled_from([0, 61, 2000])))
    again = plan(later, pol, now)
    assert again == plan(copy.deepcopy(later), pol, now)


def expected_report(u: UnmanagedJob) -> Decision:
    """An unmanaged job's decision where pods are not watched (no HoldNoPods note)."""
    warned = (u.queue_warning,) if u.queue_warning else ()
    return Decision(
        u.ref,
        u.queue,
        u.replicas,
        u.replicas,
        u.reason,
        u.message,
        u.min_replicas,
        u.max_replicas,
        u.gpus_per_worker,
        notes=warned,
        warnings=warned,
    )


@common
@given(with_unmanaged(), policies)
def test_each_queue_lists_its_decisions_in_key_order_jobs_first(snapshot, pol):
    """The order the plan gives, built here from the records: queues by name; in each,
    by (namespace, name, kind), a planned job's decision before an unmanaged job's of
    the same key, unmanaged jobs of one key in the snapshot's order."""
    snapshot = replace(snapshot, pods_by_owner=None)
    plan(snapshot, pol, NOW)  # whatever it leaves remembered
    got = plan(snapshot, pol, NOW).decisions
    own = [d for d in got if d.reason not in UNMANAGED]
    reports = [expected_report(u) for u in snapshot.unmanaged]
    ranked = [(d, 0, i) for i, d in enumerate(own)] + [(d, 1, i) for i, d in enumerate(reports)]
    ranked.sort(
        key=lambda x: (x[0].queue, x[0].ref.namespace, x[0].ref.name, x[0].ref.kind, *x[1:])
    )
    assert list(got) == [d for d, _, _ in ranked]


def finished(name: str, queue: str = "q", at: float = 100, run: float = 600) -> UnmanagedJob:
    ref = ObjectRef("ml", name)
    return UnmanagedJob(
        ref,
        queue,
        Reason.FINISHED,
        f"{ref}: job has condition Succeeded",
        started=ago(at + run),
        completed=ago(at),
    )


def test_thousands_of_finished_jobs_merge_with_the_planned_ones_in_name_order():
    """Planned jobs among 2,000 finished ones, listed in reverse name order, then listed
    again in a new tuple with one gone and one new: each plan lists every job once, in
    name order, and a finished job's decision is the same object from plan to plan."""
    done = [finished(f"d{i:04d}") for i in range(2000)]
    jobs = (ej("d0500x", max=8), ej("a", max=8), ej("d1999"), ej("zz"))
    snapshot = ClusterSnapshot(
        queues={"q": QueueState("q", 4)}, jobs=jobs, unmanaged=tuple(reversed(done))
    )
    first = plan(snapshot, policy(), NOW).decisions
    names = [d.ref.name for d in first]
    assert names == sorted([j.ref.name for j in jobs] + [u.ref.name for u in done])
    # a planned job first, then the unmanaged one of the same key
    assert [d.reason is Reason.FINISHED for d in first if d.ref.name == "d1999"] == [False, True]
    later = (*done[1:1500], finished("d0500y"), *done[1500:])
    second = plan(replace(snapshot, unmanaged=later), policy(), NOW).decisions
    assert [d.ref.name for d in second] == sorted(
        [j.ref.name for j in jobs] + [u.ref.name for u in later]
    )
    kept = {d.ref.name: d for d in first}
    assert all(
        d is kept[d.ref.name]
        for d in second
        if d.reason is Reason.FINISHED and d.ref.name != "d0500y"
    )


def test_an_unmanaged_job_whose_pods_never_came_is_told_so_once_the_timeout_passed():
    """The same job object, its 3 GPUs in flight since 200s, no pod: nothing said at
    first; 200s later (past no_pods_timeout_seconds, 300) HoldNoPods, with the wait
    of each plan: a decision that may change with time is not kept."""
    snapshot = ClusterSnapshot(
        queues={"q": QueueState("q", 0)},
        jobs=(ej("a"),),
        unmanaged=(finished("done"), orphan(200)),
        pods_by_owner={},
    )
    notes = [
        next(
            d
            for d in plan(snapshot, policy(), NOW + timedelta(seconds=s)).decisions
            if d.ref.name == "orphan"
        ).notes
        for s in (0, 200, 400)
    ]
    assert notes[0] == ()
    assert [n[0].split(": is its")[0] for n in notes[1:]] == [
        "HoldNoPods: no pods for 3 of its workers after 6m",
        "HoldNoPods: no pods for 3 of its workers after 10m",
    ]


def test_a_status_over_cycles_with_thousands_of_finished_jobs_is_the_one_built_anew():
    """The status of plans whose finished jobs' decisions are kept (the same objects
    cycle after cycle, then a new listing with one gone and one new, then a listing
    reassembled: a new tuple of the same jobs) is the one built without a memo, byte
    for byte (test_status_memo.Cycles)."""
    from test_status_memo import Cycles, planned

    done = tuple(finished(f"d{i:04d}", queue=("q", "p")[i % 2], at=i) for i in range(3000))
    snapshot = ClusterSnapshot(
        queues={"q": QueueState("q", 2), "p": QueueState("p", 0)},
        jobs=(ej("a", max=4), ej("d0007", max=8, queue="p"), ej("zz")),
        unmanaged=done,
    )
    later = replace(snapshot, unmanaged=(*done[:10], finished("new"), *done[11:]))
    cycles = Cycles()
    for i, s in enumerate(
        (snapshot, snapshot, later, replace(later, unmanaged=tuple(list(later.unmanaged))))
    ):
        doc = cycles.step(s, planned(s, NOW + timedelta(seconds=i)), max_jobs=50)
        listed = sum(j.reason == "SkipFinished" for j in doc.jobs)
        assert listed + doc.omitted_jobs["SkipFinished"] == 3000
