"""What the Placer keeps between its answers (plan/fit/placer.py): the count of a shape
brought up to date move by move (`_recount`), the buckets that take a shape as a heap
(`_best`). Over random sequences of placing, releasing, gangs tried and kept, GPUs
taken and trials undone, it answers and places as a Placer that scans every bucket and
counts every bucket at each call, and leaves the same room."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from test_fit import node, shape

from autoscaler.plan.fit import Placer
from autoscaler.plan.fit.placer import _Entry

SHAPES = [shape(1, 8), shape(2, 30), shape(4, 8), shape(1, 8, selector={"pool": "a"}), shape(8, 1)]


class _Scanning(Placer):
    """The Placer as it was: every bucket scanned per pod, every bucket counted per ask."""

    def _best(self, s: Any) -> Any:
        return self._scan_best(s)

    def _since(self, version: int) -> None:
        return None

    def _heap(self, s: Any) -> list[_Entry]:
        raise AssertionError("a scanning placer keeps no heap")


OP = st.tuples(
    st.sampled_from(["place", "place", "fits", "release", "take", "unplaced", "gang", "trial"]),
    st.integers(0, len(SHAPES) - 1),
    st.integers(1, 9),
    st.integers(0, 7),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 64)), min_size=1, max_size=8),
    st.lists(OP, max_size=30),
)
def test_the_kept_counts_and_heaps_place_as_a_scan_of_every_bucket(used, ops) -> None:
    nodes = [
        node(f"n{i}", used_gpus=g, used_cpu=c, labels={"pool": "a"} if i % 2 else None)
        for i, (g, c) in enumerate(used)
    ]
    kept, scan = Placer(nodes), _Scanning(nodes)
    for what, i, n, at in ops:
        s, name = SHAPES[i], nodes[at % len(nodes)].name
        answers = []  # the same call of each: its answers, the kept's then the scan's
        for p in (kept, scan):
            if what == "place":
                answers.append(p.place(s, n))
            elif what == "fits":
                answers.append([p.fits(t) for t in SHAPES])
            elif what == "release":
                p.release(name, s)
            elif what == "take":
                p.take_gpus(n)
            elif what == "unplaced":
                answers.append(p.unplaced(((s, n), (SHAPES[0], 1))))
            elif what == "gang":
                answers.append(p.place_all(((s, n),)))
            else:
                with p.trial():
                    answers.append(p.place(s, n))
                    p.release(name, s)
        assert answers[: len(answers) // 2] == answers[len(answers) // 2 :]
        assert kept.state() == scan.state()
        assert [kept.fits(t) for t in SHAPES] == [scan.fits(t) for t in SHAPES]
        assert kept.idle_gpus == scan.idle_gpus
