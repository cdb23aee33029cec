"""A list-then-watch cache of one resource in one namespace scope: the loop of an informer.

LIST (record the resourceVersion; the paging is read.kube.pages), WATCH from it, apply
ADDED/MODIFIED/DELETED, follow BOOKMARKs; a watch that ends is renewed from the last
version; `410 Gone` (the server forgot that version) means LIST again; other errors back
off exponentially with jitter, an unreachable server is retried within a second.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
import structlog
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.client.kubeapi import ApiFailure, classify, error_text, retry_after
from autoscaler.core.options import KubeOptions
from autoscaler.core.resources import ResourceKind
from autoscaler.read.parse import Decoder

from .pages import (
    CacheCounters,
    Key,
    ListPages,
    ObjectsApi,
    ProtoReaders,
    _api_exception,
    _key,
)
from .straight import Straight
from .wire import Reader

__all__ = ["ABSENT_RECHECK_SECONDS", "CONNECT_RETRY_MAX_SECONDS", "WatchEvent", "WatchStalled"]

log = structlog.get_logger("autoscaler.read.kube.cache")

CONNECT_RETRY_MAX_SECONDS = 1.0
# A job kind whose CRD is not installed is asked for again this often: a CRD installed
# (or re-created) later is managed from the next cycle on (min_interval_seconds is 15 s by
# default). A LIST answered 404 costs the server next to nothing.
ABSENT_RECHECK_SECONDS = 5.0


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


class _Cache(ListPages):
    """The objects of one resource in one namespace scope (None: all namespaces)."""

    def __init__(
        self,
        resource: ResourceKind,
        namespace: str | None,
        label_selector: str,
        api: ObjectsApi,
        settings: KubeOptions,
        notify: Callable[[str, str, Any, Any], None] | None,
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
        # Pods and Nodes: LIST pages asked for in protobuf (read.kube.proto), their items
        # read by these; None once a protobuf answer could not be read (JSON from then on)
        self._proto = proto
        # bytes -> what `decode` reads: only the fields it reads (read.kube.wire)
        self._read = read
        # bytes -> (key, record) for the objects it takes, the rest read as above
        # (read.kube.straight: bound pods and nodes, by the ten thousand)
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
        # told of each change; None: nothing wants this cache's changes (KubeSource)
        self._notify = notify
        self._backoff = backoff
        self._page_size = page_size
        # what each object decoded to; None: an object the planner reads nothing of (kept
        # so that a relist knows it)
        self.items: dict[Key, Any] = {}
        self._sorted = _Sorted()  # values(), kept
        self.oversized: dict[Key, int] = {}  # key -> size in bytes of the dropped object
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.last_error: str | None = None
        self.failing_since: float | None = None  # monotonic start of the error streak
        self._warned = False  # the streak was logged as a warning: log its end too
        self.counters = CacheCounters()
        self.version = 0  # bumped on every change, so readers can memoise snapshots
        # monotonic time the server last said anything to this cache (a LIST page, a
        # watch's answer, an event, a bookmark): how old the cache may be (metrics)
        self.heard: float | None = None
        # its watch delivered nothing for watch_stall_seconds and has not connected since:
        # what it holds may be stale (writes hold, /readyz fails)
        self.stalled = False
        # called when the cache is answered again after failing: the server is back
        self.on_answer: Callable[[], None] | None = None

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
            except WatchStalled as exc:
                # a connection that carries nothing (a proxy or load balancer that stopped
                # forwarding): resumed from the last version at once, no LIST needed
                self._stalled(exc)
                wait = 0.0
            except Exception as exc:  # a cache must outlive any surprise
                relist, wait = self._after_failure(exc, tries)
                need_list = need_list or relist
            await asyncio.sleep(wait)

    def _stalled(self, exc: WatchStalled) -> None:
        self.counters.stalls += 1
        first = not self.stalled
        self.stalled = True
        self.last_error = str(exc)
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self._warned = True
        (log.warning if first else log.debug)(
            "kube.watch_stalled",
            cache=self.name,
            error=str(exc),
            resource_version=self.resource_version,
        )

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
        """One whole LIST (read.kube.pages), installed: the cache is current."""
        fresh, dropped, version = await self._read_list()
        if self.absent:
            self.absent = False
            log.info("kube.kind_installed", cache=self.name)
        self._install(fresh, dropped, version)
        self._recovered()
        self.synced.set()

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
        self.heard = time.monotonic()
        self.stalled = False
        if self.failing_since is not None and self.on_answer is not None:
            try:
                self.on_answer()
            except Exception:  # a callback bug must not stop the cache
                log.exception("kube.on_answer_failed", cache=self.name)
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
        stall = self._settings.watch_stall_seconds
        loop = asyncio.get_running_loop()
        started = loop.time()
        events = 0
        # Bookmarks are asked for, so a healthy watch of a quiet resource still says
        # something about every minute: nothing at all for `stall` seconds (its answer
        # included) is a connection that carries nothing any more.
        try:
            async with asyncio.timeout(stall) as guard:
                response = await func(
                    *args,
                    **kwargs,
                    watch=True,
                    resource_version=self.resource_version or None,
                    timeout_seconds=timeout,
                    allow_watch_bookmarks=True,
                    # The server ends the watch after timeout_seconds; this only catches
                    # a server (or proxy) that does not.
                    _request_timeout=timeout + max(5.0, timeout * 0.1),
                    _preload_content=False,
                )
                try:
                    if response.status != 200:
                        # Unpreloaded answers are not checked by the client: a 403 or 429
                        # would be read as a stream. Raise the ApiException a LIST would.
                        raise _api_exception(response, await response.read())
                    self._recovered()  # connected: whatever failed before works again
                    self.counters.watches += 1
                    # an empty read: the server ended the watch (its timeout). A line
                    # may be up to 4 MiB (the client's read buffer), more than etcd keeps.
                    while line := await response.content.readline():
                        guard.reschedule(loop.time() + stall)
                        self.heard = time.monotonic()
                        events += 1
                        self._apply_line(line)
                finally:
                    response.release()
        except TimeoutError:
            if not guard.expired():
                raise  # the client's own timeout: a failure like any other
            raise WatchStalled(
                f"watch delivered nothing (no event, no bookmark) for {stall:g}s: "
                "restarted; its objects may be stale until it is connected again"
            ) from None
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
                self._touch(key, old)
            gone = old if known else self._decode(obj)
            self._tell("DELETED", gone, gone)
            return
        if not self._fits(key, size):
            self._touch(key, old)
            if known:  # what we knew is no longer true: forget it
                del self.items[key]
                self._tell("DELETED", old, old)
            return
        record = self._decode(obj)
        if not known or old != record:
            # an object changed in nothing the planner reads (a pod's status, a job's
            # conditions) keeps its record: no new snapshot, the planner's memos hold
            self.items[key] = record
            self._touch(key, old)
        self._tell("MODIFIED" if known else "ADDED", record, old)

    def _tell(self, event_type: str, record: Any, before: Any) -> None:
        if self._notify is not None:
            self._notify(self.resource.kind, event_type, record, before)

    def _touch(self, key: Key, before: Any) -> None:
        self.version += 1
        self._sorted.touch(key, before)

    def take_changed(self) -> dict[Key, Any] | None:
        """The keys changed since the last call, each with the record it held before
        (None: a record it did not hold); None: maybe every key (a LIST was installed)."""
        changed, self._sorted.changed = self._sorted.changed, {}
        return changed

    def _install(self, fresh: dict[Key, Any], dropped: set[Key], resource_version: str) -> None:
        """Install a fresh LIST, reporting its differences to the cache as events.
        `dropped`: the objects it listed too large to keep; any other the cache dropped
        before is gone, or fits now."""

        for key in set(self.oversized) - dropped:
            del self.oversized[key]
        old, self.items = self.items, fresh
        self.resource_version = resource_version
        self.version += 1
        self._sorted.touched = self._sorted.changed = None
        if self._notify is not None:
            _report(self._notify, self.resource.kind, old, fresh)

    def values(self) -> tuple[Any, ...]:
        """The records, ordered by (namespace, name), without the objects the planner
        reads nothing of; the same tuple while the cache does not change."""
        return self.keyed()[0]

    def keyed(self) -> tuple[tuple[Any, ...], tuple[Key, ...]]:
        """values() and the key of each (_Sorted)."""
        return self._sorted.of(self.items, self.version)

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


def _report(
    notify: Callable[[str, str, Any, Any], None],
    kind: str,
    old: dict[Key, Any],
    fresh: dict[Key, Any],
) -> None:
    """A LIST installed over `old`: its differences, as the events a watch would bring."""
    for key, record in fresh.items():
        if key not in old:
            notify(kind, "ADDED", record, None)
        elif old[key] != record:
            notify(kind, "MODIFIED", record, old[key])
    for key, record in old.items():
        if key not in fresh:
            notify(kind, "DELETED", record, record)


class _Sorted:
    """A cache's records in the order of their keys, and the keys, kept: where only
    objects it already held changed since (a pod replaced, a job resized) they are
    patched in place, so a churning cluster costs what changed, not a sort of all."""

    def __init__(self) -> None:
        self.last: _Values | None = None
        # the keys changed since `of` ran (None: a LIST was installed, maybe all)
        self.touched: set[Key] | None = None
        # and since the cache's take_changed(), each with the record it held before
        self.changed: dict[Key, Any] | None = None

    def touch(self, key: Key, before: Any) -> None:
        """`key` changed from `before` (its record before its first change since)."""
        if self.touched is not None:
            self.touched.add(key)
        if self.changed is not None:
            self.changed.setdefault(key, before)

    def of(self, items: dict[Key, Any], version: int) -> tuple[tuple[Any, ...], tuple[Key, ...]]:
        last = self.last
        if last is not None and last.version == version:
            return last.values, last.keys
        touched, self.touched = self.touched, set()
        if last is not None and touched is not None and len(touched) < len(last.keys) // 4:
            values, keys = _patched(last, touched, items)
            self.last = _Values(version, values, keys)
            return values, keys
        kept = sorted((k, r) for k, r in items.items() if r is not None)
        keys = tuple(k for k, _ in kept)
        self.last = _Values(version, tuple(r for _, r in kept), keys)
        return self.last.values, keys


@dataclass(frozen=True, slots=True)
class _Values:
    """What `_Cache.keyed` made last: at which version, the records, their keys and
    each key's place among them."""

    version: int
    values: tuple[Any, ...]
    keys: tuple[Key, ...]  # sorted: a key's place is found by bisection


