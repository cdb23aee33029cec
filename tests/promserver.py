"""Test servers that speak Prometheus's real protocols, all on 127.0.0.1, random ports.

- `fake_prometheus(...)`: a raw Prometheus HTTP API answering /api/v1/query with canned
  bodies, one per bad answer (KEDA style), optionally over TLS; it records every request.
- `VolcanoExporter`: Volcano scheduler's queue metrics in the text exposition format,
  values set by the test (milli-units, like Volcano's scalar resources).
- `running_prometheus(...)`: the real `prometheus` binary scraping given targets every
  second, with a temp TSDB, stopped (terminate, then kill) when the context ends;
  `prometheus_server(...)` the same without an event loop, for a session-wide fixture.
- `make_tls_files(dir)`: a throwaway CA and a server certificate for 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import json
import math
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web
from ports import free_port

PROMETHEUS_BINARY = (
    os.environ.get("PROMETHEUS_BINARY") or shutil.which("prometheus") or "/usr/bin/prometheus"
)
HAVE_PROMETHEUS = os.access(PROMETHEUS_BINARY, os.X_OK)
SKIP_REASON = (
    f"the prometheus binary is not installed ({PROMETHEUS_BINARY}; apt install prometheus)"
)

GPU = "nvidia.com/gpu"
DESERVED = "volcano_queue_deserved_scalar_resources"
ALLOCATED = "volcano_queue_allocated_scalar_resources"
REQUEST = "volcano_queue_request_scalar_resources"
REAL_CAPACITY = "volcano_queue_real_capacity_scalar_resources"


async def _start_site(app: web.Application, ssl_context: ssl.SSLContext | None = None):
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


# ---- canned Prometheus answers ----------------------------------------------------------


def sample(queue: str | None, value: float | str, ts: float, /, **labels: str) -> dict[str, Any]:
    """One instant-vector sample as Prometheus encodes it (value as a string)."""
    metric = dict(labels)
    if queue is not None:
        metric["queue_name"] = queue
    if isinstance(value, float) and math.isnan(value):
        text = "NaN"
    elif isinstance(value, float) and math.isinf(value):
        text = "+Inf" if value > 0 else "-Inf"
    else:
        text = str(value)
    return {"metric": metric, "value": [ts, text]}


def vector_body(*samples: Mapping[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


def scalar_body(value: float, ts: float) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "scalar", "result": [ts, str(value)]}}


def string_body(text: str, ts: float) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "string", "result": [ts, text]}}


def matrix_body(queue: str, points: Iterable[tuple[float, float]]) -> dict[str, Any]:
    values = [[ts, str(v)] for ts, v in points]
    result = [{"metric": {"queue_name": queue}, "values": values}]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def error_body(error_type: str, error: str) -> dict[str, Any]:
    return {"status": "error", "errorType": error_type, "error": error}


@dataclass
class Canned:
    """One answer. `hold`: do not answer until the server is closed (a hung Prometheus)."""

    body: bytes | str | Mapping[str, Any] = b""
    status: int = 200
    content_type: str = "application/json"
    hold: bool = False

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body).encode()


@dataclass
class FakePrometheus:
    """Answers /api/v1/query with `answers` in order; the last one repeats."""

    answers: list[Canned]
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    received: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def hits(self) -> int:
        return len(self.requests)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append({"headers": dict(request.headers), "query": dict(request.query)})
        self.received.set()
        answer = self.answers[min(len(self.requests) - 1, len(self.answers) - 1)]
        if answer.hold:
            await self.released.wait()
        return web.Response(
            status=answer.status,
            body=answer.payload(),
            headers={"Content-Type": answer.content_type},
        )


@contextlib.asynccontextmanager
async def fake_prometheus(
    *answers: Canned | Mapping[str, Any], ssl_context: ssl.SSLContext | None = None
) -> AsyncIterator[FakePrometheus]:
    canned = [a if isinstance(a, Canned) else Canned(a) for a in answers] or [Canned(vector_body())]
    fake = FakePrometheus(canned)
    app = web.Application()
    app.router.add_route("*", "/api/v1/query", fake.handle)
    runner, port = await _start_site(app, ssl_context)
    fake.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        fake.released.set()
        await runner.cleanup()


# ---- TLS ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA and a server certificate for 127.0.0.1/localhost signed by it (valid 1 day)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "elastic-autoscaler test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    files.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


# ---- Volcano exporter ----------------------------------------------------------------------


@dataclass
class VolcanoExporter:
    """Volcano scheduler's queue metrics (`/metrics`, text format 0.0.4), milli-units, as
    the capacity plugin exports them: for faults the real scheduler cannot produce
    (negative, NaN, absurd, lagging values), and for daemon tests that need a set headroom.

    `set_queue("team-a", deserved=8000, allocated=3000)`: real capacity (and deserved)
    8000, allocated and request 3000, so the headroom is 5 GPUs; `allocated=None` drops
    the allocated series (a queue nothing ever ran in). `failing = True` answers 503, which makes
    Prometheus mark the target down and its series stale at the next scrape."""

    queues: dict[str, tuple[float, float | None]] = field(default_factory=dict)
    failing: bool = False
    url: str = ""
    target: str = ""
    scrapes: int = 0
    # queue -> seconds: its samples carry an explicit timestamp that far in the past, as
    # an exporter relaying a stale source does; Prometheus serves them as current values
    lag_seconds: dict[str, float] = field(default_factory=dict)

    def set_queue(self, name: str, *, deserved: float, allocated: float | None) -> None:
        self.queues[name] = (deserved, allocated)

    def _stamp(self, name: str) -> str:
        lag = self.lag_seconds.get(name)
        return "" if lag is None else f" {int((time.time() - lag) * 1000)}"

    def remove_queue(self, name: str) -> None:
        self.queues.pop(name, None)

    def render(self) -> str:
        lines = [
            f"# HELP {DESERVED} Deserved scalar resources for one queue",
            f"# TYPE {DESERVED} gauge",
        ]
        for name, (deserved, _) in sorted(self.queues.items()):
            lines.append(
                f'{DESERVED}{{queue_name="{name}",resource="{GPU}"}} {deserved}' + self._stamp(name)
            )
        lines += [
            f"# HELP {ALLOCATED} Allocated scalar resources for one queue",
            f"# TYPE {ALLOCATED} gauge",
        ]
        for name, (_, allocated) in sorted(self.queues.items()):
            if allocated is not None:
                lines.append(
                    f'{ALLOCATED}{{queue_name="{name}",resource="{GPU}"}} {allocated}'
                    + self._stamp(name)
                )
        # The capacity plugin's view of the same figures: real capacity = what the test
        # calls deserved, request = allocated, so the headroom is deserved - allocated.
        for series, pick in ((REAL_CAPACITY, 0), (REQUEST, 1)):
            lines += [f"# TYPE {series} gauge"]
            for name, pair in sorted(self.queues.items()):
                value = pair[pick] if pair[pick] is not None else 0
                lines.append(
                    f'{series}{{queue_name="{name}",resource="{GPU}"}} {value}' + self._stamp(name)
                )
        # another resource on the same metric, which the query must ignore
        for name, (deserved, _) in sorted(self.queues.items()):
            lines.append(f'{DESERVED}{{queue_name="{name}",resource="cpu"}} {deserved * 10}')
        return "\n".join(lines) + "\n"

    async def handle(self, request: web.Request) -> web.Response:
        self.scrapes += 1
        if self.failing:
            return web.Response(status=503, text="scheduler unavailable")
        return web.Response(
            text=self.render(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )


@contextlib.asynccontextmanager
async def running_exporter(exporter: VolcanoExporter) -> AsyncIterator[VolcanoExporter]:
    app = web.Application()
    app.router.add_get("/metrics", exporter.handle)
    runner, port = await _start_site(app)
    exporter.target = f"127.0.0.1:{port}"
    exporter.url = f"http://{exporter.target}/metrics"
    try:
        yield exporter
    finally:
        await runner.cleanup()


# ---- the real Prometheus --------------------------------------------------------------------


@dataclass
class PrometheusProcess:
    url: str
    process: asyncio.subprocess.Process | subprocess.Popen[bytes]
    log: Path
    ssl_context: ssl.SSLContext | None = None  # trusts the test CA when served over TLS

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    async def query(self, promql: str) -> dict[str, Any]:
        async with ClientSession(timeout=ClientTimeout(total=5)) as http:
            async with http.get(
                f"{self.url}/api/v1/query", params={"query": promql}, ssl=self._ssl
            ) as resp:
                return await resp.json()

    @property
    def _ssl(self) -> ssl.SSLContext | bool:
        return self.ssl_context or True


async def wait_until(
    check: Callable[[], Awaitable[bool]], *, deadline_seconds: float, what: str
) -> None:
    """Poll `check` until it holds; fail with `what` after the deadline (real servers only)."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up after {deadline_seconds:g}s waiting for {what}")
        await asyncio.sleep(0.1)


