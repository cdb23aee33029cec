"""`elastic-autoscaler plan --snapshot`: both outputs, and the error exits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from builders import podgroup, pytorchjob

from autoscaler.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config" / "example-snapshot.yaml"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_example_snapshot_table(capsys):
    code, out, _ = run(capsys, "plan", "--snapshot", str(EXAMPLE))
    assert code == 0
    assert "vision/resnet-small" in out and "ScaleUpIdleGpus" in out
    assert "ReclaimForPending" in out and "HoldCooldown" in out and "InvalidPolicy" in out
    assert "QUEUE" in out and "team-b" in out


def test_volcano_example_snapshot_grows_both_departments_into_their_share(capsys):
    code, out, _ = run(
        capsys,
        "plan",
        "--snapshot",
        str(ROOT / "config" / "example-snapshot-volcano.yaml"),
        "--output",
        "json",
    )
    assert code == 0
    plan = json.loads(out)
    assert {a["name"]: a["to"] for a in plan["actions"]} == {"bert": 8, "ranker": 8}
    research = plan["queues"]["research"]
    assert research["plugin"] == "proportion" and research["headroom_gpus"] == 6
    assert research["inputs"]["share"] == 8 and research["limits"]["share"] == 6


def test_example_snapshot_json_is_stable_and_documented_shape(capsys):
    code, out, _ = run(capsys, "plan", "--snapshot", str(EXAMPLE), "--output", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["now"] == "2026-11-22T10:00:00Z"
    assert set(doc) >= {"now", "actions", "jobs", "queues"}
    moves = {(a["namespace"], a["name"]): (a["from"], a["to"], a["reason"]) for a in doc["actions"]}
    assert moves[("nlp", "bert-pretrain")] == (8, 4, "ReclaimForPending")
    assert moves[("vision", "resnet-small")] == (2, 4, "ScaleUpIdleGpus")
    assert all(a["from"] != a["to"] for a in doc["actions"])
    assert len(doc["jobs"]) == 14
    # left alone the way their operators need, each with its own reason
    why = {(j["namespace"], j["name"]): (j["reason"], j["message"]) for j in doc["jobs"]}
    assert why[("speech", "hubert-nogang")][0] == "HoldNoMinAvailable"
    assert "minAvailable is not set" in why[("speech", "hubert-nogang")][1]
    assert why[("nlp", "ocr-fixed")][0] == "NotElastic"
    assert "PADDLE_NNODES" in why[("nlp", "ocr-fixed")][1]
    assert why[("speech", "fastspeech")][0] == "SkipOperatorHpa"
    assert "HorizontalPodAutoscaler speech/fastspeech" in why[("speech", "fastspeech")][1]
    # the three kinds side by side: a PaddleJob and a Volcano Job grow in team-d
    assert moves[("nlp", "ernie-finetune")] == (2, 3, "ScaleUpIdleGpus")
    assert moves[("vision", "yolo-train")] == (1, 4, "ScaleUpIdleGpus")
    kinds = {(j["namespace"], j["name"]): j["kind"] for j in doc["jobs"]}
    assert kinds[("nlp", "ernie-finetune")] == "PaddleJob"
    assert kinds[("vision", "yolo-train")] == "Job"
    assert {
        "namespace",
        "name",
        "queue",
        "replicas",
        "min",
        "max",
        "target",
        "reason",
        "message",
    } <= set(doc["jobs"][0])
    assert doc["queues"]["team-b"]["pending_gpus"] == 4
    assert doc["queues"]["team-a"]["granted_gpus"] == 6
    # same input, same bytes
    assert run(capsys, "plan", "--snapshot", str(EXAMPLE), "-o", "json")[1] == out


def test_now_flag_overrides_the_snapshot(capsys, tmp_path):
    snap = {
        "now": "2026-11-22T10:00:00Z",
        "free_gpus": {"team-a": 4},
        "objects": [
            pytorchjob(
                "j", annotations={"elastic-autoscaler.io/last-scale-time": "2026-11-22T09:58:00Z"}
            )
        ],
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(snap))
    held = json.loads(run(capsys, "plan", "--snapshot", str(path), "-o", "json")[1])
    assert held["jobs"][0]["reason"] == "HoldCooldown"
    later = json.loads(
        run(capsys, "plan", "--snapshot", str(path), "-o", "json", "--now", "2026-11-22T11:00:00Z")[
            1
        ]
    )
    assert later["jobs"][0]["reason"] == "ScaleUpIdleGpus" and later["jobs"][0]["target"] == 4


def test_kind_list_objects_and_unknown_queue(capsys, tmp_path):
    snap = {
        "free_gpus": {},
        "objects": {
            "kind": "List",
            "items": [pytorchjob("j", queue="nowhere"), podgroup("g", queue="nowhere")],
        },
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(snap))
    doc = json.loads(run(capsys, "plan", "--snapshot", str(path), "-o", "json")[1])
    assert doc["jobs"][0]["reason"] == "HoldMetricsMissing"
    assert doc["actions"] == []


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "cannot read"),
        ("{not: [valid", "not valid YAML"),
        ("- just a list", "must be a mapping"),
        ("free_gpus: 3\n", "free_gpus must be a mapping"),
        ("now: yesterday\n", "now must be an RFC 3339 time"),
        ("objects: 5\n", "objects must be a list"),
        ("surprise: 1\n", "unknown key"),
    ],
)
def test_unreadable_snapshot_exits_2_with_one_line(capsys, tmp_path, content, needle):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    code, out, err = run(capsys, "plan", "--snapshot", str(path))
    assert code == 2 and out == ""
    assert needle in err and str(path) in err and len(err.strip().splitlines()) == 1


def test_bad_settings_exit_2_naming_the_field(capsys, monkeypatch):
    monkeypatch.setenv("AUTOSCALER_MIN_STEP_WORKERS", "zero")
    code, _, err = run(capsys, "plan", "--snapshot", str(EXAMPLE))
    assert code == 2 and "min_step_workers" in err and "AUTOSCALER_MIN_STEP_WORKERS" in err


def test_bad_now_flag_exits_2(capsys):
    code, _, err = run(capsys, "plan", "--snapshot", str(EXAMPLE), "--now", "soon")
    assert code == 2 and "--now" in err


def test_module_entry_point_runs():
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler", "plan", "--snapshot", str(EXAMPLE), "-o", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["actions"]


def test_run_without_a_usable_kubeconfig_exits_2(tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\n")  # no current-context
    env = {
        **os.environ,
        "AUTOSCALER_KUBECONFIG": str(bad),
        "AUTOSCALER_LISTEN_PORT": "0",
        "AUTOSCALER_LISTEN_HOST": "127.0.0.1",
    }
    # a subprocess: `run` configures process-wide logging, as a daemon should
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler", "run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "kubeconfig" in proc.stderr and "no clusters" in proc.stderr
    assert "Traceback" not in proc.stderr
    # one line naming the setting, where its value came from and what sets it
    (line,) = proc.stderr.splitlines()
    assert line.endswith(
        "no clusters (setting kubeconfig from AUTOSCALER_KUBECONFIG; --kubeconfig or "
        "AUTOSCALER_KUBECONFIG sets it)"
    ), line


# ---- errors a user can act on: one line, the right exit code -----------------------------

GOOD_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _kubeconfig(tmp_path, case: str):
    path = tmp_path / "kubeconfig"
    if case == "missing":
        return path
    if case == "directory":
        path.mkdir()
        return path
    path.write_text(
        {
            "not-yaml": "clusters: [unclosed\n  - : :\n",
            "not-a-mapping": "- just\n- a list\n",
            "no-current-context": "apiVersion: v1\nkind: Config\n",
            "unknown-context": GOOD_KUBECONFIG.replace("current-context: x", "current-context: y"),
            "binary": "\udcff",
        }[case],
        errors="surrogateescape",
    )
    return path


@pytest.mark.parametrize(
    ("case", "says"),
    [
        ("missing", "no such file"),
        ("directory", "is a directory"),
        ("not-yaml", ":2:5: kubeconfig not YAML: expected"),
        ("not-a-mapping", "not a mapping"),
        ("no-current-context", "no clusters"),
        ("unknown-context", "current-context 'y' is not among its contexts (x)"),
        ("binary", "cannot read"),
    ],
)
def test_every_kubeconfig_failure_is_one_line_naming_the_file(
    tmp_path, capsys, monkeypatch, case, says
):
    path = _kubeconfig(tmp_path, case)
    monkeypatch.setenv("AUTOSCALER_KUBECONFIG", str(path))
    code, out, err = run(capsys, "plan")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(path) in err and says in err, err


def test_plan_against_an_unreachable_cluster_is_a_run_time_failure(tmp_path, capsys, monkeypatch):
    path = tmp_path / "kubeconfig"
    path.write_text(GOOD_KUBECONFIG)  # 127.0.0.1:1: nothing listens there
    monkeypatch.setenv("AUTOSCALER_KUBECONFIG", str(path))
    monkeypatch.setenv("AUTOSCALER_KUBE_REQUEST_TIMEOUT_SECONDS", "2")
    code, _, err = run(capsys, "plan")
    assert code == 1 and err.count("\n") == 1
    assert "cannot read the live cluster" in err


def test_run_says_once_that_it_waits_for_the_api(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(GOOD_KUBECONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOSCALER_")}
    env.update(
        {
            "AUTOSCALER_KUBECONFIG": str(path),
            "AUTOSCALER_LISTEN_PORT": "0",
            "AUTOSCALER_LISTEN_HOST": "127.0.0.1",
            "AUTOSCALER_LEADER_ELECTION": "false",
            "AUTOSCALER_LOG_FORMAT": "json",
            "AUTOSCALER_INTERVAL_SECONDS": "1",
            "AUTOSCALER_MIN_INTERVAL_SECONDS": "0",
            "AUTOSCALER_CYCLE_DEADLINE_SECONDS": "2",
            "HOME": str(tmp_path),
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoscaler", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        assert proc.stderr is not None
        for line in proc.stderr:  # the daemon retries every second; read a few cycles
            lines.append(json.loads(line))
            if sum(1 for e in lines if e.get("event") == "cycle") >= 3:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    waiting = [e for e in lines if e["event"] == "waiting for the Kubernetes API"]
    assert [e["url"] for e in waiting] == ["https://127.0.0.1:1"]
    warnings = [e for e in lines if e.get("level") == "warning"]
    # one warning per cache for the whole outage, not one per retry: nine caches (three
    # job kinds, PodGroups, Queues, PriorityClasses, Nodes, bound Pods, HPAs)
    caches = [w for w in warnings if w["event"] == "kube.cache_error"]
    assert len(caches) <= 9, [w["event"] for w in warnings]
    # and at most one each for Prometheus at start, whether the status object can be
    # written (status.check: the API does not answer), and it not read nor written
    # the Prometheus warning names the setting to check, where it came from, what sets it
    for check in (w for w in warnings if w["event"] == "prometheus.check"):
        assert check["error"].endswith(
            "(setting prometheus_url from the default; --prometheus-url or "
            "AUTOSCALER_PROMETHEUS_URL sets it)"
        ), check
    others = sorted(w["event"] for w in warnings if w["event"] != "kube.cache_error")
    once = {"prometheus.check", "status.check", "status.not_restored", "status.write_failed"}
    assert len(others) == len(set(others)) and set(others) <= once, others


def test_a_bad_value_in_the_config_file_names_the_file_and_key(tmp_path, capsys):
    config = tmp_path / "autoscaler.yaml"
    config.write_text("min_step_workers: zero\n")
    code, _, err = run(capsys, "plan", "--snapshot", str(EXAMPLE), "--config", str(config))
    assert code == 2 and f"({config}, key min_step_workers)" in err
    assert "AUTOSCALER_MIN_STEP_WORKERS" not in err  # never set: not the culprit


def test_logging_follows_stderr_as_it_is_when_writing(capsys):
    """configure_logging in one place (live plan, in process) must not bind the logger to
    that moment's stderr: a later swap (another test's capture) would leave it writing
    into a closed stream."""
    import io

    import structlog

    from autoscaler.report.logs import configure_logging
    from autoscaler.settings import Settings

    configure_logging(Settings(log_format="json"))
    first, second = io.StringIO(), io.StringIO()
    saved = sys.stderr
    try:
        sys.stderr = first
        structlog.get_logger("t").warning("one")
        first.close()
        sys.stderr = second
        structlog.get_logger("t").warning("two")
    finally:
        sys.stderr = saved
    assert '"event": "two"' in second.getvalue()


def test_prometheus_url_applies_to_the_live_cluster_not_to_a_snapshot(capsys):
    flag = ("--prometheus-url", "http://p:9090")
    code, out, err = run(capsys, "plan", "--snapshot", str(EXAMPLE), *flag)
    assert code == 2 and out == ""
    assert err.endswith(": --prometheus-url applies to the live cluster, not to --snapshot\n")
