"""Writes the status object (doc.py, codec.py) to its ConfigMap, off the cycle's path.

The cycle hands over its document with `publish()`, which only stores it: the write runs
in this writer's own task, one at a time, under kube_request_timeout_seconds. A failed
write is logged (once per streak of failures) and counted
(`elastic_autoscaler_status_writes_total{result="failed"}`), never raised: the status must
not block or fail a cycle. Only a document that says something new is written, else one
per `status_heartbeat_seconds`, so a steady cluster costs one write per heartbeat.

A dry run writes it too when it may: not over the object of a live daemon that wrote it
recently (a dry run on a laptop must not hide what the real leader decided). RBAC: get,
patch and update of this one ConfigMap by name, create in our namespace (deploy/base).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.client.kubeapi import ApiFailure, classify, error_text
from autoscaler.core.options import StatusOptions
from autoscaler.core.resources import MERGE_PATCH

from ..metrics import Metrics
from .build import changed, with_cycle
from .codec import from_data, to_data
from .doc import StatusDoc, StatusError

log = structlog.get_logger("autoscaler.report.status")

STALE_HEARTBEATS = 3  # a live writer's object younger than this many heartbeats is its own
STOPPED = "stopped"  # the cycle result of the document a writer leaves when it stops


class StatusWriter:
    """The status ConfigMap's one writer (module docstring): the cycle hands it the newest
    document (`publish`, never blocking), `run()` writes what says something new, or a
    heartbeat, in its own task; `restore()` reads back the last document at start so each
    job's `since` and resize state survive a restart."""

    def __init__(
        self,
        settings: StatusOptions,
        api_client: client.ApiClient,
        metrics: Metrics | None = None,
        *,
        may_write: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = settings.status_configmap
        self.namespace = settings.lease_namespace
        self._settings = settings
        self._api: Any = client.CoreV1Api(api_client)
        self._metrics = metrics
        self._may_write = may_write
        self._clock = clock
        self._dry_run = settings.dry_run
        self._pending: StatusDoc | None = None
        self._wake = asyncio.Event()
        self._written: StatusDoc | None = None
        self._written_at: float | None = None
        self._failures = 0
        self._yielding = False  # dry run: a live daemon owns the object
        self.writes = 0

    @property
    def where(self) -> str:
        return f"configmap {self.namespace}/{self.name}"

    def publish(self, doc: StatusDoc) -> None:
        """Hand over the latest document; never blocks. An older one not yet written is
        replaced: only the newest matters."""
        self._pending = doc
        self._wake.set()

    async def restore(self) -> StatusDoc | None:
        """The document already in the cluster (a restarted daemon keeps each job's
        `since` and resize state), or None. Never raises."""
        try:
            obj = await self.read()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not (isinstance(exc, ApiException) and classify(exc) is ApiFailure.NOT_FOUND):
                log.warning("status.not_restored", object=self.where, error=error_text(exc))
            return None
        try:
            return from_data(obj.data, self.where)
        except StatusError as exc:
            log.warning("status.not_restored", object=self.where, error=str(exc))
            return None

    async def check(self) -> tuple[bool, str]:
        """At start: whether this writer will be able to write its object, in words (the
        object, and what is wrong and what to do). Asks, writes nothing: a read, then a
        server-side dry run of the write it would send (a patch of the object, else its
        creation), so the namespace, RBAC and admission answer as they would. Raises what
        the API server raised otherwise (unreachable, timeout)."""
        timeout = self._settings.kube_request_timeout_seconds
        where, namespace = self.where, self.namespace
        fix_namespace = (
            f"create it (kubectl create namespace {namespace}) or name the daemon's "
            "namespace (lease_namespace: --autoscaler-namespace or AUTOSCALER_LEASE_NAMESPACE)"
        )
        rbac = "grant get, patch and update of it and create of configmaps there"
        rbac += " (deploy/base/rbac.yaml)"
        try:
            await self.read()
            exists = True
        except ApiException as exc:
            if classify(exc) is ApiFailure.DENIED:
                return False, f"{where}: cannot read it ({error_text(exc)}): {rbac}"
            if classify(exc) is not ApiFailure.NOT_FOUND:
                raise
            exists = False
        try:
            if exists:
                await self._api.patch_namespaced_config_map(
                    self.name,
                    namespace,
                    {"data": {}},
                    _content_type=MERGE_PATCH,
                    dry_run="All",
                    _request_timeout=timeout,
                )
            else:
                await self._api.create_namespaced_config_map(
                    namespace, self._created({}), dry_run="All", _request_timeout=timeout
                )
        except ApiException as exc:
            failure = classify(exc)
            if failure is ApiFailure.NOT_FOUND:
                return False, f"{where}: namespace {namespace} does not exist: {fix_namespace}"
            if failure is ApiFailure.DENIED:
                verb = "patch it" if exists else f"create it in namespace {namespace}"
                return False, f"{where}: not allowed to {verb} ({error_text(exc)}): {rbac}"
            if failure is not ApiFailure.CONFLICT:  # created meanwhile: writable
                return False, f"{where}: a write would fail: {error_text(exc)}"
        if exists:
            return True, f"{where}: exists and may be written"
        return True, f"{where}: may be created (at the first cycle's status)"

    async def run(self) -> None:
        """Write what is published, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            doc, self._pending = self._pending, None
            if doc is not None:
                await self.write(doc)

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109 - our contract
        """At shutdown, within `timeout`: write what is still pending, then say that this
        writer stopped (a dry run may then take the object over at once, and a user
        reading it knows no cycle runs until the next leader's)."""
        doc, self._pending = self._pending, None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                if doc is not None:
                    await self.write(doc)
                last = self._written
                if last is not None and self._may_write():
                    stopped = replace(
                        last.cycle,
                        result=STOPPED,
                        message="the daemon stopped; the next leader writes anew",
                    )
                    self._written_at = None  # written whatever changed
                    await self.write(with_cycle(last, last.time, stopped))

    async def write(self, doc: StatusDoc) -> str:
        """Write `doc` if it says something new or the heartbeat is due. Returns the
        result (the `result` label): written, unchanged, skipped, failed."""
        now = self._clock()
        due = (
            self._written_at is None
            or now - self._written_at >= self._settings.status_heartbeat_seconds
        )
        if not due and not changed(self._written, doc):
            return self._count("unchanged")
        if not self._may_write():
            return self._count("skipped")
        data = to_data(doc)
        if self._metrics is not None:
            self._metrics.status_bytes.set(sum(len(v) for v in data.values()))
        try:
            async with asyncio.timeout(self._settings.kube_request_timeout_seconds):
                if self._dry_run and await self._owned_by_live_daemon(doc):
                    return self._count("skipped")
                await self._send(data)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failures += 1
            text = error_text(exc)
            (log.warning if self._failures == 1 else log.debug)(
                "status.write_failed",
                object=self.where,
                error=text,
                failures=self._failures,
                note="the cycle goes on; the next one writes it again",
            )
            return self._count("failed")
        if self._failures:
            log.info("status.write_recovered", object=self.where, failures=self._failures)
        self._failures = 0
        self._written, self._written_at = doc, now
        self.writes += 1
        return self._count("written")

    def _count(self, result: str) -> str:
        if self._metrics is not None:
            self._metrics.status_writes.labels(result).inc()
        return result

    async def read(self) -> Any:
        return await self._api.read_namespaced_config_map(
            self.name,
            self.namespace,
            _request_timeout=self._settings.kube_request_timeout_seconds,
        )

    async def _send(self, data: dict[str, str]) -> None:
        timeout = self._settings.kube_request_timeout_seconds
        body = {"data": data}
        try:
            # a merge patch of our one key: no read first, no resourceVersion to race on
            # (only the leader writes), labels and other keys left alone
            await self._api.patch_namespaced_config_map(
                self.name,
                self.namespace,
                body,
                _content_type=MERGE_PATCH,
                _request_timeout=timeout,
            )
        except ApiException as exc:
            if classify(exc) is not ApiFailure.NOT_FOUND:
                raise
            await self._api.create_namespaced_config_map(
                self.namespace, self._created(data), _request_timeout=timeout
            )

    def _created(self, data: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": "elastic-autoscaler"},
            },
            "data": data,
        }

    async def _owned_by_live_daemon(self, doc: StatusDoc) -> bool:
        """Dry run only: whether a live daemon wrote the object recently (then it is
        theirs). A missing or unreadable document is ours to write."""
        try:
            theirs = from_data((await self.read()).data, self.where)
        except ApiException as exc:
            if classify(exc) is ApiFailure.NOT_FOUND:
                return False
            raise
        except StatusError:
            return False
        heartbeat = theirs.heartbeat_seconds or self._settings.status_heartbeat_seconds
        fresh = doc.time - theirs.time < timedelta(seconds=STALE_HEARTBEATS * heartbeat)
        owned = theirs.mode == "live" and fresh and theirs.cycle.result != STOPPED
        if owned and not self._yielding:
            log.info(
                "status.not_written",
                object=self.where,
                why=f"a live daemon ({theirs.identity or 'unknown'}) writes it; "
                "a dry run does not hide its status",
            )
        self._yielding = owned
        return owned
