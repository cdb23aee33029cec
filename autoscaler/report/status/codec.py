"""The status document to and from the ConfigMap's `data`: JSON laid out for kubectl and
grep (one job or gang a line), read back tolerant of fields a newer or older writer adds
or lacks (a StatusError says what is wrong)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from autoscaler.core.resources import micro_time, rfc3339
from autoscaler.read.fields import BadField, parse_time

from .doc import (
    DATA_KEY,
    SCHEMA,
    Cycle,
    GangEntry,
    JobEntry,
    QueueEntry,
    Resize,
    ResizeState,
    StatusDoc,
    StatusError,
    StatusMemo,
)

# ---- to and from the ConfigMap ---------------------------------------------------------


def _drop_empty(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v not in (None, "", (), [], {})}


def _t(when: datetime | None) -> str | None:
    return rfc3339(when) if when is not None else None


def job_dict(j: JobEntry) -> dict[str, Any]:
    out = _drop_empty(
        {
            "job": f"{j.namespace}/{j.name}",
            "kind": j.kind,
            "queue": j.queue,
            "reason": j.reason,
            "message": j.message,
            "since": _t(j.since),
            "replicas": j.replicas,
            "active": j.active,
            "target": j.target,
            "min": j.min_replicas,
            "max": j.max_replicas,
            "gpus_per_worker": j.gpus_per_worker,
            "gpus": j.gpus,
            "priority": j.priority,
            "last_resize": _t(j.last_resize),
            "restart_cost": j.restart_cost,
            "notes": list(j.notes),
        }
    )
    if j.resize is not None:
        r = j.resize
        out["resize"] = _drop_empty(
            {
                "state": r.state.value,
                "from": r.from_replicas,
                "to": r.to_replicas,
                "since": _t(r.since),
                "reason": r.reason,
                "message": r.message,
            }
        )
    return out


def gang_dict(g: GangEntry) -> dict[str, Any]:
    return _drop_empty(
        {
            "gang": f"{g.namespace}/{g.name}",
            "queue": g.queue,
            "gpus": g.gpus,
            "reason": g.reason,
            "message": g.message,
            "waiting_since": _t(g.since),
            "victims": list(g.victims),
            "owner": g.owner,
            "job": g.job,
            "need_from": g.need_from,
            "blockers": list(g.blockers),
        }
    )


def queue_dict(q: QueueEntry) -> dict[str, Any]:
    return {
        "status": q.status,
        "message": q.message,
        "headroom_gpus": q.headroom_gpus,
        "bound": q.bound or None,
        "plugin": q.plugin or None,
        "headroom": q.headroom,
        "limits": dict(q.limits),
        "inputs": dict(q.inputs),
        "free_gpus": q.free_gpus,
        "inflight_gpus": q.inflight_gpus,
        "releasing_gpus": q.releasing_gpus,
        "pending_gpus": q.pending_gpus,
        "granted_gpus": q.granted_gpus,
        "reclaimed_gpus": q.reclaimed_gpus,
        "trimmed_gpus": q.trimmed_gpus,
        "jobs": dict(q.jobs),
        "gangs": dict(q.gangs),
    }


def to_dict(doc: StatusDoc) -> dict[str, Any]:
    return {
        **_head(doc),
        "queues": {name: queue_dict(q) for name, q in doc.queues.items()},
        "gangs": [gang_dict(g) for g in doc.gangs],
        "jobs": [job_dict(j) for j in doc.jobs],
        "omitted": {"jobs": dict(doc.omitted_jobs), "gangs": dict(doc.omitted_gangs)},
    }


def _head(doc: StatusDoc) -> dict[str, Any]:
    """The document's first keys: when, who wrote it, the cycle."""
    c = doc.cycle
    return {
        "schema": SCHEMA,
        # the cycle's own `now`, to the microsecond: every "ago" of a reader is counted
        # from it, as the plan's messages were (one clock per answer)
        "time": micro_time(doc.time) if doc.time.microsecond else rfc3339(doc.time),
        "writer": _drop_empty(
            {
                "mode": doc.mode,
                "identity": doc.identity,
                "version": doc.version,
                "heartbeat_seconds": doc.heartbeat_seconds or None,
            }
        ),
        "cycle": _drop_empty(
            {
                "result": c.result,
                "message": c.message,
                "duration_seconds": round(c.duration_seconds, 3),
                "jobs": c.jobs,
                "actions": c.actions,
                "gangs": c.gangs,
                "writes": dict(sorted(c.writes.items())),
            }
        ),
    }


