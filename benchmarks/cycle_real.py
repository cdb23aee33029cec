"""The daemon's cycle against a REAL kube-apiserver + etcd (envtest binaries, found via
KUBEBUILDER_ASSETS): `python benchmarks/cycle_real.py [--jobs 10000] [--page-size 100 500]`.

Objects as a cluster holds them, created through the API as users and operators would:
100 Queues; N PyTorchJobs (Master + Worker templates, env, volumes, kubectl's
last-applied annotation, ~8 KB each with the server's managedFields) with their status
written through /status; a PodGroup per job (owner reference, Running); 200 Pending
PodGroups. The free-GPU reading comes from a fake Prometheus (one value per queue).
With `--pods`, also the nodes (8 GPUs each, enough for every worker) and one bound pod
per worker and Master (a realistic pod body: env, volumes, probes, managedFields), and
each page size is measured with node_fit on (Node and bound-Pod watches) and off (Nodes
only): what the headroom's per-node bound costs at that scale.

The daemon side runs in a child process per page size, so its peak RSS is its own. For
each: initial sync (LIST of every cache), the first cycle (resizes, with their Events,
written through the real API), the cycle after it (the first to see those resizes in
flight: its status object changes), then steady cycles (nothing to do) with the API calls
they made (LISTs and new watches from the cache counters, writes from the actuator and
the status writer). A steady cycle is timed two ways: `steady_cycle_ms`, the cycle as the
daemon reports it (`CycleResult.duration_seconds`: read, plan, log, apply), and
`steady_run_once_ms`, the whole `Controller.run_once` call (also the status document
built and handed to its writer, and the heap's free memory released): the second is the
daemon's whole cost of a cycle.

Beside each, the server's own floor, measured in the same run by another child process:
the same LISTs (every cache's, at once, the same page size, through the same client),
each page read and thrown away. Floors and daemons alternate, a floor first and last
(`--repeat N`: N daemons), and each daemon's sync is compared with the floors either
side of it. Every row says what the server did meanwhile (`server_probe`: the API
server's and etcd's CPU, LISTs served from the watch cache or from etcd, the server's
Go collections); before each child the server is put in one state
(`server_probe.settle`, on unless `--no-settle`), its heap may grow to 3x what is live
before it collects (`--server-gogc`), and it runs without its periodic check of each
watch cache against etcd (`server_probe.SERVER_ARGS`): the same LISTs cost it ~6 s of
CPU, or ~11 s with a collection of its heap, ~23 s with their next pages read from
etcd, more with its consistency check, at 10k jobs ([placement] #27, fifth round,
docs/benchmarks.md). `--watch-list N`: then the same
collections streamed as client-go asks them (benchmarks/watch_list.py), N times.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import resource
import ssl
import statistics
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# the daemon's code: this tree's, or another's (`--compare-root`: main before a change)
DAEMON_ROOT = os.environ.get("BENCH_DAEMON_ROOT") or str(ROOT)
sys.path[:0] = [DAEMON_ROOT, str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

QUEUES = 100
PENDING = 200
NAMESPACES = 37
FREE_PER_QUEUE = 48  # GPUs: ~500 resizes over the 100 queues on the first cycle at 10k jobs


def _pod(ns: str, name: str, node: str, gpus: int, queue: str, owner: dict | None = None) -> dict:
    """A pod as the operator creates it, bound to its node; `owner`: with its controller
    reference to that job and its role and index labels (churn_real.py)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                "training.kubeflow.org/job-name": name.rsplit("-", 2)[0],
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
            },
            "annotations": {"scheduling.k8s.io/group-name": name.rsplit("-", 2)[0]},
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "volcano",
            "restartPolicy": "OnFailure",
            "containers": [
                {
                    "name": "pytorch",
                    "image": "registry.example.com/ml/train:2026.11",
                    "command": ["torchrun", "--nnodes=1:8", "train.py", "--epochs=90"],
                    "env": [
                        {"name": f"ENV_{i}", "value": f"value-{i}-" + "x" * 24} for i in range(12)
                    ]
                    + [{"name": "QUEUE", "value": queue}],
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"},
                        "requests": {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"},
                    },
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/data"},
                        {"name": "shm", "mountPath": "/dev/shm"},
                    ],
                    "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}},
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}},
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}},
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
    }
    if owner is not None:
        role, index = name.rsplit("-", 2)[1:]
        pod["metadata"]["ownerReferences"] = [owner]
        pod["metadata"]["labels"]["training.kubeflow.org/replica-type"] = role
        pod["metadata"]["labels"]["training.kubeflow.org/replica-index"] = index
    return pod


