"""The kube source against a real API server that restarts under it.

The fake server hid this: after a real kube-apiserver restart our caches came back only
after their exponential back-off (37-41 s), planning meanwhile on stale objects with
/readyz true. Here the API server is stopped long enough for that back-off to grow, then
started again: the caches must see what changed right after the restart within one
reconnect, and report themselves not current while they cannot know.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from builders import pytorchjob
from kubernetes_asyncio.client import ApiClient
from kubeserver import EnvTest
from test_loop import LOCAL

from autoscaler.run.wiring import build
from autoscaler.settings import Settings

OUTAGE_SECONDS = 8.0  # long enough for the old back-off to reach 4-8 s between attempts
RECOVERY_BOUND_SECONDS = 4.0


def _job(namespace: str, name: str) -> dict:
    obj = pytorchjob(name, namespace=namespace, queue="q-restart")
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        obj["metadata"].pop(key, None)
    obj.pop("status", None)
    return obj


async def _until(check, seconds: float, what: str) -> float:
    """Poll a condition of the source (real servers only); seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"not within {seconds:g}s: {what}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.timeout(90)
async def test_caches_recover_at_once_after_an_api_server_restart(
    envtest: EnvTest, real_ns: str
) -> None:
    envtest.create(_job(real_ns, "before"))
    settings = Settings(
        namespaces=[real_ns],
        lease_namespace=real_ns,
        kube_request_timeout_seconds=2,
        watch_timeout_seconds=60,
    )
    async with ApiClient(envtest.configuration()) as client:
        # the daemon as `run` builds and starts it: caches, elector, status writer
        parts = build(settings, client, server=LOCAL)
        kube = parts.kube
        async with parts.running():
            await kube.wait_synced(20)
            assert kube.current
            names = lambda: {r.job.ref.name for r in kube.objects().jobs}  # noqa: E731
            assert names() == {"before"}

            envtest.stop_apiserver()
            await _until(lambda: not kube.current, 10, "a cache noticing the outage")
            # writes failed all through the outage: the pause doubled to 16 s
            pacer = parts.actuator.pacer  # type: ignore[attr-defined]
            for _ in range(5):
                pacer.unavailable(pacer.ticket())
            await asyncio.sleep(OUTAGE_SECONDS)  # the outage itself, not a timing guess
            assert not kube.current and kube.objects().failing_seconds > 0
            assert pacer.retry_in() > 0

            envtest.start_apiserver()
            back = time.monotonic()
            envtest.create(_job(real_ns, "after"))
            envtest.delete(_job(real_ns, "before"))
            await _until(
                lambda: names() == {"after"},
                RECOVERY_BOUND_SECONDS + 10,
                "the caches seeing the job created and the one deleted",
            )
            took = time.monotonic() - back
            print(f"caches saw the changes {took:.2f}s after the restart")
            await _until(lambda: kube.current, 5, "the caches current again")
            # the server answers again: writes may go in the next cycle, not after the pause
            resumed = await _until(lambda: pacer.retry_in() == 0, 1, "writes resume")
            print(f"writes may go again {time.monotonic() - back:.2f}s after the restart")
            assert resumed < 1
            assert took <= RECOVERY_BOUND_SECONDS, (
                f"caches saw the changes {took:.1f}s after the API server came back"
            )
