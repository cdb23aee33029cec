"""The capacity plugin's queue tree (enableHierarchy, Queue spec.parent; issue 46).

Jobs are planned only in leaf queues; a leaf's room is bounded by every ancestor's,
shared by its descendants and consumed as the planner grants; a real capacity at the
int64 ceiling is unbounded; parents are reported as parents; a gang under a full
ancestor takes its room back from its siblings, not from cousins. A flat cluster
(no parent, or root everywhere) is planned as before."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from builders import NOW, ej, gang, policy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_headroom import kit_nodes, targets, vsnap

from autoscaler.core.model import Bound, Plugin, VolcanoQueue, VolcanoView
from autoscaler.core.reasons import Reason
from autoscaler.plan.headroom import Tree
from autoscaler.plan.planner import plan
from autoscaler.read.parse.queues import decode_queue, inherited
from autoscaler.read.prometheus.answer import PART_LABEL, parse_query_result
from autoscaler.settings import Settings

TS = NOW.timestamp()
P = policy(growth_payoff_factor=0, cooldown_seconds=0, reclaim_cooldown_seconds=0)


def tree_view(**queues: VolcanoQueue) -> VolcanoView:
    """root, dept-a (capability 16) with team-a1 and team-a2, dept-b (no capability)
    with team-b1, on 4 nodes of 8 GPUs; `queues` replace any of them."""
    base = {
        "root": VolcanoQueue("root"),
        "dept-a": VolcanoQueue("dept-a", parent="root", capability=16, real_capacity=16),
        "team-a1": VolcanoQueue("team-a1", parent="dept-a", real_capacity=16),
        "team-a2": VolcanoQueue("team-a2", parent="dept-a", real_capacity=16),
        "dept-b": VolcanoQueue("dept-b", parent="root"),
        "team-b1": VolcanoQueue("team-b1", parent="dept-b"),
    }
    base.update(queues)
    used = sum(q.allocated for q in base.values() if q.name.startswith("team"))
    per_node = [min(8, max(0, int(used) - 8 * i)) for i in range(4)]
    return VolcanoView(Plugin.CAPACITY, base, kit_nodes(used=tuple(per_node)))


def test_a_child_grows_only_into_what_its_parent_may_still_take():
    """dept-a may hold 16, team-a2 holds 10: a team-a1 job at 2 grows to 6, not 10
    (the scheduler bound 6 and left 4 Pending)."""
    view = tree_view(
        **{
            "team-a1": VolcanoQueue("team-a1", allocated=2, parent="dept-a", real_capacity=16),
            "team-a2": VolcanoQueue("team-a2", allocated=10, parent="dept-a", real_capacity=16),
        }
    )
    jobs = [ej("a1", queue="team-a1", replicas=2, max=10)]
    p = plan(vsnap(view, jobs), P, NOW)
    assert targets(p)["a1"] == (6, Reason.SCALE_UP_IDLE_GPUS)
    s = p.queues["team-a1"]
    assert s.bound is Bound.ANCESTOR and s.limits["ancestor dept-a"] == 4


def test_siblings_share_their_parents_room_as_it_is_granted():
    view = tree_view(
        **{
            "team-a1": VolcanoQueue("team-a1", allocated=2, parent="dept-a", real_capacity=16),
            "team-a2": VolcanoQueue("team-a2", allocated=2, parent="dept-a", real_capacity=16),
        }
    )
    jobs = [
        ej("a1", queue="team-a1", replicas=2, max=16),
        ej("a2", queue="team-a2", replicas=2, max=16),
    ]
    p = plan(vsnap(view, jobs), P, NOW)
    grown = targets(p)["a1"][0] + targets(p)["a2"][0]
    assert grown == 16  # never past dept-a's 16, however the two split it


def test_siblings_are_given_their_parents_room_owed_first_not_by_name():
    """Both teams at 2 under dept-a's 16, both asking for 16 more: 6 each (equal
    deserved), not 12 to the first planned."""
    view = tree_view(
        **{
            "team-a1": VolcanoQueue(
                "team-a1", allocated=2, parent="dept-a", real_capacity=16, spec_deserved=8
            ),
            "team-a2": VolcanoQueue(
                "team-a2", allocated=2, parent="dept-a", real_capacity=16, spec_deserved=8
            ),
        }
    )
    jobs = [
        ej("a1", queue="team-a1", replicas=2, max=18),
        ej("a2", queue="team-a2", replicas=2, max=18),
    ]
    p = plan(vsnap(view, jobs), P, NOW)
    assert (targets(p)["a1"][0], targets(p)["a2"][0]) == (8, 8)
    assert p.queues["team-a1"].bound is Bound.FAIR_SHARE


def test_a_top_level_queue_without_capability_grows():
    """dept-b sets no capability: its real capacity series is the int64 ceiling, read as
    unbounded (None); its leaf grows into the idle cluster."""
    view = tree_view(
        **{"team-b1": VolcanoQueue("team-b1", allocated=2, parent="dept-b", real_capacity=None)}
    )
    p = plan(vsnap(view, [ej("b1", queue="team-b1", replicas=2, max=40)]), P, NOW)
    assert targets(p)["b1"] == (32, Reason.SCALE_UP_IDLE_GPUS)


def test_parents_are_reported_as_parents_and_hold_their_jobs():
    view = tree_view()
    jobs = [ej("misplaced", queue="dept-a", replicas=2, max=4)]
    p = plan(vsnap(view, jobs), P, NOW)
    assert targets(p)["misplaced"] == (2, Reason.QUEUE_PARENT)
    for parent in ("root", "dept-a", "dept-b"):
        s = p.queues[parent]
        assert s.reason is Reason.QUEUE_PARENT and s.free_gpus is None, parent
        assert s.headroom_gpus is None and s.plugin is Plugin.CAPACITY
    assert "team-a1, team-a2" in p.queues["dept-a"].message
    assert p.queues["team-a1"].reason is None


def test_a_gang_under_a_full_parent_takes_room_back_from_its_sibling_not_a_cousin():
    """dept-a is full (team-a2 holds 12 of its 16, beyond its deserved 8; team-a1 holds
    4 of 8): team-a1's gang of 4 is served by shrinking team-a2's elastic job; team-b1's
    job, also beyond its (zero) share, is not touched: its GPUs would not make dept-a's
    room."""
    view = tree_view(
        **{
            "team-a1": VolcanoQueue(
                "team-a1", allocated=4, parent="dept-a", real_capacity=16, spec_deserved=8
            ),
            "team-a2": VolcanoQueue(
                "team-a2", allocated=12, parent="dept-a", real_capacity=16, spec_deserved=8
            ),
            "team-b1": VolcanoQueue("team-b1", allocated=8, parent="dept-b", spec_deserved=1),
        }
    )
    jobs = [
        ej("a1", queue="team-a1", replicas=4, min=4, max=4),
        ej("a2", queue="team-a2", replicas=12, min=2, max=12),
        ej("b1", queue="team-b1", replicas=8, min=1, max=8),
    ]
    pending = [gang("g", 4, queue="team-a1")]
    p = plan(vsnap(view, jobs, pending), P, NOW)
    (g,) = p.gangs
    assert g.reason is Reason.GANG_COVERED, g.message
    assert [v.name for v in g.victims] == ["a2"]
    assert targets(p)["a2"] == (8, Reason.RECLAIM_FOR_QUEUE)
    assert targets(p)["b1"][0] == 8


def test_a_sibling_already_giving_back_is_not_taken_from_again():
    """The cycle after team-a2's job was cut 12 -> 8 for team-a1's gang, its 4 pods are
    still going (allocated 12, spec 8): those GPUs are the gang's once gone, so the job
    is not cut again (measured on the real scheduler: 12 -> 8 -> 4 a second apart)."""
    view = tree_view(
        **{
            "team-a1": VolcanoQueue(
                "team-a1", allocated=4, parent="dept-a", real_capacity=16, spec_deserved=8
            ),
            "team-a2": VolcanoQueue(
                "team-a2", allocated=12, parent="dept-a", real_capacity=16, spec_deserved=8
            ),
        }
    )
    jobs = [
        ej("a1", queue="team-a1", replicas=4, min=4, max=4),
        ej("a2", queue="team-a2", replicas=8, active=12, min=2, max=12),
    ]
    p = plan(vsnap(view, jobs, [gang("g", 4, queue="team-a1")]), P, NOW)
    assert targets(p)["a2"][0] == 8
    assert p.gangs[0].reason is not Reason.GANG_COVERED


def test_an_admitted_gang_under_a_full_parent_is_still_covered_by_its_sibling():
    """The same, the gang Inqueue (its 4 GPUs in team-a1's inqueue and dept-a's): the
    leaf's own room would credit them, but dept-a is 4 over: they must be reclaimed."""
    view = tree_view(
        **{
            "team-a1": VolcanoQueue(
                "team-a1",
                allocated=4,
                inqueue=4,
                parent="dept-a",
                real_capacity=16,
                spec_deserved=8,
            ),
            "team-a2": VolcanoQueue(
                "team-a2", allocated=12, parent="dept-a", real_capacity=16, spec_deserved=8
            ),
        }
    )
    jobs = [
        ej("a1", queue="team-a1", replicas=4, min=4, max=4),
        ej("a2", queue="team-a2", replicas=12, min=2, max=12),
    ]
    pending = [replace(gang("g", 4, queue="team-a1"), phase="Inqueue")]
    p = plan(vsnap(view, jobs, pending), P, NOW)
    (g,) = p.gangs
    assert g.reason is Reason.GANG_COVERED, g.message
    assert targets(p)["a2"] == (8, Reason.RECLAIM_FOR_QUEUE)


