"""Where the daemon's CPU goes in its initial sync, offline: LIST pages recorded once from
a REAL kube-apiserver, then decoded by the caches' own code, collection by collection.

    KUBEBUILDER_ASSETS=... python benchmarks/sync_decode.py --capture DIR --jobs 2000 --nodes 5200
    python benchmarks/sync_decode.py --pages DIR [--repeat 5] [--profile N]

`--capture` loads the cluster of `cycle_real.py --pods` (PyTorchJobs with managedFields, a
PodGroup each, 200 waiting gangs, 100 Queues, nodes, a bound pod per worker and Master;
`--nodes` pads it with idle nodes, 5,200 at 2,000 jobs is the 26k of 10k jobs) and writes
every page of every LIST the daemon's caches make with node_fit on (pages of 500), as
served (uncompressed: JSON, or with `--protobuf` Pods and Nodes in protobuf as the
daemon asks them), gzipped into DIR.

`--pages` replays them through each cache as `_Cache._list` takes a page (the page's
envelope, then `_take` per object: its lean read, `sources.wire`, and its record,
`parse.decoders`, or `sources.straight`; then `_install`, each change reported to the
daemon's triggers), with the network left out: what the sync spends
beyond the floor's reader, which reads the same pages and throws them away. Printed per
collection, process CPU (min over `--repeat` passes, no profiler): the envelope, the read,
the record, the install, per object; then `KubeSource.objects()`, the records a first
cycle reads. `--profile N`: cProfile over one pass, its N heaviest functions by own time.
`--code=DIR`: the caches' code of another checkout (main before a change).
`--straight KIND` (with `--pages`): KIND's straight reader alone over its objects, memos
warm, min of `--repeat` passes: a change to `sources/straight.py` measured by itself.
The caches' memos (shapes, holdings, resource lists) are cleared before each pass, as a
daemon starts with them empty. [placement] #27, sixth round (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import gzip
import io
import json
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# the caches' code: this tree's, or another's (`--code DIR`: a checkout before a change)
CODE = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--code=")), str(ROOT))
sys.path[:0] = [CODE, str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

PAGE_SIZE = 500


async def _dump(kubeconfig: str, out: Path, protobuf: bool) -> dict[str, int]:
    from cycle_real import daemon_caches, list_pages

    client, kube = await daemon_caches(kubeconfig, PAGE_SIZE, node_fit=True)
    pages: dict[str, int] = {}
    for i, cache in enumerate(kube._caches):
        kind, page = cache.resource.kind, 0
        async for served, body in list_pages(cache, PAGE_SIZE, protobuf):
            if not served:  # a kind whose CRD is not installed
                break
            name = f"{i:02d}-{kind}-{page:04d}.json.gz"
            (out / name).write_bytes(gzip.compress(body, compresslevel=1))
            pages[kind] = pages.get(kind, 0) + 1
            page += 1
    await client.close()
    return pages


async def _capture(out: Path, jobs: int, nodes: int, protobuf: bool) -> None:
    from cycle_real import _load
    from kubeserver import envtest_server

    with envtest_server("envtest-sync-decode-") as server:
        loaded = await _load(server.url, server.token, str(server.ca_file), jobs, True, nodes)
        pages = await _dump(str(server.kubeconfig()), out, protobuf)
    print(json.dumps({"jobs": jobs, **loaded, "pages": pages}), flush=True)


def _read_pages(folder: Path) -> dict[int, list[bytes]]:
    """Cache index -> its pages' bodies, in order."""
    by_cache: dict[int, list[bytes]] = defaultdict(list)
    for path in sorted(folder.glob("*.json.gz")):
        by_cache[int(path.name.split("-", 1)[0])].append(gzip.decompress(path.read_bytes()))
    return by_cache


