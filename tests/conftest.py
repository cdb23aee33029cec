"""Fixtures shared by the tests that talk to the fake API server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from fakekube import FakeKubeApi
from kubernetes_asyncio.client import ApiClient


@pytest.fixture
async def kube() -> AsyncIterator[FakeKubeApi]:
    """A fake API server on 127.0.0.1, stopped when the test ends."""
    async with FakeKubeApi() as server:
        yield server


@pytest.fixture
async def api(kube: FakeKubeApi) -> FakeKubeApi:
    """The same server, under the name the daemon-level tests use."""
    return kube


@pytest.fixture
async def client(kube: FakeKubeApi) -> AsyncIterator[ApiClient]:
    """The real kubernetes_asyncio client, pointed at the fake server."""
    async with ApiClient(kube.configuration()) as api_client:
        yield api_client
