"""One daemon cycle end to end at scale: `python benchmarks/cycle.py [--jobs 1000 10000]`.

The fake API server (tests/fakekube.py, the real kubernetes_asyncio client talks to it)
and a fake Prometheus run in a child process, so the RSS printed is the daemon's own.
For each size: time to list and sync the caches, the first cycle (which patches jobs and
creates Events), then steady cycles (nothing to do), with the API calls each made by
verb, and the daemon's peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

QUEUES = 100
NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def _jobs(n: int) -> list[dict]:
    """Jobs as a cluster holds them: a Master and a Worker template with a command, env,
    volumes and probes, managedFields, and kubectl's last-applied annotation."""

    from builders import pytorchjob

    rng = random.Random(7)
    out = []
    for i in range(n):
        min_r = rng.randint(1, 3)
        max_r = min_r + rng.randint(0, 8)
        replicas = rng.randint(min_r, max_r)
        job = pytorchjob(
            f"job-{i}",
            f"ns-{i % 37}",
            queue=f"team-{i % QUEUES:03d}",
            min_replicas=min_r,
            max_replicas=max_r,
            replicas=replicas,
            active=replicas,
            gpus=rng.choice([1, 1, 2, 4, 8]),
        )
        worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
        container = worker["template"]["spec"]["containers"][0]
        container.update(
            {
                "command": [
                    "torchrun",
                    "--nnodes=1:8",
                    "--nproc-per-node=1",
                    "train.py",
                    "--config",
                    f"/configs/run-{i}.yaml",
                ],
                "env": [{"name": f"VAR_{k}", "value": f"value-{k}-{i}"} for k in range(12)],
                "volumeMounts": [
                    {"name": "data", "mountPath": "/data"},
                    {"name": "dshm", "mountPath": "/dev/shm"},
                ],
            }
        )
        worker["template"]["spec"]["volumes"] = [
            {"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i % 50}"}},
            {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        ]
        job["spec"]["pytorchReplicaSpecs"]["Master"] = json.loads(json.dumps(worker))
        job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 1
        job["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
            json.dumps({"spec": job["spec"]})
        )
        job["metadata"]["managedFields"] = [
            {
                "manager": "kubectl-client-side-apply",
                "operation": "Update",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:elasticPolicy": {}}},
            }
        ]
        out.append(job)
    return out


async def _serve(n: int) -> None:
    """Child: serve the fake API with n jobs and a fake Prometheus; answer `count` and
    `reset` on stdin with JSON on stdout."""

    from fakekube import FakeKubeApi
    from promserver import fake_prometheus, sample, vector_body

    body = vector_body(*(sample(f"team-{q:03d}", 4000.0, NOW.timestamp()) for q in range(QUEUES)))
    async with FakeKubeApi() as api, fake_prometheus(body) as prom:
        for obj in _jobs(n):
            api.put(obj)
        print(json.dumps({"api": api.url, "prometheus": prom.url}), flush=True)
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().strip():
            if line == "count":
                verbs: dict[str, int] = {}
                for r in api.requests:
                    verbs[r.verb] = verbs.get(r.verb, 0) + 1
                print(json.dumps(verbs), flush=True)
            elif line == "reset":
                api.reset_requests()
                print("{}", flush=True)


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Child:
    def __init__(self, n: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.urls = json.loads(self.proc.stdout.readline())

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


async def _measure(n: int, steady: int) -> dict:
    from kubernetes_asyncio.client import ApiClient, Configuration

    from autoscaler.core.options import ServerOptions
    from autoscaler.report.logs import configure_logging
    from autoscaler.run.wiring import build
    from autoscaler.settings import Settings

    child = Child(n)
    try:
        settings = Settings(
            prometheus_url=child.urls["prometheus"],
            leader_election=False,
            free_gpus_query="free_gpus",  # the fake answers one value a queue
            max_metric_age_seconds=10**9,
            cycle_deadline_seconds=600,
            kube_request_timeout_seconds=60,
            log_level="warning",
        )
        configure_logging(settings)  # as the daemon does: debug lines cost nothing
        client = ApiClient(Configuration(host=child.urls["api"]))
        # the daemon as `run` builds it: every job kind, nodes and pods, the decoders, the
        # triggers, the status writer; HTTP on a free port
        parts = build(
            settings, client, server=ServerOptions(listen_host="127.0.0.1", listen_port=0)
        )
        kube, controller = parts.kube, parts.controller
        child.ask("reset")
        t0 = time.perf_counter()
        running = parts.running()
        await running.__aenter__()
        await kube.wait_synced(600)
        sync_s = time.perf_counter() - t0
        sync_calls = child.ask("count")
        child.ask("reset")
        first = await controller.run_once(NOW)
        first_calls = child.ask("count")
        child.ask("reset")
        steady_times = []
        for i in range(steady):
            # later than every cooldown, with the same free GPUs: the grown jobs' workers
            # are in flight, so there is nothing left to do
            result = await controller.run_once(NOW.replace(minute=1 + i))
            steady_times.append(result.duration_seconds)
        steady_calls = child.ask("count")
        await running.__aexit__(None, None, None)
        await client.close()
        return {
            "jobs": n,
            "sync_s": sync_s,
            "sync_calls": sync_calls,
            "first_cycle_s": first.duration_seconds,
            "first_actions": len(first.plan.actions),
            "first_calls": first_calls,
            "steady_cycle_s": statistics.median(steady_times),
            "steady_calls_per_cycle": {k: v / steady for k, v in steady_calls.items()},
            "rss_mib": _rss_mib(),
        }
    finally:
        child.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--steady", type=int, default=5)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        asyncio.run(_serve(args.serve))
        return 0
    for n in args.jobs:
        # one size per process, so each RSS is that size's own peak
        out = subprocess.run(
            [
                sys.executable,
                "-c",
                "import asyncio, json, sys; sys.argv=['cycle'];"
                f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r});"
                "import cycle;"
                f"print(json.dumps(asyncio.run(cycle._measure({n}, "
                f"{args.steady}))))",
            ],
            capture_output=True,
            text=True,
            check=True,
            env=os.environ,
        )
        print(out.stdout.strip().splitlines()[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
