"""The C heap's free memory goes back to the system after the sync and after each cycle
(autoscaler/core/heap.py): measured on this process's own RSS, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# 64 MiB of 8 KiB objects (over CPython's 512-byte small-object limit: glibc's heap),
# then all but every 64th freed: the holes are free memory glibc keeps (a kept object
# above them stops the top of the heap from shrinking by itself)
FRAGMENT = """
import gc, sys
sys.path.insert(0, {tests!r})
{setup}
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
blocks = [bytes(8192) for _ in range(8192)]
kept = blocks[::64]
del blocks
before = rss()
{release}
print("rss", before, rss())
"""


def _rss_before_after(release: str, setup: str = "") -> tuple[int, int]:
    """RSS in MiB with the heap fragmented, and after `release` ran (`setup` runs first:
    imports and what they allocate are not counted)."""
    tests = str(Path(__file__).parent)
    code = FRAGMENT.format(tests=tests, setup=setup, release=release)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    _, before, after = out[-1].split()
    return int(before), int(after)


pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's malloc_trim; elsewhere a no-op"
)


def test_free_memory_goes_back_to_the_system() -> None:
    setup = "from autoscaler.core.heap import release_free_memory"
    before, after = _rss_before_after("assert release_free_memory()", setup)
    assert before - after >= 40, (before, after)  # of the ~63 MiB freed
    kept, still = _rss_before_after("pass")
    assert kept - still < 5  # without it glibc keeps it


def test_the_daemon_gives_back_what_its_sync_freed() -> None:
    setup = "from autoscaler.read.kube.tuning import settle_gc"
    before, after = _rss_before_after("settle_gc()", setup)
    assert before - after >= 40, (before, after)


CYCLE_SETUP = """
import asyncio
from builders import NOW, ej, snap
from autoscaler.act.dry_run import DryRunActuator
from autoscaler.run.loop import Controller
from autoscaler.report.metrics import Metrics
from autoscaler.settings import Settings

class Fixed:
    def __init__(self, snapshot):
        self.snapshot = snapshot
    async def read(self, now):
        return self.snapshot

settings = Settings()
controller = Controller(
    settings.loop_options(),
    settings.planner_policy(),
    Fixed(snap({"q": 2}, jobs=[ej("grow", replicas=1, max=3)])),
    DryRunActuator(),
    Metrics(),
)
"""
CYCLE = """
result = asyncio.run(controller.run_once(NOW))
assert result.plan is not None and result.plan.actions
"""


def test_each_cycle_gives_back_what_it_freed() -> None:
    before, after = _rss_before_after(CYCLE, CYCLE_SETUP)
    assert before - after >= 40, (before, after)