async def _load(
    url: str,
    token: str,
    ca: str,
    n: int,
    pods: bool = False,
    total_nodes: int = 0,
    owners: bool = False,
) -> dict:
    import aiohttp
    from cycle import _jobs

    ctx = ssl.create_default_context(cafile=ca)
    headers = {"Authorization": f"Bearer {token}"}
    gate = asyncio.Semaphore(32)
    async with aiohttp.ClientSession(
        headers=headers, connector=aiohttp.TCPConnector(ssl=ctx, limit=32)
    ) as http:

        async def call(method: str, path: str, body: dict, ctype: str = "application/json"):
            async with gate:
                async with http.request(
                    method, url + path, data=json.dumps(body), headers={"Content-Type": ctype}
                ) as resp:
                    text = await resp.text()
                    if resp.status >= 400:
                        raise RuntimeError(f"{method} {path}: {resp.status} {text[:300]}")
                    return json.loads(text)

        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                call(
                    "POST",
                    "/api/v1/namespaces",
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                )
                # the jobs' namespaces and the daemon's own (its status ConfigMap), as
                # the chart installs it
                for name in [*(f"ns-{i}" for i in range(NAMESPACES)), "elastic-autoscaler"]
            )
        )
        await asyncio.gather(
            *(
                call(
                    "POST",
                    "/apis/scheduling.volcano.sh/v1beta1/queues",
                    {
                        "apiVersion": "scheduling.volcano.sh/v1beta1",
                        "kind": "Queue",
                        "metadata": {"name": f"team-{q:03d}"},
                        "spec": {"weight": 1},
                    },
                )
                for q in range(QUEUES)
            )
        )
        jobs = _jobs(n)
        sizes = []
        placed: list[tuple[str, str, int, str]] = []  # ns, pod name, GPUs, queue
        refs: dict[tuple[str, str], dict] = {}  # (ns, job) -> its pods' controller reference

        async def job(obj: dict) -> None:
            meta = obj["metadata"]
            ns, name = meta["namespace"], meta["name"]
            body = {k: v for k, v in obj.items() if k != "status"}
            body["metadata"] = {
                k: v for k, v in meta.items() if k in ("name", "namespace", "annotations")
            }
            base = f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs"
            created = await call("POST", base, body)
            refs[ns, name] = {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": name,
                "uid": created["metadata"]["uid"],
                "controller": True,
            }
            worker = obj["spec"]["pytorchReplicaSpecs"]["Worker"]
            done = await call(
                "PATCH",
                f"{base}/{name}/status",
                {
                    "status": {
                        "replicaStatuses": {
                            "Worker": {"active": worker["replicas"]},
                            "Master": {"active": 1},
                        },
                        "startTime": "2026-11-22T08:00:00Z",
                        "conditions": [{"type": "Running", "status": "True"}],
                    }
                },
                "application/merge-patch+json",
            )
            sizes.append(len(json.dumps(done)))
            per = worker["template"]["spec"]["containers"][0]["resources"]["limits"][
                "nvidia.com/gpu"
            ]
            queue = obj["spec"]["runPolicy"]["schedulingPolicy"]["queue"]
            placed.append((ns, f"{name}-master-0", 0, queue))
            placed.extend((ns, f"{name}-worker-{i}", per, queue) for i in range(worker["replicas"]))
            gpus = (
                worker["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
                * worker["replicas"]
            )
            await call(
                "POST",
                f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups",
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "PodGroup",
                    "metadata": {
                        "name": name,
                        "namespace": ns,
                        "ownerReferences": [
                            {
                                "apiVersion": "kubeflow.org/v1",
                                "kind": "PyTorchJob",
                                "name": name,
                                "uid": created["metadata"]["uid"],
                                "controller": True,
                            }
                        ],
                    },
                    "spec": {
                        "minMember": worker["replicas"] + 1,
                        "queue": obj["spec"]["runPolicy"]["schedulingPolicy"]["queue"],
                        "minResources": {"nvidia.com/gpu": str(gpus)},
                    },
                    "status": {"phase": "Running", "running": worker["replicas"] + 1},
                },
            )

        await asyncio.gather(*(job(j) for j in jobs))
        await asyncio.gather(
            *(
                call(
                    "POST",
                    f"/apis/scheduling.volcano.sh/v1beta1/namespaces/ns-{i % NAMESPACES}/podgroups",
                    {
                        "apiVersion": "scheduling.volcano.sh/v1beta1",
                        "kind": "PodGroup",
                        "metadata": {"name": f"waiting-{i}", "namespace": f"ns-{i % NAMESPACES}"},
                        "spec": {
                            "minMember": 2,
                            "queue": f"team-{i % QUEUES:03d}",
                            "minResources": {"nvidia.com/gpu": str(1 + i % 8)},
                        },
                        "status": {"phase": "Pending"},
                    },
                )
                for i in range(PENDING)
            )
        )
        extra: dict = {}
        if pods:
            # nodes of 8 GPUs, pods packed onto them in order (a worker never straddles)
            nodes: list[int] = []
            where = []
            for _, _, gpus, _ in placed:
                if not nodes or nodes[-1] + gpus > 8:
                    nodes.append(0)
                nodes[-1] += gpus
                where.append(f"gpu-node-{len(nodes) - 1:05d}")
            alloc = {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti", "pods": "110"}

            async def node(name: str) -> None:
                await call(
                    "POST",
                    "/api/v1/nodes",
                    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}},
                )
                await call(
                    "PATCH",
                    f"/api/v1/nodes/{name}/status",
                    {
                        "status": {
                            "capacity": alloc,
                            "allocatable": alloc,
                            "conditions": [{"type": "Ready", "status": "True"}],
                        }
                    },
                    "application/merge-patch+json",
                )
                # the API server's TaintNodesByCondition puts node.kubernetes.io/not-ready:
                # NoSchedule on a new node, and no node lifecycle controller runs here to
                # lift it: node fit (and the scheduler) rightly admit no pod there
                await call(
                    "PATCH",
                    f"/api/v1/nodes/{name}",
                    {"spec": {"taints": None}},
                    "application/merge-patch+json",
                )

            # `total_nodes` beyond what the pods fill: idle nodes (the top of a range)
            count = max(len(nodes), total_nodes)
            await asyncio.gather(*(node(f"gpu-node-{i:05d}") for i in range(count)))
            pod_sizes = []

            async def pod(row: tuple[str, str, int, str], node: str) -> None:
                ns, name, gpus, queue = row
                owner = refs[ns, name.rsplit("-", 2)[0]] if owners else None
                made = await call(
                    "POST",
                    f"/api/v1/namespaces/{ns}/pods",
                    _pod(ns, name, node, gpus, queue, owner),
                )
                pod_sizes.append(len(json.dumps(made)))

            await asyncio.gather(*(pod(row, node) for row, node in zip(placed, where, strict=True)))
            extra = {
                "nodes": count,
                "pods": len(placed),
                "pod_bytes_median": int(statistics.median(pod_sizes)),
            }
        return {
            "load_s": round(time.perf_counter() - t0, 1),
            "job_bytes_median": int(statistics.median(sizes)),
            **extra,
        }


