"""The daemon's dry-run and churn cycles against a REAL kube-apiserver + etcd (envtest
binaries, KUBEBUILDER_ASSETS): `python benchmarks/churn_real.py [--jobs 10000]
[--nodes 26000] [--dry-run] [--churn [N]] [--compare-root DIR]`.

The cluster is cycle_real.py's with `--pods` (its builder, reused): 100 Queues, N
PyTorchJobs with their PodGroups (Running), 200 waiting gangs, a bound pod per worker and
Master, nodes of 8 GPUs (`--nodes`: at least that many, idle ones added). The daemon runs
in a child process (its peak RSS and CPU are its own), built as `run` builds it, with
node fit on (Node and bound-Pod watches):

- `--dry-run`: as `run --dry-run` builds it (settings.dry_run, the DryRunActuator, its
  lines written to /dev/null): nothing is applied, so every cycle plans the first
  cycle's resizes again, beside the waiting gangs;
- `--churn N` (20 a second if N is left out: about 100 pods per 5-second cycle): after
  the steady cycles, another process replaces N bound worker pods a second through the
  API, as a kubelet restarting them would (DELETE, POST again bound to the same node by
  spec.nodeName, then phase Running through /status), while the daemon runs a cycle
  every `--period` seconds.

Each daemon row says: the initial sync against the server's floor for the same LISTs
(cycle_real's floor, a child before and after each daemon), the first cycle, steady
cycles (median wall ms and CPU ms of the daemon process), churn cycles likewise with the
pod events each saw and the daemon's whole CPU per period (its watches' decoding too),
the peak RSS over the run and under churn alone (the peak reset before churn starts,
/proc/self/clear_refs). `BENCH_PROFILE=FILE`: the churn cycles under cProfile, the
stats dumped to FILE (the first daemon of this tree only: not `--compare-root`'s, nor
the next ones of `--repeat`);
`BENCH_CHECK=1`: after each churn cycle (untimed), its assembly compared with the whole
assembly of its records (`check_mismatches`: the cycles where they differ).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import itertools
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import cycle_real as real  # sets sys.path: the daemon's code (BENCH_DAEMON_ROOT), tests/

SCRIPT = Path(__file__).resolve()
# what a kubelet writes once a pod's containers run again
RUNNING = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


def _settings(kubeconfig: str, prom_url: str, page_size: int, dry_run: bool) -> Any:
    # node fit on (Node and bound-Pod watches); dry_run as `run --dry-run` sets it
    return real.daemon_settings(kubeconfig, prom_url, page_size, node_fit=True, dry_run=dry_run)


async def _cycle(controller: Any, profile: cProfile.Profile | None = None) -> dict:
    """One `Controller.run_once`: its wall and CPU seconds, as the daemon reports it and
    whole (the status document built and handed on too)."""
    t0, cpu0 = time.perf_counter(), time.process_time()
    if profile is not None:
        profile.enable()
    result = await controller.run_once(datetime.now(UTC))
    if profile is not None:
        profile.disable()
    return {
        "whole_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - cpu0,
        "cycle_s": result.duration_seconds,
        "actions": len(result.plan.actions) if result.plan else 0,
    }


def _reset_peak() -> bool:
    """Reset this process's peak RSS (VmHWM) to what it holds now (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def _churner(rate: int) -> asyncio.subprocess.Process:
    """The churning process, started and ready (it has listed the pods it replaces)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), "--churner", str(rate), stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = await proc.stdout.readline()
    if not line.startswith(b"ready"):
        raise RuntimeError(f"churner did not start: {line!r}")
    return proc


async def _measure(
    kubeconfig: str, prom_url: str, page: int, steady: int, args: argparse.Namespace
) -> dict:
    """The daemon's side (a child process): sync, first cycle, steady, churn."""
    from autoscaler.client.config import make_api_client
    from autoscaler.core.options import ServerOptions
    from autoscaler.read.kube.tuning import settle_gc, sync_gc
    from autoscaler.report.logs import configure_logging
    from autoscaler.run.wiring import build

    settings = _settings(kubeconfig, prom_url, page, args.dry_run)
    configure_logging(settings)
    client = await make_api_client(settings.kube_options())
    with open(os.devnull, "w") as devnull:  # noqa: ASYNC230 - not a read
        # the daemon as `run` builds it; a dry run's lines go where nobody reads them
        parts = build(
            settings,
            client,
            out=devnull,
            server=ServerOptions(listen_host="127.0.0.1", listen_port=0),
        )
        kube, controller = parts.kube, parts.controller
        sync_gc()
        t0, cpu0 = time.perf_counter(), time.process_time()
        running = parts.running()
        await running.__aenter__()
        await kube.wait_synced(600)
        sync_s, sync_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        sync_peak = real._peak_rss_mib()
        settle_gc()
        first = await _cycle(controller)
        await real._status_written(parts, 1)
        await _cycle(controller)  # the first to see the first's resizes (or said again)
        steadies = [await _cycle(controller) for _ in range(steady)]
        row: dict[str, Any] = {
            "dry_run": args.dry_run,
            "sync_s": round(sync_s, 2),
            "sync_cpu_s": round(sync_cpu_s, 2),
            "peak_rss_mib_after_sync": sync_peak,
            "first_cycle_ms": round(1000 * first["whole_s"], 1),
            "first_actions": first["actions"],
            "steady_actions": steadies[-1]["actions"] if steadies else 0,
            **_summary("steady", steadies),
            "peak_rss_mib_before_churn": real._peak_rss_mib(),
        }
        if args.churn:
            row.update(await _churn_phase(kube, controller, args))
        row["peak_rss_mib"] = real._peak_rss_mib()
        row["rss_mib_end"] = real._rss_mib()
        row["code"] = real.DAEMON_ROOT
        await running.__aexit__(None, None, None)
    await client.close()
    return row


