"""The status object on a real kube-apiserver.

One cycle of the daemon (`python -m autoscaler run`, as deployed) over the example
cluster of config/example-snapshot.yaml: then `kubectl get configmap`, `elastic-autoscaler
status` / `explain` and `kubectl elastic ...` (the plugin) each tell why every job of the
example is (not) growing. And the writer on its own: created once, written only on
change or heartbeat, a refused write counted and never raised, a dry run that leaves a
live daemon's object alone.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import eventually
from kubernetes_asyncio.client import ApiClient
from kubeserver import ApiError, EnvTest
from promserver import fake_prometheus
from test_faults import daemon_env, daemon_process, live_body

from autoscaler.cli import main
from autoscaler.report.metrics import Metrics
from autoscaler.report.status.codec import from_data
from autoscaler.report.status.doc import DATA_KEY, Cycle, StatusDoc
from autoscaler.report.status.writer import StatusWriter
from autoscaler.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "config" / "example-snapshot.yaml"
CM = "elastic-autoscaler-status"
# what the planner decides for each job of the example (tests/test_cli.py checks the same
# on the snapshot file): the status and explain must say it
EXPECTED = {
    "vision/resnet-small": "ScaleUpIdleGpus",
    "vision/vit-large": "ScaleUpIdleGpus",
    "vision/detr-recent": "HoldCooldown",
    "nlp/bert-pretrain": "ReclaimForPending",
    "nlp/gpt-finetune": "HoldAtMax",
    "nlp/llama-eval": "NotElastic",
    "nlp/ernie-finetune": "ScaleUpIdleGpus",
    "speech/whisper-broken": "InvalidPolicy",
    "speech/wav2vec-paused": "SkipPaused",
    "speech/conformer-hpa": "SkipOperatorHpa",
    "vision/yolo-train": "ScaleUpIdleGpus",
    "nlp/ocr-fixed": "NotElastic",
    "speech/hubert-nogang": "HoldNoMinAvailable",
    "speech/fastspeech": "SkipOperatorHpa",
}
# the end of the example's longest message (over 300 characters, once cut there)
WHOLE_END = "only shrunk until you set minAvailable (usually minReplicas plus the master)"


def _renamed(text: str, prefix: str) -> str:
    """The example with its namespaces, queues and priority classes prefixed: the API
    server is shared by the session's tests."""
    for name in ("vision", "nlp", "speech"):
        text = re.sub(rf"\bnamespace: {name}\b", f"namespace: {prefix}-{name}", text)
    text = re.sub(r"\bteam-([a-d])\b", rf"{prefix}-team-\1", text)
    for pc in ("high", "low"):
        text = re.sub(
            rf"(name|priorityClass|priorityClassName): {pc}\b", rf"\1: {prefix}-{pc}", text
        )
    return text


def _shift(obj: dict[str, Any], delta: timedelta) -> None:
    """Our time annotations moved from the example's `now` to the real one."""
    notes = obj.get("metadata", {}).get("annotations") or {}
    for key, value in list(notes.items()):
        if key.startswith("elastic-autoscaler.io/") and re.fullmatch(r"[0-9T:\-]+Z", str(value)):
            when = datetime.fromisoformat(str(value).replace("Z", "+00:00")) + delta
            notes[key] = when.strftime("%Y-%m-%dT%H:%M:%SZ")


