"""The ports the tests' servers take: two pytest-xdist workers never pick the same one."""

from __future__ import annotations

import pytest
from ports import _HIGH, _LOW, free_port


def _picks(monkeypatch: pytest.MonkeyPatch, worker: str, count: int) -> set[int]:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    return {free_port() for _ in range(50)}


def test_each_xdist_worker_picks_from_a_slice_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    first = _picks(monkeypatch, "gw0", 2)
    second = _picks(monkeypatch, "gw1", 2)
    assert max(first) < min(second)
    assert _LOW <= min(first) and max(second) <= _HIGH


def test_alone_a_process_picks_from_the_whole_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    picks = {free_port() for _ in range(200)}
    middle = (_LOW + _HIGH) // 2
    assert min(picks) < middle < max(picks)
    assert _LOW <= min(picks) and max(picks) <= _HIGH
