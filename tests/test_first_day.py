"""A platform engineer's first day (issue 31): every message one clear line.

YAML errors as `FILE:LINE:COL: message`; no kubeconfig anywhere said in one line with
kubectl's search order; a queue without metrics shows its plugin as `unknown`; jobs the
autoscaler does not manage are never counted as settled; `explain` of a job it does not
manage says so. The ones that need a cluster are in tests/test_real_first_day.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from builders import DELETE, edit, ej, pytorchjob, snap, with_master
from test_cli import run
from test_status import cycle

from autoscaler.core.model import ClusterSnapshot, ObjectRef, Plugin, QueueState, UnmanagedJob
from autoscaler.core.reasons import Reason
from autoscaler.report.status.view import explain_text, status_table

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config" / "example-snapshot.yaml"


def _one_error_line(err: str) -> str:
    assert err.count("\n") == 1, err
    assert "<unicode string>" not in err and "^" not in err, err
    return err.removeprefix("elastic-autoscaler: error: ").rstrip("\n")


def test_a_settings_file_that_is_not_yaml_is_file_line_col_in_one_line(tmp_path, capsys):
    config = tmp_path / "autoscaler.yaml"
    config.write_text("cooldown_seconds: 5\n  growth_policy: [fill\n")
    code, out, err = run(capsys, "plan", "--snapshot", str(EXAMPLE), "--config", str(config))
    assert code == 2 and out == ""
    line = _one_error_line(err)
    assert line.startswith(f"{config}:2:16: "), line
    assert "mapping values are not allowed here" in line


def test_a_snapshot_file_that_is_not_yaml_is_file_line_col_in_one_line(tmp_path, capsys):
    bad = tmp_path / "cluster.yaml"
    bad.write_text("free_gpus: {team-a: 1}\nobjects: [\n  - {kind: PyTorchJob\n")
    code, _, err = run(capsys, "plan", "--snapshot", str(bad))
    assert code == 2
    assert _one_error_line(err).startswith(f"{bad}:3:3: not valid YAML or JSON: "), err


def test_no_kubeconfig_anywhere_is_one_line_with_the_search_order(tmp_path):
    """Not in a pod, no flag, no $KUBECONFIG, no ~/.kube/config: kubectl's order, once,
    and no `Config not found` line from the client library before it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AUTOSCALER_", "KUBERNETES_")) and k != "KUBECONFIG"
    }
    env.update({"HOME": str(tmp_path), "PYTHONPATH": str(ROOT)})
    for command in (["plan"], ["status"], ["explain", "ml/bert"]):
        done = subprocess.run(
            [sys.executable, "-m", "autoscaler", *command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and done.stdout == "", (command, done)
        line = _one_error_line(done.stderr)
        assert "Config not found" not in done.stderr
        order = ["--kubeconfig", "$KUBECONFIG", "in-cluster", f"{tmp_path}/.kube/config"]
        assert [line.index(w) for w in order] == sorted(line.index(w) for w in order), line
        assert line.endswith(
            f"{tmp_path}/.kube/config: no such file (setting kubeconfig from the default: "
            "in-cluster, else ~/.kube/config; --kubeconfig, AUTOSCALER_KUBECONFIG or "
            "$KUBECONFIG sets it)"
        ), line


def test_a_queue_without_metrics_shows_its_plugin_as_unknown():
    missing = QueueState("team-a", None, Reason.METRICS_MISSING, "no series for team-a")
    base = snap({"team-b": 2}, [ej("a", queue="team-a")])
    doc = cycle(ClusterSnapshot(queues={**base.queues, "team-a": missing}, jobs=base.jobs))
    assert doc.queues["team-a"].plugin == Plugin.UNKNOWN.value
    assert doc.queues["team-b"].plugin == Plugin.GIVEN.value  # taken as given
    wide = status_table(doc, wide=True)
    row = next(line for line in wide.splitlines() if line.startswith("team-a "))
    assert row.split()[-1] == "unknown" and "given" not in row, row


def test_a_snapshot_file_cannot_name_the_unknown_plugin(tmp_path, capsys):
    bad = tmp_path / "cluster.yaml"
    bad.write_text(yaml.safe_dump({"volcano": {"plugin": "unknown", "queues": {}}, "objects": []}))
    code, _, err = run(capsys, "plan", "--snapshot", str(bad))
    assert code == 2 and "volcano.plugin must be proportion or capacity" in err


def test_jobs_not_managed_are_not_settled_and_explain_says_not_managed():
    def left_alone(name: str, reason: Reason) -> UnmanagedJob:
        return UnmanagedJob(ObjectRef("ml", name), "q", reason, f"{name} is left alone")

    unmanaged = [left_alone("plain", Reason.NOT_ELASTIC), left_alone("off", Reason.PAUSED)]
    doc = cycle(snap({"q": 0}, [ej("steady", max=2, replicas=2)], unmanaged=unmanaged))
    table = status_table(doc)
    assert "(1 settled job(s) and 2 job(s) not managed (NotElastic 1, SkipPaused 1))" in table
    plain = next(j for j in doc.jobs if j.name == "plain")
    assert "\nNot managed: NotElastic: " in explain_text(doc, plain)


def test_readmes_example_plan_shows_headroom_and_bound_a_why_for_every_job_and_no_repeats():
    """Issue 44: README's first plan, run as a user runs it: each queue's headroom and
    what bounds it (the example's free_gpus are taken as given, and the table says so),
    one "Why" line for every job, held or at max too, and no line said twice."""
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "plan", "--snapshot", "config/example-snapshot.yaml"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = done.stdout
    queues = out.split("\nQUEUE ", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    assert len(queues) == 4
    for row in queues:
        _, free, headroom, bound = row.split()[:4]
        assert (headroom, bound) == (free, "given"), row
    assert "(given: the free GPUs as read, from free_gpus_query or a snapshot's free_gpus" in out
    jobs = yaml.safe_load(EXAMPLE.read_text())["objects"]
    names = {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}"
        for o in jobs
        if o["kind"] in ("PyTorchJob", "PaddleJob", "Job")
    }
    why = out.split("\nWhy:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    said = [line.split(": ", 1)[0].strip() for line in why if not line.startswith("    ")]
    assert sorted(said) == sorted(names)  # every job once
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)), [x for x in lines if lines.count(x) > 1]
    nogang = next(line for line in why if line.startswith("  speech/hubert-nogang:"))
    assert why[why.index(nogang) + 1].startswith("  speech/"), "a note saying it again"


def _plan(*argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "plan", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_plan_wide_adds_the_shape_since_when_and_each_limits_room():
    """Issue 44: `plan -o wide` printed exactly the plain table. Wide adds, per job, its
    running workers, one worker's shape and since when it has its size (our last
    resize); per gang its pods and how long it has waited; per queue its plugin and the
    room each limit leaves. Columns are named for what they count (WORKERS)."""
    example = str(EXAMPLE)
    plain, wide = _plan("--snapshot", example), _plan("--snapshot", example, "-o", "wide")
    assert wide != plain and _plan("--snapshot", example, "-v") == wide
    head = wide.splitlines()[2]
    assert head.split()[6] == "WORKERS" and plain.splitlines()[2].split()[6] == "WORKERS"
    for column in ("ACTIVE", "WORKER SHAPE", "RESIZED"):
        assert column in head and column not in plain
    detr = next(line for line in wide.splitlines() if line.startswith("vision/detr-recent "))
    assert detr.endswith("1 GPU, 8 CPU, 64Gi memory   2m ago"), detr
    assert "HoldCooldown: resized 120s ago" in wide  # 2m: the same clock
    gang = next(line for line in wide.splitlines() if " PyTorchJob/nlp/llama-eval " in line)
    assert gang.split()[-2:] == ["4", "4m"], gang  # 4 pods, waiting since 09:55:05
    volcano = _plan(
        "--snapshot", str(ROOT / "config" / "example-snapshot-volcano.yaml"), "-o", "wide"
    )
    product = next(line for line in volcano.splitlines() if line.startswith("product "))
    assert product.endswith("proportion  cluster-idle 12, share 6"), product


def _rigid_snapshot(tmp_path: Path) -> Path:
    """Issue 44's job: a rigid PyTorchJob of 3 Workers and a Master, 1 GPU each (4
    GPUs), beside an elastic one of 2 Workers and a Master of 2 GPUs (4 GPUs)."""
    rigid = edit(
        with_master(pytorchjob("rigid", replicas=3, active=3)), "spec.elasticPolicy", DELETE
    )
    grow = with_master(pytorchjob("grow", replicas=2, active=2, max_replicas=4), gpus=2)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"free_gpus": {"team-a": 2}, "objects": [rigid, grow]}))
    return path


