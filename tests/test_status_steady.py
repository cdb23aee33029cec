"""A steady cycle's status is the last document with only its cycle section new
(report/status/build.py `_Steady`): kept only when building it afresh, from the same
snapshot, decisions, gangs, queues and writes, with the last document as the previous
one, gives the same document. Each cycle below builds it both ways (with the daemon's
memo, and with no memo at all) and the two must be equal, field for field and byte for
byte, over steady runs, resizes that move through their states, cooldowns that end,
writes that change, restarts and bounds."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from builders import NOW, ej, gang, policy, snap
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.model import ClusterSnapshot, InvalidGroup, ObjectRef, Plan
from autoscaler.plan.kept import PlanMemory
from autoscaler.plan.planner import plan
from autoscaler.report.status.build import WriteOutcome, build_status
from autoscaler.report.status.codec import dump
from autoscaler.report.status.doc import Cycle, ResizeState, StatusDoc, StatusMemo

COOLDOWN = 300
OK = Cycle("ok")


class Daemon:
    """The status of each cycle built as the daemon builds it (one memo, the last
    document as the previous) and afresh (no memo); they must be the same."""

    def __init__(self) -> None:
        self.memo = StatusMemo()
        self.previous: StatusDoc | None = None
        self.kept = 0  # cycles whose document was the last one, its cycle section new

    def step(
        self,
        s: ClusterSnapshot,
        p: Plan,
        writes: tuple[WriteOutcome, ...] = (),
        cycle: Cycle = OK,
        **kw: object,
    ) -> StatusDoc:
        args = {"max_jobs": 6, "cooldown_seconds": COOLDOWN, **kw}
        last = self.previous
        doc = build_status(s, p, cycle, last, writes, memo=self.memo, **args)  # type: ignore[arg-type]
        fresh = build_status(s, p, cycle, last, writes, **args)  # type: ignore[arg-type]
        assert doc == fresh
        assert dump(doc) == dump(fresh)
        if last is not None and doc.jobs is last.jobs and doc.gangs is last.gangs:
            self.kept += 1
        self.previous = doc
        return doc


def planned(s: ClusterSnapshot, at, memory: PlanMemory) -> Plan:
    return plan(
        s, policy(cooldown_seconds=COOLDOWN, cooldown_restart_cost_factor=0), at, memory=memory
    )


def dry_run(p: Plan) -> tuple[WriteOutcome, ...]:
    return tuple(
        WriteOutcome(a.ref.namespace, a.ref.name, a.ref.kind, "dry_run", "dry run: not written")
        for a in p.actions
    )


def cluster() -> ClusterSnapshot:
    jobs = [ej(f"grow-{i}", queue="r", max=4) for i in range(3)]
    jobs += [ej(f"held-{i}", max=4) for i in range(5)]
    return snap({"q": 0, "r": 6}, jobs, [gang("waiting", 4, queue="q", created=NOW)])


def test_a_steady_dry_run_keeps_its_document_and_it_is_the_one_built_afresh():
    s, memory, run = cluster(), PlanMemory(), Daemon()
    t = NOW
    p = planned(s, t, memory)
    writes = dry_run(p)
    first = run.step(s, p, writes)
    assert any(j.resize and j.resize.state is ResizeState.WOULD_RESIZE for j in first.jobs)
    for i in range(5):
        t += timedelta(seconds=30)
        p = planned(s, t, memory)  # the same decisions, kept by the planner
        doc = run.step(s, p, writes, Cycle("ok", duration_seconds=0.1 * i))
        assert doc.time == t and doc.cycle.duration_seconds == 0.1 * i
    # the first build stamps the new entries (their since is its now), the second keeps
    # them: from the third on the document is the last one
    assert run.kept == 4
    # the same writes as an equal tuple (not the same object) keep it too
    t += timedelta(seconds=30)
    run.step(s, planned(s, t, memory), tuple(list(writes)))
    assert run.kept == 5
    # new tuples of the same records (as the sources assemble them when any cache
    # changed) keep it as well
    t += timedelta(seconds=30)
    again = replace(s, jobs=tuple(list(s.jobs)), pending=tuple(list(s.pending)))
    run.step(again, planned(again, t, memory), writes)
    assert run.kept == 6
    # a document cut to fit its bytes (the entries cut are stamped each build: they
    # would rank later still) is kept too, once its listed entries are
    t += timedelta(seconds=30)
    p = planned(s, t, memory)
    cut = run.step(s, p, writes, max_bytes=3200)
    assert len(cut.jobs) < 6 and cut.omitted_jobs
    for _ in range(2):
        t += timedelta(seconds=30)
        run.step(s, planned(s, t, memory), writes, max_bytes=3200)
    assert run.kept == 8
    # a write that changes, a job read anew (an equal new object), an earlier now:
    # built afresh
    t += timedelta(seconds=30)
    run.step(s, planned(s, t, memory), writes[:-1])
    s2 = replace(s, jobs=(replace(s.jobs[0]), *s.jobs[1:]))
    run.step(s2, planned(s2, t + timedelta(seconds=30), memory), writes[:-1])
    run.step(s2, planned(s2, t, memory), writes[:-1])
    assert run.kept == 8


def test_a_settled_resize_leaves_the_kept_document_when_its_cooldown_ends():
    jobs = [ej("done", replicas=4, active=4, max=4, last=NOW), ej("other", max=4)]
    s, memory, run = snap({"q": 0}, jobs), PlanMemory(), Daemon()
    applied = (WriteOutcome("ml", "done", "PyTorchJob", "applied"),)
    run.step(s, planned(s, NOW, memory), applied)  # requested
    t = NOW
    states = []
    for _ in range(12):
        t += timedelta(seconds=60)
        doc = run.step(s, planned(s, t, memory))
        states.append(next(j for j in doc.jobs if j.name == "done").resize)
    assert [r.state if r else None for r in states[:3]] == [
        ResizeState.RUNNING,
        ResizeState.SETTLED,
        ResizeState.SETTLED,
    ]
    assert states[-1] is None  # its cooldown passed: built afresh, and it left
    assert run.kept >= 3


_STEP = st.tuples(
    st.sampled_from(
        [
            *("same", "same", "same", "equal-writes", "job", "settle", "applied", "dry"),
            *("restart", "bound", "bytes", "free", "replay", "reassembled", "gang-new"),
        ]
    ),
    st.integers(0, 7),
    st.sampled_from([0, 1, 30, 120, 290, 301, 600]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=15))
def test_any_sequence_of_cycles_keeps_only_the_document_built_afresh(steps):
    s, memory, run = cluster(), PlanMemory(), Daemon()
    t = NOW
    p = planned(s, t, memory)
    writes = dry_run(p)
    kw: dict[str, object] = {}
    run.step(s, p, writes)
    for what, i, dt in steps:
        t += timedelta(seconds=dt)
        j = s.jobs[i]
        if what == "job":
            s = replace(s, jobs=(*s.jobs[:i], replace(j, priority=i + 1), *s.jobs[i + 1 :]))
        elif what == "settle":  # its workers all run, resized a moment ago
            moved = replace(j, replicas=j.max_replicas, active=j.max_replicas, last_scale_time=t)
            s = replace(s, jobs=(*s.jobs[:i], moved, *s.jobs[i + 1 :]))
        elif what == "free":
            s = replace(s, queues={**s.queues, "r": replace(s.queues["r"], free_gpus=i)})
        elif what == "reassembled":  # new tuples of the same records
            s = replace(s, jobs=tuple(list(s.jobs)), pending=tuple(list(s.pending)))
        elif what == "gang-new":  # the waiting PodGroup read anew, created later
            s = replace(s, pending=tuple(replace(g, created=t) for g in s.pending))
        elif what == "restart":
            run.previous = None
        elif what == "bound":
            kw["max_jobs"] = 2 + i
        elif what == "bytes":
            kw["max_bytes"] = 1500 + 400 * i
        if what == "replay":
            p = replace(p, now=t)  # the same decisions, without the planner
        else:
            p = planned(s, t, memory)
        if what == "applied":
            writes = tuple(
                WriteOutcome(a.ref.namespace, a.ref.name, a.ref.kind, "applied") for a in p.actions
            )
        elif what == "dry":
            writes = dry_run(p)
        elif what == "equal-writes":
            writes = tuple(list(writes))
        run.step(s, p, writes, **kw)


def test_a_document_near_its_byte_bound_or_with_a_gang_stamped_is_built_afresh():
    """Kept only far from the byte bound: a longer cycle section may cut what the last
    did not. And a gang listed since the build's `now` (its PodGroup not read: an
    invalid one) would take the new `now`."""
    s, memory, run = cluster(), PlanMemory(), Daemon()
    p = planned(s, NOW, memory)
    writes = dry_run(p)
    size = len(dump(build_status(s, p, OK, None, writes, max_jobs=6, cooldown_seconds=COOLDOWN)))
    t = NOW
    for i in range(4):  # each cycle's duration written longer
        t += timedelta(seconds=30)
        run.step(
            s,
            planned(s, t, memory),
            writes,
            Cycle("ok", duration_seconds=0.1**i),
            max_bytes=size + 8,
        )
    assert run.kept == 0
    bad = InvalidGroup(
        ObjectRef("ml", "unreadable", "PodGroup"), "q", "spec.minMember: not a number"
    )
    s2 = replace(s, invalid_groups=(bad,))
    for _ in range(3):
        t += timedelta(seconds=30)
        doc = run.step(s2, planned(s2, t, memory), writes)
        assert doc.gangs[-1].since == t
    assert run.kept == 0
