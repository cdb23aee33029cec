"""A reclaim for a gang whose pods' shapes are known frees room on the nodes its pods
will go to, of every resource they ask (reclaim._cover_by_nodes, fit.make_room): in one
cycle, with the fewest jobs and workers restarted; workers elsewhere stay; a gang no
reclaim makes fit takes nothing. Without shapes or nodes, GPUs alone decide, as before.

The cluster of every table: nodes n1.. of 8 GPUs and 64 CPUs; elastic workers ask 1 GPU
and 8 CPUs (8 fill a node); the gang's pods ask 1 GPU and 60 CPUs (a node's worth)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import NOW, ago, ej, gang, policy
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_fit import node, shape

from autoscaler.core.model import (
    ClusterSnapshot,
    Node,
    Plugin,
    QueueState,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.reasons import Reason
from autoscaler.core.shapes import HostPort
from autoscaler.plan.fit import Holder, Placer, RoomMemo, make_room
from autoscaler.plan.fit import room as room_module
from autoscaler.plan.planner import plan

WORKER = shape(1, 8)
HEAVY = shape(1, 60)


def nodes_for(jobs: list, count: int, other_cpu: dict[str, int] | None = None) -> list[Node]:
    """Nodes n1..n<count>, each with the room (and host ports) its jobs' bound workers
    take, and `other_cpu`: CPUs of pods that are not ours."""
    out = []
    for i in range(1, count + 1):
        name = f"n{i}"
        here = [j for j in jobs for n in j.worker_nodes[: j.replicas] if n == name]
        cpu = sum(j.worker_shape.amount("cpu") for j in here) // 1000
        out.append(
            node(
                name,
                used_gpus=sum(j.gpus_per_worker for j in here),
                used_cpu=cpu + (other_cpu or {}).get(name, 0),
                ports=tuple(p for j in here for p in j.worker_shape.host_ports),
            )
        )
    return out


def elastic(name: str, min: int, where: tuple[str, ...], **kw) -> object:
    """An elastic job at `len(where)` workers (its max 32), worker i bound on where[i]."""
    job = ej(name, min=min, max=32, replicas=len(where), **kw)
    return replace(job, shape=WORKER, worker_nodes=where)


def scene(jobs, pods, count=4, other_cpu=None, free=0.0, gpus=None) -> ClusterSnapshot:
    nodes = nodes_for(jobs, count, other_cpu)
    waiting = replace(gang("g", gpus or sum(n for _, n in pods)), pods=tuple(pods))
    return ClusterSnapshot(
        queues={"q": QueueState("q", free)},
        jobs=tuple(jobs),
        pending=(waiting,),
        volcano=VolcanoView(Plugin.GIVEN, {}, tuple(nodes)),
    )


def outcome(p) -> tuple[dict[str, int], Reason]:
    (g,) = p.gangs
    return {d.ref.name: d.target for d in p.decisions}, g.reason


N = {i: f"n{i}" for i in range(1, 5)}


def on(*spans: tuple[int, int]) -> tuple[str, ...]:
    """Worker nodes by index: (node number, how many), in index order."""
    return tuple(N[n] for n, k in spans for _ in range(k))


ALTERNATE = tuple(N[1 + i % 2] for i in range(16))  # worker i on n1 (even) or n2 (odd)

TABLE = [
    pytest.param(
        # one heavy pod: a's 8 highest workers, all on n2, in one cycle (by GPUs: 1
        # worker a cycle, each cycle a restart, 8 cycles before it fits)
        [elastic("a", 1, on((1, 8), (2, 8))), elastic("b", 1, on((3, 8), (4, 8)))],
        [(HEAVY, 1)],
        {},
        {"a": 8, "b": 16},
        Reason.GANG_COVERED,
        id="cpu-heavy-pod-one-node-one-cycle",
    ),
    pytest.param(
        # two heavy pods: two nodes' worth, from one job (one restart)
        [elastic("a", 1, on((1, 8), (2, 8), (3, 8), (4, 8)))],
        [(HEAVY, 2)],
        {},
        {"a": 16},
        Reason.GANG_COVERED,
        id="two-heavy-pods-two-nodes-one-job",
    ),
    pytest.param(
        # a has the most workers above min, but they alternate n1/n2: freeing one node
        # of it takes 15 workers (its highest index goes first); b's 8 on n3 free n3
        # with 8. a's workers free nothing the pod needs: none is taken
        [elastic("a", 1, ALTERNATE), elastic("b", 1, on((4, 1), (3, 8)))],
        [(HEAVY, 1)],
        {"n4": 56},
        {"a": 16, "b": 1},
        Reason.GANG_COVERED,
        id="fewest-workers-not-most-reclaimable",
    ),
    pytest.param(
        # every reclaimable worker gone still leaves each node short of 60 CPUs (a: 7
        # on n2, b: 6 on n3, n4 full of other pods): nothing is taken (by GPUs: 1)
        [elastic("a", 9, on((1, 8), (2, 8))), elastic("b", 2, on((3, 8)))],
        [(HEAVY, 1)],
        {"n4": 64},
        {"a": 16, "b": 8},
        Reason.GANG_UNCOVERABLE,
        id="uncoverable-takes-nothing",
    ),
    pytest.param(
        # a lower-priority job gives first, even where another frees the node with fewer
        [
            elastic("hi", 1, on((1, 8), (2, 8)), priority=5),
            elastic("lo", 1, on((4, 2), (3, 8))),
        ],
        [(HEAVY, 1)],
        {},
        {"hi": 16, "lo": 2},
        Reason.GANG_COVERED,
        id="lowest-priority-first",
    ),
]


@pytest.mark.parametrize(("jobs", "pods", "other", "targets", "reason"), TABLE)
def test_a_reclaim_frees_the_nodes_the_gangs_pods_go_to(jobs, pods, other, targets, reason):
    p = plan(scene(jobs, pods, other_cpu=other), policy(), NOW)
    assert outcome(p) == (targets, reason), p.gangs[0].message
    if reason is Reason.GANG_COVERED:
        assert "node fit: room for its pods (1 GPU, 60 CPU) on node(s) n" in p.gangs[0].message
    reclaimed = {d.ref.name for d in p.decisions if d.reason is Reason.RECLAIM_FOR_PENDING}
    assert reclaimed == {n for n, t in targets.items() if t < len(_by(jobs)[n].worker_nodes)}


def _by(jobs):
    return {j.ref.name: j for j in jobs}


def test_an_uncoverable_gang_says_which_resource_and_how_many_nodes():
    jobs = [elastic("a", 9, on((1, 8), (2, 8))), elastic("b", 2, on((3, 8)))]
    p = plan(scene(jobs, [(HEAVY, 1)], other_cpu={"n4": 64}), policy(), NOW)
    (g,) = p.gangs
    assert "with every elastic worker it may take gone, its pods still do not fit" in g.message
    # n2-n4 keep too few CPUs; n1, a's 8 workers at its min, no GPU either
    assert "(1 GPU, 60 CPU)" in g.message and "Insufficient cpu on 3 node(s)" in g.message
    assert "Insufficient nvidia.com/gpu, cpu on 1 node(s)" in g.message
    assert g.blockers  # and who did not give way, as before


def test_the_reclaimed_gang_is_placed_and_later_gangs_see_the_room_taken():
    """The room a reclaim frees is the gang's: a second heavy gang behind it is not
    served from it (it gets its own node's worth, from the next job)."""
    jobs = [elastic("a", 1, on((1, 8), (2, 8))), elastic("b", 1, on((3, 8), (4, 8)))]
    snapshot = scene(jobs, [(HEAVY, 1)])
    second = replace(gang("h", 1, created=ago(30)), pods=((HEAVY, 1),))
    p = plan(replace(snapshot, pending=(*snapshot.pending, second)), policy(), NOW)
    assert {g.ref.name: g.reason for g in p.gangs} == {
        "g": Reason.GANG_COVERED,
        "h": Reason.GANG_COVERED,
    }
    assert {d.ref.name: d.target for d in p.decisions} == {"a": 8, "b": 8}
    said = {g.ref.name: g.message for g in p.gangs}
    assert said["g"].endswith("on node(s) n2") and said["h"].endswith("on node(s) n4")


@pytest.mark.parametrize("how", ["gang-known-by-gpus", "node-fit-off"])
def test_without_shapes_or_nodes_gpus_alone_decide_as_before(how):
    """The first table's cluster: by GPUs, the gang's 1 GPU takes 1 worker (of the job
    with the most above min, a then b by name)."""
    jobs = [elastic("a", 1, on((1, 8), (2, 8))), elastic("b", 1, on((3, 8), (4, 8)))]
    snapshot = scene(jobs, [(HEAVY, 1)])
    if how == "node-fit-off":
        snapshot = replace(snapshot, volcano=None)
    else:
        snapshot = replace(snapshot, pending=(replace(snapshot.pending[0], pods=()),))
    p = plan(snapshot, policy(), NOW)
    assert outcome(p) == ({"a": 15, "b": 16}, Reason.GANG_COVERED)


def test_the_payoff_rule_weighs_the_workers_the_nodes_need():
    """v (8 workers, min 2, 400 s left at its pace) is the only victim; the gang's two
    pods (1 GPU, 24 CPU each) fit n1 only once 6 of v's workers are gone. By GPUs, 2
    workers cost v 30 + 400 x 2/6 s < the 400 s the gang would wait: it paid. The 6
    the nodes need cost v 30 + 400 x 6/2 = 1230 s: it does not pay; nothing is taken."""
    started = ago(3600)
    v = replace(
        elastic("v", 2, on((1, 8)), started=started),
        expected_runtime_seconds=None,
        progress=0.9,
    )
    e = replace(
        ej("e", min=2, max=2, replicas=2, started=started),
        shape=WORKER,
        worker_nodes=on((2, 2)),
        expected_runtime_seconds=600.0 + 3600,
    )
    w = replace(ej("w", min=2, max=4, replicas=2, active=0), expected_runtime_seconds=3600.0)
    pods = ((shape(1, 24), 2),)
    snapshot = scene([v, e], list(pods), count=2, other_cpu={"n2": 48})
    owned = replace(gang("w", 2, owner="w"), pods=pods)
    snapshot = replace(snapshot, jobs=(v, e, w), pending=(owned,))
    p = plan(snapshot, policy(), NOW)
    (g,) = p.gangs
    assert g.reason is Reason.GANG_RECLAIM_UNPAID, g.message
    assert "its victims would lose ~1230s" in g.message
    assert {d.ref.name: d.target for d in p.decisions}["v"] == 8
    by_gpus = plan(replace(snapshot, volcano=None), policy(), NOW)
    assert {d.ref.name: d.target for d in by_gpus.decisions}["v"] == 6


def test_a_lent_share_comes_back_from_the_node_the_pod_can_use():
    """Queue a grew into b's share (a holds 30 of 32 GPUs, its share 16); b's gang (one
    heavy pod) takes back a node's worth of a's workers: a's highest 6 on n4, where b's
    2 workers stay, free too little; so a gives 14 (to its 8 on n3), 14 of the 14 it
    holds beyond its share. By GPUs it gave back one."""
    a_nodes = on((1, 8), (2, 8), (3, 8), (4, 6))
    ja = replace(
        ej("ja", queue="a", min=2, max=30, replicas=30), shape=WORKER, worker_nodes=a_nodes
    )
    jb = replace(
        ej("jb", queue="b", min=2, max=2, replicas=2), shape=WORKER, worker_nodes=on((4, 2))
    )
    nodes = nodes_for([ja, jb], 4)
    deserved = {"capability": 32, "real_capacity": 32, "spec_deserved": 16}
    queues = {
        "a": VolcanoQueue("a", allocated=30, **deserved),
        "b": VolcanoQueue("b", allocated=2, **deserved),
    }
    view = VolcanoView(Plugin.CAPACITY, queues, tuple(nodes))
    waiting = replace(gang("gb", 1, queue="b"), pods=((HEAVY, 1),))
    snapshot = ClusterSnapshot(
        queues={q: QueueState(q, None, volcano=vq) for q, vq in queues.items()},
        jobs=(ja, jb),
        pending=(waiting,),
        volcano=view,
    )
    p = plan(snapshot, policy(), NOW)
    (g,) = p.gangs
    assert g.reason is Reason.GANG_COVERED, g.message
    assert {d.ref.name: (d.target, d.reason) for d in p.decisions}["ja"] == (
        16,
        Reason.RECLAIM_FOR_QUEUE,
    )
    by_gpus = plan(replace(snapshot, pending=(replace(waiting, pods=()),)), policy(), NOW)
    assert {d.ref.name: d.target for d in by_gpus.decisions}["ja"] == 29


# ---- property: after the planned releases the gang's pods fit; no job below its min -------


@st.composite
def full_clusters(draw):
    """2-4 full-ish nodes, jobs whose workers (1 GPU and 4, 8 or 16 CPUs) fill them in
    a drawn order, and a gang of 1-3 pods asking 1-2 GPUs and 8-60 CPUs; some jobs and
    pods on the host network (port 23456: one such pod a node)."""
    count = draw(st.integers(2, 4))
    room = {f"n{i}": [8, 64, False] for i in range(1, count + 1)}  # GPUs, CPUs, port taken
    jobs = []
    for k in range(draw(st.integers(1, 4))):
        cpu, hostnet = draw(st.sampled_from([4, 8, 16])), draw(st.booleans())
        where = []
        for _ in range(draw(st.integers(1, 12))):
            fits = [n for n, (g, c, p) in room.items() if g >= 1 and c >= cpu]
            fits = [n for n in fits if not (hostnet and room[n][2])]
            if not fits:
                break
            n = draw(st.sampled_from(fits))
            room[n][0] -= 1
            room[n][1] -= cpu
            room[n][2] = room[n][2] or hostnet
            where.append(n)
        if not where:
            break
        job = ej(f"j{k}", min=draw(st.integers(1, len(where))), max=32, replicas=len(where))
        worker = shape(1, cpu, ports=(HostPort(23456),) if hostnet else ())
        jobs.append(replace(job, shape=worker, worker_nodes=tuple(where)))
    ports = (HostPort(23456),) if draw(st.booleans()) else ()
    pods = [(shape(draw(st.integers(1, 2)), draw(st.sampled_from([8, 30, 60])), ports=ports), 1)]
    if draw(st.booleans()):
        pods.append((shape(1, draw(st.sampled_from([8, 60]))), draw(st.integers(1, 2))))
    return jobs, pods, count


@settings(max_examples=300, deadline=None)
@given(
    full_clusters(),
    st.sampled_from(["most-workers", "least-work-lost"]),
    st.sampled_from([0.0, 1000.0]),
)
def test_after_the_planned_releases_the_gangs_pods_fit(cluster, order, free):
    """`free` 1000: the queue's share is no limit (the nodes' idle GPUs are): then a
    gang skipped could not fit even with every worker above its min gone."""
    jobs, pods, count = cluster
    if not jobs:
        return
    gpus = sum(s.amount("nvidia.com/gpu") // 1000 * n for s, n in pods)
    snapshot = scene(jobs, pods, count=count, free=free, gpus=gpus)
    p = plan(snapshot, policy(victim_order=order), NOW)
    (g,) = p.gangs
    event(str(g.reason))
    by_name = _by(jobs)
    for d in p.decisions:
        assert d.min_replicas <= d.target <= d.max_replicas
    placer = Placer(snapshot.volcano.nodes)
    for d in p.decisions:
        j = by_name[d.ref.name]
        for i in range(d.target, j.replicas):  # the highest indices go
            placer.release(j.worker_nodes[i], j.worker_shape)
    fits = placer.place_all(pods)
    if g.reason in (Reason.GANG_COVERED, Reason.GANG_FITS):
        assert fits, g.message
    else:
        assert all(d.target >= d.current for d in p.decisions)  # nothing taken
        # nothing is given up in vain: with every worker above min gone it would not fit
        everything = Placer(snapshot.volcano.nodes)
        for j in jobs:
            for i in range(j.min_replicas, j.replicas):
                everything.release(j.worker_nodes[i], j.worker_shape)
        if free and g.reason is Reason.GANG_UNCOVERABLE:
            assert not everything.place_all(pods), g.message
    if g.reason is Reason.GANG_COVERED and free:
        # no job restarts in vain: with any one victim's workers kept, the pods do not fit
        for victim in g.victims:
            without = Placer(snapshot.volcano.nodes)
            for d in p.decisions:
                j = by_name[d.ref.name]
                for i in range(d.target, j.replicas) if d.ref != victim else ():
                    without.release(j.worker_nodes[i], j.worker_shape)
            assert not without.place_all(pods), (victim.name, g.message)


def test_a_trial_leaves_the_placer_as_it_was():
    """make_room tries releases and placements inside Placer.trial: afterwards the room
    and the order nodes are tried in (best fit breaks ties by it) are as before."""
    jobs = [elastic("a", 1, on((1, 8), (2, 8))), elastic("b", 1, on((3, 4), (4, 4)))]
    placer = Placer(nodes_for(jobs, 4))

    def room():  # each bucket's nodes, in the order they are tried
        return {c: (n, dict(buckets)) for c, (n, buckets) in placer.state().items()}

    before = room()
    with placer.trial():
        for j in jobs:
            for n in j.worker_nodes[1:]:
                placer.release(n, WORKER)
        assert placer.place_all([(HEAVY, 2)])  # on n2 and n4
    assert room() == before
    # many at once (a bucket rebuilt once): the same room as one by one, undone alike
    gone = [(n, WORKER) for j in jobs for n in j.worker_nodes[1:]]
    one_by_one = Placer(nodes_for(jobs, 4))
    for n, s in gone:
        one_by_one.release(n, s)
    with placer.trial():
        placer.place(WORKER, 1)
        with placer.trial():
            placer.release_all(gone)
            assert [placer.free_on(n) for n in N.values()] != [
                one_by_one.free_on(n) for n in N.values()
            ]  # the worker placed first is still there
        placer.release_all(gone)
        assert placer.place_all([(HEAVY, 1)]) and not placer.place_all([(HEAVY, 1)])  # n4 short
    assert room() == before
    placer.release_all(gone)
    assert [placer.free_on(n) for n in N.values()] == [one_by_one.free_on(n) for n in N.values()]
    placer = Placer(nodes_for(jobs, 4))
    fresh = Placer(nodes_for(jobs, 4))
    assert placer.place(WORKER, 1) == fresh.place(WORKER, 1) == 1
    assert [placer.free_on(n) for n in N.values()] == [fresh.free_on(n) for n in N.values()]


def test_a_host_port_the_gangs_pods_need_is_freed_with_the_worker_holding_it():
    """hostNetwork: workers and the gang's pods all hold port 23456 (training-operator's),
    so one per node. Each node has the room, not the port: the reclaim takes the workers
    holding it on as many nodes as the gang has pods, highest index first."""
    port = (HostPort(23456),)
    hosted = shape(1, 8, ports=port)
    a = replace(
        ej("a", min=1, max=8, replicas=3), shape=hosted, worker_nodes=on((1, 1), (2, 1), (3, 1))
    )
    snapshot = scene([a], [(hosted, 2)], count=3, free=1000)
    p = plan(snapshot, policy(), NOW)
    (g,) = p.gangs
    assert (g.reason, p.decisions[0].target) == (Reason.GANG_COVERED, 1), g.message
    assert g.message.endswith("on node(s) n2, n3")


def test_a_pod_without_gpus_that_finds_no_node_keeps_the_gang_waiting_for_room():
    """The gang's GPU worker fits n1's last free GPU, its launcher (no GPU, 60 CPUs)
    fits no node: the gang does not fit (before: `fits`, its GPUs alone counted). The
    reclaim empties n2 of a's 8 workers for the launcher."""
    a = elastic("a", 1, on((1, 7), (2, 8)))
    pods = [(WORKER, 1), (shape(0, 60), 1)]
    p = plan(scene([a], pods, count=2, free=1, gpus=1), policy(), NOW)
    (g,) = p.gangs
    assert (g.reason, p.decisions[0].target) == (Reason.GANG_COVERED, 7), g.message


def test_a_job_a_later_pods_room_made_needless_keeps_its_workers():
    """Pod by pod: the gang's first pod (20 CPUs) gets room on n1 from x (priority 0, 3
    workers), its second (40 CPUs) on n2 from y (priority 5: two 32-CPU workers, a
    whole node). Once n2 is free both pods fit there: x is not restarted for nothing."""
    x = replace(ej("x", min=5, max=8, replicas=8), shape=WORKER, worker_nodes=on((1, 8)))
    y = replace(
        ej("y", min=1, max=8, replicas=3, priority=5),
        shape=shape(1, 32),
        worker_nodes=("n3", "n2", "n2"),
    )
    pods = [(shape(1, 20), 1), (shape(1, 40), 1)]
    snapshot = scene([x, y], pods, count=3, other_cpu={"n3": 32}, free=1000)
    snapshot = replace(snapshot, pending=(replace(snapshot.pending[0], priority=10),))
    p = plan(snapshot, policy(), NOW)
    assert outcome(p) == ({"x": 8, "y": 1}, Reason.GANG_COVERED), p.gangs[0].message


# ---- the greedy phase kept for the gangs behind (fit.RoomMemo) -------------------------


def _holders(jobs: list) -> list[Holder]:
    """Each job's workers above its min, highest index first (as reclaim._holder_kept)."""
    return [
        Holder(j.worker_shape, tuple(reversed(j.worker_nodes[j.min_replicas :])), priority=k % 2)
        for k, j in enumerate(jobs)
    ]


@settings(max_examples=300, deadline=None)
@given(
    full_clusters(),
    st.lists(st.sampled_from([shape(1, 8), shape(1, 30), shape(1, 60), shape(2, 8)]), max_size=4),
    st.integers(0, 6),
)
def test_room_for_gangs_behind_is_the_room_found_from_nothing(cluster, behind, gpus):
    """A gang weighed with the gangs ahead of it (their pods first, then its own) gets,
    from the greedy run the gangs ahead left in a RoomMemo, exactly the room a search
    from nothing finds: for every prefix of a queue of gangs, in order, and for pods
    that are not a prefix of what was kept (the memo is then not used)."""
    jobs, pods, count = cluster
    if not jobs:
        return
    nodes = nodes_for(jobs, count)
    holders = _holders(jobs)
    queue = [*pods, *((s, 1) for s in behind)]
    memo, key = RoomMemo(), ("holders",)
    for end in range(1, len(queue) + 1):
        prefix = tuple(queue[:end])
        kept = make_room(Placer(nodes), prefix, holders, gpus, memo=(memo, key))
        fresh = make_room(Placer(nodes), prefix, holders, gpus)
        assert kept == fresh, (end, prefix)
    other = tuple(reversed(queue))
    assert make_room(Placer(nodes), other, holders, gpus, memo=(memo, key)) == make_room(
        Placer(nodes), other, holders, gpus
    )


def test_gangs_behind_refused_gangs_do_not_search_again_what_those_ahead_found(monkeypatch):
    """G gangs, each weighed with every gang refused ahead of it: the greedy steps of the
    whole queue grow with G (each gang's own), not with G^2 (every prefix from nothing)."""
    steps = []
    real = room_module._RoomSearch._cheapest

    def counted(self, shape):
        steps.append(shape)
        return real(self, shape)

    monkeypatch.setattr(room_module._RoomSearch, "_cheapest", counted)
    gangs = 12
    jobs = []
    for pair in range(gangs):
        a, b = f"n{2 * pair + 1}", f"n{2 * pair + 2}"
        for k in range(4):
            job = ej(f"j{pair:02d}-{k}", min=1, max=8, replicas=4)
            jobs.append(replace(job, shape=WORKER, worker_nodes=(a, a, b, b)))
    nodes = nodes_for(jobs, 2 * gangs)
    holders = _holders(jobs)
    memo, key = RoomMemo(), ("holders",)
    for end in range(1, gangs + 1):
        room = make_room(Placer(nodes), ((HEAVY, 1),) * end, holders, memo=(memo, key))
        assert room.cuts is not None
    kept = len(steps)
    steps.clear()
    for end in range(1, gangs + 1):
        make_room(Placer(nodes), ((HEAVY, 1),) * end, holders)
    assert kept <= 2 * gangs < len(steps), (kept, len(steps))


@st.composite
def packed_clusters(draw):
    """2-6 nodes filled to their last CPU by the workers (1 GPU, 8 or 16 CPUs) of 2-5
    jobs, each worker's job drawn."""
    count = draw(st.integers(2, 6))
    cpus = [draw(st.sampled_from([8, 16])) for _ in range(draw(st.integers(2, 5)))]
    where: list[list[str]] = [[] for _ in cpus]
    for i in range(1, count + 1):
        left = 64
        while left >= 8:
            fits = [k for k, c in enumerate(cpus) if c <= left]
            k = draw(st.sampled_from(fits))
            where[k].append(f"n{i}")
            left -= cpus[k]
    jobs = [
        replace(ej(f"j{k}", min=1, max=64, replicas=len(w)), shape=shape(1, c))
        for k, (c, w) in enumerate(zip(cpus, where, strict=True))
        if w
    ]
    placed = [w for w in where if w]
    return [replace(j, worker_nodes=tuple(w)) for j, w in zip(jobs, placed, strict=True)], count


@settings(max_examples=400, deadline=None)
@given(packed_clusters(), st.integers(1, 2), st.sampled_from([16, 30, 40, 60]), st.integers(1, 6))
def test_alike_pods_are_pruned_as_placing_them_all_prunes(cluster, gpus, cpu, gangs):
    """_RoomSearch._prune_alike (pods of one shape, no host ports: counted, each job's
    room taken again) keeps exactly the jobs _prune_each (every pod placed again per
    job tried) keeps, from the same greedy room."""
    jobs, count = cluster
    pod = shape(gpus, cpu)
    nodes = nodes_for(jobs, count)
    search = room_module._RoomSearch(Placer(nodes), ((pod, 1),) * gangs, _holders(jobs), {})
    if not search._alike() or not search._greedy(None):
        return
    greedy = list(search.cuts)
    order = sorted(
        (h for h, cut in enumerate(greedy) if cut),
        key=lambda h: (-search.holders[h].priority, -h),
    )
    event(f"jobs giving: {min(len(order), 3)}")
    search._prune_alike(order)
    alike, search.cuts = search.cuts, list(greedy)
    search._prune_each(order)
    assert alike == search.cuts
