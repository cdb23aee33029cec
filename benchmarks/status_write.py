"""What the status object costs: `python benchmarks/status_write.py [--jobs 1000 10000 50000]`.

The cluster of planner_scale.py (100 queues, a realistic mix), planned, every action
written. Per size: the document built by the cycle (first cycle, and a steady one that
carries `since` and resize states from the last), its YAML, its size and how many jobs it
lists, and whether a steady cycle writes at all. With KUBEBUILDER_ASSETS set, the write
itself to a REAL kube-apiserver (envtest): the median of merge patches of the ConfigMap.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from planner_scale import NOW, cluster  # noqa: E402

from autoscaler.plan.planner import plan  # noqa: E402
from autoscaler.report.status.build import WriteOutcome, build_status, changed  # noqa: E402
from autoscaler.report.status.codec import dump  # noqa: E402
from autoscaler.report.status.doc import Cycle  # noqa: E402
from autoscaler.settings import Settings  # noqa: E402


def _median_ms(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), result


async def _real_writes(docs, repeat: int) -> list[float]:
    """Median write time per document on a real API server."""
    from kubernetes_asyncio.client import ApiClient
    from kubeserver import envtest_server

    from autoscaler.report.status.writer import StatusWriter

    out = []
    with envtest_server("bench-status-") as server:
        ns = server.create_namespace("bench")
        settings = Settings(lease_namespace=ns, status_heartbeat_seconds=0.001)
        async with ApiClient(server.configuration()) as api:
            writer = StatusWriter(settings.status_options(), api)
            for doc in docs:
                await writer.write(doc)  # create, or the first patch of this size
                times = []
                for i in range(repeat):
                    changed_doc = replace(doc, cycle=replace(doc.cycle, message=f"bench {i}"))
                    t0 = time.perf_counter()
                    result = await writer.write(changed_doc)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert result == "written", result
                out.append(statistics.median(times))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1000, 10000, 50000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--max-jobs", type=int, default=Settings().status_max_jobs)
    args = ap.parse_args()
    settings = Settings()
    policy = settings.planner_policy()
    rows, docs = [], []
    for n in args.jobs:
        snapshot, _, _ = cluster(n)
        p = plan(snapshot, policy, NOW)
        writes = [
            WriteOutcome(a.ref.namespace, a.ref.name, a.ref.kind, "applied") for a in p.actions
        ]
        cycle = Cycle("ok", jobs=len(p.decisions), actions=len(p.actions), gangs=len(p.gangs))

        def first(snapshot=snapshot, p=p, writes=writes, cycle=cycle):
            return build_status(
                snapshot, p, cycle, None, writes, max_jobs=args.max_jobs, cooldown_seconds=300
            )

        build_ms, doc = _median_ms(first, args.repeat)
        later = replace(p, now=NOW + timedelta(seconds=120))

        def steady(snapshot=snapshot, later=later, doc=doc):
            return build_status(
                snapshot, later, Cycle("ok"), doc, (), max_jobs=args.max_jobs, cooldown_seconds=300
            )

        steady_ms, steady_doc = _median_ms(steady, args.repeat)
        again = build_status(
            snapshot,
            replace(p, now=NOW + timedelta(seconds=240)),
            Cycle("ok"),
            steady_doc,
            (),
            max_jobs=args.max_jobs,
            cooldown_seconds=300,
        )
        compare_ms, is_new = _median_ms(lambda a=again, s=steady_doc: changed(s, a), args.repeat)
        dump_ms, text = _median_ms(lambda doc=doc: dump(doc), args.repeat)
        rows.append(
            [
                n,
                len(doc.jobs),
                sum(doc.omitted_jobs.values()),
                len(doc.gangs),
                len(text) / 1024,
                build_ms,
                steady_ms,
                dump_ms,
                compare_ms,
                "yes" if is_new else "no",
            ]
        )
        docs.append(doc)
    print(
        f"{'jobs':>7} {'listed':>6} {'counted':>7} {'gangs':>5} {'KiB':>6} {'build ms':>8} "
        f"{'steady ms':>9} {'json ms':>7} {'diff ms':>7} {'steady writes':>13}"
    )
    for r in rows:
        print(
            f"{r[0]:>7,} {r[1]:>6} {r[2]:>7,} {r[3]:>5} {r[4]:>6.1f} {r[5]:>8.1f} "
            f"{r[6]:>9.1f} {r[7]:>7.1f} {r[8]:>7.2f} {r[9]:>13}"
        )
    if Path(str(__import__("os").environ.get("KUBEBUILDER_ASSETS", ""))).is_dir():
        times = asyncio.run(_real_writes(docs, args.repeat))
        print("\nwrite to a real kube-apiserver (merge patch of data.status), median:")
        for n, doc, ms in zip(args.jobs, docs, times, strict=True):
            print(f"{n:>7,} jobs: {len(dump(doc)) / 1024:6.1f} KiB in {ms:6.1f} ms")
    else:
        print("\n(KUBEBUILDER_ASSETS not set: no real API server write timed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
