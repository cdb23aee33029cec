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
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TextIO

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.client.kubeapi import ApiFailure, classify, error_text, retry_after
from autoscaler.client.redact import remember_client
from autoscaler.core.model import Action, Decision, Measurement, ObjectRef, Plan, Reason, Refusal
from autoscaler.core.options import ActuatorOptions
from autoscaler.core.resources import MERGE_PATCH, rfc3339
from autoscaler.read.fields import measured_value
from autoscaler.read.kinds import BY_NAME, KINDS, JobKind, Write

from .pacing import Attempt, Item, Pacer, Verdict, drain

log = structlog.get_logger(__name__)


BACKOFF_INITIAL_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
# A failure within this long of another write landing is the job's own, not the server's
# (writes in flight together land and fail within milliseconds of each other).
SERVER_UP_RECENT_SECONDS = 2.0
EVENTS_CARRIED_MAX = 1000  # Events waiting for a throttled server; beyond, the oldest go
EVENT_ATTEMPTS_MAX = 3  # an Event the server failed (not throttled) is tried this often
WRITE_BUDGET_FRACTION = 0.5  # of cycle_deadline_seconds: writes never time a cycle out
# the Event reason of a decision's warnings (today one: a queue annotation the job's
# operator does not honour, see parse.in_queue)
WARNING_REASON = "QueueAnnotationIgnored"
EVENT_MESSAGE_MAX = 1024  # what kubectl shows comfortably; the API keeps it short too
NAME_MAX = 253

# A job's identity for everything the actuator remembers of it (back-off, refusals, who
# paused the writes, a Retry-After): API group, kind, namespace, name. Never the name
# alone: a PyTorchJob and a Volcano Job of one name are two jobs, and one's failures
# must not hold the other.
JobKey = tuple[str, str, str, str]


class Outcome(StrEnum):
    APPLIED = "applied"
    CONFLICT = "conflict"  # 409: the job changed under us; next cycle retries with fresh data
    GONE = "gone"  # 404: the job was deleted
    DENIED = "denied"  # 403/422/4xx: the cluster refused it; the job holds (HoldRefused)
    THROTTLED = "throttled"  # 429/503 past this cycle's write budget: carried to the next
    DEFERRED = "deferred"  # not sent: the server failed or throttled; carried to the next
    ERROR = "error"  # 5xx, timeout, connection or other failure: backed off
    BACKOFF = "backoff"  # this job still backs off from its own failures: no request made
    NOT_LEADER = "not_leader"  # leadership lost (or never held): no request made
    DRY_RUN = "dry_run"
    REFUSED = "refused"  # the decision breaks an invariant; a planner bug, never written


_CARRIED = frozenset({Outcome.THROTTLED, Outcome.DEFERRED})


@dataclass(frozen=True, slots=True)
class ActionResult:
    decision: Decision
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True, slots=True)
class ApplyResult:
    results: tuple[ActionResult, ...] = ()
    # seconds until writes left over (resizes or Events) may go: the loop runs an early
    # cycle then; None: nothing left over
    retry_in: float | None = None
    throttles: int = 0  # 429/503 answers to this apply's writes (each retried or carried)
    window: float | None = None  # writes allowed in flight at the end (the AIMD window)
    events_waiting: int = 0  # Events carried to the next cycle

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    def counts(self) -> dict[Outcome, int]:
        return dict(Counter(r.outcome for r in self.results))

    @property
    def carried(self) -> bool:
        """Resizes were left for the next cycle (throttled or paused by the server)."""
        return any(r.outcome in _CARRIED for r in self.results)

    @property
    def ok(self) -> bool:
        """Nothing failed in a way that needs attention. Conflicts, gone jobs and refusals
        are answers, not failures; writes carried over by a throttling server are fine as
        long as others landed (the drain makes progress)."""
        if any(r.outcome in (Outcome.ERROR, Outcome.REFUSED) for r in self.results):
            return False
        return not self.carried or self.count(Outcome.APPLIED) > 0


class Actuator(Protocol):
    async def apply(
        self, plan: Plan, now: datetime, may_write: Callable[[], bool] = lambda: True
    ) -> ApplyResult: ...


def refusal(decision: Decision, kinds: Mapping[str, JobKind] = BY_NAME) -> str | None:
    """Why a decision must not be written, or None. Defence in depth: the planner already
    keeps these invariants, but a bug there must not reach the cluster."""
    if decision.ref.kind not in kinds:
        return f"kind {decision.ref.kind!r} is not one we manage ({', '.join(kinds)})"
    target = decision.target
    if target is None or isinstance(target, bool) or not isinstance(target, int):
        return f"target {target!r} is not a replica count"
    lo, hi = decision.min_replicas, decision.max_replicas
    if lo is None or hi is None:
        return "decision has no min/max replicas to check the target against"
    if not lo <= target <= hi:
        return f"target {target} outside [{lo}, {hi}]"
    if target < 0:
        return f"target {target} is negative"
    return None


