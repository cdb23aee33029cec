"""The decision log compares only the places that may have news (loop._to_compare): a
cluster that keeps its finished jobs lists tens of thousands of decisions that are the
last plan's objects again. Every place left out is one the full comparison finds no
news at."""

from __future__ import annotations

from builders import NOW
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.model import Action, Decision, ObjectRef, Plan
from autoscaler.core.reasons import Reason
from autoscaler.run.loop import _to_compare

REFS = [ObjectRef("ml", f"j{i}") for i in range(4)]


@st.composite
def decisions(draw: st.DrawFn) -> Decision:
    ref = draw(st.sampled_from(REFS))
    current = draw(st.one_of(st.none(), st.integers(1, 3)))
    target = draw(st.one_of(st.none(), st.integers(1, 3)))
    reason = draw(
        st.sampled_from([Reason.NO_IDLE_GPUS, Reason.FINISHED, Reason.SCALE_UP_IDLE_GPUS])
    )
    if current is not None and target is not None and current != target:
        return Action(ref, "q", current, target, reason, "")
    return Decision(ref, "q", current, target, reason, "")


def _news(d: Decision, before: Decision | None, dry_run: bool) -> bool:
    """The full comparison's verdict (loop.Controller._log_decisions)."""
    return (
        before is None
        or before.reason is not d.reason
        or before.target != d.target
        or (d.changed and not (dry_run and before.current == d.current))
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(decisions(), max_size=6), st.data(), st.booleans())
def test_a_place_left_out_has_no_news(pool, data, dry_run):
    last = tuple(data.draw(st.lists(st.sampled_from(pool), max_size=8))) if pool else ()
    now = list(last)
    for i in range(len(now)):  # some places another object, some the same
        if data.draw(st.booleans()):
            now[i] = data.draw(decisions())
    now += data.draw(st.lists(decisions(), max_size=3))
    if data.draw(st.booleans()):
        now = now[: data.draw(st.integers(0, len(now)))]
    places = _to_compare(Plan(NOW, tuple(now)), last, dry_run)
    assert places == sorted(set(places)) and all(0 <= i < len(now) for i in places)
    index = {p.ref: p for p in last}
    for i, d in enumerate(now):
        if i in places:
            continue
        before = last[i] if i < len(last) else None
        if before is None or before.ref is not d.ref:
            before = index.get(d.ref)
        assert not _news(d, before, dry_run), (i, d, before)


@settings(max_examples=200, deadline=None)
@given(st.lists(decisions(), max_size=8))
def test_a_plans_actions_are_its_decisions_that_change_a_job_in_order(ds):
    """Plan.actions and resized_at (found in C) as every decision read one by one finds
    them."""
    expected = tuple(a for d in ds if d.target != d.current and (a := Action.of(d)) is not None)
    p = Plan(NOW, tuple(ds))
    assert p.actions == expected
    assert p.resized_at == tuple(i for i, d in enumerate(ds) if d.target != d.current)
    assert all(isinstance(a, Action) and a.changed for a in expected)
