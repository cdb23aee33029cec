"""A drain of resizes under one mutating seat, against a REAL kube-apiserver:
`python benchmarks/throttle.py [--jobs 300] [--rounds 1]` (KUBEBUILDER_ASSETS as for
the tests).

The API server runs with `--max-mutating-requests-inflight=1` and API Priority and Fairness
off (with APF on, that flag only sizes APF's pool), so a second write in flight gets a
429 with `Retry-After: 1`. Clients write as a ServiceAccount: system:masters is never
throttled. In the same run, on the same server:

1. bare patches: the server's own rate for this client, one merge patch of one job after
   the other (one in flight: no 429 at all), and with 8 in flight, a 429 retried at once
   (what the seat admits when it is never idle);
2. the daemon (`python -m autoscaler run`, a child process, as deployed), steady and
   ready, is given 3 idle GPUs per job by a fake Prometheus and grows every job 1 -> 4:
   one patch and one Event each. Resizes are timed as the API server shows them (a
   watch, as admin), from the first to land to the last; /readyz is polled throughout.
   The bare patches of 1. run while this daemon already runs, so its watch caches
   decode every change then too (the same work as during its drain).

The drain's rate is compared with the bare rate, resizes (patches) and all mutating
requests (patches + Events) apart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

ONE_SEAT = ["--max-mutating-requests-inflight=1", "--enable-priority-and-fairness=false"]
KF = "/apis/kubeflow.org/v1"


async def _bare(server: Any, token: str, ns: str, names: list[str], parallel: int) -> dict:
    """One merge patch per job (an annotation), `parallel` in flight, 429s retried at once."""
    import aiohttp

    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/merge-patch+json",
    }
    todo = list(reversed(names))
    done: list[float] = []
    throttled = 0
    stamp = str(time.time())
    async with aiohttp.ClientSession(
        headers=headers, connector=aiohttp.TCPConnector(ssl=ctx, limit=parallel)
    ) as http:

        async def worker() -> None:
            nonlocal throttled
            while todo:
                name = todo.pop()
                while True:
                    body = {"metadata": {"annotations": {"bench/bare": f"{stamp}-{parallel}"}}}
                    url = f"{server.url}{KF}/namespaces/{ns}/pytorchjobs/{name}"
                    async with http.patch(url, data=json.dumps(body)) as resp:
                        await resp.read()
                        if resp.status == 429:
                            throttled += 1
                            continue
                        assert resp.status == 200, resp.status
                        done.append(time.perf_counter())
                        break

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(parallel)))
    span = done[-1] - start
    return {"parallel": parallel, "patches": len(done), "seconds": span,
            "per_second": len(done) / span, "throttled": throttled}  # fmt: skip


async def _run(server: Any, token: str, ns: str, queue: str, names: list[str], tmp: Path) -> dict:
    """Start the daemon with no idle GPUs (steady, ready), measure bare patches while it
    runs (its caches decode every change, as during the drain), then give it 3 idle GPUs
    per job and time the drain."""
    import aiohttp
    from kubernetes_asyncio import watch
    from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
    from promserver import Canned, fake_prometheus
    from test_faults import daemon_env, daemon_process, live_body

    n = len(names)
    kubeconfig = server.kubeconfig(token, name="autoscaler")
    landed: dict[str, float] = {}
    ready_samples: list[bool] = []
    async with fake_prometheus(live_body(**{queue: 0})) as prom:
        env = daemon_env(
            tmp,
            kubeconfig,
            prom.url,
            namespaces=f'["{ns}"]',
            interval_seconds=10,  # /readyz allows 3 intervals since the last good cycle
            min_interval_seconds=10,
            cycle_deadline_seconds=60,
            kube_request_timeout_seconds=10,
        )
        async with ApiClient(server.configuration()) as admin:
            api = CustomObjectsApi(admin)
            stream = watch.Watch()

            async def follow() -> None:
                async for event in stream.stream(
                    api.list_namespaced_custom_object,
                    "kubeflow.org",
                    "v1",
                    ns,
                    "pytorchjobs",
                    timeout_seconds=600,
                ):
                    obj = event["object"]
                    name = obj["metadata"]["name"]
                    if obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4:
                        landed.setdefault(name, time.perf_counter())

            watcher = asyncio.create_task(follow())
            async with daemon_process(env) as proc, aiohttp.ClientSession() as http:

                async def ready() -> bool:
                    url = f"http://127.0.0.1:{proc.port}/readyz"
                    with contextlib.suppress(aiohttp.ClientError):
                        async with http.get(url) as resp:
                            return resp.status == 200
                    return False

                await proc.wait_for("cycle", 120, result="ok")
                assert await ready()
                serial = await _bare(server, token, ns, names, 1)
                hammer = await _bare(server, token, ns, names, 8)
                # now there is room: every job grows 1 -> 4 in the daemon's next cycle
                prom.answers[:] = [Canned(live_body(**{queue: 3 * n}))]
                started = time.perf_counter()
                while len(landed) < n:
                    ready_samples.append(await ready())
                    # the fake's samples must stay fresh: stamp them again
                    prom.answers[:] = [Canned(live_body(**{queue: 3 * n}))]
                    assert time.perf_counter() - started < 600, f"{len(landed)}/{n} landed"
                    await asyncio.sleep(0.2)
                drained = time.perf_counter()
                events_done = None
                while time.perf_counter() - drained < 60:
                    items = server.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
                    if len(items) >= n:
                        events_done = time.perf_counter()
                        break
                    await asyncio.sleep(0.5)
                ready_samples.append(await ready())
                async with http.get(f"http://127.0.0.1:{proc.port}/metrics") as resp:
                    metrics = await resp.text()
                await proc.stop()
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
    times = sorted(landed.values())
    span = times[-1] - times[0]
    wanted = ("write_throttles_total", "cycles_total", "write_window ")
    return {
        "bare_serial": serial,
        "bare_8_in_flight": hammer,
        "daemon": {
            "resizes": n,
            "first_to_last_s": span,
            "resizes_per_second": (n - 1) / span,
            "events_done_s": None if events_done is None else events_done - times[0],
            "mutating_per_second": None
            if events_done is None
            else 2 * n / (events_done - times[0]),
            "readyz_false_samples": ready_samples.count(False),
            "readyz_samples": len(ready_samples),
            "metrics": [
                line
                for line in metrics.splitlines()
                if not line.startswith("#") and any(w in line for w in wanted)
            ],
        },
    }


async def _round(server: Any, n: int, tmp: Path) -> dict:
    from builders import pytorchjob

    ns = server.create_namespace("drain")
    queue = f"{ns}-q"
    server.apply_queue(queue)
    names = [f"j{i:04d}" for i in range(n)]
    for name in names:
        obj = pytorchjob(name, ns, queue=queue, replicas=1, active=1)
        obj.pop("status")
        obj["metadata"] = {"name": name, "namespace": ns}
        server.create(obj)
        server.patch_status(obj, {"replicaStatuses": {"Worker": {"active": 1}}})
    token = server.service_account_token(ns, "autoscaler", "cluster-admin")
    out = await _run(server, token, ns, queue, names, tmp)
    best = max(out["bare_serial"]["per_second"], out["bare_8_in_flight"]["per_second"])
    drain = out["daemon"]
    out["resizes_vs_bare"] = drain["resizes_per_second"] / best
    out["mutating_vs_bare"] = (drain["mutating_per_second"] or 0) / best
    return out


async def _main(args: argparse.Namespace) -> None:
    from kubeserver import envtest_server

    with (
        envtest_server("envtest-throttle-", extra_args=ONE_SEAT) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for _ in range(args.rounds):
            print(json.dumps(await _round(server, args.jobs, Path(tmp)), indent=2), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    asyncio.run(_main(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
