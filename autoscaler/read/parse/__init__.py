"""Raw Kubernetes objects -> the frozen model. The only place that reads raw dicts.

Each object is decoded once, alone, into the record its watch cache keeps (`decoders`:
a `JobRecord`, `GroupRecord`, `QueueSpec`, ...); `assemble` then resolves what depends
on other objects (priority values, HPAs, pods per node) and `build_snapshot` joins that
with the free-GPU reading. Adding a field read from a job is its reader here (or in its
kind) and its field in the model. Every malformed object becomes an `UnmanagedJob` /
`InvalidGroup` whose message names the object and the field; nothing here raises on bad
input.

The package, by what it reads: `objects` (the raw objects, and the metadata every kind
shares), `queues` (PriorityClasses, Queues), `nodes` (nodes, pods), `jobs`, `podgroups`,
`hpas`, then `assemble` (the decoders by kind, records -> snapshot). The names below are
the ones other modules import from `autoscaler.read.parse`; new code imports from the
file that defines a name.
"""

from __future__ import annotations

from .assemble import Assembled, Decoder, Records, _queue_states, assemble, build_snapshot, decoders
from .hpas import decode_hpa, hpa_targets
from .jobs import Schedule, decode_job, in_queue, parse_job, schedule_facts, started_at
from .nodes import decode_node, decode_pod, nodes_in_use, parse_nodes
from .objects import (
    DEFAULT_QUEUE,
    MAX_NAME_LENGTH,
    RawObjects,
    created_at,
    ignored_words,
    owner_of,
)
from .podgroups import parse_podgroup
from .queues import Priorities, decode_queue

__all__ = [
    "DEFAULT_QUEUE",
    "MAX_NAME_LENGTH",
    "Assembled",
    "Decoder",
    "Priorities",
    "RawObjects",
    "Records",
    "Schedule",
    "_queue_states",
    "assemble",
    "build_snapshot",
    "created_at",
    "decode_hpa",
    "decode_job",
    "decode_node",
    "decode_pod",
    "decode_queue",
    "decoders",
    "hpa_targets",
    "ignored_words",
    "in_queue",
    "nodes_in_use",
    "owner_of",
    "parse_job",
    "parse_nodes",
    "parse_podgroup",
    "schedule_facts",
    "started_at",
]
