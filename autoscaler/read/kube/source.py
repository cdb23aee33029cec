"""Kubernetes objects the planner reads, kept current by list-then-watch caches.

One cache per (resource, namespace scope), each the loop of an informer: LIST (record the
resourceVersion), WATCH from it, apply ADDED/MODIFIED/DELETED, follow BOOKMARKs; a watch
that ends is renewed from the last version; `410 Gone` (the server forgot that version)
means LIST again; other errors back off exponentially with jitter.

Each object is decoded once, when its LIST page or WATCH event arrives, into the frozen
record the planner needs (`parse.decoders`: a job, a waiting gang, a Queue's spec, ...);
raw dicts are not kept. A cycle then reads `KubeSource.objects()`, the records of every
cache, which costs no API call.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import msgspec
import structlog
import yaml
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import ApiClient, Configuration, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse
from kubernetes_asyncio.config import ConfigException

from autoscaler.client.kubeapi import ApiFailure, classify, error_text, retry_after
from autoscaler.client.redact import remember_client
from autoscaler.core.errors import yaml_error_line
from autoscaler.core.heap import release_free_memory
from autoscaler.core.model import Node
from autoscaler.core.options import KubeOptions, ReadOptions
from autoscaler.core.resources import (
    HPA,
    JOB_RESOURCES,
    NODE,
    POD,
    PODGROUP,
    PRIORITY_CLASS,
    PYTORCHJOB,
    QUEUE,
    UNFINISHED_POD_FIELD_SELECTOR,
    ResourceKind,
)
from autoscaler.read.parse import Decoder, Records, decoders
from autoscaler.read.records import (
    GroupRecord,
    HpaTarget,
    JobRecord,
    PodUse,
    PriorityValue,
    QueueSpec,
)
from autoscaler.settings import Settings

from . import proto
from .straight import Straight, proto_straight, straight
from .wire import Reader, reader

__all__ = ["KubeObjects", "KubeSource", "OnChange", "make_api_client"]

log = structlog.get_logger("autoscaler.read.kube.source")

CONNECT_RETRY_MAX_SECONDS = 1.0
# A LIST page is decoded this many objects at a time, the event loop running in between
# (the next page's answer is read meanwhile; other caches, the HTTP server go on): ~3 ms
# of CPU at most for pods
TAKE_CHUNK = 100
# A job kind whose CRD is not installed is asked for again this often: a CRD installed
# (or re-created) later is managed from the next cycle on (min_interval_seconds is 15 s by
# default). A LIST answered 404 costs the server next to nothing.
ABSENT_RECHECK_SECONDS = 5.0

RawObject = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)


class OnChange(Protocol):
    """Called (synchronously; keep it cheap) for every change applied to a cache.

    `kind` is the Kubernetes kind (`PyTorchJob`, `PodGroup`, `Queue`, `PriorityClass`),
    `event_type` ADDED, MODIFIED or DELETED (a relist reports its differences the same
    way), `record` what the cache holds for the object (for DELETED: what it held).
    Objects the planner reads nothing of (a pod not bound, or finished) are not reported.
    """

    def __call__(self, kind: str, event_type: str, record: Any) -> None: ...


KubeSettings = KubeOptions  # what this module reads (Settings.kube_options())


@dataclass(frozen=True)
class KubeObjects:
    """One consistent-enough read of all caches: the records they hold.

    Each tuple is ordered by (namespace, name) of the objects. `records` is the same
    records for `parse.build_snapshot`, the same object while no cache changed (a
    caller may keep what it built from it). `synced` is False until every cache finished
    its first LIST; `errors` names caches whose last LIST/WATCH failed and objects that
    were dropped. `failing_seconds` is how long the longest-failing cache has been
    unable to list or watch (0 when all are connected): past a bound its objects are
    stale, not current.
    """

    records: Records
    synced: bool
    errors: tuple[str, ...]
    failing_seconds: float = 0.0

    @property
    def jobs(self) -> tuple[JobRecord, ...]:
        return self.records.jobs

    @property
    def podgroups(self) -> tuple[GroupRecord, ...]:
        return self.records.groups

    @property
    def queues(self) -> tuple[QueueSpec, ...]:
        return self.records.queues

    @property
    def priorityclasses(self) -> tuple[PriorityValue, ...]:
        return self.records.priorities

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.records.nodes

    @property
    def pods(self) -> tuple[PodUse, ...]:
        return self.records.pods

    @property
    def hpas(self) -> tuple[HpaTarget, ...]:
        return self.records.hpas  # a job an HPA targets is theirs


@dataclass
class _Counters:
    lists: int = 0
    watches: int = 0
    watch_restarts: int = 0
    relists_410: int = 0
    events: int = 0
    dropped_oversized: int = 0
    errors: int = 0
    proto_pages: int = 0  # LIST pages read in protobuf


class ObjectsApi:
    """CustomObjectsApi's list calls for every API group, the core group ("": nodes, pods)
    included, whose paths are /api/v1/... rather than /apis/GROUP/VERSION/...: one cache
    loop reads both, and raw dicts (no model deserialisation) come back for both."""

    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client
        self._custom = CustomObjectsApi(api_client)

    _QUERY = {
        "allow_watch_bookmarks": "allowWatchBookmarks",
        "_continue": "continue",
        "field_selector": "fieldSelector",
        "label_selector": "labelSelector",
        "limit": "limit",
        "resource_version": "resourceVersion",
        "timeout_seconds": "timeoutSeconds",
        "watch": "watch",
    }

    def list_cluster_custom_object(
        self, group: str, version: str, plural: str, **kwargs: Any
    ) -> Any:
        if group:
            return self._custom.list_cluster_custom_object(group, version, plural, **kwargs)
        return self._core(f"/api/{version}/{plural}", kwargs)

    def list_custom_object_for_all_namespaces(
        self, group: str, version: str, plural: str, **kwargs: Any
    ) -> Any:
        if group:
            return self._custom.list_custom_object_for_all_namespaces(
                group, version, plural, **kwargs
            )
        return self._core(f"/api/{version}/{plural}", kwargs)

    def list_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, **kwargs: Any
    ) -> Any:
        if group:
            return self._custom.list_namespaced_custom_object(
                group, version, namespace, plural, **kwargs
            )
        return self._core(f"/api/{version}/namespaces/{namespace}/{plural}", kwargs)

    def _core(self, path: str, kwargs: dict[str, Any]) -> Any:
        query = [
            (self._QUERY[k], v) for k, v in kwargs.items() if k in self._QUERY and v is not None
        ]
        return self.api_client.call_api(
            path,
            "GET",
            {},
            query,
            {"Accept": kwargs.get("_accept") or "application/json"},
            response_types_map={200: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=kwargs.get("_preload_content", True),
            _request_timeout=kwargs.get("_request_timeout"),
        )


# how a LIST page's item is taken into the fresh items: (raw, fresh, seen)
_Take = Callable[[Any, dict[Key, Any], set[Key]], None]


@dataclass(frozen=True)
class ProtoReaders:
    """How a Pod or Node cache reads the items of a protobuf LIST page: `wire`, an item
    as the dict its decoder reads (the usual way); `fast`, straight to its record, or
    None for an item left to the usual way (sources.straight)."""

    wire: Callable[[bytes], dict[str, Any]]
    fast: Straight | None


def proto_readers(kind: str, read_options: ReadOptions | None) -> ProtoReaders | None:
    """The protobuf readers of a cache of `kind`: Pods and Nodes only (CRDs are served in
    JSON only; the other built-in kinds we list are few)."""
    wire = {"Pod": proto.pod_wire, "Node": proto.node_wire}.get(kind)
    if wire is None:
        return None
    fast = proto_straight(kind, read_options) if read_options is not None else None
    return ProtoReaders(lambda raw: wire(proto.parse(kind, raw)), fast)


@dataclass
class _Attempts:
    """Consecutive attempts of a cache that made no progress, counted apart by who
    failed: an API server that answered (5xx, 429, timeouts) gets exponential back-off
    to shed its load; one that could not be reached at all (refused, reset mid-stream)
    costs nothing to retry, so it is retried at least every CONNECT_RETRY_MAX_SECONDS
    and the cache is current again within about a second of the server's return."""

    answered: int = 0
    unreachable: int = 0
    expired_again: bool = False  # a 410 right after our own relist

    def progressed(self) -> None:
        self.answered = self.unreachable = 0


