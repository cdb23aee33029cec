"""What plan() remembers between plans (by the identity of the frozen inputs a steady
cluster hands it again) never makes a plan other than a fresh one: after any earlier
plan, the plan of a snapshot equals the plan of a deep copy of it (new objects: nothing
remembered matches them)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta

from builders import NOW, ago, ej, policy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fit import fit_clusters, node
from test_fit import snap as fit_snap
from test_planner_properties import common, policies, snapshots

from autoscaler.core.model import ClusterSnapshot, ElasticJob, QueueState
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan


def _fresh(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    return copy.deepcopy(snapshot)


@st.composite
def _changed(draw: st.DrawFn, j: ElasticJob) -> ElasticJob:
    """The job as a later cycle may see it: the same object, or a new one with one of
    the fields a decision is made of changed."""
    what = draw(st.sampled_from(["same", "same", "replicas", "active", "last", "cost", "rv"]))
    if what == "replicas":
        return replace(j, replicas=draw(st.integers(j.min_replicas, j.max_replicas)))
    if what == "active":
        return replace(j, active=draw(st.integers(0, j.max_replicas + 2)))
    if what == "last":
        return replace(j, last_scale_time=ago(draw(st.integers(0, 2000))))
    if what == "cost":
        return replace(j, restart_cost_seconds=float(draw(st.integers(1, 900))))
    if what == "rv":
        return replace(j, resource_version=j.resource_version + "x")
    return j


@common
@given(snapshots(), policies, st.data())
def test_a_plan_after_another_is_the_plan_of_fresh_objects(snapshot, pol, data):
    plan(snapshot, pol, NOW)  # whatever it leaves remembered
    jobs = tuple(data.draw(_changed(j)) for j in snapshot.jobs)
    later = replace(snapshot, jobs=jobs)
    if data.draw(st.booleans()):  # the free GPUs moved
        later = replace(
            later,
            queues={
                n: replace(q, free_gpus=q.free_gpus + 3) if q.free_gpus is not None else q
                for n, q in later.queues.items()
            },
        )
    pol2 = replace(
        pol, restart_cost_seconds=data.draw(st.sampled_from([pol.restart_cost_seconds, 45.0]))
    )
    now = NOW + timedelta(seconds=data.draw(st.sampled_from([0, 1, 61, 301, 2000])))
    again = plan(later, pol2, now)
    assert again == plan(_fresh(later), pol2, now)


def test_a_decision_is_not_taken_up_when_the_default_restart_cost_changed():
    """The same job objects and outcome under another default restart cost: the
    decision carries the new cost."""
    snapshot = ClusterSnapshot(queues={"q": QueueState("q", 0)}, jobs=(ej("a"),))
    (first,) = plan(snapshot, policy(restart_cost_seconds=60), NOW).decisions
    (second,) = plan(snapshot, policy(restart_cost_seconds=120), NOW).decisions
    assert (first.restart_cost_seconds, second.restart_cost_seconds) == (60, 120)
    assert first.reason is second.reason is Reason.NO_IDLE_GPUS


def test_a_decision_follows_the_outcome_for_the_same_job_object():
    """The same job object, planned with no idle GPUs and then with some: held, then
    grown; and held again when the GPUs are gone."""
    job = ej("a", max=8, replicas=2)
    none = ClusterSnapshot(queues={"q": QueueState("q", 0)}, jobs=(job,))
    some = replace(none, queues={"q": QueueState("q", 4)})
    held = plan(none, policy(), NOW).decisions[0]
    grown = plan(some, policy(), NOW).decisions[0]
    again = plan(none, policy(), NOW).decisions[0]
    assert (held.target, held.reason) == (2, Reason.NO_IDLE_GPUS)
    assert (grown.target, grown.reason) == (6, Reason.SCALE_UP_IDLE_GPUS)
    assert again == held


def test_a_message_that_moves_with_time_is_said_anew():
    """A cooldown's message counts the seconds since the resize: each plan says its own."""
    job = ej("a", max=8, replicas=2, last=ago(10))
    snapshot = ClusterSnapshot(queues={"q": QueueState("q", 4)}, jobs=(job,))
    first = plan(snapshot, policy(cooldown_seconds=300), NOW).decisions[0]
    later = plan(snapshot, policy(cooldown_seconds=300), NOW + timedelta(seconds=5)).decisions[0]
    assert first.reason is later.reason is Reason.COOLDOWN
    assert "resized 10s ago" in first.message and "resized 15s ago" in later.message


def test_a_list_of_jobs_changed_in_place_is_planned_as_it_now_is():
    """Jobs handed over in a list (not a tuple) may change between plans while the list
    stays the same object: nothing read of the jobs is kept for it."""
    held = ej("a", max=8, replicas=2, active=2)
    jobs = [held]
    snapshot = ClusterSnapshot(queues={"q": QueueState("q", 4)}, jobs=jobs)  # type: ignore[arg-type]
    assert plan(snapshot, policy(), NOW).decisions[0].target == 6
    jobs[0] = ej("b", max=8, replicas=2, active=1)  # a worker in flight: no growth
    (d,) = plan(snapshot, policy(), NOW).decisions
    assert (d.ref.name, d.target, d.reason) == ("b", 2, Reason.IN_FLIGHT)


def test_the_same_jobs_in_a_new_tuple_with_one_job_changed_are_planned_anew():
    """A cache that changed assembles a new tuple: a job now in flight is not grown."""
    snapshot = ClusterSnapshot(queues={"q": QueueState("q", 4)}, jobs=(ej("a"), ej("b")))
    assert [d.target for d in plan(snapshot, policy(), NOW).decisions] == [6, 2]
    moved = replace(snapshot, jobs=(snapshot.jobs[0], ej("b", replicas=4, active=2)))
    # b's 2 workers in flight take 2 of the 4 idle GPUs: a grows by 2 only
    assert [(d.target, d.reason) for d in plan(moved, policy(), NOW).decisions] == [
        (4, Reason.SCALE_UP_IDLE_GPUS),
        (4, Reason.IN_FLIGHT),
    ]


@settings(max_examples=200, deadline=None)
@given(fit_clusters(), st.data())
def test_with_node_fit_a_plan_after_another_is_the_plan_of_fresh_objects(cluster, data):
    """The same with nodes: workers in flight placed on them (kept for the same nodes
    and in-flight jobs), the gangs' and the grants' room taken from them."""
    nodes, jobs = cluster
    jobs = [replace(j, active=data.draw(st.integers(0, j.replicas))) for j in jobs]
    snapshot = fit_snap(nodes, jobs)
    pol = policy(growth_policy=data.draw(st.sampled_from(["fill", "fair"])))
    fresh = plan(_fresh(snapshot), pol, NOW)
    first = plan(snapshot, pol, NOW)
    assert plan(snapshot, pol, NOW) == first == fresh  # the last: what the first kept
    later = replace(snapshot, jobs=tuple(data.draw(_changed(j)) for j in snapshot.jobs))
    view = snapshot.volcano
    assert view is not None and view.nodes is not None
    change = data.draw(st.sampled_from(["same", "added", "gone"]))  # a new tuple of nodes
    if change == "added":
        later = replace(later, volcano=replace(view, nodes=(*view.nodes, node("new"))))
    elif change == "gone":
        later = replace(later, volcano=replace(view, nodes=view.nodes[1:]))
    again = plan(later, pol, NOW)
    assert again == plan(_fresh(later), pol, NOW)
