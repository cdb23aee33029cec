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
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar
from urllib.parse import urlsplit

import requests
import urllib3
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from autoscaler.client.redact import mask, without_userinfo
from autoscaler.core.options import PrometheusOptions
from autoscaler.core.reasons import Reason

from .answer import (
    FreeGpuReading,
    PromError,
    failed_reading,
    free_gpus_query,
    parse_query_result,
    prometheus_error,
)

_RETRYABLE_STATUS = frozenset({408, 429})
_BACKOFF_SECONDS = 0.2
_DETAIL_CHARS = 200
_P = ParamSpec("_P")
_T = TypeVar("_T")


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
    errors: list[PromError] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Outcome:
    reading: FreeGpuReading
    retryable: bool = False


class DaemonThreads(Executor):
    """Runs each call in a daemon thread of its own. A ThreadPoolExecutor's threads are
    joined when the interpreter exits, so a query hanging on a Prometheus that accepts and
    never answers would hold a stopping daemon until requests' timeout; a daemon thread
    does not. One Prometheus query runs per cycle: a thread each costs nothing."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._closed = False

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        if self._closed:
            raise RuntimeError("cannot run a call after close()")
        future: Future[_T] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to whoever awaits the future
                future.set_exception(exc)

        threading.Thread(target=work, name=self._name, daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._closed = True  # running calls end with their request's timeout


class PrometheusSource:
    """Runs the free-GPU query against `settings.prometheus_url`.

    Auth: a bearer token from `prometheus_bearer_token_file` (re-read every fetch), else
    basic auth from `prometheus_username`/`prometheus_password`; when both are set the
    token wins. TLS is verified (against `prometheus_ca_file` if set) unless
    `prometheus_insecure_skip_verify`.
    """

    def __init__(self, settings: PrometheusOptions, *, backoff_seconds: float = _BACKOFF_SECONDS):
        self._settings = settings
        self._backoff = backoff_seconds
        self._base_url = settings.prometheus_url.rstrip("/")
        self._shown_url = without_userinfo(self._base_url)
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
        # requests' own timeout ends them: each runs in a daemon thread of its own, off the
        # loop's default executor, and never holds up the process's exit.
        self._executor = DaemonThreads("prometheus")

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
            progress.errors.append(PromError.TIMEOUT)
            reading = FreeGpuReading(
                problem=Reason.METRICS_UNAVAILABLE,
                message=f"{self._shown_url}: no answer within "
                f"prometheus_timeout_seconds={timeout:g} ({progress.attempts} attempt(s))",
                errors=tuple(progress.errors),
            )
        except Exception as exc:  # the contract: a reading, never an exception
            reading = failed_reading(
                Reason.METRICS_UNAVAILABLE,
                PromError.INTERNAL,
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
            return None, failed_reading(Reason.METRICS_UNAVAILABLE, PromError.AUTH, message)
        if not token:
            return None, failed_reading(
                Reason.METRICS_UNAVAILABLE, PromError.AUTH, f"bearer token file {path} is empty"
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
                failed_reading(
                    Reason.METRICS_INVALID,
                    PromError.TOO_LARGE,
                    f"{url}: answer larger than prometheus_max_response_bytes="
                    f"{self._settings.prometheus_max_response_bytes}: not read",
                )
            )
        if status == 200:
            return _Outcome(self._scrubbed(parse_query_result(answer.body, self._settings, now)))
        detail = self._scrub(prometheus_error(answer.body) or _snippet(answer.body))
        what = f"{url}: HTTP {status}" + (f" ({detail})" if detail else "")
        if status in (401, 403):
            return _Outcome(
                failed_reading(
                    Reason.METRICS_UNAVAILABLE,
                    PromError.AUTH,
                    f"{what}: check the bearer token file or basic-auth credentials",
                )
            )
        if status >= 500:
            return _Outcome(
                failed_reading(Reason.METRICS_UNAVAILABLE, PromError.HTTP_5XX, what), True
            )
        if status == 400 and detail.startswith("bad_data"):
            # a PromQL Prometheus cannot parse or run: a setting to fix, not a retry
            return _Outcome(
                failed_reading(
                    Reason.METRICS_UNAVAILABLE,
                    PromError.BAD_QUERY,
                    f"{what}: Prometheus refused the query: check free_gpus_query and the "
                    "*_gpus_series and queue_label settings",
                )
            )
        return _Outcome(
            failed_reading(Reason.METRICS_UNAVAILABLE, PromError.HTTP_4XX, what),
            status in _RETRYABLE_STATUS,
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
        return mask(text, secrets)


def _transport_outcome(exc: BaseException, url: str, cause: str) -> _Outcome:
    if isinstance(exc, requests.exceptions.SSLError):
        return _Outcome(
            failed_reading(
                Reason.METRICS_UNAVAILABLE,
                PromError.TLS,
                f"{url}: TLS failed ({cause}): check prometheus_ca_file",
            )
        )
    if isinstance(exc, requests.exceptions.Timeout):
        return _Outcome(
            failed_reading(
                Reason.METRICS_UNAVAILABLE, PromError.TIMEOUT, f"{url}: timed out ({cause})"
            ),
            True,
        )
    if isinstance(exc, requests.exceptions.ConnectionError):
        message = f"{url}: cannot connect ({cause})"
        return _Outcome(
            failed_reading(Reason.METRICS_UNAVAILABLE, PromError.CONNECTION, message), True
        )
    # InvalidURL, MissingSchema, a missing CA file...: settings to fix, a retry won't help
    return _Outcome(
        failed_reading(
            Reason.METRICS_UNAVAILABLE,
            PromError.CONFIG,
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