def dump(doc: StatusDoc, memo: StatusMemo | None = None) -> str:
    """The document as the ConfigMap holds it: JSON (ten times faster to write than YAML,
    and `jq` reads it), the header and queues one field a line, each job and gang on one
    line of its own, so `kubectl get ... | grep NAMESPACE/NAME` shows a whole entry.
    `memo`: the last status's lines of the same jobs and queues taken up (StatusMemo)."""
    parts = [
        json.dumps(_head(doc), indent=1, ensure_ascii=False)[:-2],  # without "\n}"
        f' "queues": {_queues_text(doc.queues, memo)}',
    ]
    gangs = [_line(gang_dict(g)) for g in doc.gangs]
    for key, rows in (("gangs", gangs), ("jobs", _job_lines(doc.jobs, memo))):
        lines = ",\n".join(rows)
        parts.append(f' "{key}": [\n{lines}\n ]' if rows else f' "{key}": []')
    omitted = {"jobs": dict(doc.omitted_jobs), "gangs": dict(doc.omitted_gangs)}
    parts.append(f' "omitted": {json.dumps(omitted)}')
    return ",\n".join(parts) + "\n}\n"


def _line(item: dict[str, Any]) -> str:
    return "  " + json.dumps(item, ensure_ascii=False)


def _job_lines(jobs: tuple[JobEntry, ...], memo: StatusMemo | None) -> list[str]:
    """Each job's line; the last dump's line of the same entry object when kept."""
    last = memo.rows if memo is not None else {}
    rows: dict[int, tuple[JobEntry, str]] = {}
    lines = []
    for j in jobs:
        k = last.get(id(j))
        if k is None or k[0] is not j:
            k = (j, _line(job_dict(j)))
        rows[id(j)] = k
        lines.append(k[1])
    if memo is not None:
        memo.rows = rows
    return lines


def _queues_text(queues: Mapping[str, QueueEntry], memo: StatusMemo | None) -> str:
    """The queues as `json.dumps(..., indent=1)` writes them one level in; each queue's
    lines taken up from the last dump when its JSON is the same (the indented writer is
    pure Python, and ten times slower than the compact one the key is made with)."""
    if not queues:
        return "{}"
    last = memo.queues if memo is not None else {}
    kept: dict[str, str] = {}
    items = []
    for name, q in queues.items():
        data = queue_dict(q)
        key = json.dumps(data, ensure_ascii=False)
        # JSON strings hold no raw newline: each line of the queue goes two spaces in
        text = last.get(key) or json.dumps(data, indent=1, ensure_ascii=False).replace("\n", "\n  ")
        kept[key] = text
        items.append(f"  {json.dumps(name, ensure_ascii=False)}: {text}")
    if memo is not None:
        memo.queues = kept
    return "{\n" + ",\n".join(items) + "\n }"


def to_data(doc: StatusDoc) -> dict[str, str]:
    """The ConfigMap's `data`."""
    return {DATA_KEY: dump(doc)}


# reading back: tolerant of fields a newer or older writer adds or lacks


