"""Resizes against the server's own floor, on a REAL kube-apiserver + etcd (envtest
binaries, found via KUBEBUILDER_ASSETS): `python benchmarks/resize_real.py [--jobs 500]
[--rounds 3]`.

Jobs as a cluster holds them (benchmarks/cycle_real.py's loader: Master and Worker
templates, env, volumes, kubectl's last-applied annotation, the server's managedFields, a
PodGroup each), created through the API. Then, in the same run and alternating, `--rounds`
times each:

- **bare**: the server's own time for one merge patch per job (the worker replicas and
  the two annotations a resize writes, pinned to the resourceVersion), sent with plain
  aiohttp, `max_parallel_writes` in flight: the floor;
- **resizes**: the same jobs resized through `KubeActuator.apply` (the daemon's client,
  its pacing, one patch and one Event per resize), timed until apply returns, Events
  included.

The server is not throttled (no max-inflight flags): this measures what the actuator adds
to the server's own work. Prints one JSON line per round and the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

KF = "/apis/kubeflow.org/v1"
TICK = os.sysconf("SC_CLK_TCK")


def _server_cpu(server: Any) -> float:
    """CPU seconds the API server and etcd have used so far (the machine is shared:
    wall times move with other people's load; this does not)."""
    total = 0.0
    for proc in (server._api, server._etcd):
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    return total


async def _timed(server: Any, work: Any) -> dict[str, float]:
    cpu, server_cpu, t0 = time.process_time(), _server_cpu(server), time.perf_counter()
    await work
    return {
        "wall_s": round(time.perf_counter() - t0, 2),
        "server_cpu_s": round(_server_cpu(server) - server_cpu, 2),
        "client_cpu_s": round(time.process_time() - cpu, 2),
    }


def _jobs(server: Any) -> list[dict]:
    items = server.request("GET", f"{KF}/pytorchjobs")["items"]
    return sorted(items, key=lambda j: (j["metadata"]["namespace"], j["metadata"]["name"]))


def _replicas(job: dict) -> int:
    return int(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])


async def _bare(server: Any, jobs: list[dict], parallel: int) -> None:
    """Seconds for one merge patch per job, `parallel` in flight, nothing else."""
    import aiohttp

    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    headers = {
        "Authorization": f"Bearer {server.token}",
        "Content-Type": "application/merge-patch+json",
    }
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    gate = asyncio.Semaphore(parallel)
    async with aiohttp.ClientSession(
        headers=headers, connector=aiohttp.TCPConnector(ssl=ctx, limit=parallel)
    ) as http:

        async def patch(job: dict) -> None:
            meta = job["metadata"]
            body = {
                "metadata": {
                    "resourceVersion": meta["resourceVersion"],
                    "annotations": {
                        "elastic-autoscaler.io/last-scale-time": stamp,
                        "elastic-autoscaler.io/last-scale-reason": "ScaleUpIdleGpus",
                    },
                },
                "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": _replicas(job) + 1}}},
            }
            path = f"{KF}/namespaces/{meta['namespace']}/pytorchjobs/{meta['name']}"
            async with gate, http.patch(server.url + path, data=json.dumps(body)) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    raise RuntimeError(f"PATCH {path}: {resp.status} {text[:300]}")

        await asyncio.gather(*(patch(j) for j in jobs))


async def _resizes(server: Any, jobs: list[dict]) -> None:
    """Seconds for KubeActuator to resize every job (patch and Event each)."""
    from kubernetes_asyncio.client import ApiClient

    from autoscaler.act.actuator import KubeActuator
    from autoscaler.act.results import Outcome
    from autoscaler.core.model import Decision, ObjectRef, Plan
    from autoscaler.core.reasons import Reason
    from autoscaler.settings import Settings

    settings = Settings(kube_request_timeout_seconds=60, cycle_deadline_seconds=600)
    now = datetime.now(UTC)
    decisions = []
    for job in jobs:
        meta, current = job["metadata"], _replicas(job)
        decisions.append(
            Decision(
                ref=ObjectRef(meta["namespace"], meta["name"], "PyTorchJob", meta["uid"]),
                queue=job["spec"]["runPolicy"]["schedulingPolicy"]["queue"],
                current=current,
                target=current + 1,
                reason=Reason.SCALE_UP_IDLE_GPUS,
                message=f"{current} -> {current + 1} worker(s) into idle GPUs",
                min_replicas=1,
                max_replicas=current + 1,
                gpus_per_worker=1,
                resource_version=meta["resourceVersion"],
            )
        )
    async with ApiClient(server.configuration()) as client:
        actuator = KubeActuator(settings.actuator_options(), client)
        result = await actuator.apply(Plan(now=now, decisions=tuple(decisions)), now)
    if result.count(Outcome.APPLIED) != len(jobs):
        raise RuntimeError(f"not every resize landed: {result.counts()}")


async def _main(args: argparse.Namespace) -> None:
    from cycle_real import _load
    from kubeserver import envtest_server

    from autoscaler.report.logs import configure_logging
    from autoscaler.settings import Settings

    # as the daemon logs (a JSON line per resize); run with 2>/dev/null to keep them off
    configure_logging(Settings(log_format="json"))
    parallel = Settings().max_parallel_writes
    rows = []
    with envtest_server("envtest-resize-") as server:
        loaded = await _load(server.url, server.token, str(server.ca_file), args.jobs)
        print(json.dumps({"jobs": args.jobs, **loaded}), flush=True)
        for i in range(args.rounds):
            # alternate which goes first: the server warms, and others' load comes and goes
            bare = lambda: _timed(server, _bare(server, _jobs(server), parallel))  # noqa: E731
            resize = lambda: _timed(server, _resizes(server, _jobs(server)))  # noqa: E731
            if i % 2:
                r, b = await resize(), await bare()
            else:
                b, r = await bare(), await resize()
            row = {
                "bare": b,
                "resizes": r,
                "wall_ratio": round(r["wall_s"] / b["wall_s"], 2),
                "server_cpu_ratio": round(r["server_cpu_s"] / b["server_cpu_s"], 2),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {
        f"{how}_{key}": round(fn(row[key] for row in rows), 2)
        for key in ("wall_ratio", "server_cpu_ratio")
        for how, fn in (("median", statistics.median), ("min", min))
    }
    print(json.dumps(summary))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(_main(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
