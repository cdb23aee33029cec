"""A cache's LIST, page by page: the next page is asked for before this one is decoded,
yet pages are decoded in their order and a failure is raised where it was before.

The API is a double of the client's list call (pages in memory, a log of what was asked
and decoded when); the cache itself is the daemon's."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from protopages import delimited, envelope

from autoscaler.core.resources import QUEUE
from autoscaler.read.kube.cache import _Attempts, _Cache
from autoscaler.read.kube.pages import ProtoReaders, _Ahead, _body
from autoscaler.settings import Settings

Log = list[tuple[str, str]]


class _Answer:
    """An unpreloaded answer, as the client returns it: read whole, or as it arrives
    (`content.readany()`), in parts of `part` bytes."""

    def __init__(self, body: bytes, part: int = 40) -> None:
        self.status = 200
        self.content = self
        self._body = body
        self._parts = [body[i : i + part] for i in range(0, len(body), part)]

    async def read(self) -> bytes:
        await asyncio.sleep(0)  # the bytes arrive later
        return self._body

    async def readany(self) -> bytes:
        await asyncio.sleep(0)
        return self._parts.pop(0) if self._parts else b""

    def release(self) -> None:
        pass


class _PagedApi:
    """Queues listed in pages of `pages`; `fail` maps a continue token to what asking
    for it raises."""

    def __init__(self, pages: list[list[Any]], log: Log, fail: dict[str, Exception]) -> None:
        self._pages = pages
        self._log = log
        self._fail = fail

    async def list_cluster_custom_object(self, *_: Any, **kwargs: Any) -> _Answer:
        token = kwargs.get("_continue") or ""
        self._log.append(("ask", token))
        await asyncio.sleep(0)  # a server answers later
        if token in self._fail:
            raise self._fail[token]
        index = int(token or 0)
        meta: dict[str, Any] = {"resourceVersion": "7"}
        if index + 1 < len(self._pages):
            meta["continue"] = str(index + 1)
        items = self._pages[index]
        # as the server writes a custom resource's list (a Queue's): keys sorted, so
        # its metadata (the continue token) comes after its items
        page = {"metadata": meta, "items": items}
        return _Answer(json.dumps(page, sort_keys=True, separators=(",", ":")).encode())


def _queue(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"weight": 1}}


def _cache(
    pages: list[list[Any]], log: Log, fail: dict[str, Exception] | None = None
) -> tuple[_Cache, Log]:
    notified: Log = []

    def decode(obj: dict[str, Any]) -> str:
        name = str(obj["metadata"]["name"])
        log.append(("decode", name))
        return name

    cache = _Cache(
        QUEUE,
        None,
        "",
        _PagedApi(pages, log, fail or {}),  # type: ignore[arg-type]
        Settings().kube_options(),
        lambda kind, event, record, before: notified.append((event, record)),
        lambda failures: 0.0,
        page_size=2,
        decode=decode,
    )
    return cache, notified


# names out of order: the cache keeps the server's order, not a sorted one
PAGES = [[_queue("q-z"), _queue("q-b")], [_queue("q-y"), _queue("q-a")], [_queue("q-m")]]


async def test_the_next_page_is_asked_for_before_this_one_is_decoded() -> None:
    log: Log = []
    cache, notified = _cache(PAGES, log)
    await cache._list()
    assert log == [
        ("ask", ""),
        ("ask", "1"),  # while page 0 is decoded
        ("decode", "q-z"),
        ("decode", "q-b"),
        ("ask", "2"),
        ("decode", "q-y"),
        ("decode", "q-a"),
        ("decode", "q-m"),  # the last page: nothing more asked
    ]
    # every object once, in the server's order, and the list's resourceVersion
    assert notified == [("ADDED", n) for n in ("q-z", "q-b", "q-y", "q-a", "q-m")]
    assert [name for _, name in cache.items] == ["q-z", "q-b", "q-y", "q-a", "q-m"]
    assert cache.resource_version == "7" and cache.synced.is_set()
    assert cache.counters.lists == 1


async def test_an_expired_continue_token_fails_the_list_after_the_page_before() -> None:
    log: Log = []
    expired = ApiException(status=410, reason="Expired")
    cache, notified = _cache(PAGES, log, {"1": expired})
    cache.items = {("", "old"): "old"}
    with pytest.raises(ApiException) as raised:
        await cache._list()
    assert raised.value is expired
    # page 0 decoded, then the failure, as when page 1 was asked for only afterwards;
    # nothing installed: the cache still holds what it held, unsynced, to list again
    assert log == [("ask", ""), ("ask", "1"), ("decode", "q-z"), ("decode", "q-b")]
    assert cache.items == {("", "old"): "old"} and notified == []
    assert not cache.synced.is_set() and cache.counters.lists == 0
    # the cache's own verdict is unchanged: list again at once
    relist, wait = cache._after_failure(expired, _Attempts())
    assert relist and wait == 0.0


async def test_a_page_that_fails_to_decode_drops_the_page_asked_for_ahead() -> None:
    """The decode error is what the caller sees (not the next page's failure), and the
    page asked for ahead is cancelled, or its failure retrieved when it failed first: no
    "exception was never retrieved" from the event loop."""
    log: Log = []
    # the bad item in the second chunk: the page asked for ahead has failed by then
    first = [_queue(f"q-{i:03d}") for i in range(150)]
    first[120] = "not an object"
    bad = [first, [_queue("q-b")]]
    unseen: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: unseen.append(context))
    cache, notified = _cache(bad, log, {"1": ApiException(status=500, reason="boom")})
    with pytest.raises(ValueError, match="LIST of Queue holds an item that is not an object"):
        await cache._list()
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()
    assert unseen == []
    assert log[:3] == [("ask", ""), ("ask", "1"), ("decode", "q-000")] and notified == []
    assert cache.items == {} and not cache.synced.is_set()


async def test_a_json_page_asks_for_the_next_from_its_last_bytes_before_it_is_decoded() -> None:
    """A custom resource's page names the next in its last bytes: the next is asked
    for as they arrive, before the page is joined and its envelope decoded, two pages
    in flight at most; every object once, in the server's order."""
    log: Log = []
    cache, _ = _cache(LONG, log)
    await cache._list()
    assert _in_flight(log, LONG) == 2
    names = [str(q["metadata"]["name"]) for page in LONG for q in page]
    assert [n for what, n in log if what == "decode"] == names
    assert [name for _, name in cache.items] == names
    assert [what for what, _ in log].count("ask") == 5 and cache.resource_version == "7"


async def test_a_json_pages_next_is_asked_for_before_its_envelope_is_decoded() -> None:
    """Seen by a page whose last bytes name the next but whose items are not JSON: the
    next was asked for before the page was decoded (its envelope's error is the LIST's),
    and it is dropped, its failure not left unretrieved."""

    class _Broken(_PagedApi):
        async def list_cluster_custom_object(self, *args: Any, **kwargs: Any) -> _Answer:
            answer = await super().list_cluster_custom_object(*args, **kwargs)
            if not kwargs.get("_continue"):  # the first page: a syntax error amid its items
                answer = _Answer(answer._body.replace(b'"spec":', b'"spec"::', 1))
            return answer

    log: Log = []
    unseen: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: unseen.append(context))
    cache, notified = _cache(PAGES, log)
    failing = {"1": ApiException(status=500, reason="boom")}
    cache._api = _Broken(PAGES, log, failing)  # type: ignore[assignment]
    with pytest.raises(msgspec.DecodeError):
        await cache._list()
    for _ in range(3):
        await asyncio.sleep(0)
    gc.collect()
    assert log == [("ask", ""), ("ask", "1")] and notified == [] and unseen == []