async def _churn_phase(kube: Any, controller: Any, args: argparse.Namespace) -> dict:
    """Cycles every `args.period` seconds while the churner replaces pods."""
    profile_to = os.environ.get("BENCH_PROFILE")
    # this tree's daemon only, the first one (`--repeat`: the next ones unprofiled)
    mine = real.DAEMON_ROOT == str(real.ROOT)
    fresh = profile_to and not os.path.exists(profile_to)  # noqa: ASYNC240 - once, untimed
    profile = cProfile.Profile() if fresh and mine else None
    churner = await _churner(args.churn)
    reset = _reset_peak()
    pods = next(c for c in kube._caches if c.resource.kind == "Pod")
    cycles, events, period_cpu = [], [], []
    mismatches = 0
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        for i in range(args.churn_cycles):
            # a cycle every period, as the driver runs them: the watches apply events between
            await asyncio.sleep(max(0.0, start + (i + 1) * args.period - loop.time()))
            seen, cpu0 = pods.counters.events, time.process_time()
            cycles.append(await _cycle(controller, profile))
            events.append(seen)
            period_cpu.append(cpu0)
            if os.environ.get("BENCH_CHECK"):
                mismatches += _check(controller)
    finally:
        churner.terminate()
        await churner.wait()
    if profile is not None:
        profile.dump_stats(profile_to)
    # pod events applied between one cycle's start and the next's
    changed = [b - a for a, b in itertools.pairwise(events)]
    cpu = [b - a for a, b in itertools.pairwise(period_cpu)]
    return {
        "churn_per_s": args.churn,
        "profiled": profile is not None,
        **_summary("churn", cycles[1:]),  # the first saw the churner's start only
        "churn_pod_events_per_cycle": int(statistics.median(changed)) if changed else 0,
        "churn_period_cpu_ms": round(1000 * statistics.median(cpu), 1) if cpu else None,
        "peak_rss_mib_churn": real._peak_rss_mib() if reset else None,
        **({"check_mismatches": mismatches} if os.environ.get("BENCH_CHECK") else {}),
    }


def _check(controller: Any) -> int:
    """BENCH_CHECK=1: 1 where the cycle's assembly is not what assembling its records
    whole gives (outside the timed cycle), else 0."""
    from autoscaler.read.parse import assemble

    records, assembled = controller.source._assembled
    return 0 if assemble(records) == assembled else 1


def _summary(name: str, cycles: list[dict]) -> dict:
    if not cycles:
        return {}

    def ms(values: list[float]) -> float:
        return round(1000 * statistics.median(values), 1)

    whole = [c["whole_s"] for c in cycles]
    return {
        f"{name}_cycle_ms": ms([c["cycle_s"] for c in cycles]),
        f"{name}_run_once_ms": ms(whole),
        f"{name}_run_once_ms_range": [round(1000 * min(whole), 1), round(1000 * max(whole), 1)],
        f"{name}_cpu_ms": ms([c["cpu_s"] for c in cycles]),
        f"{name}_cycles": len(cycles),
    }


async def _workers(call: Any) -> list[tuple[str, str, str, int, str, Any]]:
    """The bound worker pods, by pages: what to create each again from."""
    workers = []
    token = ""
    while True:
        page = await call(
            "GET",
            "/api/v1/pods?limit=1000&labelSelector=training.kubeflow.org/replica-type"
            + (f"&continue={token}" if token else ""),
        )
        for p in page["items"]:
            meta, spec = p["metadata"], p["spec"]
            if "-worker-" not in meta["name"] or not spec.get("nodeName"):
                continue
            limits = spec["containers"][0]["resources"]["limits"]
            env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
            gpus, owner = int(limits["nvidia.com/gpu"]), (meta.get("ownerReferences") or [None])[0]
            workers.append(
                (meta["namespace"], meta["name"], spec["nodeName"], gpus, env["QUEUE"], owner)
            )
        token = page["metadata"].get("continue") or ""
        if not token:
            return workers