class _Cache:
    """The objects of one resource in one namespace scope (None: all namespaces)."""

    def __init__(
        self,
        resource: ResourceKind,
        namespace: str | None,
        label_selector: str,
        api: ObjectsApi,
        settings: KubeSettings,
        notify: Callable[[str, str, Any], None],
        backoff: Callable[[int], float],
        page_size: int,
        decode: Decoder,
        optional: bool = False,
        field_selector: str = "",
        read: Reader = msgspec.json.decode,
        fast: Straight | None = None,
        proto: ProtoReaders | None = None,
    ) -> None:
        self.resource = resource
        # Pods and Nodes: LIST pages asked for in protobuf (sources.proto), their items
        # read by these; None once a protobuf answer could not be read (JSON from then on)
        self._proto = proto
        # bytes -> what `decode` reads: only the fields it reads (sources.wire)
        self._read = read
        # bytes -> (key, record) for the objects it takes, the rest read as above
        # (sources.straight: bound pods and nodes, by the ten thousand)
        self._fast = fast
        self.field_selector = field_selector
        # a job kind whose CRD may not be installed: a 404 means "none of these", checked
        # again every ABSENT_RECHECK_SECONDS, not an error
        self.optional = optional
        self.absent = False
        self._decode = decode
        self.namespace = namespace
        self.label_selector = label_selector
        self._api = api
        self._settings = settings
        self._notify = notify
        self._backoff = backoff
        self._page_size = page_size
        # what each object decoded to; None: an object the planner reads nothing of (kept
        # so that a relist knows it)
        self.items: dict[Key, Any] = {}
        self._values: tuple[int, tuple[Any, ...]] | None = None  # (version, values())
        self.oversized: dict[Key, int] = {}  # key -> size in bytes of the dropped object
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.last_error: str | None = None
        self.failing_since: float | None = None  # monotonic start of the error streak
        self._warned = False  # the streak was logged as a warning: log its end too
        self.counters = _Counters()
        self.version = 0  # bumped on every change, so readers can memoise snapshots

    @property
    def name(self) -> str:
        scope = self.namespace if self.namespace is not None else "*"
        return f"{self.resource.kind}({scope})" if self.resource.namespaced else self.resource.kind

    # -- the informer loop --------------------------------------------------------------

    async def run(self) -> None:
        need_list = True
        tries = _Attempts()
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                    tries.progressed()
                events, seconds = await self._watch()
                self.counters.watch_restarts += 1
                tries.expired_again = False
                if events or seconds >= 1.0:
                    tries.progressed()
                    continue
                # A server that closes watches at once would make us spin: back off.
                tries.answered += 1
                log.debug("kube.watch_short", cache=self.name, seconds=round(seconds, 3))
                wait = self._backoff(tries.answered)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a cache must outlive any surprise
                relist, wait = self._after_failure(exc, tries)
                need_list = need_list or relist
            await asyncio.sleep(wait)

    def _after_failure(self, exc: Exception, tries: _Attempts) -> tuple[bool, float]:
        """Whether the failure calls for a fresh LIST, and the seconds to wait first:
        kubeapi.classify's verdict, as for every caller."""
        failure = classify(exc)
        if self.optional and failure is ApiFailure.NOT_FOUND:
            self._absent()
            return True, ABSENT_RECHECK_SECONDS
        if failure is ApiFailure.EXPIRED:
            # The server forgot our version (compaction, or a restart that rebuilt its
            # watch cache): only a fresh LIST can make the cache current, and waiting out
            # a back-off earned while the server was away would plan on stale objects.
            self.counters.relists_410 += 1
            log.info("kube.watch_expired", cache=self.name, resource_version=self.resource_version)
            self._failed_quietly("watch expired (410 Gone): re-listing")
            if not tries.expired_again:  # a 410 right after our own relist: do not loop on it
                tries.expired_again = True
                return True, 0.0
            tries.answered += 1
            return True, self._backoff(tries.answered)
        if failure is ApiFailure.UNREACHABLE:
            # refused, reset or cut off mid-answer: the server is not there (restart,
            # network); nothing is gained by waiting longer than it takes to come back
            tries.unreachable += 1
            self._failed(exc, error_text(exc))
            return False, min(self._backoff(tries.unreachable), CONNECT_RETRY_MAX_SECONDS)
        tries.answered += 1
        tries.unreachable = 0
        if failure is ApiFailure.UNEXPECTED:
            self._failed(exc, f"unexpected {error_text(exc)}")
            log.exception("kube.cache_unexpected_error", cache=self.name)
            return False, self._backoff(tries.answered)
        self._failed(exc, error_text(exc))
        return False, max(self._backoff(tries.answered), _server_wait(exc))

    def _failed_quietly(self, text: str) -> None:
        """Not current until the relist is done, without a warning for the normal case."""
        self.last_error = text
        if self.failing_since is None:
            self.failing_since = time.monotonic()

    def _failed(self, exc: BaseException, text: str) -> None:
        self.counters.errors += 1
        # one warning per streak and per new kind of error: an outage retried every
        # second must not write a line per retry per cache
        new = self.failing_since is None or _error_kind(text) != _error_kind(self.last_error or "")
        self.last_error = text
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self._warned = True
        (log.warning if new else log.debug)(
            "kube.cache_error", cache=self.name, error=text, resource_version=self.resource_version
        )

    def _call_args(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        r = self.resource
        kwargs: dict[str, Any] = {}
        if self.label_selector:
            kwargs["label_selector"] = self.label_selector
        if self.field_selector:
            kwargs["field_selector"] = self.field_selector
        if not r.namespaced:
            return self._api.list_cluster_custom_object, (r.group, r.version, r.plural), kwargs
        if self.namespace is None:
            return (
                self._api.list_custom_object_for_all_namespaces,
                (r.group, r.version, r.plural),
                kwargs,
            )
        return (
            self._api.list_namespaced_custom_object,
            (r.group, r.version, self.namespace, r.plural),
            kwargs,
        )

    async def list_once(self) -> None:
        try:
            await self._list()
        except ApiException as exc:
            # which request failed, for a one-line error (kubeapi.failure_line)
            r = self.resource
            where = f"in namespace {self.namespace}" if self.namespace else "in all namespaces"
            scope = where if r.namespaced else "(cluster-scoped)"
            group = f".{r.group}" if r.group else ""
            exc.add_note(f"list {r.plural}{group} {scope}")
            raise

    async def _list(self) -> None:
        """LIST page by page. The next page is asked for before this one is decoded, so
        the server serves it while we decode (at 50k pods, 100 pages of ~14 ms of CPU
        each): pages are still decoded in their order, one at a time, and a failure of
        the next page (410 for an expired continue token among them) is raised after
        this one is decoded, as when it was asked for afterwards."""
        func, args, kwargs = self._call_args()
        fresh: dict[Key, Any] = {}
        seen: set[Key] = set()
        body = await self._page(func, args, kwargs, "")
        while True:
            version, token, raws, take = self._read_page(body)
            del body  # the items are slices of it (or copies): freed with `raws`
            ahead = asyncio.ensure_future(self._page(func, args, kwargs, token)) if token else None
            try:
                await self._take_page(raws, take, fresh, seen)
            except BaseException:
                if ahead is not None:
                    # not wanted any more; if it failed already, its failure is no news
                    # (cancel() of a done task stops the loop reporting it unretrieved)
                    ahead.cancel()
                raise
            del raws
            if ahead is None:
                break
            body = await ahead
        self.counters.lists += 1
        if self.absent:
            self.absent = False
            log.info("kube.kind_installed", cache=self.name)
        self._install(fresh, seen, version)
        self._recovered()
        self.synced.set()

    def _read_page(self, body: bytes) -> tuple[str, str, Sequence[Any], _Take]:
        """A LIST answer: (its resourceVersion, its continue token, its items still
        encoded, how each is taken). Protobuf when the server sent it (sources.proto);
        one that cannot be read fails this LIST, and the cache asks in JSON from then on."""
        if self._proto is not None and proto.is_proto(body):
            try:
                version, token, raws = proto.list_page(body)
            except proto.ProtoError as exc:
                raise self._proto_failed(exc) from None
            self.counters.proto_pages += 1
            return version, token, raws, self._take_proto
        page = _PAGE.decode(body)
        meta = page.metadata or {}
        version = str(meta.get("resourceVersion") or "")
        return version, meta.get("continue") or "", page.items or (), self._take

    async def _page(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], token: str
    ) -> bytes:
        """One page of the LIST, its bytes."""
        if self._proto is not None:
            kwargs = {**kwargs, "_accept": proto.ACCEPT}
        response = await func(
            *args,
            **kwargs,
            limit=self._page_size,
            _continue=token or None,
            _request_timeout=self._settings.kube_request_timeout_seconds,
            _preload_content=False,  # the bytes: decoded here, an object at a time
        )
        return await _body(response)

    async def _take_page(
        self, items: Sequence[Any], take: _Take, fresh: dict[Key, Any], seen: set[Key]
    ) -> None:
        """Decode a page object by object: only one raw object is held decoded at a time,
        and only the records of a large LIST stay in memory. The event loop runs between
        every TAKE_CHUNK objects: the next page's request goes out first (a pooled
        connection takes no wait) and its answer is read while we decode."""
        await asyncio.sleep(0)  # let the next page's request start
        for start in range(0, len(items), TAKE_CHUNK):
            if start:
                await asyncio.sleep(0)
            for raw in items[start : start + TAKE_CHUNK]:
                take(raw, fresh, seen)

    def _absent(self) -> None:
        """The API server does not serve the resource (its CRD is not installed): the cache
        is current and empty. One info line, not a warning per retry."""
        if not self.absent:
            log.info(
                "kube.kind_not_installed",
                cache=self.name,
                resource=f"{self.resource.plural}.{self.resource.group}/{self.resource.version}",
                note="its CRD is not installed: no such jobs are managed; checked again every "
                f"{ABSENT_RECHECK_SECONDS:.0f}s",
            )
        self.absent = True
        self._install({}, set(), "")
        self._recovered()
        self.synced.set()

    def _recovered(self) -> None:
        if self.failing_since is not None and self._warned:
            log.info(
                "kube.cache_recovered",
                cache=self.name,
                after_seconds=round(time.monotonic() - self.failing_since, 1),
            )
        self._warned = False
        self.last_error = None
        self.failing_since = None

    async def _watch(self) -> tuple[int, float]:
        """One watch request from the last version; returns (events, seconds) at its end.

        The stream is read here, a line per event, rather than through the client's
        Watch: that one builds an ApiClient (and its TLS context, ~23 ms of CPU) per
        request, and decodes each event with json before we re-encode it for its size."""
        func, args, kwargs = self._call_args()
        timeout = self._settings.watch_timeout_seconds
        loop = asyncio.get_running_loop()
        started = loop.time()
        events = 0
        response = await func(
            *args,
            **kwargs,
            watch=True,
            resource_version=self.resource_version or None,
            timeout_seconds=timeout,
            allow_watch_bookmarks=True,
            # The server ends the watch after timeout_seconds; this only catches a
            # server (or proxy) that does not.
            _request_timeout=timeout + max(5.0, timeout * 0.1),
            _preload_content=False,
        )
        try:
            if response.status != 200:
                # Unpreloaded answers are not checked by the client: a 403 or 429 would
                # be read as a stream. Raise the ApiException a LIST would have raised.
                raise _api_exception(response, await response.read())
            self._recovered()  # connected: whatever failed before works again
            self.counters.watches += 1
            # an empty read: the server ended the watch (its timeout). A line may be up
            # to 4 MiB (the client's read buffer), more than etcd keeps in an object.
            while line := await response.content.readline():
                events += 1
                self._apply_line(line)
        finally:
            response.release()
        return events, loop.time() - started

    # -- applying changes ---------------------------------------------------------------

    def _fits(self, key: Key, size: int) -> bool:
        """An object of `size` bytes (as served, or re-encoded from a watch event) may be
        kept; one too large is dropped, logged once per size, and named in errors()."""
        if size <= self._settings.max_object_bytes:
            self.oversized.pop(key, None)
            return True
        if self.oversized.get(key) != size:
            self.counters.dropped_oversized += 1
            log.warning(
                "kube.object_too_large",
                cache=self.name,
                namespace=key[0],
                name=key[1],
                bytes=size,
                max_bytes=self._settings.max_object_bytes,
            )
        self.oversized[key] = size
        return False

    def _apply_line(self, line: bytes) -> None:
        """One line of a watch stream: an event, its object still encoded. An ERROR
        event (410 Expired among them) is raised as the ApiException the client raises."""
        try:
            event = _EVENT.decode(line)
            error = event.type == "ERROR" and event.object
            status = _STATUS.decode(event.object) if error else event
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise _not_an_event(line) from None
        if event.type == "ERROR" or not event.object:
            if status.code is None:
                raise _not_an_event(line)
            raise ApiException(status=status.code, reason=f"{status.reason}: {status.message}")
        self._apply(event.type, self._read(event.object), len(event.object))

    def _apply(self, event_type: str, obj: Any, size: int) -> None:
        if not isinstance(obj, dict):
            log.warning("kube.watch_bad_event", cache=self.name, type=event_type)
            return
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if event_type == "BOOKMARK":
            self.resource_version = rv or self.resource_version
            return
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("kube.watch_unknown_event", cache=self.name, type=event_type)
            return
        self.counters.events += 1
        key = _key(obj)
        old = self.items.get(key)
        known = key in self.items
        if rv:
            self.resource_version = rv
        if event_type == "DELETED":
            self.oversized.pop(key, None)
            if known:
                del self.items[key]
                self.version += 1
            self._notify(self.resource.kind, "DELETED", old if known else self._decode(obj))
            return
        if not self._fits(key, size):
            self.version += 1
            if known:  # what we knew is no longer true: forget it
                del self.items[key]
                self._notify(self.resource.kind, "DELETED", old)
            return
        record = self._decode(obj)
        self.items[key] = record
        self.version += 1
        self._notify(self.resource.kind, "MODIFIED" if known else "ADDED", record)

    def _take(self, raw: msgspec.Raw, fresh: dict[Key, Any], seen: set[Key]) -> None:
        """One object of a LIST page, still encoded: its size is its length, and one too
        large is not decoded beyond its name."""
        if len(raw) > self._settings.max_object_bytes:
            self._listed(_key(_NAMES.decode(raw)), len(raw), seen)
            return
        taken = self._fast(raw) if self._fast is not None else None
        if taken is None:
            obj = self._read(raw)
            if not isinstance(obj, dict):
                raise ValueError(f"LIST of {self.name} holds an item that is not an object")
            taken = _key(obj), self._decode(obj)
        fresh[self._listed(taken[0], len(raw), seen)] = taken[1]

    def _take_proto(self, raw: bytes, fresh: dict[Key, Any], seen: set[Key]) -> None:
        """One object of a protobuf LIST page (sources.proto), as `_take` takes a JSON
        one: its size is its length as served."""
        readers = self._proto
        assert readers is not None  # only pages read while it is set come here
        try:
            if len(raw) > self._settings.max_object_bytes:
                self._listed(_key(readers.wire(raw)), len(raw), seen)
                return
            taken = readers.fast(raw) if readers.fast is not None else None
            if taken is None:
                obj = readers.wire(raw)
                taken = _key(obj), self._decode(obj)
        except proto.ProtoError as exc:
            raise self._proto_failed(exc) from None
        fresh[self._listed(taken[0], len(raw), seen)] = taken[1]

    def _listed(self, key: Key, size: int, seen: set[Key]) -> Key:
        """An object of this LIST, of `size` bytes as served (`_fits`)."""
        seen.add(key)
        self._fits(key, size)
        return key

    def _proto_failed(self, exc: proto.ProtoError) -> proto.ProtoError:
        """A protobuf answer we cannot read (a proxy that mangles it, a server we do not
        know): said once, and the cache asks in JSON from then on; the LIST fails with
        it and is retried as any failed LIST is."""
        log.warning("kube.protobuf_unreadable", cache=self.name, error=str(exc))
        self._proto = None
        return exc

    def _install(self, fresh: dict[Key, Any], seen: set[Key], resource_version: str) -> None:
        """Install a fresh LIST, reporting its differences to the cache as events."""

        for key in set(self.oversized) - seen:
            del self.oversized[key]
        old, self.items = self.items, fresh
        self.resource_version = resource_version
        self.version += 1
        for key, record in fresh.items():
            if key not in old:
                self._notify(self.resource.kind, "ADDED", record)
            elif old[key] != record:
                self._notify(self.resource.kind, "MODIFIED", record)
        for key, record in old.items():
            if key not in fresh:
                self._notify(self.resource.kind, "DELETED", record)

    def values(self) -> tuple[Any, ...]:
        """The records, ordered by (namespace, name), without the objects the planner
        reads nothing of; the same tuple while the cache does not change."""
        if self._values is None or self._values[0] != self.version:
            values = tuple(r for _, r in sorted(self.items.items()) if r is not None)
            self._values = (self.version, values)
        return self._values[1]

    def errors(self) -> list[str]:
        out = []
        if self.last_error:
            out.append(f"{self.name}: {self.last_error}")
        for (ns, name), size in sorted(self.oversized.items()):
            where = f"{ns}/{name}" if ns else name
            out.append(
                f"{self.name}: {where} dropped: {size} bytes exceeds max_object_bytes "
                f"{self._settings.max_object_bytes}"
            )
        return out


