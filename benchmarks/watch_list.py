"""The daemon's LISTs asked as a stream instead of in pages, against a REAL kube-apiserver
(envtest binaries, found via KUBEBUILDER_ASSETS):
`python benchmarks/watch_list.py [--jobs 10000] [--nodes 26000] [--repeat 2]`.

The cluster of `cycle_real.py --pods`. Then child processes, alternated: the paged floor
(every LIST the daemon's caches make with node_fit on, in pages, each page read and thrown
away: `cycle_real.read_lists`) and the same collections asked as client-go's reflector
asks them by default since Kubernetes 1.35 (WatchListClient): one watch per collection
with `sendInitialEvents=true&resourceVersionMatch=NotOlderThan`, the server streaming
every object as an ADDED event from its watch cache and then a bookmark saying the
initial events ended (each line read and thrown away). Before each child the server is
put in one state (`server_probe.settle`). Each line: wall, the reader's CPU, and what
the server did meanwhile (`server_probe`). [placement] #27, fifth round
(docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

END = b"k8s.io/initial-events-end"


def _path(cache) -> tuple[str, dict[str, str]]:
    """A cache's collection (all namespaces) and its selectors."""
    r = cache.resource
    base = f"/api/{r.version}" if not r.group else f"/apis/{r.group}/{r.version}"
    query = {}
    if cache.label_selector:
        query["labelSelector"] = cache.label_selector
    if cache.field_selector:
        query["fieldSelector"] = cache.field_selector
    return f"{base}/{r.plural}", query


async def _watch_lists(kubeconfig: str) -> dict:
    """Every cache's collection streamed until its initial events end."""
    import aiohttp
    import server_probe
    from cycle_real import daemon_caches

    client, kube = await daemon_caches(kubeconfig, 500, True)
    await client.close()
    target = server_probe.Target.from_env()
    assert target is not None
    ctx = ssl.create_default_context(cafile=target.ca_file)
    read = {"events": 0, "bytes": 0}
    headers = {"Authorization": f"Bearer {target.token}", "Accept": "application/json"}

    async def stream(http: aiohttp.ClientSession, cache) -> None:
        path, query = _path(cache)
        query |= {
            "watch": "1",
            "sendInitialEvents": "true",
            "resourceVersionMatch": "NotOlderThan",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "600",
        }
        async with http.get(target.url + path, params=query) as resp:
            if resp.status != 200:
                raise RuntimeError(f"{path}: {resp.status} {(await resp.text())[:300]}")
            async for line in resp.content:
                read["events"] += 1
                read["bytes"] += len(line)
                if line.startswith(b'{"type":"BOOKMARK"') and END in line:
                    return

    t0, cpu0 = time.perf_counter(), time.process_time()
    before = server_probe.take(target)
    async with aiohttp.ClientSession(
        headers=headers, connector=aiohttp.TCPConnector(ssl=ctx)
    ) as http:
        await asyncio.gather(*(stream(http, c) for c in kube._caches))
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    server = server_probe.delta(before, server_probe.take(target))
    return {"what": "watch-list", "s": round(took, 2), "cpu_s": round(cpu, 2), **read, **server}


async def _floor(kubeconfig: str) -> dict:
    import server_probe
    from cycle_real import daemon_caches, read_lists

    client, kube = await daemon_caches(kubeconfig, 500, True)
    target = server_probe.Target.from_env()
    assert target is not None
    before = server_probe.take(target)
    read = await read_lists(kube, 500)
    server = server_probe.delta(before, server_probe.take(target))
    await client.close()
    took, cpu = read.pop("s"), read.pop("cpu_s")
    return {"what": "paged", "s": round(took, 2), "cpu_s": round(cpu, 2), **read, **server}


async def _child(server, what: str, kubeconfig: str) -> None:
    import server_probe

    settled = server_probe.settle(server, time.time_ns())
    env = {**os.environ, **server_probe.Target.of(server).to_env()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--child",
        what,
        kubeconfig,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    out, _ = await proc.communicate()
    result = json.loads(out.decode().strip().splitlines()[-1])
    result.pop("storage_lists_by", None)
    print(json.dumps({**result, "settle_s": round(settled, 1)}), flush=True)


async def _main(args: argparse.Namespace) -> None:
    from cycle_real import _load
    from kubeserver import envtest_server
    from server_probe import SERVER_ARGS

    with envtest_server("envtest-watchlist-", SERVER_ARGS) as server:
        loaded = await _load(
            server.url, server.token, str(server.ca_file), args.jobs, True, args.nodes
        )
        print(json.dumps({"jobs": args.jobs, **loaded}), flush=True)
        kubeconfig = str(server.kubeconfig())
        for i in range(args.repeat):
            order = ("paged", "watch-list") if i % 2 == 0 else ("watch-list", "paged")
            for what in order:
                await _child(server, what, kubeconfig)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=26000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, kubeconfig = args.child
        run = {"paged": _floor, "watch-list": _watch_lists}[what]
        print(json.dumps(asyncio.run(run(kubeconfig))))
        return 0
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
