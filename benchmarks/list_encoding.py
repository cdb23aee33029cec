"""What asking for the LIST answers uncompressed costs, against a REAL kube-apiserver
(envtest binaries, found via KUBEBUILDER_ASSETS):
`python benchmarks/list_encoding.py [--jobs 10000] [--nodes 26000] [--repeat 2]`.

The cluster of `cycle_real.py --pods` (jobs, PodGroups, queues, nodes, a bound pod per
worker). Then, in child processes alternated AB, BA, ...: the server's floor (every
LIST the daemon's caches make with node_fit on, all at once, each page read and thrown
away, as `cycle_real._floor`) and the daemon's sync (its caches started, until every
one has listed; no cycle), each with the client's default `Accept-Encoding` (aiohttp:
gzip, deflate; kube-apiserver gzips an answer over 128 KB) and with `identity`. Each
line: wall time, the reader's CPU, and the API server process's CPU over the child's
life (from /proc). [placement] #27, fourth round (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]


async def _client(kubeconfig: str, page: int, encoding: str):
    from cycle_real import daemon_caches

    return await daemon_caches(kubeconfig, page, True, encoding)


async def _floor(kubeconfig: str, page: int, encoding: str) -> dict:
    from cycle_real import read_lists

    client, kube = await _client(kubeconfig, page, encoding)
    read = await read_lists(kube, page)
    await client.close()
    took, cpu = read.pop("s"), read.pop("cpu_s")
    return {"what": "floor", "s": round(took, 2), "cpu_s": round(cpu, 2), **read}


async def _sync(kubeconfig: str, page: int, encoding: str) -> dict:
    from autoscaler.read.kube.tuning import sync_gc

    client, kube = await _client(kubeconfig, page, encoding)
    sync_gc()  # as the daemon does before its caches list
    t0, cpu0 = time.perf_counter(), time.process_time()
    await kube.start()
    await kube.wait_synced(600)
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await kube.stop()
    await client.close()
    return {"what": "sync", "s": round(took, 2), "cpu_s": round(cpu, 2)}


async def _child(server_pid: int, *argv: str) -> None:
    from server_probe import cpu_seconds as _cpu_seconds

    before = _cpu_seconds(server_pid)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, *argv, stdout=asyncio.subprocess.PIPE, env=os.environ
    )
    out, _ = await proc.communicate()
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["server_cpu_s"] = round(_cpu_seconds(server_pid) - before, 2)
    print(json.dumps(result), flush=True)


async def _main(args: argparse.Namespace) -> None:
    from cycle_real import _load
    from kubeserver import envtest_server

    with envtest_server("envtest-encoding-") as server:
        loaded = await _load(
            server.url, server.token, str(server.ca_file), args.jobs, True, args.nodes
        )
        print(json.dumps({"jobs": args.jobs, **loaded}), flush=True)
        kubeconfig, pid = str(server.kubeconfig()), server._api.pid
        for i in range(args.repeat):
            order = ("default", "identity") if i % 2 == 0 else ("identity", "default")
            for what in ("floor", "sync"):
                for encoding in order:
                    await _child(pid, "--child", what, kubeconfig, str(args.page_size), encoding)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10000)
    parser.add_argument("--nodes", type=int, default=26000)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        what, kubeconfig, page, encoding = args.child
        run = {"floor": _floor, "sync": _sync}[what]
        result = asyncio.run(run(kubeconfig, int(page), encoding))
        print(json.dumps({**result, "encoding": encoding}))
        return 0
    asyncio.run(_main(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
