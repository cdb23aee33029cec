"""What a daemon's status keeps from one cycle to the next (status.StatusMemo): a status
built with the memo is the one built without it, field for field and byte for byte,
over a sequence of cycles where decisions are kept (the planner hands over the same
Decision objects) and where the jobs, the writes, the history, the time, the bounds
and the decisions change under them. Each step below changes one input a memo could
miss: a memo that returns a stale entry, rank or line fails it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from datetime import timedelta

from builders import NOW, ej, gang, policy, snap
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.model import ClusterSnapshot, Decision, ObjectRef, Plan, QueueState
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan
from autoscaler.report.status.build import WriteOutcome, build_status
from autoscaler.report.status.codec import dump, to_dict
from autoscaler.report.status.doc import Cycle, ResizeState, StatusDoc, StatusMemo
from autoscaler.report.status.split import _patched, split_named

OK = Cycle("ok")
COOLDOWN = 300
_LAST = object()  # the previous document is the last one built


def reference_dump(doc: StatusDoc) -> str:
    """status.dump as it was before the memo (the whole header through json's indented
    writer): the bytes a ConfigMap holds must not change."""
    data = to_dict(doc)
    lists = {key: data.pop(key) for key in ("gangs", "jobs")}
    omitted = data.pop("omitted")
    parts = [json.dumps(data, indent=1, ensure_ascii=False)[:-2]]
    for key, items in lists.items():
        rows = ",\n".join("  " + json.dumps(i, ensure_ascii=False) for i in items)
        parts.append(f' "{key}": [\n{rows}\n ]' if items else f' "{key}": []')
    parts.append(f' "omitted": {json.dumps(omitted)}')
    return ",\n".join(parts) + "\n}\n"


class Cycles:
    """Each cycle's status built twice: with one memo kept across the cycles, as the
    daemon builds it, and with none; the two must be the same document."""

    def __init__(self) -> None:
        self.memo = StatusMemo()
        self.previous: StatusDoc | None = None

    def step(
        self,
        snapshot: ClusterSnapshot,
        p: Plan,
        writes: tuple[WriteOutcome, ...] = (),
        previous: object = _LAST,
        **kw: object,
    ) -> StatusDoc:
        prev = self.previous if previous is _LAST else previous
        assert prev is None or isinstance(prev, StatusDoc)
        args = {"max_jobs": 5, "cooldown_seconds": COOLDOWN, **kw}
        kept = build_status(snapshot, p, OK, prev, writes, memo=self.memo, **args)  # type: ignore[arg-type]
        fresh = build_status(snapshot, p, OK, prev, writes, **args)  # type: ignore[arg-type]
        assert kept == fresh
        text = reference_dump(fresh)
        assert dump(kept) == text
        assert dump(kept, self.memo) == text
        self.previous = kept
        return kept


def planned(snapshot: ClusterSnapshot, at) -> Plan:
    return plan(snapshot, policy(cooldown_seconds=COOLDOWN, cooldown_restart_cost_factor=0), at)


def applied(p: Plan) -> tuple[WriteOutcome, ...]:
    return tuple(
        WriteOutcome(a.ref.namespace, a.ref.name, a.ref.kind, "applied") for a in p.actions
    )


def with_free(s: ClusterSnapshot, free: dict[str, float]) -> ClusterSnapshot:
    return replace(s, queues={q: QueueState(q, v) for q, v in free.items()})


def entry(doc: StatusDoc, name: str):
    (found,) = [j for j in doc.jobs if j.name == name]
    return found


def test_a_status_built_with_the_memo_is_the_one_built_without_over_changing_cycles():
    held = [ej(f"held-{i}", max=4) for i in range(3)]  # no idle GPUs in q
    at_max = [ej(f"full-{i}", min=2, replicas=2, max=2) for i in range(2)]
    pending = [gang("waiting", 4, queue="q")]
    run = Cycles()

    # 0: "grows" is resized (written); the rest hold
    first = snap({"q": 0, "r": 2}, [*held, *at_max, ej("grows", queue="r", max=4)], pending)
    p = planned(first, NOW)
    doc = run.step(first, p, applied(p))
    assert entry(doc, "grows").resize.state is ResizeState.REQUESTED

    # 1: its workers start (a new job object); the others are the same objects
    t = NOW + timedelta(minutes=1)
    starting = ej("grows", queue="r", replicas=4, active=2, max=4, last=NOW)
    s1 = with_free(replace(first, jobs=(*first.jobs[:-1], starting)), {"q": 0, "r": 0})
    run.step(s1, planned(s1, t))

    # 2: nothing changed: the same decisions, and the last cycle's entries taken up
    t += timedelta(minutes=1)
    before = run.previous
    p2 = planned(s1, t)
    doc = run.step(s1, p2)
    assert before is not None
    assert all(a is b for a, b in zip(doc.jobs, before.jobs, strict=True))

    # 3-4: running, then settled (new resize states of the same decision and job)
    running = replace(starting, active=4)
    s3 = replace(s1, jobs=(*s1.jobs[:-1], running))
    for _ in range(2):
        t += timedelta(minutes=1)
        doc = run.step(s3, planned(s3, t))
    assert entry(doc, "grows").resize.state is ResizeState.SETTLED

    # 5: the cooldown of that resize has passed: only its resize state changes
    t = NOW + timedelta(seconds=COOLDOWN + 1)
    p5 = planned(s3, t)
    doc = run.step(s3, p5)
    assert entry(doc, "grows").resize is None

    # 6: the same decisions over a job that changed (another priority and active count)
    changed_job = replace(held[0], priority=7, active=1)
    s6 = replace(s3, jobs=(changed_job, *s3.jobs[1:]))
    doc = run.step(s6, replace(p5, now=t + timedelta(minutes=1)))
    assert (entry(doc, "held-0").priority, entry(doc, "held-0").active) == (7, 1)

    # 7: a restarted daemon (no last document): the same decisions, every since anew
    t7 = t + timedelta(minutes=2)
    doc = run.step(s6, replace(p5, now=t7), previous=None)
    assert all(j.since == t7 for j in doc.jobs)

    # 8: idle GPUs again: other decisions, one write refused, the queues' numbers moved
    t += timedelta(minutes=3)
    s8 = with_free(s6, {"q": 3, "r": 0})
    p8 = planned(s8, t)
    denied = WriteOutcome("ml", "held-1", "PyTorchJob", "denied", "HTTP 403 Forbidden: no")
    doc = run.step(s8, p8, (*applied(p8), denied))
    assert entry(doc, "held-1").resize.state is ResizeState.REJECTED

    # 9-10: fewer listed, then cut by bytes, then as many as before, over the same plan
    p9 = replace(p8, now=t + timedelta(minutes=1))
    run.step(s8, p9, max_jobs=2)
    run.step(s8, p9, max_bytes=2500)
    doc = run.step(s8, p9)
    assert len(doc.jobs) == 5
    # 11-12: no history either time (the same names: none), another bound
    run.step(s8, p9, previous=None, max_jobs=2)
    doc = run.step(s8, p9, previous=None)
    assert len(doc.jobs) == 5


def test_the_memo_takes_up_a_queue_only_with_the_same_json():
    jobs = [ej("a", max=4), ej("b", queue="ü-team", max=4)]  # not ASCII: written as is
    run = Cycles()
    s = snap({"q": 0, "ü-team": 2}, jobs)
    run.step(s, planned(s, NOW))
    for free in (2, 2.5, 0, 0):
        moved = with_free(s, {"q": 0, "ü-team": free})
        run.step(moved, planned(moved, NOW + timedelta(minutes=1)))
    empty = snap({}, [])
    doc = run.step(empty, planned(empty, NOW + timedelta(minutes=2)))
    assert doc.queues == {} and dump(doc) == reference_dump(doc)


def test_a_steady_cycle_of_many_jobs_takes_up_the_entries_and_lines():
    jobs = [ej(f"j{i:03d}", max=4) for i in range(200)]
    s = snap({"q": 0}, jobs)
    run = Cycles()
    first = run.step(s, planned(s, NOW), max_jobs=50)
    second = run.step(s, planned(s, NOW + timedelta(minutes=1)), max_jobs=50)
    assert [j.name for j in second.jobs] == [j.name for j in first.jobs]
    assert all(a is b for a, b in zip(second.jobs, first.jobs, strict=True))
    assert set(run.memo.rows) == {id(j) for j in second.jobs}


# one step of a random sequence: what changes before the cycle, and on which job
_STEPS = st.tuples(
    st.sampled_from(["same", "job", "free", "write", "restart", "bound", "old-plan"]),
    st.integers(0, 7),
    st.integers(0, 3),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(_STEPS, min_size=1, max_size=12))
def test_any_sequence_of_cycles_gives_the_status_built_without_the_memo(steps):
    jobs = [ej(f"j{i}", queue="qr"[i % 2], max=2 + i % 4, replicas=1 + i % 2) for i in range(8)]
    s = snap({"q": 0, "r": 1}, jobs, [gang("g", 2, queue="r")])
    run, t, max_jobs = Cycles(), NOW, 4
    p = planned(s, t)
    run.step(s, p, max_jobs=max_jobs)
    outcomes = ["applied", "denied", "conflict", "dry_run", "gone"]
    for what, i, n in steps:
        t += timedelta(seconds=40)
        writes: tuple[WriteOutcome, ...] = ()
        previous: object = _LAST
        if what in ("job", "old-plan"):  # a new object for one job (old-plan: same decisions)
            j = s.jobs[i]
            s = replace(s, jobs=(*s.jobs[:i], replace(j, active=n, priority=n), *s.jobs[i + 1 :]))
        elif what == "free":
            s = with_free(s, {"q": float(n), "r": 1.0})
        elif what == "restart":
            previous = None
        elif what == "bound":
            max_jobs = 1 + n
        p = replace(p, now=t) if what == "old-plan" else planned(s, t)
        if what == "write":
            j = s.jobs[i]
            writes = (WriteOutcome("ml", j.ref.name, j.ref.kind, outcomes[n % 5], "HTTP 403 no"),)
        run.step(s, p, writes, previous, max_jobs=max_jobs)


def test_an_entry_listed_twice_is_dumped_twice():
    s = snap({"q": 0}, [ej("a", max=4)])
    doc = build_status(s, planned(s, NOW), OK)
    twice = replace(doc, jobs=(doc.jobs[0], doc.jobs[0]))
    memo = StatusMemo()
    assert dump(twice, memo) == dump(twice, memo) == reference_dump(twice)


# ---- the split patched where a few decisions moved (status/split.py) -------------------

_REASONS = [Reason.FINISHED, Reason.AT_MAX, Reason.NO_IDLE_GPUS, Reason.SCALE_UP_IDLE_GPUS]
_REASONS += [Reason.GANG_STARVING, Reason.INVALID_SPEC]
# one decision made new: (its place, its reason, its target's step from current, its queue)
_MOVES = st.lists(
    st.tuples(
        st.integers(0, 10_000),
        st.sampled_from(_REASONS),
        st.integers(-1, 1),
        st.sampled_from(["q", "r"]),
    ),
    max_size=12,
)


def _decisions(n: int, seed: int) -> tuple[Decision, ...]:
    out = []
    for i in range(n):
        reason = _REASONS[(i * 7 + seed) % len(_REASONS)]
        ref = ObjectRef(f"ns-{(i + seed) % 3}", f"job-{i}", "PyTorchJob", f"uid-{i}")
        current = 1 + i % 4
        target = current + (1 if reason is Reason.SCALE_UP_IDLE_GPUS else 0)
        out.append(Decision(ref, "qr"[i % 2], current, target, reason, f"m{i}"))
    return tuple(out)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 120),
    seed=st.integers(0, 6),
    max_jobs=st.integers(1, 30),
    named_every=st.integers(2, 40),
    cycles=st.lists(_MOVES, min_size=1, max_size=6),
)
def test_a_split_and_counts_patched_where_decisions_moved_are_those_made_anew(
    n, seed, max_jobs, named_every, cycles
):
    decisions = _decisions(n, seed)
    named = frozenset(f"job-{i}" for i in range(0, n, named_every))
    memo = StatusMemo()
    memo.take_up(decisions)
    split_named(decisions, named, max_jobs, memo)
    memo.counts = Counter((d.queue, d.reason) for d in decisions)
    for moves in cycles:
        changed = list(decisions)
        for place, reason, step, queue in moves:
            if n:
                d = changed[place % n]
                target = None if reason is Reason.INVALID_SPEC else (d.current or 0) + step
                changed[place % n] = replace(d, reason=reason, target=target, queue=queue)
        last = memo.split
        moved = {i: decisions[i] for i in range(n) if changed[i] is not decisions[i]}
        decisions = tuple(changed)
        memo.take_up(decisions)
        got = split_named(decisions, named, max_jobs, memo)
        fresh = split_named(decisions, named, max_jobs, None)
        assert (got.named_at, got.first()) == (fresh.named_at, fresh.first())
        counted = Counter((d.queue, d.reason) for d in decisions)
        assert memo.counts in (None, counted)  # None: forgotten, counted anew
        memo.counts = counted
        assert last is not None
        patched = _patched(last, moved, decisions) if moved else last
        if patched is not None:  # the patch alone gives the same
            assert (patched.named_at, patched.first()) == (fresh.named_at, fresh.first())
        else:  # only a cut split left with too few kept is made anew
            assert last.cut and len(last.kept) - len(moved) < max_jobs


def test_a_steady_cycle_with_a_few_decisions_moved_patches_the_split():
    decisions = _decisions(1000, 0)
    memo = StatusMemo()
    memo.take_up(decisions)
    first = split_named(decisions, frozenset(), 10, memo)
    assert first.cut and len(first.kept) == 20
    # a message that counts seconds: new objects, the same ranks
    moved = tuple(
        replace(d, message="later") if i % 100 == 0 else d for i, d in enumerate(decisions)
    )
    memo.take_up(moved)
    assert set(memo.moved or {}) == set(range(0, 1000, 100))
    second = split_named(moved, frozenset(), 10, memo)
    assert second.first() == first.first() and memo.moved is None
    # moved again before the split was patched (a status that failed half-way): made anew
    memo.take_up(decisions)
    memo.take_up(moved)
    assert memo.split is None and memo.moved is None
    assert split_named(moved, frozenset(), 10, memo).first() == first.first()
    # one in eight moved or more: made anew
    many = tuple(replace(d, message="x") if i % 7 == 0 else d for i, d in enumerate(moved))
    memo.take_up(many)
    assert memo.split is None and memo.moved is None and memo.counts is None
