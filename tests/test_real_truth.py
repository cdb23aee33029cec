"""Acting on what is true when the write lands, on the REAL training-operator and Volcano.

The stack is test_real_operator's (`corner`: an API server, Volcano's scheduler and
controller-manager, kwok's nodes, a real Prometheus and Kubeflow's training-operator); the
daemon is wired as `run` wires it (test_loop.Daemon). Here the gangs are the operator's
own: it creates a job's PodGroup with no phase and Volcano writes Pending or Inqueue a
moment later, and (the kit has no garbage collector) a deleted job leaves its PodGroup
behind, as a cluster does until its collector gets to it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import test_real_operator
from conftest import PROPORTION_ONLY
from operatorkit import podgroup, pytorchjob_body, until, wait_workers_running, worker_replicas
from test_real_operator import Corner, actions, cycle, settled

from autoscaler.core.reasons import Reason
from autoscaler.run.triggers import wants_cycle

pytestmark = [pytest.mark.prometheus, pytest.mark.asyncio(loop_scope="module")]

corner = test_real_operator.corner  # the fixture: a namespace and queues of its own


def phase_of(corner: Corner, name: str) -> str | None:
    group = podgroup(corner.api, corner.ns, name)
    return None if group is None else (group.get("status") or {}).get("phase")


@PROPORTION_ONLY
@pytest.mark.timeout(90)
async def test_a_gang_the_operator_creates_without_a_phase_is_served_by_an_early_cycle(
    corner: Corner,
) -> None:
    """An elastic job holds its queue's 8 GPUs; the driver runs, its next regular cycle
    10 minutes away. A rigid gang of 4 is submitted: the operator creates its PodGroup
    with no phase, Volcano then writes a waiting one. That turn calls exactly one early
    cycle (run.triggers), which takes 4 workers back within min_interval_seconds of the
    gang turning waiting; the gang's pods then run."""
    api = corner.api
    queue = corner.queue("q", capability_gpus=8)
    elastic = corner.job(
        pytorchjob_body(
            "elastic", corner.ns, queue=queue, workers=8, max_replicas=8, min_available=2
        )
    )
    await settled(corner, elastic, 8, queue)
    min_interval = 2.0
    async with corner.daemon(interval_seconds=600, min_interval_seconds=min_interval) as d:
        await d.seen("PyTorchJob", "elastic", lambda j: j.active == 8)
        early: list[tuple[str, str, str]] = []
        forward = d.kube._on_change
        assert forward is not None

        def watch(kind: str, event_type: str, record: Any, before: Any) -> None:
            name = getattr(getattr(record, "ref", None), "name", "")
            turned = wants_cycle(kind, event_type, record, before)
            if kind == "PodGroup" and name == "gang" and turned:
                early.append((event_type, getattr(before, "phase", "-") or "none", record.phase))
            forward(kind, event_type, record, before)

        d.kube._on_change = watch
        driver = asyncio.create_task(d.driver.run())
        try:
            await until("the driver's first cycle", lambda: d.driver.cycles >= 1)
            assert worker_replicas(api, elastic) == 8
            cycles = d.driver.cycles
            gang = corner.job(pytorchjob_body("gang", corner.ns, queue=queue, workers=4))
            await until(
                "the gang waits", lambda: phase_of(corner, "gang") in ("Pending", "Inqueue")
            )
            waiting_at = time.monotonic()
            await until(
                "the early cycle's reclaim",
                lambda: worker_replicas(api, elastic) == 4,
                seconds=min_interval + 10,
            )
            took = time.monotonic() - waiting_at
            assert took <= min_interval + 5, took
            # the operator's PodGroup came without a phase: its one turn into waiting
            assert len(early) == 1, early
            assert early[0][1] == "none", early
            # the early cycle counts itself once its writes are done
            await until("the early cycle ends", lambda: d.driver.cycles > cycles)
            await wait_workers_running(api, gang, 4)
            await wait_workers_running(api, elastic, 4)
        finally:
            d.driver.stop()
            await driver


