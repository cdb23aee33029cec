"""A platform engineer's first day on the real API server (issue 31): the commands for
people print their answer on stdout and log, if at all, short human lines on stderr
(never the daemon's JSON); `explain` tells a job that does not exist (`not found`) from
one the autoscaler does not manage (`not managed: <reason>`)."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import pytorchjob, with_master
from kubeserver import EnvTest
from promserver import fake_prometheus
from test_faults import daemon_env, daemon_process, live_body

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


def _dead_url() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    errors = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    return errors[0]


async def test_the_first_live_commands_take_prometheus_url_and_name_the_setting_to_fix(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    """Issue 44: --prometheus-url on plan, status --live and explain --live, winning over
    the variable; a Prometheus or kubeconfig failure says in one line which setting it
    was, where its value came from, and the flag and the variable that set it."""
    queue = f"{real_ns}-q"
    envtest.apply_queue(queue)
    job = _job(real_ns, queue, "grow")
    envtest.create(job)
    envtest.patch_status(job, {"replicaStatuses": {"Worker": {"active": 1}}})
    dead = _dead_url()
    async with fake_prometheus(live_body(**{queue: 2})) as prom:
        env = daemon_env(tmp_path, envtest.kubeconfig(), dead, namespaces=f'["{real_ns}"]')

        done = await _cli(env, "plan")  # the variable's URL: nobody answers there
        line = _one_line(done)
        assert done.returncode == 1 and dead in line and "cannot connect" in line
        assert line.endswith(
            "(setting prometheus_url from AUTOSCALER_PROMETHEUS_URL; --prometheus-url or "
            "AUTOSCALER_PROMETHEUS_URL sets it)"
        ), line
        done = await _cli({**env, "AUTOSCALER_PROMETHEUS_URL": prom.url}, "plan")
        assert done.returncode == 0, done.stderr
        done = await _cli(
            {**env, "AUTOSCALER_PROMETHEUS_URL": prom.url}, "plan", "--prometheus-url", dead
        )
        assert done.returncode == 1 and "prometheus_url from --prometheus-url;" in _one_line(done)

        # the flag wins over the variable, on every command that reads Prometheus
        flag = ("--prometheus-url", prom.url)
        done = await _cli(env, "plan", *flag)
        assert done.returncode == 0 and f"{real_ns}/grow" in done.stdout, done.stderr
        done = await _cli(env, "status", "--live", *flag, "-o", "json")
        assert done.returncode == 0 and json.loads(done.stdout)["jobs"], done.stderr
        done = await _cli(env, "explain", f"{real_ns}/grow", "--live", *flag)
        assert done.returncode == 0 and "ScaleUpIdleGpus" in done.stdout, done.stderr
        done = await _cli(env, "status", *flag)  # the status object is the daemon's
        assert done.returncode == 2 and "--prometheus-url applies with --live" in done.stderr

        # a kubeconfig: the file, the problem, and the setting that picked it
        missing = tmp_path / "nope.yaml"
        done = await _cli(env, "plan", *flag, "--kubeconfig", str(missing))
        assert done.returncode == 2
        assert _one_line(done).endswith(
            f"kubeconfig {missing}: no such file (setting kubeconfig from --kubeconfig; "
            "--kubeconfig or AUTOSCALER_KUBECONFIG sets it)"
        ), done.stderr
        done = await _cli(env, "explain", f"{real_ns}/grow", "--live", *flag, "--context", "x")
        line = _one_line(done)
        assert done.returncode == 2 and "no context 'x'" in line
        assert "kubeconfig from AUTOSCALER_KUBECONFIG" in line
        assert "kube_context from --context; --context or AUTOSCALER_KUBE_CONTEXT sets it" in line


async def test_run_says_at_start_whether_it_can_write_its_status_and_status_says_why_not(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    """Issue 44: `run` (a dry run from a laptop, as a first user starts it) says in one
    line at start whether it can write its status object (namespace, rights) and what to
    do; `status` without the object says why it may be missing and what to check."""
    missing = f"{real_ns}-nowhere"
    async with fake_prometheus(live_body()) as prom:
        env = daemon_env(tmp_path, envtest.kubeconfig(), prom.url, namespaces=f'["{real_ns}"]')
        env.pop("AUTOSCALER_PROMETHEUS_URL")  # the flag gives it, as on a laptop
        run = ("run", "--dry-run", "--prometheus-url", prom.url, "--autoscaler-namespace")

        async with daemon_process(env, (*run, missing)) as proc:
            line = await proc.wait_for("status.check", 30)
            assert await proc.stop() == 0
        assert line["ok"] is False and line["level"] == "warning", line
        assert f"namespace {missing} does not exist: create it" in line["status"], line
        assert "--autoscaler-namespace or AUTOSCALER_LEASE_NAMESPACE" in line["status"]
        done = await _cli(env, "status", "--autoscaler-namespace", missing)
        line = _one_line(done)
        assert done.returncode == 1 and f"namespace {missing} does not exist" in line
        assert "lease_namespace from --autoscaler-namespace" in line

        done = await _cli(env, "status", "--autoscaler-namespace", real_ns)
        line = _one_line(done)
        assert done.returncode == 1 and "the daemon has not written one: it is not running" in line
        assert "`status.check`" in line and "--live plans now instead" in line

        async with daemon_process(env, (*run, real_ns)) as proc:
            line = await proc.wait_for("status.check", 30)
            assert await proc.stop() == 0
        assert line["ok"] is True and "may be created" in line["status"], line

        # a ServiceAccount with no rights: told at start, not one write_failed per streak
        envtest.create(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "nobody", "namespace": real_ns},
            }
        )
        token = envtest.mint_token(real_ns, "nobody")
        env["AUTOSCALER_KUBECONFIG"] = str(envtest.kubeconfig(token, name="nobody"))
        async with daemon_process(env, (*run, real_ns)) as proc:
            line = await proc.wait_for("status.check", 30)
            assert await proc.stop() == 0
        assert line["ok"] is False and "cannot read it (HTTP 403" in line["status"], line
        assert "deploy/base/rbac.yaml" in line["status"]


async def _pod_log(env: dict[str, str], *argv: str) -> list[str]:
    """`run ARGV` as a pod runs it: stdout and stderr in one log, read until its first
    cycle is logged, then stopped with SIGTERM."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "autoscaler",
        *argv,
        cwd=str(ROOT),
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(20):
            while line := (await process.stdout.readline()).decode():
                lines.append(line.rstrip("\n"))
                if '"event": "cycle"' in line or "] cycle " in line:  # JSON or console
                    break
            process.send_signal(signal.SIGTERM)
            rest, _ = await process.communicate()
    except TimeoutError:
        raise AssertionError("\n".join(lines)) from None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return lines + rest.decode().splitlines()


