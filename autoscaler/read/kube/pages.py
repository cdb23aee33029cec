"""LIST, page by page: what a cache asks the API server for, and how a page's items
become records.

A LIST of 50k pods is 100 pages: each page is asked for before the previous one is
decoded (the server serves it meanwhile), its items are decoded one at a time (only the
records of a large LIST stay in memory), and Pods and Nodes are asked for in protobuf
(read.kube.proto) and read straight to their records where they can be
(read.kube.straight). `ListPages` is that unit of a watch cache (read.kube.cache): it
returns the fresh items of one LIST, and the cache installs them.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse

from autoscaler.core.options import KubeOptions, ReadOptions
from autoscaler.core.resources import ResourceKind
from autoscaler.read.parse import Decoder

from . import proto
from .straight import Straight, proto_straight
from .wire import Reader

log = structlog.get_logger("autoscaler.read.kube.pages")

# A LIST page is decoded this many objects at a time, the event loop running in between
# (the next page's answer is read meanwhile; other caches, the HTTP server go on): ~3 ms
# of CPU at most for pods
TAKE_CHUNK = 100

RawObject = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)


@dataclass
class CacheCounters:
    """What one cache counts (KubeSource.stats sums them)."""

    lists: int = 0
    watches: int = 0
    watch_restarts: int = 0
    relists_410: int = 0
    events: int = 0
    dropped_oversized: int = 0
    errors: int = 0
    proto_pages: int = 0  # LIST pages read in protobuf
    stalls: int = 0  # watches restarted because they delivered nothing for too long


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


# how a LIST page's item is taken into the fresh items: (raw, fresh, dropped)
_Take = Callable[[Any, dict[Key, Any], set[Key]], None]


@dataclass(frozen=True)
class ProtoReaders:
    """How a Pod or Node cache reads the items of a protobuf LIST page: `wire`, an item
    as the dict its decoder reads (the usual way); `fast`, straight to its record, or
    None for an item left to the usual way (read.kube.straight)."""

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


class _Page(msgspec.Struct):
    """A LIST answer, its items left encoded (msgspec.Raw: a slice of the answer's bytes):
    each is decoded alone, so its size costs nothing and a page is never a whole tree."""

    items: list[msgspec.Raw] | None = None
    metadata: dict[str, Any] | None = None


class _Names(msgspec.Struct):
    """Of an object too large to keep: only what names it."""

    metadata: dict[str, Any] | None = None


_PAGE = msgspec.json.Decoder(_Page)
_NAMES = msgspec.json.Decoder(_Names)


# how many bytes of a protobuf answer are read for its continue token before giving up
# on asking the next page early (the token comes within its first few hundred)
_AHEAD_BYTES = 64 * 1024


async def _body(response: Any, ahead: asyncio.Future[str] | None = None) -> bytes:
    """The body of an unpreloaded answer; a failure raised as the ApiException the client
    raises for a preloaded one (it does not check unpreloaded answers itself), its
    Status in JSON if the server sent it in protobuf. `ahead`: given the continue token
    of a LIST answer as soon as its bytes show it (`_read_ahead`)."""
    try:
        if ahead is not None and 200 <= response.status <= 299:
            data = await _read_ahead(response, ahead)
        else:
            data = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        raise _api_exception(response, proto.status_json(data) if proto.is_proto(data) else data)
    return data


async def _read_ahead(response: Any, ahead: asyncio.Future[str]) -> bytes:
    """The answer's bytes as they arrive, `ahead` given its continue token once they show
    it (or never, when they cannot); joined once at the end. A protobuf answer names it
    in its first chunks (the list's metadata comes before its items), while the rest
    still arrives; a custom resource's JSON answer in its last (its keys are sorted:
    `metadata` after `items`), before the page is joined and its envelope decoded:
    that was ~3 ms of each 4.5 MB page of 500 PyTorchJobs, the LIST at 10k jobs whose
    pages, one after another, end a sync."""
    chunks: list[bytes] = []
    looked, looking = 0, True
    while chunk := await response.content.readany():
        chunks.append(chunk)
        if not looking:
            continue
        looked += len(chunk)
        try:
            token = proto.continue_ahead(b"".join(chunks) if len(chunks) > 1 else chunk)
        except proto.ProtoError:
            looking = False  # read whole, as any answer is
            continue
        if token is not None:
            if not ahead.done():
                ahead.set_result(token)
            looking = False
        elif looked >= _AHEAD_BYTES:
            looking = False
    if not ahead.done() and chunks and not proto.is_proto(chunks[0]):
        token = _continue_at_end(chunks)
        if token:
            ahead.set_result(token)
    return b"".join(chunks)


class _ListMeta(msgspec.Struct):
    token: str = msgspec.field(default="", name="continue")


_LIST_META = msgspec.json.Decoder(_ListMeta)
_META_KEY = b'"metadata":'
# how much of a JSON answer's end is searched for the list's metadata: a continue token
# is a few hundred bytes; a page whose last object is shorter than this is searched
# past it to the object's own `metadata`, which is no list's (rfind takes the last)
_TAIL_BYTES = 4096


def _continue_at_end(chunks: list[bytes]) -> str | None:
    """The continue token of a JSON LIST answer, from its last bytes: the list's
    `metadata` is its last key when the server sorts them (a custom resource's list);
    None when its end is not that (the page is read whole first then). A guess until
    the page is read whole: `_Ahead.follow` compares it with the token decoded."""
    tail: list[bytes] = []
    size = 0
    for chunk in reversed(chunks):
        tail.append(chunk)
        size += len(chunk)
        if size >= _TAIL_BYTES:
            break
    end = b"".join(reversed(tail))
    at = end.rfind(_META_KEY)
    meta = end[at + len(_META_KEY) :].rstrip() if at >= 0 else b""
    if not meta.endswith(b"}"):
        return None
    try:
        return _LIST_META.decode(meta[:-1]).token or None
    except msgspec.DecodeError:
        return None


def _api_exception(response: Any, data: bytes) -> ApiException:
    """The exception the client raises for a failed preloaded answer, so that
    kubeapi.classify reads ours as it reads its own."""
    # ApiException hints http_resp as aiohttp's ClientResponse, yet the client's own
    # rest.py passes this RESTResponse wrapper (status, reason, body, headers): the hint
    # is narrower than the client's use, not our call wrong.
    return ApiException(http_resp=RESTResponse(response, data))  # type: ignore[arg-type]


def _key(obj: RawObject | _Names) -> Key:
    meta = (obj.metadata if isinstance(obj, _Names) else obj.get("metadata")) or {}
    # a namespace's objects share its name: 50k pods' keys, a few dozen namespaces
    return (sys.intern(str(meta.get("namespace") or "")), str(meta.get("name") or ""))


@dataclass
class _Fetch:
    """A page asked for: its bytes (`task`); `token`, the continue token it was asked
    with; `ahead`, its own continue token once its bytes show it."""

    token: str
    task: asyncio.Future[bytes]
    ahead: asyncio.Future[str]
    next: _Fetch | None = None


class _Ahead:
    """The pages of one LIST in flight: a page is asked for when the page before it is
    read (`follow`), or earlier, once the page before it shows its continue token while
    it still arrives, if that page is the next to be decoded (two pages in flight at
    most: the memory of a LIST stays a few pages). A token guessed from the bytes as
    they arrive is checked against the page read whole; a page asked for on a token
    that is not it is dropped and asked for again."""

    def __init__(self, page: Callable[[str, asyncio.Future[str]], Any]) -> None:
        self._page = page
        self._live: list[_Fetch] = []

    def ask(self, token: str) -> _Fetch:
        ahead: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        fetch = _Fetch(token, asyncio.ensure_future(self._page(token, ahead)), ahead)
        self._live.append(fetch)
        return fetch

    def follow(self, fetch: _Fetch, token: str) -> _Fetch:
        """The page after `fetch`, whose body said `token`: the one asked for early if
        it was asked with that token, else asked for now. Once it is in flight it may
        ask for the page after it as soon as its bytes name it."""
        self._live.remove(fetch)
        # a page that never named the next early (the last, or bytes not laid out as a
        # List) keeps its arm's callback, and through it itself and its bytes, in a
        # cycle until the collector runs (~45 MiB at 10k jobs, their JSON pages):
        # dropped here
        fetch.ahead.cancel()
        following = fetch.next
        if following is None or following.token != token:
            if following is not None:  # guessed wrong: not the page the server means
                self._drop(following)
            following = self.ask(token)
        return self.arm(following)

    def arm(self, fetch: _Fetch) -> _Fetch:
        """`fetch` is the next page to be decoded: it may ask for the page after it as
        soon as its bytes name it."""
        fetch.ahead.add_done_callback(lambda done: self._early(fetch, done))
        return fetch

    def _early(self, fetch: _Fetch, done: asyncio.Future[str]) -> None:
        if done.cancelled() or fetch.next is not None or fetch not in self._live:
            return
        token = done.result()
        if token:
            fetch.next = self.ask(token)

    def _drop(self, fetch: _Fetch) -> None:
        fetch.task.cancel()
        fetch.ahead.cancel()
        if fetch in self._live:
            self._live.remove(fetch)

    def cancel(self) -> None:
        """The LIST is over (read, or failed): whatever is still in flight is not wanted;
        if it failed already, its failure is no news (cancel() of a done task stops the
        loop reporting it unretrieved)."""
        for fetch in list(self._live):
            self._drop(fetch)


class ListPages:
    """The paging unit of a watch cache (read.kube.cache._Cache): one LIST read page by
    page into fresh items, without installing them. What it reads of the cache is
    declared here; the cache sets it."""

    resource: ResourceKind
    namespace: str | None
    label_selector: str
    field_selector: str
    counters: CacheCounters
    _api: ObjectsApi
    _settings: KubeOptions
    _page_size: int
    _decode: Decoder
    _read: Reader
    _fast: Straight | None
    _proto: ProtoReaders | None

    @property
    def name(self) -> str:
        scope = self.namespace if self.namespace is not None else "*"
        return f"{self.resource.kind}({scope})" if self.resource.namespaced else self.resource.kind

    def _fits(self, key: Key, size: int) -> bool:
        """The cache's (an object too large is dropped): see _Cache._fits."""
        raise NotImplementedError

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

    async def _read_list(self) -> tuple[dict[Key, Any], set[Key], str]:
        """LIST page by page: (the fresh items, the keys of the objects listed too large
        to keep, the LIST's resourceVersion). The next page is asked for before this one
        is decoded, so the server serves it while we decode (at 50k pods, 100 pages of
        ~5 ms of CPU each); a protobuf page names the page after it in its first bytes,
        and that one is asked for then, while the page still arrives (`_Ahead`: two
        pages in flight at most); a JSON one in its last, and that one is asked for
        before the page's envelope is decoded. Pages are still decoded in their order,
        one at a time, and a failure of the next page (410 for an expired continue token
        among them) is raised after this one is decoded, as when it was asked for
        afterwards."""
        func, args, kwargs = self._call_args()
        fresh: dict[Key, Any] = {}
        dropped: set[Key] = set()
        pages = _Ahead(lambda token, ahead: self._page(func, args, kwargs, token, ahead))
        fetch = pages.arm(pages.ask(""))
        try:
            while True:
                body = await fetch.task
                if fetch.next is not None and not proto.is_proto(body):
                    # a JSON page's next, asked for from its last bytes: its request goes
                    # out before this page's envelope is decoded (its task has not run)
                    await asyncio.sleep(0)
                version, token, raws, take = self._read_page(body)
                del body  # the items are slices of it (or copies): freed with `raws`
                following = pages.follow(fetch, token) if token else None
                await self._take_page(raws, take, fresh, dropped)
                del raws
                if following is None:
                    break
                fetch = following
        finally:
            pages.cancel()
        self.counters.lists += 1
        return fresh, dropped, version

    def _read_page(self, body: bytes) -> tuple[str, str, Sequence[Any], _Take]:
        """A LIST answer: (its resourceVersion, its continue token, its items still
        encoded, how each is taken). Protobuf when the server sent it (read.kube.proto);
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
        self,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        token: str,
        ahead: asyncio.Future[str] | None = None,
    ) -> bytes:
        """One page of the LIST, its bytes; `ahead` given its continue token as soon as
        they show it (`_read_ahead`)."""
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
        return await _body(response, ahead)

    async def _take_page(
        self, items: Sequence[Any], take: _Take, fresh: dict[Key, Any], dropped: set[Key]
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
                take(raw, fresh, dropped)

    def _take(self, raw: msgspec.Raw, fresh: dict[Key, Any], dropped: set[Key]) -> None:
        """One object of a LIST page, still encoded: its size is its length, and one too
        large is not decoded beyond its name (`_dropped`)."""
        if len(raw) > self._settings.max_object_bytes:
            self._dropped(_key(_NAMES.decode(raw)), len(raw), dropped)
            return
        taken = self._fast(raw) if self._fast is not None else None
        if taken is None:
            obj = self._read(raw)
            if not isinstance(obj, dict):
                raise ValueError(f"LIST of {self.name} holds an item that is not an object")
            taken = _key(obj), self._decode(obj)
        fresh[taken[0]] = taken[1]

    def _take_proto(self, raw: bytes, fresh: dict[Key, Any], dropped: set[Key]) -> None:
        """One object of a protobuf LIST page (read.kube.proto), as `_take` takes a JSON
        one: its size is its length as served."""
        readers = self._proto
        assert readers is not None  # only pages read while it is set come here
        size = len(raw)
        try:
            if size > self._settings.max_object_bytes:
                self._dropped(_key(readers.wire(raw)), size, dropped)
                return
            taken = readers.fast(raw) if readers.fast is not None else None
            if taken is None:
                obj = readers.wire(raw)
                taken = _key(obj), self._decode(obj)
        except proto.ProtoError as exc:
            raise self._proto_failed(exc) from None
        fresh[taken[0]] = taken[1]

    def _dropped(self, key: Key, size: int, dropped: set[Key]) -> None:
        """An object of this LIST too large to keep, of `size` bytes as served (`_fits`).
        Only these are noted one by one: what else was too large before and is not now
        the cache forgets as it installs the LIST (at 50k pods, ~0.3 us an object
        less than noting every key listed)."""
        dropped.add(key)
        self._fits(key, size)

    def _proto_failed(self, exc: proto.ProtoError) -> proto.ProtoError:
        """A protobuf answer we cannot read (a proxy that mangles it, a server we do not
        know): said once, and the cache asks in JSON from then on; the LIST fails with
        it and is retried as any failed LIST is."""
        log.warning("kube.protobuf_unreadable", cache=self.name, error=str(exc))
        self._proto = None
        return exc
