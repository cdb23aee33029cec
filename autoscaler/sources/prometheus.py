"""Free GPUs per Volcano queue, from one Prometheus instant query per cycle.

`PrometheusSource.fetch(now)` never raises (except `CancelledError`): every failure comes
back as a `FreeGpuReading` whose `problem` says why, so the planner holds instead of
reading a missing answer as zero GPUs.

The client is prometheus-api-client's `PrometheusConnect`. It is synchronous (`requests`),
so each attempt runs in a worker thread under one asyncio deadline, with the client's own
retries off; we retry ourselves, with backoff, only what a retry can fix (connection
errors, timeouts, 5xx, 408/429). `custom_query` returns only `data.result`, which cannot
tell a vector from a scalar or a string, so a response hook on the client's session keeps
the whole HTTP answer, and `parse_query_result` validates the full envelope
(`status`, `resultType`) itself.

Staleness. The samples of an instant query carry the *evaluation* time, not the time the
series was scraped, so the age check below (`max_metric_age_seconds`, measured against the
caller's `now`) catches an answer that is old as a whole: a caching query frontend, a
federated or remote-read Prometheus lagging behind, a server whose clock is wrong (a
timestamp ahead of `now` by more than `clock_skew_seconds`, the same tolerance as for our
annotations, holds as `HoldClockSkew`).
The age of the underlying series is Prometheus's job: a series not scraped within the
lookback delta (5 min by default), or ended by a staleness marker when its target
disappears or fails a scrape, is absent from the answer, so its queue is unknown and
holds (`HoldMetricsMissing`, decided by the planner), never read as zero. We do not send
`time=now` with the query: evaluating at our own clock would make the age check vacuous.
A stricter check of the raw series' age belongs in the query itself, e.g.
`... and on (queue_name) (time() - timestamp(volcano_queue_allocated_scalar_resources) < 120)`.

Secrets. The bearer token (re-read from its file every fetch, so rotation works) and the
basic-auth password never appear in a message: our own text never holds them, URLs are
shown without user info, and text that comes from outside (answer bodies, error strings,
label values: a proxy may echo the credentials it rejected) is scrubbed of them.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from autoscaler.model import QueueState, Reason
from autoscaler.settings import Settings

# Error kinds: the `kind` label of source_errors_total{source="prometheus"}.
# Cycle-wide (the whole answer is unusable):
KIND_TIMEOUT = "timeout"
KIND_CONNECTION = "connection"
KIND_TLS = "tls"
KIND_AUTH = "auth"
KIND_HTTP_5XX = "http_5xx"
KIND_HTTP_4XX = "http_4xx"
KIND_GARBAGE = "garbage"
KIND_NON_VECTOR = "non_vector"
KIND_CONFIG = "config"
KIND_INTERNAL = "internal"
# Per series or per queue (the rest of the answer stays usable):
KIND_MISSING_LABEL = "missing_label"
KIND_NAN = "nan"
KIND_INF = "inf"
KIND_NEGATIVE = "negative"
KIND_DUPLICATE = "duplicate"
KIND_STALE = "stale"
KIND_CLOCK_SKEW = "clock_skew"
KIND_BAD_VALUE = "bad_value"
KIND_TOO_LARGE = "too_large"

ERROR_KINDS = (
    KIND_TIMEOUT,
    KIND_CONNECTION,
    KIND_TLS,
    KIND_AUTH,
    KIND_HTTP_5XX,
    KIND_HTTP_4XX,
    KIND_GARBAGE,
    KIND_NON_VECTOR,
    KIND_CONFIG,
    KIND_INTERNAL,
    KIND_MISSING_LABEL,
    KIND_NAN,
    KIND_INF,
    KIND_NEGATIVE,
    KIND_DUPLICATE,
    KIND_STALE,
    KIND_CLOCK_SKEW,
    KIND_BAD_VALUE,
    KIND_TOO_LARGE,
)  # every value `FreeGpuReading.errors` can hold, to pre-create the counter's series

_RETRYABLE_STATUS = frozenset({408, 429})
_BACKOFF_SECONDS = 0.2
_DETAIL_CHARS = 200


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
    errors: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.problem is None


def _failed(reason: Reason, kind: str, message: str) -> FreeGpuReading:
    return FreeGpuReading(queues={}, problem=reason, message=message, errors=(kind,))


# ---- parsing (pure) -------------------------------------------------------------------


class _Garbage(ValueError):
    """The answer is not a Prometheus query response at all."""


def parse_query_result(
    body_or_result: bytes | str | Mapping[str, Any] | Sequence[Any],
    settings: Settings,
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
        result = _vector_result(body_or_result)
    except _Garbage as exc:
        return _failed(Reason.METRICS_INVALID, KIND_GARBAGE, f"garbage answer: {exc}")
    except _NonVector as exc:
        return _failed(
            Reason.METRICS_INVALID,
            KIND_NON_VECTOR,
            f"query returned a {exc} result, not an instant vector by {settings.queue_label}",
        )
    if not result:
        return FreeGpuReading(queues={}, message="empty result: the query returned no series")
    try:
        samples = [_sample(item) for item in result]
    except _Garbage as exc:
        return _failed(Reason.METRICS_INVALID, KIND_GARBAGE, f"garbage sample: {exc}")

    label = settings.queue_label
    by_queue: dict[str, list[_Series]] = {}
    unlabelled: list[dict[str, str]] = []
    for metric, value, ts in samples:
        queue = metric.get(label)
        if not queue:
            unlabelled.append(metric)
        else:
            by_queue.setdefault(queue, []).append((metric, value, ts))

    errors: list[str] = [KIND_MISSING_LABEL] * len(unlabelled)
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
        errors.extend(part_errors)
        return FreeGpuReading(
            queues=queues, message=_unlabelled_note(unlabelled, label), errors=tuple(errors)
        )

    queues: dict[str, QueueState] = {}
    for queue in sorted(by_queue):
        problem = _sample_problem(by_queue[queue], settings, now.timestamp())
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

    return FreeGpuReading(
        queues=queues, message=_unlabelled_note(unlabelled, label), errors=tuple(errors)
    )


def _unlabelled_note(unlabelled: list[dict[str, str]], label: str) -> str:
    if not unlabelled:
        return ""
    return (
        f"ignored {len(unlabelled)} series without the queue label {label!r} "
        f"(e.g. {_labels(unlabelled[0])})"
    )


_Series = tuple[dict[str, str], float | None, float]  # labels, value, timestamp


def _sample_problem(
    series: list[_Series], settings: Settings, now_ts: float
) -> tuple[Reason, str, str] | None:
    """Why one queue's series cannot be read as its free GPUs (reason, kind, message)."""
    if len(series) > 1:
        sets = "; ".join(_labels(m) for m, _, _ in series[:3])
        return (
            Reason.METRICS_INVALID,
            KIND_DUPLICATE,
            f"{len(series)} series for one queue ({sets}): the query must return one "
            f"series per queue, e.g. aggregate with sum by ({settings.queue_label})",
        )
    _, value, ts = series[0]
    if value is None:
        return Reason.METRICS_INVALID, KIND_BAD_VALUE, "sample value is not a number"
    if math.isnan(value):
        return Reason.METRICS_INVALID, KIND_NAN, "sample value is NaN"
    if math.isinf(value):
        return Reason.METRICS_INVALID, KIND_INF, f"sample value is {value:+}"
    if value < 0:
        return (
            Reason.METRICS_INVALID,
            KIND_NEGATIVE,
            f"sample value is negative ({value:g}): free capacity cannot be below 0",
        )
    max_age = settings.max_metric_age_seconds
    if now_ts - ts > max_age:
        return (
            Reason.METRICS_STALE,
            KIND_STALE,
            f"sample is {now_ts - ts:.0f}s old (max_metric_age_seconds={max_age:g})",
        )
    if ts - now_ts > settings.clock_skew_seconds:
        return (
            Reason.CLOCK_SKEW,
            KIND_CLOCK_SKEW,
            f"sample timestamp is {ts - now_ts:.0f}s ahead of our clock "
            f"(clock_skew_seconds={settings.clock_skew_seconds:g}): Prometheus and this "
            "daemon disagree on the time",
        )
    return None


