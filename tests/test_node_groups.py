"""Volcano's nodegroup plugin in node fit (issue 46): a queue's workers only on the node
groups its Queue's spec.affinity lets it use, within its per-group limits (annotation
volcano.sh/nodegroup-resource-limits), consumed as workers are placed; the bound named
in the plan; an unreadable annotation holds its queue, never a crash."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from builders import NOW, ej, gang, policy, settings

from autoscaler.core.model import (
    NODE_GROUP_LABEL,
    ClusterSnapshot,
    Node,
    NodeGroups,
    Plugin,
    QueueState,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import PodShape
from autoscaler.plan.fit import GroupFit, Placer
from autoscaler.plan.planner import plan
from autoscaler.read.parse import RawObjects, build_snapshot
from autoscaler.read.parse.queues import decode_node_groups
from autoscaler.read.snapshot_file import free_gpu_states

P = policy(growth_payoff_factor=0, cooldown_seconds=0)
G4 = (("nvidia.com/gpu", 4000),)


def node(name: str, group: str | None, used: int = 0) -> Node:
    labels = ((NODE_GROUP_LABEL, group),) if group else ()
    return Node(name, 8, used, labels=labels)


def kit(used: tuple[int, int, int, int] = (2, 0, 8, 0)) -> tuple[Node, ...]:
    """g1 = nodes 1-2, g2 = nodes 3-4 (as on the real scheduler)."""
    groups = ("g1", "g1", "g2", "g2")
    return tuple(node(f"n{i + 1}", g, u) for i, (g, u) in enumerate(zip(groups, used, strict=True)))


def snapshot(rules: dict[str, NodeGroups], jobs, nodes=None) -> ClusterSnapshot:
    nodes = kit() if nodes is None else nodes
    queues = {q: VolcanoQueue(q, allocated=0, real_capacity=32) for q in rules}
    view = VolcanoView(Plugin.CAPACITY, queues, nodes)
    states = {q: QueueState(q, None, volcano=v, node_groups=rules[q]) for q, v in queues.items()}
    return ClusterSnapshot(queues=states, jobs=tuple(jobs), volcano=view)


def targets(p):
    return {d.ref.name: (d.target, d.reason, d.message) for d in p.decisions}


def test_growth_stops_at_the_group_limit_and_overflows_to_the_others():
    """q-ng may use g1 and g2, at most 4 GPUs on g1 (2 held there): a job at 2 grows by
    2 on g1 and 8 on g2 (n3 is full): 12, where the scheduler bound 12 of 16."""
    rules = NodeGroups(
        required=frozenset({"g1", "g2"}),
        limits=(("g1", G4),),
        allocated=(("g1", (("nvidia.com/gpu", 2000),)),),
    )
    p = plan(snapshot({"q-ng": rules}, [ej("j", queue="q-ng", replicas=2, max=16)]), P, NOW)
    target, reason, message = targets(p)["j"]
    assert target == 12 and reason is Reason.SCALE_UP_IDLE_GPUS
    assert "node group g1: queue q-ng at its limit of 4 GPUs" in message


def test_a_group_at_its_limit_holds_and_says_so():
    rules = NodeGroups(required=frozenset({"g1"}), limits=(("g1", G4),), allocated=(("g1", G4),))
    p = plan(snapshot({"q-ng": rules}, [ej("j", queue="q-ng", replicas=4, max=16)]), P, NOW)
    target, reason, message = targets(p)["j"]
    assert (target, reason) == (4, Reason.NO_NODE_FITS)
    assert "node group g1: queue q-ng at its limit of 4 GPUs" in message


def test_the_limit_is_consumed_by_the_jobs_placed_before():
    rules = NodeGroups(required=frozenset({"g1"}), limits=(("g1", (("nvidia.com/gpu", 6000),)),))
    jobs = [
        ej("a", queue="q", replicas=0, min=0, max=4),
        ej("b", queue="q", replicas=0, min=0, max=4),
    ]
    p = plan(snapshot({"q": rules}, jobs), P, NOW)
    assert targets(p)["a"][0] + targets(p)["b"][0] == 6


@pytest.mark.parametrize(
    ("rules", "grows_to"),
    [
        pytest.param(NodeGroups(required=frozenset({"g2"})), 8, id="required-g2-only"),
        pytest.param(NodeGroups(preferred=frozenset({"g1"})), 14, id="preferred-is-allowed"),
        pytest.param(
            NodeGroups(required=frozenset({"g1", "g2"}), anti_required=frozenset({"g1"})),
            8,
            id="anti-required-excludes",
        ),
        pytest.param(NodeGroups(anti_preferred=frozenset({"g1"})), 14, id="anti-preferred-admits"),
        pytest.param(NodeGroups(), 0, id="strict-no-affinity-no-node"),
        pytest.param(NodeGroups(strict=False), 8, id="lenient-no-affinity-unlabelled-only"),
    ],
)
def test_which_nodes_a_queues_affinity_lets_it_use(rules, grows_to):
    nodes = (*kit((0, 2, 8, 0)), node("plain", None))
    p = plan(snapshot({"q": rules}, [ej("j", queue="q", replicas=0, min=0, max=40)], nodes), P, NOW)
    target, reason, message = targets(p)["j"]
    assert target == grows_to, message
    if grows_to == 0:
        assert reason is Reason.NO_NODE_FITS and "strict mode" in message


def test_workers_in_flight_take_their_groups_limit_first():
    """q-ng may hold 6 GPUs on g1 (its only group): 2 run there, 2 more are asked for and
    not running yet. Those 2 will take the limit when bound: another job of the queue
    grows by 2, not by the 4 the bound pods alone leave (2 would never bind)."""
    rules = NodeGroups(
        required=frozenset({"g1"}),
        limits=(("g1", (("nvidia.com/gpu", 6000),)),),
        allocated=(("g1", (("nvidia.com/gpu", 2000),)),),
    )
    jobs = [
        ej("moving", queue="q-ng", replicas=4, active=2, max=4),
        ej("j", queue="q-ng", replicas=0, min=0, max=16),
    ]
    p = plan(snapshot({"q-ng": rules}, jobs, kit((2, 0, 0, 0))), P, NOW)
    target, _, message = targets(p)["j"]
    assert target == 2, message
    assert "node group g1: queue q-ng at its limit of 6 GPUs" in message


def test_workers_in_flight_are_placed_on_their_queues_groups():
    """a (g1 only) has 2 workers in flight; b (g2 only) could take g2's last 2 idle GPUs
    (n3). Placed by best fit alone, a's would take n3 (the fullest node with room) and b
    could not grow; on a's groups they take g1's room and b grows by 2."""
    rules = {
        "a": NodeGroups(required=frozenset({"g1"})),
        "b": NodeGroups(required=frozenset({"g2"})),
    }
    jobs = [
        ej("ja", queue="a", replicas=4, active=2, max=4),
        ej("jb", queue="b", replicas=14, max=20),
    ]
    p = plan(snapshot(rules, jobs, kit((2, 0, 6, 8))), P, NOW)
    assert targets(p)["jb"][0] == 16, targets(p)["jb"][2]
    assert targets(p)["ja"][0] == 4


def _limited_snapshot(extra_on_g1: int) -> ClusterSnapshot:
    """q-ng may use g1 only, at most 4 GPUs there, and holds them: job `full` (4 workers
    on n1, min 4 - extra_on_g1); `other` (no node groups: lenient) holds 12 on n2-n3.
    A gang of 2 GPUs waits in q-ng."""
    rules = NodeGroups(required=frozenset({"g1"}), limits=(("g1", G4),), allocated=(("g1", G4),))
    full = replace(
        ej("full", queue="q-ng", replicas=4, min=4 - extra_on_g1, max=4),
        worker_nodes=("n1",) * 4,
    )
    hog = replace(
        ej("hog", queue="other", replicas=12, min=1, max=12),
        worker_nodes=("n2",) * 8 + ("n3",) * 4,
    )
    base = snapshot(
        {"q-ng": rules, "other": NodeGroups(strict=False, required=frozenset({"g1", "g2"}))},
        [full, hog],
        kit((4, 8, 4, 8)),
    )
    pod = PodShape.of_gpus(1)
    g = replace(gang("g", 2, queue="q-ng"), pods=((pod, 2),))
    return replace(base, pending=(g,))


def test_a_gang_beyond_its_groups_limits_is_not_served_by_reclaim():
    """Every GPU q-ng may hold on g1 is its jobs' minimum: no reclaim (hog's workers in
    another queue, on g1 nodes too) makes room under the limit, so none is made, and the
    gang holds no GPUs (before: `GangFits`, as n1 has idle GPUs)."""
    p = plan(_limited_snapshot(0), P, NOW)
    (g,) = p.gangs
    assert g.reason is Reason.GANG_UNCOVERABLE, g.message
    assert "node group g1: queue q-ng at its limit of 4 GPUs" in g.message
    assert "nothing is reclaimed" in g.message
    assert targets(p)["hog"][0] == 12


def test_a_gang_its_queues_own_workers_could_make_room_for_is_left_to_the_other_rules():
    """Two of q-ng's own workers on g1 may go: that could make room under the limit, so
    this rule does not refuse the gang (the reclaim itself is node fit's: not by limit)."""
    p = plan(_limited_snapshot(2), P, NOW)
    (g,) = p.gangs
    assert "beyond their limits" not in g.message


def test_group_fit_alone():
    placer = Placer(kit((0, 0, 0, 0)))
    fit = GroupFit("q", NodeGroups(required=frozenset({"g1", "g2"}), limits=(("g1", G4),)), placer)
    one = PodShape.of_gpus(1)
    assert fit.fits(one, 100) == 4 + 16 and fit.capped == ["g1"]
    assert fit.place(one, 6) == 6  # 4 on g1 (its limit), 2 on g2
    assert fit.left["g1"]["nvidia.com/gpu"] == 0 and placer.idle_gpus == 26
    assert fit.fits(one, 100) == 14


# ---- the read side --------------------------------------------------------------------


def _queue(name: str, affinity: Any = None, limits: Any = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1},
        "status": {"state": "Open"},
    }
    if affinity is not None:
        obj["spec"]["affinity"] = affinity
    if limits is not None:
        obj["metadata"]["annotations"] = {"volcano.sh/nodegroup-resource-limits": limits}
    return obj


