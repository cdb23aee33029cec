"""SIGTERM/SIGINT end the daemon within 2 s whatever it waits on, on the real API server.

A rollout sends SIGTERM and, 30 s later (the chart's grace period), SIGKILL. Each test
stops a real `python -m autoscaler run` at one of the places it waits (the status object
read back at start, the caches' first sync, the start-up Prometheus check, a cycle, a
write drain), with the API server down or unreachable (the real kube-apiserver frozen
with SIGSTOP: its port accepts connections and answers nothing) or Prometheus hanging (a
socket that accepts and never answers: the real binary cannot be made to hang), and
measures the time from the signal to the process's exit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from builders import pytorchjob
from kubeserver import ApiError, EnvTest
from ports import free_port
from promserver import Canned, fake_prometheus
from test_faults import Proc, daemon_env, daemon_process, live_body
from test_real_leader import eventually_async

pytestmark = pytest.mark.timeout(120)

STOP_LIMIT_SECONDS = 2.0
STATUS = "elastic-autoscaler-status"


async def _stop(proc: Proc, sig: int = signal.SIGTERM) -> tuple[int, float]:
    """Signal the daemon; its exit code and the seconds from the signal to its exit."""
    sent = time.monotonic()
    proc.process.send_signal(sig)
    code = await asyncio.wait_for(proc.process.wait(), 30)
    took = time.monotonic() - sent
    if proc.reader is not None:
        await asyncio.wait_for(proc.reader, 5)
    return code, took


def _assert_stopped_in_time(code: int, took: float, proc: Proc) -> None:
    tail = "\n".join(proc.raw[-15:])
    print(f"signal to exit: {took:.2f}s")  # shown with -s: the numbers docs quote
    assert took < STOP_LIMIT_SECONDS, f"exit {took:.2f}s after the signal:\n{tail}"
    assert code == 0, f"exit code {code}:\n{tail}"
    assert proc.events("stopped"), tail


@contextlib.contextmanager
def frozen(envtest: EnvTest) -> Iterator[None]:
    """The real API server stopped in its tracks (SIGSTOP): connections open, no answer."""
    assert envtest._api is not None
    os.kill(envtest._api.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(envtest._api.pid, signal.SIGCONT)


class Hanging:
    """A server that accepts connections and never answers (a hung Prometheus)."""

    def __init__(self) -> None:
        self.connections = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        await reader.read()  # read what is sent, answer nothing, until the peer goes

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Hanging]:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        try:
            yield self
        finally:
            for writer in self._writers:
                writer.close()
            self._server.close()


def _down_kubeconfig(envtest: EnvTest, tmp_path: Path) -> tuple[Path, socket.socket]:
    """The real server's kubeconfig pointed at a port that refuses connections (bound, not
    listening: no other server can take it meanwhile): an API server that is down."""
    pinned = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    pinned.bind(("127.0.0.1", 0))
    text = envtest.kubeconfig().read_text()
    down = tmp_path / "down-kubeconfig"
    down.write_text(text.replace(envtest.url, f"https://127.0.0.1:{pinned.getsockname()[1]}"))
    return down, pinned


def _env(tmp_path: Path, kubeconfig: Path, prom_url: str, ns: str, **extra: Any) -> dict[str, str]:
    settings: dict[str, Any] = {
        "namespaces": f'["{ns}"]',
        "lease_namespace": ns,
        "kube_request_timeout_seconds": 10,
        "prometheus_timeout_seconds": 10,
        "cycle_deadline_seconds": 60,
        **extra,
    }
    return daemon_env(tmp_path, kubeconfig, prom_url, **settings)


async def _answers(port: int) -> bool:
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{port}/healthz") as resp,
        ):
            return resp.status in (200, 503)
    except aiohttp.ClientConnectionError:
        return False


def _holder(envtest: EnvTest, ns: str) -> str:
    lease = envtest.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/elastic-autoscaler"
    )
    return str(lease["spec"].get("holderIdentity") or "")


def _status_result(envtest: EnvTest, ns: str) -> str | None:
    try:
        cm = envtest.request("GET", f"/api/v1/namespaces/{ns}/configmaps/{STATUS}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return str(json.loads(cm["data"]["status"])["cycle"]["result"])


def _job(ns: str, queue: str, name: str) -> dict[str, Any]:
    job = pytorchjob(name, ns, queue=queue, replicas=1, active=1, max_replicas=4)
    job.pop("status")
    job["metadata"] = {"name": name, "namespace": ns}
    return job


# ---- the API server down or unreachable at start --------------------------------------------


async def test_stop_while_reading_the_status_back_from_an_unreachable_api_server(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    """At start the daemon reads its status object back: the GET hangs on a frozen API
    server (up to kube_request_timeout_seconds, 10 s)."""
    port = free_port()
    async with fake_prometheus(live_body(**{"q": 1})) as prom:
        env = _env(tmp_path, envtest.kubeconfig(), prom.url, real_ns, listen_port=port)
        with frozen(envtest):
            async with daemon_process(env) as proc:
                # /healthz answers once the server listens: the read back comes next
                await eventually_async(lambda: _answers(port), 30, "the daemon's /healthz")
                assert not proc.events("listening")  # still reading it back
                code, took = await _stop(proc)
        _assert_stopped_in_time(code, took, proc)


@pytest.mark.parametrize("api", ["down", "unreachable"])
async def test_stop_while_the_caches_wait_for_their_first_sync(
    envtest: EnvTest, real_ns: str, tmp_path: Path, api: str
) -> None:
    """Prometheus answers; the caches' first LIST cannot (refused, or hanging): the
    daemon gives them up to cycle_deadline_seconds (60 s) before its first cycle."""
    async with fake_prometheus(live_body(**{"q": 1})) as prom:
        pinned = None
        kubeconfig = envtest.kubeconfig()
        if api == "down":
            kubeconfig, pinned = _down_kubeconfig(envtest, tmp_path)
        env = _env(tmp_path, kubeconfig, prom.url, real_ns)
        try:
            with frozen(envtest) if api == "unreachable" else contextlib.nullcontext():
                async with daemon_process(env) as proc:
                    await proc.wait_for("prometheus.check", 30, ok=True)
                    assert not proc.events("caches synced")
                    code, took = await _stop(proc)
        finally:
            if pinned is not None:
                pinned.close()
        _assert_stopped_in_time(code, took, proc)


# ---- Prometheus hanging -----------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_stop_while_the_start_up_prometheus_check_hangs(
    envtest: EnvTest, real_ns: str, tmp_path: Path, sig: int
) -> None:
    """The API server answers (the Lease is taken), Prometheus accepts and never answers:
    the start-up check waits up to prometheus_timeout_seconds (10 s), and the query runs
    in a thread that the interpreter must not wait for at exit."""
    async with Hanging().serving() as prom:
        env = _env(tmp_path, envtest.kubeconfig(), prom.url, real_ns, leader_election="true")
        async with daemon_process(env) as proc:
            await proc.wait_for("leader-acquired", 30)
            await proc.wait_for("waiting for the Kubernetes API", 30)
            deadline = time.monotonic() + 10
            while prom.connections == 0:
                assert time.monotonic() < deadline, "the check never reached Prometheus"
                await asyncio.sleep(0.02)
            code, took = await _stop(proc, sig)
    _assert_stopped_in_time(code, took, proc)
    assert not proc.events("prometheus.check")  # it never answered
    assert _holder(envtest, real_ns) == ""  # the Lease released


async def test_stop_mid_cycle_while_prometheus_hangs_marks_the_status_stopped(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    """A cycle waits for Prometheus (its answer held): the cycle is cancelled after the
    grace, the status object says `stopped`, the Lease is released."""
    queue = f"{real_ns}-q"
    envtest.apply_queue(queue)
    held = Canned(live_body(**{queue: 0}), hold=True)
    async with fake_prometheus(live_body(**{queue: 0}), live_body(**{queue: 0}), held) as prom:
        env = _env(
            tmp_path,
            envtest.kubeconfig(),
            prom.url,
            real_ns,
            leader_election="true",
            interval_seconds=1,
            min_interval_seconds=0,
        )
        async with daemon_process(env) as proc:
            await proc.wait_for("cycle", 30)  # the first cycle: its status written
            deadline = time.monotonic() + 10
            while prom.hits < 3 or _status_result(envtest, real_ns) is None:
                assert time.monotonic() < deadline, "no second cycle waiting on Prometheus"
                await asyncio.sleep(0.02)
            code, took = await _stop(proc)
    _assert_stopped_in_time(code, took, proc)
    assert len(proc.events("cycle")) == 1  # the second never finished
    assert _status_result(envtest, real_ns) == "stopped"
    assert _holder(envtest, real_ns) == ""


# ---- a write drain on a frozen API server ---------------------------------------------------


async def test_stop_while_a_resize_hangs_on_a_frozen_api_server(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    """The plan is made and its patch sent, and the API server stops answering: the
    write drain waits up to kube_request_timeout_seconds; the stop does not."""
    queue = f"{real_ns}-q"
    envtest.apply_queue(queue)
    job = _job(real_ns, queue, "grow")
    envtest.create(job)
    envtest.patch_status(job, {"replicaStatuses": {"Worker": {"active": 1}}})
    held = Canned(live_body(**{queue: 2}), hold=True)  # the cycle's answer, let go below
    async with fake_prometheus(live_body(**{queue: 2}), held) as prom:
        env = _env(tmp_path, envtest.kubeconfig(), prom.url, real_ns)
        async with daemon_process(env) as proc:
            await proc.wait_for("caches synced", 30)
            deadline = time.monotonic() + 30
            while prom.hits < 2:
                assert time.monotonic() < deadline, "no cycle asked Prometheus"
                await asyncio.sleep(0.02)
            with frozen(envtest):
                prom.released.set()
                await proc.wait_for("decision", 10, name="grow", reason="ScaleUpIdleGpus")
                code, took = await _stop(proc)
    _assert_stopped_in_time(code, took, proc)
    assert not proc.events("cycle")  # the cycle never finished: it was cancelled
    replicas = envtest.get(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
    assert replicas in (1, 3)  # the patch landed whole or not at all
