"""Reading a Prometheus answer into free GPUs per queue, and every way it can be wrong.

Pure: no transport (sources/prometheus.py fetches; this module judges what came back).
A value we cannot trust is never clamped or guessed: the queue, or the whole cycle, holds
with a reason and a message naming the series and what is wrong with it. Deserved and
allocated GPUs are read apart, each with its scrape time (`timestamp()`), so a stale or
absurd part holds its queue on its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from autoscaler.core.model import Plugin, QueueState, VolcanoQueue
from autoscaler.core.options import HeadroomPlugin, PrometheusOptions
from autoscaler.core.reasons import Reason

_DETAIL_CHARS = 200


class PromError(StrEnum):
    """What went wrong with a Prometheus answer: the `kind` label of
    elastic_autoscaler_source_errors_total{source="prometheus"}."""

    # cycle-wide: the whole answer is unusable
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    TLS = "tls"
    AUTH = "auth"
    HTTP_5XX = "http_5xx"
    HTTP_4XX = "http_4xx"
    GARBAGE = "garbage"
    NON_VECTOR = "non_vector"
    CONFIG = "config"
    BAD_QUERY = "bad_query"  # Prometheus refused the query itself (400 bad_data): settings
    INTERNAL = "internal"
    # per queue or series: that queue holds
    MISSING_LABEL = "missing_label"
    NAN = "nan"
    INF = "inf"
    NEGATIVE = "negative"
    DUPLICATE = "duplicate"
    STALE = "stale"
    CLOCK_SKEW = "clock_skew"
    BAD_VALUE = "bad_value"
    TOO_LARGE = "too_large"


@dataclass(frozen=True, slots=True)
class FreeGpuReading:
    """One cycle's answer. `problem` set: the whole answer is unusable and every queue
    holds with it. Otherwise `queues` has one state per queue seen, each either usable
    (`free_gpus` set) or holding with its own problem; a queue absent from `queues` is
    unknown. `errors` lists one kind per error met, for the source_errors_total counter."""

    queues: Mapping[str, QueueState] = field(default_factory=dict)
    problem: Reason | None = None
    message: str = ""
    duration_seconds: float = 0.0
    errors: tuple[PromError, ...] = ()
    # how the headroom of these queues is to be computed (settings.headroom_plugin, `auto`
    # resolved from the answer); None: not known (the answer failed)
    plugin: Plugin | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def failed_reading(reason: Reason, kind: PromError, message: str) -> FreeGpuReading:
    return FreeGpuReading(queues={}, problem=reason, message=message, errors=(kind,))


# ---- parsing (pure) -------------------------------------------------------------------


class _Garbage(ValueError):
    """The answer is not a Prometheus query response at all."""


def parse_query_result(
    body_or_result: bytes | str | Mapping[str, Any] | Sequence[Any],
    settings: PrometheusOptions,
    now: datetime,
) -> FreeGpuReading:
    """Validate a Prometheus instant-query answer into free GPUs per queue.

    Accepts the raw body (bytes/str), the decoded envelope
    (`{"status": "success", "data": {"resultType": ..., "result": ...}}`), or the bare
    `data.result` list that `PrometheusConnect.custom_query` returns (its shape tells a
    vector, a list of samples, from a scalar or string, a `[ts, "value"]` pair).

    Each sample: queue = its `settings.queue_label` label, free GPUs = value /
    `settings.metric_unit_divisor`. A bad sample holds its queue, never reads as 0: NaN,
    +-Inf, negative, not a number, more than one series for the queue, or a timestamp
    older than `max_metric_age_seconds` before `now` (or too far ahead of it). A sample
    without the queue label is ignored and counted; when no sample has it, the whole
    answer is invalid (the query or `queue_label` is wrong).
    """
    try:
        samples = _samples(body_or_result, settings)
    except _Failed as exc:
        return exc.reading
    if not samples:
        return FreeGpuReading(queues={}, message="empty result: the query returned no series")

    label = settings.queue_label
    by_queue: dict[str, list[_Series]] = {}
    unlabelled: list[dict[str, str]] = []
    for metric, value, ts in samples:
        queue = metric.get(label)
        if not queue:
            unlabelled.append(metric)
        else:
            by_queue.setdefault(queue, []).append((metric, value, ts))

    errors: list[PromError] = [PromError.MISSING_LABEL] * len(unlabelled)
    if not by_queue:
        return FreeGpuReading(
            queues={},
            problem=Reason.METRICS_INVALID,
            message=(
                f"no series has the queue label {label!r} ({len(unlabelled)} series, "
                f"e.g. {_labels(unlabelled[0])}): fix queue_label or the query"
            ),
            errors=tuple(errors),
        )

    if not settings.free_gpus_query:
        queues, part_errors = _parts_by_queue(by_queue, settings, now.timestamp())
        plugin = resolve_plugin(settings, by_queue)
    else:
        queues, part_errors = _given_by_queue(by_queue, settings, now.timestamp())
        plugin = Plugin.GIVEN
    return FreeGpuReading(
        queues=queues,
        message=_unlabelled_note(unlabelled, label),
        errors=(*errors, *part_errors),
        plugin=plugin,
    )


class _Failed(Exception):
    """The whole answer is unusable: `reading` says why."""

    def __init__(self, reading: FreeGpuReading) -> None:
        super().__init__(reading.message)
        self.reading = reading


def _samples(
    body_or_result: bytes | str | Mapping[str, Any] | Sequence[Any], settings: PrometheusOptions
) -> list[_Series]:
    """The answer's samples; raises _Failed when it is no instant vector of samples."""
    try:
        result = _vector_result(body_or_result)
    except _Garbage as exc:
        raise _Failed(
            failed_reading(Reason.METRICS_INVALID, PromError.GARBAGE, f"garbage answer: {exc}")
        ) from exc
    except _NonVector as exc:
        raise _Failed(
            failed_reading(
                Reason.METRICS_INVALID,
                PromError.NON_VECTOR,
                f"query returned a {exc} result, not an instant vector by {settings.queue_label}",
            )
        ) from exc
    try:
        return [_sample(item) for item in result]
    except _Garbage as exc:
        raise _Failed(
            failed_reading(Reason.METRICS_INVALID, PromError.GARBAGE, f"garbage sample: {exc}")
        ) from exc