def test_the_tree_and_its_real_capabilities():
    tree = Tree(tree_view().queues)
    assert tree.on and tree.is_parent("dept-a") and not tree.is_parent("team-a1")
    assert tree.ancestors("team-a1") == ["dept-a"] and tree.ancestors("dept-b") == []
    assert tree.leaves_under("root") == ["team-a1", "team-a2", "team-b1"]
    assert tree.real("team-a1", 32) == 16 and tree.real("team-b1", 32) == 32
    guaranteed = {
        "a": VolcanoQueue("a", parent="root", capability=16, guarantee=4),
        "a1": VolcanoQueue("a1", parent="a", guarantee=2),
        "a2": VolcanoQueue("a2", parent="a", guarantee=3),
    }
    tree = Tree(guaranteed)
    # a1: a's real (16) less its children's guarantees (5) plus its own (2)
    assert tree.real("a1", 32) == 13 and tree.top_guarantee() == 4
    # root is unbounded: another top-level queue's guarantee takes nothing from a
    tree = Tree({**guaranteed, "b": VolcanoQueue("b", parent="root", guarantee=20)})
    assert tree.real("a", 32) == 16 and tree.real("b", 32) == 32


def test_a_flat_cluster_is_no_tree():
    flat = {
        "a": VolcanoQueue("a", parent="root"),
        "b": VolcanoQueue("b"),
        "root": VolcanoQueue("root"),
    }
    assert not Tree(flat).on