def _list(meta: dict[str, Any], items: list[Any], **dumps: Any) -> bytes:
    return json.dumps({"items": items, "kind": "QueueList", "metadata": meta}, **dumps).encode()


COMPACT = {"separators": (",", ":")}
BIG = {"metadata": {"name": "big"}, "spec": {"note": "x" * 10_000}}


@pytest.mark.parametrize(
    ("body", "token"),
    [
        (_list({"continue": "abc", "resourceVersion": "7"}, [_queue("q")], **COMPACT), "abc"),
        (_list({"continue": "abc", "resourceVersion": "7"}, [_queue("q")]), "abc"),  # spaced
        (_list({"continue": "abc", "remainingItemCount": 9}, [BIG], **COMPACT), "abc"),
        (_list({"resourceVersion": "7"}, [_queue("q")], **COMPACT), None),  # the last page
        (_list({"continue": "", "resourceVersion": "7"}, [_queue("q")], **COMPACT), None),
        # a core list's JSON: its metadata first, the end is the last object's
        (json.dumps({"metadata": {"continue": "abc"}, "items": [_queue("q")]}).encode(), None),
        (b'{"items":[],"metadata":{"continue":"abc"', None),  # cut short
        (b'{"items":[],"metadata":{"continue":7}}', None),  # not a list's metadata
        (b"\x00\x01", None),
    ],
)
@pytest.mark.parametrize("part", [7, 40, 1 << 20])
async def test_a_json_answers_continue_token_is_read_from_its_last_bytes(
    body: bytes, token: str | None, part: int
) -> None:
    ahead: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    assert await _body(_Answer(body, part), ahead) == body
    assert (ahead.result() if ahead.done() else None) == token


