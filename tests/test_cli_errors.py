"""Every error a newcomer met is one line naming the problem, with the right exit code:
2 for unusable input, 1 for a failure at run time, never 0 for a plan that could not be
made. Each case failed on the old code (a traceback, raw HTTP headers, or exit 0)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

from builders import pytorchjob
from fakekube import FakeKubeApi
from kubeserver import EnvTest
from promserver import Canned, error_body, fake_prometheus
from test_faults import live_body

from autoscaler.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config" / "example-snapshot.yaml"


async def _plan(capsys, monkeypatch, kubeconfig: Path, prom_url: str, *argv: str):
    """`plan` (live) as a user runs it: settings from the environment."""
    monkeypatch.setenv("AUTOSCALER_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS_URL", prom_url)
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS_RETRIES", "0")
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS_TIMEOUT_SECONDS", "3")
    code = await asyncio.to_thread(main, ["plan", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    """The error line; nothing else on stderr but log lines, no traceback, no headers."""
    assert "Traceback" not in err and "HTTP response headers" not in err, err
    errors = [line for line in err.splitlines() if "error:" in line and "{" not in line[:1]]
    assert len(errors) == 1, err
    return errors[0]


# ---- live `plan`: Prometheus -------------------------------------------------------------


async def test_live_plan_with_prometheus_unreachable_exits_1(
    kube: FakeKubeApi, tmp_path, capsys, monkeypatch
):
    kube.put(pytorchjob("a", queue="team-a", replicas=1, active=1, max_replicas=4))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    code, out, err = await _plan(capsys, monkeypatch, kube.write_kubeconfig(tmp_path / "k"), url)
    line = _one_error_line(err)
    assert code == 1 and out == ""
    assert "Prometheus" in line and "cannot connect" in line and url in line


async def test_live_plan_with_a_query_prometheus_refuses_exits_2(
    kube: FakeKubeApi, tmp_path, capsys, monkeypatch
):
    kube.put(pytorchjob("a", queue="team-a", replicas=1, active=1, max_replicas=4))
    refused = error_body("bad_data", "1:20: parse error: unclosed left parenthesis")
    async with fake_prometheus(Canned(refused, status=400)) as prom:
        monkeypatch.setenv("AUTOSCALER_FREE_GPUS_QUERY", "sum by (queue_name) (")
        code, out, err = await _plan(
            capsys, monkeypatch, kube.write_kubeconfig(tmp_path / "k"), prom.url
        )
    line = _one_error_line(err)
    assert code == 2 and out == ""
    assert "refused the query" in line and "parse error" in line and "free_gpus_query" in line


def test_a_prometheus_url_that_is_not_a_url_exits_2(capsys, monkeypatch):
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS_URL", "prometheus:9090")
    code = main(["plan"])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and "prometheus_url" in line and "is not an http(s) URL" in line


async def test_live_plan_that_is_made_exits_0(kube: FakeKubeApi, tmp_path, capsys, monkeypatch):
    """The other side: a queue Prometheus knows nothing of holds, and that is a plan."""
    kube.put(pytorchjob("a", queue="team-a", replicas=1, active=1, max_replicas=4))
    kube.put(pytorchjob("b", queue="team-z", replicas=1, active=1, max_replicas=4))
    async with fake_prometheus(live_body(**{"team-a": 2})) as prom:
        monkeypatch.setenv("AUTOSCALER_FREE_GPUS_QUERY", "elastic_autoscaler_test_free_gpus")
        code, out, err = await _plan(
            capsys, monkeypatch, kube.write_kubeconfig(tmp_path / "k"), prom.url, "-o", "json"
        )
    assert code == 0, err
    assert '"HoldMetricsMissing"' in out and '"to": 3' in out


# ---- live `plan`: the API server says 401 or 403 -------------------------------------------


async def test_403_names_the_verb_and_resource_and_401_the_credentials(
    envtest: EnvTest, real_ns: str, tmp_path, capsys, monkeypatch
):
    envtest.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "nobody", "namespace": real_ns},
        }
    )
    monkeypatch.setenv("HOME", str(tmp_path))
    token = envtest.mint_token(real_ns, "nobody")
    url = "http://127.0.0.1:9"  # never asked: the cluster is read first
    code, _, err = await _plan(capsys, monkeypatch, envtest.kubeconfig(token, "nobody"), url)
    line = _one_error_line(err)
    assert code == 1
    assert "HTTP 403 Forbidden" in line and "RBAC does not allow" in line
    # which verb on which resource: ours, and the server's own words
    assert "cannot list resource" in line and f"system:serviceaccount:{real_ns}:nobody" in line

    code, _, err = await _plan(capsys, monkeypatch, envtest.kubeconfig("not-a-token", "x"), url)
    line = _one_error_line(err)
    assert code == 1 and "HTTP 401 Unauthorized" in line and "credentials" in line
    assert line.count("list ") == 1  # the request named once


# ---- settings and files ------------------------------------------------------------------------


def test_a_settings_file_that_is_not_utf8_exits_2(tmp_path, capsys):
    config = tmp_path / "settings.yaml"
    config.write_bytes(b"cooldown_seconds: 30 # caf\xe9\n")
    code = main(["plan", "--snapshot", str(EXAMPLE), "--config", str(config)])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2 and str(config) in line and "not UTF-8" in line and "0xe9" in line


def test_an_autoscaler_variable_with_a_typo_exits_2(capsys, monkeypatch):
    monkeypatch.setenv("AUTOSCALER_COOLDOWN_SECOND", "30")
    code = main(["plan", "--snapshot", str(EXAMPLE)])
    line = _one_error_line(capsys.readouterr().err)
    assert code == 2
    assert "AUTOSCALER_COOLDOWN_SECOND (did you mean AUTOSCALER_COOLDOWN_SECONDS?)" in line


def test_a_settings_file_key_with_a_typo_gets_the_same_did_you_mean(tmp_path):
    """Issue 44: the settings file's typo is told as the variable's is, as a user runs it."""
    config = tmp_path / "autoscaler.yaml"
    config.write_text("cooldown_second: 30\nAUTOSCALER_MIN_STEP_WORKERS: 1\nbogus: 1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    argv = ["plan", "--snapshot", str(EXAMPLE), "--config", str(config)]
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = _one_error_line(done.stderr)
    assert done.returncode == 2 and done.stdout == ""
    assert f"config file {config}: unknown setting(s): " in line
    assert "cooldown_second (did you mean cooldown_seconds?)" in line
    assert "AUTOSCALER_MIN_STEP_WORKERS (did you mean min_step_workers?)" in line
    assert "bogus (did" not in line and line.count("bogus") == 1  # nothing close: named


def test_documented_variables_and_service_links_are_accepted(capsys, monkeypatch):
    """Compatible: every setting's variable, in any case as before, and the variables
    Kubernetes injects for a Service named `autoscaler` in the pod's namespace."""
    monkeypatch.setenv("AUTOSCALER_COOLDOWN_SECONDS", "30")
    monkeypatch.setenv("autoscaler_min_step_workers", "1")
    monkeypatch.setenv("AUTOSCALER_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("AUTOSCALER_PORT_8080_TCP_ADDR", "10.0.0.1")
    monkeypatch.setenv("AUTOSCALER_PORT", "tcp://10.0.0.1:8080")
    assert main(["plan", "--snapshot", str(EXAMPLE)]) == 0


def test_snapshot_objects_that_are_not_planned_are_counted_in_a_warning(tmp_path, capsys):
    text = EXAMPLE.read_text().replace(
        "objects:\n",
        "objects:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n"
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: y}}\n"
        "- {metadata: {name: no-kind}}\n"
        "- {apiVersion: batch/v1, kind: Job, metadata: {name: not-volcano}}\n",
        1,
    )
    path = tmp_path / "snapshot.yaml"
    path.write_text(text)
    code = main(["plan", "--snapshot", str(path), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0 and out.startswith("{")
    assert err.strip().splitlines() == [
        f"elastic-autoscaler: warning: {path}: 4 object(s) of kinds not planned ignored: "
        "2 ConfigMap (v1), 1 Job (batch/v1), 1 no kind"
    ]


# ---- `run`: the port, the start-up check -------------------------------------------------------


def _run(env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", "run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _env(tmp_path: Path, kubeconfig: Path, prom_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("AUTOSCALER_")}
    env.update(
        {
            "AUTOSCALER_KUBECONFIG": str(kubeconfig),
            "AUTOSCALER_PROMETHEUS_URL": prom_url,
            "AUTOSCALER_PROMETHEUS_RETRIES": "0",
            "AUTOSCALER_PROMETHEUS_TIMEOUT_SECONDS": "3",
            "AUTOSCALER_LEADER_ELECTION": "false",
            "AUTOSCALER_LISTEN_HOST": "127.0.0.1",
            "AUTOSCALER_LISTEN_PORT": "0",
            "AUTOSCALER_LOG_FORMAT": "json",
            "HOME": str(tmp_path),
        }
    )
    env.update({f"AUTOSCALER_{k.upper()}": v for k, v in extra.items()})
    return env


async def test_a_taken_listen_port_is_one_line_and_exit_1(kube: FakeKubeApi, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _env(tmp_path, kube.write_kubeconfig(tmp_path / "k"), "http://127.0.0.1:9")
        env["AUTOSCALER_LISTEN_PORT"] = str(port)
        done = await asyncio.to_thread(_run, env)
    line = _one_error_line(done.stderr)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in line and "in use" in line
    assert "listen_port" in line


async def test_run_stops_at_start_on_a_query_prometheus_refuses(kube: FakeKubeApi, tmp_path):
    refused = error_body("bad_data", "1:20: parse error: unclosed left parenthesis")
    async with fake_prometheus(Canned(refused, status=400)) as prom:
        env = _env(
            tmp_path,
            kube.write_kubeconfig(tmp_path / "k"),
            prom.url,
            free_gpus_query="sum by (queue_name) (",
        )
        done = await asyncio.to_thread(_run, env)
    line = _one_error_line(done.stderr)
    assert done.returncode == 2 and "refused the query" in line and "parse error" in line


def test_run_exits_2_on_a_settings_file_that_is_not_utf8(tmp_path):
    env = _env(tmp_path, tmp_path / "no-kubeconfig", "http://127.0.0.1:9")
    config = tmp_path / "c.yaml"
    config.write_bytes(b"\xff\xfe")
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "run", "--config", str(config)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "not UTF-8" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
