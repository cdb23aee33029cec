"""Fit by shape: would the scheduler bind a pod of this shape on one of these nodes, and
how many such pods fit? Pure (no I/O, no clock), deterministic; shared by the planner
and the simulator, so both judge nodes by the same rules.

- filters.py: the scheduler's filters (`admits`, `tolerates`, `how_many`, ...), and why a
  node does not take a pod (`Misfit`);
- nodes.py: nodes grouped into classes (what the filters read) and buckets (equal free
  room), so that placing scans buckets, not nodes;
- placer.py: `Placer`, the room taken as this cycle places pods, best fit; and why no
  more fit, in words (`explain`, `describe_shape`);
- room.py: `make_room`, the workers a reclaim takes so that a gang's pods fit;
- groups.py: `GroupFit`, Volcano's nodegroup plugin for one queue: its workers only on
  its node groups' nodes, within its per-group limits, consumed as they are placed.

API (plain: shapes and nodes in, placements out):

    placer = Placer(nodes, gpu_names)   # model.Node, with what bound pods request
    placer.state()                      # the room so far: Placer(nodes, names, start=it)
    placer.fits(shape, limit)           # pods of `shape` that fit now; nothing taken
    placer.place(shape, count)          # room taken for up to `count`, best fit; how many
    placer.place_all(pods)              # a gang, [(shape, count)]: all of it or nothing
    placer.unplaced(pods)               # how many of each find no room (nothing taken)
    placer.admits_node(shape, name)     # the named node's filters admit the shape
    placer.take_gpus(gpus)              # a gang known by its GPUs alone: emptiest nodes
    placer.release(node, shape)         # a pod that goes gives its node's room back
    placer.free_on(node)                # the named node's free room now
    with placer.trial(): ...            # what is placed or released inside is undone
    make_room(placer, pods, holders)    # which workers a reclaim takes so a gang fits
    placer.explain(shape, more)         # why no more than `more` fit, in words
    placer.idle_gpus                    # GPUs free on Ready, uncordoned nodes
    Replay(nodes, names, start, log)    # a Placer answering from the last plan's log
                                        # (`log`: its `calls`) while asked the same
    admits(shape, node)                 # the filters a node's labels, taints and state
                                        # decide alone: None, or the Misfit

The names below are the ones the planner, the simulator and the tests import from here.
"""

from .filters import (
    AFFINITY,
    CORDONED,
    NOT_READY,
    SELECTOR,
    TAINT,
    Misfit,
    admits,
    how_many,
    requirement_matches,
    tolerates,
)
from .groups import GroupFit, with_taken
from .placer import Placer, describe_shape
from .replay import Replay, room_for
from .room import Holder, Room, RoomMemo, make_room

__all__ = [
    "AFFINITY",
    "CORDONED",
    "NOT_READY",
    "SELECTOR",
    "TAINT",
    "GroupFit",
    "Holder",
    "Misfit",
    "Placer",
    "Replay",
    "Room",
    "RoomMemo",
    "admits",
    "describe_shape",
    "how_many",
    "make_room",
    "requirement_matches",
    "room_for",
    "tolerates",
    "with_taken",
]
