"""A Plan as a table for people or as stable JSON for tools (format: docs/snapshot.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from autoscaler.core.model import (
    Bound,
    ClusterSnapshot,
    Decision,
    ElasticJob,
    GangDecision,
    ObjectRef,
    PendingGroup,
    Plan,
    Plugin,
    QueueSummary,
)
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339 as format_time
from autoscaler.core.shapes import GPU_RESOURCE
from autoscaler.plan.fit.placer import describe_shape


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    return {
        "now": format_time(plan.now),
        "actions": [_action_dict(d) for d in plan.actions],
        "jobs": [_job_dict(d) for d in plan.decisions],
        "gangs": [_gang_dict(g) for g in plan.gangs],
        "queues": {name: _queue_dict(q) for name, q in sorted(plan.queues.items())},
    }


def _action_dict(d: Decision) -> dict[str, Any]:
    return {
        "namespace": d.ref.namespace,
        "name": d.ref.name,
        "kind": d.ref.kind,
        "queue": d.queue,
        "from": d.current,
        "to": d.target,
        "gpus_per_worker": d.gpus_per_worker,
        "gpus": d.gpus,  # at `from`: its workers' GPUs and its Master's (Decision.gpus)
        "reason": d.reason.value,
        "message": d.message,
    }


def _job_dict(d: Decision) -> dict[str, Any]:
    return {
        "namespace": d.ref.namespace,
        "name": d.ref.name,
        "kind": d.ref.kind,
        "queue": d.queue,
        "replicas": d.current,
        "min": d.min_replicas,
        "max": d.max_replicas,
        "gpus_per_worker": d.gpus_per_worker,
        "gpus": d.gpus,  # at `replicas`: its workers' GPUs and its Master's (Decision.gpus)
        "target": d.target,
        "reason": d.reason.value,
        "message": d.message,
        "notes": list(d.notes),
        "restart_cost_seconds": d.restart_cost_seconds,
        "restart_cost_source": d.restart_cost_source or None,
    }


def _gang_dict(g: GangDecision) -> dict[str, Any]:
    return {
        "namespace": g.ref.namespace,
        "name": g.ref.name,
        "queue": g.queue,
        "gpus": g.gpus,
        "reason": g.reason.value,
        "message": g.message,
        "victims": [f"{v.namespace}/{v.name}" for v in g.victims],
        "job": g.job or None,
        "need_from": g.need_from or None,
        "blockers": list(g.blockers),
    }


def _queue_dict(q: QueueSummary) -> dict[str, Any]:
    return {
        "free_gpus": q.free_gpus,
        "inflight_gpus": q.inflight_gpus,
        "releasing_gpus": q.releasing_gpus,
        "pending_gpus": q.pending_gpus,
        "granted_gpus": q.granted_gpus,
        "reclaimed_gpus": q.reclaimed_gpus,
        "trimmed_gpus": q.trimmed_gpus,
        "reason": q.reason.value if q.reason else None,
        "message": q.message,
        # what the scheduler would bind now, and what bounded it
        "headroom_gpus": q.headroom_gpus,
        "bound": q.bound.value if q.bound else None,
        "plugin": q.plugin.value,
        "limits": dict(sorted(q.limits.items())),
        "inputs": dict(sorted(q.inputs.items())),
        "notes": list(q.notes),
    }


def plan_to_json(plan: Plan) -> str:
    return json.dumps(plan_to_dict(plan), indent=2, sort_keys=False) + "\n"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line.rstrip()]
    for r in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(out)


def _s(value: object) -> str:
    return "-" if value is None else str(value)


_JOB_HEADERS = [
    "JOB",
    "KIND",
    "QUEUE",
    "GPU/W",
    "MIN",
    "MAX",
    "WORKERS",  # the worker group's spec replicas: what the plan resizes
    "GPUS",  # what the job holds at that size, its Master's included (Decision.gpus)
    "TARGET",
    "RESTART",
    "REASON",
]
_GANG_HEADERS = ["WAITING GANG", "JOB", "QUEUE", "GPUS", "FROM", "REASON", "VICTIMS"]
_QUEUE_HEADERS = [
    "QUEUE",
    "FREE",
    "HEADROOM",
    "BOUND BY",
    "IN-FLIGHT",
    "PENDING",
    "GRANTED",
    "RECLAIMED",
    "STATUS",
]


def plan_to_table(
    plan: Plan,
    *,
    verbose: bool = False,
    snapshot: ClusterSnapshot | None = None,
    gpu_names: Sequence[str] = (GPU_RESOURCE,),
) -> str:
    """The plan for people. `verbose` (-o wide): more columns, from `snapshot` where the
    plan does not carry them: each job's running workers, the shape of one worker and
    since when it has its size; each gang's pods and how long it has waited; each
    queue's plugin and the room every limit leaves (node fit's among them)."""
    wide = _Wide(plan, snapshot, gpu_names) if verbose else None
    job_head, gang_head, queue_head = _JOB_HEADERS, _GANG_HEADERS, _QUEUE_HEADERS
    if wide is not None:
        job_head, gang_head = [*job_head, *_WIDE_JOB], [*gang_head, *_WIDE_GANG]
        queue_head = [*queue_head, *_WIDE_QUEUE]
    parts = [
        f"Plan at {format_time(plan.now)}: {len(plan.actions)} change(s), "
        f"{len(plan.decisions)} job(s), {len(plan.gangs)} waiting gang(s)",
        "",
        table(job_head, [_job_row(d) + (wide.job(d) if wide else []) for d in plan.decisions]),
    ]
    if plan.gangs:
        rows = [_gang_row(g) + (wide.gang(g) if wide else []) for g in plan.gangs]
        parts += ["", table(gang_head, rows)]
    queues = sorted(plan.queues.items())
    rows = [_queue_row(name, q) + (wide.queue(q) if wide else []) for name, q in queues]
    parts += ["", table(queue_head, rows)]
    parts += _why(plan)
    rooms = [(name, q) for name, q in queues if room_of(q)[2]]
    if rooms:
        parts += ["", "Headroom (what the scheduler would bind now):"]
        parts.extend(f"  {name}: {room_of(q)[2]}" for name, q in rooms)
        if any(room_of(q)[1] == Bound.GIVEN.value for _, q in rooms):
            parts.append(f"  ({GIVEN_WORDS})")
    return "\n".join(parts) + "\n"


GIVEN_WORDS = (
    "given: the free GPUs as read, from free_gpus_query or a snapshot's free_gpus, with no "
    "Volcano metrics or nodes to bound them; a snapshot's volcano.queues and Node objects "
    "compute the headroom as the daemon does (docs/snapshot.md)"
)


def room_of(q: QueueSummary) -> tuple[float | None, str, str]:
    """A queue's headroom, what bounded it and both in words, as every output shows
    them: a reading taken as given (a `free_gpus` query or snapshot key, with no Volcano
    metrics and no node to bound it) is its own headroom, bounded by `given`, and the
    words say so; a queue that holds has none ("")."""
    if q.bound is not None:
        return q.headroom_gpus, q.bound.value, headroom_words(q)
    if q.headroom_gpus is None and q.reason is None and q.free_gpus is not None:
        free = f"{q.free_gpus:g}"
        words = f"given: {free} free GPU(s) as read -> {free} GPU(s)"
        return q.free_gpus, Bound.GIVEN.value, words
    return q.headroom_gpus, "", ""


_WIDE_JOB = ["ACTIVE", "WORKER SHAPE", "RESIZED"]
_WIDE_GANG = ["PODS", "WAITING"]
_WIDE_QUEUE = ["PLUGIN", "ROOM BY LIMIT"]


class _Wide:
    """The columns `-o wide` adds, read from the snapshot the plan was made of."""

    def __init__(
        self, plan: Plan, snapshot: ClusterSnapshot | None, gpu_names: Sequence[str]
    ) -> None:
        self.now = plan.now
        self.gpu_names = tuple(gpu_names)
        jobs = snapshot.jobs if snapshot is not None else ()
        self.jobs: dict[ObjectRef, ElasticJob] = {j.ref: j for j in jobs}
        pending = snapshot.pending if snapshot is not None else ()
        self.pending: dict[ObjectRef, PendingGroup] = {g.ref: g for g in pending}

    def job(self, d: Decision) -> list[str]:
        j = self.jobs.get(d.ref)
        if j is None:  # not elastic: nothing of its workers was read beyond its reason
            return ["-", "-", "-"]
        resized = "-" if j.last_scale_time is None else f"{ago(j.last_scale_time, self.now)} ago"
        return [str(j.active), describe_shape(j.worker_shape, self.gpu_names), resized]

    def gang(self, g: GangDecision) -> list[str]:
        p = self.pending.get(g.ref)
        if p is None:
            return ["-", "-"]
        return [str(p.min_member or "-"), ago(p.created, self.now)]

    def queue(self, q: QueueSummary) -> list[str]:
        limits = ", ".join(f"{k} {v:g}" for k, v in sorted(q.limits.items()))
        if q.bound is Bound.NODE_FIT:  # below every other limit: no node takes a worker
            limits = f"{limits}, node-fit below them" if limits else "node-fit"
        return [q.plugin.value, limits or "-"]


def ago(since: datetime, now: datetime) -> str:
    """kubectl's AGE (45s, 12m, 5h, 3d), seconds rounded as the plan's messages round
    them: one answer, one clock."""
    seconds = max(0, round((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _job_row(d: Decision) -> list[str]:
    target, current = _s(d.target), d.current
    if d.target is not None and current is not None and d.target != current:
        target = f"{d.target} ({'+' if d.target > current else ''}{d.target - current})"
    return [
        f"{d.ref.namespace}/{d.ref.name}",
        d.ref.kind,
        d.queue,
        _s(d.gpus_per_worker),
        _s(d.min_replicas),
        _s(d.max_replicas),
        _s(d.current),
        _s(d.gpus),
        target,
        _restart(d.restart_cost_seconds, d.restart_cost_source),
        d.reason.value,
    ]


def _gang_row(g: GangDecision) -> list[str]:
    return [
        f"{g.ref.namespace}/{g.ref.name}",
        g.job or "-",
        g.queue,
        str(g.gpus),
        g.need_from or "-",
        g.reason.value,
        ", ".join(f"{v.namespace}/{v.name}" for v in g.victims) or "-",
    ]


def _queue_row(name: str, q: QueueSummary) -> list[str]:
    headroom, bound, _ = room_of(q)
    return [
        name,
        _s(q.free_gpus if q.free_gpus is None else f"{q.free_gpus:g}"),
        _s(None if headroom is None else f"{headroom:g}"),
        _bound(q) if q.bound is not None else bound or "-",
        str(q.inflight_gpus),
        str(q.pending_gpus),
        str(q.granted_gpus),
        str(q.reclaimed_gpus),
        q.reason.value if q.reason else "ok",
    ]


def notes_said(d: Decision) -> tuple[str, ...]:
    """The notes shown to a person beside a decision's message: one that makes the
    message's own point again is left out (a job held because it has no minAvailable
    is not told a second time that it has none)."""
    if d.reason is Reason.NO_MIN_AVAILABLE:
        return tuple(n for n in d.notes if "minAvailable" not in n)
    return d.notes


def _why(plan: Plan) -> list[str]:
    """Why every job and each held queue is what it is: one line a job, whatever its
    reason (a job held or at max has a why too), and its notes."""
    lines: list[str] = []
    if plan.decisions:
        lines += ["", "Why:"]
        for d in plan.decisions:
            lines.append(f"  {d.ref.namespace}/{d.ref.name}: {d.reason.value}: {d.message}")
            lines.extend(f"    note: {n}" for n in notes_said(d))
    for name, q in sorted(plan.queues.items()):
        if q.reason is not None:
            lines.append(f"  queue {name}: {q.reason.value}: {q.message}")
        lines.extend(f"  queue {name}: note: {n}" for n in q.notes)
    return lines


def _bound(q: QueueSummary) -> str:
    if q.bound is None:
        return "-"
    return q.bound.value if q.plugin is Plugin.GIVEN else f"{q.bound.value} ({q.plugin.value})"


_INPUT_WORDS = {
    "share": "share if it asked for more",
    "allocated": "allocated",
    "cluster_gpus": "cluster GPUs",
    "capability": "capability",
    "real_capacity": "real capacity",
    "inqueue": "held for admitted gangs",
}


def headroom_words(q: QueueSummary) -> str:
    """One queue's headroom in words: each limit's room, then the result."""
    inputs = ", ".join(f"{_INPUT_WORDS.get(k, k)} {v:g}" for k, v in q.inputs.items())
    limits = ", ".join(f"{k} {v:g}" for k, v in q.limits.items())
    head = f"{q.plugin.value}: " + (f"{inputs}; " if inputs else "")
    result = "-" if q.headroom_gpus is None else f"{q.headroom_gpus:g}"
    return f"{head}room by {limits} -> {result} GPU(s), bounded by {_bound(q)}"


def _restart(seconds: float | None, source: str) -> str:
    """The restart cost the plan used: `95s measured`, `30s default`, `-` if unmanaged."""
    if seconds is None:
        return "-"
    return f"{seconds:.0f}s {source}" if source else f"{seconds:.0f}s"