def daemon_settings(kubeconfig: str, prom_url: str, page_size: int, **more: Any) -> Any:
    """The benchmark daemon's settings: the fake Prometheus' series, no leader election,
    no cooldowns (`more`: any other setting)."""
    from autoscaler.settings import Settings

    return Settings(
        prometheus_url=prom_url,
        free_gpus_query="free_gpus",
        kubeconfig=Path(kubeconfig),
        leader_election=False,
        max_metric_age_seconds=10**9,
        cycle_deadline_seconds=600,
        kube_request_timeout_seconds=120,
        log_level="warning",
        kube_list_page_size=page_size,
        cooldown_seconds=0,
        cooldown_restart_cost_factor=0,
        growth_payoff_factor=0,
        **more,
    )


async def _measure(
    kubeconfig: str,
    prom_url: str,
    page_size: int,
    steady: int,
    node_fit: bool = False,
    tune_gc: bool = True,
) -> dict:
    # autoscaler first, as the daemon imports it: the client's packages then resolve
    # names lazily (autoscaler/client/lazy_client.py); no kubernetes_asyncio import before it
    import server_probe

    from autoscaler.client.config import make_api_client
    from autoscaler.core.options import ServerOptions
    from autoscaler.read.kube.tuning import settle_gc, sync_gc
    from autoscaler.report.logs import configure_logging
    from autoscaler.run.wiring import build

    settings = daemon_settings(kubeconfig, prom_url, page_size, node_fit=node_fit)
    configure_logging(settings)
    client = await make_api_client(settings.kube_options())
    # the daemon as `run` builds it: every kind (the Paddle and Volcano caches stay
    # empty), nodes, the decoders, the triggers, the status writer; HTTP on a free port
    parts = build(settings, client, server=ServerOptions(listen_host="127.0.0.1", listen_port=0))
    kube, controller = parts.kube, parts.controller
    gc_clock = _GcClock()
    if tune_gc:
        sync_gc()  # as the daemon does before its caches list
    target = server_probe.Target.from_env()
    server_before = server_probe.take(target) if target else None
    t0, cpu0 = time.perf_counter(), time.process_time()
    running = parts.running()
    await running.__aenter__()
    await kube.wait_synced(600)
    sync_s, sync_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    # what the server did over the sync alone (its LISTs and the watches' start)
    sync_server = (
        server_probe.delta(server_before, server_probe.take(target))
        if target and server_before
        else {}
    )
    sync_gc_s = gc_clock.seconds
    sync_peak = _peak_rss_mib()  # what the sync itself peaked at, before any cycle
    if tune_gc:
        settle_gc()  # as the daemon does once its caches synced
    before = kube.stats()
    first = await controller.run_once(datetime.now(UTC))
    first_peak = _peak_rss_mib()
    applied = first.applied.counts() if first.applied else {}
    # what is reported of a cycle, not the cycle: the daemon holds no plan but its last
    # (runs 1-5 held the first and the settling cycle's to the end, ~5 MiB at 10k jobs)
    first_s, first_resizes = first.duration_seconds, len(first.plan.actions) if first.plan else 0
    del first
    steady_times, steady_writes = [], 0
    await _status_written(parts, 1)
    # the next cycle is the first to see its resizes in flight (held at their target,
    # the queue's in-flight GPUs): its status object says so, a write of its own
    settle_s = (await controller.run_once(datetime.now(UTC))).duration_seconds
    await _status_written(parts, 2)
    after_first = kube.stats()
    status_writes = parts.status.writes if parts.status else 0
    steady_gc, whole_times = [], []
    for _ in range(steady):
        gc_before = gc_clock.seconds
        t_whole = time.perf_counter()
        result = await controller.run_once(datetime.now(UTC))
        # the whole call: the cycle as `duration_seconds` has it, then the status document
        # built and handed to its writer, then the heap's free memory released
        whole_times.append(time.perf_counter() - t_whole)
        steady_times.append(result.duration_seconds)
        steady_gc.append(gc_clock.seconds - gc_before)
        steady_writes += len(result.applied.results) if result.applied else 0
        del result
    end = kube.stats()
    # the status object is written when its content changes (else on a heartbeat): a
    # steady cycle changes nothing, so it writes nothing
    status_writes = (parts.status.writes if parts.status else 0) - status_writes
    await running.__aexit__(None, None, None)
    await client.close()
    return {
        "page_size": page_size,
        "node_fit": node_fit,
        "sync_s": round(sync_s, 2),
        "sync_cpu_s": round(sync_cpu_s, 2),
        "sync_gc_s": round(sync_gc_s, 2),
        "sync_lists": before["lists"],
        "first_cycle_s": round(first_s, 3),
        "first_resizes": first_resizes,
        "first_writes": {k.value: v for k, v in applied.items()},
        "settle_cycle_ms": round(1000 * settle_s, 1),
        "steady_cycle_ms": round(1000 * statistics.median(steady_times), 1),
        "steady_cycle_ms_range": [
            round(1000 * min(steady_times), 1),
            round(1000 * max(steady_times), 1),
        ],
        "steady_run_once_ms": round(1000 * statistics.median(whole_times), 1),
        "steady_run_once_ms_range": [
            round(1000 * min(whole_times), 1),
            round(1000 * max(whole_times), 1),
        ],
        "steady_gc_ms": round(1000 * statistics.median(steady_gc), 1),
        "tune_gc": tune_gc,
        "steady_api_calls": (end["lists"] - after_first["lists"])
        + (end["watches"] - after_first["watches"])
        + steady_writes
        + status_writes,
        "code": DAEMON_ROOT,
        "sync_server": sync_server,
        "peak_rss_mib": _peak_rss_mib(),
        "peak_rss_mib_after_sync": sync_peak,
        "peak_rss_mib_after_first_cycle": first_peak,
        "rss_mib_end": _rss_mib(),
    }


