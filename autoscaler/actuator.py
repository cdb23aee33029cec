"""Apply a Plan to the cluster: patch each changed job's worker replicas (as its kind says), then
record an Event on it. Dry-run is a different actuator, not a flag in this one.

Errors are typed by what the caller does next (conflict: retry next cycle with fresh
data; gone: nothing to do; throttled/error: back off this job, keep going with others).
"""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TextIO

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from .kinds import BY_NAME, KINDS, JobKind, Write
from .kubeapi import ApiFailure, classify, error_text, retry_after
from .model import Decision, Measurement, Plan
from .parse import measured_value
from .redact import remember_client
from .resources import MERGE_PATCH, rfc3339
from .settings import Settings

log = structlog.get_logger(__name__)


BACKOFF_INITIAL_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
EVENT_MESSAGE_MAX = 1024  # what kubectl shows comfortably; the API keeps it short too
NAME_MAX = 253


class Outcome(StrEnum):
    APPLIED = "applied"
    CONFLICT = "conflict"  # 409: the job changed under us; next cycle retries with fresh data
    GONE = "gone"  # 404: the job was deleted
    THROTTLED = "throttled"  # 429: backed off
    ERROR = "error"  # 5xx, timeout, connection or other failure: backed off
    BACKOFF = "backoff"  # still backing off from an earlier failure: no request made
    NOT_LEADER = "not_leader"  # leadership lost (or never held): no request made
    DRY_RUN = "dry_run"
    REFUSED = "refused"  # the decision breaks an invariant; a planner bug, never written


@dataclass(frozen=True, slots=True)
class ActionResult:
    decision: Decision
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True, slots=True)
class ApplyResult:
    results: tuple[ActionResult, ...] = ()

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)

    def counts(self) -> dict[Outcome, int]:
        return dict(Counter(r.outcome for r in self.results))

    @property
    def ok(self) -> bool:
        """Nothing failed in a way that needs attention (conflicts and gone jobs are normal)."""
        bad = {Outcome.THROTTLED, Outcome.ERROR, Outcome.REFUSED}
        return not any(r.outcome in bad for r in self.results)


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
    elif result.outcome in (Outcome.THROTTLED, Outcome.ERROR):
        log.warning("scale", **fields)
    else:
        log.info("scale", **fields)


@dataclass(frozen=True, slots=True)
class _Backoff:
    failures: int
    until: datetime


@dataclass(frozen=True, slots=True)
class _Failure:
    outcome: Outcome
    message: str
    retry_after: float | None = None


_OUTCOMES = {
    ApiFailure.CONFLICT: Outcome.CONFLICT,
    ApiFailure.NOT_FOUND: Outcome.GONE,
    ApiFailure.THROTTLED: Outcome.THROTTLED,
}


def _classify(exc: Exception, now: datetime) -> _Failure:
    kind = classify(exc)
    outcome = _OUTCOMES.get(kind, Outcome.ERROR)
    wait = retry_after(exc, now) if outcome is Outcome.THROTTLED else None
    return _Failure(outcome, error_text(exc), wait)


