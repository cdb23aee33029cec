"""Lease-based leader election (coordination.k8s.io/v1), following client-go's rules.

Why not `kubernetes_asyncio.leaderelection`: it offers no way to ask "do we lead right
now?", never releases the Lease on shutdown (the successor waits a full lease), demands
periods of at least one second, times leases with the wall clock, and writes local time
stamped as UTC. This elector is small and keeps client-go's semantics:

- A follower takes the Lease when nobody holds it, or when the record has not changed for
  `leaseDurationSeconds` by OUR clock since we first saw it (remote clocks are never
  trusted; only "how long has this record stood still" matters).
- The leader renews every retry period with optimistic concurrency (resourceVersion). It
  stops leading `renew_deadline` after the start of its last successful renew, even if a
  request hangs: `is_leader` is computed from the clock on every read, so writes stop at
  once. renew_deadline < lease duration, so the leader always steps down before any
  follower can take over.
- On cancellation it stops leading first, then releases the Lease (empty holder, 1 s) so
  a successor takes over within one retry period instead of one lease duration.

Cancel `run()` before closing the ApiClient, or the release cannot be sent.

Requests are bounded with `asyncio.timeout`, never `asyncio.wait_for`: on Python 3.11 a
cancel landing in the loop turn after the request finished is swallowed by wait_for, and
the elector renewed on forever after shutdown asked it to stop.
"""

from __future__ import annotations

import asyncio
import math
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.client.kubeapi import ApiFailure, classify, error_text
from autoscaler.core.options import LeaderOptions
from autoscaler.core.resources import micro_time

log = structlog.get_logger(__name__)

# The part of a lease duration kept back from writes (LeaderElector.lease_left): what it
# covers is clock rates that differ between replicas and a write's last bytes in transit
# (1.5 s of the default 15 s lease)
LEASE_FENCE_MARGIN = 0.1