async def _status_written(parts, writes: int) -> None:
    """Wait (at most 10 s) until the status writer has written `writes` objects: it
    writes in the background, so a cycle's write may land during the next cycles."""
    for _ in range(200):
        if parts.status is None or parts.status.writes >= writes:
            return
        await asyncio.sleep(0.05)


async def daemon_caches(
    kubeconfig: str, page_size: int, node_fit: bool, encoding: str = "default"
) -> tuple[Any, Any]:
    """The API client and the daemon's caches (unstarted), as `run` builds them;
    `encoding`: an Accept-Encoding the client asks for instead of its default."""
    from autoscaler.client.config import make_api_client
    from autoscaler.run.wiring import build_sources
    from autoscaler.settings import Settings

    settings = Settings(
        kubeconfig=Path(kubeconfig),
        kube_list_page_size=page_size,
        node_fit=node_fit,
        log_level="warning",
        kube_request_timeout_seconds=120,
    )
    client = await make_api_client(settings.kube_options())
    if encoding != "default":
        client.set_default_header("Accept-Encoding", encoding)
    kube, prometheus = build_sources(settings, client)
    prometheus.close()
    return client, kube


_TOKEN_AT = re.compile(rb'"continue":"([^"]*)"')


async def list_pages(
    cache: Any, page_size: int, protobuf: bool = False
) -> AsyncIterator[tuple[bool, bytes]]:
    """A cache's LIST, page by page, as the daemon asks for it: (served, body); a kind
    whose CRD is not installed answers one page, not served. `protobuf`: Pods and Nodes
    asked for in protobuf, as the daemon's caches ask them (settings.kube_protobuf);
    else everything in JSON."""
    from autoscaler.read.kube import proto

    func, args, kwargs = cache._call_args()
    if protobuf and cache._proto is not None:
        kwargs = {**kwargs, "_accept": proto.ACCEPT}
    token = ""
    while True:
        response = await func(
            *args,
            **kwargs,
            limit=page_size,
            _continue=token or None,
            _request_timeout=120,
            _preload_content=False,
        )
        body = await response.read()
        response.release()
        yield response.status == 200, body
        if response.status != 200:
            return
        # the list's metadata (and its continue token) comes before the items in the
        # core group's lists (Pods, Nodes), after them in a custom resource's: the
        # floor before [placement] #27's second round read one page of each core list
        if proto.is_proto(body):
            # read from the list's metadata alone, the items not walked: a floor reader
            # does no more than it must (it walked them until #45's sixth round)
            token = proto.continue_ahead(body) or ""
        else:
            found = _TOKEN_AT.search(body, 0, 4096) or _TOKEN_AT.search(
                body, max(0, len(body) - 4096)
            )
            token = found.group(1).decode() if found else ""
        if not token:
            return