@PROPORTION_ONLY
@pytest.mark.timeout(90)
async def test_a_deleted_jobs_leftover_podgroup_shrinks_nothing(corner: Corner) -> None:
    """An elastic job holds its queue's 8 GPUs; a rigid gang of 4 waits for them and is
    deleted before a cycle serves it. Its PodGroup stays (here for ever: the kit has no
    garbage collector; in a cluster until the collector gets to it), still Pending or
    Inqueue. The early cycle the deletion calls (and every later one) shrinks nobody for
    it: the plan and the status say GangOwnerGone, naming the job that is gone."""
    api = corner.api
    queue = corner.queue("q", capability_gpus=8)
    elastic = corner.job(
        pytorchjob_body(
            "elastic", corner.ns, queue=queue, workers=8, max_replicas=8, min_available=2
        )
    )
    await settled(corner, elastic, 8, queue)
    async with corner.daemon(interval_seconds=600, min_interval_seconds=1) as d:
        early: list[str] = []
        forward = d.kube._on_change
        assert forward is not None

        def watch(kind: str, event_type: str, record: Any, before: Any) -> None:
            if kind == "PyTorchJob" and wants_cycle(kind, event_type, record, before):
                early.append(f"{event_type} {record.job.ref.name}")
            forward(kind, event_type, record, before)

        d.kube._on_change = watch
        await d.seen("PyTorchJob", "elastic", lambda j: j.active == 8)
        gang = corner.job(pytorchjob_body("t2", corner.ns, queue=queue, workers=4))
        await until("the gang waits", lambda: phase_of(corner, "t2") in ("Pending", "Inqueue"))
        await d.seen("PodGroup", "t2", lambda g: g is not None)
        api.delete(gang)
        await until("the job is gone", lambda: "DELETED t2" in early)
        assert d.kube.objects().podgroups  # its PodGroup is left
        assert phase_of(corner, "t2") in ("Pending", "Inqueue")
        result = await cycle(d, corner.tick())
        assert actions(result) == []
        assert result.plan is not None
        (g,) = result.plan.gangs
        assert (g.ref.name, g.reason) == ("t2", Reason.GANG_OWNER_GONE), g.message
        assert f"PyTorchJob {corner.ns}/t2 is gone" in g.message
        doc = d.controller.last_status
        assert doc is not None
        assert [(e.name, e.reason) for e in doc.gangs] == [("t2", "GangOwnerGone")]
        assert worker_replicas(api, elastic) == 8


@PROPORTION_ONLY
@pytest.mark.timeout(90)
async def test_under_a_label_selector_a_job_left_out_is_served_and_a_deleted_one_is_not(
    corner: Corner,
) -> None:
    """With label_selector set, a rigid job the selector leaves out is not among the
    watched jobs, yet it is real: its gang gets a reclaim as any other. A selected job
    deleted while its gang waits is remembered deleted: its leftover PodGroup shrinks
    nobody (GangOwnerGone)."""
    from builders import edit

    api = corner.api
    queue = corner.queue("q", capability_gpus=8)
    ours = {"team": "ml"}

    def body(name: str, labels: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
        job = pytorchjob_body(name, corner.ns, queue=queue, **kw)
        return edit(job, "metadata.labels", labels) if labels else job

    elastic = corner.job(body("elastic", ours, workers=8, max_replicas=8, min_available=2))
    await settled(corner, elastic, 8, queue)
    async with corner.daemon(
        interval_seconds=600, min_interval_seconds=1, label_selector="team=ml"
    ) as d:
        await d.seen("PyTorchJob", "elastic", lambda j: j.active == 8)
        gone = corner.job(body("t2", ours, workers=4))
        await until("t2 waits", lambda: phase_of(corner, "t2") in ("Pending", "Inqueue"))
        await d.seen("PodGroup", "t2", lambda g: g is not None)
        api.delete(gone)
        await until("t2 seen deleted", lambda: d.kube.objects().records.deleted_jobs)
        result = await cycle(d, corner.tick())
        assert actions(result) == []
        assert result.plan is not None
        (g,) = result.plan.gangs
        assert (g.ref.name, g.reason) == ("t2", Reason.GANG_OWNER_GONE), g.message
        assert "seen deleted" in g.message

        corner.job(body("outside", workers=4))  # no label: not ours, but real
        await until("outside waits", lambda: phase_of(corner, "outside") in ("Pending", "Inqueue"))
        await d.seen("PodGroup", "outside", lambda g: g is not None)
        result = await cycle(d, corner.tick())
        assert result.plan is not None
        reasons = {g.ref.name: g.reason for g in result.plan.gangs}
        assert reasons["t2"] is Reason.GANG_OWNER_GONE
        assert reasons["outside"] is not Reason.GANG_OWNER_GONE, result.plan.gangs
        assert [(name, target) for name, _, target, _ in actions(result)] == [("elastic", 4)]