class _Page(msgspec.Struct):
    """A LIST answer, its items left encoded (msgspec.Raw: a slice of the answer's bytes):
    each is decoded alone, so its size costs nothing and a page is never a whole tree."""

    items: list[msgspec.Raw] | None = None
    metadata: dict[str, Any] | None = None


class _Names(msgspec.Struct):
    """Of an object too large to keep: only what names it."""

    metadata: dict[str, Any] | None = None


class _Status(msgspec.Struct):
    """A Status: what an ERROR event carries, or a whole line from a server that failed
    the stream after its 200."""

    code: int | None = None
    reason: str = ""
    message: str = ""


class _Event(_Status):
    """A watch event, its object left encoded (its size is its length)."""

    type: str = ""
    object: msgspec.Raw = msgspec.Raw()  # empty: the line had none


_PAGE = msgspec.json.Decoder(_Page)
_EVENT = msgspec.json.Decoder(_Event)
_STATUS = msgspec.json.Decoder(_Status)
_NAMES = msgspec.json.Decoder(_Names)


async def _body(response: Any) -> bytes:
    """The body of an unpreloaded answer; a failure raised as the ApiException the client
    raises for a preloaded one (it does not check unpreloaded answers itself), its
    Status in JSON if the server sent it in protobuf."""
    try:
        data: bytes = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        raise _api_exception(response, proto.status_json(data) if proto.is_proto(data) else data)
    return data