def _clear_memos() -> None:
    """What a daemon starts without: the readers' memos (shapes, holdings, resource
    lists, interned values, worker templates)."""
    from autoscaler.read import podspec
    from autoscaler.read.kinds import base

    getattr(base, "_TEMPLATES", {}).clear()  # none before the sixth round
    for name in ("_SHAPES", "_HOLDS", "_QUANTITIES", "_INTERNED"):
        memo = getattr(podspec, name, None)
        if isinstance(memo, dict):
            memo.clear()
    for name in dir(podspec):
        cached = getattr(podspec, name)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


class _Driver:
    """What the triggers ask of the daemon's driver during a sync: its last plan's idle
    queues (none yet), and an early cycle (which the sync does not wait for)."""

    class controller:
        idle_queues: frozenset[str] = frozenset()

    def trigger(self, urgent: bool = False) -> None:
        pass


class _Pass:
    """One pass over the pages: each cache's LIST taken as `_Cache._list` takes it."""

    def __init__(self, by_cache: dict[int, list[bytes]], client: Any) -> None:
        from autoscaler.report.metrics import Metrics
        from autoscaler.run.wiring import _Triggers, build_sources
        from autoscaler.settings import Settings

        # the daemon's caches as `run` builds them with node_fit on (never started), every
        # change reported to the daemon's triggers as `build` connects them
        settings = Settings(node_fit=True, kube_list_page_size=PAGE_SIZE, log_level="warning")
        triggers = _Triggers(settings, Metrics())
        triggers.driver = _Driver()  # type: ignore[assignment]
        # told of the kinds the triggers read, as `build` connects them (every kind
        # before #45's fifth round, whose triggers had no `kinds`)
        kinds = [triggers.kinds] if hasattr(triggers, "kinds") else []
        self.kube, prometheus = build_sources(settings, client, triggers.on_change, *kinds)
        prometheus.close()
        self.by_cache = by_cache

    @staticmethod
    def _page(cache: Any, body: bytes) -> tuple[Any, Any]:
        """A page's items and how the cache takes each: protobuf or JSON as it came
        (`_Cache._read_page`; JSON alone before the seventh round)."""
        from autoscaler.read.kube.pages import _PAGE

        if hasattr(cache, "_read_page"):
            _, _, items, take = cache._read_page(body)
            return items, take
        return _PAGE.decode(body).items or (), cache._take

    def run(self, timed: bool) -> dict[str, dict[str, float]]:
        clock = time.process_time
        out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for i, cache in enumerate(self.kube._caches):
            bodies = self.by_cache.get(i)
            if not bodies:
                continue
            row = out[cache.resource.kind]
            fresh: dict[Any, Any] = {}
            seen: set[Any] = set()  # keys dropped as too large (all listed, before #45.5)
            start = clock()
            for body in bodies:
                t = clock()
                items, take = self._page(cache, body)
                row["envelope"] += clock() - t
                row["objects"] += len(items)
                if timed:
                    read, decode = cache._read, cache._decode
                    fast = getattr(cache, "_fast", None)  # none before the sixth round
                    if take != cache._take:  # protobuf: its readers
                        read, fast = cache._proto.wire, cache._proto.fast
                    for raw in items:
                        t0 = clock()
                        if fast is not None and fast(raw) is not None:
                            row["straight"] += clock() - t0
                            continue
                        obj = read(raw)
                        t1 = clock()
                        decode(obj)
                        row["read"] += t1 - t0
                        row["record"] += clock() - t1
                for raw in items:
                    take(raw, fresh, seen)
            t = clock()
            cache._install(fresh, seen, "1")
            cache.synced.set()
            row["install"] += clock() - t
            row["take"] += clock() - start - row["install"]
        t = clock()
        self.kube.objects()
        out["(objects)"]["records"] = clock() - t
        return out