async def test_a_relist_keeps_dropped_only_what_it_listed_too_large() -> None:
    """An object too large is dropped and reported; at the next LIST one that shrank is
    kept and no longer reported, one that grew is dropped in its turn."""
    log: Log = []
    big = {"metadata": {"name": "q-big"}, "spec": {"note": "x" * 2000}}
    cache, _ = _cache([[_queue("q-a"), big]], log)
    cache._settings = Settings(max_object_bytes=1024).kube_options()
    await cache._list()
    assert set(cache.oversized) == {("", "q-big")} and list(cache.items) == [("", "q-a")]
    grown = {"metadata": {"name": "q-a"}, "spec": {"note": "y" * 2000}}
    cache._api = _PagedApi([[grown, _queue("q-big")]], log, {})  # type: ignore[assignment]
    await cache._list()
    assert set(cache.oversized) == {("", "q-a")} and list(cache.items) == [("", "q-big")]
    assert cache.counters.dropped_oversized == 2


async def test_a_long_page_lets_the_event_loop_run_while_it_is_decoded() -> None:
    """A page of 250 is decoded in chunks: other tasks (the next page's answer, other
    caches, the HTTP server) run in between, not only once the page is done."""
    log: Log = []
    page = [_queue(f"q-{i:03d}") for i in range(250)]
    cache, _ = _cache([page], log)
    ticks: list[int] = []

    async def ticker() -> None:
        while True:
            ticks.append(sum(1 for what, _ in log if what == "decode"))
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await cache._list()
    task.cancel()
    # the ticker ran while the page was half decoded, not only before and after it
    assert any(0 < decoded < 250 for decoded in ticks)
    assert len(cache.items) == 250


# ---- pages in protobuf: the next asked for from a page's first bytes ---------------------


class _Streamed:
    """An unpreloaded protobuf answer that arrives in two parts: its first bytes (the
    list's metadata, `head`), then, `later` turns of the event loop on, the rest."""

    def __init__(self, body: bytes, cut: int, log: Log, token: str, later: int) -> None:
        self.status = 200
        self.content = self
        self._parts = [body[:cut], body[cut:]]
        self._log, self._token, self._later = log, token, later

    async def readany(self) -> bytes:
        """Its first bytes, then the rest `later` turns on, then nothing (its end)."""
        if not self._parts:
            return b""
        if len(self._parts) == 2:
            await asyncio.sleep(0)
            self._log.append(("head", self._token))
        else:
            for _ in range(self._later):
                await asyncio.sleep(0)
            self._log.append(("body", self._token))
        return self._parts.pop(0)

    def release(self) -> None:
        pass


class _ProtoApi(_PagedApi):
    """The pages in protobuf (each item a queue's JSON, read by `_proto_cache`'s reader);
    `guess` maps a page's token to the token its first bytes name instead of its own
    (bytes that say one thing early and another whole)."""

    def __init__(self, pages: list[list[Any]], log: Log, fail: dict[str, Exception],
                 guess: dict[str, str], later: int) -> None:  # fmt: skip
        super().__init__(pages, log, fail)
        self._guess, self._later = guess, later

    async def list_cluster_custom_object(self, *_: Any, **kwargs: Any) -> Any:
        token = kwargs.get("_continue") or ""
        self._log.append(("ask", token))
        await asyncio.sleep(0)
        if token in self._fail:
            raise self._fail[token]
        index = int(token or 0)
        following = str(index + 1) if index + 1 < len(self._pages) else ""
        items = [json.dumps(item).encode() for item in self._pages[index]]
        body = envelope("7", following, None, items, "QueueList")
        cut = body.index(delimited(2, items[0])) if items else len(body)
        if token in self._guess:  # the first bytes of another page's answer
            other = envelope("7", self._guess[token], None, items, "QueueList")
            head = other[: other.index(delimited(2, items[0]))]
            body, cut = head + body[cut:], len(head)
        return _Streamed(body, cut, self._log, token, self._later)


