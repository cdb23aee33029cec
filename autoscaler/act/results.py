"""What an actuator answers and the contract every actuator keeps: the Outcome of each
resize, the result of one apply, the invariants a decision must keep to be written
(`refusal`), and how a failed API call maps to an Outcome. The loop, the status document
and the simulator read these; KubeActuator and DryRunActuator produce them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.client.kubeapi import ApiFailure, classify, error_text, retry_after
from autoscaler.core.model import Decision, Plan
from autoscaler.read.kinds import BY_NAME, JobKind

log = structlog.get_logger(__name__)

# A job's identity for everything the actuator remembers of it (back-off, refusals, who
# paused the writes, a Retry-After): API group, kind, namespace, name. Never the name
# alone: a PyTorchJob and a Volcano Job of one name are two jobs, and one's failures
# must not hold the other.
JobKey = tuple[str, str, str, str]


class Outcome(StrEnum):
    """What became of one planned resize (its log line's `outcome`, the writes metric's label)."""

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
    """One decision and what became of its write."""

    decision: Decision
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True, slots=True)
class ApplyResult:
    """One apply: each action's result, and what the loop needs of the writes left over."""

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
    """What the loop needs of an actuator: apply a plan, writing only while
    `may_write()` (the leader)."""

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


def log_result(result: ActionResult) -> None:
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
class _Failure:
    """A failed API call as the actuator acts on it: its class, Outcome, message and
    the server's Retry-After."""

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


def _changed_since_read(exc: Exception) -> bool:
    """A 422 that says a `test` of /metadata/resourceVersion failed: the API server answers
    a failed JSON patch test so ("testing value /metadata/resourceVersion failed")."""
    body = getattr(exc, "body", None) or b""
    text = body.decode(errors="replace") if isinstance(body, bytes) else str(body)
    text += f" {getattr(exc, 'reason', '') or ''}"
    return "/metadata/resourceVersion" in text and "test" in text


def _classify(exc: Exception, now: datetime) -> _Failure:
    kind = classify(exc)
    outcome = _OUTCOMES.get(kind, Outcome.ERROR)
    status = exc.status if isinstance(exc, ApiException) else None
    if kind is ApiFailure.DENIED and status == 403:
        # Forbidden: RBAC or an admission policy or webhook said no to this write. (401 is
        # our credentials: the server's problem to us, an error.)
        outcome = Outcome.DENIED
    if status == 422 and _changed_since_read(exc):
        # a JSON patch whose test of the resourceVersion we planned on failed (a Volcano
        # Job's resize): the object changed, as a 409 says of a merge patch. A conflict,
        # planned again on fresh data next cycle, not the cluster refusing the resize.
        kind, outcome = ApiFailure.CONFLICT, Outcome.CONFLICT
    wait = retry_after(exc, now)
    if status == 503 and wait is not None:
        outcome = Outcome.THROTTLED  # an overloaded server saying when to come back
    return _Failure(kind, outcome, error_text(exc), wait if outcome is Outcome.THROTTLED else None)