def test_a_job_is_shown_with_its_workers_and_the_gpus_it_holds_master_included(tmp_path):
    """Issue 44: a rigid PyTorchJob's count was its Workers only (3 while it holds 4 GPUs
    with its Master). The plan, wide or plain, and its JSON show each job's workers
    (WORKERS, `replicas`) and the GPUs it holds (GPUS, `gpus`), its Master's included:
    the same numbers in every view."""
    snapshot = str(_rigid_snapshot(tmp_path))
    expected = {"ml/rigid": ("3", "4"), "ml/grow": ("2", "4")}
    for argv in ((), ("-o", "wide")):
        out = _plan("--snapshot", snapshot, *argv)
        head, *rows = out.split("\n\n")[1].splitlines()
        columns = head.split()
        at, gpus = columns.index("WORKERS"), columns.index("GPUS")
        assert gpus == at + 1, head
        shown = {r.split()[0]: (r.split()[at], r.split()[gpus]) for r in rows}
        assert shown == expected, out
    doc = json.loads(_plan("--snapshot", snapshot, "-o", "json"))
    jobs = {
        f"{j['namespace']}/{j['name']}": (str(j["replicas"]), str(j["gpus"])) for j in doc["jobs"]
    }
    assert jobs == expected
    (action,) = doc["actions"]  # ml/grow 2 -> 4: its GPUs as it holds them now
    assert (action["name"], action["from"], action["gpus"]) == ("grow", 2, 4)
    assert doc["jobs"][0].keys() >= {"replicas", "gpus_per_worker", "target"}  # kept


