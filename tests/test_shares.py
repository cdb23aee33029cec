"""Sharing a cluster between queues (docs/design.md "Sharing a cluster between queues"):
idle GPUs shared out under the capacity plugin, queues below their deserved first
(shares.capacity_allotments), and lent shares given back to a waiting gang of a queue
within its own share (lenders._Lenders), under both plugins."""

from __future__ import annotations

import pytest
from builders import NOW, ago, ej, gang, policy
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core.model import (
    Bound,
    ClusterSnapshot,
    NodeGpus,
    Plugin,
    QueueState,
    VolcanoQueue,
    VolcanoView,
)
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan
from autoscaler.plan.shares import Ask, capacity_allotments


def kit(used: int = 0, count: int = 4, gpus: int = 8) -> tuple[NodeGpus, ...]:
    """`count` nodes of `gpus`, `used` GPUs bound, filling nodes in order."""
    out = []
    for i in range(count):
        u = min(gpus, max(0, used - i * gpus))
        out.append(NodeGpus(f"n{i}", gpus, u))
    return tuple(out)


def vsnap(view: VolcanoView, jobs=(), pending=()) -> ClusterSnapshot:
    queues = {q: QueueState(q, None, volcano=vq) for q, vq in view.queues.items()}
    return ClusterSnapshot(queues=queues, jobs=tuple(jobs), pending=tuple(pending), volcano=view)


def cap_queue(name: str, allocated: float, deserved: float | None, **kw) -> VolcanoQueue:
    """A queue under the capacity plugin, capability 32 of a 32-GPU cluster."""
    return VolcanoQueue(
        name,
        allocated=allocated,
        capability=32,
        real_capacity=32,
        spec_deserved=deserved,
        **kw,
    )


def targets(p):
    return {d.ref.name: (d.target, d.reason) for d in p.decisions}


# ---- capacity: idle GPUs shared out, owed ones first ---------------------------------------


@pytest.mark.parametrize(
    ("idle", "asks", "expected"),
    [
        pytest.param(
            20,
            [Ask("a", 6, 16, 1, 26, 22), Ask("b", 6, 16, 1, 26, 22)],
            {"a": 10, "b": 10},
            id="issue-each-owed-10",
        ),
        pytest.param(
            20,
            [Ask("a", 10, 8, 1, 22, 22), Ask("b", 2, 16, 1, 30, 30)],
            # b is owed 14 first; the 6 left go beyond deserved, lowest allocated/deserved
            # first: b up to a's 10/8, then both by deserved 8:16
            {"a": 1, "b": 19},
            id="below-deserved-first-then-by-deserved",
        ),
        pytest.param(
            5,
            [Ask("a", 2, 8, 1, 30, 30), Ask("b", 2, 16, 1, 30, 30), Ask("c", 0, 8, 1, 30, 5)],
            # lowest allocated/deserved first: c (0), then b (1/8), then a (1/4)
            {"a": 0, "b": 3, "c": 2},
            id="short-lowest-share-first",
        ),
        pytest.param(
            21,
            [Ask("a", 6, None, 1, 26, 22), Ask("b", 6, None, 2, 26, 22)],
            {"a": 7, "b": 14},
            id="best-effort-by-weight",
        ),
        pytest.param(
            10,
            [Ask("a", 0, None, 1, 30, 30), Ask("b", 20, 16, 1, 12, 12)],
            # b is beyond its deserved: Volcano serves best-effort queues (share 1) first
            {"a": 10, "b": 0},
            id="best-effort-before-beyond-deserved",
        ),
        pytest.param(
            20,
            [Ask("a", 0, 16, 1, 4, 30), Ask("b", 0, 16, 1, 30, 2)],
            # a's room (capability) and b's asks cap them; nobody takes what nobody asks
            {"a": 4, "b": 2},
            id="capped-by-room-and-asks",
        ),
    ],
)
def test_capacity_allotments(idle, asks, expected):
    assert capacity_allotments(idle, asks) == expected