def _patched(
    last: _Values, touched: set[Key], items: dict[Key, Any]
) -> tuple[tuple[Any, ...], tuple[Key, ...]]:
    """`last` with each touched key as `items` holds it now: its record replaced in its
    place, or the key inserted (found by bisection) or removed. A list's insertion moves
    its tail in one memmove: a pod deleted and not yet created again costs no sort."""
    values = list(last.values)
    keys: list[Key] | None = None  # copied only once a key comes or goes
    for k in sorted(touched):
        seq = last.keys if keys is None else keys
        at = bisect_left(seq, k)
        present = at < len(seq) and seq[at] == k
        record = items.get(k)
        if record is not None and present:
            values[at] = record
        elif record is not None or present:
            keys = list(last.keys) if keys is None else keys
            if present:
                del keys[at], values[at]
            else:
                keys.insert(at, k)
                values.insert(at, record)
    return tuple(values), last.keys if keys is None else tuple(keys)


class WatchStalled(Exception):
    """A watch that delivered nothing for watch_stall_seconds (no event, no bookmark)."""


class _Status(msgspec.Struct):
    """A Status: what an ERROR event carries, or a whole line from a server that failed
    the stream after its 200."""

    code: int | None = None
    reason: str = ""
    message: str = ""


class WatchEvent(_Status):
    """A watch event, its object left encoded (its size is its length)."""

    type: str = ""
    object: msgspec.Raw = msgspec.Raw()  # empty: the line had none


_EVENT = msgspec.json.Decoder(WatchEvent)
_STATUS = msgspec.json.Decoder(_Status)


def _not_an_event(line: bytes) -> ValueError:
    text = line[:200].decode(errors="replace")
    return ValueError(f"watch sent a line that is not an event: {text}")


def _error_kind(text: str) -> str:
    return text.split(":", 1)[0]


def _server_wait(exc: BaseException) -> float:
    """The server's Retry-After on 429/503, at most a minute; 0 when it did not say."""
    return retry_after(exc, datetime.now(UTC), cap=60.0) or 0.0