async def read_lists(kube: Any, page_size: int, protobuf: bool = False) -> dict:
    """Every cache's LIST (as KubeSource would make it, all at once), each page read
    and discarded: pages, bytes (uncompressed, whatever the wire carried), wall and CPU
    seconds."""
    read = {"pages": 0, "bytes": 0}

    async def read_all(cache: Any) -> None:
        async for _, body in list_pages(cache, page_size, protobuf):
            read["pages"] += 1
            read["bytes"] += len(body)

    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(read_all(c) for c in kube._caches))
    return {**read, "s": time.perf_counter() - t0, "cpu_s": time.process_time() - cpu0}


async def _floor(kubeconfig: str, page_size: int, node_fit: bool, protobuf: bool) -> dict:
    """The server's own time for the LISTs a sync makes (`read_lists`): in JSON, or
    with Pods and Nodes in protobuf as the daemon asks them (`protobuf`)."""
    import server_probe

    client, kube = await daemon_caches(kubeconfig, page_size, node_fit)
    target = server_probe.Target.from_env()
    before = server_probe.take(target) if target else None
    read = await read_lists(kube, page_size, protobuf)
    server = server_probe.delta(before, server_probe.take(target)) if target and before else {}
    await client.close()
    return {
        "floor": "protobuf" if protobuf else "json",
        "floor_server": server,
        "page_size": page_size,
        "node_fit": node_fit,
        "floor_s": round(read["s"], 2),
        "floor_cpu_s": round(read["cpu_s"], 2),
        "pages": read["pages"],
    }


