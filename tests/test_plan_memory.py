"""plan()'s memory (kept.PlanMemory) is a keyword argument: a plan made with its own
memory, an empty one, or the module's, after any earlier plan, is the same plan; and
`reset()` forgets what an earlier plan left."""

from __future__ import annotations

from builders import NOW
from hypothesis import given
from test_planner_properties import common, policies, snapshots

from autoscaler.plan.kept import MEMORY, PlanMemory
from autoscaler.plan.planner import plan


@common
@given(snapshots(), policies)
def test_the_plan_is_the_same_whatever_memory_it_is_handed(snapshot, pol):
    mine = PlanMemory()
    first = plan(snapshot, pol, NOW, memory=mine)
    assert plan(snapshot, pol, NOW, memory=mine) == first  # with what the first left
    assert plan(snapshot, pol, NOW, memory=PlanMemory()) == first  # with nothing
    assert plan(snapshot, pol, NOW) == first  # with the module's own


@common
@given(snapshots(), policies)
def test_reset_forgets_every_plan_before(snapshot, pol):
    mine = PlanMemory()
    plan(snapshot, pol, NOW, memory=mine)
    assert mine.jobs is not None
    mine.reset()
    assert (mine.jobs, mine.unmanaged, mine.decided, mine.in_flight) == (None, None, {}, None)
    assert MEMORY is not mine