def _api_exception(response: Any, data: bytes) -> ApiException:
    """The exception the client raises for a failed preloaded answer, so that
    kubeapi.classify reads ours as it reads its own."""
    # ApiException hints http_resp as aiohttp's ClientResponse, yet the client's own
    # rest.py passes this RESTResponse wrapper (status, reason, body, headers): the hint
    # is narrower than the client's use, not our call wrong.
    return ApiException(http_resp=RESTResponse(response, data))  # type: ignore[arg-type]


def _not_an_event(line: bytes) -> ValueError:
    text = line[:200].decode(errors="replace")
    return ValueError(f"watch sent a line that is not an event: {text}")


def _error_kind(text: str) -> str:
    return text.split(":", 1)[0]


def _key(obj: RawObject | _Names) -> Key:
    meta = (obj.metadata if isinstance(obj, _Names) else obj.get("metadata")) or {}
    # a namespace's objects share its name: 50k pods' keys, a few dozen namespaces
    return (sys.intern(str(meta.get("namespace") or "")), str(meta.get("name") or ""))


def _server_wait(exc: BaseException) -> float:
    """The server's Retry-After on 429/503, at most a minute; 0 when it did not say."""
    return retry_after(exc, datetime.now(UTC), cap=60.0) or 0.0


@dataclass
class _Memo:
    versions: tuple[Any, ...] = ()
    snapshot: KubeObjects | None = None
    records_versions: tuple[int, ...] = ()
    records: Records | None = None


