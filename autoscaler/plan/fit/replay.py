"""A Placer that answers from the last plan's log while this plan asks what it asked.

A Placer is a deterministic function of its starting room and the calls made of it: the
answer to each call (and the room after it) depends only on the room before and the
call's arguments. So when a plan starts from the same room as the last plan (the same
`state()` object: cluster.py keeps it while the nodes and the workers in flight are the
same objects) and asks the same calls with the same arguments in the same order, every
answer is the one the log holds, and nothing needs placing. At the first call that
differs, the room is made (`Placer.__init__` from the start, then the calls of the log so
far that change it, again) and the placer goes on as any other. A steady cycle places
thousands of workers in flight and grants (#45): each is then a comparison.

What is logged is every public call of the Placer that the planner makes, and a reclaim's
search for room (`make_room`, which tries and undoes: it changes nothing). Anything else
(a trial, a bulk release, the nodes by name, any attribute the Placer keeps inside)
makes the room and ends the log for this plan: the next plan replays up to there. Calls
one logged call makes of another (`place_all` -> `unplaced` -> `place`, make_room's
trials) are not logged apart: the outer one is the call.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from autoscaler.core.model import Node
from autoscaler.core.shapes import HostPort, PodShape

from .nodes import _Grouping
from .placer import Placer
from .room import Holder, Room, RoomMemo, make_room

# one logged call: (what, its arguments, its answer)
_Entry = tuple[str, tuple[Any, ...], Any]


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same arguments: the same objects (a steady plan passes its jobs' own shapes),
    else equal values."""
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


class Replay(Placer):
    """A Placer started from `start` (a `Placer.state()` on these nodes) that answers
    from `log` (the last plan's `calls` over the same start) while the calls are the
    same. `calls` is this plan's log, for the next."""

    def __init__(
        self,
        nodes: Iterable[Node],
        gpu_names: Sequence[str],
        start: _Grouping,
        log: Sequence[_Entry] = (),
    ) -> None:
        # Placer.__init__ is not run until the room is needed (`_make`)
        self.gpu_names = tuple(gpu_names)
        self._made_of = (nodes, self.gpu_names, start)
        self._log = log
        self._at = 0  # the next entry of the log to answer from; -1: the room is made
        self._inside = 0  # > 0 while a logged call runs (its own calls are not logged)
        self._open = True  # still logging this plan's calls
        self.calls: list[_Entry] = []
        # the RoomMemo of the make_room call running (not logged: it changes no answer)
        self._room_memo: tuple[RoomMemo, Hashable] | None = None

    @classmethod
    def placing(cls, nodes: Iterable[Node], gpu_names: Sequence[str]) -> Replay:
        """A Placer on `nodes` as they are, its room made and nothing logged: what is
        placed before `logging` is the start of the log."""
        placer = cls(nodes, gpu_names, {})
        placer._at, placer._open = -1, False
        Placer.__init__(placer, nodes, gpu_names)
        return placer

    def logging(self, start: _Grouping) -> None:
        """From here on, calls are logged; `start` is this room's `state()`."""
        nodes, names, _ = self._made_of
        self._made_of, self._open = (nodes, names, start), True

    @property
    def start(self) -> _Grouping:
        return self._made_of[2]

    def __getattr__(self, name: str) -> Any:
        # only for what is not set yet: the Placer's own state before the room is made
        if name.startswith("__") or "_made_of" not in self.__dict__ or self._at < 0:
            raise AttributeError(name)
        self._make()
        self._open = False  # a use of the Placer that is not a logged call: stop here
        return object.__getattribute__(self, name)

    def _make(self) -> None:
        """The room as the calls so far leave it: the start, then what changed it."""
        nodes, names, start = self._made_of
        self._at = -1
        Placer.__init__(self, nodes, names, start)
        self._inside += 1
        try:
            for what, args, _ in self.calls:
                if what not in _READS:
                    _REAL[what](self, args)
        finally:
            self._inside -= 1

    def _call(self, what: str, args: tuple[Any, ...]) -> Any:
        if self._inside or not self._open:
            return _REAL[what](self, args)
        at = self._at
        if at >= 0:
            log = self._log
            if at < len(log):
                entry = log[at]
                if entry[0] == what and _same(entry[1], args):
                    self._at = at + 1
                    self.calls.append(entry)
                    return entry[2]
            self._make()
        self._inside += 1
        try:
            answer = _REAL[what](self, args)
        finally:
            self._inside -= 1
        self.calls.append((what, args, _frozen(answer)))
        return answer

    # -- what ends the log: changes made or undone outside a logged call -------------------

    def _unlogged(self) -> None:
        if self._inside:
            return  # within a logged call (make_room tries and undoes): it is the call
        if self._at >= 0:
            self._make()
        self._open = False

    def state(self) -> _Grouping:
        self._unlogged()
        return Placer.state(self)

    @contextmanager
    def trial(self) -> Iterator[None]:
        self._unlogged()
        with Placer.trial(self):
            yield

    def release_all(self, pods: Iterable[tuple[str, PodShape]]) -> None:
        self._unlogged()
        Placer.release_all(self, pods)

    # -- the logged calls ------------------------------------------------------------------

    def fits(self, shape: PodShape, limit: int | None = None) -> int:
        return self._logged("fits", Placer.fits, shape, limit)

    def place(self, shape: PodShape, count: int) -> int:
        return self._logged("place", Placer.place, shape, count)

    def _logged(
        self, what: str, run: Callable[[Any, PodShape, Any], int], shape: PodShape, n: Any
    ) -> int:
        # the calls a steady plan makes most (each job growing asks, then places): the
        # log's entry checked here, as _call would, without building the call
        at, log = self._at, self._log
        if at < 0:  # the room is made: placed as any Placer (which calls no logged call)
            answer = run(self, shape, n)
            if self._open and not self._inside:
                self.calls.append((what, (shape, n), answer))
            return answer
        if at < len(log) and self._open:
            logged, args, answer = log[at]
            if logged == what and args[0] is shape and args[1] == n:
                self._at = at + 1
                self.calls.append(log[at])
                return int(answer)
        return int(self._call(what, (shape, n)))

    def place_all(self, pods: Sequence[tuple[PodShape, int]]) -> bool:
        return bool(self._call("place_all", (tuple(pods),)))

    def unplaced(self, pods: Sequence[tuple[PodShape, int]], *, keep: bool = False) -> list[int]:
        return list(self._call("unplaced", (tuple(pods), keep)))

    def admits_node(self, shape: PodShape, name: str) -> bool:
        return bool(self._call("admits_node", (shape, name)))

    def free_on(self, name: str) -> dict[str, int] | None:
        found = self._call("free_on", (name,))
        return None if found is None else dict(found)

    def ports_on(self, name: str) -> tuple[HostPort, ...]:
        return tuple(self._call("ports_on", (name,)))

    def release(self, name: str, shape: PodShape) -> None:
        self._call("release", (name, shape))

    def take_gpus(self, gpus: int) -> None:
        self._call("take_gpus", (gpus,))

    def explain(self, shape: PodShape, more: int) -> str:
        return str(self._call("explain", (shape, more)))

    @property
    def idle_gpus(self) -> int:
        return int(self._call("idle_gpus", ()))

    def make_room(
        self,
        pods: Sequence[tuple[PodShape, int]],
        holders: Sequence[Holder],
        gpus: int = 0,
        caps: Mapping[str, float] | None = None,
        memo: tuple[RoomMemo, Hashable] | None = None,
    ) -> Room:
        """room.make_room on this room, logged as one call (it changes nothing). `memo`
        is not an argument of the call: make_room finds the same room with or without
        it, so an answer from the log is the one it would give."""
        args = (tuple(pods), tuple(holders), gpus, tuple(sorted((caps or {}).items())))
        self._room_memo = memo
        try:
            found = self._call("make_room", args)
        finally:
            self._room_memo = None
        assert isinstance(found, Room)
        return found