def test_status_and_explain_show_the_same_workers_and_gpus_as_the_plan(tmp_path):
    """The status object (every format) and explain count a job as the plan does."""
    from autoscaler.read.snapshot_file import load_snapshot_file
    from autoscaler.report.status.codec import from_dict, to_dict
    from autoscaler.report.status.view import status_table as table
    from autoscaler.settings import Settings

    raw = load_snapshot_file(_rigid_snapshot(tmp_path))
    doc = cycle(raw.snapshot(Settings.model_validate({}).read_options()))
    assert from_dict(json.loads(json.dumps(to_dict(doc)))) == doc  # `gpus` reads back
    rigid = next(j for j in to_dict(doc)["jobs"] if j["job"] == "ml/rigid")
    assert (rigid["replicas"], rigid["gpus"], rigid["gpus_per_worker"]) == (3, 4, 1)
    wide = table(doc, wide=True)
    head, *rows = wide.split("\n\n")[2].splitlines()
    at = head.split().index("WORKERS")
    assert head.split()[at + 1] == "GPUS", head
    row = next(r for r in rows if r.startswith("ml/rigid "))
    assert row.split()[at : at + 2] == ["3", "4"], row
    narrow = table(doc)
    grow = next(r for r in narrow.splitlines() if r.startswith("ml/grow "))
    assert grow.split()[2:4] == ["2", "4"], grow
    text = explain_text(doc, next(j for j in doc.jobs if j.name == "rigid"))
    assert "\nGPUs:      4 held: 3 by its 3 worker(s) and 1 by the other pods of its gang" in text
    # a status object written before `gpus` existed still reads: the count is unknown
    older = to_dict(doc)
    for j in older["jobs"]:
        del j["gpus"]
    old = from_dict(older)
    assert {j.gpus for j in old.jobs} == {None} and "-" in table(old, wide=True)
    assert "\nGPUs:" not in explain_text(old, old.jobs[0])


def test_readmes_example_counts_a_job_with_its_master_as_readme_says():
    """README: `vision/detr-recent`, 3 Workers and a Master of 1 GPU each, shows 3 and 4."""
    readme = (ROOT / "README.md").read_text()
    assert "(`vision/detr-recent`: 3 `WORKERS`, 4 `GPUS` with its Master)" in readme
    out = _plan("--snapshot", str(EXAMPLE))
    head = out.splitlines()[2].split()
    row = next(r for r in out.splitlines() if r.startswith("vision/detr-recent ")).split()
    assert (row[head.index("WORKERS")], row[head.index("GPUS")]) == ("3", "4"), out