def _map(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise StatusError(f"{where} is not a mapping")
    return value


def _time(value: Any, where: str) -> datetime:
    if isinstance(value, datetime):
        value = value.isoformat()
    try:
        return parse_time(value, where)
    except BadField as exc:
        raise StatusError(str(exc)) from None


def _opt_time(value: Any, where: str) -> datetime | None:
    return None if value is None else _time(value, where)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _counts(value: Any) -> dict[str, int]:
    return {str(k): v for k, v in (value or {}).items() if isinstance(v, int)}


def _split(ref: Any, where: str) -> tuple[str, str]:
    if not isinstance(ref, str) or ref.count("/") != 1:
        raise StatusError(f"{where} is not namespace/name: {ref!r}")
    ns, name = ref.split("/")
    return ns, name


def from_dict(data: Any) -> StatusDoc:
    top = _map(data, "the status document")
    if top.get("schema") != SCHEMA:
        raise StatusError(f"schema is {top.get('schema')!r}, not {SCHEMA}")
    writer = _map(top.get("writer"), "writer")
    omitted = _map(top.get("omitted"), "omitted")
    return StatusDoc(
        time=_time(top.get("time"), "time"),
        cycle=_cycle_from(_map(top.get("cycle"), "cycle")),
        mode=str(writer.get("mode") or ""),
        identity=str(writer.get("identity") or ""),
        version=str(writer.get("version") or ""),
        heartbeat_seconds=_num(writer.get("heartbeat_seconds")) or 0.0,
        queues={
            str(name): _queue_from(str(name), _map(raw, f"queues.{name}"))
            for name, raw in _map(top.get("queues"), "queues").items()
        },
        jobs=tuple(
            _job_from(_map(raw, f"jobs[{i}]"), f"jobs[{i}]")
            for i, raw in enumerate(top.get("jobs") or [])
        ),
        gangs=tuple(
            _gang_from(_map(raw, f"gangs[{i}]"), f"gangs[{i}]")
            for i, raw in enumerate(top.get("gangs") or [])
        ),
        omitted_jobs=_counts(omitted.get("jobs")),
        omitted_gangs=_counts(omitted.get("gangs")),
    )


def _cycle_from(c: Mapping[str, Any]) -> Cycle:
    return Cycle(
        result=str(c.get("result", "")),
        message=str(c.get("message", "")),
        duration_seconds=_num(c.get("duration_seconds")) or 0.0,
        jobs=_int(c.get("jobs")) or 0,
        actions=_int(c.get("actions")) or 0,
        gangs=_int(c.get("gangs")) or 0,
        writes=_counts(c.get("writes")),
    )


def _queue_from(name: str, q: Mapping[str, Any]) -> QueueEntry:
    return QueueEntry(
        name=name,
        status=str(q.get("status", "")),
        message=str(q.get("message") or ""),
        headroom_gpus=_num(q.get("headroom_gpus")),
        bound=str(q.get("bound") or ""),
        plugin=str(q.get("plugin") or ""),
        headroom=str(q.get("headroom") or ""),
        limits={str(k): float(v) for k, v in _map(q.get("limits"), "limits").items()},
        inputs={str(k): float(v) for k, v in _map(q.get("inputs"), "inputs").items()},
        free_gpus=_num(q.get("free_gpus")),
        inflight_gpus=_int(q.get("inflight_gpus")) or 0,
        releasing_gpus=_int(q.get("releasing_gpus")) or 0,
        pending_gpus=_int(q.get("pending_gpus")) or 0,
        granted_gpus=_int(q.get("granted_gpus")) or 0,
        reclaimed_gpus=_int(q.get("reclaimed_gpus")) or 0,
        trimmed_gpus=_int(q.get("trimmed_gpus")) or 0,
        jobs=_counts(q.get("jobs")),
        gangs=_counts(q.get("gangs")),
    )


def _resize_from(r: Mapping[str, Any], where: str) -> Resize:
    try:
        state = ResizeState(str(r.get("state")))
    except ValueError:
        raise StatusError(f"{where}.state {r.get('state')!r} unknown") from None
    return Resize(
        state,
        _int(r.get("from")),
        _int(r.get("to")),
        _time(r.get("since"), f"{where}.since"),
        str(r.get("reason") or ""),
        str(r.get("message") or ""),
    )


def _job_from(j: Mapping[str, Any], where: str) -> JobEntry:
    ns, name = _split(j.get("job"), f"{where}.job")
    raw_resize = j.get("resize")
    resize = (
        None
        if raw_resize is None
        else _resize_from(_map(raw_resize, f"{where}.resize"), f"{where}.resize")
    )
    return JobEntry(
        namespace=ns,
        name=name,
        kind=str(j.get("kind") or ""),
        queue=str(j.get("queue") or ""),
        reason=str(j.get("reason") or ""),
        message=str(j.get("message") or ""),
        since=_time(j.get("since"), f"{where}.since"),
        replicas=_int(j.get("replicas")),
        active=_int(j.get("active")),
        target=_int(j.get("target")),
        min_replicas=_int(j.get("min")),
        max_replicas=_int(j.get("max")),
        gpus_per_worker=_int(j.get("gpus_per_worker")),
        gpus=_int(j.get("gpus")),  # None from a status object written before it had one
        priority=_int(j.get("priority")),
        last_resize=_opt_time(j.get("last_resize"), f"{where}.last_resize"),
        restart_cost=str(j.get("restart_cost") or ""),
        notes=tuple(str(n) for n in j.get("notes") or ()),
        resize=resize,
    )


def _gang_from(g: Mapping[str, Any], where: str) -> GangEntry:
    ns, name = _split(g.get("gang"), f"{where}.gang")
    return GangEntry(
        namespace=ns,
        name=name,
        queue=str(g.get("queue") or ""),
        gpus=_int(g.get("gpus")) or 0,
        reason=str(g.get("reason") or ""),
        message=str(g.get("message") or ""),
        since=_time(g.get("waiting_since"), f"{where}.waiting_since"),
        victims=tuple(str(v) for v in g.get("victims") or ()),
        owner=str(g.get("owner") or ""),
        job=str(g.get("job") or ""),
        need_from=str(g.get("need_from") or ""),
        blockers=tuple(str(b) for b in g.get("blockers") or ()),
    )


def from_data(data: Mapping[str, Any] | None, where: str) -> StatusDoc:
    """The document in a ConfigMap's `data`; StatusError names `where` and the problem."""
    text = (data or {}).get(DATA_KEY)
    if not isinstance(text, str):
        raise StatusError(f"{where}: no data.{DATA_KEY}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StatusError(f"{where}: data.{DATA_KEY} is not JSON: {exc}") from None
    try:
        return from_dict(data)
    except (StatusError, TypeError, ValueError) as exc:
        raise StatusError(f"{where}: data.{DATA_KEY}: {exc}") from None
