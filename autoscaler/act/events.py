"""Event recording: the Events KubeActuator says on a job (a resize, a refusal, a warning
for the job's owner), built as client-go names them and sent beside the resizes' window.
A throttled server may hold an Event a cycle or more: what waits is carried, bounded, so
an outage never grows the daemon's memory, and an Event the server keeps failing is
dropped after a few tries (Events are best effort; the resize itself is what counts)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import structlog

from autoscaler.core.model import Action, Decision, ObjectRef, Plan, Refusal
from autoscaler.core.options import ActuatorOptions
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339
from autoscaler.read.kinds import JobKind

from .pacing import Attempt, Item, LeaseFenced, Verdict, fenced
from .results import ActionResult, JobKey, Outcome, _classify

log = structlog.get_logger(__name__)

EVENTS_CARRIED_MAX = 1000  # Events waiting for a throttled server; beyond, the oldest go
EVENT_ATTEMPTS_MAX = 3  # an Event the server failed (not throttled) is tried this often
# the Event reason of a decision's warnings (today one: a queue annotation the job's
# operator does not honour, see parse.in_queue)
WARNING_REASON = "QueueAnnotationIgnored"
EVENT_MESSAGE_MAX = 1024  # what kubectl shows comfortably; the API keeps it short too
NAME_MAX = 253


def _event_ref(ref: ObjectRef) -> str:
    return f"{ref.kind} {ref.namespace}/{ref.name}"


@dataclass(eq=False)
class _Event:
    """An Event waiting to be created (a throttled server may hold it a cycle or more)."""

    namespace: str
    body: dict[str, Any]
    attempts: int = 0
    ref: str = ""


@dataclass
class _Run:
    """One apply's working state (its resizes' results and the Events they call for)."""

    now: datetime
    may_write: Callable[[], bool]
    actions: tuple[Action, ...] = ()
    results: dict[int, ActionResult] = field(default_factory=dict)
    next_order: int = 0  # the drain order of the next Event (behind every resize)
    leading: bool = True
    new_events: list[_Event] = field(default_factory=list)


class EventRecorder:
    """The Events half of KubeActuator: builds each Event, sends it as one drain item
    behind the resizes, and carries what a throttled or failing server did not take.
    A base class of KubeActuator, whose state it shares (declared here for the reader
    and the type checker)."""

    _settings: ActuatorOptions
    _kinds: dict[str, JobKind]
    _api: Any
    _component: str
    _instance: str
    _events: deque[_Event]
    events_dropped: int
    _refusals: dict[JobKey, Refusal]
    _warned: dict[JobKey, tuple[str, ...]]
    lease_left: Callable[[], float | None]

    if TYPE_CHECKING:

        def key(self, ref: ObjectRef) -> JobKey: ...

    def _new_events(self, run: _Run) -> list[Item]:
        """The Events of writes that just landed (or were refused): behind the resizes."""
        added = [self._event_item(run, ev) for ev in run.new_events]
        run.new_events.clear()
        return added

    def _event_item(self, run: _Run, ev: _Event) -> Item:
        run.next_order += 1
        return Item(run.next_order, self._event_sender(run, ev), payload=ev, side=True)

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
                await fenced(self.lease_left, self._create_event(ev))
            except asyncio.CancelledError:
                raise
            except LeaseFenced:
                self.events_dropped += 1  # the next leader says what it does itself
                return Attempt(Verdict.DONE)
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