def load_example(envtest: EnvTest, prefix: str) -> dict[str, float]:
    doc = yaml.safe_load(_renamed(EXAMPLE.read_text(), prefix))
    delta = datetime.now(UTC) - datetime.fromisoformat(doc["now"].replace("Z", "+00:00"))
    for ns in ("vision", "nlp", "speech"):
        envtest.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{prefix}-{ns}"}}
        )
    uids: dict[str, str] = {}  # the example's uid of a job -> the one the server gave it
    for obj in doc["objects"]:
        _shift(obj, delta)
        for owner in obj["metadata"].get("ownerReferences") or ():
            # its owner as created here (an owner of another uid is a job that is gone)
            owner["uid"] = uids.get(owner.get("uid", ""), owner.get("uid", ""))
        if obj["kind"] == "HorizontalPodAutoscaler":
            # the API server wants the target's group (the snapshot file does not)
            obj["spec"]["scaleTargetRef"].setdefault("apiVersion", "kubeflow.org/v1")
        given = obj["metadata"].get("uid", "")
        status = obj.pop("status", None)
        for server_set in ("creationTimestamp", "resourceVersion", "uid"):
            obj["metadata"].pop(server_set, None)
        if obj["kind"] == "PodGroup" and status is not None:
            obj["status"] = status  # no status subresource: written with the object
            status = None
        created = envtest.create(obj)
        if given:
            uids[given] = created["metadata"]["uid"]
        if status:
            envtest.patch_status(obj, status)
    return {q: float(v) for q, v in doc["free_gpus"].items()}