@dataclass(frozen=True)
class _CacheMaker:
    """What every cache of one KubeSource shares; `make` adds what one cache watches."""

    api: ObjectsApi
    settings: KubeSettings
    notify: Callable[[str, str, Any], None]
    backoff: Callable[[int], float]
    page_size: int
    decode: Mapping[str, Decoder]
    # kind -> its straight reader: only with the options `decode` was made with
    fast: Mapping[str, Straight]
    # kind -> how its protobuf LIST items are read (settings.kube_protobuf)
    protos: Mapping[str, ProtoReaders]

    def make(
        self,
        resource: ResourceKind,
        namespace: str | None,
        selector: str = "",
        optional: bool = False,
        field_selector: str = "",
    ) -> _Cache:
        return _Cache(
            resource,
            namespace,
            selector,
            self.api,
            self.settings,
            self.notify,
            self.backoff,
            self.page_size,
            self.decode[resource.kind],
            optional,
            field_selector,
            reader(resource.kind, job=resource in JOB_RESOURCES),
            self.fast.get(resource.kind),
            self.protos.get(resource.kind),
        )


def _readers(
    decode: Mapping[str, Decoder] | None, read_options: ReadOptions | None
) -> tuple[Mapping[str, Decoder], dict[str, Straight], ReadOptions | None]:
    """Each kind's decoder (`decode`, else the default settings' readers) and the straight
    readers of the kinds a LIST brings by the ten thousand: only with the options
    `decode` was made with (`KubeSource`'s `decode`, `read_options`)."""
    if decode is None:
        read_options = read_options or Settings.model_validate({}).read_options()
        decode = decoders(read_options)
    fast = {
        kind: found
        for kind in ("Pod", "Node", "PodGroup", "PyTorchJob")
        if read_options is not None and (found := straight(kind, read_options)) is not None
    }
    return decode, fast, read_options