def _proto_cache(
    pages: list[list[Any]],
    log: Log,
    fail: dict[str, Exception] | None = None,
    guess: dict[str, str] | None = None,
    later: int = 1,
) -> tuple[_Cache, Log]:
    cache, notified = _cache(pages, log, fail)
    cache._api = _ProtoApi(pages, log, fail or {}, guess or {}, later)  # type: ignore[assignment]
    cache._proto = ProtoReaders(json.loads, None)
    return cache, notified


def _in_flight(log: Log, pages: list[list[Any]]) -> int:
    """The most pages ever asked for and not yet being decoded."""
    firsts = {str(p[0]["metadata"]["name"]): i for i, p in enumerate(pages)}
    asked = started = most = 0
    for what, value in log:
        if what == "ask":
            asked += 1
            most = max(most, asked - started)
        elif what == "decode" and value in firsts:
            started += 1
    return most


LONG = [[_queue(f"q-{p}-{i:03d}") for i in range(250)] for p in range(5)]


async def test_a_protobuf_page_asks_for_the_next_once_its_first_bytes_name_it() -> None:
    """The page after next is asked for while the next still arrives (its first bytes
    name it), not once it is read whole; two pages in flight at most however slowly
    they are decoded; every object once, in the server's order."""
    log: Log = []
    cache, _ = _proto_cache(LONG, log, later=3)
    await cache._list()
    assert log.index(("ask", "1")) < log.index(("body", ""))
    assert log.index(("ask", "2")) < log.index(("body", "1"))
    assert _in_flight(log, LONG) == 2
    names = [str(q["metadata"]["name"]) for page in LONG for q in page]
    assert [n for what, n in log if what == "decode"] == names
    assert [name for _, name in cache.items] == names
    assert [what for what, _ in log].count("ask") == 5
    assert cache.resource_version == "7" and cache.counters.proto_pages == 5


async def test_a_page_asked_for_on_a_token_the_page_does_not_say_is_dropped() -> None:
    """`_Ahead` itself: a page whose first bytes named "9" but which, read whole, says
    "2" (bytes no server writes): the page asked for on "9" is cancelled, never handed
    on, its failure not left unretrieved; "2" is asked for and handed on."""
    asked: list[str] = []
    unseen: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: unseen.append(context))

    async def page(token: str, ahead: asyncio.Future[str]) -> bytes:
        asked.append(token)
        ahead.set_result({"": "1", "1": "9"}.get(token, ""))
        if token == "9":
            raise ApiException(status=500, reason="never asked for")
        await asyncio.sleep(0)
        return token.encode()

    pages = _Ahead(page)
    first = pages.arm(pages.ask(""))
    assert await first.task == b""
    second = pages.follow(first, "1")
    assert second is first.next  # the one asked for early
    assert await second.task == b"1"
    await asyncio.sleep(0)  # "9" asked for from its first bytes, and failed
    assert asked == ["", "1", "9"]
    third = pages.follow(second, "2")
    assert third.token == "2" and await third.task == b"2"
    assert asked == ["", "1", "9", "2"]
    pages.cancel()
    gc.collect()
    await asyncio.sleep(0)
    assert unseen == []


async def test_an_expired_page_asked_for_early_fails_the_list_after_the_pages_before() -> None:
    log: Log = []
    expired = ApiException(status=410, reason="Expired")
    cache, notified = _proto_cache(PAGES, log, fail={"2": expired})
    with pytest.raises(ApiException) as raised:
        await cache._list()
    assert raised.value is expired
    decoded = [n for what, n in log if what == "decode"]
    assert decoded == ["q-z", "q-b", "q-y", "q-a"] and notified == []
    assert not cache.synced.is_set() and cache.counters.lists == 0


@pytest.mark.parametrize("encoding", ["json", "protobuf"])
async def test_a_list_leaves_no_page_in_a_reference_cycle(encoding: str) -> None:
    """Every page's bytes are freed when it is decoded, by reference counting: none is
    left in a cycle for the collector (a sync holds the collector off: at 10k jobs the
    JSON pages of the jobs held this way took ~45 MiB until it ran)."""
    log: Log = []
    cache, _ = _cache(PAGES, log) if encoding == "json" else _proto_cache(PAGES, log)
    gc.collect()
    gc.disable()
    try:
        await cache._list()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = {type(o).__name__ for o in gc.garbage} & {"_Fetch", "_Ahead", "Task"}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == set()
    assert len(cache.items) == 5