def default_identity(settings: LeaderOptions) -> str:
    """settings.identity, else hostname plus a random suffix: a restarted process must not
    mistake its predecessor's Lease for its own."""
    return settings.identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    """One replica's side of the Lease: `run()` acquires and renews it (client-go's
    rules, module docstring), `is_leader` says whether this replica may write right now
    (computed from our clock on every read, so writes stop the moment a renew is
    overdue), and a cancel steps down first, then releases the Lease so a successor
    need not wait out a full lease."""

    def __init__(
        self,
        settings: LeaderOptions,
        api_client: client.ApiClient,
        identity: str = "",
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
        *,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        # Any: we send plain dict bodies (the client serialises them as they are); its
        # type hints want model objects
        self._api: Any = client.CoordinationV1Api(api_client)
        self._serialize = api_client.sanitize_for_serialization
        self.identity = identity or default_identity(settings)
        self.name = settings.lease_name
        self.namespace = settings.lease_namespace
        self._duration = settings.lease_duration_seconds
        # the Lease field is whole seconds: round up so the promise covers our deadline
        self._duration_field = max(1, math.ceil(settings.lease_duration_seconds))
        self._deadline = settings.lease_renew_deadline_seconds
        self._retry = settings.lease_retry_period_seconds
        self._timeout = settings.kube_request_timeout_seconds
        self._release_limit = math.inf  # a stop's deadline lowers it (limit_release)
        self._clock = clock
        self._sleep = sleep
        self._wall = wall
        self._on_change = on_change
        self._lease: client.V1Lease | None = None  # last Lease read or written
        self._observed: tuple[Any, ...] | None = None  # the record as last seen
        self._observed_at = 0.0  # our clock when that record was first seen
        self._renewed_at: float | None = None  # start of our last successful write; None: follower
        self._reported = False
        self._failures = 0  # consecutive failed attempts, for quieter logs

    # ---- state ----------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """True only while our last successful acquire/renew started less than the renew
        deadline ago and nothing has shown the Lease to be someone else's."""
        at = self._renewed_at
        return at is not None and self._clock() - at < self._deadline

    def lease_left(self) -> float:
        """Seconds a write may still be sent or awaited: until our last successful
        acquire/renew started plus the lease duration, less LEASE_FENCE_MARGIN of it. No
        other replica can hold the Lease before then (a follower takes it only once the
        record stood still a whole lease duration, by its clock, from a time after our
        write started), so a write done by then cannot land under another leader's
        Lease. 0 (or less) when we do not lead: nothing may be written."""
        at = self._renewed_at
        if at is None:
            return 0.0
        return at + self._duration * (1 - LEASE_FENCE_MARGIN) - self._clock()

    @property
    def holder(self) -> str:
        """The holder as last observed ("" when none or unknown)."""
        spec = self._lease.spec if self._lease is not None else None
        return (spec.holder_identity or "") if spec is not None else ""

    def _settle(self) -> None:
        """Turn a passed deadline into a loss, and tell on_change about any change."""
        if self._renewed_at is not None and not self.is_leader:
            self._renewed_at = None
            log.warning(
                "leader-lost", lease=self.name, identity=self.identity, why="renew deadline passed"
            )
        leading = self.is_leader
        if leading != self._reported:
            self._reported = leading
            if leading:
                log.info("leader-acquired", lease=self.name, identity=self.identity)
            if self._on_change is not None:
                try:
                    self._on_change(leading)
                except Exception:
                    log.exception("leader-on-change-failed")

    def _lose(self, why: str) -> None:
        if self._renewed_at is not None:
            self._renewed_at = None
            log.warning("leader-lost", lease=self.name, identity=self.identity, why=why)

    # ---- main loop ------------------------------------------------------------------

    def limit_release(self, seconds: float) -> None:
        """Give the release at the next cancel at most `seconds` (a stop's deadline)."""
        self._release_limit = seconds

    async def run(self) -> None:
        """Acquire and renew until cancelled; on cancel stop leading, then release."""
        try:
            while True:
                await self._attempt()
                self._settle()
                await self._sleep(self._next_delay())
                self._settle()
        except asyncio.CancelledError:
            await self._release()
            raise
        finally:
            self._renewed_at = None
            self._settle()

    def _next_delay(self) -> float:
        delay = self._retry
        if self._renewed_at is not None:
            # wake when the deadline passes, to report the loss at once
            remaining = self._renewed_at + self._deadline - self._clock()
            delay = min(delay, remaining)
        return max(delay, 0.001)  # never spin, whatever the clock says

    def _request_timeout(self) -> float:
        if self._renewed_at is None:
            return self._timeout
        # a leader's request must not outlive its deadline
        return max(0.001, min(self._timeout, self._renewed_at + self._deadline - self._clock()))

    async def _attempt(self) -> None:
        start = self._clock()
        try:
            if self._renewed_at is not None and self._lease is not None:
                try:  # a leader renews from its own copy: one request
                    await self._write(self._lease, start)
                except ApiException as exc:
                    if classify(exc) is not ApiFailure.CONFLICT:
                        raise
                    # someone wrote the Lease since: read it and decide afresh
                    await self._acquire_or_renew(start)
            else:
                await self._acquire_or_renew(start)
        except asyncio.CancelledError:
            raise
        except (ApiException, TimeoutError, aiohttp.ClientError) as exc:
            self._failed(exc, trace=False)
        except Exception as exc:
            # a malformed Lease or a bug must not kill election; is_leader stays safe
            self._failed(exc, trace=True)
        else:
            self._failures = 0

    def _failed(self, exc: Exception, *, trace: bool) -> None:
        self._failures += 1
        log.warning(
            "lease-attempt-failed",
            lease=self.name,
            identity=self.identity,
            leading=self.is_leader,
            failures=self._failures,
            error=error_text(exc),
            # a traceback once per streak of failures, not every retry period
            exc_info=trace and self._failures == 1,
        )

    async def _acquire_or_renew(self, start: float) -> None:
        timeout = self._request_timeout()
        try:
            async with asyncio.timeout(timeout):
                lease = await self._api.read_namespaced_lease(
                    self.name, self.namespace, _request_timeout=timeout
                )
        except ApiException as exc:
            if classify(exc) is not ApiFailure.NOT_FOUND:
                raise
            await self._create(start)
            return
        self._observe(lease, start)
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        if holder and holder != self.identity:
            duration = spec.lease_duration_seconds or self._duration
            if self._observed_at + duration > start:
                self._lose(f"lease held by {holder}")
                return
            log.info("lease-expired", lease=self.name, previous=holder)
        await self._write(lease, start)

    def _observe(self, lease: client.V1Lease, now: float) -> None:
        spec = lease.spec or client.V1LeaseSpec()
        record = (
            lease.metadata.resource_version if lease.metadata else None,
            spec.holder_identity,
            spec.lease_duration_seconds,
            spec.acquire_time,
            spec.renew_time,
            spec.lease_transitions,
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = now
        self._lease = lease

    def _spec(self, old: client.V1LeaseSpec | None, now: datetime) -> dict[str, Any]:
        old = old or client.V1LeaseSpec()
        ours = old.holder_identity == self.identity
        transitions = old.lease_transitions or 0
        acquire = old.acquire_time if ours and old.acquire_time else now
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._duration_field,
            "acquireTime": micro_time(acquire),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions if ours else transitions + 1,
        }

    def _replace_body(self, lease: client.V1Lease, spec: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = self._serialize(lease)
        body["apiVersion"] = "coordination.k8s.io/v1"
        body["kind"] = "Lease"
        body.get("metadata", {}).pop("managedFields", None)
        body["spec"] = spec
        return body

    async def _write(self, lease: client.V1Lease, start: float) -> None:
        body = self._replace_body(lease, self._spec(lease.spec, self._wall()))
        timeout = self._request_timeout()
        async with asyncio.timeout(timeout):
            written = await self._api.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=timeout
            )
        self._won(written, start)

    async def _create(self, start: float) -> None:
        now = self._wall()
        spec = self._spec(None, now)
        spec["leaseTransitions"] = 0
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        timeout = self._request_timeout()
        try:
            async with asyncio.timeout(timeout):
                created = await self._api.create_namespaced_lease(
                    self.namespace, body, _request_timeout=timeout
                )
        except ApiException as exc:
            # another candidate created it first: read it next time
            if classify(exc) is ApiFailure.CONFLICT:
                return
            raise
        self._won(created, start)

    def _won(self, lease: client.V1Lease, start: float) -> None:
        self._observe(lease, start)
        if self._clock() - start < self._deadline:
            self._renewed_at = start

    async def _release(self) -> None:
        """Hand the Lease back so a successor need not wait for it to expire."""
        self._renewed_at = None  # stop leading before anything else
        self._settle()
        if self._lease is None or self.holder != self.identity:
            return
        # Past one lease duration the Lease has expired anyway: never hold up shutdown longer.
        limit = min(self._timeout, self._duration, self._release_limit)
        try:
            async with asyncio.timeout(limit):
                released = await self._release_lease(limit)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # best effort: without it the successor waits for the Lease to expire
            log.warning("lease-release-failed", lease=self.name, error=error_text(exc))
            return
        if released:
            log.info("leader-released", lease=self.name, identity=self.identity)

    async def _release_lease(self, request_timeout: float) -> bool:
        lease = self._lease
        for _ in range(2):
            assert lease is not None
            now = self._wall()
            spec = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": (lease.spec.lease_transitions if lease.spec else 0) or 0,
            }
            try:
                # resourceVersion guards us: if someone took the Lease meanwhile, a 409
                await self._api.replace_namespaced_lease(
                    self.name,
                    self.namespace,
                    self._replace_body(lease, spec),
                    _request_timeout=request_timeout,
                )
                return True
            except ApiException as exc:
                if classify(exc) is not ApiFailure.CONFLICT:
                    raise
            # our copy was stale (e.g. a renew cancelled in flight landed): look again
            lease = await self._api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=request_timeout
            )
            holder = lease.spec.holder_identity if lease.spec else None
            if holder != self.identity:
                return False
        return False


class AlwaysLeader:
    """For leader_election: false (one replica): always leads, runs until cancelled."""

    identity = ""

    def __init__(self, on_change: Callable[[bool], None] | None = None) -> None:
        self._on_change = on_change

    @property
    def is_leader(self) -> bool:
        return True

    def lease_left(self) -> float | None:
        """No Lease: writes are not fenced."""
        return None

    def limit_release(self, seconds: float) -> None:
        """Nothing to release."""

    async def run(self) -> None:
        if self._on_change is not None:
            self._on_change(True)
        await asyncio.Event().wait()


def make_elector(
    settings: LeaderOptions,
    api_client: client.ApiClient,
    on_change: Callable[[bool], None] | None = None,
) -> LeaderElector | AlwaysLeader:
    if not settings.leader_election:
        return AlwaysLeader(on_change)
    return LeaderElector(settings, api_client, default_identity(settings), on_change=on_change)


__all__ = [
    "LEASE_FENCE_MARGIN",
    "AlwaysLeader",
    "LeaderElector",
    "default_identity",
    "make_elector",
]