def _given_by_queue(
    by_queue: Mapping[str, list[_Series]], settings: PrometheusOptions, now: float
) -> tuple[dict[str, QueueState], list[PromError]]:
    """free_gpus_query: each queue's one sample is its free GPUs, or the queue holds."""
    queues: dict[str, QueueState] = {}
    errors: list[PromError] = []
    for queue in sorted(by_queue):
        problem = _sample_problem(by_queue[queue], settings, now)
        if problem is None:
            value = by_queue[queue][0][1]
            assert value is not None  # _sample_problem rejects a missing value
            queues[queue] = QueueState(name=queue, free_gpus=value / settings.metric_unit_divisor)
        else:
            reason, kind, what = problem
            errors.append(kind)
            queues[queue] = QueueState(
                name=queue, free_gpus=None, problem=reason, message=f"queue {queue}: {what}"
            )
    return queues, errors


def resolve_plugin(
    settings: PrometheusOptions, by_queue: Mapping[str, list[_Series]] | None
) -> Plugin:
    """The plugin the headroom follows: the setting, or for `auto` what the answer shows
    (the capacity plugin alone exports real-capacity series, even for idle queues)."""
    chosen = settings.headroom_plugin
    if settings.free_gpus_query or chosen is HeadroomPlugin.DESERVED:
        return Plugin.GIVEN
    if chosen is HeadroomPlugin.PROPORTION:
        return Plugin.PROPORTION
    if chosen is HeadroomPlugin.CAPACITY:
        return Plugin.CAPACITY
    for series in (by_queue or {}).values():
        if any(m.get(PART_LABEL) == _REAL_CAPACITY for m, _, _ in series):
            return Plugin.CAPACITY
    return Plugin.PROPORTION


def _unlabelled_note(unlabelled: list[dict[str, str]], label: str) -> str:
    if not unlabelled:
        return ""
    return (
        f"ignored {len(unlabelled)} series without the queue label {label!r} "
        f"(e.g. {_labels(unlabelled[0])})"
    )


