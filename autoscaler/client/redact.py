"""Credentials never reach logs, Events or metrics.

We never log our own headers; but servers, proxies and webhooks sometimes echo the
credentials they were sent (a 401 body quoting the bearer token). Text that came from
outside passes through `redact()` before it is logged. The API clients' credentials are
read from their live configuration each time, so a rotated service-account token is
covered too.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

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
    """`text` minus every credential we know: those `remember`ed and the API clients'."""
    secrets = set(_secrets)
    for configuration in list(_configurations):
        secrets.update(s for s in _client_secrets(configuration) if len(s) >= 4)
    return mask(text, secrets)


def mask(text: str, secrets: Iterable[str]) -> str:
    """`text` with each of `secrets` (the empty one ignored) shown as ***: the one place
    a secret is masked, whoever knows it (the clients here, the Prometheus source)."""
    # longest first, so a token is masked whole even when a prefix of it is also known
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, _MASK)
    return text


def without_password(url: str) -> str:
    """`url` to show: its password (if any) as ***, the user kept."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return url.split("@")[-1]  # cannot tell the parts apart: keep only the host side
    return url if password is None else url.replace(f":{password}@", f":{_MASK}@")


def without_userinfo(url: str) -> str:
    """`url` to show: without its user and password."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