def _kubectl(*args: str) -> str:
    return subprocess.run(
        ["kubectl", *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout


async def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.timeout(180)
async def test_one_cycle_tells_why_each_job_of_the_example_is_or_is_not_growing(
    envtest: EnvTest, real_ns: str, tmp_path: Path, capsys, monkeypatch
) -> None:
    prefix = real_ns
    free = load_example(envtest, prefix)
    kubeconfig = envtest.kubeconfig()
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config of the machine
    namespaces = [f"{prefix}-{n}" for n in ("vision", "nlp", "speech")]
    async with fake_prometheus(live_body(**free)) as prom:
        env = daemon_env(
            tmp_path,
            kubeconfig,
            prom.url,
            namespaces=json.dumps(namespaces),
            lease_namespace=real_ns,
            identity="replica-1",
            dry_run="true",  # nothing of the example is changed: every reason stays
        )
        async with daemon_process(env) as proc:
            await proc.wait_for("cycle", 60, result="ok")

            def written() -> dict[str, Any] | None:
                try:
                    return envtest.request("GET", f"/api/v1/namespaces/{real_ns}/configmaps/{CM}")
                except ApiError:
                    return None

            cm = await eventually(written, 20, 0.1, "the status object")
            assert await proc.stop() == 0
        assert not proc.events("status.write_failed")

    # the object itself, as any user reads it
    doc = from_data(cm["data"], "cm")
    assert doc.mode == "dry-run" and doc.identity == "replica-1" and doc.cycle.result == "ok"
    listed = {f"{j.namespace.removeprefix(prefix + '-')}/{j.name}": j.reason for j in doc.jobs}
    assert listed == EXPECTED
    bert = next(j for j in doc.jobs if j.name == "bert-pretrain")
    assert bert.resize is not None and bert.resize.state.value == "would-resize"
    assert (bert.resize.from_replicas, bert.resize.to_replicas) == (8, 4)
    (gang,) = doc.gangs
    assert gang.reason == "GangCoveredByReclaim" and gang.victims == (
        f"{prefix}-nlp/bert-pretrain",
    )
    team_a = doc.queues[f"{prefix}-team-a"]
    assert (team_a.headroom_gpus, team_a.bound, team_a.granted_gpus) == (6.0, "given", 6)
    if shutil.which("kubectl"):
        text = await asyncio.to_thread(
            _kubectl,
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            real_ns,
            "get",
            "configmap",
            CM,
            "-o",
            "yaml",
        )
        for ref, reason in EXPECTED.items():
            name = ref.split("/")[1]
            # one line per job: grep-able
            found = rf'\{{"job": "{prefix}-\S+/{name}", .*"reason": "{reason}"'
            assert re.search(found, text), ref

    # `status`: queues and the jobs not settled; -o wide every job; json for tools
    args = ["--kubeconfig", str(kubeconfig), "--autoscaler-namespace", real_ns]
    code, out, err = await _cli(capsys, "status", *args)
    assert code == 0, err
    assert f"{prefix}-team-b" in out and "would-resize 8->4" in out
    assert "GangCoveredByReclaim" in out and "job(s) not managed (NotElastic 2" in out
    code, out, _ = await _cli(capsys, "status", *args, "-o", "wide")
    assert all(reason in out for reason in EXPECTED.values())
    code, out, _ = await _cli(capsys, "status", *args, "-o", "json", "-n", f"{prefix}-speech")
    assert {j["job"].split("/")[1] for j in json.loads(out)["jobs"]} == {
        ref.split("/")[1] for ref in EXPECTED if ref.startswith("speech/")
    }
    # whole messages (issue 44): the end of one says what to do
    (nogang,) = [j for j in json.loads(out)["jobs"] if j["job"].endswith("/hubert-nogang")]
    assert nogang["message"].endswith(WHOLE_END), nogang["message"]
    code, out, _ = await _cli(capsys, "explain", f"{prefix}-speech/hubert-nogang", *args)
    assert code == 0 and WHOLE_END in out

    # `explain`: every job of the example, in words
    for ref, reason in EXPECTED.items():
        code, out, err = await _cli(capsys, "explain", f"{prefix}-{ref}", *args)
        assert code == 0, err
        assert reason in out and "Queue " in out, out
    code, out, _ = await _cli(
        capsys, "explain", "bert-pretrain", "-n", f"{prefix}-nlp", *args, "-o", "yaml"
    )
    explained = yaml.safe_load(out)
    assert explained["summary"].startswith("It shrinks from 8 to 4")
    assert explained["gangs"][0]["victims"] == [f"{prefix}-nlp/bert-pretrain"]
    # a rigid job's explain says which waiting gang is its own, what it needs (read from
    # its template), since when and what happens to it
    code, out, err = await _cli(capsys, "explain", f"{prefix}-nlp/llama-eval", *args)
    assert code == 0, err
    assert f"(the gang of PyTorchJob/{prefix}-nlp/llama-eval)" in out, out
    assert "read from its job's pod templates" in out and "waiting since" in out
    assert "GangCoveredByReclaim" in out
    code, _, err = await _cli(capsys, "explain", f"{prefix}-nlp/nope", *args)
    # no such job in the cluster: said plainly, apart from a job that is not managed
    assert code == 1 and f"{prefix}-nlp/nope: not found (no PyTorchJob" in err
    assert len(err.splitlines()) == 1

    # the kubectl plugin: kubectl finds kubectl-elastic on PATH
    plugin = shutil.which("kubectl-elastic")
    if shutil.which("kubectl") and plugin:
        path = f"{Path(plugin).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        done = await asyncio.to_thread(
            subprocess.run,
            ["kubectl", "elastic", "explain", f"{prefix}-vision/detr-recent", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PATH": path},
            check=True,
        )
        out = done.stdout
        assert out.startswith(f"PyTorchJob {prefix}-vision/detr-recent")
        assert "HoldCooldown" in out


def _settings(ns: str, **kw: Any) -> Settings:
    return Settings(lease_namespace=ns, status_heartbeat_seconds=600, **kw)


def _doc(now: datetime, result: str = "ok", mode: str = "live") -> StatusDoc:
    return StatusDoc(time=now, cycle=Cycle(result), mode=mode, heartbeat_seconds=600)


async def test_the_writer_writes_on_change_or_heartbeat_only(
    envtest: EnvTest, real_ns: str, real_client: ApiClient
) -> None:
    clock = [0.0]
    metrics = Metrics()
    writer = StatusWriter(
        _settings(real_ns).status_options(), real_client, metrics, clock=lambda: clock[0]
    )
    assert await writer.restore() is None  # nothing there yet, and no warning for it
    now = datetime.now(UTC).replace(microsecond=0)
    assert await writer.write(_doc(now)) == "written"  # created
    rv = envtest.request("GET", f"/api/v1/namespaces/{real_ns}/configmaps/{CM}")["metadata"]
    clock[0] = 100
    assert await writer.write(_doc(now + timedelta(minutes=2))) == "unchanged"
    assert await writer.write(_doc(now, result="hold")) == "written"  # something new
    clock[0] = 800
    assert await writer.write(_doc(now + timedelta(minutes=20), result="hold")) == "written"
    cm = envtest.request("GET", f"/api/v1/namespaces/{real_ns}/configmaps/{CM}")
    assert cm["metadata"]["resourceVersion"] != rv["resourceVersion"]
    assert from_data(cm["data"], "cm").time == now + timedelta(minutes=20)  # the heartbeat
    assert writer.writes == 3
    again = StatusWriter(_settings(real_ns).status_options(), real_client)
    restored = await again.restore()
    assert restored is not None and restored.cycle.result == "hold"
    text = metrics.registry.get_sample_value
    assert text("elastic_autoscaler_status_writes_total", {"result": "unchanged"}) == 1
    assert text("elastic_autoscaler_status_writes_total", {"result": "failed"}) == 0


async def test_a_refused_write_is_counted_not_raised(envtest: EnvTest, real_ns: str) -> None:
    envtest.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "nobody", "namespace": real_ns},
        }
    )
    token = envtest.mint_token(real_ns, "nobody")
    metrics = Metrics()
    async with ApiClient(envtest.configuration(token)) as api:
        writer = StatusWriter(_settings(real_ns).status_options(), api, metrics)
        assert await writer.write(_doc(datetime.now(UTC))) == "failed"
        assert await writer.write(_doc(datetime.now(UTC), "hold")) == "failed"
    assert (
        metrics.registry.get_sample_value(
            "elastic_autoscaler_status_writes_total", {"result": "failed"}
        )
        == 2
    )


