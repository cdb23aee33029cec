"""The status object for people: `elastic-autoscaler status` (queues, GPUs, jobs in flight
and held) and `elastic-autoscaler explain NAMESPACE/NAME` (one job: every input that
decided its size, in words). Pure: a StatusDoc in, text or a dict out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339

from ..render import ago as age
from ..render import table
from .codec import gang_dict, job_dict, queue_dict, to_dict
from .doc import RANK_SETTLED, GangEntry, JobEntry, QueueEntry, StatusDoc, rank

_NOT_MANAGED = frozenset(
    r.value for r in Reason if r.unmanaged and not r.value.startswith("Invalid")
)


def not_managed(job: JobEntry) -> bool:
    """Left alone by its own declaration or state (NotElastic, paused, an HPA's, finished):
    not a job the autoscaler manages, so never counted as settled."""
    return job.reason in _NOT_MANAGED


def _left_out(jobs: Sequence[JobEntry]) -> str:
    """The jobs a narrow table leaves out, in words: settled ones, and those not managed
    by reason; empty when there are none."""
    rest = [j for j in jobs if rank(j) >= RANK_SETTLED]
    settled = sum(1 for j in rest if not not_managed(j))
    unmanaged = Counter(j.reason for j in rest if not_managed(j))
    words = [f"{settled} settled job(s)"] if settled else []
    if unmanaged:
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(unmanaged.items()))
        words.append(f"{sum(unmanaged.values())} job(s) not managed ({reasons})")
    return " and ".join(words)


def _s(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _resize_words(j: JobEntry, now: datetime) -> str:
    r = j.resize
    if r is None:
        return "-"
    return f"{r.state.value} {_s(r.from_replicas)}->{_s(r.to_replicas)} ({age(r.since, now)})"


def _in(doc: StatusDoc, namespace: str | None) -> tuple[list[JobEntry], list[GangEntry]]:
    jobs = [j for j in doc.jobs if namespace is None or j.namespace == namespace]
    gangs = [g for g in doc.gangs if namespace is None or g.namespace == namespace]
    return jobs, gangs


def header(doc: StatusDoc) -> str:
    c = doc.cycle
    who = f", written by {doc.identity}" if doc.identity else ""
    writes = ", ".join(f"{k} {v}" for k, v in sorted(c.writes.items()))
    line = (
        f"Status at {rfc3339(doc.time)} ({doc.mode}{who}): cycle {c.result}"
        f"{f' in {c.duration_seconds:g}s' if c.duration_seconds else ''}: {c.jobs} job(s), "
        f"{c.actions} change(s), {c.gangs} waiting gang(s)"
    )
    if writes:
        line += f"; writes: {writes}"
    if c.message:
        line += f"\n  {c.message}"
    return line


def status_table(doc: StatusDoc, namespace: str | None = None, *, wide: bool = False) -> str:
    """Queues, then the jobs not settled (wide: every job listed), then waiting gangs."""
    jobs, gangs = _in(doc, namespace)
    parts = [header(doc), "", _queue_table(doc, wide), "", _job_table(jobs, doc.time, wide)]
    if gangs:
        parts += ["", _gang_table(gangs, doc.time)]
    parts += _footnotes(doc, jobs, wide)
    return "\n".join(parts) + "\n"


def _queue_table(doc: StatusDoc, wide: bool) -> str:
    head = ["QUEUE", "STATUS", "HEADROOM", "BOUND BY", "IN-FLIGHT", "PENDING", "GRANTED"]
    head += ["RECLAIMED", "JOBS"]
    if wide:
        head += ["FREE", "RELEASING", "TRIMMED", "PLUGIN"]
    rows = []
    for name, q in doc.queues.items():
        row = [
            name,
            q.status,
            _g(q.headroom_gpus),
            _s(q.bound),
            str(q.inflight_gpus),
            str(q.pending_gpus),
            str(q.granted_gpus),
            str(q.reclaimed_gpus),
            str(sum(q.jobs.values())),
        ]
        if wide:
            row += [_g(q.free_gpus), str(q.releasing_gpus), str(q.trimmed_gpus), _s(q.plugin)]
        rows.append(row)
    return table(head, rows)


def _job_table(jobs: Sequence[JobEntry], now: datetime, wide: bool) -> str:
    """The jobs not settled (wide: every job), or one line saying there are none."""
    shown = jobs if wide else [j for j in jobs if rank(j) < RANK_SETTLED]
    head = ["JOB", "QUEUE", "WORKERS", "GPUS", "TARGET", "RESIZE", "REASON", "SINCE"]
    if wide:
        head[1:1] = ["KIND"]
        head += ["ACTIVE", "MIN", "MAX", "GPU/W", "MESSAGE"]
    rows = []
    for j in shown:
        row = [
            f"{j.namespace}/{j.name}",
            j.queue,
            _s(j.replicas),
            _s(j.gpus),
            _s(j.target),
            _resize_words(j, now),
            j.reason,
            age(j.since, now),
        ]
        if wide:
            row[1:1] = [j.kind]
            row += [
                _s(j.active),
                _s(j.min_replicas),
                _s(j.max_replicas),
                _s(j.gpus_per_worker),
                j.message,
            ]
        rows.append(row)
    if rows:
        return table(head, rows)
    rest = _left_out(jobs)
    return "No job in flight, held, refused or invalid" + (f" ({rest})." if rest else ".")


def _gang_table(gangs: Sequence[GangEntry], now: datetime) -> str:
    return table(
        ["WAITING GANG", "JOB", "QUEUE", "GPUS", "REASON", "VICTIMS", "WAITING"],
        [
            [
                f"{g.namespace}/{g.name}",
                g.job or "-",
                g.queue,
                str(g.gpus),
                g.reason,
                ", ".join(g.victims) or "-",
                age(g.since, now),
            ]
            for g in gangs
        ],
    )


def _footnotes(doc: StatusDoc, jobs: Sequence[JobEntry], wide: bool) -> list[str]:
    """What the tables leave out, and (wide) each queue's headroom and hold in words."""
    parts: list[str] = []
    rest = _left_out(jobs)
    if not wide and rest and any(rank(j) < RANK_SETTLED for j in jobs):
        parts += ["", f"{rest} not shown (-o wide shows them)."]
    left_out = [
        f"{sum(counts.values())} {what} ("
        + ", ".join(f"{r} {n}" for r, n in sorted(counts.items()))
        + ")"
        for what, counts in (("job(s)", doc.omitted_jobs), ("waiting gang(s)", doc.omitted_gangs))
        if counts
    ]
    if left_out:
        parts += [
            "",
            f"Not listed in the status object (its size is bounded; each listed one is "
            f"whole): {' and '.join(left_out)}; `explain NAMESPACE/NAME --live` plans any "
            "one now.",
        ]
    if wide:
        rooms = [(n, q) for n, q in doc.queues.items() if q.headroom]
        if rooms:
            parts += ["", "Headroom (what the scheduler would bind now):"]
            parts += [f"  {n}: {q.headroom}" for n, q in rooms]
        holding = [(n, q) for n, q in doc.queues.items() if q.message]
        parts += [f"  queue {n}: {q.status}: {q.message}" for n, q in holding]
    return parts


def status_dict(doc: StatusDoc, namespace: str | None = None) -> dict[str, Any]:
    out = to_dict(doc)
    if namespace is not None:
        jobs, gangs = _in(doc, namespace)
        out["jobs"] = [job_dict(j) for j in jobs]
        out["gangs"] = [gang_dict(g) for g in gangs]
    return out


# ---- explain -------------------------------------------------------------------------


def _queue_lines(q: QueueEntry) -> list[str]:
    lines = [f"Queue {q.name}: {q.status}" + (f": {q.message}" if q.message else "")]
    if q.headroom:
        lines.append(f"  headroom: {q.headroom}")
    elif q.headroom_gpus is not None:
        lines.append(f"  headroom: {q.headroom_gpus:g} GPU(s)")
    else:
        lines.append("  headroom: unknown (the queue holds: nothing in it grows)")
    lines.append(
        f"  GPUs: {q.inflight_gpus} in flight (asked for, not running yet), "
        f"{q.releasing_gpus} being released, {q.pending_gpus} needed by waiting gangs, "
        f"{q.granted_gpus} granted to growth, {q.reclaimed_gpus} reclaimed for gangs, "
        f"{q.trimmed_gpus} trimmed"
    )
    if q.jobs:
        lines.append("  jobs by reason: " + ", ".join(f"{r} {n}" for r, n in q.jobs.items()))
    return lines


def _why_not_growing(j: JobEntry) -> str:
    """The one sentence a user asked for: is it growing, and if not, why."""
    if j.target is not None and j.replicas is not None and j.target != j.replicas:
        verb = "grows" if j.target > j.replicas else "shrinks"
        return f"It {verb} from {j.replicas} to {j.target} worker(s): {j.message}"
    if j.reason == "HoldAtMax":
        return f"It does not grow: it is at its maximum ({_s(j.max_replicas)} workers)."
    if j.reason.startswith("Hold"):
        return f"It does not grow now: {j.reason}: {j.message}"
    if j.reason.startswith("Invalid"):
        return f"It is left alone until fixed: {j.reason}: {j.message}"
    if not_managed(j):
        return f"Not managed: {j.reason}: {j.message}"
    return f"It is not resized: {j.reason}: {j.message}"


def _gpus_words(job: JobEntry) -> str:
    """The GPUs a job holds, as plan and status count them (its Master's included)."""
    workers = (job.replicas or 0) * (job.gpus_per_worker or 0)
    other = (job.gpus or 0) - workers
    if other <= 0:
        return f"{job.gpus} held by its {_s(job.replicas)} worker(s)"
    return (
        f"{job.gpus} held: {workers} by its {_s(job.replicas)} worker(s) and {other} by "
        "the other pods of its gang (its Master, other tasks), which are never resized"
    )


def explain_text(doc: StatusDoc, job: JobEntry) -> str:
    now = doc.time
    lines = [
        f"{job.kind} {job.namespace}/{job.name} in queue {job.queue}, as of the cycle at "
        f"{rfc3339(doc.time)} ({doc.mode}, {doc.cycle.result})",
        "",
        _why_not_growing(job),
        "",
        f"Decision:  {job.reason} (since {rfc3339(job.since)}, {age(job.since, now)})",
        f"           {job.message}",
        f"Size:      {_s(job.replicas)} worker(s) in spec, {_s(job.active)} running; "
        f"elastic range {_s(job.min_replicas)}..{_s(job.max_replicas)}; "
        f"{_s(job.gpus_per_worker)} GPU(s) per worker; target {_s(job.target)}",
    ]
    if job.gpus is not None:
        lines.append(f"GPUs:      {_gpus_words(job)}")
    r = job.resize
    if r is not None:
        lines.append(
            f"Resize:    {r.state.value} {_s(r.from_replicas)} -> {_s(r.to_replicas)} "
            f"since {rfc3339(r.since)} ({r.reason}): {r.message}"
        )
    if job.last_resize is not None:
        lines.append(
            f"Last resize by the autoscaler: {rfc3339(job.last_resize)} "
            f"({age(job.last_resize, now)} ago; the cooldown counts from it)"
        )
    if job.restart_cost:
        lines.append(f"Restart:   {job.restart_cost} (what one resize costs it)")
    if job.priority is not None:
        lines.append(f"Priority:  {job.priority}")
    lines += [f"Note:      {n}" for n in job.notes]
    q = doc.queues.get(job.queue)
    lines.append("")
    if q is not None:
        lines += _queue_lines(q)
    else:
        lines.append(f"Queue {job.queue}: not in the status (no summary for it this cycle)")
    own = own_gangs(doc, job)
    for g in own:
        lines += ["", *gang_lines(doc, g)]
    gangs = [g for g in doc.gangs if g.queue == job.queue and g not in own]
    if gangs:
        lines += ["", f"Waiting gangs in {job.queue}, served first:"]
        me = f"{job.namespace}/{job.name}"
        for g in gangs:
            mark = "  <- takes workers from this job" if me in g.victims else ""
            lines.append(
                f"  {g.namespace}/{g.name}: {g.gpus} GPU(s), waiting {age(g.since, now)}: "
                f"{g.reason}: {g.message}{mark}"
            )
    return "\n".join(lines) + "\n"


def own_gangs(doc: StatusDoc, job: JobEntry) -> list[GangEntry]:
    """The waiting gangs that are this job's own (its PodGroup, by owner)."""
    mine = f"{job.kind}/{job.namespace}/{job.name}"
    return [g for g in doc.gangs if g.job == mine]


def gang_of(doc: StatusDoc, namespace: str, name: str) -> GangEntry | None:
    """The waiting gang of this PodGroup name, if the status lists it."""
    return next((g for g in doc.gangs if (g.namespace, g.name) == (namespace, name)), None)


def gang_lines(doc: StatusDoc, g: GangEntry) -> list[str]:
    """One waiting gang in words: whose it is, what it needs and from where, since when,
    what the plan does with it and what blocks it."""
    now = doc.time
    whose = f"the gang of {g.job}" if g.job else "a gang of no job we read"
    source = {
        "pods": "its pods' requests",
        "template": "its job's pod templates",
        "minResources": "the PodGroup's spec.minResources",
    }.get(g.need_from, "")
    lines = [
        f"Gang:      PodGroup {g.namespace}/{g.name} ({whose}) in queue {g.queue}",
        f"           needs {g.gpus} GPU(s)" + (f", read from {source}" if source else ""),
        f"           waiting since {rfc3339(g.since)} ({age(g.since, now)})",
        f"           {g.reason}: {g.message}",
    ]
    if g.victims:
        lines.append(f"           takes workers from: {', '.join(g.victims)}")
    q = doc.queues.get(g.queue)
    if q is not None and g.reason not in ("GangFits", "GangCoveredByReclaim"):
        room = q.headroom or (f"{q.headroom_gpus:g} GPU(s)" if q.headroom_gpus is not None else "")
        if room:
            lines.append(f"           queue headroom: {room}")
    if g.blockers:
        lines.append("           elastic jobs that did not give way:")
        lines += [f"             {b}" for b in g.blockers]
    return lines


def explain_gang_text(doc: StatusDoc, g: GangEntry) -> str:
    """`explain NS/PODGROUP`: the gang alone, when no job of that name is listed."""
    head = (
        f"PodGroup {g.namespace}/{g.name}, as of the cycle at {rfc3339(doc.time)} "
        f"({doc.mode}, {doc.cycle.result})"
    )
    lines = [head, "", *gang_lines(doc, g)]
    q = doc.queues.get(g.queue)
    if q is not None:
        lines += ["", *_queue_lines(q)]
    return "\n".join(lines) + "\n"


def explain_dict(doc: StatusDoc, job: JobEntry) -> dict[str, Any]:
    q = doc.queues.get(job.queue)
    return {
        "time": rfc3339(doc.time),
        "mode": doc.mode,
        "cycle": doc.cycle.result,
        "summary": _why_not_growing(job),
        "job": job_dict(job),
        "queue": queue_dict(q) if q is not None else None,
        "gangs": [gang_dict(g) for g in doc.gangs if g.queue == job.queue],
        "own_gangs": [gang_dict(g) for g in own_gangs(doc, job)],
    }


def explain_gang_dict(doc: StatusDoc, g: GangEntry) -> dict[str, Any]:
    q = doc.queues.get(g.queue)
    return {
        "time": rfc3339(doc.time),
        "mode": doc.mode,
        "cycle": doc.cycle.result,
        "gang": gang_dict(g),
        "queue": queue_dict(q) if q is not None else None,
    }


def not_listed(
    doc: StatusDoc, namespace: str, name: str, kinds: Sequence[str] | None = None
) -> str:
    """Why the status object has no entry for a job (`kinds`: those of which it exists,
    None when the cluster could not say)."""
    what = f"job {namespace}/{name}" + (f" ({', '.join(kinds)})" if kinds else "")
    left_out = sum(doc.omitted_jobs.values())
    if left_out:
        return (
            f"{what} is not listed in the status object: {left_out} settled "
            "job(s) were left out to bound its size; `explain --live` plans it now"
        )
    return (
        f"{what}: not managed: it is not among the {doc.cycle.jobs} job(s) the last cycle "
        f"({rfc3339(doc.time)}) planned: not a managed kind (job_kinds), not in a watched "
        "namespace (namespaces), not matching label_selector, or created since"
    )
