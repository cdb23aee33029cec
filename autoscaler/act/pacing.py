"""How fast our writes go out: an AIMD window over the API server's answers, and a drain
that sends queued writes in order under it.

The API server tells a client it is sending too much with 429 (its max-inflight limit
or API Priority and Fairness) or 503 with a Retry-After. A fixed number of writes in
flight either wastes the server's seats or piles on 429s; stopping at the first 429
starved a throttled drain (65 of 300 resizes in 100 s under one mutating seat). So,
like TCP congestion control:

- the window (writes in flight) grows by one per GROWTH_DAMPING windows' worth of
  answered writes (additive increase) up to `max_parallel_writes`. Slower than TCP's
  one per window: at one seat each step up to two in flight costs a 429 and a write
  held for its Retry-After (measured, 300 resizes at one seat: 4 -> 100 429s and 67 % of
  the bare patch rate, 16 -> 33 429s and 82 %; docs/benchmarks.md). From one back to 8
  takes ~450 answered writes;
- a throttle halves it, once per window (multiplicative decrease): the writes already
  in flight when it shrank were sent under the old window and say nothing new;
- a throttled write is sent again after its Retry-After, in order with the rest; only
  a throttle at a window of one (nothing left to shrink) pauses every write;
- a failure that is the server's (5xx, timeout, unreachable) pauses every write, from
  1 s doubling to SERVER_PAUSE_MAX_SECONDS, until a write lands again; the pause ends
  early when the server answers a read again (`server_answered`: a watch cache
  reconnected), so writes resume within a cycle of its return;
- Events (`Item.side`) go beside the window, as many again, while it is whole and
  nothing is paused: a resize's slot is not held for the Event that follows it.

And no write outlives the Lease (`fenced`): it is sent, and awaited, only while the
elector says the Lease still covers it; one still unanswered then is cancelled.

Pure asyncio and a clock: no Kubernetes here. The actuator says what an answer means.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

_T = TypeVar("_T")

GROWTH_DAMPING = 16.0  # answers per +1 at a window of one: a 429 per ~17 writes at one seat
DEFAULT_RETRY_AFTER_SECONDS = 1.0  # a 429 without Retry-After (kube-apiserver sends 1)
SERVER_PAUSE_MAX_SECONDS = 30.0


class Verdict(Enum):
    """What one write's answer means for the writes behind it."""

    DONE = "done"  # answered (landed, or a final answer such as 404/409/422): not resent
    THROTTLED = "throttled"  # 429/503: send again after retry_after
    UNAVAILABLE = "unavailable"  # the server failed: stop sending until it is back


@dataclass(frozen=True, slots=True)
class Attempt:
    """One send of a write and how the server answered it."""

    verdict: Verdict
    retry_after: float | None = None  # THROTTLED: what the server asked
    landed: bool = False  # DONE and written (2xx)


@dataclass(eq=False)
class Item:
    """One write waiting to go out; `order` is its place (plan order first)."""

    order: int
    send: Callable[[], Awaitable[Attempt]]
    ready: float = 0.0  # clock time before which it is not sent (a Retry-After)
    throttled: int = 0  # times the server throttled it
    payload: object = None  # for the caller: what this item is
    side: bool = False  # may go beside the window while the server keeps up (Events)
    _seq: int = field(default_factory=itertools.count().__next__)


