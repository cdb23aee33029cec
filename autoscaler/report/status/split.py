"""Which decisions a status ranks one by one and which it ranks by their decision alone,
kept from one cycle to the next and patched where a few decisions changed.

A cluster that keeps its finished jobs lists tens of thousands of decisions, and in a
live one a few of them change every cycle (a message that counts seconds, a job that
moved): splitting all of them again was most of a status at 50k finished jobs
(docs/benchmarks.md, "The cycle's own work"). A split keeps, of the decisions ranked
alone, the smallest up to twice `max_jobs`; a decision that changed leaves it and
enters it again in order, so a status costs what changed. Built with or without the
last split, the status is the same (tests/test_status_memo.py)."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.core.model import Decision

from .doc import _VALUE, StatusMemo, _Plain, _plain_rank

# how many of the decisions ranked alone a split keeps, in max_jobs: what changed
# decisions can take out of the first max_jobs before the split is made anew
_KEPT = 2


@dataclass(frozen=True, slots=True)
class Split:
    """Of one plan's decisions, for the names with a history or a write (`named`) and a
    `max_jobs`: where those names are, and the smallest of the others ranked (sorted; at
    most _KEPT x max_jobs of them). `cut`: others were left out, each ranked after every
    one kept."""

    named: frozenset[str]
    max_jobs: int
    named_at: tuple[int, ...]
    kept: tuple[_Plain, ...]
    cut: bool

    def first(self) -> list[_Plain]:
        """The max_jobs first of the decisions ranked alone: only those can be listed."""
        return list(self.kept[: self.max_jobs])


def plain(d: Decision, i: int) -> _Plain:
    """Decision `i` ranked by itself: listed since now, with no resize."""
    changed_size = d.target is not None and d.target != d.current
    ref = d.ref
    return (_plain_rank(changed_size, _VALUE[d.reason]), ref.namespace, ref.name, ref.kind, i)


def split_named(
    decisions: tuple[Decision, ...], named: frozenset[str], max_jobs: int, memo: StatusMemo | None
) -> Split:
    """The split of `decisions`: the memo's, patched where decisions moved since it was
    made (StatusMemo.take_up), or made anew."""
    last = memo.split if memo is not None else None
    moved = memo.take_moved() if memo is not None else {}
    found = None
    if isinstance(last, Split) and (last.named, last.max_jobs) == (named, max_jobs):
        found = _patched(last, moved, decisions) if moved else last
    if found is None:
        found = _made(decisions, named, max_jobs)
    if memo is not None:
        memo.split = found
    return found


def _made(decisions: tuple[Decision, ...], named: frozenset[str], max_jobs: int) -> Split:
    named_at: list[int] = []
    others: list[_Plain] = []
    for i, d in enumerate(decisions):
        if d.ref.name in named:
            named_at.append(i)
        else:
            others.append(plain(d, i))
    keep = _KEPT * max_jobs
    cut = len(others) > keep
    kept = heapq.nsmallest(keep, others) if cut else sorted(others)
    return Split(named, max_jobs, tuple(named_at), tuple(kept), cut)


def _patched(
    last: Split, moved: Mapping[int, Decision], decisions: tuple[Decision, ...]
) -> Split | None:
    """`last` with each decision at `moved` (mapped to the one it held when `last` was
    made) taken out and the one there now put in; None when too few are left kept to
    know the max_jobs first without the others."""
    named_at = set(last.named_at)
    kept = list(last.kept)
    # every decision not kept ranks after this one (when some were cut)
    bound = kept[-1] if last.cut and kept else None
    for i, before in moved.items():
        now = decisions[i]
        if before.ref.name in last.named:
            named_at.discard(i)
        else:
            old = plain(before, i)
            if bound is None or old <= bound:  # kept: it leaves
                at = bisect_left(kept, old)
                if at == len(kept) or kept[at] != old:
                    return None  # not where the split says: make it anew
                del kept[at]
        if now.ref.name in last.named:
            named_at.add(i)
        else:
            new = plain(now, i)
            if bound is None or new <= bound:
                insort(kept, new)
    cut = last.cut
    if cut and len(kept) < last.max_jobs:
        return None
    keep = _KEPT * last.max_jobs
    if len(kept) > keep:
        del kept[keep:]
        cut = True
    return Split(last.named, last.max_jobs, tuple(sorted(named_at)), tuple(kept), cut)
