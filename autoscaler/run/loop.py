"""One cycle (`Controller.run_once(now)`: sources -> plan -> actuator -> status), its
result and the health stamps the probes read. When cycles run is driver.py's.

Which actuator runs (live or dry-run) is decided once, at assembly (daemon.py); the
cycle itself has no dry-run branches.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import operator
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from itertools import compress
from typing import Any, Protocol

import structlog

from autoscaler.act.results import ActionResult, Actuator, ApplyResult, Outcome
from autoscaler.core.heap import release_free_memory
from autoscaler.core.model import ClusterSnapshot, Decision, ObjectRef, Plan, Refusal
from autoscaler.core.options import LoopOptions
from autoscaler.core.policy import PlannerPolicy
from autoscaler.plan import planner
from autoscaler.report.metrics import Metrics, package_version, start_at_zero
from autoscaler.report.status.build import WriteOutcome, build_status, with_cycle
from autoscaler.report.status.doc import Cycle, StatusDoc, StatusMemo

from .run_memory import RunMemory

log = structlog.get_logger("autoscaler.run.loop")


def _enabled(logger: Any, level: int) -> bool:
    """Whether `logger` writes at `level` (structlog's filtering loggers can tell)."""
    check = getattr(logger, "is_enabled_for", None)
    return True if check is None else bool(check(level))


_REASON = operator.attrgetter("reason")
_WRITTEN = (Outcome.APPLIED, Outcome.DRY_RUN)  # the outcomes elastic_autoscaler_actions counts


def _to_compare(plan: Plan, last: tuple[Decision, ...], dry_run: bool) -> list[int]:
    """The places of the plan's decisions that may have news at the info level, in
    order: not the last plan's object at that place, or (unless a dry run) a resize,
    said again. At any other place the last plan's decision is there again, unchanged
    and said: a cluster that keeps its finished jobs lists tens of thousands, found
    here in C."""
    decisions = plan.decisions
    places = set(compress(range(len(decisions)), map(operator.is_not, decisions, last)))
    places.update(range(len(last), len(decisions)))
    if not dry_run:
        places.update(plan.resized_at)
    return sorted(places)


class StatusSink(Protocol):
    """Takes the status document of each cycle (report/status/writer.py, StatusWriter); must not
    block: the write happens elsewhere."""

    def publish(self, doc: StatusDoc) -> None: ...


class SnapshotSource(Protocol):
    """Reads the world once per cycle. Never raises for bad data: a problem becomes the
    snapshot's (or a queue's) hold reason."""

    async def read(self, now: datetime) -> ClusterSnapshot: ...


class CycleStatus(StrEnum):
    """How a cycle ended: the `result` label of elastic_autoscaler_cycles_total, the log
    line and readiness all use it."""

    OK = "ok"  # planned and every write that was tried was answered (landed, 409, 404,
    # or refused by the cluster: a fact the next plan holds on, not a failure)
    HOLD = "hold"  # the whole snapshot held (sources unusable): nothing planned
    THROTTLED = "throttled"  # writes landed while the server throttled; the rest carried
    WRITE_FAILED = "write_failed"  # planned, but writes failed (5xx, timeouts, or
    # throttled without any landing)
    ERROR = "error"  # the cycle raised: a bug, logged with its stack
    TIMEOUT = "timeout"  # the cycle ran past cycle_deadline_seconds
    FOLLOWER = "follower"  # not the leader: caches kept warm, nothing planned

    @property
    def good(self) -> bool:
        """Counts as a successful cycle for /readyz and last_success."""
        return self in (CycleStatus.OK, CycleStatus.HOLD, CycleStatus.THROTTLED)


@dataclass(frozen=True, slots=True)
class CycleResult:
    """How one cycle ended, how long it took, and its plan and writes (if it got there)."""

    result: CycleStatus
    duration_seconds: float
    plan: Plan | None = None
    applied: ApplyResult | None = None
    message: str = ""


@dataclass
class Health:
    """Monotonic stamps the HTTP probes read."""

    started: float = field(default_factory=time.monotonic)
    last_cycle_start: float | None = None
    last_cycle_end: float | None = None
    last_good: float | None = None
    last_result: CycleStatus | None = None


class Controller:
    """One cycle, `run_once(now)`: read the snapshot, plan, apply through the actuator,
    then count it (metrics), say it (the decision log) and publish the status document.
    It never decides when a cycle runs (driver.py) nor whether writes are live (the
    actuator it was given); a follower's cycle only keeps the probes and metrics current."""

    def __init__(
        self,
        settings: LoopOptions,
        policy: PlannerPolicy,
        source: SnapshotSource,
        actuator: Actuator,
        metrics: Metrics,
        may_write: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
        logger: Any = None,
        status: StatusSink | None = None,
        previous_status: StatusDoc | None = None,
        identity: str = "",
    ) -> None:
        self.settings, self.source, self.actuator, self.metrics = (
            settings,
            source,
            actuator,
            metrics,
        )
        self.policy = policy
        self.may_write = may_write
        self.clock = clock
        # the simulator runs thousands of cycles a second and passes a quiet logger
        self.log = log if logger is None else logger
        self.health = Health(started=clock())
        self._last_logged: tuple[Decision, ...] = ()
        # what the cluster refused, as the actuator remembers it (none for a dry run):
        # an input of the next plan, so a refused job stops holding its queue's share
        self.refusals: Callable[[datetime], tuple[Refusal, ...]] = getattr(
            actuator, "refusals", lambda now: ()
        )
        # the status object: each cycle's document, built from the last one (each job's
        # `since` and resize state carry over)
        self.status = status
        self.last_status = previous_status
        # what that document's build leaves for the next (a steady cycle's plan hands
        # over the same decisions: their ranks, entries and lines are taken up)
        self._status_memo = StatusMemo()
        self._identity = identity
        # queues the last plan left idle GPUs in: a gang bound there calls a cycle at once
        # (triggers.GangStarts)
        self.idle_queues: frozenset[str] = frozenset()
        # finished jobs' runs, kept after the API stops listing them (rule 3b's evidence)
        self.runs = RunMemory()
        # the last results the status read, as it read them (_writes)
        self._written: tuple[tuple[ActionResult, ...], tuple[WriteOutcome, ...]] = ((), ())
        # the last results counted for the metrics, and their counts (_record_applied)
        self._counted: tuple[tuple[ActionResult, ...], Counter[str], _Labels] = (
            (),
            Counter(),
            Counter(),
        )
        start_at_zero(metrics.cycles, [s.value for s in CycleStatus])
        start_at_zero(metrics.writes, [o.value for o in Outcome])

    async def run_once(self, now: datetime) -> CycleResult:
        """Read, plan, apply, record. Never raises except CancelledError."""

        start = self.clock()
        self.health.last_cycle_start = start
        snapshot: ClusterSnapshot | None = None
        try:
            async with asyncio.timeout(self.settings.cycle_deadline_seconds):
                snapshot = self.runs.remember(await self.source.read(now))
                refused = self.refusals(now)
                if refused:
                    snapshot = dataclasses.replace(snapshot, refusals=refused)
                plan = planner.plan(snapshot, self.policy, now)
                self.idle_queues = idle_queues(plan)
                self._log_decisions(plan)
                self.metrics.record_plan(plan)
                applied = await self.actuator.apply(plan, now, self.may_write)
            self._record_applied(applied)
            if snapshot.problem is not None:
                result = CycleStatus.HOLD
            elif not applied.ok:
                result = CycleStatus.WRITE_FAILED
            elif applied.carried:
                result = CycleStatus.THROTTLED
            else:
                result = CycleStatus.OK
            outcome = CycleResult(result, self.clock() - start, plan, applied, snapshot.message)
        except TimeoutError:
            outcome = CycleResult(
                CycleStatus.TIMEOUT,
                self.clock() - start,
                message=f"cycle exceeded {self.settings.cycle_deadline_seconds}s",
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not kill the daemon; it is logged and counted
            self.log.exception("cycle-failed")
            outcome = CycleResult(CycleStatus.ERROR, self.clock() - start, message=repr(exc))
        self._finish(outcome, now)
        self._publish_status(outcome, snapshot, now)
        # what the cycle allocated and freed (its reads, the plan it replaced, its writes'
        # answers and Events) is not held at the heap's high-water mark until the next
        release_free_memory()
        return outcome

    def _publish_status(
        self, outcome: CycleResult, snapshot: ClusterSnapshot | None, now: datetime
    ) -> None:
        """Build this cycle's status document and hand it to the writer. Never raises: a
        status that cannot be built is logged, and the cycle stands."""
        if self.status is None:
            return
        try:
            plan = outcome.plan
            cycle = Cycle(
                result=outcome.result.value,
                message=outcome.message,
                duration_seconds=outcome.duration_seconds,
                jobs=len(plan.decisions) if plan is not None else 0,
                actions=len(plan.actions) if plan is not None else 0,
                gangs=len(plan.gangs) if plan is not None else 0,
                writes={k.value: v for k, v in outcome.applied.counts().items()}
                if outcome.applied is not None
                else {},
            )
            s = self.settings
            if plan is None or snapshot is None:
                if self.last_status is None:
                    return
                doc = with_cycle(self.last_status, now, cycle)
            else:
                writes = self._writes(
                    outcome.applied.results if outcome.applied is not None else ()
                )
                doc = build_status(
                    snapshot,
                    plan,
                    cycle,
                    self.last_status,
                    writes,
                    max_jobs=s.status_max_jobs,
                    cooldown_seconds=self.policy.cooldown_seconds,
                    mode="dry-run" if s.dry_run else "live",
                    identity=self._identity,
                    version=package_version(),
                    heartbeat_seconds=s.status_heartbeat_seconds,
                    memo=self._status_memo,
                )
            self.last_status = doc
            self.status.publish(doc)
        except Exception:
            self.log.exception("status.build_failed")

    def _writes(self, results: tuple[ActionResult, ...]) -> tuple[WriteOutcome, ...]:
        """The writes as the status reads them; the last cycle's for the same results (a
        dry run's steady cycle: the status then sees the same writes, and keeps its
        document)."""
        if results is not self._written[0]:
            written = tuple(
                WriteOutcome(
                    r.decision.ref.namespace,
                    r.decision.ref.name,
                    r.decision.ref.kind,
                    r.outcome.value,
                    r.message,
                )
                for r in results
            )
            self._written = (results, written)
        return self._written[1]

    def _finish(self, outcome: CycleResult, now: datetime) -> None:
        end = self.clock()
        self.health.last_cycle_end = end
        self.health.last_result = outcome.result
        self.metrics.cycles.labels(outcome.result.value).inc()
        self.metrics.cycle_duration.observe(outcome.duration_seconds)
        if outcome.result.good:
            self.health.last_good = end
            self.metrics.last_success.set(now.timestamp())
        summary: dict[str, Any] = {
            "result": outcome.result.value,
            "duration_s": round(outcome.duration_seconds, 4),
        }
        if outcome.plan is not None:
            counted = Counter(map(_REASON, outcome.plan.decisions))  # in C: 60k at 50k finished
            summary.update(
                jobs=len(outcome.plan.decisions),
                actions=len(outcome.plan.actions),
                gangs=len(outcome.plan.gangs),
                reasons={r.value: n for r, n in counted.items()},
            )
        if outcome.applied is not None:
            summary["writes"] = {k.value: v for k, v in outcome.applied.counts().items()}
        if outcome.message:
            summary["message"] = outcome.message
        quiet = outcome.result.good or outcome.result is CycleStatus.FOLLOWER
        level = self.log.info if quiet else self.log.error
        level("cycle", **summary)

    def _log_decisions(self, plan: Plan) -> None:
        """One line per decision whose reason or target changed since the last cycle (every
        action is logged); the rest at debug, so a steady cluster does not flood the log:
        the lines of a cycle grow with what changed, not with the jobs. (The status
        object and the metrics still say where every job stands.)"""

        # a line's fields are built only when it will be written: at 10k jobs a steady
        # cycle would otherwise build 10k dicts for the debug level nobody has on. The
        # last plan's decisions are what we compare with, kept as they are: a plan lists
        # its jobs in a stable order, and a job's ref is the same object from one cycle
        # to the next (the caches keep parsed jobs), so the same place holds the same job
        # and no per-job key or index is built (at 20k jobs, building them cost more
        # than the comparing, and a full garbage collection a cycle)
        info, debug = _enabled(self.log, logging.INFO), _enabled(self.log, logging.DEBUG)
        dry_run = self.settings.dry_run
        if info or debug:
            last = self._last_logged
            index: dict[ObjectRef, Decision] | None = None
            decisions = plan.decisions
            for i in range(len(decisions)) if debug else _to_compare(plan, last, dry_run):
                d = decisions[i]
                before = last[i] if i < len(last) else None
                if before is None or before.ref is not d.ref:
                    if index is None:
                        index = {p.ref: p for p in last}
                    before = index.get(d.ref)
                news = (
                    before is None
                    or before.reason is not d.reason
                    or before.target != d.target
                    # an action again: a write that failed, or (dry run: nothing is
                    # written) the same resize planned again, said once
                    or (d.changed and not (dry_run and before.current == d.current))
                )
                if news or debug:
                    self._log_decision(d, news)
        if debug:
            for g in plan.gangs:
                self.log.debug(
                    "gang",
                    namespace=g.ref.namespace,
                    name=g.ref.name,
                    queue=g.queue,
                    gpus=g.gpus,
                    reason=g.reason.value,
                    message=g.message,
                )
        self._last_logged = plan.decisions

    def _log_decision(self, d: Decision, news: bool) -> None:
        (self.log.info if news else self.log.debug)(
            "decision",
            namespace=d.ref.namespace,
            name=d.ref.name,
            queue=d.queue,
            reason=d.reason.value,
            current=d.current,
            target=d.target,
            gpus=d.gpus,
            message=d.message,
        )

    def _record_applied(self, applied: ApplyResult) -> None:
        self.metrics.write_throttles.inc(applied.throttles)
        if applied.window is not None:
            self.metrics.write_window.set(applied.window)
        self.metrics.events_waiting.set(applied.events_waiting)
        # counted per label set first, then one inc() each: a dry run plans thousands of
        # resizes a cycle, and each labels().inc() takes a lock and a dict lookup
        # (a dry run's steady cycle hands the same results again: counted once)
        if applied.results is not self._counted[0]:
            self._counted = (applied.results, *_by_labels(applied.results))
        _, writes, actions = self._counted
        for outcome, n in writes.items():
            self.metrics.writes.labels(outcome).inc(n)
        for labels, n in actions.items():
            self.metrics.actions.labels(*labels).inc(n)

    def follower_cycle(self, now: datetime) -> CycleResult:
        """Followers keep caches warm and serve metrics; they neither plan nor write."""

        self.health.last_cycle_start = self.clock()
        outcome = CycleResult(CycleStatus.FOLLOWER, 0.0)
        self.metrics.record_plan(Plan(now=now, decisions=()))
        self.health.last_cycle_end = self.clock()
        self.health.last_result = CycleStatus.FOLLOWER
        self.metrics.cycles.labels(CycleStatus.FOLLOWER.value).inc()
        return outcome


_Labels = Counter[tuple[str, str, str, str]]


def _by_labels(results: tuple[ActionResult, ...]) -> tuple[Counter[str], _Labels]:
    """The results counted per label set: writes by outcome, and actions written (or a
    dry run's) by queue, direction, reason and kind."""
    writes: Counter[str] = Counter()
    actions: _Labels = Counter()
    for r in results:
        writes[r.outcome.value] += 1
        if r.outcome in _WRITTEN:
            d = r.decision
            actions[d.queue, d.direction, d.reason.value, d.ref.kind] += 1
    return writes, actions


def idle_queues(plan: Plan) -> frozenset[str]:
    """Queues the plan left idle GPUs in (QueueSummary.idle_left_gpus)."""
    return frozenset(name for name, q in plan.queues.items() if q.idle_left_gpus > 0)