class Pacer:
    """The window and the pauses, kept across cycles (the server's state outlives one)."""

    def __init__(self, ceiling: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ceiling = max(1, ceiling)
        self.window = float(self.ceiling)
        self.clock = clock
        self.paused_until = 0.0  # no write is sent before this (clock time)
        self.down = False  # the pause is the server's failure, not a throttle
        self._epoch = 0  # bumped at every decrease: a write's ticket is the epoch it saw
        self._failures = 0  # server failures since the last write that landed
        self.throttles = 0  # 429/503 answers, ever (metrics read the difference)

    @property
    def slots(self) -> int:
        return max(1, int(self.window))

    def ticket(self) -> int:
        return self._epoch

    def answered(self, landed: bool) -> None:
        """The server answered a write (landed or a final refusal): it is up and not
        throttling us, so the window may grow."""
        self.window = min(float(self.ceiling), self.window + 1.0 / (self.window * GROWTH_DAMPING))
        if landed:
            self._failures = 0
            if self.down:
                self.down, self.paused_until = False, 0.0

    def throttled(self, ticket: int, retry_after: float | None) -> float:
        """A 429/503; returns when that write may go again (clock time)."""
        self.throttles += 1
        wait = max(retry_after if retry_after is not None else DEFAULT_RETRY_AFTER_SECONDS, 0.0)
        now = self.clock()
        if ticket == self._epoch:  # first news of this window: shrink once
            if self.window <= 1.0:
                # nothing left to shrink: the server wants less than one write at a time
                self.paused_until = max(self.paused_until, now + wait)
            self.window = max(1.0, self.window / 2)
            self._epoch += 1
        return now + wait

    def unavailable(self, ticket: int) -> float:
        """The server failed a write sent with `ticket`; returns the pause in seconds
        (writes that were in flight together fail together: one doubling per window)."""
        if ticket != self._epoch:
            return self.retry_in()
        self._failures += 1
        pause = min(2.0 ** (self._failures - 1), SERVER_PAUSE_MAX_SECONDS)
        self.window = 1.0  # probe with one write when the pause ends
        self._epoch += 1
        self.down = True
        self.paused_until = max(self.paused_until, self.clock() + pause)
        return pause

    def server_answered(self) -> None:
        """The API server answered a read (a watch cache reconnected after failing): an
        outage's pause ends now, so the next cycle probes at once rather than after a
        pause doubled while the server was away (up to SERVER_PAUSE_MAX_SECONDS). The
        probe is still one write (the window stays at one until a write lands), a
        failed probe pauses again where the doubling left off, and a throttle's pause
        (the server answering 429 with a Retry-After) is kept."""
        if self.down:
            self.paused_until = min(self.paused_until, self.clock())

    def retry_in(self) -> float:
        """Seconds until writes may go again (0: now)."""
        return max(0.0, self.paused_until - self.clock())


@dataclass
class Drained:
    """What a drain sent and what it left for the next cycle."""

    done: list[tuple[Item, Attempt]]  # in the order they were answered
    left: list[Item]  # not sent (or throttled and not sent again) in time, in order


async def drain(
    pacer: Pacer,
    items: list[Item],
    until: float,
    on_answer: Callable[[Item, Attempt], list[Item]] = lambda item, attempt: [],
) -> Drained:
    """Send `items` lowest `order` first under the pacer's window until every one is
    answered, the server is down (the rest are left), or `until` (clock time) would be
    passed waiting (the rest are left, for the next cycle). Writes in flight are awaited,
    even when the drain is cancelled; a second cancel abandons them. `on_answer` runs as
    each answer arrives (before the next write is chosen) and returns items to add (e.g.
    the Event of a write that landed).

    Items marked `side` (Events) go beside the window, as many again, while the server
    neither throttles nor fails (the window is whole and nothing is paused): a resize
    then never waits for an Event, nor an Event for the last resize. Otherwise they
    take the window's slots, behind every write of a lower order."""
    return await _Drain(pacer, until, on_answer).run(items)


class _Drain:
    """One drain's queues: ready (by order) and waiting for a Retry-After (by time),
    the side lane's ready queue apart, and the writes in flight."""

    def __init__(
        self,
        pacer: Pacer,
        until: float,
        on_answer: Callable[[Item, Attempt], list[Item]],
    ) -> None:
        self.pacer, self.until, self.on_answer = pacer, until, on_answer
        self.ready: list[tuple[int, int, Item]] = []
        self.side: list[tuple[int, int, Item]] = []
        self.waiting: list[tuple[float, int, int, Item]] = []
        self.inflight: dict[asyncio.Task[Attempt], bool] = {}  # task -> sent beside
        self.items: dict[asyncio.Task[Attempt], Item] = {}
        self.done: list[tuple[Item, Attempt]] = []

    async def run(self, items: list[Item]) -> Drained:
        for item in items:
            self._queue(item)
        try:
            while self.ready or self.side or self.waiting or self.inflight:
                if not await self._step():
                    break
        finally:
            # never abandon a write in flight when a cycle ends or times out: its answer
            # decides what the job is now. A second cancel (a daemon stopping, which
            # cannot wait for a server that does not answer) abandons them: each is
            # pinned to its resourceVersion, so it lands whole or not at all
            try:
                while self.inflight:
                    await self._answers(None)
            except asyncio.CancelledError:
                for task in self.inflight:
                    task.cancel()
                raise
        left = sorted(
            [e[-1] for e in self.ready]
            + [e[-1] for e in self.side]
            + [e[-1] for e in self.waiting],
            key=lambda i: (i.order, i._seq),
        )
        return Drained(self.done, left)

    async def _step(self) -> bool:
        """Send what may go, then wait for an answer or a Retry-After; False: stop."""
        pacer, now = self.pacer, self.pacer.clock()
        while self.waiting and self.waiting[0][0] <= now:
            self._push(heapq.heappop(self.waiting)[-1])
        # time is up, or the server failed: nothing more is sent (what is in flight
        # is still answered, and a landing there lifts the server's pause)
        stopping = now >= self.until or (pacer.down and pacer.paused_until > now)
        if stopping and not self.inflight:
            return False
        if not stopping:
            self._send(now)
        pending = self.ready or self.side
        wake = min(
            self.waiting[0][0] if self.waiting else math.inf,
            pacer.paused_until if pending and pacer.paused_until > now else math.inf,
        )
        if not self.inflight:
            if wake == math.inf or wake > self.until:
                return False
            await asyncio.sleep(wake - now)
            return True
        await self._answers(None if stopping or wake == math.inf else max(0.0, wake - now))
        return True

    def _send(self, now: float) -> None:
        pacer = self.pacer
        if pacer.paused_until > now:
            return
        in_window = sum(1 for beside in self.inflight.values() if not beside)
        while in_window < pacer.slots and (self.ready or self.side):
            # the window serves the lowest order of both queues
            lane = (
                self.ready
                if not self.side or (self.ready and self.ready[0][:2] < self.side[0][:2])
                else self.side
            )
            self._start(heapq.heappop(lane)[-1], beside=False)
            in_window += 1
        if pacer.window < pacer.ceiling:
            return  # the server throttled: Events share the window again
        beside = len(self.inflight) - in_window
        while self.side and beside < pacer.ceiling:
            self._start(heapq.heappop(self.side)[-1], beside=True)
            beside += 1

    def _start(self, item: Item, *, beside: bool) -> None:
        task = asyncio.ensure_future(self._attempt(item, self.pacer.ticket()))
        self.inflight[task] = beside
        self.items[task] = item

    async def _attempt(self, item: Item, ticket: int) -> Attempt:
        attempt = await item.send()
        # the pacer hears each answer the moment it arrives, in the order they arrive
        pacer = self.pacer
        if attempt.verdict is Verdict.THROTTLED:
            item.throttled += 1
            item.ready = pacer.throttled(ticket, attempt.retry_after)
        elif attempt.verdict is Verdict.UNAVAILABLE:
            pacer.unavailable(ticket)
        else:
            pacer.answered(attempt.landed)
        return attempt

    async def _answers(self, within: float | None) -> None:
        finished, _ = await asyncio.wait(
            self.inflight, timeout=within, return_when=asyncio.FIRST_COMPLETED
        )
        for task in finished:
            del self.inflight[task]
            item = self.items.pop(task)
            attempt = task.result()
            if attempt.verdict is Verdict.THROTTLED:
                self._queue(item)
            else:
                self.done.append((item, attempt))
            for added in self.on_answer(item, attempt):
                self._queue(added)

    def _queue(self, item: Item) -> None:
        if item.ready <= self.pacer.clock():
            self._push(item)
        else:
            heapq.heappush(self.waiting, (item.ready, item.order, item._seq, item))

    def _push(self, item: Item) -> None:
        heapq.heappush(self.side if item.side else self.ready, (item.order, item._seq, item))


class LeaseFenced(Exception):
    """A write the Lease would not cover: not sent, or cancelled while it waited."""


async def fenced(lease_left: Callable[[], float | None], write: Awaitable[_T]) -> _T:
    """`write`, sent and awaited only while the Lease covers it (`lease_left`: seconds
    left, None: no Lease). A write still unanswered when the Lease runs out is cancelled
    (its connection closed), so it cannot land after another replica holds the Lease;
    a renew meanwhile extends the wait. Raises LeaseFenced."""
    left = lease_left()
    if left is None:
        return await write
    task = asyncio.ensure_future(write)
    try:
        while left is not None and left > 0:
            done, _ = await asyncio.wait({task}, timeout=left)
            if done:
                return task.result()
            left = lease_left()
        raise LeaseFenced(
            "not written: this replica's Lease would run out before the write lands "
            "(cancelled; whoever leads next plans it again)"
        )
    finally:
        if not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # our own cancel, not the write's: never swallowed
            except Exception:  # the cancelled write's own failure: it did not land
                pass  # it did not land; the caller reports the fence