def _ref_order(ref: ObjectRef) -> tuple[str, str, str]:
    return (ref.namespace, ref.name, ref.kind)


def _event_ref(ref: ObjectRef) -> str:
    return f"{ref.kind} {ref.namespace}/{ref.name}"


def _log_result(result: ActionResult) -> None:
    d = result.decision
    fields: dict[str, Any] = {
        "namespace": d.ref.namespace,
        "name": d.ref.name,
        "queue": d.queue,
        "from": d.current,
        "to": d.target,
        "reason": d.reason.value,
        "outcome": result.outcome.value,
    }
    if result.message:
        fields["message"] = result.message
    if result.outcome is Outcome.REFUSED:
        log.error("scale", **fields)
    elif result.outcome in (Outcome.DENIED, Outcome.ERROR):
        log.warning("scale", **fields)
    else:
        log.info("scale", **fields)


@dataclass(frozen=True, slots=True)
class _Backoff:
    failures: int
    until: datetime
    at: float  # pacer clock time of the last failure


@dataclass(frozen=True, slots=True)
class _Failure:
    kind: ApiFailure
    outcome: Outcome
    message: str
    retry_after: float | None = None


_OUTCOMES = {
    ApiFailure.CONFLICT: Outcome.CONFLICT,
    ApiFailure.NOT_FOUND: Outcome.GONE,
    ApiFailure.THROTTLED: Outcome.THROTTLED,
    ApiFailure.REJECTED: Outcome.DENIED,
}


def _classify(exc: Exception, now: datetime) -> _Failure:
    kind = classify(exc)
    outcome = _OUTCOMES.get(kind, Outcome.ERROR)
    status = exc.status if isinstance(exc, ApiException) else None
    if kind is ApiFailure.DENIED and status == 403:
        # Forbidden: RBAC or an admission policy or webhook said no to this write. (401 is
        # our credentials: the server's problem to us, an error.)
        outcome = Outcome.DENIED
    wait = retry_after(exc, now)
    if status == 503 and wait is not None:
        outcome = Outcome.THROTTLED  # an overloaded server saying when to come back
    return _Failure(kind, outcome, error_text(exc), wait if outcome is Outcome.THROTTLED else None)


@dataclass(eq=False)
class _Event:
    """An Event waiting to be created (a throttled server may hold it a cycle or more)."""

    namespace: str
    body: dict[str, Any]
    attempts: int = 0
    ref: str = ""


@dataclass
class _Run:
    """One apply's working state."""

    now: datetime
    may_write: Callable[[], bool]
    actions: tuple[Action, ...] = ()
    results: dict[int, ActionResult] = field(default_factory=dict)
    next_order: int = 0  # the drain order of the next Event (behind every resize)
    leading: bool = True
    new_events: list[_Event] = field(default_factory=list)


