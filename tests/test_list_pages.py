"""A cache's LIST, page by page: the next page is asked for before this one is decoded,
yet pages are decoded in their order and a failure is raised where it was before.

The API is a double of the client's list call (pages in memory, a log of what was asked
and decoded when); the cache itself is the daemon's."""

from __future__ import annotations

import asyncio
import gc
import json
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.core.resources import QUEUE
from autoscaler.read.kube.cache import _Attempts, _Cache
from autoscaler.settings import Settings

Log = list[tuple[str, str]]


class _Answer:
    """An unpreloaded answer, as the client returns it."""

    def __init__(self, body: bytes) -> None:
        self.status = 200
        self._body = body

    async def read(self) -> bytes:
        await asyncio.sleep(0)  # the bytes arrive later
        return self._body

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
        return _Answer(json.dumps({"metadata": meta, "items": items}).encode())


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