async def _churn(rate: int) -> None:
    """Replace `rate` bound worker pods a second, each as a kubelet restarting it would
    be seen: deleted, created again bound to its node, then Running."""
    import ssl

    import aiohttp
    import server_probe

    target = server_probe.Target.from_env()
    assert target is not None
    ctx = ssl.create_default_context(cafile=target.ca_file)
    headers = {"Authorization": f"Bearer {target.token}"}
    async with aiohttp.ClientSession(
        headers=headers, connector=aiohttp.TCPConnector(ssl=ctx, limit=16)
    ) as http:

        async def call(method: str, path: str, body: Any = None, ctype: str = "") -> Any:
            data = None if body is None else json.dumps(body)
            extra = {"Content-Type": ctype or "application/json"}
            async with http.request(method, target.url + path, data=data, headers=extra) as r:
                text = await r.text()
                if r.status >= 400:
                    raise RuntimeError(f"{method} {path}: {r.status} {text[:200]}")
                return json.loads(text)

        workers = await _workers(call)
        random.Random(45).shuffle(workers)
        print("ready", len(workers), flush=True)

        async def replace(row: tuple[str, str, str, int, str, Any]) -> None:
            ns, name, node, gpus, queue, owner = row
            base = f"/api/v1/namespaces/{ns}/pods"
            await call("DELETE", f"{base}/{name}?gracePeriodSeconds=0")
            await call("POST", base, real._pod(ns, name, node, gpus, queue, owner))
            await call("PATCH", f"{base}/{name}/status", RUNNING, "application/merge-patch+json")

        loop = asyncio.get_running_loop()
        start, n = loop.time(), 0
        pending: set[asyncio.Task[None]] = set()
        while True:
            batch = [workers[(n + i) % len(workers)] for i in range(rate)]
            n += rate
            for row in batch:
                task = asyncio.create_task(replace(row))
                pending.add(task)
                task.add_done_callback(pending.discard)
            await asyncio.sleep(max(0.0, start + n / rate - loop.time()))


async def _main(args: argparse.Namespace) -> None:
    from kubeserver import envtest_server
    from promserver import fake_prometheus, sample, vector_body
    from server_probe import SERVER_ARGS

    now = time.time()
    body = vector_body(
        *(sample(f"team-{q:03d}", real.FREE_PER_QUEUE * 1000.0, now) for q in range(real.QUEUES))
    )
    if args.server_gogc:
        os.environ["GOGC"] = str(args.server_gogc)
    with envtest_server("envtest-churn-", SERVER_ARGS if args.settle else None) as server:
        loaded = await real._load(
            server.url, server.token, str(server.ca_file), args.jobs, True, args.nodes, args.owners
        )
        print(json.dumps({"jobs": args.jobs, **loaded}), flush=True)
        kubeconfig = str(server.kubeconfig())
        page = str(args.page_size)
        floor = ("--floor", kubeconfig, page, "--node-fit")
        async with fake_prometheus(body) as prom:
            floors = [await real._child(server, args.settle, *floor, show=False)]
            codes = [str(real.ROOT), *([args.compare_root] if args.compare_root else [])]
            mode = ["--dry-run"] if args.dry_run else []
            mode += ["--churn", str(args.churn)] if args.churn else []
            mode += ["--churn-cycles", str(args.churn_cycles), "--period", str(args.period)]
            for _ in range(args.repeat):
                for code in codes:
                    daemon = await real._child(
                        server,
                        args.settle,
                        *("--measure", kubeconfig, prom.url, page, str(args.steady)),
                        *mode,
                        show=False,
                        code=code,
                        script=SCRIPT,
                    )
                    if not args.dry_run:
                        await real._reset(server)
                    floors.append(await real._child(server, args.settle, *floor, show=False))
                    print(json.dumps(real._against(daemon, floors[-2:])), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=26000, help="at least N nodes")
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--steady", type=int, default=5, help="steady cycles, back to back")
    parser.add_argument("--dry-run", action="store_true", help="the daemon as run --dry-run")
    parser.add_argument(
        "--churn",
        type=int,
        nargs="?",
        const=20,
        default=0,
        help="then N bound worker pods replaced a second (20 if N is left out)",
    )
    parser.add_argument("--churn-cycles", type=int, default=7, help="cycles under churn")
    parser.add_argument("--period", type=float, default=5.0, help="seconds between cycles")
    parser.add_argument("--repeat", type=int, default=1, help="N daemons of each code")
    parser.add_argument(
        "--compare-root", help="also a daemon of the code in this folder, alternated"
    )
    parser.add_argument(
        "--owners",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="pods with their controller reference to their job and its role and index "
        "labels, as training-operator makes them (else cycle_real's pods, of no job)",
    )
    parser.add_argument("--server-gogc", type=int, default=200, help="as cycle_real's")
    parser.add_argument("--settle", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--measure", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--churner", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.churner:
        asyncio.run(_churn(args.churner))
        return 0
    if args.measure:
        kubeconfig, prom_url, page, steady = args.measure
        row = asyncio.run(_measure(kubeconfig, prom_url, int(page), int(steady), args))
        print(json.dumps(row))
        return 0
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
