"""The real Volcano scheduler beside the real API server, for end-to-end tests.

`VOLCANO_KIT` names the kit's folder: `start.sh`/`stop.sh` and `bin/` with the upstream
`vc-scheduler`, `vc-controller-manager` and `kwok` (built from Volcano's and kwok's own
sources). `volcano_kit(plugin)` starts a fresh API server (`EnvTest`) and, beside it, the
kit: Volcano's CRDs, N nodes with `nvidia.com/gpu` allocatable that kwok keeps Ready and
whose bound pods it runs, the scheduler with the `proportion` or the `capacity` plugin
(Volcano's chart config otherwise), and the controller-manager, which turns a Volcano Job
into a PodGroup and pods. It stops exactly the processes it started, by PID.

What the kit is not: there is no garbage collector, so deleting a Volcano Job leaves its
pods and its PodGroup, and a PodGroup left behind keeps counting in its queue's `inqueue`
(`clean_namespace` deletes all three, in the order that does not leave one Inqueue).

The helpers below are synchronous (the test's own requests, against a real server): they
create Volcano Jobs and Queues, read pods, PodGroups and the scheduler's verdicts, and poll
with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeserver import ASSETS_ENV, ApiError, EnvTest, assets_problem
from promserver import PrometheusProcess

KIT_ENV = "VOLCANO_KIT"
PLUGINS = ("proportion", "capacity")
BINARIES = ("vc-scheduler", "vc-controller-manager", "kwok")
GPU = "nvidia.com/gpu"
MAX_REPLICAS = "elastic-autoscaler.io/max-replicas"
VCJOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"
PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups"
PODS = "/api/v1/namespaces/{ns}/pods"
START_SECONDS = 120.0
START_ATTEMPTS = 3  # see start_retrying
# what a component says when the port the kit picked for it was taken meanwhile
_PORT_TAKEN = "address already in use"
KWOK_NODE = "kwok.x-k8s.io/node"  # kwok runs the nodes annotated so (start.sh's)
SESSIONS = "volcano_open_session_duration_milliseconds_count"  # one per scheduling session


def kit_problem() -> str | None:
    """Why the real Volcano kit cannot run here (a skip reason), or None."""
    problem = assets_problem()
    if problem:
        return f"the kit needs the real API server: {problem}"
    folder = os.environ.get(KIT_ENV)
    if not folder:
        return f"{KIT_ENV} is not set (point it at the Volcano kit: start.sh, stop.sh, bin/)"
    root = Path(folder)
    for script in ("start.sh", "stop.sh"):
        if not os.access(root / script, os.X_OK):
            return f"{KIT_ENV}={folder} has no executable {script}"
    for binary in BINARIES:
        if not os.access(root / "bin" / binary, os.X_OK):
            return f"{KIT_ENV}={folder} has no executable bin/{binary}"
    if shutil.which("kubectl") is None:
        return "the kit's start.sh needs kubectl on PATH"
    return None


def start_retrying(
    what: str,
    start: Callable[[], subprocess.CompletedProcess[str]],
    logs: Callable[[], str],
    undo: Callable[[], None],
) -> None:
    """Run a kit's start script (`start`). The kits' scripts pick their ports by binding
    port 0 and closing the socket, so a port can be taken (by another of their picks,
    or by a connection of the suite under `-n 2`) before the component binds it: that
    start is undone and run again (new ports); any other failure is raised at once,
    with the components' `logs`."""
    for attempt in range(1, START_ATTEMPTS + 1):
        answer = start()
        if answer.returncode == 0:
            return
        said = logs()
        undo()
        if _PORT_TAKEN not in answer.stderr + said or attempt == START_ATTEMPTS:
            raise RuntimeError(
                f"{what} did not start ({answer.returncode}): {answer.stderr[-2000:]}\n{said}"
            )