# ---- the read side --------------------------------------------------------------------


def _queue(name: str, parent: str | None = None, **capability: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1}
    if parent is not None:
        spec["parent"] = parent
    if capability:
        spec["capability"] = {k.replace("_", "/"): v for k, v in capability.items()}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"state": "Open"},
    }


def test_a_child_inherits_each_dimension_its_capability_leaves_unset():
    options = Settings().read_options()
    dept = decode_queue(_queue("dept-a", "root", cpu="64", **{"nvidia.com_gpu": "16"}), options)
    team = decode_queue(_queue("team-a1", "dept-a", memory="100Gi"), options)
    assert dept is not None and team is not None and team.parent == "dept-a"
    specs = inherited([dept, team])
    child = specs[1]
    assert child.capability == 16
    assert dict(child.limits) == {"cpu": 64000, "memory": 100 * 2**30 * 1000}
    flat = [decode_queue(_queue("a", "root", cpu="8"), options), decode_queue(_queue("b"), options)]
    assert inherited(flat) is flat  # nothing to inherit without a tree


def test_a_real_capacity_at_the_int64_ceiling_is_unbounded_not_garbage():
    def series(part: str, value: float) -> dict[str, Any]:
        return {"metric": {"queue_name": "dept-b", PART_LABEL: part}, "value": [TS, repr(value)]}

    result = [
        series("allocated", 2000),
        series("allocated_time", TS),
        series("request", 2000),
        series("request_time", TS),
        series("real_capacity", 9.223372036854776e18),
    ]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    reading = parse_query_result(body, Settings().prometheus_options(), NOW)
    state = reading.queues["dept-b"]
    assert state.problem is None and state.volcano is not None
    assert state.volcano.real_capacity is None and state.volcano.allocated == 2
    # a value merely absurd is still garbage
    result[-1] = series("real_capacity", 5e15)
    reading = parse_query_result(body, Settings().prometheus_options(), NOW)
    assert reading.queues["dept-b"].problem is Reason.METRICS_INVALID