class KubeActuator:
    """Writes the plan's actions to the API server in plan order, a bounded number at a
    time (`max_parallel_writes`)."""

    def __init__(
        self,
        settings: Settings,
        api_client: client.ApiClient,
        component: str = "elastic-autoscaler",
        kinds: tuple[JobKind, ...] = KINDS,
    ) -> None:
        self._settings = settings
        self._kinds = {k.resource.kind: k for k in kinds}
        # Any: we send plain dict bodies and a merge-patch content type (the client takes
        # both); its type hints want model objects and know no _content_type
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._core: Any = client.CoreV1Api(api_client)
        remember_client(api_client.configuration)
        self._component = component
        self._instance = settings.identity or socket.gethostname()
        self._backoff: dict[tuple[str, str], _Backoff] = {}

    def backoff_until(self, namespace: str, name: str) -> datetime | None:
        """When the job may be written again after failures; None: not backing off."""
        entry = self._backoff.get((namespace, name))
        return entry.until if entry else None

    async def apply(
        self, plan: Plan, now: datetime, may_write: Callable[[], bool] = lambda: True
    ) -> ApplyResult:
        if now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        self._forget_old_backoffs(now)
        measured = {m.ref: m for m in plan.measurements}
        if not plan.actions:
            await self._record(measured.values(), now, may_write)
            return ApplyResult()
        # Writes go out in plan order, up to max_parallel_writes at a time: a first cycle
        # with hundreds of resizes must fit in one interval (serial, ~20 ms each, it did
        # not). Leadership is checked before each write; once the server throttles us
        # (429), the writes not yet sent wait for a later cycle instead of piling on.
        gate = asyncio.Semaphore(self._settings.max_parallel_writes)
        leading = True
        throttled = ""

        async def one(decision: Decision) -> ActionResult:
            nonlocal leading, throttled
            async with gate:
                if leading and not may_write():
                    leading = False  # once lost, stay stopped for the rest of this plan
                if throttled and leading and refusal(decision) is None:
                    result = ActionResult(
                        decision,
                        Outcome.BACKOFF,
                        f"not sent: the API server throttled this cycle ({throttled})",
                    )
                else:
                    result = await self._apply_one(
                        decision, now, may_write, leading, measured.pop(decision.ref, None)
                    )
                if result.outcome is Outcome.THROTTLED and not throttled:
                    throttled = result.message
                _log_result(result)
                return result

        results = await asyncio.gather(*(one(d) for d in plan.actions))
        if not throttled:
            # what was measured of jobs not resized now (a resize carries its own)
            await self._record(measured.values(), now, lambda: leading and may_write())
        return ApplyResult(tuple(results))

    async def _apply_one(
        self,
        decision: Decision,
        now: datetime,
        may_write: Callable[[], bool],
        leading: bool,
        measurement: Measurement | None = None,
    ) -> ActionResult:
        why = refusal(decision, self._kinds)
        if why is not None:
            return ActionResult(decision, Outcome.REFUSED, why)
        if not leading:
            return ActionResult(decision, Outcome.NOT_LEADER, "not the leader: not written")
        key = (decision.ref.namespace, decision.ref.name)
        backoff = self._backoff.get(key)
        if backoff is not None and now < backoff.until:
            return ActionResult(
                decision,
                Outcome.BACKOFF,
                f"backing off after {backoff.failures} failure(s) until {rfc3339(backoff.until)}",
            )
        try:
            response = await self._patch(decision, now, measurement)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = _classify(exc, now)
            if failure.outcome is Outcome.ERROR and not isinstance(
                exc, (ApiException, TimeoutError, aiohttp.ClientError)
            ):
                log.error("scale-unexpected", namespace=key[0], name=key[1], exc_info=True)
            message = failure.message
            if failure.outcome in (Outcome.THROTTLED, Outcome.ERROR):
                until = self._fail(key, now, failure.retry_after)
                message = f"{message}; backing off until {rfc3339(until)}"
            elif failure.outcome is Outcome.GONE:
                self._backoff.pop(key, None)
            return ActionResult(decision, failure.outcome, message)

        self._backoff.pop(key, None)
        message = ""
        if not may_write():
            message = "event skipped: leadership lost"
        else:
            rv = ""
            if isinstance(response, dict):
                rv = str((response.get("metadata") or {}).get("resourceVersion") or "")
            message = await self._event(decision, now, rv)
        return ActionResult(decision, Outcome.APPLIED, message)

    def _fail(self, key: tuple[str, str], now: datetime, retry_after: float | None) -> datetime:
        previous = self._backoff.get(key)
        failures = (previous.failures if previous else 0) + 1
        if retry_after is not None:
            # the server said when; still never hammer it, never wait past our maximum
            delay = min(max(retry_after, 1.0), BACKOFF_MAX_SECONDS)
        else:
            delay = min(BACKOFF_INITIAL_SECONDS * 2 ** (failures - 1), BACKOFF_MAX_SECONDS)
        until = now + timedelta(seconds=delay)
        self._backoff[key] = _Backoff(failures, until)
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
            s.last_scale_annotation: rfc3339(now),
            f"{s.annotation_prefix}/last-scale-reason": decision.reason.value,
        }
        if measurement is not None:
            annotations[s.measured_restart_cost_annotation] = measured_value(
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
        key = self._settings.measured_restart_cost_annotation
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

    async def _event(self, decision: Decision, now: datetime, resource_version: str) -> str:
        """Record the change on the job. A failure here never fails the action."""
        try:
            await self._core.create_namespaced_event(
                decision.ref.namespace,
                self.event_body(decision, now, resource_version),
                _request_timeout=self._settings.kube_request_timeout_seconds,
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failure = _classify(exc, now)
            log.warning(
                "event-failed",
                namespace=decision.ref.namespace,
                name=decision.ref.name,
                error=failure.message,
            )
            return f"event not recorded: {failure.message}"
        return ""


class DryRunActuator:
    """Writes nothing: says what it would do, in the log and optionally on `out`."""

    def __init__(self, settings: Settings, out: TextIO | None = None) -> None:
        self._settings = settings
        self._out = out

    async def apply(
        self, plan: Plan, now: datetime, may_write: Callable[[], bool] = lambda: True
    ) -> ApplyResult:
        results: list[ActionResult] = []
        for decision in plan.actions:
            why = refusal(decision)
            if why is not None:
                result = ActionResult(decision, Outcome.REFUSED, why)
                _log_result(result)
            else:
                result = ActionResult(decision, Outcome.DRY_RUN, "dry run: not written")
                d = decision
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
                d = decision
                line = (
                    f"would scale {d.ref.namespace}/{d.ref.name} (queue {d.queue}): "
                    f"{d.current} -> {d.target} [{d.reason.value}] {d.message}"
                )
                if result.outcome is Outcome.REFUSED:
                    line = f"REFUSED {d.ref.namespace}/{d.ref.name}: {result.message}"
                print(line, file=self._out)
            results.append(result)
        return ApplyResult(tuple(results))


__all__ = [
    "ActionResult",
    "Actuator",
    "ApplyResult",
    "DryRunActuator",
    "KubeActuator",
    "Outcome",
    "refusal",
]
