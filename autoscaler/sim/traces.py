"""Trace readers: our CSV format, Microsoft Philly (as Pollux published it) and the
Pollux workloads. Each returns a `Workload`; nothing here reads the network.

Our CSV format (header required; column order free; names are case-insensitive and the
aliases in brackets are accepted too):

    submit     seconds from the start of the trace (float) [submit_time]   required
    duration   seconds the job runs at its requested size                  required
    gpus       GPUs the user asked for (requested size) [num_gpus]         required
    name       job name, unique (default: job-<row>)                       optional
    queue      Volcano queue (default: "default")                          optional
    gpus_per_worker   GPUs of one worker (default 1); gpus must be a multiple
    min_workers, max_workers   elastic range in workers [min, max, min_replicas,
               max_replicas]; either may be left out or empty, the --elastic-range rule
               then gives it
    speedup    linear | amdahl:P for this job (default: --speedup)
    priority   the job's priority, a whole number (default 0)              optional
    application   the model it trains, for --restart-cost profile [model]  optional

Other columns are ignored, and the workload's notes say which. The philly and Pollux
readers take a `priority` column too; without one every job has priority 0.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import TypeVar

from .nodes import parse_labels, parse_tolerations, worker_shape
from .profiles import AppProfile, load_profiles
from .workload import (
    ElasticRule,
    JobSpec,
    SpecError,
    Speedup,
    Workload,
    amdahl,
    linear,
    parse_speedup_kind,
)

FORMATS = ("auto", "csv", "philly", "pollux")
DEFAULT_AMDAHL = 0.95
BUNDLED = "small.csv"


@dataclass(frozen=True)
class TraceOptions:
    format: str = "auto"
    speedup: str = "auto"  # linear | amdahl:P | measured | auto
    elastic: ElasticRule = field(default_factory=ElasticRule)
    seed: int = 0
    max_jobs: int | None = None
    philly_slice: tuple[int, int] | None = None
    queues: tuple[str, ...] = ()  # keep only these queues (empty: all)
    profiles_dir: Path | None = None
    top_gpus: int = 1024  # speedup tables are built up to this many GPUs


# our CSV format: canonical column -> the names accepted for it
CSV_COLUMNS = {
    "submit": ("submit", "submit_time"),
    "duration": ("duration",),
    "gpus": ("gpus", "num_gpus"),
    "name": ("name",),
    "queue": ("queue",),
    "gpus_per_worker": ("gpus_per_worker",),
    "min_workers": ("min_workers", "min", "min_replicas"),
    "max_workers": ("max_workers", "max", "max_replicas"),
    "speedup": ("speedup",),
    "priority": ("priority",),
    "application": ("application", "model"),
    # a worker's pod, for a cluster of node pools (simulate --nodes; sim/nodes.py)
    "cpus_per_worker": ("cpus_per_worker", "cpus"),
    "node_selector": ("node_selector", "nodeselector"),
    "tolerations": ("tolerations",),
}
_CSV_ALIAS = {alias: col for col, aliases in CSV_COLUMNS.items() for alias in aliases}


def detect_format(header: Iterable[str]) -> str:
    cols = {(h or "").strip().lower() for h in header}
    if {"application", "num_replicas", "batch_size", "time"} <= cols:
        return "pollux"
    if {"timestamp", "duration", "num_gpus"} <= cols:
        return "philly"
    if {"submit", "duration", "gpus"} <= {_CSV_ALIAS.get(c, c) for c in cols}:
        return "csv"
    raise SpecError(
        "unknown trace format: expected columns submit,duration,gpus (csv), "
        "timestamp,duration,num_gpus,cluster (philly) or name,time,application,"
        f"num_replicas,batch_size (pollux); got {','.join(sorted(cols)) or 'nothing'}"
    )


def read_trace(path: Path | None, opts: TraceOptions) -> Workload:
    """The workload in `path`, or the bundled small workload when `path` is None."""

    if path is None:
        text = resources.files("autoscaler.sim").joinpath("data", BUNDLED).read_text("utf-8")
        source = f"bundled:{BUNDLED}"
    else:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise SpecError(f"trace {path}: cannot read: {reason}") from None
        source = str(path)
    reader = csv.DictReader(io.StringIO(text))
    # header names are matched case-insensitively, whatever the format
    reader.fieldnames = [(h or "").strip().lower() for h in reader.fieldnames or ()]
    rows = list(reader)
    fmt = opts.format if opts.format != "auto" else detect_format(reader.fieldnames)
    if not rows:
        raise SpecError(f"trace {source}: no jobs")
    try:
        if fmt == "pollux":
            profiles_dir = opts.profiles_dir or _default_profiles(path)
            workload = _pollux(rows, opts, load_profiles(profiles_dir), source)
        elif fmt == "philly":
            workload = _philly(rows, opts, source)
        elif fmt == "csv":
            workload = _csv(rows, opts, source)
        else:
            raise SpecError(f"unknown --format {fmt!r}: use {', '.join(FORMATS)}")
    except (KeyError, ValueError) as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError(f"trace {source} ({fmt}): bad row: {exc!r}") from None
    if not workload.jobs:
        raise SpecError(f"trace {source}: no jobs left after filtering")
    return workload


def _default_profiles(path: Path | None) -> Path:
    if path is not None:
        for cand in (
            path.parent / "pollux-app-profiles",
            path.parent.parent / "pollux-app-profiles",
        ):
            if cand.is_dir():
                return cand
    raise SpecError(
        "pollux trace: application profiles not found next to the trace; "
        "pass --profiles DIR (the pollux-app-profiles directory)"
    )


def _speedup(kind: str, requested_gpus: int, top: int, measured: Speedup | None = None) -> Speedup:
    name, p = parse_speedup_kind(kind)
    if name == "linear":
        return linear(requested_gpus, top)
    if name == "amdahl":
        return amdahl(requested_gpus, top, p)
    if name == "measured":
        if measured is None:
            raise SpecError("--speedup measured needs a pollux trace (application profiles)")
        return measured
    return measured if measured is not None else amdahl(requested_gpus, top, DEFAULT_AMDAHL)


def _range(rule: ElasticRule, requested: int, speedup: Speedup, gpw: int) -> tuple[int, int]:
    """The rule's range, with max cut to the fastest size in it (never below requested):
    nobody declares workers that slow the job down."""

    lo, hi = rule.range(requested)
    best = max(range(requested, hi + 1), key=lambda w: (speedup.rate(w * gpw), -w))
    return lo, best


_T = TypeVar("_T")


def _limit(items: list[_T], opts: TraceOptions) -> list[_T]:
    """The --philly-slice, then --max-jobs, of trace rows or jobs in submit order."""
    if opts.philly_slice is not None:
        start, end = opts.philly_slice
        items = items[start:end]
    if opts.max_jobs is not None:
        items = items[: opts.max_jobs]
    return items


def _csv(rows: list[dict[str, str]], opts: TraceOptions, source: str) -> Workload:
    header = list(rows[0]) if rows else []
    names: dict[str, str] = {}  # canonical column -> the header's name for it
    ignored = []
    for h in header:
        col = _CSV_ALIAS.get(h)
        if col is None or col in names:
            ignored.append(str(h))
        else:
            names[col] = h
    jobs = []
    for i, raw in enumerate(rows):
        row = i + 2  # the file's line: the header is line 1

        def cell(col: str, raw: dict[str, str] = raw) -> str:
            return (raw.get(names[col]) or "").strip() if col in names else ""

        def number(col: str, kind: type[float] = float, row: int = row) -> float:
            text = cell(col)
            try:
                value = float(kind(text))
            except ValueError:
                what = "a whole number" if kind is int else "a number"
                raise SpecError(
                    f"trace {source} row {row}, column {names.get(col, col)}: "
                    f"{text!r} is not {what}"
                ) from None
            if not math.isfinite(value):
                raise SpecError(
                    f"trace {source} row {row}, column {names.get(col, col)}: "
                    f"{text!r} is not finite"
                )
            return value

        queue = cell("queue") or "default"
        if opts.queues and queue not in opts.queues:
            continue
        gpus = int(number("gpus", int))
        gpw = int(number("gpus_per_worker", int)) if cell("gpus_per_worker") else 1
        if gpus < 1 or gpw < 1 or gpus % gpw:
            raise SpecError(
                f"trace {source} row {row}: gpus={gpus} is not a positive "
                f"multiple of gpus_per_worker={gpw}"
            )
        requested = gpus // gpw
        top = max(opts.top_gpus, gpus)
        sp = _speedup(cell("speedup") or opts.speedup, gpus, top)
        lo, hi = _range(opts.elastic, requested, sp, gpw)
        if cell("min_workers"):
            lo = int(number("min_workers", int))
        if cell("max_workers"):
            hi = int(number("max_workers", int))
        if not 1 <= lo <= requested <= hi:
            raise SpecError(
                f"trace {source} row {row}: need 1 <= min_workers ({lo}) <= "
                f"gpus/gpus_per_worker ({requested}) <= max_workers ({hi})"
            )
        submit, duration = number("submit"), number("duration")
        if submit < 0 or duration <= 0:
            raise SpecError(
                f"trace {source} row {row}: need submit >= 0 and duration > 0 "
                f"(got {submit:g}, {duration:g})"
            )
        priority = int(number("priority", int)) if cell("priority") else 0
        where = f"trace {source} row {row}"
        cpus = number("cpus_per_worker") if cell("cpus_per_worker") else 0.0
        if cpus < 0:
            raise SpecError(f"{where}, column cpus_per_worker: {cpus:g} < 0")
        shape = worker_shape(
            gpw,
            cpus,
            parse_labels(cell("node_selector"), f"{where}, column node_selector"),
            parse_tolerations(cell("tolerations"), f"{where}, column tolerations"),
        )
        jobs.append(
            JobSpec(
                cell("name") or f"job-{i}",
                submit,
                duration,
                requested,
                lo,
                hi,
                gpw,
                queue,
                sp,
                cell("application"),
                priority,
                shape=shape,
            )
        )
    jobs.sort(key=lambda j: (j.submit, j.name))
    notes = (f"ignored column(s): {', '.join(ignored)}",) if ignored else ()
    return Workload(tuple(_limit(jobs, opts)), source, notes)


def _philly(rows: list[dict[str, str]], opts: TraceOptions, source: str) -> Workload:
    """Philly: `cluster` is the queue; jobs sorted by submit time, then sliced."""

    parsed = []
    for row, r in enumerate(rows, start=2):  # the file's line: the header is line 1
        queue = r["cluster"].strip() or "default"
        if opts.queues and queue not in opts.queues:
            continue
        ts = datetime.fromisoformat(r["timestamp"]).timestamp()
        parsed.append((ts, r, queue, _priority(r.get("priority"), source, row)))
    parsed.sort(key=lambda x: (x[0], x[1]["cluster"], float(x[1]["duration"])))
    if opts.philly_slice is not None:
        start, end = opts.philly_slice
        parsed = parsed[start:end]
    if opts.max_jobs is not None:
        parsed = parsed[: opts.max_jobs]
    if not parsed:
        return Workload((), source)
    t0 = parsed[0][0]
    jobs = []
    for i, (ts, r, queue, priority) in enumerate(parsed):
        gpus = int(float(r["num_gpus"]))
        duration = float(r["duration"])
        if gpus < 1 or duration <= 0:
            continue
        top = max(opts.top_gpus, gpus)
        sp = _speedup(opts.speedup, gpus, top)
        lo, hi = _range(opts.elastic, gpus, sp, 1)
        jobs.append(
            JobSpec(f"philly-{i}", ts - t0, duration, gpus, lo, hi, 1, queue, sp, "", priority)
        )
    return Workload(tuple(jobs), source)


def _pollux(
    rows: list[dict[str, str]], opts: TraceOptions, profiles: dict[str, AppProfile], source: str
) -> Workload:
    """Pollux workloads: work = iterations to finish at the job's batch size x step time
    at its requested GPUs, from the application's profile (see profiles.py)."""

    # (file line, row) in submit order: an error names the line
    numbered = sorted(enumerate(rows, start=2), key=lambda x: (float(x[1]["time"]), x[1]["name"]))
    jobs = []
    for row, r in _limit(numbered, opts):
        app = r["application"]
        if app not in profiles:
            raise SpecError(f"trace {source}: no profile for application {app!r}")
        prof = profiles[app]
        gpus, bsz = int(r["num_replicas"]), int(r["batch_size"])
        queue = (r.get("queue") or "").strip() or "default"
        priority = _priority(r.get("priority"), source, row, r["name"])
        if opts.queues and queue not in opts.queues:
            continue
        top = max(opts.top_gpus, gpus)
        measured = prof.speedup(gpus, bsz, min(top, 4 * prof.useful_gpus(bsz)))
        sp = _speedup(opts.speedup, gpus, top, measured)
        lo, hi = _range(opts.elastic, gpus, sp, 1)
        jobs.append(
            JobSpec(
                r["name"],
                float(r["time"]),
                prof.duration(gpus, bsz),
                gpus,
                lo,
                hi,
                1,
                queue,
                sp,
                app,
                priority,
            )
        )
    return Workload(tuple(jobs), source, (f"work from {len(profiles)} application profiles",))


def _priority(text: str | None, source: str, row: int, name: str = "") -> int:
    """A job's priority from the trace's priority column; 0 without one or when empty."""
    if text is None or not text.strip():
        return 0
    try:
        return int(text.strip())
    except ValueError:
        job = f" (job {name})" if name else ""
        raise SpecError(
            f"trace {source} row {row}{job}, column priority: {text.strip()!r} is not a "
            "whole number"
        ) from None
