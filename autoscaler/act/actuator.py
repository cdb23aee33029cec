"""Apply a Plan to the cluster: patch each changed job's worker replicas (as its kind says), then
record an Event on it. Dry-run is a different actuator, not a flag in this one.

Errors are typed by what the caller does next:
- conflict (409): the job changed; the next cycle plans on fresh data;
- gone (404): nothing to do;
- denied (403, 422, other 4xx): the cluster refused this resize (an admission policy or
  webhook, validation, RBAC). A fact, not a failure: it is remembered (`refusals()`),
  the next plan holds the job (HoldRefused) and gives its share to the rest of its
  queue, and one Warning Event on the job says why;
- throttled (429, or 503 with Retry-After): the write is sent again after Retry-After,
  in plan order, while the window of writes in flight shrinks (`pacing.py`); what does
  not fit in this cycle's write budget is carried to an early next cycle;
- error (5xx, timeout, unreachable): the server's failure when no other write landed
  around it (every write pauses, 1 s doubling, and the first write that lands ends it),
  else the job's own (that job backs off, 10 s doubling to 5 min).
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.client.redact import remember_client
from autoscaler.core.model import Decision, Measurement, ObjectRef, Plan, Refusal
from autoscaler.core.options import ActuatorOptions
from autoscaler.core.resources import MERGE_PATCH, rfc3339
from autoscaler.read.fields import measured_value
from autoscaler.read.kinds import KINDS, JobKind, Write

from .events import EventRecorder, _Event, _event_ref, _Run
from .pacing import Attempt, Item, LeaseFenced, Pacer, Verdict, drain, fenced
from .results import (
    ActionResult,
    ApplyResult,
    JobKey,
    Outcome,
    _classify,
    _Failure,
    log_result,
    refusal,
)

log = structlog.get_logger(__name__)


BACKOFF_INITIAL_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
# A failure within this long of another write landing is the job's own, not the server's
# (writes in flight together land and fail within milliseconds of each other).
SERVER_UP_RECENT_SECONDS = 2.0
WRITE_BUDGET_FRACTION = 0.5  # of cycle_deadline_seconds: writes never time a cycle out


def _ref_order(ref: ObjectRef) -> tuple[str, str, str]:
    return (ref.namespace, ref.name, ref.kind)


@dataclass(frozen=True, slots=True)
class _Backoff:
    """A job backing off from its own failures: how many, until when, and when the
    last one came (pacer clock)."""

    failures: int
    until: datetime
    at: float  # pacer clock time of the last failure


class KubeActuator(EventRecorder):
    """Writes the plan's actions to the API server in plan order, as many at a time as the
    server's answers allow (at most `max_parallel_writes`), each followed by an Event on its
    job (beside the window while the server keeps up; the Events are EventRecorder's,
    events.py)."""

    def __init__(
        self,
        settings: ActuatorOptions,
        api_client: client.ApiClient,
        component: str = "elastic-autoscaler",
        kinds: tuple[JobKind, ...] = KINDS,
        pacer: Pacer | None = None,
    ) -> None:
        self._settings = settings
        self._kinds = {k.resource.kind: k for k in kinds}
        # Any: we send plain dict bodies and a merge-patch content type (the client takes
        # both); its type hints want model objects and know no _content_type
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._api: Any = api_client
        remember_client(api_client.configuration)
        self._component = component
        self._instance = settings.identity or socket.gethostname()
        self._backoff: dict[JobKey, _Backoff] = {}
        # the server's state outlives a cycle: the window and any pause carry over
        self.pacer = pacer or Pacer(settings.max_parallel_writes)
        self._refusals: dict[JobKey, Refusal] = {}
        self._events: deque[_Event] = deque()
        self.events_dropped = 0  # carried Events dropped (queue full or failing): ever
        self._landed_at: float | None = None  # pacer clock of the last write that landed
        self._down_since: float | None = None  # pacer clock of the server's first failure
        # jobs whose failures paused every write: (pacer clock of the failure, cycle time)
        self._suspects: dict[JobKey, tuple[float, datetime]] = {}
        # a throttled write carried over is not sent before its Retry-After (pacer clock)
        self._not_before: dict[JobKey, float] = {}
        # the warnings already said on each job (a Warning Event once, again if it changes)
        self._warned: dict[JobKey, tuple[str, ...]] = {}
        # seconds a write may still be sent or awaited under this replica's Lease (the
        # elector's lease_left, connected by run.wiring); None: not fenced (no election)
        self.lease_left: Callable[[], float | None] = lambda: None

    def key(self, ref: ObjectRef) -> JobKey:
        """The job's identity: its kind's API group and kind, namespace and name."""
        kind = self._kinds.get(ref.kind)
        return (kind.resource.group if kind else "", ref.kind, ref.namespace, ref.name)

    def backoff_until(self, ref: ObjectRef) -> datetime | None:
        """When the job may be written again after its own failures; None: not backing off."""
        entry = self._backoff.get(self.key(ref))
        return entry.until if entry else None

    def refusals(self, now: datetime) -> tuple[Refusal, ...]:
        """Resizes the cluster refused within refusal_retry_seconds: the next snapshot
        carries them, so the plan holds those jobs (until they change) and grows the rest
        of their queue instead. Older ones are forgotten: the job is tried once more."""
        horizon = now - timedelta(seconds=self._settings.refusal_retry_seconds)
        for key in [k for k, r in self._refusals.items() if r.at <= horizon]:
            del self._refusals[key]
        return tuple(sorted(self._refusals.values(), key=lambda r: _ref_order(r.ref)))

    async def apply(
        self, plan: Plan, now: datetime, may_write: Callable[[], bool] = lambda: True
    ) -> ApplyResult:
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        self._forget_old_backoffs(now)
        self._warn(plan, now, may_write)
        measured = {m.ref: m for m in plan.measurements}
        if not plan.actions and not self._events:
            await self._record(measured.values(), now, may_write)
            return ApplyResult(window=self.pacer.window)
        run = _Run(now, may_write, plan.actions)
        throttles = self.pacer.throttles
        clock = self.pacer.clock
        until = clock() + WRITE_BUDGET_FRACTION * self._settings.cycle_deadline_seconds
        drained = await drain(
            self.pacer, self._items(run, measured), until, lambda *_: self._new_events(run)
        )
        retry_at = self._carry_left(run, drained.left)
        for ev in run.new_events:  # refused or landed as the drain stopped
            self._carry(ev)
        retry_in: float | None = None
        if drained.left or self._events or self.pacer.down:
            ready_in = 0.0 if retry_at is None else max(0.0, retry_at - clock())
            retry_in = max(self.pacer.retry_in(), ready_in)
        results = tuple(run.results[i] for i in sorted(run.results))
        for r in results:
            log_result(r)
        if not drained.left and not self.pacer.down:
            # what was measured of jobs not resized now (a resize carries its own)
            await self._record(measured.values(), now, lambda: run.leading and may_write())
        return ApplyResult(
            results,
            retry_in=retry_in,
            throttles=self.pacer.throttles - throttles,
            window=self.pacer.window,
            events_waiting=len(self._events),
        )

    def _items(self, run: _Run, measured: dict[ObjectRef, Measurement]) -> list[Item]:
        """The writes to drain: resizes first, in plan order (a job whose failure paused
        writes goes last, so the write that probes a recovering server is not the one
        most likely to fail again), then the Events carried over. A resize takes its
        job's measurement along (popped from `measured`)."""
        items: list[Item] = []
        actions = run.actions
        for i, decision in enumerate(actions):
            early = self._precheck(decision, run.now)
            if early is not None:
                run.results[i] = early
                continue
            key = self.key(decision.ref)
            order = i + len(actions) if key in self._suspects else i
            m = measured.pop(decision.ref, None)
            item = Item(order, self._patch_sender(run, i, decision, m), payload=i)
            item.ready = self._not_before.pop(key, 0.0)
            items.append(item)
        carried, self._events = list(self._events), deque()
        run.next_order = 2 * len(actions)
        for ev in carried:
            items.append(self._event_item(run, ev))
        return items

    def _carry_left(self, run: _Run, left: list[Item]) -> float | None:
        """What the drain left goes to the next cycle: Events queued, resizes answered
        THROTTLED or DEFERRED (and not sent before their Retry-After). Returns the
        soonest any of them may go (pacer clock), None if nothing was left."""
        retry_at: float | None = None
        clock = self.pacer.clock
        why = (
            "the API server is failing"
            if self.pacer.down
            else "the API server throttled our writes"
        )
        for item in left:
            retry_at = item.ready if retry_at is None else min(retry_at, item.ready)
            if isinstance(item.payload, _Event):
                self._carry(item.payload)
                continue
            assert isinstance(item.payload, int)
            i = item.payload
            if item.ready > clock():
                self._not_before[self.key(run.actions[i].ref)] = item.ready
            run.results[i] = ActionResult(
                run.actions[i],
                Outcome.THROTTLED if item.throttled else Outcome.DEFERRED,
                f"not written this cycle: {why}; carried to the next cycle",
            )
        return retry_at

    def _precheck(self, decision: Decision, now: datetime) -> ActionResult | None:
        """An answer without a request: a planner bug, or a job backing off."""
        why = refusal(decision, self._kinds)
        if why is not None:
            return ActionResult(decision, Outcome.REFUSED, why)
        backoff = self._backoff.get(self.key(decision.ref))
        if backoff is not None and now < backoff.until:
            return ActionResult(
                decision,
                Outcome.BACKOFF,
                f"backing off after {backoff.failures} failure(s) until {rfc3339(backoff.until)}",
            )
        return None

    def _patch_sender(
        self, run: _Run, i: int, decision: Decision, measurement: Measurement | None
    ) -> Callable[[], Any]:
        async def send() -> Attempt:
            if run.leading and not run.may_write():
                run.leading = False  # once lost, stay stopped for the rest of this plan
            if not run.leading:
                run.results[i] = ActionResult(
                    decision, Outcome.NOT_LEADER, "not the leader: not written"
                )
                return Attempt(Verdict.DONE)
            return await self._send_patch(run, i, decision, measurement)

        return send

    async def _send_patch(
        self, run: _Run, i: int, decision: Decision, measurement: Measurement | None
    ) -> Attempt:
        now, clock = run.now, self.pacer.clock
        key, ref = self.key(decision.ref), decision.ref
        sent = clock()
        try:
            response = await fenced(self.lease_left, self._patch(decision, now, measurement))
        except asyncio.CancelledError:
            raise
        except LeaseFenced as exc:
            run.leading = False  # the Lease would not cover it: nothing more this plan
            run.results[i] = ActionResult(decision, Outcome.NOT_LEADER, str(exc))
            return Attempt(Verdict.DONE)
        except Exception as exc:
            failure = _classify(exc, now)
            if failure.outcome is Outcome.ERROR and not isinstance(
                exc, (ApiException, TimeoutError, aiohttp.ClientError)
            ):
                log.error(
                    "scale-unexpected",
                    namespace=ref.namespace,
                    name=ref.name,
                    kind=ref.kind,
                    exc_info=True,
                )
            return self._failed(run, i, decision, failure, sent)

        self._landed(sent, clock())
        self._backoff.pop(key, None)
        self._refusals.pop(key, None)
        message = ""
        if not run.may_write():
            message = "event skipped: leadership lost"
        else:
            rv = ""
            if isinstance(response, dict):
                rv = str((response.get("metadata") or {}).get("resourceVersion") or "")
            run.new_events.append(
                _Event(ref.namespace, self.event_body(decision, now, rv), ref=_event_ref(ref))
            )
        run.results[i] = ActionResult(decision, Outcome.APPLIED, message)
        return Attempt(Verdict.DONE, landed=True)

    def _failed(
        self, run: _Run, i: int, decision: Decision, failure: _Failure, sent: float
    ) -> Attempt:
        now, clock = run.now, self.pacer.clock
        key = self.key(decision.ref)
        outcome, message = failure.outcome, failure.message
        if outcome is Outcome.THROTTLED:
            # provisional: replaced when the retry is answered, or by THROTTLED if carried
            run.results[i] = ActionResult(decision, outcome, message)
            return Attempt(Verdict.THROTTLED, failure.retry_after)
        if outcome is Outcome.DENIED:
            self._refuse(run, decision, message)
            run.results[i] = ActionResult(
                decision, outcome, f"{message}; the job holds until it changes"
            )
            return Attempt(Verdict.DONE)
        if outcome is not Outcome.ERROR:  # conflict, gone: the next plan reads afresh
            if outcome is Outcome.GONE:
                self._backoff.pop(key, None)
            run.results[i] = ActionResult(decision, outcome, message)
            return Attempt(Verdict.DONE)
        if self._landed_at is not None and self._landed_at >= sent - SERVER_UP_RECENT_SECONDS:
            # the server wrote others meanwhile: this job's own failure (a webhook, say)
            until = self._fail(key, now, clock())
            run.results[i] = ActionResult(
                decision, outcome, f"{message}; backing off until {rfc3339(until)}"
            )
            return Attempt(Verdict.DONE)
        # nothing lands: the server's failure. Every write pauses; no per-job back-off
        # (it would outlive the outage); the first write to land again ends the pause.
        failed = clock()
        if self._down_since is None:
            self._down_since = failed
        self._suspects[key] = (failed, now)
        run.results[i] = ActionResult(
            decision, outcome, f"{message}; writes paused (the server may be failing)"
        )
        return Attempt(Verdict.UNAVAILABLE)

    def _landed(self, sent: float, at: float) -> None:
        """A write sent at `sent` landed at `at` (pacer clock)."""
        if self._down_since is not None:
            # The server writes again. Back-offs earned since the last write that landed
            # before its failure were the outage's, not the jobs': gone. A job that
            # failed while this write was being answered failed on its own: it backs off.
            horizon = self._landed_at if self._landed_at is not None else float("-inf")
            for key in [k for k, b in self._backoff.items() if b.at > horizon]:
                del self._backoff[key]
            for key, (failed, when) in self._suspects.items():
                if failed >= sent:
                    self._fail(key, when, failed)
            self._suspects.clear()
            self._down_since = None
        self._landed_at = at

    def _fail(self, key: JobKey, now: datetime, at: float) -> datetime:
        previous = self._backoff.get(key)
        failures = (previous.failures if previous else 0) + 1
        delay = min(BACKOFF_INITIAL_SECONDS * 2 ** (failures - 1), BACKOFF_MAX_SECONDS)
        until = now + timedelta(seconds=delay)
        self._backoff[key] = _Backoff(failures, until, at)
        return until

    def _forget_old_backoffs(self, now: datetime) -> None:
        # A job quiet for a full maximum backoff starts afresh; this also drops deleted jobs.
        horizon = now - timedelta(seconds=BACKOFF_MAX_SECONDS)
        for key in [k for k, b in self._backoff.items() if b.until < horizon]:
            del self._backoff[key]

    def patch_body(
        self, decision: Decision, now: datetime, measurement: Measurement | None = None
    ) -> Write:
        """The job's kind says how; we say what: the target and why, pinned to the
        resourceVersion the plan was made on (the server answers 409 if the job changed)."""
        s = self._settings
        annotations = {
            s.annotations.last_scale: rfc3339(now),
            s.annotations.last_scale_reason: decision.reason.value,
        }
        if measurement is not None:
            annotations[s.annotations.measured_restart_cost] = measured_value(
                measurement.seconds, measurement.resized
            )
        kind = self._kinds[decision.ref.kind]
        assert decision.target is not None  # refusal() let it through
        return kind.write(
            decision.workers_at, decision.target, annotations, decision.resource_version
        )

    async def _patch(
        self, decision: Decision, now: datetime, measurement: Measurement | None = None
    ) -> Any:
        write = self.patch_body(decision, now, measurement)
        r = self._kinds[decision.ref.kind].resource
        # the content type is explicit: kubernetes_asyncio would send a dict as a JSON patch
        return await self._custom.patch_namespaced_custom_object(
            group=r.group,
            version=r.version,
            namespace=decision.ref.namespace,
            plural=r.plural,
            name=decision.ref.name,
            body=write.body,
            _content_type=write.content_type,
            _request_timeout=self._settings.kube_request_timeout_seconds,
        )

    async def _record(
        self, measured: Iterable[Measurement], now: datetime, may_write: Callable[[], bool]
    ) -> None:
        """Keep each measured restart cost on its job (a merge patch of one annotation,
        pinned to the resourceVersion it was measured on). Best effort: a failed write is
        measured again next cycle, and never holds up a resize."""
        key = self._settings.annotations.measured_restart_cost
        for m in measured:
            kind = self._kinds.get(m.ref.kind)
            if kind is None or not may_write():
                continue
            metadata: dict[str, Any] = {"annotations": {key: measured_value(m.seconds, m.resized)}}
            if m.resource_version:
                metadata["resourceVersion"] = m.resource_version
            r = kind.resource
            try:
                await fenced(
                    self.lease_left,
                    self._custom.patch_namespaced_custom_object(
                        group=r.group,
                        version=r.version,
                        namespace=m.ref.namespace,
                        plural=r.plural,
                        name=m.ref.name,
                        body={"metadata": metadata},
                        _content_type=MERGE_PATCH,
                        _request_timeout=self._settings.kube_request_timeout_seconds,
                    ),
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug(
                    "restart-cost-not-recorded",
                    namespace=m.ref.namespace,
                    name=m.ref.name,
                    error=_classify(exc, now).message,
                )
                continue
            log.info(
                "restart-cost-measured",
                namespace=m.ref.namespace,
                name=m.ref.name,
                kind=m.ref.kind,
                seconds=round(m.seconds),
            )


__all__ = ["KubeActuator"]