@given(
    idle=st.integers(0, 64),
    rows=st.lists(
        st.tuples(
            st.integers(0, 32),
            st.one_of(st.none(), st.integers(1, 32)),
            st.integers(1, 4),
            st.integers(0, 40),
            st.integers(0, 40),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_allotments_never_exceed_idle_room_or_asks(idle, rows):
    asks = [Ask(f"q{i}", u, d, w, r, want) for i, (u, d, w, r, want) in enumerate(rows)]
    out = capacity_allotments(idle, asks)
    assert sum(out.values()) <= idle
    for a in asks:
        assert 0 <= out[a.name] <= max(0, min(a.room, a.want))
    # no GPU left idle while a queue still asks and has room
    if sum(out.values()) < idle:
        assert all(out[a.name] >= min(a.room, a.want) for a in asks)


def test_capacity_second_queue_grows_to_what_it_is_owed():
    """The issue's case: two queues deserved 16, capability 32, each an elastic job at 2
    (max 24) and a rigid gang of 4 running, 20 GPUs idle. Before, the first queue's job
    grew 2 -> 22 and the second held HoldNoIdleGpus; now each grows by the 10 it is owed."""
    view = VolcanoView(
        Plugin.CAPACITY,
        {"a": cap_queue("a", 6, 16), "b": cap_queue("b", 6, 16)},
        kit(used=12),
    )
    jobs = [ej("ja", queue="a", replicas=2, max=24), ej("jb", queue="b", replicas=2, max=24)]
    p = plan(vsnap(view, jobs), policy(), NOW)
    assert targets(p) == {
        "ja": (12, Reason.SCALE_UP_IDLE_GPUS),
        "jb": (12, Reason.SCALE_UP_IDLE_GPUS),
    }
    assert p.queues["a"].bound is Bound.FAIR_SHARE


def test_capacity_three_queues_each_grow_to_their_deserved():
    view = VolcanoView(
        Plugin.CAPACITY,
        {
            "a": cap_queue("a", 2, 8),
            "b": cap_queue("b", 2, 16),
            "c": cap_queue("c", 2, 8),
        },
        kit(used=6),
    )
    jobs = [ej(f"j{q}", queue=q, replicas=2, max=30) for q in "abc"]
    p = plan(vsnap(view, jobs), policy(), NOW)
    assert {n: t for n, (t, _) in targets(p).items()} == {"ja": 8, "jb": 16, "jc": 8}


def test_capacity_a_queue_that_cannot_grow_now_leaves_its_share_to_the_others():
    """A queue whose job is in cooldown asks for nothing this cycle: the idle GPUs are
    not kept for it (they would sit idle until its cooldown ends)."""
    view = VolcanoView(
        Plugin.CAPACITY,
        {"a": cap_queue("a", 2, 16), "b": cap_queue("b", 2, 16)},
        kit(used=4),
    )
    jobs = [
        ej("ja", queue="a", replicas=2, max=30, last=ago(10)),
        ej("jb", queue="b", replicas=2, max=30),
    ]
    p = plan(vsnap(view, jobs), policy(), NOW)
    assert targets(p)["ja"][1] is Reason.COOLDOWN
    assert targets(p)["jb"] == (30, Reason.SCALE_UP_IDLE_GPUS)


# ---- lent shares come back -----------------------------------------------------------------


def lent_view(plugin: Plugin, a_allocated: int, b_allocated: int, deserved=16) -> VolcanoView:
    """A grew into B's idle share: A and B fill the 32-GPU cluster."""
    if plugin is Plugin.CAPACITY:
        queues = {
            "a": cap_queue("a", a_allocated, deserved),
            "b": cap_queue("b", b_allocated, deserved),
        }
    else:
        queues = {
            "a": VolcanoQueue("a", allocated=a_allocated, request=a_allocated),
            "b": VolcanoQueue("b", allocated=b_allocated, request=b_allocated),
        }
    return VolcanoView(plugin, queues, kit(used=a_allocated + b_allocated))


@pytest.mark.parametrize("plugin", [Plugin.PROPORTION, Plugin.CAPACITY])
def test_a_gang_within_its_share_takes_back_what_its_queue_lent(plugin):
    view = lent_view(plugin, 30, 2)
    jobs = [
        ej("ja", queue="a", min=2, replicas=30, max=30),
        ej("jb", queue="b", min=2, replicas=2, max=2),
    ]
    p = plan(vsnap(view, jobs, [gang("gb", 8, queue="b")]), policy(), NOW)
    assert targets(p)["ja"] == (22, Reason.RECLAIM_FOR_QUEUE)
    d = next(d for d in p.decisions if d.ref.name == "ja")
    assert "gives back 8 GPU(s) of queue b's share to its gang ml/gb" in d.message
    g = p.gangs[0]
    assert g.reason is Reason.GANG_COVERED and [v.name for v in g.victims] == ["ja"]
    assert targets(p)["jb"][0] == 2


@pytest.mark.parametrize("active", [30, 22])
@pytest.mark.parametrize("plugin", [Plugin.PROPORTION, Plugin.CAPACITY])
def test_a_share_given_back_is_not_given_again_while_it_is_released(plugin, active):
    """The cycle after ja gave 8 back to gb (spec 22, its workers 23-30 still terminate,
    queue a still holds 30, no GPU idle yet; reclaim cooldown 0): gb is served by what ja
    releases (rule 2), ja is not shrunk again for it; as well once its status no longer
    counts them (active 22) while Volcano still does."""
    view = lent_view(plugin, 30, 2)
    jobs = [
        ej("ja", queue="a", min=2, replicas=22, active=active, max=30, last=NOW),
        ej("jb", queue="b", min=2, replicas=2, max=2),
    ]
    p = plan(vsnap(view, jobs, [gang("gb", 8, queue="b")]), policy(reclaim_cooldown_seconds=0), NOW)
    assert targets(p)["ja"][0] == 22
    g = p.gangs[0]
    assert g.reason is Reason.GANG_FITS and "being released" in g.message, g.message


@pytest.mark.parametrize("plugin", [Plugin.PROPORTION, Plugin.CAPACITY])
def test_a_gang_beyond_its_share_takes_nothing_from_other_queues(plugin):
    view = lent_view(plugin, 30, 2)
    jobs = [ej("ja", queue="a", min=2, replicas=30, max=30)]
    p = plan(vsnap(view, jobs, [gang("gb", 20, queue="b")]), policy(), NOW)
    assert targets(p)["ja"][0] == 30
    g = p.gangs[0]
    assert g.reason is Reason.GANG_UNCOVERABLE
    assert "beyond its share 16" in g.message


def test_lent_shares_keep_the_victim_rules():
    """Reclaim cooldown, lowest priority first, never below min, and only if it covers."""
    view = lent_view(Plugin.PROPORTION, 30, 2)
    jobs = [
        ej("cool", queue="a", min=1, replicas=10, max=10, last=ago(5)),
        ej("high", queue="a", min=2, replicas=10, max=10, priority=10),
        ej("low", queue="a", min=6, replicas=10, max=10),
    ]
    p = plan(vsnap(view, jobs, [gang("gb", 8, queue="b")]), policy(), NOW)
    t = targets(p)
    assert t["cool"][0] == 10  # resized 5 s ago: reclaim cooldown 60
    assert t["low"] == (6, Reason.RECLAIM_FOR_QUEUE)  # lowest priority first, down to min
    assert t["high"] == (6, Reason.RECLAIM_FOR_QUEUE)


@pytest.mark.parametrize(
    ("free_extra", "free_target", "reason", "words"),
    [
        # a lender job free to give now has enough: it gives, the cooling one stays
        (8, 12, Reason.GANG_COVERED, ""),
        # not without the cooling one: nothing taken, and the gang says whose cooldown
        # it waits for and until when (resized 5 s ago, reclaim cooldown 60 s)
        (
            4,
            20,
            Reason.GANG_UNCOVERABLE,
            "in their jobs' reclaim cooldown: it waits for ml/cool "
            "(reclaim_cooldown_seconds=60), until 2026-11-22T10:00:55Z (in 55s)",
        ),
    ],
)
def test_a_share_owed_back_takes_what_gives_now_or_says_whose_cooldown_it_waits_for(
    free_extra, free_target, reason, words
):
    view = lent_view(Plugin.PROPORTION, 30, 2)
    jobs = [
        ej("cool", queue="a", min=1, replicas=10, max=10, last=ago(5)),
        ej("free", queue="a", min=20 - free_extra, replicas=20, max=20),
    ]
    p = plan(vsnap(view, jobs, [gang("gb", 8, queue="b")]), policy(), NOW)
    assert targets(p)["cool"][0] == 10 and targets(p)["free"][0] == free_target
    g = p.gangs[0]
    assert g.reason is reason
    assert (words in g.message) if words else "cooldown" not in g.message, g.message


def test_lent_shares_do_not_come_back_when_they_cannot_cover_the_gang():
    view = lent_view(Plugin.PROPORTION, 30, 2)
    jobs = [ej("ja", queue="a", min=26, replicas=30, max=30)]  # 4 above min, gang needs 8
    p = plan(vsnap(view, jobs, [gang("gb", 8, queue="b")]), policy(), NOW)
    assert targets(p)["ja"][0] == 30
    assert p.gangs[0].reason is Reason.GANG_UNCOVERABLE


def test_capacity_best_effort_queue_takes_nothing_back():
    """Without deserved (nor guarantee) a queue is owed nothing under capacity: Volcano's
    reclaim would not preempt for it either."""
    view = lent_view(Plugin.CAPACITY, 30, 2, deserved=None)
    jobs = [ej("ja", queue="a", min=2, replicas=30, max=30)]
    p = plan(vsnap(view, jobs, [gang("gb", 8, queue="b")]), policy(), NOW)
    assert targets(p)["ja"][0] == 30
    assert "owed no share" in p.gangs[0].message


def test_replanning_after_giving_back_takes_nothing_more():
    """The victim, now releasing and in reclaim cooldown, is not taken again."""
    view = lent_view(Plugin.PROPORTION, 30, 2)
    jobs = [ej("ja", queue="a", min=2, replicas=22, active=30, max=30, last=NOW)]
    p = plan(vsnap(view, jobs, [gang("gb", 8, queue="b")]), policy(), NOW)
    assert p.actions == ()


def test_capacity_a_queue_that_holds_keeps_nothing_idle_for_itself():
    """A queue whose data is unknown holds (nothing in it grows): the idle GPUs it would
    be owed are not kept for it."""
    view = VolcanoView(
        Plugin.CAPACITY,
        {"a": cap_queue("a", 2, 16), "b": cap_queue("b", 2, 16)},
        kit(used=4),
    )
    jobs = [ej("ja", queue="a", replicas=2, max=30), ej("jb", queue="b", replicas=2, max=30)]
    s = vsnap(view, jobs)
    held = QueueState("b", None, Reason.METRICS_STALE, "stale", volcano=view.queues["b"])
    s = ClusterSnapshot(
        queues={**s.queues, "b": held}, jobs=s.jobs, pending=s.pending, volcano=view
    )
    p = plan(s, policy(), NOW)
    assert targets(p)["ja"] == (30, Reason.SCALE_UP_IDLE_GPUS)
    assert targets(p)["jb"] == (2, Reason.METRICS_STALE)


# ---- rule 3c: a borrowing queue does not turn its loan into gangs --------------------------


def borrowed_view(plugin: Plugin, deserved: float | None = 16) -> VolcanoView:
    """A holds 30 of the 32 GPUs (B 2): under proportion both weigh 1, so A keeps 16
    whoever asks; under capacity A deserves `deserved`."""
    return lent_view(plugin, 30, 2, deserved=deserved)


@pytest.mark.parametrize(
    ("plugin", "a_min", "deserved", "covered"),
    [
        # A's gangs hold 8 at its jobs' minimum: with the 4-GPU gang 12 <= 16, its own
        # elastic workers make room, as before
        (Plugin.PROPORTION, 8, 16, True),
        (Plugin.CAPACITY, 8, 16, True),
        # 14 + 4 = 18 > 16: the workers it would take are on loan; the gang waits
        (Plugin.PROPORTION, 14, 16, False),
        (Plugin.CAPACITY, 14, 16, False),
        # a best-effort capacity queue is owed nothing and lends nothing: as before
        (Plugin.CAPACITY, 14, None, True),
    ],
)
def test_a_gang_of_a_borrowing_queue_takes_no_worker_of_its_own_queue(
    plugin, a_min, deserved, covered
):
    view = borrowed_view(plugin, deserved)
    jobs = [
        ej("ja", queue="a", min=a_min, replicas=30, max=30),
        ej("jb", queue="b", min=2, replicas=2, max=2),
    ]
    p = plan(vsnap(view, jobs, [gang("ga", 4, queue="a")]), policy(), NOW)
    g = p.gangs[0]
    if covered:
        assert targets(p)["ja"] == (26, Reason.RECLAIM_FOR_PENDING)
        assert g.reason is Reason.GANG_COVERED
        return
    assert targets(p)["ja"][0] == 30  # nothing taken
    assert g.reason is Reason.GANG_UNCOVERABLE
    assert f"queue a's gangs hold {a_min} GPU(s) at their jobs' minimum" in g.message
    assert "beyond the 16 the queue keeps whoever asks" in g.message
    assert "on loan from other queues' shares" in g.blockers[0]


def test_gangs_served_in_the_same_plan_count_as_held():
    """Two gangs of A: the first (4 GPUs: 10 + 4 = 14 <= 16) takes A's workers; the
    second (4 more: 18 > 16) does not."""
    view = borrowed_view(Plugin.PROPORTION)
    jobs = [ej("ja", queue="a", min=10, replicas=30, max=30)]
    pending = [gang("g1", 4, queue="a", created=ago(90)), gang("g2", 4, queue="a")]
    p = plan(vsnap(view, jobs, pending), policy(), NOW)
    by = {g.ref.name: g for g in p.gangs}
    assert by["g1"].reason is Reason.GANG_COVERED
    assert by["g2"].reason is Reason.GANG_UNCOVERABLE
    assert "with it 18" in by["g2"].message
    assert targets(p)["ja"] == (26, Reason.RECLAIM_FOR_PENDING)


def test_a_queue_alone_keeps_the_whole_cluster():
    """One queue: it keeps every GPU whoever asks, so nothing it holds is on loan."""
    view = VolcanoView(
        Plugin.PROPORTION,
        {"a": VolcanoQueue("a", allocated=32, request=32)},
        kit(used=32),
    )
    jobs = [ej("ja", queue="a", min=28, replicas=32, max=32)]
    p = plan(vsnap(view, jobs, [gang("ga", 4, queue="a")]), policy(), NOW)
    assert targets(p)["ja"] == (28, Reason.RECLAIM_FOR_PENDING)
    assert p.gangs[0].reason is Reason.GANG_COVERED


def test_the_loan_still_comes_back_to_the_lenders_gang():
    """What A may not turn into its own gangs, B's gang (within B's share) takes back."""
    view = borrowed_view(Plugin.PROPORTION)
    jobs = [
        ej("ja", queue="a", min=14, replicas=30, max=30),
        ej("jb", queue="b", min=2, replicas=2, max=2),
    ]
    pending = [gang("ga", 4, queue="a", created=ago(90)), gang("gb", 8, queue="b")]
    p = plan(vsnap(view, jobs, pending), policy(), NOW)
    by = {g.ref.name: g for g in p.gangs}
    assert by["ga"].reason is Reason.GANG_UNCOVERABLE
    assert by["gb"].reason is Reason.GANG_COVERED
    assert targets(p)["ja"] == (22, Reason.RECLAIM_FOR_QUEUE)


@given(
    weights=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    jobs=st.lists(
        st.tuples(st.sampled_from("ab"), st.integers(1, 4), st.integers(0, 6)),
        min_size=1,
        max_size=6,
    ),
    gangs=st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 6)), min_size=1, max_size=4),
)
def test_no_gang_takes_its_own_queues_workers_beyond_what_the_queue_keeps(weights, jobs, gangs):
    """Rule 3c as an invariant: a gang covered by workers of its own queue never takes the
    queue's gangs (its jobs' minimum, before this plan) beyond its weight's part of the
    cluster among the queues with jobs."""
    ejs = [
        ej(f"j{i}", queue=q, min=m, replicas=m + extra, max=m + extra)
        for i, (q, m, extra) in enumerate(jobs)
    ]
    held = {q: float(sum(j.replicas for j in ejs if j.queue == q)) for q in "ab"}
    total = max(32, int(sum(held.values())))
    view = VolcanoView(
        Plugin.PROPORTION,
        {
            q: VolcanoQueue(q, allocated=held[q], request=held[q], weight=w)
            for q, w in zip("ab", weights, strict=True)
        },
        (NodeGpus("n0", total, int(sum(held.values()))),),
    )
    pending = [gang(f"g{i}", n, queue=q, created=ago(60 + i)) for i, (q, n) in enumerate(gangs)]
    p = plan(vsnap(view, ejs, pending), policy(), NOW)
    queue_of = {j.ref.name: j.queue for j in ejs}
    for g in p.gangs:
        if g.reason is not Reason.GANG_COVERED:
            continue
        if not any(queue_of[v.name] == g.queue for v in g.victims):
            continue
        asking = {j.queue for j in ejs} | {q for q, _ in gangs}  # the water-fill's queues
        owned = (
            total
            * weights["ab".index(g.queue)]
            / sum(w for q, w in zip("ab", weights, strict=True) if q in asking)
        )
        locked = sum(j.min_replicas for j in ejs if j.queue == g.queue)
        assert locked + g.gpus <= owned + 1e-9
