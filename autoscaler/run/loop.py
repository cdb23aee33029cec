"""One cycle (`Controller.run_once(now)`: sources -> plan -> actuator) and the driver that
runs it: interval, early cycles on watch events, a deadline per cycle, clean stop.

Which actuator runs (live or dry-run) is decided once, at assembly (daemon.py); the
cycle itself has no dry-run branches.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import operator
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from itertools import compress
from typing import Any, Protocol

import structlog

from autoscaler.act.actuator import Actuator, ApplyResult, Outcome
from autoscaler.core.heap import release_free_memory
from autoscaler.core.model import ClusterSnapshot, Decision, ObjectRef, Plan, Refusal, resized
from autoscaler.core.options import LoopOptions
from autoscaler.core.policy import PlannerPolicy
from autoscaler.plan import planner
from autoscaler.report.metrics import Metrics, package_version, start_at_zero
from autoscaler.report.status import (
    Cycle,
    StatusDoc,
    StatusMemo,
    WriteOutcome,
    build_status,
    with_cycle,
)

from .run_memory import RunMemory

log = structlog.get_logger("autoscaler.run.loop")

RETRY_MIN_SECONDS = 0.5  # the soonest a cycle follows one that left writes over


def _enabled(logger: Any, level: int) -> bool:
    """Whether `logger` writes at `level` (structlog's filtering loggers can tell)."""
    check = getattr(logger, "is_enabled_for", None)
    return True if check is None else bool(check(level))


_REASON = operator.attrgetter("reason")


def _to_compare(
    decisions: tuple[Decision, ...], last: tuple[Decision, ...], dry_run: bool
) -> list[int]:
    """The places of `decisions` that may have news at the info level, in order: not the
    last plan's object at that place, or (unless a dry run) a resize, said again. At
    any other place the last plan's decision is there again, unchanged and said: a
    cluster that keeps its finished jobs lists tens of thousands, found here in C."""
    places = set(compress(range(len(decisions)), map(operator.is_not, decisions, last)))
    places.update(range(len(last), len(decisions)))
    if not dry_run:
        places.update(compress(range(len(decisions)), resized(decisions)))
    return sorted(places)


class StatusSink(Protocol):
    """Takes the status document of each cycle (status_writer.StatusWriter); must not
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
                writes = [
                    WriteOutcome(
                        r.decision.ref.namespace,
                        r.decision.ref.name,
                        r.decision.ref.kind,
                        r.outcome.value,
                        r.message,
                    )
                    for r in (outcome.applied.results if outcome.applied is not None else ())
                ]
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
            for i in range(len(decisions)) if debug else _to_compare(decisions, last, dry_run):
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
            message=d.message,
        )

    def _record_applied(self, applied: ApplyResult) -> None:
        self.metrics.write_throttles.inc(applied.throttles)
        if applied.window is not None:
            self.metrics.write_window.set(applied.window)
        self.metrics.events_waiting.set(applied.events_waiting)
        for r in applied.results:
            self.metrics.writes.labels(r.outcome.value).inc()
            if r.outcome in (Outcome.APPLIED, Outcome.DRY_RUN):
                d = r.decision
                self.metrics.actions.labels(d.queue, d.direction, d.reason.value, d.ref.kind).inc()

    def follower_cycle(self, now: datetime) -> CycleResult:
        """Followers keep caches warm and serve metrics; they neither plan nor write."""

        self.health.last_cycle_start = self.clock()
        outcome = CycleResult(CycleStatus.FOLLOWER, 0.0)
        self.metrics.record_plan(Plan(now=now, decisions=()))
        self.health.last_cycle_end = self.clock()
        self.health.last_result = CycleStatus.FOLLOWER
        self.metrics.cycles.labels(CycleStatus.FOLLOWER.value).inc()
        return outcome


def idle_queues(plan: Plan) -> frozenset[str]:
    """Queues the plan left idle GPUs in (QueueSummary.idle_left_gpus)."""
    return frozenset(name for name, q in plan.queues.items() if q.idle_left_gpus > 0)


class Driver:
    """Runs cycles every `interval_seconds`, early when `trigger()` is called (debounced
    to one per `min_interval_seconds`; an urgent trigger is not held back), until
    `stop()`; a stop waits for the current cycle to finish."""

    def __init__(
        self,
        controller: Controller,
        is_leader: Callable[[], bool] = lambda: True,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        ready_check: Callable[[], bool] = lambda: True,
    ) -> None:
        self.controller = controller
        self.settings = controller.settings
        self.is_leader = is_leader
        self.wall = wall
        self.ready_check = ready_check
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._urgent = False  # an urgent trigger came since the last cycle started
        self.cycles = 0
        self.cycling = False  # a cycle is under way (a stop lets it finish within a grace)

    def trigger(self, urgent: bool = False) -> None:
        """A cycle early: after min_interval_seconds from the last one's start, or, if
        `urgent` (a job just started with idle GPUs to grow into), at once."""
        self._urgent = self._urgent or urgent
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        s, clock = self.settings, self.controller.clock
        while not self._stopping.is_set():
            started = clock()
            self._wake.clear()
            self._urgent = False
            now = self.wall()
            retry_in: float | None = None
            if self.is_leader():
                self.cycling = True
                try:
                    outcome = await self.controller.run_once(now)
                finally:
                    self.cycling = False
                if outcome.applied is not None:
                    retry_in = outcome.applied.retry_in
            else:
                self.controller.follower_cycle(now)
            self.cycles += 1
            wait = next_start(started, clock(), s, triggered=False)
            if retry_in is not None:
                # writes left over (a throttling or failing server): the next cycle comes
                # as soon as the server lets them go, not an interval later
                wait = min(wait, max(retry_in, RETRY_MIN_SECONDS))
            # wait for the interval or a trigger, then hold a trigger back to min_interval
            triggered = await self._wait(wait, self._wake)
            if triggered:
                await self._debounce(started)

    async def _debounce(self, started: float) -> None:
        """Hold a trigger back to min_interval_seconds after the last cycle's start,
        unless an urgent one comes (or a stop) meanwhile."""
        while not (self._urgent or self._stopping.is_set()):
            left = next_start(started, self.controller.clock(), self.settings, triggered=True)
            if left <= 0:
                return
            self._wake.clear()
            await self._wait(left, self._wake)

    @staticmethod
    async def _wait(seconds: float, event: asyncio.Event) -> bool:
        """Wait up to `seconds` for `event`; True if it was set."""

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()
        return event.is_set()

    # ---- probes ---------------------------------------------------------------------------

    def alive(self) -> tuple[bool, str]:
        h, s = self.controller.health, self.settings
        limit = s.interval_seconds + 2 * s.cycle_deadline_seconds + 30
        last = h.last_cycle_start if h.last_cycle_start is not None else h.started
        age = self.controller.clock() - last
        if age > limit:
            return False, f"no cycle started for {age:.0f}s (limit {limit:.0f}s)"
        return True, ""

    def ready(self) -> tuple[bool, str]:
        h, s = self.controller.health, self.settings
        if not self.ready_check():
            return False, "Kubernetes caches not current (listing, or reconnecting to the API)"
        if h.last_result is CycleStatus.FOLLOWER:
            return True, ""
        limit = s.ready_max_age_seconds or 3 * s.interval_seconds
        if h.last_good is None:
            return False, "no successful cycle yet"
        age = self.controller.clock() - h.last_good
        if age > limit:
            last = h.last_result.value if h.last_result is not None else "none"
            return False, (
                f"last successful cycle {age:.0f}s ago (limit {limit:.0f}s); last cycle: {last}"
            )
        return True, ""


def next_start(started: float, now: float, settings: LoopOptions, *, triggered: bool) -> float:
    """Seconds from `now` until the next cycle may start: the interval after the last
    start, or for an early trigger, min_interval after it (the debounce)."""

    gap = settings.min_interval_seconds if triggered else settings.interval_seconds
    return max(0.0, started + gap - now)