_Series = tuple[dict[str, str], float | None, float]  # labels, value, timestamp


def _sample_problem(
    series: list[_Series], settings: PrometheusOptions, now_ts: float
) -> tuple[Reason, PromError, str] | None:
    """Why one queue's series cannot be read as its free GPUs (reason, kind, message)."""
    if len(series) > 1:
        sets = "; ".join(_labels(m) for m, _, _ in series[:3])
        return (
            Reason.METRICS_INVALID,
            PromError.DUPLICATE,
            f"{len(series)} series for one queue ({sets}): the query must return one "
            f"series per queue, e.g. aggregate with sum by ({settings.queue_label})",
        )
    _, value, ts = series[0]
    if value is None:
        return Reason.METRICS_INVALID, PromError.BAD_VALUE, "sample value is not a number"
    if math.isnan(value):
        return Reason.METRICS_INVALID, PromError.NAN, "sample value is NaN"
    if math.isinf(value):
        return Reason.METRICS_INVALID, PromError.INF, f"sample value is {value:+}"
    if value < 0:
        return (
            Reason.METRICS_INVALID,
            PromError.NEGATIVE,
            f"sample value is negative ({value:g}): free capacity cannot be below 0",
        )
    max_age = settings.max_metric_age_seconds
    if now_ts - ts > max_age:
        return (
            Reason.METRICS_STALE,
            PromError.STALE,
            f"sample is {now_ts - ts:.0f}s old (max_metric_age_seconds={max_age:g})",
        )
    if ts - now_ts > settings.clock_skew_seconds:
        return (
            Reason.CLOCK_SKEW,
            PromError.CLOCK_SKEW,
            f"sample timestamp is {ts - now_ts:.0f}s ahead of our clock "
            f"(clock_skew_seconds={settings.clock_skew_seconds:g}): Prometheus and this "
            "daemon disagree on the time",
        )
    return None


PART_LABEL = "elastic_autoscaler_part"
_DESERVED, _ALLOCATED, _REQUEST = "deserved", "allocated", "request"
_INQUEUE, _REAL_CAPACITY = "inqueue", "real_capacity"
_PARTS = (_DESERVED, _ALLOCATED, _REQUEST, _INQUEUE, _REAL_CAPACITY)
# the parts whose scrape time is checked: what the headroom stands on
_TIMED = (_DESERVED, _ALLOCATED, _REQUEST)
MAX_PLAUSIBLE_GPUS = 1_000_000  # a part above this many GPUs is garbage, not a cluster
# What the capacity plugin exports as the real capacity of a queue with no capability
# anywhere above it under enableHierarchy (root, a top-level queue, default): the int64
# maximum, in the series' own units. Unbounded, not garbage: read as no real capacity
# series (the headroom then computes it from the cluster, headroom.py)
INT64_CEILING = float(2**63 - 1)


def _part_series(settings: PrometheusOptions) -> dict[str, str]:
    return {
        _DESERVED: settings.deserved_gpus_series,
        _ALLOCATED: settings.allocated_gpus_series,
        _REQUEST: settings.request_gpus_series,
        _INQUEUE: settings.inqueue_gpus_series,
        _REAL_CAPACITY: settings.real_capacity_gpus_series,
    }


def free_gpus_query(settings: PrometheusOptions) -> str:
    """The one instant query sent each cycle.

    With `free_gpus_query` unset: Volcano's per-queue parts as they are (deserved,
    allocated, request, inqueue, real capacity; no clamping, which would hide a negative or
    absurd part), and the scrape time of the oldest series behind the parts the headroom
    stands on, all in one answer told apart by a `PART_LABEL` label, so the daemon checks
    every part and the age of what was scraped, not of the answer."""
    if settings.free_gpus_query:
        return settings.free_gpus_query
    q = settings.queue_label
    parts = []
    for part, series in _part_series(settings).items():
        parts.append(f'label_replace(sum by ({q}) ({series}), "{PART_LABEL}", "{part}", "", "")')
        if part in _TIMED:
            parts.append(
                f"label_replace(min by ({q}) (timestamp({series})), "
                f'"{PART_LABEL}", "{part}_time", "", "")'
            )
    return " or ".join(parts)


