"""A Volcano Queue's spec.capability in every dimension it names, not only GPUs (issue 27):
both queue plugins refuse a task once allocated + task exceeds the capability in any
dimension the task requests, so growth stops there (autoscaler/plan/quota.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import NOW, ago, ej, gang, policy, settings
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from test_fit import node

from autoscaler.core.model import (
    ClusterSnapshot,
    ObjectRef,
    Plugin,
    QueueState,
    UnmanagedJob,
    VolcanoView,
)
from autoscaler.core.policy import GrowthPolicy
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import PodShape
from autoscaler.plan.planner import plan
from autoscaler.read.parse import Records, _queue_states, assemble, decode_queue
from autoscaler.read.records import GroupRecord, JobRecord, PodUse, QueueSpec
from autoscaler.report.render import plan_to_dict, plan_to_table

OPTIONS = settings().read_options()
GI = 2**30 * 1000  # one Gi of memory in milli-units
WORKER = PodShape((("cpu", 8000), ("nvidia.com/gpu", 1000)))  # 1 GPU, 8 CPU
MEM_WORKER = PodShape((("cpu", 1000), ("memory", 64 * GI), ("nvidia.com/gpu", 1000)))


def job(name, replicas, *, bound=None, shape=WORKER, max=32, active=None):
    """An elastic job whose workers are `shape`; `bound` of them have a node."""
    bound = replicas if bound is None else bound
    j = ej(name, replicas=replicas, active=replicas if active is None else active, max=max)
    return replace(j, shape=shape, worker_nodes=tuple(f"n{i}" for i in range(bound)))


def cpu(n):
    return ("cpu", n * 1000)


def run(free, limits, allocated, *jobs, pending=(), growth=GrowthPolicy.FILL):
    state = QueueState("q", free, limits=tuple(sorted(limits)), allocated=tuple(sorted(allocated)))
    s = ClusterSnapshot(queues={"q": state}, jobs=tuple(jobs), pending=tuple(pending))
    return plan(s, policy(cooldown_seconds=0, growth_policy=growth), NOW)


def decided(p):
    return {d.ref.name: (d.target, d.reason) for d in p.decisions}


# ---- the rule, one row per case ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "free", "limits", "allocated", "jobs", "expected"),
    [
        # the queue: cpu 100, workers 1 GPU + 8 CPU, one bound: 12 in all, not 17
        ("cpu-binds", 16, [cpu(100), ("memory", 400 * GI)], [cpu(8)], [job("a", 1)], {"a": 12}),
        # 96 CPU held by the queue's pods (a launcher of 24 among them): 0 more
        ("at-capability", 16, [cpu(100)], [cpu(96)], [job("a", 9)], {"a": 9}),
        # workers asked for and not bound yet hold their CPU too: 72 bound + 2 x 8 = 88
        (
            "in-flight",
            16,
            [cpu(96)],
            [cpu(72)],
            [job("a", 10, bound=8, active=8), job("b", 1)],
            {"a": 10, "b": 2},
        ),
        # no pod known bound (no pod watch): the job counts at its size, 4 x 8 = 32
        ("no-pod-watch", 16, [cpu(64)], [], [job("a", 4, bound=0)], {"a": 8}),
        # a dimension the worker does not request never bounds it (memory over already)
        ("unasked-dim", 4, [("memory", GI)], [("memory", 10 * GI)], [job("a", 2)], {"a": 6}),
        # an extended resource the worker asks for
        (
            "extended",
            8,
            [("rdma/hca", 4000)],
            [("rdma/hca", 2000)],
            [job("a", 2, shape=PodShape((("nvidia.com/gpu", 1000), ("rdma/hca", 1000))))],
            {"a": 4},
        ),
        # 0 of an extended resource is a bound of 0
        (
            "zero-extended",
            8,
            [("rdma/hca", 0)],
            [],
            [job("a", 2, shape=PodShape((("nvidia.com/gpu", 1000), ("rdma/hca", 1000))))],
            {"a": 2},
        ),
        # memory: 400Gi, 64Gi each, 2 x 64 bound: 6 in all
        (
            "memory",
            8,
            [("memory", 400 * GI)],
            [("memory", 128 * GI)],
            [job("a", 2, shape=MEM_WORKER)],
            {"a": 6},
        ),
        # two jobs share the room in plan order: 100 - 16 = 84 -> 10 more workers in all
        ("shared", 16, [cpu(100)], [cpu(16)], [job("a", 1), job("b", 1)], {"a": 11, "b": 1}),
    ],
)
def test_growth_stops_where_the_queue_capability_stops_binding(
    name, free, limits, allocated, jobs, expected
):
    p = run(free, limits, allocated, *jobs)
    assert {n: t for n, (t, _) in decided(p).items()} == expected


def test_a_job_held_at_its_queue_capability_says_which_dimension_and_what_is_held():
    p = run(16, [cpu(100), ("memory", 400 * GI)], [cpu(96)], job("a", 12))
    d = p.decisions[0]
    assert (d.target, d.reason) == (12, Reason.QUEUE_CAPACITY)
    assert d.message == (
        "queue q may hold 100 CPU by its Queue object (spec.capability[cpu]); its jobs hold "
        "96 CPU: 0 more worker(s) (1 GPU, 8 CPU)"
    )


def test_a_grant_cut_by_the_capability_says_so():
    p = run(16, [cpu(100)], [cpu(8)], job("a", 1))
    d = p.decisions[0]
    assert (d.target, d.reason) == (12, Reason.SCALE_UP_IDLE_GPUS)
    assert "may hold 100 CPU" in d.message and "11 more worker(s)" in d.message


def test_fair_growth_is_cut_by_the_capability_too():
    p = run(16, [cpu(100)], [cpu(16)], job("a", 1), job("b", 1), growth=GrowthPolicy.FAIR)
    t = {n: t for n, (t, _) in decided(p).items()}
    assert sum(t.values()) - 2 == 10  # 84 CPU of room, 8 each


def test_a_served_gang_no_job_owns_holds_its_pods_cpu():
    g = replace(gang("g", 2), pods=((WORKER, 2),), need_from="pods")
    p = run(16, [cpu(100)], [cpu(8)], job("a", 1), pending=[g])
    assert {x.ref.name: x.reason for x in p.gangs} == {"g": Reason.GANG_FITS}
    assert decided(p)["a"][0] == 10  # 100 - 8 - 16 = 76 -> 9 more


def test_no_capability_beyond_gpus_means_no_bound():
    p = run(16, [], [cpu(1000)], job("a", 1))
    assert decided(p)["a"][0] == 17


# ---- a property: grants never exceed any dimension of the capability ---------------------


@hsettings(max_examples=150, deadline=None)
@given(
    cap_cpu=st.integers(0, 200),
    allocated_cpu=st.integers(0, 200),
    sizes=st.lists(
        st.tuples(st.integers(1, 8), st.integers(1, 16), st.integers(0, 8)), min_size=1, max_size=4
    ),
    free=st.integers(0, 64),
    fair=st.booleans(),
)
def test_growth_never_takes_a_queue_past_any_capability_dimension(
    cap_cpu, allocated_cpu, sizes, free, fair
):
    jobs = []
    held = allocated_cpu * 1000
    for i, (replicas, cpus, unbound) in enumerate(sizes):
        shape = PodShape((("cpu", cpus * 1000), ("nvidia.com/gpu", 1000)))
        bound = max(0, replicas - unbound)
        jobs.append(job(f"j{i}", replicas, bound=bound, active=bound, shape=shape))
        held += (replicas - bound) * cpus * 1000
    p = run(
        free,
        [cpu(cap_cpu)],
        [cpu(allocated_cpu)],
        *jobs,
        growth=GrowthPolicy.FAIR if fair else GrowthPolicy.FILL,
    )
    grown = 0
    for d, j in zip(p.decisions, jobs, strict=True):
        assert d.target is not None and d.target >= j.replicas
        grown += (d.target - j.replicas) * j.worker_shape.amount("cpu")
    assert grown == 0 or held + grown <= cap_cpu * 1000


# ---- reading the Queue object, and what its pods hold -------------------------------------


def _queue(capability):
    return {"metadata": {"name": "q"}, "spec": {"capability": capability}}


def test_the_capability_is_read_in_every_dimension_volcano_bounds():
    spec = decode_queue(
        _queue(
            {
                "cpu": "100",
                "memory": "400Gi",
                "nvidia.com/gpu": 16,
                "rdma/hca": "0",
                "pods": 110,
                "count/pods": 3,
                "foo": "9",  # not a resource Volcano keeps
            }
        ),
        OPTIONS,
    )
    assert spec is not None and spec.capability == 16 and spec.problems == ()
    assert dict(spec.limits) == {"cpu": 100_000, "memory": 400 * GI, "rdma/hca": 0}


def test_zero_cpu_or_memory_capability_is_unlimited_as_volcano_reads_it():
    spec = decode_queue(_queue({"cpu": 0, "memory": "0", "nvidia.com/gpu": 8}), OPTIONS)
    assert spec is not None and spec.limits == () and spec.capability == 8


@pytest.mark.parametrize(
    ("capability", "field"),
    [
        ({"cpu": "lots", "memory": "1Gi"}, "spec.capability[cpu]"),
        ({"cpu": "-4", "memory": "1Gi"}, "spec.capability[cpu]"),
        ({"nvidia.com/gpu": "many", "memory": "1Gi"}, "spec.capability[nvidia.com/gpu]"),
    ],
)
def test_a_bad_capability_figure_is_named_and_bounds_nothing(capability, field):
    spec = decode_queue(_queue(capability), OPTIONS)
    assert spec is not None and len(spec.problems) == 1
    assert spec.problems[0].startswith(f"Queue q: {field}") and "bounds nothing" in spec.problems[0]
    assert dict(spec.limits).get("memory") == GI  # the readable fields still bound
    assert "cpu" not in dict(spec.limits)


def test_a_bad_capability_figure_is_said_in_the_plan():
    spec = decode_queue(_queue({"cpu": "lots"}), OPTIONS)
    assert spec is not None
    state = QueueState("q", 4, limits=spec.limits, notes=spec.problems)
    p = plan(ClusterSnapshot(queues={"q": state}, jobs=(job("a", 1),)), policy(), NOW)
    assert p.queues["q"].notes == spec.problems
    assert p.decisions[0].target == 5  # no bound from it


def test_a_queue_allocated_is_what_its_podgroups_bound_pods_request():
    spec = QueueSpec("q", limits=((("cpu", 100_000),)))
    groups = (
        GroupRecord(ObjectRef("ml", "pg-a", "PodGroup"), None, "Running", queue="q"),
        GroupRecord(ObjectRef("ml", "pg-b", "PodGroup"), None, "Running", queue="other"),
    )
    pods = (
        PodUse("n1", 1, (("cpu", 8000), ("pods", 1000)), group="ml/pg-a"),
        PodUse("n2", 0, (("cpu", 2000),), group="ml/pg-a"),  # a launcher: counts too
        PodUse("", 0, (("cpu", 8000),), group="ml/pg-a"),  # not bound: not allocated
        PodUse("n1", 1, (("cpu", 8000),), group="ml/pg-b"),  # another queue
        PodUse("n1", 0, (("cpu", 500),)),  # no PodGroup
    )
    a = assemble(Records(groups=groups, queues=(spec,), pods=pods, pods_known=True))
    assert dict(a.queue_allocated) == {"q": (("cpu", 10_000), ("pods", 1000))}
    states = _queue_states(a, {"q": QueueState("q", 4)}, queues_listed=True)
    assert states["q"].limits == (("cpu", 100_000),)
    assert dict(states["q"].allocated)["cpu"] == 10_000


# ---- with node fit, and in what the daemon prints --------------------------------------------


@pytest.mark.parametrize("growth", [GrowthPolicy.FILL, GrowthPolicy.FAIR])
def test_with_nodes_growth_is_bounded_by_both_the_capability_and_node_fit(growth):
    # 4 nodes x 8 GPUs, 64 CPUs: node fit alone takes 32 workers of 8 CPU; the queue's
    # 100 CPU (16 held) take 10 more, whichever growth policy shares them out
    nodes = tuple(
        node(f"n{i}", used_gpus=1 if i < 2 else 0, used_cpu=8 if i < 2 else 0) for i in range(4)
    )
    state = QueueState("q", 30, limits=(cpu(100),), allocated=(cpu(16),))
    jobs = (job("a", 1), job("b", 1))
    s = ClusterSnapshot(
        queues={"q": state}, jobs=jobs, volcano=VolcanoView(Plugin.GIVEN, {}, nodes)
    )
    p = plan(s, policy(cooldown_seconds=0, growth_policy=growth), NOW)
    assert sum(d.target - d.current for d in p.decisions) == 10


def test_a_bad_capability_figure_is_printed_with_the_queue():
    spec = decode_queue(_queue({"cpu": "lots"}), OPTIONS)
    assert spec is not None
    state = QueueState("q", 4, limits=spec.limits, notes=spec.problems)
    p = plan(ClusterSnapshot(queues={"q": state}, jobs=(job("a", 1),)), policy(), NOW)
    assert f"queue q: note: {spec.problems[0]}" in plan_to_table(p)
    assert plan_to_dict(p)["queues"]["q"]["notes"] == list(spec.problems)


def test_a_gang_over_the_capability_alone_is_never_served_nor_reclaimed_for():
    # 16 pods of 8 CPU: 128 CPU, more than the queue's 100 may ever hold. Volcano never
    # admits it, so no worker of a is taken back for it (before: 6 reclaimed, for nothing)
    # and, though it has waited long, it does not stop a from growing into the room left
    g = replace(gang("g", 16, created=ago(7200)), pods=((WORKER, 16),), need_from="pods")
    p = run(10, [cpu(100)], [cpu(64)], job("a", 8), pending=[g])
    (decision,) = p.gangs
    assert decision.reason is Reason.GANG_UNCOVERABLE
    assert "asks 128 CPU in all, more than queue q may ever hold" in decision.message
    assert decided(p)["a"] == (12, Reason.SCALE_UP_IDLE_GPUS)  # (100 - 64) // 8 = 4 more


# ---- GPUs: pods outside the elastic workers count against the Queue's GPU capability -----


def _gpu_pod(node, group, owner=None, index=-1, gpus=1):
    return PodUse(
        node, gpus, (("nvidia.com/gpu", gpus * 1000),), owner=owner, index=index, group=group
    )


def _gpu_capped_queue(*pods, unmanaged=()):
    """Queue q allows 8 GPUs; job ml/a has 2 one-GPU workers bound."""
    a = ej("a", replicas=2, active=2, max=20)
    groups = (
        GroupRecord(ObjectRef("ml", "pg-a", "PodGroup"), None, "Running", queue="q"),
        GroupRecord(ObjectRef("ml", "pg-b", "PodGroup"), None, "Running", queue="other"),
    )
    key = ("ml", a.ref.kind, "a", "worker")
    workers = (_gpu_pod("n1", "ml/pg-a", key, 0), _gpu_pod("n1", "ml/pg-a", key, 1))
    records = Records(
        jobs=(JobRecord(a), *(JobRecord(u) for u in unmanaged)),
        groups=groups,
        queues=(QueueSpec("q", capability=8.0),),
        pods=(*workers, *pods),
        pods_known=True,
    )
    a_ = assemble(records)
    states = _queue_states(a_, {"q": QueueState("q", 16)}, queues_listed=True)
    snapshot = ClusterSnapshot(queues=states, jobs=a_.jobs, unmanaged=a_.unmanaged)
    return a_, plan(snapshot, policy(cooldown_seconds=0), NOW)


def test_a_gpu_capability_counts_every_bound_pod_of_the_queue_as_volcano_does():
    master = _gpu_pod("n2", "ml/pg-a", ("ml", "PyTorchJob", "a", "master"), 0)
    plain = _gpu_pod("n2", "ml/pg-a", gpus=2)  # a pod of the queue that no job made
    elsewhere = _gpu_pod("n2", "ml/pg-b")  # another queue's
    unbound = _gpu_pod("", "ml/pg-a")  # not bound: Volcano has not counted it
    a, p = _gpu_capped_queue(master, plain, elsewhere, unbound)
    assert dict(a.queue_other_gpus) == {"q": 3}
    # 8 - 3 (master, plain pod) - 2 (a's workers): 3 more, not 6
    assert decided(p) == {"a": (5, Reason.SCALE_UP_IDLE_GPUS)}


def test_a_queue_at_its_gpu_capability_by_other_pods_says_so():
    launcher = _gpu_pod("n2", "ml/pg-a", gpus=6)
    _, p = _gpu_capped_queue(launcher)
    d = p.decisions[0]
    assert (d.target, d.reason) == (2, Reason.QUEUE_CAPACITY)
    assert "would hold 8 (6 of them in pods other than elastic workers)" in d.message


def test_workers_counted_by_spec_are_not_counted_again_by_their_pods():
    # an unmanaged job's workers count at its spec (3 x 1): its bound pods are not added
    bad = UnmanagedJob(
        ObjectRef("ml", "b"),
        "q",
        Reason.INVALID_POLICY,
        "min > max",
        replicas=3,
        gpus_per_worker=1,
        workers_group="worker",
    )
    key = ("ml", bad.ref.kind, "b", "worker")
    pods = [_gpu_pod("n3", "ml/pg-a", key, i) for i in range(3)]
    a, p = _gpu_capped_queue(*pods, unmanaged=(bad,))
    assert dict(a.queue_other_gpus) == {}
    assert decided(p)["a"] == (5, Reason.SCALE_UP_IDLE_GPUS)  # 8 - 3 - 2 = 3 more
