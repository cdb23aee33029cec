"""The daemon against a real kube-apiserver with one mutating seat
(`--max-mutating-requests-inflight=1`, API Priority and Fairness off, so that flag is the
limit), writing as a ServiceAccount (system:masters is never throttled).

Before: every cycle sent 8 writes at once, the first 429 stopped the rest, the window
never adapted, and such a cycle was a failure for /readyz; a job kind whose CRD came
back was noticed only after 300 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import paddlejob, pytorchjob
from kubeserver import CRDS, ApiError, EnvTest, assets_problem, envtest_server
from promserver import fake_prometheus
from test_faults import metrics_text
from test_loop import Daemon, free_body, settings_for

from autoscaler.act.results import Outcome
from autoscaler.read.kube.cache import ABSENT_RECHECK_SECONDS

ONE_SEAT = ["--max-mutating-requests-inflight=1", "--enable-priority-and-fairness=false"]


@pytest.fixture(scope="module")
def one_seat() -> Iterator[EnvTest]:
    problem = assets_problem()
    if problem:
        pytest.skip(f"real API server: {problem}")
    with envtest_server("envtest-one-seat-", extra_args=ONE_SEAT) as server:
        yield server


class _As:
    """The server as seen with a given token (what Daemon reads is `configuration()`)."""

    def __init__(self, server: EnvTest, token: str) -> None:
        self.server, self.token = server, token

    def configuration(self) -> Any:
        return self.server.configuration(self.token)


def _job(obj: dict[str, Any]) -> dict[str, Any]:
    obj.pop("status", None)
    meta = obj["metadata"]
    obj["metadata"] = {"name": meta["name"], "namespace": meta["namespace"]}
    return obj


async def _until(check, seconds: float, what: str) -> float:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < seconds, f"not within {seconds:g}s: {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


@pytest.mark.timeout(180)
async def test_a_throttled_drain_lands_every_resize_in_one_cycle_and_stays_ready(
    one_seat: EnvTest,
) -> None:
    n = 60
    ns, queue = one_seat.create_namespace("drain"), "drain-q"
    one_seat.apply_queue(queue)
    for i in range(n):
        job = _job(pytorchjob(f"j{i:03d}", ns, queue=queue, replicas=1, active=1))
        one_seat.create(job)
        one_seat.patch_status(job, {"replicaStatuses": {"Worker": {"active": 1}}})
    token = one_seat.service_account_token(ns, "autoscaler", "cluster-admin")
    # 3 idle GPUs per job: every job grows 1 -> 4, a patch and an Event each
    async with (
        fake_prometheus(free_body(**{queue: 3 * n})) as prom,
        Daemon(_As(one_seat, token), settings_for(prom.url, namespaces=[ns])) as d,
    ):
        driver = d.driver
        result = await d.controller.run_once(datetime.now(UTC))
        applied = result.applied
        assert applied.counts() == {Outcome.APPLIED: n}, applied.counts()
        assert applied.throttles > 0  # the one seat really throttled us (429s)
        assert applied.window is not None and applied.window < 8  # and the window shrank
        assert result.result in ("ok", "throttled")
        assert driver.ready() == (True, "")
        jobs = one_seat.request("GET", f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs")
        assert {j["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] for j in jobs["items"]} == {
            4
        }
        # every Event lands too, this cycle or (carried) the next
        if applied.events_waiting:
            await d.controller.run_once(datetime.now(UTC))
        events = one_seat.request("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        assert len(events) == n
        text = metrics_text(d)
        assert "elastic_autoscaler_write_throttles_total" in text


def _crd(plural: str) -> dict[str, Any]:
    path = next(CRDS.glob(f"*_{plural}.yaml"))
    return next(d for d in yaml.safe_load_all(Path(path).read_text()) if d)


def _served(server: EnvTest, plural: str) -> bool:
    try:
        server.request("GET", f"/apis/kubeflow.org/v1/{plural}?limit=1")
    except ApiError:
        return False
    return True


@pytest.mark.timeout(120)
async def test_a_job_kind_whose_crd_comes_back_is_managed_within_seconds(
    one_seat: EnvTest,
) -> None:
    crd = _crd("paddlejobs")
    name = crd["metadata"]["name"]
    one_seat.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    await _until(lambda: not _served(one_seat, "paddlejobs"), 30, "PaddleJob gone")
    ns, queue = one_seat.create_namespace("crd"), "crd-q"
    one_seat.apply_queue(queue)
    settings = dict(namespaces=[ns], job_kinds=["PyTorchJob", "PaddleJob"])
    try:
        async with (
            fake_prometheus(free_body(**{queue: 3})) as prom,
            Daemon(one_seat, settings_for(prom.url, **settings)) as d,
        ):
            await d.controller.run_once(datetime.now(UTC))
            text = metrics_text(d)
            assert 'elastic_autoscaler_job_kind_installed{kind="PaddleJob"} 0.0' in text
            assert 'elastic_autoscaler_job_kind_installed{kind="PyTorchJob"} 1.0' in text

            one_seat.apply(crd)  # back, and a PaddleJob made as soon as it is served
            await _until(lambda: _served(one_seat, "paddlejobs"), 30, "PaddleJob served")
            job = _job(paddlejob("p", ns, queue=queue, replicas=1, active=1))
            one_seat.create(job)
            one_seat.patch_status(job, {"replicaStatuses": {"Worker": {"active": 1}}})
            took = await _until(
                lambda: any(r.job.ref.kind == "PaddleJob" for r in d.kube.objects().jobs),
                ABSENT_RECHECK_SECONDS + 5,
                "the PaddleJob in the cache",
            )
            assert took <= ABSENT_RECHECK_SECONDS + 5
            result = await d.controller.run_once(datetime.now(UTC))
            assert [d.ref.name for d in result.plan.decisions] == ["p"]
            assert 'elastic_autoscaler_job_kind_installed{kind="PaddleJob"} 1.0' in metrics_text(d)
    finally:
        one_seat.apply(crd)
