"""What the real Volcano scheduler reports, measured: `python benchmarks/volcano_facts.py
[--plugin proportion capacity] [--samples 5]`. Needs `VOLCANO_KIT` and
`KUBEBUILDER_ASSETS` (see tests/volcanokit.py); docs/volcano-facts.md records a run.

For each plugin, on a fresh API server with the kit (4 nodes x 8 GPUs), read straight from
the scheduler's and the controller's /metrics (no Prometheus in between):

1. which `volcano_queue_*` series a queue has: never used, with a running job, after its
   jobs are deleted, after the Queue is deleted;
2. a gang's PodGroup Pending, Inqueue, Running: `inqueue`, `request`, `allocated`;
3. a job's replicas beyond what its queue admits;
4. seconds from a replicas patch (2 -> 8, back to 2) to every new pod bound and Running;
5. a scheduler restart: seconds until its queue series are back, and their values.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from volcanokit import (  # noqa: E402
    PLUGINS,
    VolcanoKit,
    apply_queue,
    clean_namespace,
    create_vcjob,
    delete_queue,
    job_pods,
    podgroup_phases,
    scheduler_series,
    set_workers,
    volcano_kit,
)


def until(check: Callable[[], Any], what: str, within: float = 30) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > within:
            raise TimeoutError(what)
        time.sleep(0.05)
    return time.monotonic() - started


def running(kit: VolcanoKit, ns: str, job: str, n: int) -> bool:
    pods = job_pods(kit.api, ns, job)
    return len(pods) == n and all(p.running for p in pods)


def trace(kit: VolcanoKit, ns: str, job: str, queue: str, seconds: float) -> None:
    """Print each change of the PodGroup's phase and the queue's GPU series for a while."""
    started, last = time.monotonic(), ""
    while time.monotonic() - started < seconds:
        series = scheduler_series(kit, queue)
        parts = " ".join(f"{k}={series.get(k)}" for k in ("inqueue", "request", "allocated"))
        running_pods = sum(p.running for p in job_pods(kit.api, ns, job))
        state = f"{podgroup_phases(kit.api, ns).get(job)} {parts} pods-running={running_pods}"
        if state != last:
            print(f"    {time.monotonic() - started:5.2f}s {state}")
            last = state
        time.sleep(0.05)


def show(label: str, kit: VolcanoKit, queue: str, ns: str | None = None) -> None:
    series = scheduler_series(kit, queue)
    groups = scheduler_series(kit, queue, "controller")
    line = f"  {label}: {series}"
    if groups:
        line += f" controller: { {k: v for k, v in groups.items() if v} }"
    if ns:
        line += f" podgroups: {podgroup_phases(kit.api, ns)}"
    print(line)


def measure(plugin: str, samples: int) -> None:
    print(f"== plugin {plugin}")
    with volcano_kit(plugin) as kit:
        api = kit.api
        ns = api.create_namespace("facts")
        time.sleep(2.5)  # a few sessions
        print("1. series of a queue")
        show("default queue, never used", kit, "default")
        apply_queue(api, "unused")
        apply_queue(api, "capped", capability_gpus=8)
        time.sleep(2.5)
        show("new queue, no job", kit, "unused")
        show("new queue with capability 8, no job", kit, "capped")

        apply_queue(api, "q")
        create_vcjob(api, "job", ns, queue="q", replicas=2, min_available=2, max_replicas=8)
        until(lambda: running(kit, ns, "job", 2), "job running")
        time.sleep(1.5)
        show("a job of 2 x 1 GPU running", kit, "q", ns)

        print("2. a gang's PodGroup phases (capped queue: 8 GPUs)")
        create_vcjob(api, "e", ns, queue="capped", replicas=8, min_available=2, max_replicas=8)
        until(lambda: running(kit, ns, "e", 8), "e running")
        time.sleep(1.5)
        show("elastic job e at 8 (min 2)", kit, "capped", ns)
        create_vcjob(api, "big", ns, queue="capped", replicas=8, min_available=8)
        time.sleep(3)
        show("gang of 8 beyond what e's 6 elastic workers free", kit, "capped", ns)
        create_vcjob(api, "fits", ns, queue="capped", replicas=4, min_available=4)
        print("  gang of 4 that fits if e shrinks, each change of (phase, series):")
        trace(kit, ns, "fits", "capped", seconds=5)
        pods = job_pods(api, ns, "fits")
        print(f"  its pods: {sorted({(p.phase, p.scheduled) for p in pods})} x {len(pods)}")
        print("  e 8 -> 4, each change of the gang's (phase, series):")
        set_workers(api, ns, "e", 4)
        trace(kit, ns, "fits", "capped", seconds=4)
        show("then", kit, "capped", ns)

        print("3. replicas beyond the queue (capped at 8, e 4 -> 8 with 4 held by the gang)")
        set_workers(api, ns, "e", 8)
        time.sleep(3)
        pods = job_pods(api, ns, "e")
        print(f"  e pods: {sorted({(p.phase, p.scheduled) for p in pods})}")
        job = api.request("GET", f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/e")
        print(f"  e status: {job['status'].get('state')} {job['status'].get('taskStatusCount')}")
        show("then", kit, "capped", ns)

        print("4. seconds from a replicas patch to every pod bound and Running")
        up, down = [], []
        for _ in range(samples):
            set_workers(api, ns, "job", 8)
            up.append(until(lambda: running(kit, ns, "job", 8), "job at 8"))
            set_workers(api, ns, "job", 2)
            down.append(until(lambda: running(kit, ns, "job", 2), "job at 2"))
        print(f"  2 -> 8: {fmt(up)}")
        print(f"  8 -> 2 (pods gone): {fmt(down)}")

        print("5. a scheduler restart (SIGKILL, started again at once)")
        show("before", kit, "q")
        kit.stop_scheduler(kill=True)
        restarted = time.monotonic()
        kit.start_scheduler()
        served = time.monotonic() - restarted
        show(f"serving metrics after {served:.2f}s", kit, "q")
        back = until(lambda: "allocated" in scheduler_series(kit, "q"), "series back")
        print(f"  q's series back after {served + back:.2f}s")
        show("then", kit, "q")
        time.sleep(2)
        show("2 s later", kit, "q")

        print("1b. after the jobs are deleted, and after the Queue is deleted")
        clean_namespace(api, ns)
        time.sleep(2.5)
        show("no job left in q", kit, "q")
        delete_queue(api, "q")
        time.sleep(2.5)
        show("q deleted", kit, "q")
        for name in ("unused", "capped"):
            delete_queue(api, name)

        print("6. shares: two queues ask for 24 GPUs each at once, weight 1:1, then 3:1")
        # a fresh namespace per round: a Volcano Job created again under the name of one
        # just deleted was not picked up by the controller within 30 s
        for weight in (1, 3):
            ns = api.create_namespace("shares")
            apply_queue(api, "qa", weight=weight)
            apply_queue(api, "qb")
            for job, queue in (("a", "qa"), ("b", "qb")):
                create_vcjob(api, job, ns, queue=queue, replicas=2, min_available=2)
            until(lambda ns=ns: running(kit, ns, "a", 2) and running(kit, ns, "b", 2), "a, b")
            set_workers(api, ns, "a", 24)
            set_workers(api, ns, "b", 24)
            time.sleep(3)
            for job, queue in (("a", "qa"), ("b", "qb")):
                bound = sum(p.running for p in job_pods(api, ns, job))
                show(f"weight {weight if job == 'a' else 1}: {bound} running", kit, queue)
            clean_namespace(api, ns)
        print("   one after the other (weight 1:1): a to 24 first, then b to 24")
        ns = api.create_namespace("shares")
        apply_queue(api, "qa")
        for job, queue in (("a", "qa"), ("b", "qb")):
            create_vcjob(api, job, ns, queue=queue, replicas=2, min_available=2)
        until(lambda: running(kit, ns, "a", 2) and running(kit, ns, "b", 2), "a, b")
        set_workers(api, ns, "a", 24)
        until(lambda: running(kit, ns, "a", 24), "a at 24")
        set_workers(api, ns, "b", 24)
        time.sleep(3)
        for job, queue in (("a", "qa"), ("b", "qb")):
            bound = sum(p.running for p in job_pods(api, ns, job))
            show(f"{job}: {bound} running", kit, queue)
        clean_namespace(api, ns)
        print("7. a guarantee of 8 GPUs on qa: what the other queues may have")
        apply_queue(api, "qa", guarantee_gpus=8)
        time.sleep(2.5)
        for queue in ("qa", "qb", "default"):
            show(queue, kit, queue)


def fmt(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f}s, min {min(values):.2f}s, "
        f"max {max(values):.2f}s (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plugin", nargs="+", choices=PLUGINS, default=list(PLUGINS))
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    for plugin in args.plugin:
        measure(plugin, args.samples)


if __name__ == "__main__":
    main()
