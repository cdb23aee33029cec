"""Fit by shape (autoscaler/plan/fit/) and the reader of shapes and nodes
(autoscaler/read/podspec.py): table tests of every filter as the scheduler judges it, and a
property: every worker the planner grants has a node that admits it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import NOW, ej, gang, policy
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.model import (
    ClusterSnapshot,
    Node,
    Plugin,
    QueueState,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import (
    MILLI,
    HostPort,
    PodShape,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from autoscaler.plan.fit import (
    AFFINITY,
    CORDONED,
    NOT_READY,
    SELECTOR,
    TAINT,
    Misfit,
    Placer,
    admits,
    how_many,
    requirement_matches,
    tolerates,
)
from autoscaler.plan.planner import plan
from autoscaler.read.podspec import (
    milli,
    pod_requests,
    quantities,
    read_node,
    read_pod_use,
    read_shape,
)

GPU = "nvidia.com/gpu"
GKE_TAINT = Taint(GPU, "present", "NoSchedule")


def node(
    name: str = "n",
    gpus: int = 8,
    cpu: int = 64,
    *,
    used_gpus: int = 0,
    used_cpu: int = 0,
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
    ready: bool = True,
    cordoned: bool = False,
    ports: tuple[HostPort, ...] = (),
) -> Node:
    return Node(
        name,
        gpus,
        used_gpus,
        ready,
        tuple(sorted((labels or {}).items())),
        taints,
        ((GPU, gpus * MILLI), ("cpu", cpu * MILLI), ("pods", 110 * MILLI)),
        ((GPU, used_gpus * MILLI), ("cpu", used_cpu * MILLI)),
        ports,
        cordoned,
        hostname=name,
    )


def shape(
    gpus: int = 1,
    cpu: int = 8,
    *,
    selector: dict[str, str] | None = None,
    affinity: tuple[SelectorTerm, ...] | None = None,
    tolerations: tuple[Toleration, ...] = (),
    ports: tuple[HostPort, ...] = (),
) -> PodShape:
    return PodShape(
        ((GPU, gpus * MILLI), ("cpu", cpu * MILLI), ("pods", MILLI)),
        tuple(sorted((selector or {}).items())),
        affinity,
        tolerations,
        ports,
    )


def term(*exprs: Requirement, fields: tuple[Requirement, ...] = ()) -> tuple[SelectorTerm, ...]:
    return (SelectorTerm(exprs, fields),)


# ---- node affinity: every operator ----------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "values", "value", "matches"),
    [
        ("In", ("a100", "h100"), "a100", True),
        ("In", ("a100",), "h100", False),
        ("In", ("a100",), None, False),
        ("NotIn", ("a100",), "h100", True),
        ("NotIn", ("a100",), "a100", False),
        ("NotIn", ("a100",), None, True),  # an absent label is not in the set
        ("Exists", (), "x", True),
        ("Exists", (), None, False),
        ("DoesNotExist", (), None, True),
        ("DoesNotExist", (), "x", False),
        ("Gt", ("4",), "8", True),
        ("Gt", ("8",), "8", False),
        ("Gt", ("4",), None, False),
        ("Gt", ("4",), "eight", False),  # not an integer: no match
        ("Lt", ("4",), "2", True),
        ("Lt", ("4",), "4", False),
        ("Lt", ("4", "5"), "2", False),  # Gt/Lt take exactly one value
        ("Sideways", ("x",), "x", False),  # an unknown operator matches nothing
    ],
)
def test_every_affinity_operator(op, values, value, matches):
    assert requirement_matches(Requirement("k", op, values), value) is matches
    # and through a whole node: the label present (or not) on it
    n = node(labels={} if value is None else {"k": value})
    s = shape(affinity=term(Requirement("k", op, values)))
    assert (admits(s, n) is None) is matches


def test_affinity_terms_are_ored_and_requirements_anded_and_an_empty_term_matches_nothing():
    a100 = node("a", labels={"accelerator": "a100", "zone": "z1"})
    h100 = node("h", labels={"accelerator": "h100", "zone": "z2"})
    both = (
        SelectorTerm((Requirement("accelerator", "In", ("a100",)),)),
        SelectorTerm((Requirement("zone", "In", ("z2",)),)),
    )
    assert [admits(shape(affinity=both), n) for n in (a100, h100)] == [None, None]
    anded = term(Requirement("accelerator", "In", ("a100",)), Requirement("zone", "In", ("z2",)))
    assert admits(shape(affinity=anded), a100) == Misfit(AFFINITY)
    assert admits(shape(affinity=(SelectorTerm(),)), a100) == Misfit(AFFINITY)
    assert admits(shape(affinity=()), a100) == Misfit(AFFINITY)  # no term: no node


def test_match_fields_on_the_node_name_and_the_hostname_label():
    nodes = [node("gpu-1"), node("gpu-2")]
    by_name = shape(affinity=term(fields=(Requirement("metadata.name", "In", ("gpu-2",)),)))
    assert [admits(by_name, n) is None for n in nodes] == [False, True]
    not_name = shape(affinity=term(fields=(Requirement("metadata.name", "NotIn", ("gpu-2",)),)))
    assert [admits(not_name, n) is None for n in nodes] == [True, False]
    # only metadata.name, only In/NotIn: anything else fails the term
    other = shape(affinity=term(fields=(Requirement("metadata.uid", "In", ("x",)),)))
    assert admits(other, nodes[0]) == Misfit(AFFINITY)
    pinned = shape(selector={"kubernetes.io/hostname": "gpu-1"})
    placer = Placer(nodes)
    assert placer.fits(pinned) == 8 and placer.fits(by_name) == 8
    assert placer.place(by_name, 3) == 3 and placer.fits(by_name) == 5
    assert placer.fits(pinned) == 8  # gpu-1 untouched


def test_node_selector_needs_every_label():
    n = node(labels={"accelerator": "a100", "pool": "train"})
    assert admits(shape(selector={"accelerator": "a100"}), n) is None
    assert admits(shape(selector={"accelerator": "a100", "pool": "x"}), n) == Misfit(SELECTOR)
    assert admits(shape(selector={"missing": ""}), n) == Misfit(SELECTOR)


# ---- taints and tolerations ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Toleration(GPU, "Exists", "", "NoSchedule"), GKE_TAINT, True),  # what ERT adds
        (Toleration(GPU, "Equal", "present", ""), GKE_TAINT, True),  # any effect
        (Toleration(GPU, "Equal", "absent", ""), GKE_TAINT, False),  # another value
        (Toleration(GPU, "Exists", "", "NoExecute"), GKE_TAINT, False),  # another effect
        (Toleration("other", "Exists"), GKE_TAINT, False),  # another key
        (Toleration("", "Exists"), GKE_TAINT, True),  # no key, Exists: every taint
        (Toleration("", "Equal", "present"), GKE_TAINT, False),  # no key needs Exists
        (Toleration("k", "Equal", "v"), Taint("k", "v", "NoExecute"), True),
    ],
)
def test_toleration_table(toleration, taint, tolerated):
    assert tolerates(toleration, taint) is tolerated


@pytest.mark.parametrize(
    ("effect", "repels"),
    [("NoSchedule", True), ("NoExecute", True), ("PreferNoSchedule", False)],
)
def test_taint_effects(effect, repels):
    n = node(taints=(Taint("dedicated", "gpu", effect),))
    got = admits(shape(), n)
    assert (got is not None) is repels
    if repels:
        assert got == Misfit(TAINT, f"dedicated=gpu:{effect}")
    tolerant = shape(tolerations=(Toleration("dedicated", "Equal", "gpu", effect),))
    assert admits(tolerant, n) is None


def test_cordoned_and_not_ready_nodes():
    assert admits(shape(), node(cordoned=True)) == Misfit(CORDONED)
    assert admits(shape(), node(ready=False)) == Misfit(NOT_READY)
    # a pod tolerating the unschedulable taint may go to a cordoned node (DaemonSets do)
    daemon = shape(tolerations=(Toleration("node.kubernetes.io/unschedulable", "Exists"),))
    assert admits(daemon, node(cordoned=True)) is None
    assert Placer([node(cordoned=True), node("r", ready=False)]).fits(shape()) == 0


# ---- resources and ports ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "wanted", "count"),
    [
        ({GPU: 8000, "cpu": 64000}, (1, 8), 8),
        ({GPU: 8000, "cpu": 12000}, (1, 8), 1),  # CPU bounds it
        ({GPU: 0, "cpu": 64000}, (1, 8), 0),
        ({GPU: 8000}, (1, 8), 0),  # a resource the node does not have
        ({GPU: 8000, "cpu": 64000, "pods": 2000}, (1, 1), 2),  # the node's pod count
    ],
)
def test_every_requested_resource_bounds_the_count(free, wanted, count):
    assert how_many(free, shape(*wanted)) == count


def test_extended_resources_other_than_gpus_count():
    rdma = PodShape(((GPU, 1000), ("rdma/hca", 1000)))
    n = replace(node(), resources=((GPU, 8000), ("rdma/hca", 2000)))
    assert Placer([n]).fits(rdma) == 2
    assert Placer([node()]).fits(rdma) == 0


def test_host_ports_fit_one_pod_per_node():
    port = (HostPort(23456),)
    placer = Placer([node("a"), node("b"), node("c", ports=port)])
    hosted = shape(ports=port)
    assert placer.fits(hosted) == 2  # c holds the port already
    assert placer.place(hosted, 5) == 2 and placer.fits(hosted) == 0
    assert placer.fits(shape()) == 8 * 3 - 2  # other pods still fit beside them


def test_placement_takes_every_resource_and_gives_it_back_on_release():
    placer = Placer([node("a", 8, 16)])
    s = shape(1, 8)
    assert placer.fits(s) == 2
    assert placer.place(s, 1) == 1 and placer.fits(s) == 1
    placer.release("a", s)
    assert placer.fits(s) == 2


def test_a_gang_is_placed_whole_or_not_at_all():
    placer = Placer([node("a", 8, 16), node("b", 8, 16)])
    s = shape(1, 8)
    assert not placer.place_all([(s, 5)])
    assert placer.fits(s) == 4  # nothing kept of the failed attempt
    assert placer.place_all([(s, 3)]) and placer.fits(s) == 1


# ---- the reader --------------------------------------------------------------------------------


def test_quantities_in_milli_units():
    assert [milli(v) for v in ("1", "500m", "1.5", "2Gi", "1k", 3, "bad", -1)] == [
        1000,
        500,
        1500,
        2 * 2**30 * 1000,
        1_000_000,
        3000,
        None,
        None,
    ]


def test_a_resource_list_read_again_is_read_alike_and_a_new_dict():
    """Resource lists are remembered as read (a cluster repeats a few dozen): what a
    caller adds to its answer is not the next caller's, and a figure that is not a
    quantity (a list, a map: unhashable) is still left out."""
    first = quantities({"cpu": "2", GPU: "1"})
    first["cpu"] += 1000
    assert quantities({"cpu": "2", GPU: "1"}) == {"cpu": 2000, GPU: 1000}
    assert quantities({"cpu": ["2"], "memory": {"a": 1}, GPU: "1"}) == {GPU: 1000}
    assert quantities({"cpu": ["2"], GPU: "1"}) == {GPU: 1000}
    assert pod_requests({"containers": [{"resources": {"limits": {"cpu": "2"}}}]})["cpu"] == 2000


def test_pod_requests_limits_alone_init_containers_sidecars_and_overhead():
    spec = {
        "containers": [
            {"resources": {"limits": {"cpu": "2", GPU: "1"}}},  # limit alone: the request
            {"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "4"}}},
        ],
        "initContainers": [
            {"resources": {"requests": {"cpu": "8"}}},  # runs alone first: 8 > 3
            {"restartPolicy": "Always", "resources": {"requests": {"memory": "1Gi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    got = pod_requests(spec)
    assert got == {"cpu": 8100, GPU: 1000, "memory": 2**30 * 1000, "pods": 1000}


def test_a_template_is_read_as_its_pod_will_be_created():
    spec = {
        "hostNetwork": True,
        "nodeSelector": {"accelerator": "a100"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                }
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]},
        },
        "containers": [
            {
                "name": "pytorch",
                "resources": {"limits": {GPU: "1", "rdma/hca": "1", "cpu": "8"}},
            }
        ],
    }
    s = read_shape(spec, default_port=("pytorch", "pytorchjob-port", 23456))
    assert s.node_selector == (("accelerator", "a100"),)
    assert s.affinity == term(Requirement("zone", "In", ("a",)))
    assert s.host_ports == (HostPort(23456),)  # hostNetwork: the operator's port is a host port
    assert set(s.tolerations) == {
        Toleration("dedicated", "Equal", "ml", ""),
        Toleration(GPU, "Exists", "", "NoSchedule"),  # ExtendedResourceToleration
        Toleration("rdma/hca", "Exists", "", "NoSchedule"),
    }
    assert s.unmodelled == ("inter-pod anti-affinity",)
    off = read_shape(spec, extended_resource_toleration=False)
    assert off.tolerations == (Toleration("dedicated", "Equal", "ml", ""),)
    assert off.host_ports == ()  # no operator port, no container port
    # the same template read twice is one shape object (interned)
    assert read_shape(spec) is read_shape(spec)


def test_node_and_bound_pod_readers():
    obj = {
        "metadata": {
            "name": "gpu-1",
            "labels": {"kubernetes.io/hostname": "gpu-1", "accelerator": "a100"},
        },
        "spec": {
            "unschedulable": True,
            "taints": [
                {"key": GPU, "value": "present", "effect": "NoSchedule"},
                {"key": "soft", "effect": "PreferNoSchedule"},
            ],
        },
        "status": {
            "allocatable": {GPU: "8", "cpu": "64", "memory": "512Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    n = read_node(obj, (GPU,))
    assert n is not None
    assert (n.allocatable, n.cordoned, n.schedulable, n.hostname) == (8, True, True, "gpu-1")
    assert n.labels == (("accelerator", "a100"),) and n.taints == (GKE_TAINT,)
    pod = {
        "metadata": {
            "name": "train-worker-3",
            "namespace": "ns",
            "labels": {
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": "3",
            },
            "ownerReferences": [{"kind": "PyTorchJob", "name": "train", "controller": True}],
        },
        "spec": {"nodeName": "gpu-1", "containers": [{"resources": {"limits": {GPU: "2"}}}]},
        "status": {"phase": "Running"},
    }
    use = read_pod_use(pod, (GPU,))
    assert use is not None
    assert (use.node, use.gpus, use.owner, use.index) == (
        "gpu-1",
        2,
        ("ns", "PyTorchJob", "train", "worker"),
        3,
    )
    assert read_pod_use({**pod, "status": {"phase": "Succeeded"}}, (GPU,)) is None


# ---- the planner: growth bounded by fit, explained --------------------------------------------


def snap(nodes: list[Node], jobs: list, queue_gpus: float = 1000) -> ClusterSnapshot:
    view = VolcanoView(Plugin.GIVEN, {}, tuple(nodes))
    return ClusterSnapshot(
        queues={"q": QueueState("q", queue_gpus)}, jobs=tuple(jobs), volcano=view
    )


def test_growth_bounded_by_selector_says_where_it_fits_and_why_not_elsewhere():
    nodes = [
        node("a1", used_gpus=7, labels={"accelerator": "a100"}),
        node("a2", used_gpus=7, labels={"accelerator": "a100"}),
        node("h1", labels={"accelerator": "h100"}),
        node("h2", labels={"accelerator": "h100"}),
    ]
    job = ej("pinned", max=8, replicas=2)
    job = replace(job, shape=shape(selector={"accelerator": "a100"}))
    p = plan(snap(nodes, [job]), policy(), NOW)
    (d,) = p.decisions
    assert (d.target, d.reason) == (4, Reason.SCALE_UP_IDLE_GPUS)
    assert "node fit: 2 more worker(s) (1 GPU, 8 CPU) fit on the 2 node(s) with " in d.message
    assert "accelerator=a100" in d.message
    assert "16 idle GPU(s) on 2 node(s) elsewhere do not match its nodeSelector" in d.message


def test_tainted_nodes_admit_tolerating_workers_and_say_so_when_they_do_not():
    nodes = [node(f"n{i}", taints=(GKE_TAINT,)) for i in range(4)]
    tolerant = replace(
        ej("tolerant", max=40, replicas=2),
        shape=shape(tolerations=(Toleration(GPU, "Exists", "", "NoSchedule"),)),
    )
    p = plan(snap(nodes, [tolerant]), policy(), NOW)
    assert p.decisions[0].target == 2 + 32  # 4 x 8 GPUs, 8 CPU each: 8 per node
    intolerant = replace(ej("intolerant", max=40, replicas=2), shape=shape())
    p = plan(snap(nodes, [intolerant]), policy(), NOW)
    (d,) = p.decisions
    assert (d.target, d.reason) == (2, Reason.NO_NODE_FITS)
    assert (
        "32 idle GPU(s) are on 4 node(s) tainted nvidia.com/gpu=present:NoSchedule that its "
        "workers do not tolerate" in d.message
    )


def test_cpu_full_nodes_bound_growth_with_insufficient_cpu():
    nodes = [node("a"), node("b"), node("c", used_cpu=60), node("d", used_cpu=60)]
    job = replace(ej("cpu", max=40, replicas=0, min=0, active=0), shape=shape(1, 8))
    p = plan(snap(nodes, [job]), policy(), NOW)
    (d,) = p.decisions
    assert d.target == 16, d.message  # 8 per free node; 4 CPUs left elsewhere fit none
    assert "Insufficient cpu on 2 node(s)" in d.message


def test_unmodelled_constraints_are_said_in_the_plan():
    job = replace(
        ej("spread", max=4, replicas=2),
        shape=replace(shape(), unmodelled=("topology spread",)),
    )
    p = plan(snap([node()], [job]), policy(), NOW)
    assert any("topology spread" in n for n in p.decisions[0].notes)


# ---- property: a granted worker always has a node that admits it ----------------------------

LABELS = st.sampled_from([{}, {"accelerator": "a100"}, {"accelerator": "h100"}])
TAINTS = st.sampled_from([(), (GKE_TAINT,), (Taint("dedicated", "x", "NoExecute"),)])


@st.composite
def fit_clusters(draw):
    nodes = [
        node(
            f"n{i}",
            gpus,
            cpu,
            used_gpus=draw(st.integers(0, gpus)),
            used_cpu=draw(st.integers(0, cpu)),
            labels=draw(LABELS),
            taints=draw(TAINTS),
            ready=draw(st.booleans()) or i == 0,
            cordoned=draw(st.booleans()) and i > 0,
        )
        for i, (gpus, cpu) in enumerate(
            draw(
                st.lists(st.tuples(st.sampled_from([4, 8]), st.sampled_from([16, 64])), max_size=5)
            )
        )
    ]
    jobs = []
    for i in range(draw(st.integers(1, 5))):
        replicas = draw(st.integers(1, 3))
        s = shape(
            draw(st.sampled_from([1, 2, 4])),
            draw(st.sampled_from([1, 8, 30])),
            selector=draw(LABELS),
            tolerations=draw(st.sampled_from([(), (Toleration("", "Exists"),)])),
            ports=draw(st.sampled_from([(), (HostPort(23456),)])),
        )
        job = ej(f"j{i}", max=replicas + draw(st.integers(0, 8)), replicas=replicas)
        jobs.append(replace(job, gpus_per_worker=s.amount(GPU) // MILLI, shape=s))
    return nodes, jobs


@settings(max_examples=300, deadline=None)
@given(fit_clusters(), st.sampled_from(["fill", "fair"]))
def test_every_granted_worker_has_a_node_that_admits_it(cluster, growth):
    nodes, jobs = cluster
    p = plan(snap(nodes, jobs), policy(growth_policy=growth), NOW)
    by_ref = {j.ref: j for j in jobs}
    # replay the grants on a fresh copy of the nodes, in the order the planner grants
    # (fill: smallest job first; fair: by name): each worker must find a node
    placer = Placer(nodes)
    grown = [(by_ref[d.ref], d.target - d.current) for d in p.actions if d.target > d.current]
    if growth == "fill":
        grown.sort(key=lambda g: (-g[0].priority, g[0].replicas * g[0].gpus_per_worker))
    for j, extra in grown:
        assert placer.place(j.worker_shape, extra) == extra, j.ref
    for d in p.decisions:
        assert d.min_replicas is not None and d.max_replicas is not None
        assert d.min_replicas <= d.target <= d.max_replicas


def test_queue_plugin_total_counts_tainted_and_cordoned_nodes():
    # Volcano shares every Ready node's GPUs, tainted or cordoned; not-Ready ones it drops
    nodes = (
        node("a", taints=(GKE_TAINT,)),
        node("b", cordoned=True),
        node("c", ready=False),
    )
    view = VolcanoView(Plugin.PROPORTION, {"q": VolcanoQueue("q")}, nodes)
    assert view.total_gpus == 16


# ---- gangs and reclaim by shape -------------------------------------------------------------


def test_a_reclaim_counts_only_workers_on_nodes_the_gangs_pods_fit():
    """A gang of 4 a100 pods waits; the queue is full. Job `on-h100` has the most
    reclaimable workers but runs on h100 nodes, where the gang's pods do not go: its
    workers free nothing the gang can use. Job `on-a100` gives its 4 highest workers."""
    a100, h100 = {"accelerator": "a100"}, {"accelerator": "h100"}
    nodes = [
        node("a1", used_gpus=8, labels=a100),
        node("a2", used_gpus=8, labels=a100),
        node("h1", used_gpus=8, labels=h100),
        node("h2", used_gpus=8, labels=h100),
    ]
    on_h100 = replace(
        ej("on-h100", min=2, max=16, replicas=16),
        shape=shape(),
        worker_nodes=("h1",) * 8 + ("h2",) * 8,
    )
    on_a100 = replace(
        ej("on-a100", min=8, max=16, replicas=16),
        shape=shape(),
        worker_nodes=("a1",) * 8 + ("a2",) * 8,
    )
    pending = replace(gang("wants-a100", 4), pods=((shape(selector=a100), 4),))
    view = VolcanoView(Plugin.GIVEN, {}, tuple(nodes))
    snapshot = ClusterSnapshot(
        queues={"q": QueueState("q", 0)},
        jobs=(on_h100, on_a100),
        pending=(pending,),
        volcano=view,
    )
    p = plan(snapshot, policy(), NOW)
    by_name = {d.ref.name: (d.target, d.reason) for d in p.decisions}
    assert by_name["on-a100"] == (12, Reason.RECLAIM_FOR_PENDING)
    assert by_name["on-h100"][0] == 16
    (g,) = p.gangs
    assert g.reason is Reason.GANG_COVERED and [v.name for v in g.victims] == ["on-a100"]
    # without node fit the job with the most reclaimable workers would have gone
    blind = plan(replace(snapshot, volcano=None), policy(), NOW)
    assert {d.ref.name: d.target for d in blind.decisions}["on-h100"] == 12


def test_a_gang_whose_pods_fit_no_node_is_not_counted_as_fitting_on_idle_gpus():
    """8 GPUs idle, all on h100 nodes; the gang's pods want a100: it does not fit on
    them, and no worker runs where it could go: uncoverable, said with node fit's words."""
    a100, h100 = {"accelerator": "a100"}, {"accelerator": "h100"}
    nodes = [node("a1", used_gpus=8, labels=a100), node("h1", labels=h100)]
    pending = replace(gang("wants-a100", 4), pods=((shape(selector=a100), 4),))
    snapshot = ClusterSnapshot(
        queues={"q": QueueState("q", 8)},
        pending=(pending,),
        volcano=VolcanoView(Plugin.GIVEN, {}, tuple(nodes)),
    )
    (g,) = plan(snapshot, policy(), NOW).gangs
    assert g.reason is Reason.GANG_UNCOVERABLE
    assert "do not match its nodeSelector" in g.message


def test_a_steady_plan_taken_up_from_the_last_in_flight_placement_is_the_same_plan():
    """The in-flight workers' placement is remembered for the same nodes and jobs: the
    plan made from it is the one a fresh placement gives."""
    nodes = tuple(node(f"n{i}", used_gpus=i % 8) for i in range(12))
    jobs = [
        replace(ej(f"j{i}", max=12, replicas=4, active=2 + i % 2), shape=shape(1, 4))
        for i in range(6)
    ] + [replace(ej("grow", max=40, replicas=2), shape=shape(2, 8))]
    snapshot = snap(list(nodes), jobs)
    first = plan(snapshot, policy(), NOW)
    again = plan(snapshot, policy(), NOW)  # taken up from the memo
    fresh = plan(
        replace(snapshot, volcano=replace(snapshot.volcano, nodes=tuple(list(nodes)))),
        policy(),
        NOW,
    )
    assert first == again == fresh
    assert any(a.ref.name == "grow" for a in first.actions)