PART_LABEL = "elastic_autoscaler_part"
_DESERVED, _ALLOCATED = "deserved", "allocated"
_PARTS = (_DESERVED, _ALLOCATED)
MAX_PLAUSIBLE_GPUS = 1_000_000  # a part above this many GPUs is garbage, not a cluster


def free_gpus_query(settings: Settings) -> str:
    """The one instant query sent each cycle.

    With `free_gpus_query` unset: deserved and allocated per queue as they are (no
    clamping, which would hide a negative or absurd part), and the scrape time of the
    oldest series behind each, all in one answer told apart by a `PART_LABEL` label, so
    the daemon checks every part and the age of what was scraped, not of the answer."""
    if settings.free_gpus_query:
        return settings.free_gpus_query
    q = settings.queue_label
    parts = []
    for part, series in (
        (_DESERVED, settings.deserved_gpus_series),
        (_ALLOCATED, settings.allocated_gpus_series),
    ):
        parts.append(f'label_replace(sum by ({q}) ({series}), "{PART_LABEL}", "{part}", "", "")')
        parts.append(
            f"label_replace(min by ({q}) (timestamp({series})), "
            f'"{PART_LABEL}", "{part}_time", "", "")'
        )
    return " or ".join(parts)


def _parts_by_queue(
    by_queue: Mapping[str, list[_Series]], settings: Settings, now_ts: float
) -> tuple[dict[str, QueueState], list[str]]:
    """Free GPUs per queue from its raw parts, each checked on its own."""
    queues: dict[str, QueueState] = {}
    errors: list[str] = []
    divisor = settings.metric_unit_divisor
    for queue in sorted(by_queue):
        got: dict[str, list[_Series]] = {}
        for series in by_queue[queue]:
            got.setdefault(series[0].get(PART_LABEL, ""), []).append(series)
        if _DESERVED not in got:
            continue  # no deserved series: the queue is unknown (HoldMetricsMissing)
        problem = None
        values: dict[str, float] = {}
        for part in _PARTS:
            if part not in got:
                values[part] = 0.0  # a queue nothing ran in has no allocated series
                continue
            problem = _part_problem(part, got[part], settings, now_ts)
            if problem is not None:
                break
            values[part] = got[part][0][1] or 0.0
        if problem is None:
            problem = _age_problem(got, settings, now_ts)
        if problem is None:
            deserved, allocated = values[_DESERVED], values[_ALLOCATED]
            # over-use (allocated above deserved) is Volcano's to resolve: nothing is free
            free = max(0.0, deserved - allocated) / divisor
            queues[queue] = QueueState(name=queue, free_gpus=free)
            continue
        reason, kind, what = problem
        errors.append(kind)
        queues[queue] = QueueState(
            name=queue, free_gpus=None, problem=reason, message=f"queue {queue}: {what}"
        )
    return queues, errors