# ---- the invariant ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    capability=st.integers(0, 32),
    held=st.lists(st.integers(0, 8), min_size=1, max_size=4),
    gpw=st.sampled_from([1, 2]),
    gang_gpus=st.one_of(st.none(), st.integers(1, 6)),
)
def test_leaves_never_grow_past_their_parents_room(capability, held, gpw, gang_gpus):
    """Whatever the leaves hold and ask, what a plan grants the leaves under dept-a
    (growth and gangs served from free GPUs) never exceeds what dept-a may still take."""
    leaves = {
        f"t{i}": VolcanoQueue(f"t{i}", allocated=h, parent="dept-a") for i, h in enumerate(held)
    }
    view = tree_view(
        **{"dept-a": VolcanoQueue("dept-a", parent="root", capability=capability)},
        **leaves,
    )
    jobs = [
        ej(f"j{i}", queue=f"t{i}", replicas=h // gpw, min=0, max=16, gpw=gpw)
        for i, h in enumerate(held)
        if h % gpw == 0
    ]
    pending = [gang("g", gang_gpus, queue="t0")] if gang_gpus else []
    p = plan(vsnap(view, jobs, pending), P, NOW)
    grown = sum(
        (d.target - d.current) * (d.gpus_per_worker or 0)
        for d in p.decisions
        if d.target is not None and d.current is not None and d.target > d.current
    )
    served = sum(g.gpus for g in p.gangs if g.reason is Reason.GANG_FITS)
    assert grown + served <= max(0, capability - sum(held))


def test_only_the_capacity_plugin_inherits_capability():
    from builders import pytorchjob

    from autoscaler.read.parse import RawObjects, build_snapshot
    from autoscaler.read.snapshot_file import free_gpu_states

    objects = RawObjects.from_objects(
        [
            _queue("dept-a", "root", **{"nvidia.com_gpu": "16"}),
            _queue("team-a1", "dept-a"),
            pytorchjob("j", queue="team-a1"),
        ]
    )
    options = Settings().read_options()
    free = free_gpu_states({"team-a1": 4})
    capacity = build_snapshot(objects, free, options, plugin=Plugin.CAPACITY)
    proportion = build_snapshot(objects, free, options, plugin=Plugin.PROPORTION)
    assert capacity.queues["team-a1"].capacity_gpus == 16
    assert proportion.queues["team-a1"].capacity_gpus is None


# The capacity plugin's ancestorReclaimLevel (setting capacity_ancestor_reclaim_level):
# the nodes are full (team-a1 4, team-b1 28 of 32) with room in dept-a; team-a1's gang
# of 4 is within its deserved 8. team-b1 (deserved 8) is a cousin over its own deserved:
# at level 0 it gives back; at level >= 1 only while dept-b (its ancestor, not team-a1's)
# holds more than dept-b's deserved, each victim counted off as the plugin does.
@pytest.mark.parametrize(
    ("level", "dept_b_deserved", "covered"),
    [
        (0, 30, True),  # Volcano's default: the cousin's own deserved alone counts
        (1, 30, False),  # dept-b holds 28, not over its 30
        (1, 16, True),  # dept-b 12 over
        (1, None, True),  # dept-b has no deserved: nothing to check (an immediate victim)
        (1, 26, False),  # dept-b 2 over: 2 GPUs may go, the gang needs 4
        (1, 24, True),  # 4 over: enough
        (2, 30, False),  # no level-2 ancestor under root: level 1 still checked
    ],
)
def test_a_cousin_gives_back_as_the_ancestor_reclaim_level_lets_it(
    level: int, dept_b_deserved: float | None, covered: bool
) -> None:
    view = tree_view(
        **{
            "team-a1": VolcanoQueue(
                "team-a1", allocated=4, parent="dept-a", real_capacity=16, spec_deserved=8
            ),
            "dept-b": VolcanoQueue("dept-b", parent="root", spec_deserved=dept_b_deserved),
            "team-b1": VolcanoQueue("team-b1", allocated=28, parent="dept-b", spec_deserved=8),
        }
    )
    jobs = [
        ej("a1", queue="team-a1", replicas=4, min=4, max=4),
        ej("b1", queue="team-b1", replicas=28, min=1, max=28),
    ]
    pending = [gang("g", 4, queue="team-a1")]
    p = plan(vsnap(view, jobs, pending), replace(P, capacity_ancestor_reclaim_level=level), NOW)
    (g,) = p.gangs
    if covered:
        assert g.reason is Reason.GANG_COVERED, g.message
        assert targets(p)["b1"] == (24, Reason.RECLAIM_FOR_QUEUE)
    else:
        assert g.reason is not Reason.GANG_COVERED, g.message
        assert targets(p)["b1"][0] == 28


def test_the_ancestor_reclaim_level_is_a_setting_default_zero() -> None:
    assert Settings().planner_policy().capacity_ancestor_reclaim_level == 0
    assert (
        Settings(capacity_ancestor_reclaim_level=2).planner_policy().capacity_ancestor_reclaim_level
        == 2
    )
    with pytest.raises(ValueError, match="capacity_ancestor_reclaim_level"):
        Settings(capacity_ancestor_reclaim_level=-1)


def _second_cycle(phase: str, active: int) -> Any:
    """The cycle after team-a2's job gave 4 workers back to team-a1's gang: its spec is
    8, its workers 9-12 still terminate (active 12) or are gone from its status (active
    8), Volcano's allocated still counts them, dept-a still looks full, and the gang
    still waits."""
    a1 = VolcanoQueue(
        "team-a1",
        allocated=4,
        inqueue=4 if phase == "Inqueue" else 0,
        parent="dept-a",
        real_capacity=16,
        spec_deserved=8,
    )
    a2 = VolcanoQueue("team-a2", allocated=12, parent="dept-a", real_capacity=16, spec_deserved=8)
    view = tree_view(**{"team-a1": a1, "team-a2": a2})
    jobs = [
        ej("a1", queue="team-a1", replicas=4, min=4, max=4),
        ej("a2", queue="team-a2", replicas=8, active=active, min=2, max=12, last=NOW),
    ]
    pending = [replace(gang("g", 4, queue="team-a1"), phase=phase)]
    return vsnap(view, jobs, pending)


@pytest.mark.parametrize("active", [12, 8])
@pytest.mark.parametrize("phase", ["Pending", "Inqueue"])
def test_a_gang_given_its_share_back_is_not_given_it_twice_while_it_is_released(phase, active):
    """Rule 2 across queues: the GPUs team-a2's job is releasing (spec 8, 12 running)
    make dept-a's room for the gang they were given back to; the next cycle (reclaim
    cooldown 0) does not shrink the job again, 8 -> 4, for the same gang."""
    p = plan(_second_cycle(phase, active), P, NOW)
    (g,) = p.gangs
    assert g.reason is Reason.GANG_FITS, g.message
    assert "being released" in g.message
    assert targets(p)["a2"][0] == 8
