"""The fake API server, driven by the real kubernetes_asyncio client.

These pin the server behaviours the daemon relies on, so a test passing against the fake
means the same calls work against kube-apiserver.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fakekube import FakeKubeApi, eventually, job
from kubernetes_asyncio import config, watch
from kubernetes_asyncio.client import (
    ApiClient,
    Configuration,
    CoordinationV1Api,
    CoreV1Api,
    CoreV1Event,
    CustomObjectsApi,
    EventsV1Api,
    EventsV1Event,
    SchedulingV1Api,
    V1Lease,
    V1LeaseSpec,
    V1ObjectMeta,
    V1ObjectReference,
)
from kubernetes_asyncio.client.exceptions import ApiException

KF = ("kubeflow.org", "v1")
MERGE = "application/merge-patch+json"


@pytest.fixture
def crd(client: ApiClient) -> CustomObjectsApi:
    return CustomObjectsApi(client)


def status_of(exc: ApiException) -> dict[str, Any]:
    return json.loads(exc.body)


async def collect(stream: watch.Watch, func: Any, *args: Any, **kwargs: Any) -> list[dict]:
    events = []
    async with stream:
        async for event in stream.stream(func, *args, **kwargs):
            events.append(event)
    return events


async def test_create_get_list_and_errors(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    created = await crd.create_namespaced_custom_object(*KF, "ns1", "pytorchjobs", job("a"))
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1
    assert meta["resourceVersion"] == kube.resource_version

    got = await crd.get_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a")
    assert got == created

    listed = await crd.list_namespaced_custom_object(*KF, "ns1", "pytorchjobs")
    assert listed["kind"] == "PyTorchJobList"
    assert listed["metadata"]["resourceVersion"] == kube.resource_version
    assert [o["metadata"]["name"] for o in listed["items"]] == ["a"]

    with pytest.raises(ApiException) as exists:
        await crd.create_namespaced_custom_object(*KF, "ns1", "pytorchjobs", job("a"))
    assert exists.value.status == 409
    assert status_of(exists.value)["reason"] == "AlreadyExists"

    with pytest.raises(ApiException) as missing:
        await crd.get_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "nope")
    body = status_of(missing.value)
    assert missing.value.status == 404
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["reason"] == "NotFound" and body["code"] == 404
    assert body["details"] == {"name": "nope", "group": "kubeflow.org", "kind": "pytorchjobs"}

    with_rv = job("b")
    with_rv["metadata"]["resourceVersion"] = "5"
    with pytest.raises(ApiException) as rv_set:
        await crd.create_namespaced_custom_object(*KF, "ns1", "pytorchjobs", with_rv)
    assert rv_set.value.status == 500

    with pytest.raises(ApiException) as wrong_ns:
        await crd.create_namespaced_custom_object(*KF, "ns2", "pytorchjobs", job("c"))
    assert wrong_ns.value.status == 400


async def test_selectors_and_namespace_scoping(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    kube.put(job("a", team="x", tier="gold"))
    kube.put(job("b", team="y"))
    kube.put(job("c"))
    kube.put(job("d", namespace="ns2", team="x"))

    async def names(selector: str = "", namespace: str | None = "ns1", **kw: Any) -> list[str]:
        if namespace is None:
            res = await crd.list_custom_object_for_all_namespaces(
                *KF, "pytorchjobs", label_selector=selector, **kw
            )
        else:
            res = await crd.list_namespaced_custom_object(
                *KF, namespace, "pytorchjobs", label_selector=selector, **kw
            )
        return [o["metadata"]["name"] for o in res["items"]]

    assert await names() == ["a", "b", "c"]
    assert await names(namespace=None) == ["a", "b", "c", "d"]
    assert await names("team=x") == ["a"]
    assert await names("team==x", namespace=None) == ["a", "d"]
    assert await names("team!=x") == ["b", "c"]
    assert await names("team") == ["a", "b"]
    assert await names("!team") == ["c"]
    assert await names("team in (x, y),tier notin (silver)") == ["a", "b"]
    assert await names("team=x,tier=gold") == ["a"]
    assert await names(namespace=None, field_selector="metadata.namespace=ns2") == ["d"]
    assert await names(field_selector="metadata.name!=a") == ["b", "c"]
    with pytest.raises(ApiException) as bad:
        await names("team=(x")
    assert bad.value.status == 400
    with pytest.raises(ApiException) as unsupported:
        await names(field_selector="spec.foo=1")
    assert unsupported.value.status == 400


async def test_patch_content_types(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    before = kube.put(job("a", replicas=2))
    patch = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}}

    # The client sends a dict as JSON patch unless told otherwise; the server refuses it.
    with pytest.raises(ApiException) as default_type:
        await crd.patch_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a", patch)
    assert default_type.value.status == 400
    assert kube.requests[-1].content_type == "application/json-patch+json"

    merged = await crd.patch_namespaced_custom_object(
        *KF, "ns1", "pytorchjobs", "a", patch, _content_type=MERGE
    )
    assert merged["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert merged["metadata"]["generation"] == 2
    assert int(merged["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])

    ops = [
        {"op": "test", "path": "/spec/pytorchReplicaSpecs/Worker/replicas", "value": 3},
        {"op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/replicas", "value": 4},
        {"op": "add", "path": "/metadata/annotations", "value": {"x/y": "1"}},
    ]
    patched = await crd.patch_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a", ops)
    assert patched["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    assert patched["metadata"]["annotations"] == {"x/y": "1"}
    assert kube.requests[-1].content_type == "application/json-patch+json"

    with pytest.raises(ApiException) as failed_test:
        await crd.patch_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a", ops[:1])
    assert failed_test.value.status == 422

    with pytest.raises(ApiException) as strategic:
        await crd.patch_namespaced_custom_object(
            *KF,
            "ns1",
            "pytorchjobs",
            "a",
            patch,
            _content_type="application/strategic-merge-patch+json",
        )
    assert strategic.value.status == 415
    assert status_of(strategic.value)["reason"] == "UnsupportedMediaType"

    # Removing a key with null (RFC 7386).
    cleared = await crd.patch_namespaced_custom_object(
        *KF,
        "ns1",
        "pytorchjobs",
        "a",
        {"metadata": {"annotations": {"x/y": None}}},
        _content_type=MERGE,
    )
    assert not cleared["metadata"].get("annotations")


async def test_noop_patch_keeps_resource_version_and_emits_nothing(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    current = kube.put(job("a", replicas=2))
    rv = kube.resource_version
    same = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}}}
    result = await crd.patch_namespaced_custom_object(
        *KF, "ns1", "pytorchjobs", "a", same, _content_type=MERGE
    )
    assert result["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
    assert kube.resource_version == rv
    kube.put(job("marker"))  # the only event after rv
    stream = watch.Watch()
    seen = []
    async with stream:
        async for event in stream.stream(
            crd.list_namespaced_custom_object,
            *KF,
            "ns1",
            "pytorchjobs",
            resource_version=rv,
            timeout_seconds=5,
        ):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            stream.stop()
    assert seen == [("ADDED", "marker")]


async def test_optimistic_concurrency(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    first = kube.put(job("a"))
    stale_rv = first["metadata"]["resourceVersion"]
    kube.patch("pytorchjobs", "ns1", "a", {"metadata": {"labels": {"touched": "yes"}}})

    with pytest.raises(ApiException) as merge_conflict:
        await crd.patch_namespaced_custom_object(
            *KF,
            "ns1",
            "pytorchjobs",
            "a",
            {"metadata": {"resourceVersion": stale_rv}, "spec": {"x": 1}},
            _content_type=MERGE,
        )
    assert merge_conflict.value.status == 409
    assert status_of(merge_conflict.value)["reason"] == "Conflict"

    replacement = job("a", replicas=5)
    replacement["metadata"]["resourceVersion"] = stale_rv
    with pytest.raises(ApiException) as put_conflict:
        await crd.replace_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a", replacement)
    assert put_conflict.value.status == 409

    replacement["metadata"]["resourceVersion"] = kube.get("pytorchjobs", "ns1", "a")["metadata"][
        "resourceVersion"
    ]
    replaced = await crd.replace_namespaced_custom_object(
        *KF, "ns1", "pytorchjobs", "a", replacement
    )
    assert replaced["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 5
    assert replaced["metadata"]["uid"] == first["metadata"]["uid"]

    del replacement["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as unconditional:
        await crd.replace_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a", replacement)
    assert unconditional.value.status == 422  # CRDs need a resourceVersion on update

    current_rv = kube.get("pytorchjobs", "ns1", "a")["metadata"]["resourceVersion"]
    ok = await crd.patch_namespaced_custom_object(
        *KF,
        "ns1",
        "pytorchjobs",
        "a",
        {"metadata": {"resourceVersion": current_rv}, "spec": {"x": 1}},
        _content_type=MERGE,
    )
    assert ok["spec"]["x"] == 1


async def test_status_and_scale_subresources(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    obj = job("a", replicas=2)
    obj["status"] = {"replicaStatuses": {"Worker": {"active": 2, "selector": "x=y"}}}
    kube.put(obj)

    main = await crd.patch_namespaced_custom_object(
        *KF,
        "ns1",
        "pytorchjobs",
        "a",
        {"status": {"replicaStatuses": {"Worker": {"active": 9}}}},
        _content_type=MERGE,
    )
    assert main["status"]["replicaStatuses"]["Worker"]["active"] == 2  # ignored

    status = await crd.patch_namespaced_custom_object_status(
        *KF,
        "ns1",
        "pytorchjobs",
        "a",
        {"status": {"replicaStatuses": {"Worker": {"active": 1}}}},
        _content_type=MERGE,
    )
    assert status["status"]["replicaStatuses"]["Worker"]["active"] == 1
    assert status["metadata"]["generation"] == 1  # status is not spec

    scale = await crd.get_namespaced_custom_object_scale(*KF, "ns1", "pytorchjobs", "a")
    assert scale["kind"] == "Scale"
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 1, "selector": "x=y"}

    scaled = await crd.patch_namespaced_custom_object_scale(
        *KF, "ns1", "pytorchjobs", "a", {"spec": {"replicas": 4}}, _content_type=MERGE
    )
    assert scaled["spec"]["replicas"] == 4
    stored = kube.get("pytorchjobs", "ns1", "a")
    assert stored["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
    assert stored["metadata"]["generation"] == 2


async def test_watch_replays_from_resource_version_then_streams_live(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    kube.put(job("old"))
    listed = await crd.list_namespaced_custom_object(*KF, "ns1", "pytorchjobs")
    since = listed["metadata"]["resourceVersion"]
    kube.put(job("a"))
    kube.patch("pytorchjobs", "ns1", "a", {"spec": {"x": 1}})
    kube.put(job("other-ns", namespace="ns2"))
    kube.delete("pytorchjobs", "ns1", "old")

    stream = watch.Watch()
    seen: list[tuple[str, str, int]] = []

    async def consume() -> None:
        async with stream:
            async for event in stream.stream(
                crd.list_namespaced_custom_object,
                *KF,
                "ns1",
                "pytorchjobs",
                resource_version=since,
                timeout_seconds=30,
            ):
                meta = event["object"]["metadata"]
                seen.append((event["type"], meta["name"], int(meta["resourceVersion"])))

    task = asyncio.create_task(consume())
    await eventually(lambda: len(seen) == 3, message="replayed events")
    kube.put(job("live"))
    await eventually(lambda: len(seen) == 4, message="live event")
    assert kube.close_watches() == 1
    await asyncio.wait_for(task, 5)  # a clean close ends a watch with timeout_seconds

    assert [(t, n) for t, n, _ in seen] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "old"),
        ("ADDED", "live"),
    ]
    rvs = [rv for *_, rv in seen]
    assert rvs == sorted(rvs) and rvs[0] > int(since)
    assert stream.resource_version == str(rvs[-1])


async def test_watch_without_resource_version_starts_with_current_state(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    kube.put(job("a"))
    kube.put(job("b"))
    stream = watch.Watch()
    seen = []
    async with stream:
        async for event in stream.stream(
            crd.list_namespaced_custom_object, *KF, "ns1", "pytorchjobs", timeout_seconds=30
        ):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 2:
                stream.stop()
    assert seen == [("ADDED", "a"), ("ADDED", "b")]


async def test_watch_label_selector_transitions(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    kube.put(job("a", team="x"))
    since = kube.resource_version
    kube.patch("pytorchjobs", "ns1", "a", {"metadata": {"labels": {"team": "y"}}})
    kube.patch("pytorchjobs", "ns1", "a", {"metadata": {"labels": {"team": "x"}}})
    kube.put(job("b", team="y"))
    stream = watch.Watch()
    seen = []
    async with stream:
        async for event in stream.stream(
            crd.list_namespaced_custom_object,
            *KF,
            "ns1",
            "pytorchjobs",
            label_selector="team=x",
            resource_version=since,
            timeout_seconds=30,
        ):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            if len(seen) == 2:
                stream.stop()
    assert seen == [("DELETED", "a"), ("ADDED", "a")]


async def test_watch_too_old_resource_version_is_410(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    kube.put(job("a"))
    since = kube.resource_version
    kube.put(job("b"))
    kube.compact()
    with pytest.raises(ApiException) as gone:
        await collect(
            watch.Watch(),
            crd.list_namespaced_custom_object,
            *KF,
            "ns1",
            "pytorchjobs",
            resource_version=since,
            timeout_seconds=30,
        )
    assert gone.value.status == 410
    assert "too old resource version" in str(gone.value.reason)
    watches = [r for r in kube.requests if r.is_watch]
    assert len(watches) == 1  # with timeout_seconds the client does not retry by itself

    # Watching from a version at or after the compaction works and replays what follows.
    now = kube.resource_version
    kube.put(job("c"))
    stream = watch.Watch()
    seen = []
    async with stream:
        async for event in stream.stream(
            crd.list_namespaced_custom_object,
            *KF,
            "ns1",
            "pytorchjobs",
            resource_version=now,
            timeout_seconds=30,
        ):
            seen.append((event["type"], event["object"]["metadata"]["name"]))
            stream.stop()
    assert seen == [("ADDED", "c")]


async def test_bounded_history_expires_old_versions(crd: CustomObjectsApi) -> None:
    async with FakeKubeApi(history_limit=2) as small, ApiClient(small.configuration()) as c:
        small.put(job("a"))
        since = small.resource_version
        for name in ("b", "c", "d"):
            small.put(job(name))
        with pytest.raises(ApiException) as gone:
            await collect(
                watch.Watch(),
                CustomObjectsApi(c).list_namespaced_custom_object,
                *KF,
                "ns1",
                "pytorchjobs",
                resource_version=since,
                timeout_seconds=30,
            )
        assert gone.value.status == 410


async def test_watch_timeout_bookmarks_and_abrupt_close(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    kube.put(job("a"))
    since = kube.resource_version
    # Server-side timeoutSeconds ends the stream; the client stops iterating.
    events = await asyncio.wait_for(
        collect(
            watch.Watch(),
            crd.list_namespaced_custom_object,
            *KF,
            "ns1",
            "pytorchjobs",
            resource_version=since,
            timeout_seconds=1,
        ),
        5,
    )
    assert events == []

    stream = watch.Watch()
    seen: list[dict] = []

    async def consume() -> None:
        async with stream:
            async for event in stream.stream(
                crd.list_namespaced_custom_object,
                *KF,
                "ns1",
                "pytorchjobs",
                resource_version=since,
                timeout_seconds=30,
                allow_watch_bookmarks=True,
            ):
                seen.append(event)

    task = asyncio.create_task(consume())
    await eventually(lambda: kube.watchers() == 1, message="watch open")
    kube.put(job("b", team="x"))
    kube.send_bookmarks()
    await eventually(lambda: len(seen) == 2, message="event and bookmark")
    assert seen[1]["type"] == "BOOKMARK"
    assert stream.resource_version == kube.resource_version
    kube.close_watches(abrupt=True)
    with pytest.raises(aiohttp.ClientError):
        await asyncio.wait_for(task, 5)


async def test_fault_injection(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    kube.put(job("a"))
    kube.fail_next("PATCH", r"/pytorchjobs/a$", 500)
    with pytest.raises(ApiException) as internal:
        await crd.patch_namespaced_custom_object(
            *KF, "ns1", "pytorchjobs", "a", {"spec": {"x": 1}}, _content_type=MERGE
        )
    assert internal.value.status == 500
    await crd.patch_namespaced_custom_object(  # only once
        *KF, "ns1", "pytorchjobs", "a", {"spec": {"x": 1}}, _content_type=MERGE
    )

    kube.fail_next("GET", r"pytorchjobs", 429, times=2, retry_after=3)
    for _ in range(2):
        with pytest.raises(ApiException) as throttled:
            await crd.list_namespaced_custom_object(*KF, "ns1", "pytorchjobs")
        assert throttled.value.status == 429
        assert throttled.value.headers["Retry-After"] == "3"
    await crd.list_namespaced_custom_object(*KF, "ns1", "pytorchjobs")

    kube.fail_next(None, r"pytorchjobs/a$", 0, delay=1.0)
    with pytest.raises(asyncio.TimeoutError):
        await crd.get_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a", _request_timeout=0.1)

    # aiohttp retries an idempotent request once when a reused connection drops.
    kube.fail_next("GET", r"pytorchjobs", 0, drop=True, watch=False, times=2)
    with pytest.raises(aiohttp.ClientError):
        await crd.list_namespaced_custom_object(*KF, "ns1", "pytorchjobs")
    kube.clear_faults()

    kube.fail_next("GET", r"pytorchjobs", 404, body={"custom": True})
    with pytest.raises(ApiException) as custom:
        await crd.get_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a")
    assert custom.value.status == 404 and json.loads(custom.value.body) == {"custom": True}


async def test_request_log_counts(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    kube.put(job("a"))
    await crd.list_namespaced_custom_object(*KF, "ns1", "pytorchjobs")
    await crd.get_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a")
    await crd.patch_namespaced_custom_object(
        *KF, "ns1", "pytorchjobs", "a", {"spec": {"x": 1}}, _content_type=MERGE
    )
    assert kube.count("GET", "pytorchjobs") == 2
    assert kube.count(verb="list") == 1
    assert kube.count(verb="get", name="a") == 1
    assert kube.count(plural="pytorchjobs", watch=True) == 0
    assert [(w.verb, w.body) for w in kube.writes()] == [("patch", {"spec": {"x": 1}})]
    kube.reset_requests()
    assert kube.count() == 0


async def test_finalizers_delay_deletion(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    held = job("a")
    held["metadata"]["finalizers"] = ["example.com/hold"]
    kube.put(held)
    marked = await crd.delete_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a")
    assert marked["metadata"]["deletionTimestamp"]
    assert kube.get("pytorchjobs", "ns1", "a") is not None
    await crd.patch_namespaced_custom_object(
        *KF, "ns1", "pytorchjobs", "a", {"metadata": {"finalizers": None}}, _content_type=MERGE
    )
    assert kube.get("pytorchjobs", "ns1", "a") is None
    with pytest.raises(ApiException) as gone:
        await crd.delete_namespaced_custom_object(*KF, "ns1", "pytorchjobs", "a")
    assert gone.value.status == 404


async def test_typed_core_clients(kube: FakeKubeApi, client: ApiClient) -> None:
    core = CoreV1Api(client)
    event = CoreV1Event(
        metadata=V1ObjectMeta(generate_name="job-a.", namespace="ns1"),
        involved_object=V1ObjectReference(
            api_version="kubeflow.org/v1", kind="PyTorchJob", name="a", namespace="ns1"
        ),
        reason="ScaleUpIdleGpus",
        message="2 -> 4 workers",
        type="Normal",
    )
    made = await core.create_namespaced_event("ns1", event)
    assert made.metadata.name.startswith("job-a.")
    assert made.reason == "ScaleUpIdleGpus"
    events = await core.list_namespaced_event("ns1")
    assert [e.message for e in events.items] == ["2 -> 4 workers"]
    assert kube.objects("events")[0]["involvedObject"]["name"] == "a"

    event.involved_object.namespace = "elsewhere"
    with pytest.raises(ApiException) as invalid:
        await core.create_namespaced_event("ns1", event)
    assert invalid.value.status == 422

    leases = CoordinationV1Api(client)
    lease = V1Lease(
        metadata=V1ObjectMeta(name="leader", namespace="ns1"),
        spec=V1LeaseSpec(holder_identity="me", lease_duration_seconds=15),
    )
    created = await leases.create_namespaced_lease("ns1", lease)
    with pytest.raises(ApiException) as taken:
        await leases.create_namespaced_lease("ns1", lease)
    assert taken.value.status == 409
    created.spec.holder_identity = "you"
    replaced = await leases.replace_namespaced_lease("leader", "ns1", created)
    assert replaced.spec.holder_identity == "you"
    created.spec.holder_identity = "third"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as stale:
        await leases.replace_namespaced_lease("leader", "ns1", created)
    assert stale.value.status == 409
    read = await leases.read_namespaced_lease("leader", "ns1")
    assert read.spec.holder_identity == "you"

    kube.put(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "high"},
            "value": 1000,
        }
    )
    classes = await SchedulingV1Api(client).list_priority_class()
    assert [(p.metadata.name, p.value) for p in classes.items] == [("high", 1000)]
    raw = await CustomObjectsApi(client).list_cluster_custom_object(
        "scheduling.k8s.io", "v1", "priorityclasses"
    )
    assert raw["items"][0]["value"] == 1000 and "kind" not in raw["items"][0]


async def test_bearer_token_and_kubeconfig(tmp_path: Path) -> None:
    async with FakeKubeApi(token="s3cret") as kube:
        async with ApiClient(kube.configuration()) as api:
            await CustomObjectsApi(api).list_cluster_custom_object(
                "scheduling.volcano.sh", "v1beta1", "queues"
            )
        assert kube.requests[-1].authorization == "Bearer s3cret"
        async with ApiClient(kube.configuration(token="wrong")) as api:
            with pytest.raises(ApiException) as denied:
                await CustomObjectsApi(api).list_cluster_custom_object(
                    "scheduling.volcano.sh", "v1beta1", "queues"
                )
        assert denied.value.status == 401

        path = kube.write_kubeconfig(tmp_path / "kubeconfig")
        loaded = Configuration()
        await config.load_kube_config(config_file=str(path), client_configuration=loaded)
        assert loaded.host == kube.url
        async with ApiClient(loaded) as api:
            res = await CustomObjectsApi(api).list_cluster_custom_object(
                "scheduling.volcano.sh", "v1beta1", "queues"
            )
        assert res["kind"] == "QueueList"


async def test_validation_of_what_a_scaler_writes(kube: FakeKubeApi, crd: CustomObjectsApi) -> None:
    kube.put(job("a"))

    async def merge(patch: dict[str, Any]) -> dict[str, Any]:
        return await crd.patch_namespaced_custom_object(
            *KF, "ns1", "pytorchjobs", "a", patch, _content_type=MERGE
        )

    with pytest.raises(ApiException) as as_string:
        await merge({"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "3"}}}})
    assert as_string.value.status == 422
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in status_of(as_string.value)["message"]
    ok = await merge({"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3.0}}}})
    assert ok["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3

    with pytest.raises(ApiException) as number_annotation:
        await merge({"metadata": {"annotations": {"x/last-scale-time": 1700000000}}})
    assert number_annotation.value.status == 400
    with pytest.raises(ApiException) as bad_label:
        await merge({"metadata": {"labels": {"team": "not valid!"}}})
    assert bad_label.value.status == 422
    with pytest.raises(ApiException) as bad_name:
        await crd.create_namespaced_custom_object(*KF, "ns1", "pytorchjobs", job("Bad_Name"))
    assert bad_name.value.status == 422
    assert (
        kube.get("pytorchjobs", "ns1", "a")["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"]
        == 3
    )  # rejected writes changed nothing


async def test_paginated_list_is_a_consistent_snapshot(
    kube: FakeKubeApi, crd: CustomObjectsApi
) -> None:
    for i in range(5):
        kube.put(job(f"j{i}"))
    first = await crd.list_namespaced_custom_object(*KF, "ns1", "pytorchjobs", limit=2)
    assert [o["metadata"]["name"] for o in first["items"]] == ["j0", "j1"]
    assert first["metadata"]["remainingItemCount"] == 3
    kube.put(job("j5"))  # after the snapshot: not in its pages
    second = await crd.list_namespaced_custom_object(
        *KF, "ns1", "pytorchjobs", limit=2, _continue=first["metadata"]["continue"]
    )
    third = await crd.list_namespaced_custom_object(
        *KF, "ns1", "pytorchjobs", limit=2, _continue=second["metadata"]["continue"]
    )
    assert [o["metadata"]["name"] for o in second["items"] + third["items"]] == ["j2", "j3", "j4"]
    assert "continue" not in third["metadata"]
    assert third["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]

    again = await crd.list_namespaced_custom_object(*KF, "ns1", "pytorchjobs", limit=2)
    kube.compact()
    with pytest.raises(ApiException) as expired:
        await crd.list_namespaced_custom_object(
            *KF, "ns1", "pytorchjobs", limit=2, _continue=again["metadata"]["continue"]
        )
    assert expired.value.status == 410


async def test_events_api_group_shares_storage_and_validates(
    kube: FakeKubeApi, client: ApiClient
) -> None:
    events = EventsV1Api(client)
    body = EventsV1Event(
        metadata=V1ObjectMeta(name="job-a.1", namespace="ns1"),
        regarding=V1ObjectReference(kind="PyTorchJob", name="a", namespace="ns1"),
        reason="ScaleUpIdleGpus",
        note="2 -> 4",
        type="Normal",
        action="Scale",
        reporting_controller="elastic-autoscaler.io/controller",
        reporting_instance="pod-1",
        event_time=datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    )
    await events.create_namespaced_event("ns1", body)
    legacy = await CoreV1Api(client).list_namespaced_event("ns1")
    assert [e.metadata.name for e in legacy.items] == ["job-a.1"]

    back = await events.list_namespaced_event("ns1")
    assert [(e.note, e.regarding.name) for e in back.items] == [("2 -> 4", "a")]
    assert kube.objects("events")[0]["message"] == "2 -> 4"  # stored in core/v1 shape

    raw = client.sanitize_for_serialization(body)
    raw["metadata"]["name"] = "job-a.2"
    del raw["eventTime"]  # the typed model refuses this already; a dict body does not
    with pytest.raises(ApiException) as missing_time:
        await events.create_namespaced_event("ns1", raw)
    assert missing_time.value.status == 422
    assert "eventTime" in status_of(missing_time.value)["message"]
    assert len(kube.objects("events")) == 1