class _GcClock:
    """Time spent in the garbage collector since made (gc.callbacks)."""

    def __init__(self) -> None:
        import gc

        self.seconds = 0.0
        self._start = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _peak_rss_mib() -> float:
    """VmHWM of this process: ru_maxrss would carry the parent's peak across exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def _main(args: argparse.Namespace) -> None:
    from kubeserver import envtest_server
    from promserver import fake_prometheus, sample, vector_body
    from server_probe import SERVER_ARGS

    now = time.time()
    body = vector_body(
        *(sample(f"team-{q:03d}", FREE_PER_QUEUE * 1000.0, now) for q in range(QUEUES))
    )
    fits = {"both": (False, True), "on": (True,), "off": (False,)}[args.fit]
    if args.server_gogc:
        # the benchmark's server (and its etcd) only: see --server-gogc
        os.environ["GOGC"] = str(args.server_gogc)
    with envtest_server("envtest-bench-", SERVER_ARGS if args.settle else None) as server:
        loaded = await _load(
            server.url, server.token, str(server.ca_file), args.jobs, args.pods, args.nodes
        )
        print(json.dumps({"jobs": args.jobs, **loaded}), flush=True)
        if args.pin:
            _pin(server)
        kubeconfig = server.kubeconfig()
        async with fake_prometheus(body) as prom:
            for page in args.page_size:
                for node_fit in fits if args.pods else (False,):
                    fit = "--node-fit" if node_fit else "--no-node-fit"
                    floor = ("--floor", str(kubeconfig), str(page), fit)
                    floors = [await _child(server, args.settle, *floor)]
                    pfloor = (*floor, "--proto-floor")
                    pfloors = []
                    if args.proto_floors:
                        pfloors.append(await _child(server, args.settle, *pfloor))
                    codes = [str(ROOT), *([args.compare_root] if args.compare_root else [])]
                    for _ in range(args.repeat):
                        for tune, code in itertools.product(
                            (True, False) if args.gc_compare else (True,), codes
                        ):
                            tuned = "--tune-gc" if tune else "--no-tune-gc"
                            daemon = await _child(
                                server,
                                args.settle,
                                *("--measure", str(kubeconfig), prom.url, str(page)),
                                *(str(args.steady), fit, tuned),
                                show=False,
                                code=code,
                            )
                            # the first cycle resized jobs: put them back, so each run
                            # starts alike
                            await _reset(server)
                            # a floor after each daemon: each is compared with the
                            # floors either side of it, their server's CPU beside
                            floors.append(await _child(server, args.settle, *floor))
                            if args.proto_floors:
                                pfloors.append(await _child(server, args.settle, *pfloor))
                            row = _against(daemon, floors[-2:], pfloors[-2:])
                            print(json.dumps(row), flush=True)
                    for _ in range(args.watch_list):
                        # the same collections streamed, as client-go's reflector asks
                        # them by default (benchmarks/watch_list.py), then a floor again
                        streamed = ("--child", "watch-list", str(kubeconfig))
                        await _child(server, args.settle, *streamed, script=WATCH_LIST)
                        await _child(server, args.settle, *floor)


def _against(daemon: dict, floors: list[dict], pfloors: list[dict] = ()) -> dict:
    """A daemon's row with the floors either side of it: the sync against their mean,
    and what the server did (`_brief`) over the sync and over each floor's reads;
    `pfloors`, the protobuf floors either side (--proto-floors), likewise."""
    mean = statistics.mean(f["floor_s"] for f in floors)
    proto = {}
    if pfloors:
        pmean = statistics.mean(f["floor_s"] for f in pfloors)
        proto = {
            "proto_floors_s": [f["floor_s"] for f in pfloors],
            "x_proto_floor": round(daemon["sync_s"] / pmean, 2),
            "server_proto_floors": [_brief(f.get("floor_server") or {}) for f in pfloors],
        }
    return {
        **proto,
        **{k: v for k, v in daemon.items() if k not in ("server", "sync_server")},
        "floors_s": [f["floor_s"] for f in floors],
        "x_floor": round(daemon["sync_s"] / mean, 2),
        "server_sync": _brief(daemon.get("sync_server") or {}),
        "server_floors": [_brief(f.get("floor_server") or {}) for f in floors],
        "server_whole_daemon": _brief(daemon.get("server") or {}),
    }


def _brief(server: dict) -> dict:
    """What says which mode the server served in: its CPU and etcd's, LIST pages from
    the watch cache and from etcd, its collections."""
    keep = ("api_cpu_s", "etcd_cpu_s", "cache_lists", "storage_lists", "storage_fetched")
    keep += ("consistency_checks", "gc_cycles", "gc_cpu_s")
    return {k: server[k] for k in keep if k in server}


WATCH_LIST = Path(__file__).with_name("watch_list.py")


async def _child(
    server, settle: bool, *argv: str, show: bool = True, code: str = "", script: Path | None = None
) -> dict:
    """One child process (a floor or a daemon), its result with what the server did
    meanwhile (server_probe: the API server's and etcd's CPU, LISTs served from the
    watch cache or from etcd, the server's collections); `settle`: the server put in
    the same state first (server_probe.settle)."""
    import server_probe

    settled = server_probe.settle(server, time.time_ns()) if settle else None
    target = server_probe.Target.of(server)
    env = {**os.environ, **target.to_env(), "BENCH_DAEMON_ROOT": code or str(ROOT)}
    before = server_probe.take(target)
    # --pin: the children (floors and daemons) on the core the server was moved off
    pinned = ["taskset", "-c", CLIENT_CPU] if os.environ.get("BENCH_PIN") else []
    proc = await asyncio.create_subprocess_exec(
        *pinned,
        sys.executable,
        str(script or __file__),
        *argv,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    out, _ = await proc.communicate()
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["server"] = server_probe.delta(before, server_probe.take(target))
    if settled is not None:
        result["server"]["settle_s"] = round(settled, 1)
    if show:
        print(json.dumps(result), flush=True)
    return result


SERVER_CPU, CLIENT_CPU = "0", "1"


def _pin(server) -> None:
    """--pin: the API server and etcd (every thread) on one core, the children on the
    other, as a control plane's server runs on machines of its own: the floor is then
    the server's own time, and a daemon's decode overlaps it unless it takes longer."""
    import subprocess

    for proc in (server._api, server._etcd):
        subprocess.run(["taskset", "-a", "-p", "-c", SERVER_CPU, str(proc.pid)], check=True,
                       capture_output=True)  # fmt: skip
    os.environ["BENCH_PIN"] = "1"


async def _reset(server) -> None:
    """Undo the first cycle's resizes through the API (spec back to what runs)."""
    jobs = server.request("GET", "/apis/kubeflow.org/v1/pytorchjobs")["items"]
    for job in jobs:
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
        active = job["status"]["replicaStatuses"]["Worker"]["active"]
        if worker["replicas"] != active:
            meta = job["metadata"]
            server.request(
                "PATCH",
                f"/apis/kubeflow.org/v1/namespaces/{meta['namespace']}/pytorchjobs/{meta['name']}",
                {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": active}}}},
                content_type="application/merge-patch+json",
            )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--page-size", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--steady", type=int, default=10)
    parser.add_argument("--pods", action="store_true", help="also nodes and a bound pod per worker")
    parser.add_argument(
        "--nodes", type=int, default=0, help="with --pods: at least N nodes (idle ones added)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="N daemons, each after a floor and before one"
    )
    parser.add_argument(
        "--compare-root",
        help="also a daemon of the code in this folder (a checkout of another commit), "
        "after each daemon of this tree's, a floor between them",
    )
    parser.add_argument(
        "--server-gogc",
        type=int,
        default=200,
        help="GOGC for the benchmark's kube-apiserver and etcd (0: their default, 100): at "
        "200 the heap may grow to 3x what is live before the server collects it, so that "
        "after the collection --settle makes none lands inside a child's LISTs",
    )
    parser.add_argument(
        "--watch-list",
        type=int,
        default=0,
        help="then N times: the same collections streamed as client-go asks them "
        "(benchmarks/watch_list.py), and a floor",
    )
    parser.add_argument(
        "--fit",
        choices=("both", "on", "off"),
        default="both",
        help="with --pods: the daemon with node_fit on, off or both (default)",
    )
    parser.add_argument(
        "--settle",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="before each child, a write to each paged collection and a collection of "
        "the server's heap (server_probe.settle), so floors and daemons meet the server "
        "in one state",
    )
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--floor", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--proto-floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--pin",
        action="store_true",
        help="after the load, the API server and etcd on CPU 0 and every floor and "
        "daemon on CPU 1 (taskset): the server with a core of its own, as on a control "
        "plane, instead of sharing both with the client",
    )
    parser.add_argument(
        "--proto-floors",
        action="store_true",
        help="after each floor (every LIST in JSON), a floor with Pods and Nodes in "
        "protobuf, as the daemon asks them (settings.kube_protobuf)",
    )
    parser.add_argument(
        "--gc-compare",
        action="store_true",
        help="also measure without the daemon's GC tuning (sources.kube.sync_gc, settle_gc)",
    )
    parser.add_argument("--tune-gc", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--node-fit", action=argparse.BooleanOptionalAction, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        kubeconfig, page = args.floor
        floor = _floor(kubeconfig, int(page), bool(args.node_fit), args.proto_floor)
        print(json.dumps(asyncio.run(floor)))
        return 0
    if args.measure:
        kubeconfig, prom_url, page, steady = args.measure
        result = _measure(
            kubeconfig, prom_url, int(page), int(steady), bool(args.node_fit), args.tune_gc
        )
        print(json.dumps(asyncio.run(result)))
        return 0
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
