"""/metrics, /healthz and /readyz on one port (aiohttp)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from autoscaler.report.metrics import Metrics


class HealthServer:
    """`alive()` and `ready()` return (ok, reason); the loop owns what they mean."""

    def __init__(
        self,
        metrics: Metrics,
        alive: Callable[[], tuple[bool, str]],
        ready: Callable[[], tuple[bool, str]],
        host: str,
        port: int,
    ) -> None:
        self._alive, self._ready = alive, ready
        self.host, self._port = host, port
        app = web.Application()
        app.router.add_get("/metrics", make_aiohttp_handler(metrics.registry))
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        self.port = port

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._port)
        await site.start()
        if self._runner.addresses:  # the bound port, when asked for port 0
            self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        await self._runner.cleanup()

    @staticmethod
    def _answer(result: tuple[bool, str]) -> web.Response:
        ok, why = result
        return web.Response(status=200 if ok else 503, text=("ok" if ok else why) + "\n")

    async def _healthz(self, _: web.Request) -> web.Response:
        return self._answer(self._alive())

    async def _readyz(self, _: web.Request) -> web.Response:
        return self._answer(self._ready())
