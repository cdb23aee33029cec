"""When cycles run: every interval, early on a trigger (a watch event, debounced), at once
for an urgent one, soon again when writes were left over; a follower's cycle when not
the leader; a stop that lets the cycle under way finish; and the probes (/healthz,
/readyz) read from the cycles' health stamps. What one cycle does is loop.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import UTC, datetime

from autoscaler.core.options import LoopOptions

from .loop import Controller, CycleStatus

RETRY_MIN_SECONDS = 0.5  # the soonest a cycle follows one that left writes over


class Driver:
    """Runs cycles every `interval_seconds`, early when `trigger()` is called (debounced
    to one per `min_interval_seconds`; an urgent trigger is not held back), until
    `stop()`; a stop waits for the current cycle to finish."""

    def __init__(
        self,
        controller: Controller,
        is_leader: Callable[[], bool] = lambda: True,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        ready_check: Callable[[], bool] = lambda: True,
    ) -> None:
        self.controller = controller
        self.settings = controller.settings
        self.is_leader = is_leader
        self.wall = wall
        self.ready_check = ready_check
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._urgent = False  # an urgent trigger came since the last cycle started
        self.cycles = 0
        self.cycling = False  # a cycle is under way (a stop lets it finish within a grace)

    def trigger(self, urgent: bool = False) -> None:
        """A cycle early: after min_interval_seconds from the last one's start, or, if
        `urgent` (a job just started with idle GPUs to grow into), at once."""
        self._urgent = self._urgent or urgent
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    async def run(self) -> None:
        s, clock = self.settings, self.controller.clock
        while not self._stopping.is_set():
            started = clock()
            self._wake.clear()
            self._urgent = False
            now = self.wall()
            retry_in: float | None = None
            if self.is_leader():
                self.cycling = True
                try:
                    outcome = await self.controller.run_once(now)
                finally:
                    self.cycling = False
                if outcome.applied is not None:
                    retry_in = outcome.applied.retry_in
            else:
                self.controller.follower_cycle(now)
            self.cycles += 1
            wait = next_start(started, clock(), s, triggered=False)
            if retry_in is not None:
                # writes left over (a throttling or failing server): the next cycle comes
                # as soon as the server lets them go, not an interval later
                wait = min(wait, max(retry_in, RETRY_MIN_SECONDS))
            # wait for the interval or a trigger, then hold a trigger back to min_interval
            triggered = await self._wait(wait, self._wake)
            if triggered:
                await self._debounce(started)

    async def _debounce(self, started: float) -> None:
        """Hold a trigger back to min_interval_seconds after the last cycle's start,
        unless an urgent one comes (or a stop) meanwhile."""
        while not (self._urgent or self._stopping.is_set()):
            left = next_start(started, self.controller.clock(), self.settings, triggered=True)
            if left <= 0:
                return
            self._wake.clear()
            await self._wait(left, self._wake)

    @staticmethod
    async def _wait(seconds: float, event: asyncio.Event) -> bool:
        """Wait up to `seconds` for `event`; True if it was set."""

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()
        return event.is_set()

    # ---- probes ---------------------------------------------------------------------------

    def alive(self) -> tuple[bool, str]:
        h, s = self.controller.health, self.settings
        limit = s.interval_seconds + 2 * s.cycle_deadline_seconds + 30
        last = h.last_cycle_start if h.last_cycle_start is not None else h.started
        age = self.controller.clock() - last
        if age > limit:
            return False, f"no cycle started for {age:.0f}s (limit {limit:.0f}s)"
        return True, ""

    def ready(self) -> tuple[bool, str]:
        h, s = self.controller.health, self.settings
        if not self.ready_check():
            return False, (
                "Kubernetes caches not current (listing, reconnecting to the API, or a watch "
                "stalled)"
            )
        if h.last_result is CycleStatus.FOLLOWER:
            return True, ""
        limit = s.ready_max_age_seconds or 3 * s.interval_seconds
        if h.last_good is None:
            return False, "no successful cycle yet"
        age = self.controller.clock() - h.last_good
        if age > limit:
            last = h.last_result.value if h.last_result is not None else "none"
            return False, (
                f"last successful cycle {age:.0f}s ago (limit {limit:.0f}s); last cycle: {last}"
            )
        return True, ""


def next_start(started: float, now: float, settings: LoopOptions, *, triggered: bool) -> float:
    """Seconds from `now` until the next cycle may start: the interval after the last
    start, or for an early trigger, min_interval after it (the debounce)."""

    gap = settings.min_interval_seconds if triggered else settings.interval_seconds
    return max(0.0, started + gap - now)