def _prometheus_argv(root: Path, targets: list[str], tls: TlsFiles | None) -> list[str]:
    """The command line of a Prometheus scraping `targets` every second as job "volcano",
    its config and TSDB under `root`, on a free port (the last argument names it)."""
    extra: list[str] = []
    if tls is not None:
        web_config = root / "web.yml"
        web_config.write_text(
            json.dumps(
                {"tls_server_config": {"cert_file": str(tls.cert), "key_file": str(tls.key)}}
            )
        )
        extra.append(f"--web.config.file={web_config}")
    config = root / "prometheus.yml"
    config.write_text(
        json.dumps(  # JSON is YAML
            {
                "global": {
                    "scrape_interval": "1s",
                    "scrape_timeout": "900ms",
                    "evaluation_interval": "1s",
                },
                "scrape_configs": [
                    {"job_name": "volcano", "static_configs": [{"targets": targets}]}
                ],
            }
        )
    )
    return [
        PROMETHEUS_BINARY,
        f"--config.file={config}",
        f"--storage.tsdb.path={root / 'data'}",
        "--log.level=warn",
        *extra,
        f"--web.listen-address=127.0.0.1:{free_port()}",
    ]


def _url(argv: list[str], tls: TlsFiles | None) -> str:
    address = argv[-1].removeprefix("--web.listen-address=")
    return f"{'https' if tls is not None else 'http'}://{address}"


