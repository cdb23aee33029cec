"""Headroom: what the real Volcano scheduler binds, per plugin (docs/design.md "Headroom").

Tables for the water-fill (following the proportion plugin's OnSessionOpen loop), each
plugin's limit, node fit, and the planner sharing the cluster's idle GPUs between queues;
a hypothesis property that no plan asks for more than the scheduler can bind."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest
from builders import NOW, ej, gang, policy
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.model import (
    Bound,
    ClusterSnapshot,
    NodeGpus,
    ObjectRef,
    Plugin,
    QueueState,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import PodShape
from autoscaler.plan.fit import Placer
from autoscaler.plan.headroom import plugin_limit, real_capability, water_fill
from autoscaler.plan.planner import plan

INF = math.inf


def nodes(*idle_alloc: tuple[int, int]) -> tuple[NodeGpus, ...]:
    """(allocatable, used) per node."""
    return tuple(NodeGpus(f"n{i}", a, u) for i, (a, u) in enumerate(idle_alloc))


def kit_nodes(count: int = 4, gpus: int = 8, used: tuple[int, ...] = ()) -> tuple[NodeGpus, ...]:
    return tuple(
        NodeGpus(f"gpu-node-{i + 1}", gpus, used[i] if i < len(used) else 0) for i in range(count)
    )


# ---- proportion's water-fill ------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "rows", "expected"),
    [
        pytest.param(32, [("a", 1, INF, INF, 0)], {"a": 32}, id="one-queue-takes-all"),
        pytest.param(
            32,
            [("a", 1, INF, INF, 0), ("b", 1, 2, INF, 0)],
            {"a": 30, "b": 2},
            id="capped-by-request",
        ),
        pytest.param(
            32, [("a", 1, INF, INF, 0), ("b", 3, INF, INF, 0)], {"a": 8, "b": 24}, id="by-weight"
        ),
        pytest.param(32, [("a", 1, INF, 10, 0)], {"a": 10}, id="capped-by-real-capability"),
        pytest.param(
            32, [("a", 1, INF, INF, 0), ("b", 1, 2, INF, 8)], {"a": 24, "b": 8}, id="guarantee"
        ),
        pytest.param(
            32,
            [("a", 1, INF, INF, 0), ("b", 1, 30, INF, 0), ("c", 2, 4, INF, 0)],
            {"a": 14, "b": 14, "c": 4},
            id="leftover-refilled",
        ),
        pytest.param(0, [("a", 1, INF, INF, 0)], {"a": 0}, id="empty-cluster"),
    ],
)
def test_water_fill_follows_the_proportion_plugin(total, rows, expected):
    got = water_fill(total, rows)
    assert got == pytest.approx(expected, abs=1e-3)


def test_real_capability_leaves_out_other_queues_guarantees():
    q = VolcanoQueue("a", guarantee=4)
    assert real_capability(q, 32, total_guarantee=14) == 22  # 32 - 14 + 4
    assert real_capability(replace(q, capability=10), 32, 14) == 10


# ---- each plugin's limit -----------------------------------------------------------------


def test_proportion_room_is_the_share_if_it_asked_for_more_not_deserved_minus_allocated():
    # the real scheduler's answer with 2 of 32 GPUs in use: deserved == allocated == 2
    view = VolcanoView(
        Plugin.PROPORTION,
        {"default": VolcanoQueue("default", allocated=2, request=2, deserved=2)},
        kit_nodes(used=(1, 1)),
    )
    limit = plugin_limit("default", view, {})
    assert limit is not None
    assert limit.gpus == pytest.approx(30)
    assert limit.bound is Bound.SHARE
    assert limit.figures["share"] == pytest.approx(32)


def test_proportion_other_queue_keeps_what_it_asks_for_this_cycle():
    view = VolcanoView(
        Plugin.PROPORTION,
        {
            "a": VolcanoQueue("a", allocated=2, request=2),
            "b": VolcanoQueue("b", allocated=2, request=2),
        },
        kit_nodes(),
    )
    # b alone asks for nothing more: a may take all but b's 2
    assert plugin_limit("a", view, {}).gpus == pytest.approx(28)  # type: ignore[union-attr]
    # both can grow by 28: each is held to its weighted half, as the scheduler will give
    wanted = {"a": 28.0, "b": 28.0}
    assert plugin_limit("a", view, wanted).gpus == pytest.approx(14)  # type: ignore[union-attr]
    assert plugin_limit("b", view, wanted).gpus == pytest.approx(14)  # type: ignore[union-attr]


def test_proportion_capability_bounds_and_says_so():
    view = VolcanoView(
        Plugin.PROPORTION,
        {"a": VolcanoQueue("a", allocated=2, request=2, capability=6)},
        kit_nodes(),
    )
    limit = plugin_limit("a", view, {})
    assert limit is not None and limit.gpus == pytest.approx(4) and limit.bound is Bound.CAPABILITY


def test_proportion_without_nodes_cannot_be_known():
    view = VolcanoView(Plugin.PROPORTION, {"a": VolcanoQueue("a", allocated=2, request=2)})
    assert plugin_limit("a", view, {}) is None


def test_queue_without_jobs_takes_no_share_but_its_guarantee_counts():
    view = VolcanoView(
        Plugin.PROPORTION,
        {"a": VolcanoQueue("a", allocated=2, request=2), "idle": VolcanoQueue("idle", guarantee=8)},
        kit_nodes(),
    )
    # realCapability of a = 32 - 8; the idle queue is left out of the water-fill
    assert plugin_limit("a", view, {}).gpus == pytest.approx(22)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("queue", "expected", "bound"),
    [
        pytest.param(
            VolcanoQueue("a", allocated=4, inqueue=6, real_capacity=20),
            10,
            Bound.REAL_CAPACITY,
            id="real-capacity-series",
        ),
        pytest.param(
            VolcanoQueue("a", allocated=4, capability=12), 8, Bound.CAPABILITY, id="computed"
        ),
        pytest.param(
            VolcanoQueue("a", allocated=30, real_capacity=20), -10, Bound.REAL_CAPACITY, id="over"
        ),
    ],
)
def test_capacity_room_is_real_capacity_minus_allocated_minus_inqueue(queue, expected, bound):
    view = VolcanoView(Plugin.CAPACITY, {"a": queue}, kit_nodes())
    limit = plugin_limit("a", view, {})
    assert limit is not None and limit.gpus == pytest.approx(expected) and limit.bound is bound


# ---- node fit ----------------------------------------------------------------------------


def g(n: int) -> PodShape:
    return PodShape.of_gpus(n)


def test_placer_best_fit_keeps_whole_nodes_for_large_workers():
    pool = Placer(nodes((8, 6), (8, 0)))  # 2 and 8 idle
    assert pool.fits(g(2)) == 5 and pool.fits(g(8)) == 1 and pool.fits(g(4), limit=1) == 1
    assert pool.place(g(2), 1) == 1  # into the node with 2 idle, not the empty one
    assert pool.fits(g(8)) == 1
    assert pool.place(g(4), 3) == 2 and pool.idle_gpus == 0


def test_placer_ignores_unschedulable_nodes_and_gangs_take_the_emptiest_first():
    pool = Placer((NodeGpus("not-ready", 8, 0, schedulable=False), *nodes((8, 4), (8, 0))))
    assert pool.idle_gpus == 12
    pool.take_gpus(8)
    assert pool.fits(g(8)) == 0 and pool.idle_gpus == 4


# ---- the planner on the view -------------------------------------------------------------


def vsnap(view: VolcanoView, jobs=(), pending=(), **states) -> ClusterSnapshot:
    queues = {q: QueueState(q, None, volcano=vq) for q, vq in view.queues.items()}
    queues.update(states)
    return ClusterSnapshot(queues=queues, jobs=tuple(jobs), pending=tuple(pending), volcano=view)


def targets(p):
    return {d.ref.name: (d.target, d.reason) for d in p.decisions}


def test_plan_grows_into_the_idle_cluster_and_says_what_bounded_it():
    view = VolcanoView(
        Plugin.PROPORTION,
        {"q": VolcanoQueue("q", allocated=2, request=2, deserved=2)},
        kit_nodes(used=(1, 1)),
    )
    p = plan(vsnap(view, [ej("a", min=1, max=40, replicas=2)]), policy(), NOW)
    assert targets(p)["a"] == (32, Reason.SCALE_UP_IDLE_GPUS)
    s = p.queues["q"]
    assert s.headroom_gpus == 30 and s.bound is Bound.CLUSTER_IDLE and s.plugin is Plugin.PROPORTION
    assert s.limits == {"share": pytest.approx(30), "cluster-idle": 30}
    assert s.inputs["share"] == pytest.approx(32) and s.inputs["allocated"] == 2


def test_two_queues_of_equal_weight_split_the_idle_cluster():
    view = VolcanoView(
        Plugin.PROPORTION,
        {
            "a": VolcanoQueue("a", allocated=2, request=2),
            "b": VolcanoQueue("b", allocated=2, request=2),
        },
        kit_nodes(used=(2, 2)),
    )
    jobs = [ej("ja", queue="a", max=30), ej("jb", queue="b", max=30)]
    p = plan(vsnap(view, jobs), policy(), NOW)
    assert targets(p) == {
        "ja": (16, Reason.SCALE_UP_IDLE_GPUS),
        "jb": (16, Reason.SCALE_UP_IDLE_GPUS),
    }


def test_capacity_best_effort_queues_share_idle_gpus_by_weight_not_by_name():
    """Neither queue sets deserved: the 16 idle GPUs are split by weight (both 1), not
    taken by the first queue planned (it got 12 and the second 4 before)."""
    view = VolcanoView(
        Plugin.CAPACITY,
        {
            "a": VolcanoQueue("a", allocated=0, real_capacity=32),
            "b": VolcanoQueue("b", allocated=0, real_capacity=32),
        },
        nodes((8, 0), (8, 0)),
    )
    jobs = [ej("ja", queue="a", replicas=0, min=0, max=12), ej("jb", queue="b", min=0, replicas=0)]
    p = plan(vsnap(view, jobs), policy(), NOW)
    assert targets(p)["ja"] == (8, Reason.SCALE_UP_IDLE_GPUS)
    assert targets(p)["jb"] == (8, Reason.SCALE_UP_IDLE_GPUS)
    assert p.queues["a"].bound is Bound.FAIR_SHARE


def test_worker_larger_than_any_node_hole_is_held_for_node_fit():
    view = VolcanoView(
        Plugin.PROPORTION,
        {"q": VolcanoQueue("q", allocated=4, request=4)},
        nodes((8, 6), (8, 6), (8, 6), (8, 6)),  # 8 idle GPUs, 2 per node
    )
    p = plan(vsnap(view, [ej("big", gpw=4, replicas=1, max=4)]), policy(), NOW)
    assert targets(p)["big"] == (1, Reason.NO_NODE_FITS)
    assert p.queues["q"].bound is Bound.NODE_FIT
    # a 2-GPU job in the same queue fits in those holes
    p = plan(
        vsnap(view, [ej("big", gpw=4, replicas=1, max=4), ej("small", gpw=2, replicas=0, min=0)]),
        policy(),
        NOW,
    )
    assert targets(p)["small"] == (4, Reason.SCALE_UP_IDLE_GPUS)


def test_inflight_workers_take_node_room_first():
    view = VolcanoView(
        Plugin.PROPORTION, {"q": VolcanoQueue("q", allocated=2, request=4)}, nodes((4, 2))
    )
    jobs = [ej("a", replicas=4, active=2, max=8), ej("b", replicas=1, max=4)]
    p = plan(vsnap(view, jobs), policy(), NOW)
    assert targets(p)["a"] == (4, Reason.IN_FLIGHT)
    assert targets(p)["b"][0] == 1  # the 2 idle GPUs are promised to a's workers


def test_capacity_admitted_gang_is_not_counted_twice():
    # an Inqueue gang of 4 is already in `inqueue`: the room left (4) is for growth
    view = VolcanoView(
        Plugin.CAPACITY,
        {"q": VolcanoQueue("q", allocated=8, inqueue=4, real_capacity=16)},
        kit_nodes(),
    )
    g = replace(gang("g", 4), phase="Inqueue")
    p = plan(vsnap(view, [ej("a", replicas=2, max=16)], [g]), policy(), NOW)
    assert {x.ref.name: x.reason for x in p.gangs} == {"g": Reason.GANG_FITS}
    assert targets(p)["a"] == (6, Reason.SCALE_UP_IDLE_GPUS)


def test_capacity_gang_admitted_against_elastic_workers_still_gets_them_reclaimed():
    # measured on the real scheduler: a gang of 8 is enqueued (Inqueue) into a queue whose
    # elastic job holds 28 of 32, because Volcano counts elastic workers as reclaimable;
    # inqueue (8) then exceeds real capacity - allocated (4): 4 must still be reclaimed
    view = VolcanoView(
        Plugin.CAPACITY,
        {"q": VolcanoQueue("q", allocated=28, request=36, inqueue=8, real_capacity=32)},
        kit_nodes(used=(8, 8, 8, 4)),
    )
    g = replace(gang("g", 8), phase="Inqueue")
    p = plan(vsnap(view, [ej("elastic", min=4, max=28, replicas=28)], [g]), policy(), NOW)
    assert targets(p)["elastic"] == (24, Reason.RECLAIM_FOR_PENDING)
    assert p.gangs[0].reason is Reason.GANG_COVERED


def test_pending_gang_reclaims_when_the_share_is_used():
    view = VolcanoView(
        Plugin.PROPORTION,
        {"q": VolcanoQueue("q", allocated=8, request=8, capability=8)},
        kit_nodes(1, 8, used=(8,)),
    )
    p = plan(vsnap(view, [ej("a", min=2, max=8, replicas=8)], [gang("g", 4)]), policy(), NOW)
    assert targets(p)["a"] == (4, Reason.RECLAIM_FOR_PENDING)
    assert p.gangs[0].reason is Reason.GANG_COVERED


def test_queue_without_its_inputs_holds_with_the_reason():
    view = VolcanoView(Plugin.PROPORTION, {"q": VolcanoQueue("q", allocated=2, request=2)})
    p = plan(vsnap(view, [ej("a")]), policy(), NOW)
    assert targets(p)["a"] == (2, Reason.METRICS_MISSING)
    assert "cannot be computed" in p.decisions[0].message


def test_given_free_gpus_are_still_bound_by_nodes():
    view = VolcanoView(Plugin.GIVEN, {}, nodes((8, 7)))
    p = plan(vsnap(view, [ej("a", max=8)], q=QueueState("q", 10)), policy(), NOW)
    assert targets(p)["a"] == (3, Reason.SCALE_UP_IDLE_GPUS)
    assert p.queues["q"].bound is Bound.CLUSTER_IDLE


# ---- property: nothing asked for that the scheduler cannot bind --------------------------

queue_names = st.sampled_from(["a", "b", "c"])


@st.composite
def clusters(draw):
    node_list = tuple(
        NodeGpus(f"n{i}", a, draw(st.integers(0, a)), draw(st.booleans()) or i == 0)
        for i, a in enumerate(draw(st.lists(st.sampled_from([4, 8]), min_size=1, max_size=5)))
    )
    plugin = draw(st.sampled_from([Plugin.PROPORTION, Plugin.CAPACITY]))
    queues = {}
    for name in ("a", "b", "c"):
        allocated = draw(st.integers(0, 16))
        queues[name] = VolcanoQueue(
            name,
            allocated=allocated,
            request=allocated + draw(st.integers(0, 4)),
            inqueue=draw(st.integers(0, 4)),
            weight=draw(st.integers(1, 4)),
            capability=draw(st.one_of(st.none(), st.integers(0, 40))),
            real_capacity=draw(st.one_of(st.none(), st.integers(0, 40)))
            if plugin is Plugin.CAPACITY
            else None,
        )
    jobs = []
    for i in range(draw(st.integers(0, 6))):
        replicas = draw(st.integers(1, 4))
        jobs.append(
            ej(
                f"j{i}",
                queue=draw(queue_names),
                min=1,
                max=replicas + draw(st.integers(0, 8)),
                replicas=replicas,
                active=replicas - draw(st.integers(0, 1)),
                gpw=draw(st.sampled_from([1, 2, 4])),
            )
        )
    return VolcanoView(plugin, queues, node_list), jobs


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_growth_never_exceeds_what_the_scheduler_binds(cluster):
    view, jobs = cluster
    p = plan(vsnap(view, jobs), policy(), NOW)
    by_ref = {j.ref: j for j in jobs}
    grown = [(by_ref[d.ref], d.target - d.current) for d in p.actions if d.target > d.current]
    # never more GPUs than idle on schedulable nodes, counting workers still in flight,
    # and never a worker larger than every node's idle GPUs
    pool = Placer(view.nodes or ())
    for j in sorted(jobs, key=lambda j: j.queue):  # in-flight workers are placed first
        pool.place(j.worker_shape, j.inflight_workers)
    assert sum(n * j.gpus_per_worker for j, n in grown) <= pool.idle_gpus
    largest = max((n.idle for n in view.nodes or ()), default=0)
    assert all(j.gpus_per_worker <= largest for j, _ in grown)
    # and no queue grows past its plugin's room less what it has in flight
    for name in ("a", "b", "c"):
        extra_gpus = sum(n * j.gpus_per_worker for j, n in grown if j.queue == name)
        if not extra_gpus:
            continue
        limit = plugin_limit(name, view, {})
        inflight = sum(j.inflight_workers * j.gpus_per_worker for j in jobs if j.queue == name)
        assert limit is not None
        assert extra_gpus <= limit.gpus - inflight + 1e-6


# ---- the inputs: snapshot files, nodes and pods ------------------------------------------


def test_snapshot_volcano_section_bad_values_hold_the_queue_naming_the_field():
    from autoscaler.read.snapshot_file import parse_snapshot_data

    data = {
        "volcano": {
            "plugin": "capacity",
            "queues": {
                "ok": {"allocated": 2, "real_capacity": 8},
                "neg": {"allocated": -1},
                "nan": {"request": float("nan")},
                "typo": {"alocated": 2},
                "text": "lots",
            },
        }
    }
    snap = parse_snapshot_data(data)
    assert snap.plugin is Plugin.CAPACITY
    assert snap.free["ok"].volcano == VolcanoQueue("ok", allocated=2, request=2, real_capacity=8)
    for name, says in {
        "neg": "volcano.queues[neg].allocated",
        "nan": "volcano.queues[nan].request",
        "typo": "unknown field(s) alocated",
        "text": "volcano.queues[text] is not a mapping",
    }.items():
        state = snap.free[name]
        assert state.problem is Reason.METRICS_INVALID and says in state.message, state


@pytest.mark.parametrize(
    ("volcano", "says"),
    [
        ({"plugin": "drf"}, "volcano.plugin must be proportion or capacity"),
        ({"plugin": "given"}, "volcano.plugin must be proportion or capacity"),
        ({"queues": [1, 2]}, "volcano.queues must be a mapping"),
        ({"plugins": "capacity"}, "unknown key(s) in volcano: plugins"),
        ("proportion", "volcano must be a mapping"),
    ],
)
def test_snapshot_volcano_section_unusable_is_an_error(volcano, says):
    from autoscaler.read.snapshot_file import SnapshotError, parse_snapshot_data

    with pytest.raises(SnapshotError, match=re.escape(says)):
        parse_snapshot_data({"volcano": volcano})


def test_snapshot_queue_in_both_free_gpus_and_volcano_is_an_error():
    from autoscaler.read.snapshot_file import SnapshotError, parse_snapshot_data

    with pytest.raises(SnapshotError, match=re.escape("q in both free_gpus and volcano.queues")):
        parse_snapshot_data({"free_gpus": {"q": 1}, "volcano": {"queues": {"q": {}}}})


def _node(name, gpus, *, ready="True", unschedulable=None, taints=()):
    spec = {"taints": list(taints)}
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    return {
        "kind": "Node",
        "metadata": {"name": name},
        "spec": spec,
        "status": {
            "allocatable": {"nvidia.com/gpu": gpus, "cpu": "64"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def _pod(node, *, gpus=(1,), init=(), phase="Running", field="limits"):
    def container(g):
        return {"name": "c", "resources": {field: {"nvidia.com/gpu": str(g)}}}

    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "nodeName": node,
            "containers": [container(g) for g in gpus],
            "initContainers": [container(g) for g in init],
        },
        "status": {"phase": phase},
    }


def test_nodes_count_bound_unfinished_pods_and_only_schedulable_nodes():
    from builders import settings as make_settings

    from autoscaler.read.parse import parse_nodes

    got = parse_nodes(
        [
            _node("a", "8"),
            _node("b", "8", ready="False"),
            _node("c", "8", unschedulable=True),
            _node("d", "8", taints=[{"key": "gpu", "effect": "NoSchedule"}]),
            _node("e", "4", taints=[{"key": "x", "effect": "PreferNoSchedule"}]),
            {
                "kind": "Node",
                "metadata": {"name": "f"},
                "status": {"allocatable": {"nvidia.com/gpu": "lots"}},
            },
        ],
        [
            _pod("a", gpus=(1, 2)),
            _pod("a", gpus=(1,), init=(4,)),  # the init container needs more: 4
            _pod("a", phase="Succeeded"),  # finished: holds nothing
            _pod("a", field="requests"),
            _pod("", gpus=(8,)),  # not bound
            _pod("e", gpus=(2,), phase="Pending"),  # bound, not running yet: holds its GPUs
        ],
        make_settings().read_options(),
    )
    by_name = {n.name: n for n in got}
    assert (by_name["a"].allocatable, by_name["a"].used, by_name["a"].idle) == (8, 8, 0)
    # not Ready; cordoned; tainted (a taint repels only the pods that do not tolerate it)
    assert [(by_name[n].schedulable, by_name[n].cordoned) for n in "bcd"] == [
        (False, False),
        (True, True),
        (True, False),
    ]
    assert [n.idle for n in (by_name["b"], by_name["c"], by_name["d"])] == [0, 0, 8]
    assert [str(t) for t in by_name["d"].taints] == ["gpu:NoSchedule"]
    assert by_name["e"].taints == ()  # PreferNoSchedule repels nothing
    assert (by_name["e"].used, by_name["e"].idle) == (2, 2)
    assert by_name["f"].allocatable == 0  # unreadable: no GPUs counted, never a crash


def test_an_idle_queue_with_a_waiting_gang_keeps_its_share_from_the_others():
    # under proportion a queue that never ran a job has no series; its Pending gang of 16
    # will ask for half the cluster, so the busy queue may not grow into it
    from builders import settings as make_settings

    from autoscaler.read.parse import RawObjects, build_snapshot

    raw = RawObjects(
        queues=tuple(
            {"kind": "Queue", "metadata": {"name": n}, "spec": {"weight": 1}}
            for n in ("busy", "idle")
        ),
        nodes=tuple(_node(f"n{i}", "8") for i in range(4)),
        pods=tuple(_pod(f"n{i % 4}") for i in range(2)),
    )
    states = {
        "busy": QueueState("busy", None, volcano=VolcanoQueue("busy", allocated=2, request=2))
    }
    snap = build_snapshot(raw, states, make_settings().read_options(), plugin=Plugin.PROPORTION)
    assert snap.volcano is not None and snap.volcano.queues["idle"] == VolcanoQueue("idle")
    snap = replace(
        snap,
        jobs=(ej("grower", queue="busy", max=32),),
        pending=(gang("first", 16, queue="idle"),),
    )
    p = plan(snap, policy(), NOW)
    assert targets(p)["grower"] == (16, Reason.SCALE_UP_IDLE_GPUS)  # 14 more, not 30


def test_nodes_and_pods_are_kept_as_their_gpus_and_give_what_whole_ones_give():
    from builders import settings as make_settings

    from autoscaler.read.parse import decode_node, decode_pod, nodes_in_use, parse_nodes
    from autoscaler.read.records import PodUse

    s = make_settings().read_options()
    nodes = [_node("a", "8"), _node("b", "4", taints=[{"key": "k", "effect": "NoSchedule"}])]
    pods = [_pod("a", gpus=(1, 2)), _pod("a", init=(4,)), _pod("b", phase="Failed")]
    for p in pods:
        p["spec"]["containers"][0]["env"] = [{"name": "SECRET", "value": "x" * 100}]
    # a pod is kept as its node and what it requests; a finished one as nothing
    kept = [decode_pod(p, s) for p in pods]
    assert kept[2] is None
    assert [(u.node, u.gpus, u.requests) for u in kept if u is not None] == [
        ("a", 3, (("nvidia.com/gpu", 3000), ("pods", 1000))),
        ("a", 4, (("nvidia.com/gpu", 4000), ("pods", 1000))),
    ]
    assert all(isinstance(u, PodUse) for u in kept[:2])
    kept_nodes = [n for o in nodes if (n := decode_node(o, s)) is not None]
    kept_pods = [u for o in pods if (u := decode_pod(o, s)) is not None]
    assert nodes_in_use(kept_nodes, kept_pods) == parse_nodes(nodes, pods, s)
    got = parse_nodes(nodes, pods, s)
    assert [(n.name, n.used, n.schedulable, len(n.taints)) for n in got] == [
        ("a", 7, True, 0),
        ("b", 0, True, 1),
    ]


def test_a_job_waiting_for_its_own_gang_counts_once_as_that_gang():
    # rule 2: job w's 4 unplaced workers are its PodGroup's gang, not also in flight
    view = VolcanoView(
        Plugin.PROPORTION, {"q": VolcanoQueue("q", allocated=4, request=8)}, nodes((16, 4))
    )
    waiting = ej("w", replicas=4, active=0, max=4, min=4, gpw=1)
    own = replace(gang("w-pg", 4), owner=ObjectRef("ml", "w", "PyTorchJob"))
    p = plan(vsnap(view, [ej("a", replicas=4, max=16), waiting], [own]), policy(), NOW)
    assert targets(p)["a"] == (12, Reason.SCALE_UP_IDLE_GPUS)  # 12 idle - the gang's 4
    assert p.queues["q"].headroom_gpus == 12