def _parts_by_queue(
    by_queue: Mapping[str, list[_Series]], settings: PrometheusOptions, now_ts: float
) -> tuple[dict[str, QueueState], list[PromError]]:
    """Each queue's parts, each checked on its own. A queue with neither an allocated nor
    a request series (nor, for headroom_plugin=deserved, a deserved one) is unknown."""
    queues: dict[str, QueueState] = {}
    errors: list[PromError] = []
    divisor = settings.metric_unit_divisor
    legacy = settings.headroom_plugin is HeadroomPlugin.DESERVED
    for queue in sorted(by_queue):
        got: dict[str, list[_Series]] = {}
        for series in by_queue[queue]:
            got.setdefault(series[0].get(PART_LABEL, ""), []).append(series)
        if legacy and _DESERVED not in got:
            continue  # no deserved series: the queue is unknown (HoldMetricsMissing)
        if not legacy and _ALLOCATED not in got and _REQUEST not in got:
            continue  # no jobs the scheduler knows of, or no series: unknown
        problem = None
        values: dict[str, float | None] = {}
        for part in _PARTS:
            if part not in got:
                values[part] = None
                continue
            if part == _REAL_CAPACITY and _unbounded(got[part]):
                values[part] = None
                continue
            problem = _part_problem(part, got[part], settings, now_ts)
            if problem is not None:
                break
            values[part] = (got[part][0][1] or 0.0) / divisor
        if problem is None:
            problem = _age_problem(got, settings, now_ts)
        if problem is not None:
            reason, kind, what = problem
            errors.append(kind)
            queues[queue] = QueueState(
                name=queue, free_gpus=None, problem=reason, message=f"queue {queue}: {what}"
            )
            continue
        allocated = values[_ALLOCATED] or 0.0
        deserved = values[_DESERVED]
        if legacy:
            # over-use (allocated above deserved) is Volcano's to resolve: nothing is free
            queues[queue] = QueueState(
                name=queue, free_gpus=max(0.0, (deserved or 0.0) - allocated)
            )
            continue
        queues[queue] = QueueState(
            name=queue,
            free_gpus=None,
            volcano=VolcanoQueue(
                name=queue,
                allocated=allocated,
                request=values[_REQUEST] or 0.0,
                inqueue=values[_INQUEUE] or 0.0,
                real_capacity=values[_REAL_CAPACITY],
                deserved=deserved,
            ),
        )
    return queues, errors


def _unbounded(series: list[_Series]) -> bool:
    """A real capacity at the int64 ceiling (one scheduler's series; a sum of two is
    garbage): unbounded, as the capacity plugin says of a queue with no capability above
    it under hierarchy."""
    value = series[0][1]
    return (
        len(series) == 1
        and value is not None
        and math.isfinite(value)
        and abs(value - INT64_CEILING) <= INT64_CEILING * 1e-9
    )


def _part_problem(
    part: str, series: list[_Series], settings: PrometheusOptions, now_ts: float
) -> tuple[Reason, PromError, str] | None:
    what = f"{part} GPUs ({_part_series(settings)[part]})"
    problem = _sample_problem(series, settings, now_ts)
    if problem is not None:
        reason, kind, text = problem
        return reason, kind, f"{what}: {text}"
    value = series[0][1] or 0.0
    if value / settings.metric_unit_divisor > MAX_PLAUSIBLE_GPUS:
        return (
            Reason.METRICS_INVALID,
            PromError.BAD_VALUE,
            f"{what}: {value:g} is more than {MAX_PLAUSIBLE_GPUS} GPUs "
            f"(metric_unit_divisor={settings.metric_unit_divisor:g})",
        )
    return None