def _part_problem(
    part: str, series: list[_Series], settings: Settings, now_ts: float
) -> tuple[Reason, str, str] | None:
    what = f"{part} GPUs ({_series_setting(part, settings)})"
    problem = _sample_problem(series, settings, now_ts)
    if problem is not None:
        reason, kind, text = problem
        return reason, kind, f"{what}: {text}"
    value = series[0][1] or 0.0
    if value / settings.metric_unit_divisor > MAX_PLAUSIBLE_GPUS:
        return (
            Reason.METRICS_INVALID,
            KIND_BAD_VALUE,
            f"{what}: {value:g} is more than {MAX_PLAUSIBLE_GPUS} GPUs "
            f"(metric_unit_divisor={settings.metric_unit_divisor:g})",
        )
    return None


def _age_problem(
    got: Mapping[str, list[_Series]], settings: Settings, now_ts: float
) -> tuple[Reason, str, str] | None:
    """The scrape time of the oldest series behind each part against `now`."""
    for part in _PARTS:
        times = got.get(f"{part}_time")
        if not times:
            continue
        scraped = times[0][1]
        if scraped is None or not math.isfinite(scraped):
            return (
                Reason.METRICS_INVALID,
                KIND_BAD_VALUE,
                f"{part} GPUs: scrape time {scraped!r} is not a time",
            )
        age = now_ts - scraped
        if age > settings.max_metric_age_seconds:
            return (
                Reason.METRICS_STALE,
                KIND_STALE,
                f"{part} GPUs ({_series_setting(part, settings)}) were last scraped "
                f"{age:.0f}s ago (max_metric_age_seconds="
                f"{settings.max_metric_age_seconds:g}): the exporter or its scrape is "
                "down, Prometheus still serves the last value",
            )
        if -age > settings.clock_skew_seconds:
            return (
                Reason.CLOCK_SKEW,
                KIND_CLOCK_SKEW,
                f"{part} GPUs were scraped {-age:.0f}s ahead of our clock "
                f"(clock_skew_seconds={settings.clock_skew_seconds:g})",
            )
    return None