async def _replay(folder: Path, repeat: int, profile: int) -> None:
    from kubernetes_asyncio.client import ApiClient, Configuration

    from autoscaler.read.kube.tuning import sync_gc

    client = ApiClient(Configuration())  # asked for nothing: the pages are on disk

    by_cache = _read_pages(folder)
    sync_gc()  # as the daemon does before its caches list
    best: dict[str, dict[str, float]] = {}
    totals = []
    for _ in range(repeat):
        _clear_memos()
        one = _Pass(by_cache, client)
        gc.collect()
        t = time.process_time()
        # `take` is the cache's own code over every object (timed alone, not per call)
        result = one.run(timed=False)
        totals.append(time.process_time() - t)
        _clear_memos()
        timed = _Pass(by_cache, client).run(timed=True)
        for kind, row in result.items():
            row.update(
                {k: v for k, v in timed[kind].items() if k in ("read", "record", "straight")}
            )
            keep = best.setdefault(kind, dict(row))
            for k, v in row.items():
                keep[k] = min(keep[k], v)
        del one, timed, result
    columns = ("envelope", "read", "record", "straight", "take", "install")
    print(
        f"{'collection':24s} {'objects':>7s} "
        + " ".join(f"{c:>8s}" for c in columns)
        + f" {'us/obj':>7s}  (CPU ms, min of {repeat})"
    )
    for kind, row in best.items():
        n = int(row.get("objects", 0))
        if not n:
            continue
        # `take` is the envelope and every object taken, as the cache does it
        print(
            f"{kind:24s} {n:7d} "
            + " ".join(f"{1000 * row.get(c, 0.0):8.1f}" for c in columns)
            + f" {1e6 * row.get('take', 0.0) / n:7.1f}"
        )
    print(
        f"KubeSource.objects() (the records a first cycle reads): "
        f"{1000 * best['(objects)']['records']:.1f} ms"
    )
    print(
        f"whole pass (take + install + objects): {1000 * min(totals):.1f} ms CPU "
        f"(min of {repeat}; all: {', '.join(f'{1000 * t:.0f}' for t in totals)})"
    )
    if profile:
        _clear_memos()
        one = _Pass(by_cache, client)
        prof = cProfile.Profile()
        prof.enable()
        one.run(timed=False)
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(profile)
        print(text.getvalue())
    await client.close()


def _straight_alone(folder: Path, kind: str, repeat: int) -> None:
    """`--straight KIND`: the straight reader of KIND (`sources.straight`, the daemon's
    settings with node_fit on) alone over that kind's captured objects, its memos warm
    after the first pass: the per-object cost of the reader's own code, min of passes."""
    from autoscaler.read.kube.pages import _PAGE
    from autoscaler.read.kube.straight import straight
    from autoscaler.settings import Settings

    read = straight(kind, Settings(node_fit=True).read_options())
    if read is None:
        raise SystemExit(f"no straight reader for {kind}")
    items = [
        raw
        for path in sorted(folder.glob(f"*-{kind}-*.json.gz"))
        for raw in _PAGE.decode(gzip.decompress(path.read_bytes())).items or ()
    ]
    taken = sum(read(raw) is not None for raw in items)
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for raw in items:
            read(raw)
        best = min(best, time.process_time() - t)
    print(
        f"{kind}: {len(items)} objects, {taken} taken straight: {1000 * best:.1f} ms CPU, "
        f"{1e6 * best / max(1, len(items)):.2f} us an object (min of {repeat} passes)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--capture", type=Path, help="load a real server, write its pages here")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=5200)
    parser.add_argument(
        "--protobuf",
        action="store_true",
        help="with --capture: Pods and Nodes in protobuf, as the daemon asks them "
        "(settings.kube_protobuf); else every page in JSON",
    )
    parser.add_argument("--pages", type=Path, help="replay the pages written here")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, help="cProfile: the N heaviest")
    parser.add_argument("--code", help="--code=DIR: the caches' code of this checkout")
    parser.add_argument("--straight", help="with --pages: time this kind's straight reader")
    args = parser.parse_args()
    if args.capture:
        args.capture.mkdir(parents=True, exist_ok=True)
        asyncio.run(_capture(args.capture, args.jobs, args.nodes, args.protobuf))
    if args.pages and args.straight:
        _straight_alone(args.pages, args.straight, args.repeat)
    elif args.pages:
        asyncio.run(_replay(args.pages, args.repeat, args.profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