def _age_problem(
    got: Mapping[str, list[_Series]], settings: PrometheusOptions, now_ts: float
) -> tuple[Reason, PromError, str] | None:
    """The scrape time of the oldest series behind each part against `now`."""
    for part in _TIMED:
        times = got.get(f"{part}_time")
        if not times:
            continue
        scraped = times[0][1]
        if scraped is None or not math.isfinite(scraped):
            return (
                Reason.METRICS_INVALID,
                PromError.BAD_VALUE,
                f"{part} GPUs: scrape time {scraped!r} is not a time",
            )
        age = now_ts - scraped
        if age > settings.max_metric_age_seconds:
            return (
                Reason.METRICS_STALE,
                PromError.STALE,
                f"{part} GPUs ({_part_series(settings)[part]}) were last scraped "
                f"{age:.0f}s ago (max_metric_age_seconds="
                f"{settings.max_metric_age_seconds:g}): the exporter or its scrape is "
                "down, Prometheus still serves the last value",
            )
        if -age > settings.clock_skew_seconds:
            return (
                Reason.CLOCK_SKEW,
                PromError.CLOCK_SKEW,
                f"{part} GPUs were scraped {-age:.0f}s ahead of our clock "
                f"(clock_skew_seconds={settings.clock_skew_seconds:g})",
            )
    return None


class _NonVector(ValueError):
    """A well-formed answer of the wrong type; str() is the result type."""


def _vector_result(answer: bytes | str | Mapping[str, Any] | Sequence[Any]) -> list[Any]:
    if isinstance(answer, bytes | str):
        try:
            answer = json.loads(answer)
        except ValueError as exc:  # includes UnicodeDecodeError
            raise _Garbage(f"not JSON ({exc.__class__.__name__}: {exc})"[:_DETAIL_CHARS]) from None
    if isinstance(answer, Mapping):
        status = answer.get("status")
        if status != "success":
            detail = prometheus_error(answer) or f"status {status!r}"
            raise _Garbage(f"not a success: {detail}")
        data = answer.get("data")
        if not isinstance(data, Mapping):
            raise _Garbage("no data object")
        result_type = data.get("resultType")
        result = data.get("result")
        if result_type != "vector":
            if result_type in ("scalar", "string", "matrix"):
                raise _NonVector(result_type)
            raise _Garbage(f"unknown resultType {result_type!r}")
        if not isinstance(result, list):
            raise _Garbage("data.result is not a list")
        return result
    if isinstance(answer, Sequence):
        # custom_query's bare data.result: a scalar/string is one [ts, "v"] pair, a matrix
        # is samples with "values", a vector samples with "value".
        items = list(answer)
        if len(items) == 2 and isinstance(items[0], int | float) and isinstance(items[1], str):
            raise _NonVector("scalar or string")
        if items and all(isinstance(i, Mapping) and "values" in i for i in items):
            raise _NonVector("matrix")
        return items
    raise _Garbage(f"unexpected {type(answer).__name__}")


def _sample(item: Any) -> _Series:
    if not isinstance(item, Mapping):
        raise _Garbage(f"sample is a {type(item).__name__}, not an object")
    metric = item.get("metric")
    pair = item.get("value")
    if not isinstance(metric, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metric.items()
    ):
        raise _Garbage("sample has no metric label set")
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        raise _Garbage(f"sample {_labels(metric)} has no [timestamp, value] pair")
    ts, raw = pair
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise _Garbage(f"sample {_labels(metric)} has a bad timestamp {ts!r}"[:_DETAIL_CHARS])
    return dict(metric), _number(raw), float(ts)


def _number(raw: Any) -> float | None:
    """Prometheus sends values as strings ("12", "NaN", "+Inf"); a JSON number is odd but
    unambiguous; anything else (None if not a number) holds that queue."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def _labels(metric: Mapping[str, str]) -> str:
    inner = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()))
    if len(inner) > _DETAIL_CHARS:  # label values come from outside: keep messages short
        inner = inner[:_DETAIL_CHARS] + "..."
    return "{" + inner + "}"


def prometheus_error(body: Any) -> str:
    """`errorType: error` of a Prometheus error envelope, if that is what `body` is."""
    if isinstance(body, bytes | str):
        try:
            body = json.loads(body)
        except ValueError:
            return ""
    if not isinstance(body, Mapping) or body.get("status") != "error":
        return ""
    text = f"{body.get('errorType', '')}: {body.get('error', '')}".strip(": ")
    return text[:_DETAIL_CHARS]
