"""A platform engineer's first day on the real API server (issue 31): the commands for
people print their answer on stdout and log, if at all, short human lines on stderr
(never the daemon's JSON); `explain` tells a job that does not exist (`not found`) from
one the autoscaler does not manage (`not managed: <reason>`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from builders import pytorchjob
from kubeserver import EnvTest
from promserver import fake_prometheus
from test_faults import daemon_env, live_body

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(120)


def _job(ns: str, queue: str, name: str, **kw: Any) -> dict[str, Any]:
    job = pytorchjob(name, ns, queue=queue, replicas=1, active=1, max_replicas=4, **kw)
    job.pop("status")
    job["metadata"] = {"name": name, "namespace": ns}
    return job


async def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, stderr a pipe (not a terminal: where the daemon would
    log JSON); in a thread, so the test's fake Prometheus answers meanwhile."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "autoscaler", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _no_daemon_logs(done: subprocess.CompletedProcess[str]) -> None:
    for line in done.stdout.splitlines():
        assert '"event"' not in line and "[info" not in line, f"a log line on stdout: {line}"
    for line in done.stderr.splitlines():
        assert not line.lstrip().startswith("{"), f"a JSON log line on stderr: {line}"
        assert line.startswith("elastic-autoscaler: "), f"not a short human line: {line}"


async def test_live_commands_print_no_daemon_logs_and_explain_tells_missing_from_unmanaged(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    queue = f"{real_ns}-q"
    envtest.apply_queue(queue)
    grow = _job(real_ns, queue, "grow")
    plain = _job(real_ns, queue, "plain")
    del plain["spec"]["elasticPolicy"]  # not declared elastic: NotElastic
    for job in (grow, plain):
        envtest.create(job)
        envtest.patch_status(job, {"replicaStatuses": {"Worker": {"active": 1}}})
    other = envtest.create_namespace()
    envtest.create(_job(other, queue, "elsewhere"))  # exists, in a namespace not watched
    async with fake_prometheus(live_body(**{queue: 2})) as prom:
        env = daemon_env(tmp_path, envtest.kubeconfig(), prom.url, namespaces=f'["{real_ns}"]')
        env.pop("AUTOSCALER_LOG_FORMAT")  # the default: auto (JSON when not a terminal)

        done = await _cli(env, "plan")
        assert done.returncode == 0, done.stderr
        assert f"{real_ns}/grow" in done.stdout and "ScaleUpIdleGpus" in done.stdout
        _no_daemon_logs(done)
        done = await _cli(env, "plan", "-o", "json")
        assert done.returncode == 0 and json.loads(done.stdout)["actions"], done.stderr
        _no_daemon_logs(done)
        done = await _cli(env, "status", "--live", "-o", "wide")
        assert done.returncode == 0 and f"{real_ns}/plain" in done.stdout, done.stderr
        _no_daemon_logs(done)

        done = await _cli(env, "explain", f"{real_ns}/nope", "--live")
        assert done.returncode == 1 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and f"{real_ns}/nope: not found" in done.stderr
        done = await _cli(env, "explain", f"{other}/elsewhere", "--live")
        assert done.returncode == 1 and done.stderr.count("\n") == 1
        assert f"{other}/elsewhere (PyTorchJob): not managed: " in done.stderr
        assert "not found" not in done.stderr
        done = await _cli(env, "explain", f"{real_ns}/plain", "--live")
        assert done.returncode == 0, done.stderr
        assert "\nNot managed: NotElastic: " in done.stdout
        _no_daemon_logs(done)
