"""KubeSource caches against the fake API server, through the real kubernetes_asyncio client."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import hpa
from fakekube import FakeKubeApi, eventually, job
from kubernetes_asyncio.client import ApiClient, Configuration, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from structlog.testing import capture_logs

from autoscaler.client.config import POOL_SPARE, KubeconfigError, make_api_client
from autoscaler.client.kubeapi import ApiFailure, classify
from autoscaler.core.resources import JOB_RESOURCES
from autoscaler.read.kube.cache import CONNECT_RETRY_MAX_SECONDS
from autoscaler.read.kube.source import KubeObjects, KubeSource, OnChange
from autoscaler.read.records import GroupRecord, HpaTarget, JobRecord, PriorityValue
from autoscaler.settings import Settings


def podgroup(name: str, namespace: str = "ns1", phase: str = "Pending") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": 2, "minResources": {"nvidia.com/gpu": "2"}},
        "status": {"phase": phase},
    }


def queue(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1},
    }


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def name_of(record: Any) -> str:
    """`namespace/name` (or `name`) of the object a cache record was decoded from."""
    if isinstance(record, JobRecord):
        ref = record.job.ref
    elif isinstance(record, GroupRecord):
        ref = record.ref
    elif isinstance(record, HpaTarget):
        return f"{record.namespace}/{record.name}"
    else:  # QueueSpec, PriorityValue: cluster-scoped
        return str(record.name)
    return f"{ref.namespace}/{ref.name}"


def names(records: tuple[Any, ...]) -> list[str]:
    return [name_of(r) for r in records]


def replicas(objects: KubeObjects, name: str) -> int | None:
    for r in objects.jobs:
        if r.job.ref.name == name:
            return r.job.replicas
    return None


@asynccontextmanager
async def running(
    client: ApiClient,
    on_change: OnChange | None = None,
    *,
    sync: bool = True,
    page_size: int = 500,
    **overrides: Any,
) -> AsyncIterator[KubeSource]:
    source = KubeSource(
        Settings(**overrides).kube_options(),
        client,
        on_change,
        backoff_base=0.01,
        backoff_cap=0.05,
        rng=random.Random(7),
        page_size=page_size,
    )
    await source.start()
    try:
        if sync:
            await source.wait_synced(5)
        yield source
    finally:
        await source.stop()


def seed(kube: FakeKubeApi) -> None:
    kube.put(job("a", "ns1"))
    kube.put(job("b", "ns2"))
    kube.put(podgroup("pg-a", "ns1"))
    kube.put(queue("team-x"))
    kube.put(priority_class("high", 1000))


async def test_initial_list_fills_every_cache(kube: FakeKubeApi, client: ApiClient) -> None:
    seed(kube)
    kube.put(hpa("a-hpa", "ns1", target="a"))
    async with running(client) as source:
        objects = source.objects()
        assert objects.synced and objects.errors == ()
        assert names(objects.jobs) == ["ns1/a", "ns2/b"]
        assert names(objects.podgroups) == ["ns1/pg-a"]
        assert names(objects.queues) == ["team-x"]
        assert names(objects.priorityclasses) == ["high"]
        assert names(objects.hpas) == ["ns1/a-hpa"]
        # Built-in list items lack kind/apiVersion on the wire: decoded all the same
        assert objects.priorityclasses == (PriorityValue("high", 1000),)
        assert source.stats()["lists"] == 5  # 4 kinds + HPAs
        # Without namespaces configured, namespaced kinds use the all-namespaces paths.
        lists = [r.path for r in kube.requests if r.verb == "list"]
        assert sorted(lists) == [
            "/apis/autoscaling/v2/horizontalpodautoscalers",
            "/apis/kubeflow.org/v1/pytorchjobs",
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            "/apis/scheduling.volcano.sh/v1beta1/podgroups",
            "/apis/scheduling.volcano.sh/v1beta1/queues",
        ]


async def test_watch_events_update_the_cache_without_listing(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    seed(kube)
    async with running(client) as source:
        await eventually(lambda: kube.watchers() == 5, message="5 watches open")
        kube.put(job("c", "ns3"))
        kube.patch(
            "pytorchjobs",
            "ns1",
            "a",
            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 5}}}},
        )
        kube.delete("pytorchjobs", "ns2", "b")
        kube.put(podgroup("pg-b", "ns2"))
        kube.delete("queues", None, "team-x")
        kube.put(priority_class("low", 10))

        def converged() -> bool:
            o = source.objects()
            return (
                names(o.jobs) == ["ns1/a", "ns3/c"]
                and replicas(o, "a") == 5
                and names(o.podgroups) == ["ns1/pg-a", "ns2/pg-b"]
                and o.queues == ()
                and names(o.priorityclasses) == ["high", "low"]
            )

        await eventually(converged, message="cache converged")
        assert kube.count(verb="list") == 5
        stats = source.stats()
        assert stats["events"] >= 6 and stats["relists_410"] == 0
        patched_rv = int(kube.get("pytorchjobs", "ns1", "a")["metadata"]["resourceVersion"])
        assert int(stats["by_cache"]["PyTorchJob(*)"]["resource_version"]) > patched_rv


async def test_steady_state_reads_make_no_api_calls(kube: FakeKubeApi, client: ApiClient) -> None:
    seed(kube)
    async with running(client) as source:
        await eventually(lambda: kube.watchers() == 5, message="5 watches open")
        kube.reset_requests()
        first = source.objects()
        for _ in range(200):
            assert source.objects() is first  # memoised while nothing changes
        assert kube.count() == 0
        kube.put(job("z"))
        await eventually(lambda: "ns1/z" in names(source.objects().jobs), message="z seen")
        assert kube.count(verb="list") == 0 and kube.count(watch=True) == 0


async def test_a_read_where_no_cache_changed_does_not_assemble_again(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    """The daemon's source joins the caches' records into a snapshot; while no cache
    changed it reuses what it assembled (only the Prometheus side is read again), and a
    change is in the next read."""
    from promserver import fake_prometheus
    from test_loop import NOW, free_body, settings_for

    from autoscaler.read.live import LiveSource
    from autoscaler.read.prometheus.source import PrometheusSource

    seed(kube)
    async with fake_prometheus(free_body(**{"team-a": 2})) as prom:
        settings = settings_for(prom.url)
        async with running(client, **settings.model_dump(exclude_unset=True)) as source:
            prometheus = PrometheusSource(settings)
            live = LiveSource(settings.source_options(), source, prometheus)
            try:
                first = await live.read(NOW)
                second = await live.read(NOW)
                # bare jobs (no elastic policy, no GPUs): reported, as unmanaged
                assert [j.ref.name for j in first.unmanaged] == ["a", "b"]
                assert second.unmanaged is first.unmanaged and second.pending is first.pending
                kube.patch(
                    "pytorchjobs",
                    "ns1",
                    "a",
                    {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}},
                )
                await eventually(lambda: replicas(source.objects(), "a") == 3, message="seen")
                third = await live.read(NOW)
                assert third.unmanaged is not first.unmanaged
                assert third.unmanaged[0].replicas == 3
            finally:
                prometheus.close()


async def test_expired_watch_relists_and_sees_deletes_in_the_gap(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    seed(kube)
    changes: list[tuple[str, str, str]] = []

    def record(kind: str, event_type: str, obj: Any, before: Any) -> None:
        changes.append((kind, event_type, name_of(obj).split("/")[-1]))

    async with running(client, record) as source:
        await eventually(lambda: kube.watchers() == 5, message="watches open")
        changes.clear()
        # All in one step, so no watch can see these: the only way to learn is a relist.
        kube.close_watches("pytorchjobs")
        kube.delete("pytorchjobs", "ns1", "a")
        kube.put(job("c", "ns1"))
        kube.patch(
            "pytorchjobs",
            "ns2",
            "b",
            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 7}}}},
        )
        kube.compact("pytorchjobs")

        await eventually(
            lambda: (
                names(source.objects().jobs) == ["ns1/c", "ns2/b"]
                and replicas(source.objects(), "b") == 7
            ),
            message="relisted cache",
        )
        assert source.stats()["relists_410"] == 1
        assert kube.count(verb="list", plural="pytorchjobs") == 2
        assert kube.count(verb="list", plural="podgroups") == 1
        assert sorted(changes) == [
            ("PyTorchJob", "ADDED", "c"),
            ("PyTorchJob", "DELETED", "a"),
            ("PyTorchJob", "MODIFIED", "b"),
        ]
        # a job the relist no longer has is remembered deleted, as a watch's DELETED
        assert [r.name for r in source.objects().records.deleted_jobs] == ["a"]
        # And the new watch runs from the relist's version.
        await eventually(lambda: kube.watchers("pytorchjobs") == 1, message="watch reopened")
        kube.put(job("d", "ns1"))
        await eventually(lambda: "ns1/d" in names(source.objects().jobs), message="d seen")


async def test_closed_watch_resumes_from_last_version_without_relist(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    seed(kube)
    async with running(client) as source:
        await eventually(lambda: kube.watchers("pytorchjobs") == 1, message="job watch open")
        kube.put(job("c"))
        await eventually(lambda: "ns1/c" in names(source.objects().jobs), message="c seen")
        last_seen = kube.get("pytorchjobs", "ns1", "c")["metadata"]["resourceVersion"]
        kube.close_watches("pytorchjobs")
        kube.put(job("d"))  # while no watch is open: the resumed watch must replay it
        await eventually(lambda: "ns1/d" in names(source.objects().jobs), message="d seen")
        job_watches = [r for r in kube.requests if r.is_watch and r.plural == "pytorchjobs"]
        assert [r.query["resourceVersion"] for r in job_watches][-1] == last_seen
        assert kube.count(verb="list", plural="pytorchjobs") == 1
        assert source.stats()["relists_410"] == 0


async def test_dropped_connection_is_an_error_then_recovers(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    seed(kube)
    async with running(client) as source:
        await eventually(lambda: kube.watchers("queues") == 1, message="queue watch open")
        kube.close_watches("queues", abrupt=True)
        await eventually(lambda: source.stats()["errors"]["Queue"] >= 1, message="error")
        # A reconnected watch clears the error even before any event arrives.
        await eventually(lambda: source.objects().errors == (), message="error cleared")
        assert kube.watchers("queues") == 1
        kube.put(queue("team-y"))
        await eventually(
            lambda: names(source.objects().queues) == ["team-x", "team-y"], message="team-y seen"
        )
        assert kube.count(verb="list", plural="queues") == 1


async def test_throttled_watch_reports_the_status_message(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    seed(kube)
    async with running(client) as source:
        await eventually(lambda: kube.watchers("queues") == 1, message="queue watch open")
        kube.fail_next("GET", r"/queues$", 429, times=1_000, watch=True, retry_after=0)
        kube.close_watches("queues")
        errors = await eventually(lambda: source.objects().errors, message="error reported")
        assert errors == ("Queue: HTTP 429 Too Many Requests: injected 429 TooManyRequests",)
        failing = source.objects().failing_seconds
        assert failing > 0
        await eventually(lambda: source.objects().failing_seconds > failing, message="grows")
        assert source.objects().synced  # it listed once; staleness is failing_seconds' job
        kube.clear_faults()
        await eventually(lambda: kube.watchers("queues") == 1, message="queue watch reopened")
        await eventually(lambda: source.objects().errors == (), message="error cleared")
        assert source.objects().failing_seconds == 0


async def test_watch_errors_back_off_and_retry(kube: FakeKubeApi, client: ApiClient) -> None:
    seed(kube)
    async with running(client) as source:
        await eventually(lambda: kube.watchers("podgroups") == 1, message="watch open")
        kube.fail_next("GET", r"/podgroups$", 500, times=3, watch=True)
        kube.close_watches("podgroups")
        kube.put(podgroup("pg-b"))
        await eventually(lambda: len(source.objects().podgroups) == 2, message="pg-b seen")
        assert source.stats()["errors"]["PodGroup"] == 3
        assert kube.count(plural="podgroups", watch=True) == 5  # first, 3 failed, the good one
        assert kube.count(verb="list", plural="podgroups") == 1


async def test_namespaces_and_label_selector(kube: FakeKubeApi, client: ApiClient) -> None:
    kube.put(job("a", "ns1", team="ml"))
    kube.put(job("b", "ns2", team="ml"))
    kube.put(job("c", "ns3", team="ml"))
    kube.put(job("d", "ns1", team="web"))
    kube.put(podgroup("pg-1", "ns1"))
    kube.put(podgroup("pg-3", "ns3"))
    async with running(client, namespaces=["ns1", "ns2"], label_selector="team=ml") as source:
        objects = source.objects()
        assert names(objects.jobs) == ["ns1/a", "ns2/b"]
        assert names(objects.podgroups) == ["ns1/pg-1"]
        job_lists = [r for r in kube.requests if r.verb == "list" and r.plural == "pytorchjobs"]
        assert sorted(r.namespace for r in job_lists) == ["ns1", "ns2"]
        assert {r.query.get("labelSelector") for r in job_lists} == {"team=ml"}
        pg_lists = [r for r in kube.requests if r.verb == "list" and r.plural == "podgroups"]
        assert {r.query.get("labelSelector") for r in pg_lists} == {None}

        await eventually(lambda: kube.watchers() == 8, message="8 watches open")
        kube.patch("pytorchjobs", "ns1", "a", {"metadata": {"labels": {"team": "web"}}})
        kube.patch("pytorchjobs", "ns1", "d", {"metadata": {"labels": {"team": "ml"}}})
        kube.put(job("e", "ns3", team="ml"))
        kube.put(podgroup("pg-2", "ns2"))
        await eventually(
            lambda: (
                names(source.objects().jobs) == ["ns1/d", "ns2/b"]
                and names(source.objects().podgroups) == ["ns1/pg-1", "ns2/pg-2"]
            ),
            message="scoped changes",
        )
        watches = [r for r in kube.requests if r.is_watch and r.plural == "pytorchjobs"]
        assert all(r.query["labelSelector"] == "team=ml" for r in watches)


async def test_a_deleted_job_leaves_a_tombstone(kube: FakeKubeApi, client: ApiClient) -> None:
    """A job the watch sees deleted is handed to the records (owners_gone: under a
    label_selector only such a job is gone); one never selected is not, nor any object
    of another kind."""
    kube.put(job("a", "ns1", team="ml"))
    kube.put(job("b", "ns1", team="ml"))
    kube.put(job("c", "ns1", team="web"))
    kube.put(podgroup("pg-a", "ns1"))
    async with running(client, label_selector="team=ml") as source:
        records = source.objects().records
        assert records.job_selector and records.deleted_jobs == ()
        uid = kube.get("pytorchjobs", "ns1", "a")["metadata"]["uid"]
        await eventually(lambda: kube.watchers() == 5, message="watches open")
        kube.delete("pytorchjobs", "ns1", "a")
        kube.delete("pytorchjobs", "ns1", "c")  # not selected: never seen, no tombstone
        kube.delete("podgroups", "ns1", "pg-a")
        await eventually(lambda: names(source.objects().jobs) == ["ns1/b"], message="deletion seen")
        (gone,) = source.objects().records.deleted_jobs
        assert (gone.namespace, gone.kind, gone.name, gone.uid) == ("ns1", "PyTorchJob", "a", uid)
    async with running(client) as source:  # no selector: said so to the records
        assert not source.objects().records.job_selector


def test_tombstones_expire_and_are_bounded() -> None:
    from autoscaler.core.model import ObjectRef
    from autoscaler.read.kube.source import TOMBSTONE_COUNT, TOMBSTONE_SECONDS, Tombstones

    graves = Tombstones()
    graves.add(ObjectRef("ns1", "old"), now=0.0)
    graves.add(ObjectRef("ns1", "new"), now=10.0)
    assert [r.name for r in graves.live(now=TOMBSTONE_SECONDS)] == ["old", "new"]
    assert [r.name for r in graves.live(now=TOMBSTONE_SECONDS + 5)] == ["new"]
    for i in range(TOMBSTONE_COUNT + 3):
        graves.add(ObjectRef("ns1", f"j{i}"), now=20.0)
    live = graves.live(now=20.0)
    assert len(live) == TOMBSTONE_COUNT and live[0].name == "j3"  # the oldest dropped


async def test_on_change_reports_events_and_survives_errors(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    seed(kube)
    seen: list[tuple[str, str, str]] = []

    def flaky(kind: str, event_type: str, obj: Any, before: Any) -> None:
        name = name_of(obj).split("/")[-1]
        seen.append((kind, event_type, name))
        if name == "boom":
            raise RuntimeError("callback bug")

    async with running(client, flaky) as source:
        assert sorted(seen) == [
            ("PodGroup", "ADDED", "pg-a"),
            ("PriorityClass", "ADDED", "high"),
            ("PyTorchJob", "ADDED", "a"),
            ("PyTorchJob", "ADDED", "b"),
            ("Queue", "ADDED", "team-x"),
        ]
        await eventually(lambda: kube.watchers() == 5, message="watches open")
        seen.clear()
        kube.put(podgroup("boom"))
        kube.patch("podgroups", "ns1", "pg-a", {"status": {"phase": "Running"}})
        kube.delete("pytorchjobs", "ns1", "a")
        await eventually(lambda: len(seen) == 3, message="3 changes")
        assert sorted(seen) == [
            ("PodGroup", "ADDED", "boom"),
            ("PodGroup", "MODIFIED", "pg-a"),
            ("PyTorchJob", "DELETED", "a"),
        ]
        assert source.stats()["errors"] == {
            "PyTorchJob": 0,
            "PodGroup": 0,
            "Queue": 0,
            "PriorityClass": 0,
            "HorizontalPodAutoscaler": 0,
        }


async def test_on_change_is_told_only_the_kinds_it_reads(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    """The daemon's triggers read gangs and jobs, not the 50k bound pods and 26k nodes a
    sync installs: told only of `on_change_kinds`, while a job kind's deletion is still
    kept as a tombstone."""
    seed(kube)
    seen: list[tuple[str, str, str]] = []

    def on_change(kind: str, event_type: str, obj: Any, before: Any) -> None:
        seen.append((kind, event_type, name_of(obj).split("/")[-1]))

    source = KubeSource(
        Settings().kube_options(), client, on_change, on_change_kinds={"PodGroup"},
        backoff_base=0.01, backoff_cap=0.05, rng=random.Random(7),
    )  # fmt: skip
    await source.start()
    try:
        await source.wait_synced(5)
        assert seen == [("PodGroup", "ADDED", "pg-a")]
        await eventually(lambda: kube.watchers() == 5, message="watches open")
        kube.put(queue("team-y"))
        kube.delete("pytorchjobs", "ns1", "a")
        kube.put(podgroup("pg-b"))
        await eventually(lambda: len(seen) == 2, message="the gang added")
        await eventually(
            lambda: [r.name for r in source.tombstones.live(time.monotonic())] == ["a"]
        )
        assert seen[1] == ("PodGroup", "ADDED", "pg-b")
        assert "ns2/b" in names(source.objects().jobs) and len(source.objects().queues) == 2
    finally:
        await source.stop()


async def test_a_podgroup_turning_waiting_calls_one_early_cycle_per_transition(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    """As training-operator makes a gang: added with no phase, then Volcano writes
    Pending, then Inqueue; later it runs, and turns waiting again (evicted). Each turn
    into waiting calls one early cycle (run.triggers), whether it came as an event or by
    a relist; a change between waiting phases, or a relabel, calls none."""
    from autoscaler.run.triggers import wants_early_cycle

    early: list[str] = []

    def on_change(kind: str, event_type: str, record: Any, before: Any) -> None:
        if kind == "PodGroup" and wants_early_cycle(kind, event_type, record, before):
            early.append(record.phase)

    async with running(client, on_change) as source:
        await eventually(lambda: kube.watchers() == 5, message="watches open")
        gang = podgroup("gang")
        del gang["status"]
        kube.put(gang)
        await eventually(lambda: "ns1/gang" in names(source.objects().podgroups))
        assert early == []
        for phase in ("Pending", "Inqueue"):
            kube.patch("podgroups", "ns1", "gang", {"status": {"phase": phase}})
        kube.patch("podgroups", "ns1", "gang", {"metadata": {"labels": {"x": "y"}}})
        await eventually(lambda: early == ["Pending"], message="one early cycle")
        for phase in ("Running", "Pending"):
            kube.patch("podgroups", "ns1", "gang", {"status": {"phase": phase}})
        await eventually(lambda: early == ["Pending", "Pending"], message="evicted: again")
        kube.delete("podgroups", "ns1", "gang")
        kube.put(podgroup("later", phase="Inqueue"))  # added waiting
        await eventually(lambda: early == ["Pending", "Pending", "Inqueue"], message="added")
        assert len(early) == 3


async def test_wait_synced_names_the_caches_that_are_not(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    seed(kube)
    kube.fail_next("GET", r"/priorityclasses$", 403, times=10_000, watch=False)
    async with running(client, sync=False) as source:
        with pytest.raises(TimeoutError) as err:
            await source.wait_synced(0.3)
        message = str(err.value)
        assert "PriorityClass" in message and "403" in message
        assert "PyTorchJob" not in message
        assert not source.objects().synced
        assert any("PriorityClass" in e for e in source.objects().errors)
        kube.clear_faults()
        await source.wait_synced(5)
        assert source.objects().synced and source.objects().errors == ()


async def test_oversized_objects_are_dropped_and_reported(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    big = job("big")
    big["metadata"]["annotations"] = {"blob": "x" * 5000}
    kube.put(big)
    kube.put(job("small"))
    async with running(client, max_object_bytes=2048) as source:
        objects = source.objects()
        assert names(objects.jobs) == ["ns1/small"]
        assert len(objects.errors) == 1 and "ns1/big" in objects.errors[0]
        assert source.stats()["dropped_oversized"] == 1

        await eventually(lambda: kube.watchers("pytorchjobs") == 1, message="watch open")
        kube.patch(
            "pytorchjobs", "ns1", "small", {"metadata": {"annotations": {"blob": "y" * 5000}}}
        )
        kube.patch("pytorchjobs", "ns1", "big", {"metadata": {"annotations": None}})
        await eventually(
            lambda: names(source.objects().jobs) == ["ns1/big"], message="sizes swapped"
        )
        assert "ns1/small" in source.objects().errors[0]


async def test_watch_event_longer_than_a_stream_buffer_is_applied(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    # the stream arrives in chunks of 64 KiB or less: an event of a 300 KB object (valid:
    # etcd keeps up to 1.5 MiB, and under max_object_bytes) is read whole, as one event
    kube.put(job("small"))
    async with running(client) as source:
        await eventually(lambda: kube.watchers("pytorchjobs") == 1, message="watch open")
        big = job("big")
        big["metadata"]["annotations"] = {"blob": "x" * 300_000}
        kube.put(big)
        kube.patch("pytorchjobs", "ns1", "small", {"metadata": {"labels": {"after": "big"}}})
        await eventually(
            lambda: names(source.objects().jobs) == ["ns1/big", "ns1/small"],
            message="big job seen by the watch",
        )
        assert source.objects().errors == ()
        assert kube.count(verb="list", plural="pytorchjobs") == 1  # no relist needed


async def test_watch_line_that_is_not_an_event_is_an_error_and_the_cache_recovers(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    seed(kube)
    async with running(client) as source:
        await eventually(lambda: kube.watchers("queues") == 1, message="queue watch open")
        with capture_logs() as logs:
            assert kube.send_line("queues", b"<html>502 Bad Gateway</html>") == 1
            await eventually(lambda: source.stats()["errors"]["Queue"] == 1, message="failed")
        (failed,) = [e for e in logs if e["event"] == "kube.cache_error"]
        assert failed["cache"] == "Queue" and "not an event: <html>502" in failed["error"]
        # the cache watches again (from where it was: the line said nothing)
        kube.put(queue("team-y"))
        await eventually(
            lambda: names(source.objects().queues) == ["team-x", "team-y"],
            message="watch works again",
        )
        assert source.objects().errors == ()
        kube.send_line("queues", b'{"type":"ERROR","object":{"kind":"Status","code":410}}')
        await eventually(lambda: source.stats()["relists_410"] == 1, message="410 relisted")


async def test_paginated_list(kube: FakeKubeApi, client: ApiClient) -> None:
    for i in range(5):
        kube.put(job(f"j{i}"))
    async with running(client, page_size=2) as source:
        assert len(source.objects().jobs) == 5
        job_lists = [r for r in kube.requests if r.verb == "list" and r.plural == "pytorchjobs"]
        assert [r.query.get("limit") for r in job_lists] == ["2", "2", "2"]
        assert [bool(r.query.get("continue")) for r in job_lists] == [False, True, True]


async def test_bookmarks_advance_the_resource_version(kube: FakeKubeApi, client: ApiClient) -> None:
    seed(kube)
    async with running(client) as source:
        await eventually(lambda: kube.watchers() == 5, message="watches open")
        assert all(
            r.query.get("allowWatchBookmarks") == "True" for r in kube.requests if r.is_watch
        )
        kube.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
        kube.send_bookmarks()
        await eventually(
            lambda: (
                source.stats()["by_cache"]["Queue"]["resource_version"] == kube.resource_version
            ),
            message="bookmark applied",
        )


async def test_make_api_client_from_kubeconfig(kube: FakeKubeApi, tmp_path: Path) -> None:
    path = kube.write_kubeconfig(tmp_path / "config")
    settings = Settings(kubeconfig=path, namespaces=[f"ns{i}" for i in range(60)])
    api = await make_api_client(settings.kube_options())
    async with api:
        assert api.configuration.host == kube.url
        # every watch KubeSource holds open, and room beside them (the old formula sized
        # the pool for 2 watches per namespace: 138 connections for 245 watches)
        source = KubeSource(
            settings.kube_options(), api, job_kinds=JOB_RESOURCES, watch_nodes=True, watch_pods=True
        )
        watches = len(source._caches)
        assert watches == 60 * 5 + 4  # per namespace: 3 job kinds, PodGroups, HPAs
        assert api.configuration.connection_pool_maxsize >= watches + POOL_SPARE
        # the spare is real whatever the constant says: a LIST, a patch, an Event and a
        # Lease renewal can all go while every watch holds its connection
        assert POOL_SPARE >= 4
        res = await CustomObjectsApi(api).list_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues"
        )
        assert res["kind"] == "QueueList"


async def test_make_api_client_falls_back_to_the_default_kubeconfig(
    kube: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a cluster
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    kube.write_kubeconfig(tmp_path / ".kube" / "config")
    api = await make_api_client(Settings().kube_options())
    async with api:
        assert api.configuration.host == kube.url

    (tmp_path / ".kube" / "config").unlink()
    # nothing left to find: one error that says where it looked, in kubectl's order
    with pytest.raises(KubeconfigError, match=r"no kubeconfig found: .*\$KUBECONFIG.*in-cluster"):
        await make_api_client(Settings().kube_options())


async def test_kubeconfig_variable_and_context_as_kubectl_takes_them(
    kube: FakeKubeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$KUBECONFIG (also a list of files) before in-cluster and ~/.kube/config; the
    kubeconfig setting (--kubeconfig) before $KUBECONFIG; --context picks a context."""
    monkeypatch.setenv("HOME", str(tmp_path))
    path = kube.write_kubeconfig(tmp_path / "from-env")
    config = yaml.safe_load(path.read_text())
    other = {**config["contexts"][0], "name": "other"}
    other["context"] = {**other["context"], "namespace": "ml"}
    config["contexts"].append(other)
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}{os.pathsep}{path}")
    async with await make_api_client(Settings().kube_options()) as api:
        assert api.configuration.host == kube.url
    async with await make_api_client(Settings(kube_context="other").kube_options()) as api:
        assert api.configuration.host == kube.url
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(KubeconfigError, match=r"no context 'nope' \(it has .*other"):
        await make_api_client(Settings(kube_context="nope").kube_options())
    with pytest.raises(KubeconfigError, match="no such file"):
        await make_api_client(
            Settings(kubeconfig=tmp_path / "flag").kube_options()
        )  # the flag wins