async def test_a_dry_run_leaves_a_live_daemons_status_alone(
    envtest: EnvTest, real_ns: str, real_client: ApiClient
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    live = StatusWriter(_settings(real_ns).status_options(), real_client)
    assert await live.write(_doc(now)) == "written"
    dry = StatusWriter(_settings(real_ns, dry_run=True).status_options(), real_client)
    assert await dry.write(_doc(now + timedelta(minutes=1), mode="dry-run")) == "skipped"
    cm = envtest.request("GET", f"/api/v1/namespaces/{real_ns}/configmaps/{CM}")
    assert from_data(cm["data"], "cm").mode == "live"
    # the live daemon is gone (no heartbeat for three): the dry run may write
    later = now + timedelta(seconds=3 * 600 + 1)
    assert await dry.write(_doc(later, mode="dry-run")) == "written"
    cm = envtest.request("GET", f"/api/v1/namespaces/{real_ns}/configmaps/{CM}")
    assert from_data(cm["data"], "cm").mode == "dry-run"
    assert DATA_KEY in cm["data"]

    # a live daemon that stops says so: a dry run takes over at once
    assert await live.write(_doc(later, result="hold")) == "written"
    assert await dry.write(_doc(later, mode="dry-run", result="hold")) == "skipped"
    await live.close(5)
    cm = envtest.request("GET", f"/api/v1/namespaces/{real_ns}/configmaps/{CM}")
    assert from_data(cm["data"], "cm").cycle.result == "stopped"
    assert await dry.write(_doc(later, mode="dry-run", result="hold")) == "written"


def test_status_without_a_status_object_says_so_in_one_line(
    envtest: EnvTest, real_ns: str, capsys, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    args = ["--kubeconfig", str(envtest.kubeconfig()), "--autoscaler-namespace", real_ns]
    code = main(["status", *args])
    err = capsys.readouterr().err
    assert code == 1 and f"no status object (configmap {real_ns}/{CM})" in err
    assert len(err.strip().splitlines()) == 1