class KubeSource:
    """Informer-like caches of the managed job kinds, PodGroups, Queues, PriorityClasses
    and HorizontalPodAutoscalers.

    `settings.namespaces` empty: one all-namespaces cache per namespaced resource, else
    one per namespace. `settings.label_selector` applies to jobs only. Call `start()`
    inside the event loop, `wait_synced()` before the first cycle, `stop()` at the end.
    """

    def __init__(
        self,
        settings: KubeSettings,
        api_client: ApiClient,
        on_change: OnChange | None = None,
        *,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        rng: random.Random | None = None,
        page_size: int | None = None,  # None: settings.kube_list_page_size
        job_kinds: Sequence[ResourceKind] = (PYTORCHJOB,),
        watch_nodes: bool = False,
        watch_pods: bool = False,
        decode: Mapping[str, Decoder] | None = None,
        read_options: ReadOptions | None = None,
    ) -> None:
        """`job_kinds`: the job resources to cache (the daemon passes the managed kinds).
        Each object is decoded when it arrives with `decode[its kind]`: the daemon passes
        `parse.decoders(settings)`; None, the readers of the default settings (GPU
        resource names, annotation names as `Settings()` has them). `read_options`: the
        options `decode` was made with, for the readers that build a LIST's bound pods
        and nodes straight from their bytes (sources.straight); None with `decode`
        given: those are decoded by `decode` too."""
        self._settings = settings
        self._on_change = on_change
        self._backoff_base = backoff_base
        self._backoff_cap = backoff_cap
        self._rng = rng or random.Random()
        remember_client(api_client.configuration)
        decode, fast, read_options = _readers(decode, read_options)
        caches = _CacheMaker(
            ObjectsApi(api_client),
            settings,
            self._notify,
            self._backoff,
            # a LIST of big objects is parsed page by page: only one page is held raw at once
            page_size or settings.kube_list_page_size,
            decode,
            fast,
            {
                kind: found
                for kind in ("Pod", "Node")
                if settings.kube_protobuf
                and (found := proto_readers(kind, read_options)) is not None
            },
        )
        self._make_caches(caches, job_kinds, watch_nodes=watch_nodes, watch_pods=watch_pods)
        self._tasks: list[asyncio.Task[None]] = []
        self._memo = _Memo()

    def _make_caches(
        self,
        caches: _CacheMaker,
        job_kinds: Sequence[ResourceKind],
        *,
        watch_nodes: bool,
        watch_pods: bool,
    ) -> None:
        """One cache per resource and namespace scope (see the class docstring)."""
        settings = caches.settings
        namespaces = namespace_scopes(settings.namespaces)
        selector = settings.label_selector.strip()
        # one list per kind: a PyTorchJob and a Volcano Job may share a name
        self._jobs_by_kind = [
            [caches.make(kind, ns, selector, optional=True) for ns in namespaces]
            for kind in job_kinds
        ]
        self._jobs = [c for by_kind in self._jobs_by_kind for c in by_kind]
        self._podgroups = [caches.make(PODGROUP, ns) for ns in namespaces]
        self._queues = [caches.make(QUEUE, None)]
        self._priorityclasses = [caches.make(PRIORITY_CLASS, None)]
        # the cluster's GPUs (nodes) and, for node fit, what bound pods use of them: every
        # namespace's pods, whatever `namespaces` says (they share the nodes); unbound ones
        # too: a job's workers with no pod at all stop counting as in flight (HoldNoPods)
        self._nodes = [caches.make(NODE, None)] if watch_nodes else []
        unfinished = UNFINISHED_POD_FIELD_SELECTOR
        self._pods = [caches.make(POD, None, field_selector=unfinished)] if watch_pods else []
        # any HPA scaling a job takes it out of our hands (parse.hpa_targets); per namespace
        # like the jobs, and optional like them: a server without autoscaling/v2 has none
        self._hpas = [caches.make(HPA, ns, optional=True) for ns in namespaces]
        self._caches = [*self._jobs, *self._podgroups, *self._queues, *self._priorityclasses]
        self._caches += [*self._nodes, *self._pods, *self._hpas]

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        if self._tasks:
            raise RuntimeError("KubeSource already started")
        self._tasks = [
            asyncio.create_task(c.run(), name=f"kube-cache-{c.name}") for c in self._caches
        ]

    async def list_once(self) -> KubeObjects:
        """LIST every cache once, without watching: a one-shot read (e.g. `plan`).

        Raises the first failure (ApiException, aiohttp.ClientError, TimeoutError).
        Do not mix with `start()`.
        """

        await asyncio.gather(*(c.list_once() for c in self._caches))
        return self.objects()

    async def wait_synced(self, timeout: float) -> None:  # noqa: ASYNC109 - our contract
        """Return once every cache finished its first LIST; TimeoutError names the rest."""

        pending = [c for c in self._caches if not c.synced.is_set()]
        if pending:
            waiters = [asyncio.create_task(c.synced.wait()) for c in pending]
            try:
                await asyncio.wait(waiters, timeout=timeout)
            finally:
                for w in waiters:
                    w.cancel()
                await asyncio.gather(*waiters, return_exceptions=True)
        unsynced = [c for c in self._caches if not c.synced.is_set()]
        if unsynced:
            detail = "; ".join(
                c.name + (f" (last error: {c.last_error})" if c.last_error else "")
                for c in unsynced
            )
            raise TimeoutError(f"Kubernetes caches not synced after {timeout:g}s: {detail}")

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for cache, result in zip(self._caches, results, strict=False):
            if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                log.error("kube.cache_crashed", cache=cache.name, error=repr(result))

    # -- reading ------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return all(c.synced.is_set() for c in self._caches)

    @property
    def current(self) -> bool:
        """Every cache listed and none is failing to list or watch now: what readiness
        means. After an outage this stays False until each cache has reconnected (and
        re-listed where the server forgot its version), so /readyz does not claim a
        picture it cannot have."""
        return all(c.synced.is_set() and c.failing_since is None for c in self._caches)

    def objects(self) -> KubeObjects:
        """The current records; no API call. Memoised until a cache changes."""

        now = time.monotonic()
        failing = max(
            (now - c.failing_since for c in self._caches if c.failing_since is not None),
            default=0.0,
        )
        versions = tuple((c.version, c.last_error, c.synced.is_set()) for c in self._caches)
        memo = self._memo
        if memo.snapshot is not None and memo.versions == versions and not failing:
            return memo.snapshot
        records = self._records()
        snapshot = KubeObjects(
            records=records,
            synced=self.synced,
            errors=tuple(e for c in self._caches for e in c.errors()),
            failing_seconds=failing,
        )
        self._memo.versions, self._memo.snapshot = versions, snapshot
        return snapshot

    def _records(self) -> Records:
        """The records of every cache: the same object while no cache changed."""
        versions = tuple(c.version for c in self._caches)
        memo = self._memo
        if memo.records is not None and memo.records_versions == versions:
            return memo.records
        records = Records(
            jobs=tuple(r for caches in self._jobs_by_kind for r in _merged(caches)),
            groups=_merged(self._podgroups),
            queues=_merged(self._queues),
            priorities=_merged(self._priorityclasses),
            nodes=_merged(self._nodes),
            pods=_merged(self._pods),
            hpas=_merged(self._hpas),
            pods_known=bool(self._pods),
        )
        memo.records_versions, memo.records = versions, records
        return records

    def stats(self) -> dict[str, Any]:
        """Counters for metrics (monotonic, except the `by_cache` state fields).

        Totals over all caches: `lists` (completed LISTs), `watches` (watch requests),
        `watch_restarts` (watches that ended cleanly and were resumed), `relists_410`
        (watches expired by the server), `events` (ADDED/MODIFIED/DELETED applied),
        `dropped_oversized`; `errors` is {kind: failed LIST/WATCH attempts}; `by_cache`
        maps a cache name (`PyTorchJob(ns1)`, `Queue`, ...) to its own counters plus
        `synced`, `last_error`, `objects` and `resource_version`.
        """

        totals = _Counters()
        errors: dict[str, int] = {}
        by_cache: dict[str, dict[str, Any]] = {}
        for c in self._caches:
            for name in vars(totals):
                setattr(totals, name, getattr(totals, name) + getattr(c.counters, name))
            errors[c.resource.kind] = errors.get(c.resource.kind, 0) + c.counters.errors
            by_cache[c.name] = {
                **vars(c.counters),
                "synced": c.synced.is_set(),
                "last_error": c.last_error,
                "objects": len(c.items),
                "resource_version": c.resource_version,
                "kind": c.resource.kind,
                "optional": c.optional,
                "absent": c.absent,
            }
        return {**vars(totals), "errors": errors, "by_cache": by_cache}

    # -- internals ----------------------------------------------------------------------

    def _notify(self, kind: str, event_type: str, record: Any) -> None:
        if self._on_change is None or record is None:
            return
        try:
            self._on_change(kind, event_type, record)
        except Exception:  # a callback bug must not stop the watch
            log.exception("kube.on_change_failed", kind=kind, event_type=event_type)

    def _backoff(self, failures: int) -> float:
        """Exponential in consecutive failures, capped, with jitter in [d/2, d]."""

        if failures <= 0:
            return 0.0
        delay = min(self._backoff_cap, self._backoff_base * 2 ** min(failures - 1, 30))
        return self._rng.uniform(delay / 2, delay)


