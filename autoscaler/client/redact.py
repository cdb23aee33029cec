"""Credentials never reach logs, Events or metrics.

We never log our own headers; but servers, proxies and webhooks sometimes echo the
credentials they were sent (a 401 body quoting the bearer token). Text that came from
outside passes through `redact()` before it is logged. The API clients' credentials are
read from their live configuration each time, so a rotated service-account token is
covered too.
"""

from __future__ import annotations

import weakref
from typing import Any

_MASK = "***"
_configurations: weakref.WeakSet[Any] = weakref.WeakSet()
_secrets: set[str] = set()


def remember(secret: str | None) -> None:
    if secret and len(secret) >= 4:  # too short to be a credential, too common to mask
        _secrets.add(secret)


def remember_client(configuration: Any) -> None:
    """A kubernetes_asyncio Configuration whose api_key / password must never be shown."""

    try:
        _configurations.add(configuration)
    except TypeError:  # not weak-referenceable: keep what it holds now
        for secret in _client_secrets(configuration):
            remember(secret)


def _client_secrets(configuration: Any) -> list[str]:
    out: list[str] = []
    for value in (getattr(configuration, "api_key", None) or {}).values():
        if isinstance(value, str):
            out.append(value)
            parts = value.split(None, 1)  # "Bearer <token>"
            if len(parts) == 2:
                out.append(parts[1])
    password = getattr(configuration, "password", None)
    if isinstance(password, str):
        out.append(password)
    return out


def redact(text: str) -> str:
    secrets = set(_secrets)
    for configuration in list(_configurations):
        secrets.update(s for s in _client_secrets(configuration) if len(s) >= 4)
    # longest first, so a token is masked whole even when a prefix of it is also known
    for secret in sorted(secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, _MASK)
    return text