@dataclass
class VolcanoKit:
    """The kit's processes against `api`, state (volcano.env, logs) in `state`."""

    folder: Path
    api: EnvTest
    state: Path
    plugin: str
    nodes: int = 4
    gpus_per_node: int = 8
    env: dict[str, str] = field(default_factory=dict)
    scheduler_restarts: int = 0
    _scheduler_argv: list[str] = field(default_factory=list)
    _scheduler_stopped: float = 0.0

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def scheduler_metrics(self) -> str:
        return self.env["VC_SCHEDULER_METRICS"]

    @property
    def controller_metrics(self) -> str:
        return self.env["VC_CONTROLLER_METRICS"]

    @property
    def targets(self) -> list[str]:
        """host:port of the scheduler's and the controller's metrics, for Prometheus."""
        return [_host_port(self.scheduler_metrics), _host_port(self.controller_metrics)]

    def start(self) -> None:
        """Run the kit's start.sh (five ports picked: `start_retrying`)."""
        start_retrying(
            "the Volcano kit",
            self._run_start,
            lambda: "\n".join(f"{c} log:\n{self.log_tail(c)}" for c in BINARIES),
            self._undo_start,
        )

    def _undo_start(self) -> None:
        self.stop()
        self.env.clear()
        (self.state / "volcano.env").unlink(missing_ok=True)

    def _run_start(self) -> subprocess.CompletedProcess[str]:
        kubeconfig = self.api.kubeconfig(name="volcano")
        answer = subprocess.run(
            [
                str(self.folder / "start.sh"),
                str(kubeconfig),
                str(self.state),
                "--plugin",
                self.plugin,
                "--nodes",
                str(self.nodes),
                "--gpus",
                str(self.gpus_per_node),
            ],
            capture_output=True,
            text=True,
            timeout=START_SECONDS,
            check=False,
        )
        self._read_env()  # even on failure: whatever it started is stopped by stop()
        return answer

    def stop(self) -> None:
        if (self.state / "volcano.env").exists():
            subprocess.run([str(self.folder / "stop.sh"), str(self.state)], timeout=60, check=False)

    def restart_scheduler(self, *, kill: bool = False) -> float:
        """Stop the scheduler and start it again at once; the seconds it was away."""
        self.stop_scheduler(kill=kill)
        return self.start_scheduler()

    def stop_scheduler(self, *, kill: bool = False) -> None:
        """Stop the scheduler alone (SIGTERM, or SIGKILL for a crash); the controller and
        kwok keep running. `start_scheduler` starts the same command line again."""
        pid = int(self.env["VC_SCHEDULER_PID"])
        self._scheduler_argv = [
            a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        ]
        self._scheduler_stopped = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + 15
        while _alive(pid):
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def start_scheduler(self) -> float:
        """Start the stopped scheduler with its old command line (same config and ports);
        wait until it serves metrics. The seconds it was away."""
        assert self._scheduler_argv, "stop_scheduler first"
        with (self.state / "vc-scheduler.log").open("ab") as log:
            process = subprocess.Popen(
                self._scheduler_argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.scheduler_restarts += 1
        # stop.sh stops what volcano.env names: the new PID from now on
        self.env["VC_SCHEDULER_PID"] = str(process.pid)
        self._write_env()
        deadline = time.monotonic() + 60
        while not _serves(self.scheduler_metrics):
            if process.poll() is not None:
                raise RuntimeError(
                    f"vc-scheduler exited on restart:\n{self.log_tail('vc-scheduler')}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError("vc-scheduler does not serve metrics after its restart")
            time.sleep(0.05)
        return time.monotonic() - self._scheduler_stopped

    def shape_nodes(self, nodes: int, gpus_per_node: int = 8) -> None:
        """Exactly `nodes` GPU nodes gpu-node-1..N of `gpus_per_node` GPUs each, as start.sh
        makes them (its labels and resources, Ready, no taint, not cordoned): nodes a test
        changed are put back, missing ones created (kwok runs every node), extra ones
        deleted. After a change, until the scheduler has run two sessions: the first may
        have opened before it saw the change."""
        found = {
            n["metadata"]["name"]: n
            for n in self.api.request("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
        }
        changed = False
        for i in range(1, nodes + 1):
            name = f"gpu-node-{i}"
            node = found.pop(name, None)
            if node is None:
                node = self.api.create(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {
                            "name": name,
                            "labels": node_labels(name),
                            "annotations": {KWOK_NODE: "fake"},
                        },
                        "spec": {},
                    }
                )
            changed |= _reset_node(self.api, node, gpus_per_node)
        for name in found:
            self.api.request("DELETE", f"/api/v1/nodes/{name}")
            changed = True
        self.nodes, self.gpus_per_node = nodes, gpus_per_node
        if changed:
            self.wait_sessions(2)

    def wait_sessions(self, count: int, *, deadline_seconds: float = 30) -> None:
        """Until the scheduler has opened `count` more sessions than it had now."""

        def opened() -> float:
            with urllib.request.urlopen(self.scheduler_metrics, timeout=5) as resp:
                for line in resp.read().decode().splitlines():
                    if line.startswith(SESSIONS + " "):
                        return float(line.rpartition(" ")[2])
            return 0.0

        target = opened() + count
        deadline = time.monotonic() + deadline_seconds
        while opened() < target:
            if time.monotonic() > deadline:
                raise TimeoutError(f"vc-scheduler opened fewer than {count} sessions")
            time.sleep(0.1)

    def log_tail(self, component: str, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = (self.state / f"{component}.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def _read_env(self) -> None:
        with contextlib.suppress(OSError):
            for line in (self.state / "volcano.env").read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    self.env[key.strip()] = value.strip()

    def _write_env(self) -> None:
        text = "".join(f"{k}={v}\n" for k, v in self.env.items())
        (self.state / "volcano.env").write_text(text)


def node_labels(name: str) -> dict[str, str]:
    """The labels start.sh gives a GPU node."""
    return {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "nvidia.com/gpu.present": "true",
        "type": "kwok",
    }


def node_resources(gpus: int) -> dict[str, str]:
    """The capacity (= allocatable) start.sh gives a GPU node."""
    return {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "110",
        GPU: str(gpus),
        "ephemeral-storage": "1Ti",
    }


def _exactly(want: dict[str, str], have: dict[str, Any]) -> dict[str, str | None]:
    """A merge patch that turns mapping `have` into `want`."""
    return {**{k: None for k in have if k not in want}, **want}


def _reset_node(api: EnvTest, node: dict[str, Any], gpus: int) -> bool:
    """Put `node` back as start.sh made it; whether anything had to change. The status
    first: a node created without a Ready condition gets the not-ready taint, lifted
    after (no node lifecycle controller here)."""
    name = node["metadata"]["name"]
    path = f"/api/v1/nodes/{name}"
    merge = "application/merge-patch+json"
    status = node.get("status") or {}
    resources = node_resources(gpus)
    changed = False
    if status.get("capacity") != resources or status.get("allocatable") != resources:
        patch: dict[str, Any] = {
            "capacity": _exactly(resources, status.get("capacity") or {}),
            "allocatable": _exactly(resources, status.get("allocatable") or {}),
        }
        if not any(c.get("type") == "Ready" for c in status.get("conditions") or []):
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            patch["conditions"] = [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kwok",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ]
        api.request("PATCH", path + "/status", {"status": patch}, content_type=merge)
        changed = True
    meta, spec = node["metadata"], node.get("spec") or {}
    labels = node_labels(name)
    annotations = meta.get("annotations") or {}
    if (
        meta.get("labels") != labels
        or annotations.get(KWOK_NODE) != "fake"
        or spec.get("taints")
        or spec.get("unschedulable")
    ):
        body = {
            "metadata": {
                "labels": _exactly(labels, meta.get("labels") or {}),
                "annotations": {KWOK_NODE: "fake"},
            },
            "spec": {"taints": None, "unschedulable": None},
        }
        api.request("PATCH", path, body, content_type=merge)
        changed = True
    return changed


def _host_port(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def _alive(pid: int) -> bool:
    # the kit's processes are not our children: gone, or a zombie of init, is dead
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def volcano_kit(
    plugin: str, *, nodes: int = 4, gpus_per_node: int = 8, api_args: tuple[str, ...] = ()
) -> Iterator[VolcanoKit]:
    """A fresh API server (with `api_args`, more kube-apiserver flags) and the kit beside
    it; both stopped (and the folder removed) on exit, whatever happened inside.
    `plugin`: proportion, capacity, or the path of a scheduler conf file (start.sh's)."""
    problem = kit_problem()
    if problem:
        raise RuntimeError(problem)
    root = Path(tempfile.mkdtemp(prefix=f"volcano-{Path(plugin).stem}-"))  # or a conf file
    try:
        with EnvTest(Path(os.environ[ASSETS_ENV]), root / "api", extra_args=list(api_args)) as api:
            kit = VolcanoKit(
                Path(os.environ[KIT_ENV]),
                api,
                root / "vc",
                plugin,
                nodes=nodes,
                gpus_per_node=gpus_per_node,
            )
            try:
                kit.start()
                yield kit
            finally:
                kit.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---- objects -------------------------------------------------------------------------------


def vcjob_body(
    name: str,
    namespace: str,
    *,
    queue: str,
    replicas: int,
    min_available: int,
    max_replicas: int | None = None,
    gpus: int = 1,
    task_min: int | None = None,
    priority_class: str | None = None,
    limits_only: bool = False,
) -> dict[str, Any]:
    """A Volcano Job of one task `worker`, `gpus` GPUs per pod. With `max_replicas` it
    carries our annotation (elastic, min = the gang minimum); without, nobody resizes it.
    `limits_only`: the GPUs in `limits` only, as most manifests write them (the API
    server copies them to each pod's requests, but Volcano's controller computes the
    PodGroup's minResources from the template's requests: no GPU in it)."""
    template = {
        "spec": {
            "restartPolicy": "OnFailure",
            "containers": [
                {
                    "name": "train",
                    "image": "example.com/train:1",
                    "resources": {
                        "requests": {"cpu": "1"} if limits_only else {GPU: str(gpus), "cpu": "1"},
                        "limits": {GPU: str(gpus), "cpu": "1"},
                    },
                }
            ],
        }
    }
    task: dict[str, Any] = {"name": "worker", "replicas": replicas, "template": template}
    if task_min is not None:
        task["minAvailable"] = task_min
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": queue,
        "minAvailable": min_available,
        "tasks": [task],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if max_replicas is not None:
        meta["annotations"] = {MAX_REPLICAS: str(max_replicas)}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": meta,
        "spec": spec,
    }


def create_vcjob(api: EnvTest, name: str, namespace: str, **kw: Any) -> dict[str, Any]:
    return api.create(vcjob_body(name, namespace, **kw))


def get_vcjob(api: EnvTest, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = api.request("GET", VCJOBS.format(ns=namespace) + f"/{name}")
    return result


def workers(api: EnvTest, namespace: str, name: str) -> int:
    """The `worker` task's replicas (what the daemon resizes)."""
    tasks = get_vcjob(api, namespace, name)["spec"]["tasks"]
    return int(next(t for t in tasks if t["name"] == "worker")["replicas"])


def set_workers(api: EnvTest, namespace: str, name: str, replicas: int) -> None:
    api.request(
        "PATCH",
        VCJOBS.format(ns=namespace) + f"/{name}",
        [{"op": "replace", "path": "/spec/tasks/0/replicas", "value": replicas}],
        content_type="application/json-patch+json",
    )


def apply_queue(
    api: EnvTest,
    name: str,
    *,
    weight: int = 1,
    capability_gpus: int | None = None,
    guarantee_gpus: int | None = None,
    deserved_gpus: int | None = None,
) -> dict[str, Any]:
    """Create or update a Queue: weight, `spec.capability`, `spec.guarantee` and
    `spec.deserved` (what the capacity plugin owes the queue) in GPUs."""
    spec: dict[str, Any] = {"weight": weight}
    if deserved_gpus is not None:
        spec["deserved"] = {GPU: str(deserved_gpus)}
    if capability_gpus is not None:
        spec["capability"] = {GPU: str(capability_gpus)}
    if guarantee_gpus is not None:
        spec["guarantee"] = {"resource": {GPU: str(guarantee_gpus)}}
    return api.apply_queue(name, **spec)


@dataclass(frozen=True)
class PodView:
    name: str
    node: str | None
    phase: str
    scheduled: str  # PodScheduled: "True", "Unschedulable", "Schedulable", "" (no condition)
    message: str

    @property
    def running(self) -> bool:
        return self.node is not None and self.phase == "Running"

    @property
    def unschedulable(self) -> bool:
        return self.phase == "Pending" and self.scheduled == "Unschedulable"


def job_pods(api: EnvTest, namespace: str, job: str | None = None) -> list[PodView]:
    """The pods of Volcano Job `job` (all pods of the namespace without it), not deleting."""
    query = f"?labelSelector=volcano.sh/job-name%3D{job}" if job else ""
    items = api.request("GET", PODS.format(ns=namespace) + query)["items"]
    views = []
    for pod in items:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        status = pod.get("status") or {}
        scheduled = next(
            (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
        )
        verdict = "True" if scheduled.get("status") == "True" else scheduled.get("reason", "")
        views.append(
            PodView(
                pod["metadata"]["name"],
                pod["spec"].get("nodeName"),
                status.get("phase", ""),
                verdict,
                scheduled.get("message", ""),
            )
        )
    return sorted(views, key=lambda v: v.name)


def unschedulable_pods(api: EnvTest, namespace: str, job: str | None = None) -> list[PodView]:
    """Pods Pending with PodScheduled=False, reason Unschedulable (the scheduler's no)."""
    return [p for p in job_pods(api, namespace, job) if p.unschedulable]


def running_count(api: EnvTest, namespace: str, job: str) -> int:
    return sum(p.running for p in job_pods(api, namespace, job))


def podgroup_phases(api: EnvTest, namespace: str) -> dict[str, str]:
    """Each PodGroup's phase, keyed by the Volcano Job that owns it (else its own name)."""
    phases = {}
    for pg in api.request("GET", PODGROUPS.format(ns=namespace))["items"]:
        owners = pg["metadata"].get("ownerReferences") or []
        key = owners[0]["name"] if owners else pg["metadata"]["name"]
        phases[key] = (pg.get("status") or {}).get("phase", "")
    return phases


def bound_gpus(api: EnvTest) -> int:
    """GPUs requested by the pods bound to a node and not finished, cluster-wide."""
    total = 0
    for pod in api.request("GET", "/api/v1/pods")["items"]:
        if not pod["spec"].get("nodeName"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for c in pod["spec"]["containers"]:
            total += int(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0))
    return total


def describe(api: EnvTest, namespace: str) -> str:
    """What the scheduler did in `namespace`: jobs, PodGroup phases and pod states."""
    lines = []
    for job in api.request("GET", VCJOBS.format(ns=namespace))["items"]:
        name = job["metadata"]["name"]
        tasks = {t["name"]: t["replicas"] for t in job["spec"]["tasks"]}
        phase = (job.get("status") or {}).get("state", {}).get("phase")
        lines.append(f"job {name}: replicas {tasks}, phase {phase}")
    lines.append(f"podgroups: {podgroup_phases(api, namespace)}")
    counts: dict[tuple[str, str], int] = {}
    for p in job_pods(api, namespace):
        key = (p.phase, p.scheduled)
        counts[key] = counts.get(key, 0) + 1
    lines.append(f"pods (phase, PodScheduled): {counts}")
    lines.extend(f"  {p.name}: {p.message}" for p in unschedulable_pods(api, namespace)[:3])
    return "\n".join(lines)


async def wait_running(
    api: EnvTest, namespace: str, job: str, count: int, *, deadline_seconds: float
) -> float:
    """Until exactly `count` pods of `job` exist, each bound and Running; the seconds it
    took. Fails with what the scheduler did instead."""
    started = time.monotonic()
    while True:
        pods = job_pods(api, namespace, job)
        if len(pods) == count and all(p.running for p in pods):
            return time.monotonic() - started
        if time.monotonic() - started > deadline_seconds:
            raise AssertionError(
                f"{namespace}/{job}: not {count} pods bound and Running within "
                f"{deadline_seconds:g}s\n{describe(api, namespace)}"
            )
        await asyncio.sleep(0.1)


async def wait_podgroup_phase(
    api: EnvTest, namespace: str, job: str, phase: str, *, deadline_seconds: float
) -> None:
    """Until the PodGroup of `job` is in `phase` (it turns Running a moment after its
    pods are bound, not with them)."""
    started = time.monotonic()
    while podgroup_phases(api, namespace).get(job) != phase:
        if time.monotonic() - started > deadline_seconds:
            raise AssertionError(
                f"{namespace}/{job}: PodGroup not {phase} within {deadline_seconds:g}s\n"
                f"{describe(api, namespace)}"
            )
        await asyncio.sleep(0.1)


def clean_namespace(api: EnvTest, namespace: str, *, deadline_seconds: float = 30) -> None:
    """Delete every Volcano Job, then its PodGroups and pods (no garbage collector here):
    jobs first, or the controller recreates pods; PodGroups before the last look, or an
    orphan one stays Inqueue and keeps counting in its queue's `inqueue`."""
    deadline = time.monotonic() + deadline_seconds
    with contextlib.suppress(ApiError):
        api.request("DELETE", VCJOBS.format(ns=namespace))
    while api.request("GET", VCJOBS.format(ns=namespace))["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Volcano Jobs in {namespace} not deleted")
        time.sleep(0.1)
    for path in (PODGROUPS, PODS):
        with contextlib.suppress(ApiError):
            api.request("DELETE", path.format(ns=namespace) + "?gracePeriodSeconds=0")
    while (
        api.request("GET", PODS.format(ns=namespace))["items"]
        or api.request("GET", PODGROUPS.format(ns=namespace))["items"]
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods or PodGroups in {namespace} not deleted")
        time.sleep(0.1)


def delete_queue(api: EnvTest, name: str) -> None:
    api.delete(
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}}
    )


def scheduler_series(kit: VolcanoKit, queue: str, which: str = "scheduler") -> dict[str, float]:
    """The kit's own /metrics for one queue, read directly (not through Prometheus): GPU
    series by short name (allocated, deserved, inqueue, request, capacity, real_capacity,
    in milli-GPUs), plus the queue's unit-less gauges (weight, share, overused) and, from
    the controller, PodGroup counts (pod_group_pending_count, ...)."""
    url = kit.scheduler_metrics if which == "scheduler" else kit.controller_metrics
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("volcano_queue_") or f'queue_name="{queue}"' not in line:
            continue
        name, _, value = line.rpartition(" ")
        metric = name.split("{", 1)[0].removeprefix("volcano_queue_")
        if "_scalar_resources" in metric:
            if f'resource="{GPU}"' not in name:
                continue
            metric = metric.removesuffix("_scalar_resources")
        elif metric.endswith(("_milli_cpu", "_memory_bytes")):
            continue
        found[metric] = float(value)
    return found


@dataclass
class RealVolcano:
    """What the `volcano` fixture gives a test: the kit (API server inside) and a real
    Prometheus scraping the scheduler's and the controller's metrics every second."""

    kit: VolcanoKit
    prometheus: PrometheusProcess

    @property
    def api(self) -> EnvTest:
        return self.kit.api

    @property
    def plugin(self) -> str:
        return self.kit.plugin

    async def scraped_gpus(self, queue: str, part: str) -> float | None:
        """`volcano_queue_<part>_scalar_resources` of `queue` in GPUs, as Prometheus has
        it now (None: no series)."""
        body = await self.prometheus.query(
            f'volcano_queue_{part}_scalar_resources{{queue_name="{queue}",resource="{GPU}"}}'
        )
        result = body["data"]["result"]
        return float(result[0]["value"][1]) / 1000 if result else None

    async def wait_scraped(
        self, queue: str, *, deadline_seconds: float = 20, **parts: float
    ) -> None:
        """Until Prometheus shows each `part=GPUs` for `queue` (e.g. allocated=2; a part
        given as 0 may also have no series)."""
        started = time.monotonic()
        while True:
            seen = {part: await self.scraped_gpus(queue, part) for part in parts}
            seen = {p: 0.0 if v is None and parts[p] == 0 else v for p, v in seen.items()}
            if seen == parts:
                return
            if time.monotonic() - started > deadline_seconds:
                raise AssertionError(
                    f"Prometheus never showed {parts} for queue {queue}: last {seen}"
                )
            await asyncio.sleep(0.2)