class KubeActuator:
    """Writes the plan's actions to the API server in plan order, as many at a time as the
    server's answers allow (at most `max_parallel_writes`), each followed by an Event on its
    job (beside the window while the server keeps up)."""

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
            _log_result(r)
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

    def _new_events(self, run: _Run) -> list[Item]:
        """The Events of writes that just landed (or were refused): behind the resizes."""
        added = [self._event_item(run, ev) for ev in run.new_events]
        run.new_events.clear()
        return added

    def _event_item(self, run: _Run, ev: _Event) -> Item:
        run.next_order += 1
        return Item(run.next_order, self._event_sender(run, ev), payload=ev, side=True)

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
            response = await self._patch(decision, now, measurement)
        except asyncio.CancelledError:
            raise
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

    def _refuse(self, run: _Run, decision: Decision, message: str) -> None:
        """Remember the refusal (the planner holds the job) and say so on the job, once."""
        ref = decision.ref
        self._refusals[self.key(ref)] = Refusal(ref, decision.resource_version, message, run.now)
        if not run.may_write():
            return
        kind = self._kinds[ref.kind]
        group = kind.workers_name(decision.workers_at)
        window = self._settings.refusal_retry_seconds
        body = self.event_body(decision, run.now, decision.resource_version)
        body.update(
            reason=Reason.WRITE_REFUSED.value,
            type="Warning",
            message=(
                f"{group} replicas {decision.current} -> {decision.target} "
                f"({decision.reason.value}) refused by the API server: {message}. Not asked "
                f"again until the job changes or for {window:.0f}s; its share of the queue "
                "goes to other jobs"
            )[:EVENT_MESSAGE_MAX],
        )
        run.new_events.append(_Event(ref.namespace, body, ref=_event_ref(ref)))

    def _event_sender(self, run: _Run, ev: _Event) -> Callable[[], Any]:
        async def send() -> Attempt:
            if not run.may_write():
                return Attempt(Verdict.DONE)  # a follower records nothing
            ev.attempts += 1
            try:
                await self._create_event(ev)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failure = _classify(exc, run.now)
                if failure.outcome is Outcome.THROTTLED:
                    return Attempt(Verdict.THROTTLED, failure.retry_after)
                if failure.outcome is Outcome.ERROR and ev.attempts < EVENT_ATTEMPTS_MAX:
                    self._carry(ev)  # the server's trouble: try again next cycle
                else:
                    self.events_dropped += 1
                log.warning("event-failed", job=ev.ref, error=failure.message)
                return Attempt(Verdict.DONE)
            return Attempt(Verdict.DONE, landed=True)

        return send

    async def _create_event(self, ev: _Event) -> None:
        """POST the Event, the answer unread: CoreV1Api would decode it into a model
        (every timestamp through dateutil), a third of a resize's client time."""
        await self._api.call_api(
            "/api/v1/namespaces/{namespace}/events",
            "POST",
            {"namespace": ev.namespace},
            [],
            {"Accept": "application/json", "Content-Type": "application/json"},
            body=ev.body,
            response_types_map={},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=self._settings.kube_request_timeout_seconds,
        )

    def _warn(self, plan: Plan, now: datetime, may_write: Callable[[], bool]) -> None:
        """One Warning Event on each job whose decision carries a warning for its owner
        (a queue annotation its operator does not honour), queued behind the resizes;
        said again only when the warning changes, forgotten when it goes. Only the
        leader says it (asked only when there is something to say)."""
        warned: dict[JobKey, tuple[str, ...]] = {}
        new: list[Decision] = []
        for d in plan.decisions:
            if not d.warnings or d.ref.kind not in self._kinds:
                continue
            key = self.key(d.ref)
            warned[key] = d.warnings
            if self._warned.get(key) != d.warnings:
                new.append(d)
        if new and not may_write():
            return
        self._warned = warned
        for d in new:
            body = self.event_body(d, now, d.resource_version)
            name = body["metadata"]["name"]
            body["metadata"]["name"] = name[:-1] + "w"  # not the name of a resize's Event
            body.update(
                reason=WARNING_REASON,
                type="Warning",
                action="Plan",
                message="; ".join(d.warnings)[:EVENT_MESSAGE_MAX],
            )
            self._carry(_Event(d.ref.namespace, body, ref=_event_ref(d.ref)))

    def _carry(self, ev: _Event) -> None:
        if len(self._events) >= EVENTS_CARRIED_MAX:
            dropped = self._events.popleft()
            self.events_dropped += 1
            log.warning("event-dropped", job=dropped.ref, reason="too many Events waiting")
        self._events.append(ev)

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
                await self._custom.patch_namespaced_custom_object(
                    group=r.group,
                    version=r.version,
                    namespace=m.ref.namespace,
                    plural=r.plural,
                    name=m.ref.name,
                    body={"metadata": metadata},
                    _content_type=MERGE_PATCH,
                    _request_timeout=self._settings.kube_request_timeout_seconds,
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

    def event_body(
        self, decision: Decision, now: datetime, resource_version: str
    ) -> dict[str, Any]:
        ref = decision.ref
        stamp = rfc3339(now)
        # client-go names events <object>.<unix nanos in hex>; keep within the name limit
        suffix = f".{int(now.timestamp() * 1_000_000_000):x}"
        involved: dict[str, Any] = {
            "apiVersion": self._kinds[ref.kind].resource.api_version,
            "kind": ref.kind,
            "name": ref.name,
            "namespace": ref.namespace,
        }
        if ref.uid:
            involved["uid"] = ref.uid
        if resource_version:
            involved["resourceVersion"] = resource_version
        group = self._kinds[ref.kind].workers_name(decision.workers_at)
        message = f"{group} replicas {decision.current} -> {decision.target}: {decision.message}"
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": ref.name[: NAME_MAX - len(suffix)] + suffix,
                "namespace": ref.namespace,
            },
            "involvedObject": involved,
            "reason": decision.reason.value,
            "message": message[:EVENT_MESSAGE_MAX],
            "type": "Normal",
            "action": "Scale",
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }


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

    async def apply(
        self, plan: Plan, now: datetime, may_write: Callable[[], bool] = lambda: True
    ) -> ApplyResult:
        results: list[ActionResult] = []
        said: dict[tuple[str, str, str], tuple[int, int, str]] = {}
        repeated = 0
        for d in plan.actions:
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
        if repeated and self._out is not None:
            print(f"({repeated} resize(s) as in the last cycle, not repeated)", file=self._out)
        return ApplyResult(tuple(results))

    def _say(self, result: ActionResult) -> None:
        d = result.decision
        if result.outcome is Outcome.REFUSED:
            _log_result(result)
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


__all__ = [
    "ActionResult",
    "Actuator",
    "ApplyResult",
    "DryRunActuator",
    "KubeActuator",
    "Outcome",
    "refusal",
]