GC_GEN0_THRESHOLD = 50_000


def sync_gc() -> None:
    """Tune the collector for the sync (the daemon calls it before its caches list; it
    changes the whole process, so nothing else does). A sync allocates a record per
    object and keeps it: with the default first-generation threshold (700) the collector
    ran ~250 times over the records of 17k objects and took ~12% of the sync's CPU
    (docs/benchmarks.md, [placement] #27 third round); at 50,000 it runs a few times.
    What is freed by reference counting (nearly everything: records form no cycles) is
    freed as before."""
    first, second, third = gc.get_threshold()
    gc.set_threshold(max(first, GC_GEN0_THRESHOLD), second, third)


def settle_gc() -> None:
    """Tune the collector for a daemon whose caches have synced (the daemon calls it once
    they have; it changes the whole process, so nothing else does). Measured on the real API
    server (docs/benchmarks.md, [structure] #21): at 20k jobs the collector took 119 of a
    steady cycle's 253 ms, walking the caches' records again and again. What the sync
    read lives as long as the process (records are replaced, never mutated, and form no
    cycles): gc.freeze() takes it out of the collector's walks. A cycle then allocates
    tens of thousands of short-lived objects (the plan, its log lines), nearly all freed
    by reference counting: a first-generation threshold of 50,000 instead of 700 stops
    the collector from running every few hundred of them (`sync_gc`)."""
    gc.freeze()
    sync_gc()
    # the sync's pages and the dicts they were decoded into are gone: what glibc kept of
    # them (~17 MiB at 10k jobs, 26k nodes, 50k pods) goes back to the system
    release_free_memory()
    log.debug("kube.gc_settled", frozen=gc.get_freeze_count(), threshold=gc.get_threshold())


def _merged(caches: Sequence[_Cache]) -> tuple[Any, ...]:
    if len(caches) == 1:
        return caches[0].values()
    # several namespace scopes: each cache is sorted, their union is sorted again
    items: dict[Key, Any] = {}
    for c in caches:
        items.update((k, v) for k, v in c.items.items() if v is not None)
    return tuple(obj for _, obj in sorted(items.items()))


class KubeconfigError(ValueError):
    """A kubeconfig file that cannot be used; str() names the file and the problem."""


