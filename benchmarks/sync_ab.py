"""The initial sync of several checkouts, side by side on one loaded REAL kube-apiserver
(envtest binaries, found via KUBEBUILDER_ASSETS): a quick A/B of a change to the read side.

    KUBEBUILDER_ASSETS=... python benchmarks/sync_ab.py --code DIR [DIR ...] [--rounds 8]
        [--jobs 10000] [--nodes 26000] [--trace DIR] [--pin]

The cluster of `cycle_real.py --pods` is loaded once (~3.5 min at 10k jobs). Then each
round: a floor (every LIST the caches make, Pods and Nodes in protobuf as the daemon asks
them, each page read and thrown away: `cycle_real._floor`, its client built by the first
checkout's code), then each checkout's daemon, its sync only (built as `run` builds it,
its caches started, until every one has listed; no cycle), each in its own process, the
server settled before each child as cycle_real does. A round takes ~30 s at 10k jobs,
against cycle_real's few minutes: the sync's ratio to the floor moves by 0.1 from one
child to the next on 2 shared cores, so it takes rounds to see a change of a few %.

Printed: a line per child; at the end, per checkout, its sync against the mean of the
floors either side of it (median and range over the rounds), its sync, its CPU and its
VmHWM right after the sync, and `x_floor_if_cpu_bound`: the CPU the server and the
daemon spent over the CPU the server and the floor's reader spent (medians over the
rounds). On cores the server and the daemon share, a sync cannot end before their CPU
is spent, nor a floor before the server's and its reader's: this is the ratio the two
would score if each kept every core busy; what a daemon scores above it is a core left
idle (a LIST that ends alone). [scale] #45, sixth round.

`--pin`: after the load, the API server and etcd on one core and every child on the
other (`cycle_real.py --pin`), as a control plane's server runs on machines of its own:
the floor is then the server's own time, and a daemon's decode overlaps it. [scale] #45,
seventh round.

`--trace DIR`: each daemon's LIST pages (when each was asked for and read, each page's
decode and its CPU) as JSON, one file per daemon: which LIST ends last, and where a
page waited. [scale] #45, third round (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests")]
import cycle_real  # noqa: E402  (puts the daemon's code, BENCH_DAEMON_ROOT, first on the path)


def _trace_pages(trace: list[tuple[Any, ...]]) -> None:
    """Record each page's request and decode: (LIST, what, start, end[, CPU])."""
    from autoscaler.read.kube import pages

    page, take = pages.ListPages._page, pages.ListPages._take_page

    async def traced_page(self: Any, *args: Any) -> bytes:
        t0 = time.perf_counter()
        body: bytes = await page(self, *args)
        trace.append((self.name, "page", t0, time.perf_counter()))
        return body

    async def traced_take(self: Any, *args: Any) -> None:
        t0, cpu0 = time.perf_counter(), time.process_time()
        await take(self, *args)
        trace.append((self.name, "take", t0, time.perf_counter(), time.process_time() - cpu0))

    pages.ListPages._page = traced_page  # type: ignore[method-assign]
    pages.ListPages._take_page = traced_take  # type: ignore[method-assign]


def _write_trace(where: str, t0: float, trace: list[tuple[Any, ...]]) -> str:
    out = Path(where) / f"sync-{os.getpid()}.json"
    out.write_text(json.dumps({"code": cycle_real.DAEMON_ROOT, "t0": t0, "pages": trace}))
    return str(out)


async def _sync(kubeconfig: str, prom_url: str, trace_to: str) -> dict[str, Any]:
    """A daemon's sync, as cycle_real._measure starts one, and nothing after it."""
    from autoscaler.client.config import make_api_client
    from autoscaler.core.options import ServerOptions
    from autoscaler.read.kube.tuning import sync_gc
    from autoscaler.report.logs import configure_logging
    from autoscaler.run.wiring import build

    trace: list[tuple[Any, ...]] = []
    if trace_to:
        _trace_pages(trace)
    settings = cycle_real.daemon_settings(kubeconfig, prom_url, 500, node_fit=True)
    configure_logging(settings)
    client = await make_api_client(settings.kube_options())
    parts = build(settings, client, server=ServerOptions(listen_host="127.0.0.1", listen_port=0))
    sync_gc()
    t0, cpu0 = time.perf_counter(), time.process_time()
    running = parts.running()
    await running.__aenter__()
    await parts.kube.wait_synced(600)
    result = {
        "sync_s": round(time.perf_counter() - t0, 3),
        "sync_cpu_s": round(time.process_time() - cpu0, 3),
        "peak_rss_mib_after_sync": cycle_real._peak_rss_mib(),
    }
    if trace_to:
        result["trace"] = _write_trace(trace_to, t0, trace)
    await running.__aexit__(None, None, None)
    await client.close()
    return result