@contextlib.asynccontextmanager
async def running_prometheus(
    targets: Iterable[str], *, tls: TlsFiles | None = None, deadline_seconds: float = 30.0
) -> AsyncIterator[PrometheusProcess]:
    """The real Prometheus scraping `targets` (host:port) every second as job "volcano",
    served over HTTPS with `tls`'s server certificate if given.

    Ready when /-/ready answers 200 and every target has been scraped up at least once."""
    targets = list(targets)
    with tempfile.TemporaryDirectory(prefix="prom-test-") as tmp:
        root = Path(tmp)
        argv = _prometheus_argv(root, targets, tls)
        client_ssl = ssl.create_default_context(cafile=str(tls.ca_cert)) if tls else None
        log = root / "prometheus.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out
            )
        server = PrometheusProcess(_url(argv, tls), process, log, client_ssl)
        try:
            await _wait_ready(server, targets, deadline_seconds)
            yield server
        finally:
            await _stop(process)


@contextlib.contextmanager
def prometheus_server(
    targets: Iterable[str], *, deadline_seconds: float = 30.0
) -> Iterator[PrometheusProcess]:
    """`running_prometheus` for targets served by other processes, without an event loop
    (a session-wide fixture outlives every test's loop): started and waited for
    synchronously, stopped (terminate, then kill) when the context ends."""
    targets = list(targets)
    with tempfile.TemporaryDirectory(prefix="prom-test-") as tmp:
        root = Path(tmp)
        argv = _prometheus_argv(root, targets, None)
        log = root / "prometheus.log"
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        server = PrometheusProcess(_url(argv, None), process, log)
        try:
            _wait_ready_blocking(server, process, targets, deadline_seconds)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_ready_blocking(
    server: PrometheusProcess, process: subprocess.Popen[bytes], targets: list[str], deadline: float
) -> None:
    """`_wait_ready` for a server started by `subprocess`: /-/ready, then every target up."""
    give_up = time.monotonic() + deadline
    query = urllib.parse.urlencode({"query": 'up{job="volcano"} == 1'})
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited with {process.returncode}:\n{server.log_tail()}")
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    with urllib.request.urlopen(
                        f"{server.url}/api/v1/query?{query}", timeout=2
                    ) as r:
                        body = json.loads(r.read())
                    up = {s["metric"].get("instance") for s in body["data"]["result"]}
                    if set(targets) <= up:
                        return
        if time.monotonic() > give_up:
            raise TimeoutError(
                f"prometheus not ready with every target scraped after {deadline:g}s; "
                f"log:\n{server.log_tail()}"
            )
        time.sleep(0.1)


async def _wait_ready(server: PrometheusProcess, targets: list[str], deadline: float) -> None:
    async with ClientSession(timeout=ClientTimeout(total=2)) as http:

        async def ready() -> bool:
            if server.process.returncode is not None:
                raise RuntimeError(
                    f"prometheus exited with {server.process.returncode}:\n{server.log_tail()}"
                )
            try:
                async with http.get(f"{server.url}/-/ready", ssl=server._ssl) as resp:
                    return resp.status == 200
            except OSError:
                return False

        async def scraped() -> bool:
            if not targets:
                return True
            body = await server.query('up{job="volcano"} == 1')
            up = {s["metric"].get("instance") for s in body["data"]["result"]}
            return set(targets) <= up

        try:
            await wait_until(ready, deadline_seconds=deadline, what="prometheus /-/ready")
            await wait_until(scraped, deadline_seconds=deadline, what="first scrape")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; prometheus log:\n{server.log_tail()}") from None


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), 10)
    except TimeoutError:
        process.kill()
        await process.wait()


# ---- an auth-checking reverse proxy ----------------------------------------------------------


@dataclass
class AuthProxy:
    """Forwards GETs to `upstream` only with `Authorization: Bearer <token>`, else 401 —
    what kube-rbac-proxy or an oauth proxy in front of Prometheus does."""

    upstream: str
    token: str
    url: str = ""
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        got = request.headers.get("Authorization", "")
        self.seen.append(got)
        if got != f"Bearer {self.token}":
            return web.Response(status=401, text="Unauthorized")
        async with ClientSession(timeout=ClientTimeout(total=10)) as http:
            async with http.get(f"{self.upstream}{request.path}", params=request.query) as up:
                return web.Response(
                    status=up.status, body=await up.read(), content_type=up.content_type
                )


@contextlib.asynccontextmanager
async def auth_proxy(upstream: str, token: str) -> AsyncIterator[AuthProxy]:
    proxy = AuthProxy(upstream, token)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    runner, port = await _start_site(app)
    proxy.url = f"http://127.0.0.1:{port}"
    try:
        yield proxy
    finally:
        await runner.cleanup()
