"""What a cycle does once per action, done in bulk: the write and action counters take
one inc() per label set (the same values as one per result), and a dry run's actuator
answers a plan of the same Action objects with the last cycle's results (the same
results, said once)."""

from __future__ import annotations

import io
from collections import Counter
from datetime import timedelta

from builders import NOW, ej, snap

from autoscaler.act.dry_run import DryRunActuator
from autoscaler.act.results import ActionResult, ApplyResult, Outcome
from autoscaler.core.model import Action, ClusterSnapshot, ObjectRef, Plan
from autoscaler.core.reasons import Reason
from autoscaler.plan.kept import PlanMemory
from autoscaler.plan.planner import plan
from autoscaler.report.metrics import Metrics
from autoscaler.run.loop import Controller
from autoscaler.settings import Settings


class _Fixed:
    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot

    async def read(self, now):
        return self.snapshot


def _action(i: int, queue: str, up: bool, reason: Reason = Reason.SCALE_UP_IDLE_GPUS) -> Action:
    ref = ObjectRef("ml", f"j{i}", "PyTorchJob" if i % 3 else "PaddleJob")
    current, target = (2, 4) if up else (4, 2)
    return Action(ref, queue, current, target, reason, "", 1, 8, 1)


def _samples(metrics: Metrics, name: str) -> dict[tuple[str, ...], float]:
    found = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == name and s.value:
                found[tuple(sorted(s.labels.items()))] = s.value
    return found


def test_the_counters_count_per_label_set_what_one_inc_per_result_counts() -> None:
    outcomes = [Outcome.APPLIED, Outcome.DRY_RUN, Outcome.CONFLICT, Outcome.REFUSED]
    results = tuple(
        ActionResult(_action(i, "qr"[i % 2], i % 5 != 0), outcomes[i % 4]) for i in range(40)
    )
    settings = Settings()
    controller = Controller(
        settings.loop_options(),
        settings.planner_policy(),
        _Fixed(snap()),
        DryRunActuator(),
        metrics := Metrics(),
    )
    reference = Metrics()
    for rounds in (1, 2, 3):
        # the same results object twice (counted once, counts reused), then an equal one
        applied = ApplyResult(results if rounds < 3 else tuple(list(results)))
        controller._record_applied(applied)
        for r in applied.results:  # as it was: one labels().inc() per result
            reference.writes.labels(r.outcome.value).inc()
            if r.outcome in (Outcome.APPLIED, Outcome.DRY_RUN):
                d = r.decision
                reference.actions.labels(d.queue, d.direction, d.reason.value, d.ref.kind).inc()
        for name in ("elastic_autoscaler_writes_total", "elastic_autoscaler_actions_total"):
            assert _samples(metrics, name) == _samples(reference, name)
            assert _samples(metrics, name)  # something was counted


async def test_a_dry_run_answers_the_same_actions_with_the_same_results() -> None:
    grows = [ej(f"g{i}", replicas=1, max=3) for i in range(4)]
    s = snap({"q": 8}, [*grows, ej("bad", min=4, replicas=1, max=2)])
    memory, out = PlanMemory(), io.StringIO()
    dry = DryRunActuator(out)
    p1 = plan(s, Settings().planner_policy(), NOW, memory=memory)
    first = await dry.apply(p1, NOW)
    p2 = plan(s, Settings().planner_policy(), NOW + timedelta(seconds=5), memory=memory)
    assert all(a is b for a, b in zip(p2.actions, p1.actions, strict=True))
    again = await dry.apply(p2, NOW)
    fresh = await DryRunActuator().apply(p2, NOW)  # one that saw no plan before
    assert again.results == fresh.results == first.results
    assert again.results is first.results  # taken up, not made again
    lines = out.getvalue().splitlines()
    assert sum(line.startswith(("would scale", "REFUSED")) for line in lines) == len(p1.actions)
    assert lines[-1] == f"({len(p1.actions)} resize(s) as in the last cycle, not repeated)"
    # a plan with other objects (or fewer actions) goes through each action again
    third = await dry.apply(Plan(now=NOW, decisions=p2.decisions[1:]), NOW)
    assert third.results == fresh.results[1:] and third.results is not first.results
    assert Counter(r.outcome for r in third.results) == Counter(
        r.outcome for r in fresh.results[1:]
    )