async def _main(args: argparse.Namespace) -> None:
    from kubeserver import envtest_server
    from promserver import fake_prometheus, sample, vector_body
    from server_probe import SERVER_ARGS

    os.environ["GOGC"] = "200"  # the benchmark's server, as cycle_real's --server-gogc
    now = time.time()
    body = vector_body(
        *(
            sample(f"team-{q:03d}", cycle_real.FREE_PER_QUEUE * 1000.0, now)
            for q in range(cycle_real.QUEUES)
        )
    )
    codes = args.code
    floors: list[float] = []
    floor_cpus: list[float] = []  # the server's CPU and the floor reader's, each floor
    syncs: dict[str, list[tuple[int, dict[str, Any]]]] = {c: [] for c in codes}
    with envtest_server("envtest-sync-ab-", SERVER_ARGS) as server:
        loaded = await cycle_real._load(
            server.url, server.token, str(server.ca_file), args.jobs, True, args.nodes
        )
        print(json.dumps({"jobs": args.jobs, **loaded, "pinned": args.pin}), flush=True)
        if args.pin:
            cycle_real._pin(server)
        kubeconfig = str(server.kubeconfig())
        floor = ("--floor", kubeconfig, "500", "--node-fit", "--proto-floor")
        async with fake_prometheus(body) as prom:
            for round_ in range(args.rounds + 1):
                done = await cycle_real._child(server, True, *floor, show=False, code=codes[0])
                floors.append(done["floor_s"])
                api = done.get("server", {}).get("api_cpu_s") or 0.0
                floor_cpus.append(api + done["floor_cpu_s"])
                print(
                    json.dumps(
                        {
                            "round": round_,
                            "floor_s": done["floor_s"],
                            "floor_cpu_s": done["floor_cpu_s"],
                            "api_cpu_s": api,
                        }
                    ),
                    flush=True,
                )
                if round_ == args.rounds:
                    break  # the floor after the last round's daemons
                for code in codes:
                    child = ("--sync", kubeconfig, prom.url, args.trace or "")
                    result = await cycle_real._child(
                        server, True, *child, show=False, code=code, script=Path(__file__)
                    )
                    result["api_cpu_s"] = result.pop("server", {}).get("api_cpu_s")
                    print(json.dumps({"round": round_, "code": code, **result}), flush=True)
                    syncs[code].append((round_, result))
    for code, rows in syncs.items():
        ratios = [r["sync_s"] / statistics.mean(floors[i : i + 2]) for i, r in rows]
        bounds = [
            ((r["api_cpu_s"] or 0.0) + r["sync_cpu_s"]) / statistics.mean(floor_cpus[i : i + 2])
            for i, r in rows
        ]
        print(
            json.dumps(
                {
                    "code": code,
                    "x_floor_median": round(statistics.median(ratios), 2),
                    "x_floor_range": [round(min(ratios), 2), round(max(ratios), 2)],
                    "x_floor_if_cpu_bound": round(statistics.median(bounds), 2),
                    "sync_s_median": round(statistics.median(r["sync_s"] for _, r in rows), 2),
                    "sync_cpu_s_median": round(
                        statistics.median(r["sync_cpu_s"] for _, r in rows), 2
                    ),
                    "peak_rss_mib_after_sync": max(r["peak_rss_mib_after_sync"] for _, r in rows),
                    "rounds": len(rows),
                }
            ),
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--code", nargs="+", default=[str(ROOT)], help="checkouts to compare")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=26000)
    parser.add_argument("--trace", default="", help="write each daemon's LIST pages here")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="after the load, the API server and etcd on CPU 0, every floor and daemon on "
        "CPU 1 (cycle_real --pin): the server with a core of its own, as on a control plane",
    )
    parser.add_argument("--sync", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sync:
        kubeconfig, prom_url, trace_to = args.sync
        print(json.dumps(asyncio.run(_sync(kubeconfig, prom_url, trace_to))))
        return 0
    if args.trace:
        Path(args.trace).mkdir(parents=True, exist_ok=True)
    args.code = [str(Path(c).resolve()) for c in args.code]
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