def _series_setting(part: str, settings: Settings) -> str:
    return settings.deserved_gpus_series if part == _DESERVED else settings.allocated_gpus_series


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
            detail = _prometheus_error(answer) or f"status {status!r}"
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


def _prometheus_error(body: Any) -> str:
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


# ---- the source -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    body: bytes
    too_large: bool = False


@dataclass(slots=True)
class _Progress:
    """What a fetch got done, kept when the deadline cuts it short."""

    attempts: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Outcome:
    reading: FreeGpuReading
    retryable: bool = False


class PrometheusSource:
    """Runs the free-GPU query against `settings.prometheus_url`.

    Auth: a bearer token from `prometheus_bearer_token_file` (re-read every fetch), else
    basic auth from `prometheus_username`/`prometheus_password`; when both are set the
    token wins. TLS is verified (against `prometheus_ca_file` if set) unless
    `prometheus_insecure_skip_verify`.
    """

    def __init__(self, settings: Settings, *, backoff_seconds: float = _BACKOFF_SECONDS):
        self._settings = settings
        self._backoff = backoff_seconds
        self._base_url = settings.prometheus_url.rstrip("/")
        self._shown_url = _without_userinfo(self._base_url)
        self._query = free_gpus_query(settings)
        self._local = threading.local()
        self._token: str | None = None

        session = requests.Session()
        if settings.prometheus_ca_file is not None:
            session.verify = str(settings.prometheus_ca_file)
        else:
            session.verify = not settings.prometheus_insecure_skip_verify
        if settings.prometheus_insecure_skip_verify:
            # the operator asked for it; one warning per request would flood the log
            session.verify = False
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        # custom_query keeps only data.result; this hook keeps the whole answer (status
        # code, resultType) for the attempt running in this thread.
        session.hooks["response"].append(self._keep_response)

        auth = None
        user, password = settings.prometheus_username, settings.prometheus_password
        if user is not None and settings.prometheus_bearer_token_file is None:
            auth = (user, password.get_secret_value() if password is not None else "")
        self._client = PrometheusConnect(
            url=self._base_url,
            session=session,
            auth=auth,
            # requests' own default: no retries at all, errors raised as they happen
            retry=Retry(total=0, read=False),
            timeout=settings.prometheus_timeout_seconds,
        )
        # Attempts abandoned at the deadline may still be finishing in their thread until
        # requests' own timeout ends them; a private pool keeps them off the loop's default
        # executor and lets close() drop them.
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="prometheus")

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    async def fetch(self, now: datetime) -> FreeGpuReading:
        """One query, retried within `prometheus_timeout_seconds` (the deadline covers
        every attempt and backoff, so a timeout ends the fetch)."""
        started = time.monotonic()
        timeout = self._settings.prometheus_timeout_seconds
        progress = _Progress()
        try:
            async with asyncio.timeout(timeout):
                reading = await self._fetch(now, started + timeout, progress)
        except TimeoutError:
            progress.errors.append(KIND_TIMEOUT)
            reading = FreeGpuReading(
                problem=Reason.METRICS_UNAVAILABLE,
                message=f"{self._shown_url}: no answer within "
                f"prometheus_timeout_seconds={timeout:g} ({progress.attempts} attempt(s))",
                errors=tuple(progress.errors),
            )
        except Exception as exc:  # the contract: a reading, never an exception
            reading = _failed(
                Reason.METRICS_UNAVAILABLE,
                KIND_INTERNAL,
                f"{self._shown_url}: unexpected {type(exc).__name__}: "
                + self._scrub(str(exc)[:_DETAIL_CHARS]),
            )
        return replace(reading, duration_seconds=time.monotonic() - started)

    async def _fetch(self, now: datetime, deadline: float, progress: _Progress) -> FreeGpuReading:
        headers, problem = self._auth_headers()
        if problem is not None:
            return problem
        self._client.headers = headers
        loop = asyncio.get_running_loop()
        retries = self._settings.prometheus_retries
        while True:
            progress.attempts += 1
            remaining = max(deadline - time.monotonic(), 0.001)
            answer = await loop.run_in_executor(self._executor, self._attempt, remaining)
            outcome = self._judge(answer, now)
            progress.errors.extend(outcome.reading.errors)
            if not outcome.retryable:
                break
            delay = self._backoff * 2 ** (progress.attempts - 1)
            if progress.attempts > retries or time.monotonic() + delay >= deadline:
                break
            await asyncio.sleep(delay)
        reading = outcome.reading
        message = reading.message
        if progress.attempts > 1:
            tries = f"after {progress.attempts} attempts"
            message = f"{message} ({tries})" if message else tries
        return replace(reading, message=message, errors=tuple(progress.errors))

    def _auth_headers(self) -> tuple[dict[str, str] | None, FreeGpuReading | None]:
        path: Path | None = self._settings.prometheus_bearer_token_file
        if path is None:
            return None, None
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            message = f"cannot read bearer token file {path}: {why}"
            return None, _failed(Reason.METRICS_UNAVAILABLE, KIND_AUTH, message)
        if not token:
            return None, _failed(
                Reason.METRICS_UNAVAILABLE, KIND_AUTH, f"bearer token file {path} is empty"
            )
        self._token = token  # kept only to scrub it from messages
        return {"Authorization": f"Bearer {token}"}, None

    def _keep_response(self, response: requests.Response, *args: Any, **kwargs: Any) -> None:
        """Runs before requests reads the body: read it here, at most
        prometheus_max_response_bytes of it, so a huge answer cannot exhaust memory."""
        self._local.response = response
        self._local.too_large = False
        limit = self._settings.prometheus_max_response_bytes
        body = response.raw.read(limit + 1, decode_content=True) if response.raw else b""
        if len(body) > limit:
            body = b""
            self._local.too_large = True
            response.close()
        # hand requests the body we read, so it does not read again
        response._content = body
        response._content_consumed = True

    def _attempt(self, timeout: float) -> _Response | BaseException:
        """One HTTP round trip in a worker thread: the full answer, or the transport error."""
        self._local.response = None
        try:
            self._client.custom_query(
                self._query,
                # ask Prometheus to give up too, so an abandoned query stops costing it
                params={"timeout": f"{timeout:.3f}"},
                timeout=timeout,
            )
        except requests.exceptions.JSONDecodeError:
            pass  # a 200 that is not JSON: judged from the kept response
        except (requests.RequestException, OSError) as exc:
            return exc  # OSError: requests' own, e.g. a CA bundle path that does not exist
        except (PrometheusApiClientException, KeyError, TypeError, ValueError):
            pass  # non-200, or JSON of the wrong shape: judged from the kept response
        response: requests.Response | None = self._local.response
        if response is None:  # pragma: no cover - requests always calls the hook
            return RuntimeError("no response recorded")
        return _Response(response.status_code, response.content, self._local.too_large)

    def _judge(self, answer: _Response | BaseException, now: datetime) -> _Outcome:
        url = self._shown_url
        if isinstance(answer, BaseException):
            return _transport_outcome(answer, url, self._scrub(_root_cause(answer)))
        status = answer.status
        if answer.too_large:
            return _Outcome(
                _failed(
                    Reason.METRICS_INVALID,
                    KIND_TOO_LARGE,
                    f"{url}: answer larger than prometheus_max_response_bytes="
                    f"{self._settings.prometheus_max_response_bytes}: not read",
                )
            )
        if status == 200:
            return _Outcome(self._scrubbed(parse_query_result(answer.body, self._settings, now)))
        detail = self._scrub(_prometheus_error(answer.body) or _snippet(answer.body))
        what = f"{url}: HTTP {status}" + (f" ({detail})" if detail else "")
        if status in (401, 403):
            return _Outcome(
                _failed(
                    Reason.METRICS_UNAVAILABLE,
                    KIND_AUTH,
                    f"{what}: check the bearer token file or basic-auth credentials",
                )
            )
        if status >= 500:
            return _Outcome(_failed(Reason.METRICS_UNAVAILABLE, KIND_HTTP_5XX, what), True)
        return _Outcome(
            _failed(Reason.METRICS_UNAVAILABLE, KIND_HTTP_4XX, what), status in _RETRYABLE_STATUS
        )

    def _scrubbed(self, reading: FreeGpuReading) -> FreeGpuReading:
        queues = {
            name: replace(q, message=self._scrub(q.message)) if q.message else q
            for name, q in reading.queues.items()
        }
        return replace(reading, message=self._scrub(reading.message), queues=queues)

    def _scrub(self, text: str) -> str:
        """Text that came from outside (answers, error strings) minus our secrets: a proxy
        may echo the credentials it rejected. Our own text never holds them."""
        secrets = [self._token or "", urlsplit(self._base_url).password or ""]
        password = self._settings.prometheus_password
        if password is not None:
            secrets.append(password.get_secret_value())
        for secret in secrets:
            if secret:
                text = text.replace(secret, "***")
        return text