def check_kubeconfig(path: Path, context: str = "") -> None:
    """Fail with one line naming the file and what is wrong with it, before the client
    library turns the same problem into a traceback or a riddle. With `context`, that
    context must exist (the current-context need not)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise KubeconfigError(f"kubeconfig {path}: no such file") from None
    except IsADirectoryError:
        raise KubeconfigError(f"kubeconfig {path}: is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise KubeconfigError(f"kubeconfig {path}: cannot read: {why}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeconfigError(yaml_error_line(path, exc, "kubeconfig not YAML")) from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path}: not a mapping (a Config object)")
    for key in ("clusters", "contexts", "users"):
        if not isinstance(doc.get(key), list) or not doc[key]:
            raise KubeconfigError(f"kubeconfig {path}: no {key}")
    names = [c.get("name") for c in doc["contexts"] if isinstance(c, dict)]
    if context:
        if context not in names:
            raise KubeconfigError(
                f"kubeconfig {path}: no context {context!r} (it has {', '.join(map(str, names))})"
            )
        return
    current = doc.get("current-context")
    if not isinstance(current, str) or not current:
        raise KubeconfigError(f"kubeconfig {path}: no current-context")
    if current not in names:
        raise KubeconfigError(
            f"kubeconfig {path}: current-context {current!r} is not among "
            f"its contexts ({', '.join(map(str, names))})"
        )


def kubeconfig_source(settings: KubeOptions) -> str | None:
    """The kubeconfig to use, as kubectl and controller-runtime pick it: the `kubeconfig`
    setting (--kubeconfig), else $KUBECONFIG (a list of files joined by the path
    separator), else None: in-cluster, falling back to ~/.kube/config. A context given
    without a file means a file: ~/.kube/config (in-cluster config has no contexts)."""
    if settings.kubeconfig:
        return str(settings.kubeconfig)
    env = os.environ.get("KUBECONFIG", "")
    if any(env.split(os.pathsep)):
        return env
    if settings.kube_context:
        return _home_kubeconfig()
    return None


IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def context_namespace(settings: KubeOptions) -> str:
    """The namespace kubectl would use without -n: the kubeconfig context's, else the
    pod's own in a cluster, else `default`."""
    source = kubeconfig_source(settings)
    if source is None and IN_CLUSTER_NAMESPACE.exists():
        return IN_CLUSTER_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    paths = [p for p in (source or _home_kubeconfig()).split(os.pathsep) if p]
    wanted = settings.kube_context
    for path in paths:
        try:
            doc = yaml.safe_load(Path(os.path.expanduser(path)).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if not isinstance(doc, dict):
            continue
        name = wanted or doc.get("current-context")
        for ctx in doc.get("contexts") or []:
            if isinstance(ctx, dict) and ctx.get("name") == name:
                namespace = (ctx.get("context") or {}).get("namespace")
                return str(namespace) if namespace else "default"
    return "default"


def _check_files(source: str, context: str) -> None:
    """One file (the usual case) is checked whole; of a $KUBECONFIG list, which kubectl
    merges, only that the files exist (a part may hold the users, another the clusters)."""
    paths = [p for p in source.split(os.pathsep) if p]
    if len(paths) == 1:
        check_kubeconfig(Path(os.path.expanduser(paths[0])), context)
    elif not any(os.path.exists(os.path.expanduser(p)) for p in paths):
        raise KubeconfigError(f"KUBECONFIG={source}: none of these files exists")


def _home_kubeconfig() -> str:
    return os.path.expanduser("~/.kube/config")


def _check_default_kubeconfig(in_cluster: str) -> None:
    """~/.kube/config, checked like an explicit one when it exists; when it does not,
    nothing was found anywhere: one line saying where we looked, in kubectl's order (the
    client library would log `Config not found` and then blame the file's content)."""
    default = _home_kubeconfig()
    if os.path.exists(default):
        check_kubeconfig(Path(default))
        return
    raise KubeconfigError(
        "no kubeconfig found: looked for --kubeconfig (the kubeconfig setting): not given; "
        "$KUBECONFIG: not set; the in-cluster config: "
        f"{in_cluster.strip().rstrip('.') or 'not in a pod'}; {default}: no such file"
    )


async def make_api_client(settings: KubeOptions) -> ApiClient:
    """An ApiClient from the kubeconfig `kubeconfig_source` picks (with the `kube_context`
    setting's context), else the in-cluster config, else ~/.kube/config. A kubeconfig that
    cannot be used raises KubeconfigError."""

    configuration = Configuration()
    context = settings.kube_context or None
    source = kubeconfig_source(settings)
    if source is not None:
        _check_files(source, context or "")
        try:
            await kube_config.load_kube_config(
                config_file=source,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except ConfigException as exc:
            raise KubeconfigError(f"kubeconfig {source}: {exc}") from None
    else:
        try:
            # the one loader kubernetes_asyncio ships without annotations
            kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except ConfigException as in_cluster:
            _check_default_kubeconfig(str(in_cluster))
            try:
                await kube_config.load_kube_config(
                    config_file=_home_kubeconfig(),
                    client_configuration=configuration,
                    persist_config=False,
                )
            except (ConfigException, OSError) as default:
                raise ConfigException(
                    f"no Kubernetes configuration: not in a cluster ({in_cluster}) and no "
                    f"usable default kubeconfig ({default}); set kubeconfig"
                ) from default
    # Every cache holds one connection for its watch; lists, patches, Events and Lease
    # renewals must still find one free.
    kinds = len(settings.job_kinds) or len(JOB_RESOURCES)
    watches = watch_count(settings.namespaces, kinds, pods=settings.node_fit)
    configuration.connection_pool_maxsize = max(
        configuration.connection_pool_maxsize, watches + POOL_SPARE
    )
    return ApiClient(configuration)


POOL_SPARE = 16  # connections beside the watches: lists, patches, Events, the Lease


def namespace_scopes(namespaces: Sequence[str]) -> list[str | None]:
    """The namespace scopes of the namespaced caches: each chosen namespace once, or
    one all-namespaces scope."""
    chosen = [ns.strip() for ns in namespaces if ns and ns.strip()]
    return list(dict.fromkeys(chosen)) or [None]


def watch_count(namespaces: Sequence[str], job_kinds: int, *, pods: bool) -> int:
    """The watches KubeSource holds open: per namespace scope one per job kind, one for
    PodGroups and one for HPAs; one each for Queues, PriorityClasses and Nodes; one for
    bound Pods."""
    return len(namespace_scopes(namespaces)) * (job_kinds + 2) + 3 + (1 if pods else 0)