async def test_list_once_reads_without_watching(kube: FakeKubeApi, client: ApiClient) -> None:
    seed(kube)
    source = KubeSource(Settings(namespaces=["ns1"]).kube_options(), client)
    objects = await source.list_once()
    assert names(objects.jobs) == ["ns1/a"] and objects.synced
    assert kube.count(verb="list") == 5 and kube.count(watch=True) == 0
    kube.fail_next("GET", r"/queues$", 403)
    with pytest.raises(ApiException) as denied:
        await KubeSource(Settings().kube_options(), client).list_once()
    assert denied.value.status == 403


async def test_backoff_grows_exponentially_with_jitter_and_is_capped(client: ApiClient) -> None:
    source = KubeSource(
        Settings().kube_options(), client, backoff_base=0.5, backoff_cap=30.0, rng=random.Random(1)
    )
    assert source._backoff(0) == 0.0
    for failures, full in [(1, 0.5), (2, 1.0), (3, 2.0), (6, 16.0), (7, 30.0), (60, 30.0)]:
        delays = [source._backoff(failures) for _ in range(50)]
        assert all(full / 2 <= d <= full for d in delays), (failures, delays)
        assert max(delays) - min(delays) > full / 10  # jittered, not a fixed step


async def test_blank_namespaces_and_selector_whitespace_are_ignored(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    kube.put(job("a", "ns1", team="ml"))
    async with running(client, namespaces=["", "ns1", "ns1"], label_selector=" team=ml ") as s:
        assert names(s.objects().jobs) == ["ns1/a"]
        assert sorted(s.stats()["by_cache"]) == [
            "HorizontalPodAutoscaler(ns1)",
            "PodGroup(ns1)",
            "PriorityClass",
            "PyTorchJob(ns1)",
            "Queue",
        ]


async def test_a_kind_whose_crd_is_missing_is_one_info_line_and_no_jobs(capsys) -> None:
    """The default manages every kind; a cluster without PaddleJob's CRD answers its
    LIST with 404: that cache is current and empty, said once at info, and the other
    kinds are read as usual (no warning, no error, no retry loop)."""
    from fakekube import DEFAULT_RESOURCES

    from autoscaler.core.resources import JOB_RESOURCES

    served = [r for r in DEFAULT_RESOURCES if r.plural != "paddlejobs"]
    async with FakeKubeApi(resources=served) as fake, ApiClient(fake.configuration()) as client:
        fake.put(job("a", "ns1"))
        source = KubeSource(
            Settings().kube_options(), client, job_kinds=JOB_RESOURCES, backoff_base=0.01
        )
        await source.start()
        try:
            await source.wait_synced(5)
            objects = source.objects()
            assert objects.synced and objects.errors == () and source.current
            assert names(objects.jobs) == ["ns1/a"]
            lists_before = sum(1 for r in fake.requests if "/paddlejobs" in r.path)
        finally:
            await source.stop()
    out = capsys.readouterr()
    text = out.out + out.err
    assert text.count("kube.kind_not_installed") == 1 and "paddlejobs.kubeflow.org" in text
    assert "kube.cache_error" not in text
    assert lists_before == 1  # checked again only every ABSENT_RECHECK_SECONDS


async def test_a_server_that_does_not_speak_http_is_retried_as_unreachable() -> None:
    """One classifier for every caller (kubeapi.classify). The caches used to keep their
    own, and disagreed with it here: a peer that answers something that is not HTTP
    (a wrong port, a TLS or SSH endpoint) raises aiohttp's ClientResponseError, which the
    caches took for a server answering and backed off exponentially (here 5-10 s after
    the first failure), while classify calls it unreachable: retried within
    CONNECT_RETRY_MAX_SECONDS, as a refused connection is."""

    connections = 0

    async def not_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(ConnectionError):
            await reader.read(100)
            writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(not_http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with ApiClient(Configuration(host=f"http://127.0.0.1:{port}")) as client:
            try:
                await CustomObjectsApi(client).list_cluster_custom_object(
                    "scheduling.volcano.sh", "v1beta1", "queues"
                )
            except Exception as exc:  # what the caches meet
                assert classify(exc) is ApiFailure.UNREACHABLE, exc
            source = KubeSource(
                Settings().kube_options(),
                client,
                backoff_base=10.0,  # a server that answered would wait 5-10 s now
                backoff_cap=60.0,
                rng=random.Random(7),
            )
            caches = len(source._caches)
            first = connections
            await source.start()
            try:
                # every cache fails once, and is back within a second or so: not 5 s later
                await eventually(
                    lambda: connections >= first + 2 * caches,
                    within=CONNECT_RETRY_MAX_SECONDS + 2.5,
                    message="every cache retrying at once",
                )
                assert all("Bad status line" in e for e in source.objects().errors)
            finally:
                await source.stop()
    finally:
        server.close()
        await server.wait_closed()


def test_the_daemon_settles_the_garbage_collector_once_synced() -> None:
    """What the sync read is taken out of the collector's walks and its first
    generation is collected less often (docs/benchmarks.md); the daemon calls it once its
    caches synced."""
    import gc

    from autoscaler.read.kube.tuning import GC_GEN0_THRESHOLD, settle_gc

    threshold = gc.get_threshold()
    try:
        settle_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == max(threshold[0], GC_GEN0_THRESHOLD)
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def test_the_daemon_collects_less_often_while_its_caches_sync() -> None:
    """Before the caches list, the first generation's threshold is raised (the records a
    sync keeps were walked again and again), and nothing is frozen yet: the sync's
    pages and the daemon's start-up are still collected."""
    import gc

    from autoscaler.read.kube.tuning import GC_GEN0_THRESHOLD, sync_gc

    threshold = gc.get_threshold()
    frozen = gc.get_freeze_count()
    try:
        gc.set_threshold(700, threshold[1], threshold[2])
        sync_gc()
        assert gc.get_threshold() == (GC_GEN0_THRESHOLD, threshold[1], threshold[2])
        assert gc.get_freeze_count() == frozen
    finally:
        gc.set_threshold(*threshold)