def test_a_queues_affinity_and_limits_are_read():
    affinity = {
        "nodeGroupAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": ["g1", "g2"],
            "preferredDuringSchedulingIgnoredDuringExecution": ["g1"],
        },
        "nodeGroupAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g3"]},
    }
    limits = json.dumps({"g1": {"cpu": "100", "nvidia.com/gpu": "4"}})
    rules = decode_node_groups(_queue("q-ng", affinity, limits), "q-ng")
    assert rules is not None and not rules.error
    assert rules.required == {"g1", "g2"} and rules.anti_required == {"g3"}
    assert dict(rules.limits) == {"g1": (("cpu", 100_000), ("nvidia.com/gpu", 4000))}
    assert rules.groups() == ["g1", "g2"]
    assert decode_node_groups(_queue("plain"), "plain") is None


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        ("{not json", "is not JSON"),
        ('["g1"]', "must be a JSON object"),
        ('{"g1": 4}', "group g1 must map resource names"),
        ('{"g1": {"nvidia.com/gpu": "four"}}', "g1[nvidia.com/gpu] must be a quantity"),
    ],
)
def test_an_unreadable_annotation_holds_its_queue_with_why(raw, words):
    from builders import pytorchjob

    objects = RawObjects.from_objects(
        [
            _queue(
                "team-a",
                {"nodeGroupAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ["g1"]}},
                raw,
            ),
            pytorchjob("j", queue="team-a"),
        ]
    )
    snap = build_snapshot(objects, free_gpu_states({"team-a": 4}), settings().read_options())
    state = snap.queues["team-a"]
    assert state.problem is Reason.NO_NODE_FITS
    assert words in state.message and "volcano.sh/nodegroup-resource-limits" in state.message
    assert "Queue team-a" in state.message
    p = plan(snap, P, NOW)
    assert {d.ref.name: d.reason for d in p.decisions}["j"] is Reason.NO_NODE_FITS


def test_node_groups_off_or_unused_change_nothing():
    from builders import pytorchjob

    objects = RawObjects.from_objects([_queue("team-a"), pytorchjob("j", queue="team-a")])
    snap = build_snapshot(objects, free_gpu_states({"team-a": 4}), settings().read_options())
    assert snap.queues["team-a"].node_groups is None
    named = RawObjects.from_objects(
        [_queue("team-a", limits='{"g1": {"nvidia.com/gpu": 4}}'), pytorchjob("j", queue="team-a")]
    )
    on = build_snapshot(named, free_gpu_states({"team-a": 4}), settings().read_options())
    assert on.queues["team-a"].node_groups is not None
    off = settings(node_groups="off").read_options()
    assert (
        build_snapshot(named, free_gpu_states({"team-a": 4}), off).queues["team-a"].node_groups
        is None
    )


def test_a_queues_allocated_per_group_is_what_its_bound_pods_request_there():
    from autoscaler.core.model import ObjectRef
    from autoscaler.read.parse import Records, assemble
    from autoscaler.read.records import GroupRecord, PodUse, QueueSpec

    spec = QueueSpec("q", node_groups=NodeGroups(limits=(("g1", G4),)))
    groups = (
        GroupRecord(ObjectRef("ml", "pg-a", "PodGroup"), None, "Running", queue="q"),
        GroupRecord(ObjectRef("ml", "pg-b", "PodGroup"), None, "Running", queue="other"),
    )
    gpu = (("nvidia.com/gpu", 1000),)
    pods = (
        PodUse("n1", 1, gpu, group="ml/pg-a"),
        PodUse("n3", 1, gpu, group="ml/pg-a"),
        PodUse("n3", 1, gpu, group="ml/pg-a"),
        PodUse("", 1, gpu, group="ml/pg-a"),  # not bound: not allocated
        PodUse("n1", 1, gpu, group="ml/pg-b"),  # another queue
    )
    records = Records(groups=groups, queues=(spec,), pods=pods, nodes=kit(), pods_known=True)
    a = assemble(records)
    assert dict(a.queue_group_allocated["q"]) == {
        "g1": (("nvidia.com/gpu", 1000),),
        "g2": (("nvidia.com/gpu", 2000),),
    }


def test_plan_status_and_explain_name_the_group_at_its_limit():
    from test_status import cycle

    from autoscaler.report.render import plan_to_table
    from autoscaler.report.status.view import explain_text

    rules = NodeGroups(required=frozenset({"g1"}), limits=(("g1", G4),), allocated=(("g1", G4),))
    snap = snapshot({"q-ng": rules}, [ej("j", queue="q-ng", replicas=4, max=16)])
    words = "node group g1: queue q-ng at its limit of 4 GPUs"
    assert words in plan_to_table(plan(snap, P, NOW), verbose=True)
    doc = cycle(snap)
    (entry,) = [j for j in doc.jobs if j.name == "j"]
    assert words in explain_text(doc, entry)


def test_a_gangs_pods_fit_only_on_its_queues_groups():
    """q may use g2 only, full; g1 is idle: its gang of 4 does not fit (it would have,
    on g1's nodes), and the elastic job on g2 gives 4 workers back for it."""
    from dataclasses import replace

    from builders import gang

    rules = NodeGroups(required=frozenset({"g2"}))
    on_g2 = ("n3",) * 8 + ("n4",) * 8
    jobs = [replace(ej("el", queue="q", replicas=16, min=2, max=16), worker_nodes=on_g2)]
    pods = ((PodShape.of_gpus(1), 4),)
    pending = [replace(gang("g", 4, queue="q"), pods=pods, need_from="pods", min_member=4)]
    snap = snapshot({"q": rules}, jobs, kit((0, 0, 8, 8)))
    snap = replace(snap, pending=tuple(pending))
    p = plan(snap, P, NOW)
    (g,) = p.gangs
    assert g.reason is Reason.GANG_COVERED, g.message
    assert targets(p)["el"][:2] == (12, Reason.RECLAIM_FOR_PENDING)