def room_for(
    placer: Placer,
    pods: Sequence[tuple[PodShape, int]],
    holders: Sequence[Holder],
    gpus: int = 0,
    caps: Mapping[str, float] | None = None,
    memo: tuple[RoomMemo, Hashable] | None = None,
) -> Room:
    """make_room, logged when the placer is a Replay (a reclaim then replays too)."""
    if isinstance(placer, Replay):
        return placer.make_room(pods, holders, gpus, caps, memo)
    return make_room(placer, pods, holders, gpus, caps, memo)


def _frozen(answer: Any) -> Any:
    """An answer as the log keeps it: a list or dict a caller may change, copied."""
    if isinstance(answer, list):
        return tuple(answer)
    if isinstance(answer, dict):
        return dict(answer)
    return answer


# each logged call as the Placer answers it
_REAL: dict[str, Callable[[Placer, tuple[Any, ...]], Any]] = {
    "fits": lambda p, a: Placer.fits(p, *a),
    "place": lambda p, a: Placer.place(p, *a),
    "place_all": lambda p, a: Placer.place_all(p, *a),
    "unplaced": lambda p, a: Placer.unplaced(p, a[0], keep=a[1]),
    "admits_node": lambda p, a: Placer.admits_node(p, *a),
    "free_on": lambda p, a: Placer.free_on(p, *a),
    "ports_on": lambda p, a: Placer.ports_on(p, *a),
    "release": lambda p, a: Placer.release(p, *a),
    "take_gpus": lambda p, a: Placer.take_gpus(p, *a),
    "explain": lambda p, a: Placer.explain(p, *a),
    "idle_gpus": lambda p, a: Placer.idle_gpus.fget(p),  # type: ignore[attr-defined]
    "make_room": lambda p, a: make_room(
        p, a[0], a[1], a[2], dict(a[3]), getattr(p, "_room_memo", None)
    ),
}
# the calls that change no room: not made again when the room is made
_READS = frozenset(
    {"fits", "admits_node", "free_on", "ports_on", "explain", "idle_gpus", "make_room"}
)
