"""Kubernetes API failures, read once for every caller (watch caches, actuator, leader
election): what the caller does next, how long the server asked us to wait, and a short
redacted text for logs and Events."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from .redact import redact

TEXT_MAX = 300


class ApiFailure(StrEnum):
    """A failed request, by what the caller does next."""

    CONFLICT = "conflict"  # 409: someone else wrote first; read again, decide again
    NOT_FOUND = "not_found"  # 404: the object is gone
    EXPIRED = "expired"  # 410: our resourceVersion is forgotten; list again at once
    THROTTLED = "throttled"  # 429: wait at least Retry-After, send nothing more meanwhile
    DENIED = "denied"  # 401/403: credentials or RBAC; retrying will not help soon
    REJECTED = "rejected"  # other 4xx: the request itself is wrong
    SERVER = "server"  # 5xx: retry with back-off
    UNREACHABLE = "unreachable"  # refused, reset, cut off: retry soon, the server may be back
    TIMEOUT = "timeout"  # no answer in time: retry with back-off
    UNEXPECTED = "unexpected"  # anything else (a bug or a library surprise)


def classify(exc: BaseException) -> ApiFailure:
    if isinstance(exc, ApiException):
        status = exc.status or 0
        if status == 409:
            return ApiFailure.CONFLICT
        if status == 404:
            return ApiFailure.NOT_FOUND
        if status == 410:
            return ApiFailure.EXPIRED
        if status == 429:
            return ApiFailure.THROTTLED
        if status in (401, 403):
            return ApiFailure.DENIED
        if 400 <= status < 500:
            return ApiFailure.REJECTED
        # 5xx, and status 0: the client's own failure reported as an ApiException
        return ApiFailure.SERVER
    if isinstance(
        exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | ConnectionError
    ):
        return ApiFailure.UNREACHABLE
    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError is TimeoutError since 3.11
        return ApiFailure.TIMEOUT
    if isinstance(exc, aiohttp.ClientError | OSError):
        return ApiFailure.UNREACHABLE
    return ApiFailure.UNEXPECTED


def retry_after(exc: BaseException, now: datetime, cap: float | None = None) -> float | None:
    """Seconds the server asked us to wait (Retry-After, in seconds or as an HTTP date),
    at most `cap`; None when it did not say."""
    headers = getattr(exc, "headers", None)
    value = headers.get("Retry-After") if headers is not None else None
    if not value:
        return None
    value = str(value).strip()
    try:
        seconds = max(0.0, float(value))
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, (when - now).total_seconds())
    return seconds if cap is None else min(seconds, cap)


def status_message(exc: ApiException) -> str:
    """The message of the Status the server sent, if any (never headers: no credentials)."""
    raw: object = exc.body
    body = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if not isinstance(body, str) or not body:
        return ""
    try:
        status = json.loads(body)
    except ValueError:
        return redact(body[:200])
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return redact(status["message"][:TEXT_MAX])
    return ""


def error_text(exc: BaseException) -> str:
    """`HTTP 403 Forbidden: <the Status message>`, `request timed out`, or the exception's
    type and text: one short line, credentials redacted."""
    if isinstance(exc, ApiException):
        text = f"HTTP {exc.status} {exc.reason or ''}".rstrip()
        detail = status_message(exc)
        return redact(f"{text}: {detail}" if detail else text)
    if isinstance(exc, TimeoutError):
        return "request timed out"
    return redact(f"{type(exc).__name__}: {exc}".rstrip(": "))[:TEXT_MAX]


_HINTS = {
    401: "the API server did not accept the credentials (an expired token or "
    "certificate in the kubeconfig?)",
    403: "RBAC does not allow this request for this user",
}


def failure_line(exc: BaseException) -> str:
    """One line for a person: which request (when the caller noted it, see
    read/kube/cache.py), what the server said, and for 401/403 what to check. Never the
    HTTP headers that str(ApiException) carries."""
    notes = [n for n in getattr(exc, "__notes__", ()) if isinstance(n, str)]
    text = error_text(exc)
    if notes:
        text = f"{notes[-1]}: {text}"
    hint = _HINTS.get(exc.status or 0) if isinstance(exc, ApiException) else None
    return f"{text} ({hint})" if hint else text
