"""One reading of Kubernetes API failures for every caller: what to do next, how long
the server asked us to wait, and a short redacted text."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.client.kubeapi import ApiFailure, classify, error_text, retry_after
from autoscaler.client.redact import remember

NOW = datetime(2026, 11, 23, 8, 0, 0, tzinfo=UTC)


def api_error(status: int, reason: str = "", body: object = None, headers=None) -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps(body) if isinstance(body, dict) else body
    exc.headers = headers
    return exc


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (api_error(409, "Conflict"), ApiFailure.CONFLICT),
        (api_error(404, "Not Found"), ApiFailure.NOT_FOUND),
        (api_error(410, "Gone"), ApiFailure.EXPIRED),
        (api_error(429, "Too Many Requests"), ApiFailure.THROTTLED),
        (api_error(401, "Unauthorized"), ApiFailure.DENIED),
        (api_error(403, "Forbidden"), ApiFailure.DENIED),
        (api_error(422, "Unprocessable Entity"), ApiFailure.REJECTED),
        (api_error(500, "Internal Server Error"), ApiFailure.SERVER),
        (api_error(503, "Service Unavailable"), ApiFailure.SERVER),
        (aiohttp.ServerDisconnectedError(), ApiFailure.UNREACHABLE),
        (ConnectionRefusedError(), ApiFailure.UNREACHABLE),
        (TimeoutError(), ApiFailure.TIMEOUT),
        (ValueError("odd"), ApiFailure.UNEXPECTED),
    ],
)
def test_classify_by_what_the_caller_does_next(exc, expected):
    assert classify(exc) is expected


@pytest.mark.parametrize(
    ("header", "cap", "expected"),
    [
        (None, None, None),
        ("7", None, 7.0),
        ("7.5", 5.0, 5.0),
        ("-3", None, 0.0),
        ("Mon, 23 Nov 2026 08:00:30 GMT", None, 30.0),  # the HTTP-date form
        ("Mon, 23 Nov 2026 07:59:00 GMT", None, 0.0),  # already past
        ("soon", None, None),
    ],
)
def test_retry_after_both_forms(header, cap, expected):
    headers = {"Retry-After": header} if header is not None else {}
    assert retry_after(api_error(429, headers=headers), NOW, cap) == expected


def test_error_text_names_status_and_message_and_redacts_credentials():
    remember("abc.def.ghi")  # a credential our clients hold, echoed back by a server
    body = {"kind": "Status", "message": "pytorchjobs is forbidden: Bearer abc.def.ghi denied"}
    text = error_text(api_error(403, "Forbidden", body))
    assert text.startswith("HTTP 403 Forbidden: pytorchjobs is forbidden")
    assert "abc.def.ghi" not in text
    assert error_text(TimeoutError()) == "request timed out"
    assert error_text(ConnectionRefusedError("refused")) == "ConnectionRefusedError: refused"
