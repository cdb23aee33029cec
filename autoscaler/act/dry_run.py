"""The dry-run actuator: writes nothing, says what it would write. A separate actuator,
not a flag in KubeActuator, so a dry run cannot reach the API server by any path."""

from __future__ import annotations

import operator
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

import structlog

from autoscaler.core.model import Decision, Plan

from .results import ActionResult, ApplyResult, Outcome, log_result, refusal

log = structlog.get_logger(__name__)


class DryRunActuator:
    """Writes nothing: says what it would do, in the log and optionally on `out`.

    Nothing is written, so the next cycle plans the same resizes again: each is said
    once, and again only when it changes (its size, target or reason) or after it left
    the plan; a cycle whose resizes were all said before prints one line counting them.
    A user of a dry run wants what changed, not 4,000 lines a cycle."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out
        # what was said last cycle per job: (current, target, reason)
        self._said: dict[tuple[str, str, str], tuple[int, int, str]] = {}
        # the last cycle's actions and their results: a steady plan hands over the same
        # Action objects (the planner keeps its decisions), whose result and line are
        # then the same; thousands a cycle in a dry run, where nothing is ever written
        self._last: tuple[Decision, ...] = ()
        self._results: tuple[ActionResult, ...] = ()

    async def apply(
        self, plan: Plan, now: datetime, may_write: Callable[[], bool] = lambda: True
    ) -> ApplyResult:
        actions = plan.actions
        if len(actions) == len(self._last) and all(map(operator.is_, actions, self._last)):
            # the same decisions as last cycle, each said then: nothing to say again
            if self._results and self._out is not None:
                print(
                    f"({len(self._results)} resize(s) as in the last cycle, not repeated)",
                    file=self._out,
                )
            return ApplyResult(self._results)
        results: list[ActionResult] = []
        said: dict[tuple[str, str, str], tuple[int, int, str]] = {}
        repeated = 0
        for d in actions:
            why = refusal(d)
            if why is not None:
                result = ActionResult(d, Outcome.REFUSED, why)
            else:
                result = ActionResult(d, Outcome.DRY_RUN, "dry run: not written")
            results.append(result)
            key = (d.ref.namespace, d.ref.name, d.ref.kind)
            said[key] = what = (d.current, d.target, d.reason.value)
            if self._said.get(key) == what:
                repeated += 1
                continue
            self._say(result)
        self._said = said
        self._last, self._results = actions, tuple(results)
        if repeated and self._out is not None:
            print(f"({repeated} resize(s) as in the last cycle, not repeated)", file=self._out)
        return ApplyResult(self._results)

    def _say(self, result: ActionResult) -> None:
        d = result.decision
        if result.outcome is Outcome.REFUSED:
            log_result(result)
        else:
            log.info(
                "would scale",
                namespace=d.ref.namespace,
                name=d.ref.name,
                queue=d.queue,
                reason=d.reason.value,
                outcome=result.outcome.value,
                **{"from": d.current, "to": d.target},
            )
        if self._out is not None:
            line = (
                f"would scale {d.ref.namespace}/{d.ref.name} (queue {d.queue}): "
                f"{d.current} -> {d.target} [{d.reason.value}] {d.message}"
            )
            if result.outcome is Outcome.REFUSED:
                line = f"REFUSED {d.ref.namespace}/{d.ref.name}: {result.message}"
            print(line, file=self._out)