async def test_a_dry_runs_pod_log_is_one_format_as_log_format_says(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    """Issue 44: a dry run's pod log mixed plain `would scale` lines (stdout) with JSON
    lines (stderr). Now every line is in log_format: JSON by default off a terminal (as
    documented), console lines when asked."""
    queue = f"{real_ns}-q"
    envtest.apply_queue(queue)
    job = _job(real_ns, queue, "grow")
    envtest.create(job)
    envtest.patch_status(job, {"replicaStatuses": {"Worker": {"active": 1}}})
    async with fake_prometheus(live_body(**{queue: 2})) as prom:
        env = daemon_env(tmp_path, envtest.kubeconfig(), prom.url, namespaces=f'["{real_ns}"]')
        env.pop("AUTOSCALER_LOG_FORMAT")  # the default: auto
        env["AUTOSCALER_LEASE_NAMESPACE"] = real_ns
        lines = await _pod_log(env, "run", "--dry-run")
        events = [json.loads(line) for line in lines]  # every line JSON
        (would,) = [e for e in events if e["event"] == "would scale"]
        assert (would["name"], would["from"], would["to"]) == ("grow", 1, 3), would
        (decided,) = [e for e in events if e["event"] == "decision" and e["name"] == "grow"]
        assert decided["message"].startswith("1 -> 3 worker(s) into idle GPUs"), decided

        lines = await _pod_log({**env, "AUTOSCALER_LOG_FORMAT": "console"}, "run", "--dry-run")
        assert not [line for line in lines if line.lstrip().startswith("{")], lines
        assert [line for line in lines if "would scale" in line and "name=grow" in line]


async def test_status_and_explain_count_a_job_with_its_master_as_plan_does(
    envtest: EnvTest, real_ns: str, tmp_path: Path
) -> None:
    """Issue 44: a rigid PyTorchJob of 3 Workers and a Master (1 GPU each) was counted 3
    while it holds 4 GPUs. Every output shows its workers and the GPUs it holds, its
    Master's included, the same numbers in each: plan, status (every format), explain."""
    queue = f"{real_ns}-q"
    envtest.apply_queue(queue)
    rigid = with_master(_job(real_ns, queue, "rigid"))
    rigid["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 3
    del rigid["spec"]["elasticPolicy"]
    grow = with_master(_job(real_ns, queue, "grow"), gpus=2)  # 1 Worker + a Master of 2
    for job, workers in ((rigid, 3), (grow, 1)):
        envtest.create(job)
        active = {"Master": {"active": 1}, "Worker": {"active": workers}}
        envtest.patch_status(job, {"replicaStatuses": active})
    expected = {f"{real_ns}/rigid": (3, 4), f"{real_ns}/grow": (1, 3)}
    async with fake_prometheus(live_body(**{queue: 2})) as prom:
        env = daemon_env(tmp_path, envtest.kubeconfig(), prom.url, namespaces=f'["{real_ns}"]')

        def rows(out: str) -> dict[str, tuple[int, int]]:
            """Each job's (WORKERS, GPUS) in the first table that has them."""
            block = next(b for b in out.split("\n\n") if " WORKERS " in b.splitlines()[0])
            head, *lines = block.splitlines()
            at = head.split().index("WORKERS")
            assert head.split()[at + 1] == "GPUS", head
            return {r.split()[0]: (int(r.split()[at]), int(r.split()[at + 1])) for r in lines}

        done = await _cli(env, "plan", "-o", "wide")
        assert done.returncode == 0 and rows(done.stdout) == expected, done.stdout
        done = await _cli(env, "plan", "-o", "json")
        jobs = json.loads(done.stdout)["jobs"]
        assert {f"{j['namespace']}/{j['name']}": (j["replicas"], j["gpus"]) for j in jobs} == (
            expected
        )
        done = await _cli(env, "status", "--live", "-o", "wide")
        assert done.returncode == 0 and rows(done.stdout) == expected, done.stdout
        done = await _cli(env, "status", "--live")  # the narrow table: the job resizing
        assert rows(done.stdout) == {f"{real_ns}/grow": (1, 3)}, done.stdout
        for output in ("json", "yaml"):
            done = await _cli(env, "status", "--live", "-o", output)
            listed = yaml.safe_load(done.stdout)["jobs"]
            assert {j["job"]: (j["replicas"], j["gpus"]) for j in listed} == expected
        done = await _cli(env, "explain", f"{real_ns}/rigid", "--live")
        assert done.returncode == 0, done.stderr
        assert "\nSize:      3 worker(s) in spec," in done.stdout
        assert "\nGPUs:      4 held: 3 by its 3 worker(s) and 1 by the other pods" in done.stdout
        done = await _cli(env, "explain", f"{real_ns}/rigid", "--live", "-o", "json")
        job = json.loads(done.stdout)["job"]
        assert (job["replicas"], job["gpus"]) == (3, 4), done.stdout
