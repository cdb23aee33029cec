"""The kubeconfig loader (autoscaler/client/config.py) registers the credentials it loads
for redaction and reads the environment's proxy once, and the read side's default
options (core.options) are the default settings' own, without the settings loader."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import CoreV1Api
from kubeserver import EnvTest
from yarl import URL

from autoscaler.client.config import make_api_client
from autoscaler.client.redact import mask, redact
from autoscaler.core.options import default_read_options
from autoscaler.settings import Settings

TOKEN = "kubeconfig-token-5f0c2b9e"


def test_the_default_read_options_are_the_default_settings():
    assert default_read_options() == Settings.model_validate({}).read_options()


async def test_the_loaded_token_is_masked_once_the_client_is_made(tmp_path: Path):
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": TOKEN}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "config"
    path.write_text(json.dumps(doc), encoding="utf-8")
    async with await make_api_client(Settings(kubeconfig=path).kube_options()):
        assert redact(f"401: bad token {TOKEN}") == "401: bad token ***"


def test_mask_masks_the_longest_secret_whole():
    assert mask("a secret-long b secret", ["secret", "secret-long", ""]) == "a *** b ***"


class _CountingExecutor(ThreadPoolExecutor):
    """The loop's default executor, counting what is handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


@contextlib.asynccontextmanager
async def _connect_proxy() -> AsyncIterator[tuple[str, list[str]]]:
    """An HTTP CONNECT proxy on 127.0.0.1: (its URL, the targets it tunnelled to)."""
    targets: list[str] = []

    async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await src.read(65536):
                dst.write(chunk)
                await dst.drain()
        dst.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        target = (await reader.readline()).split()[1].decode()
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        targets.append(target)
        host, port = target.rsplit(":", 1)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", targets
    finally:
        server.close()
        await server.wait_closed()


async def test_the_environments_proxy_is_read_once_not_on_every_request(
    envtest: EnvTest, monkeypatch: pytest.MonkeyPatch
):
    """HTTPS_PROXY is honoured (the API server reached through it), yet no request hands
    a proxy or .netrc lookup to a thread (aiohttp does, twice a request, for a session
    that trusts the environment); NO_PROXY covering the server bypasses it."""
    executor = _CountingExecutor()
    asyncio.get_running_loop().set_default_executor(executor)
    settings = Settings(kubeconfig=envtest.kubeconfig()).kube_options()
    server = URL(envtest.url)
    for var in ("HTTP_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    async with _connect_proxy() as (proxy, targets):
        monkeypatch.setenv("HTTPS_PROXY", proxy)
        async with await make_api_client(settings) as client:
            before = executor.submitted
            for _ in range(5):
                await CoreV1Api(client).list_namespace(limit=1)
            assert executor.submitted == before
        assert targets == [f"{server.host}:{server.port}"]  # one pooled connection
        monkeypatch.setenv("NO_PROXY", str(server.host))
        async with await make_api_client(settings) as client:
            await CoreV1Api(client).list_namespace(limit=1)
        assert len(targets) == 1