def _transport_outcome(exc: BaseException, url: str, cause: str) -> _Outcome:
    if isinstance(exc, requests.exceptions.SSLError):
        return _Outcome(
            _failed(
                Reason.METRICS_UNAVAILABLE,
                KIND_TLS,
                f"{url}: TLS failed ({cause}): check prometheus_ca_file",
            )
        )
    if isinstance(exc, requests.exceptions.Timeout):
        return _Outcome(
            _failed(Reason.METRICS_UNAVAILABLE, KIND_TIMEOUT, f"{url}: timed out ({cause})"), True
        )
    if isinstance(exc, requests.exceptions.ConnectionError):
        message = f"{url}: cannot connect ({cause})"
        return _Outcome(_failed(Reason.METRICS_UNAVAILABLE, KIND_CONNECTION, message), True)
    # InvalidURL, MissingSchema, a missing CA file...: settings to fix, a retry won't help
    return _Outcome(
        _failed(
            Reason.METRICS_UNAVAILABLE,
            KIND_CONFIG,
            f"{url}: cannot send the query ({type(exc).__name__}: {cause}): check the "
            "prometheus_* settings",
        )
    )


def _root_cause(exc: BaseException) -> str:
    """The innermost error of requests' and urllib3's wrappers: what actually failed."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        reason = getattr(exc, "reason", None)
        if isinstance(reason, BaseException):
            exc = reason
        elif exc.__cause__ is not None:
            exc = exc.__cause__
        elif exc.__context__ is not None:
            exc = exc.__context__
        elif exc.args and isinstance(exc.args[0], BaseException):
            exc = exc.args[0]
        else:
            break
    text = str(exc) or type(exc).__name__
    if ": Failed to establish a new connection: " in text:  # urllib3's repr-laden message
        text = text.split(": Failed to establish a new connection: ", 1)[1]
    return text[:_DETAIL_CHARS]


def _snippet(body: bytes) -> str:
    text = body[:_DETAIL_CHARS].decode("utf-8", "replace")
    return " ".join(text.split())


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
