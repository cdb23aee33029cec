"""Bad input corpus, end to end: hostile and malformed objects in the API server, read by
the real client and kube source, planned and applied by the real daemon wiring.

Each bad object must be reported with the right Reason and a message naming the field,
left alone (no PATCH), and must not stop the healthy jobs beside it from being planned.

Where the objects come from. The fake API server validates what a client WRITES (types of
the fields a scaler touches, names, labels) the way a CRD schema would, so most of these
objects could not be created through it. They reach a real cluster anyway: CRDs installed
without a structural schema or with x-kubernetes-preserve-unknown-fields, objects stored
before a schema tightened, or another controller's status writes. So they are stored with
`FakeKubeApi.put`, the permissive path (a store that does not validate), and served back
through LIST and WATCH exactly as stored. `test_the_fake_api_rejects_some_on_create` pins
down which of them the validating path would have refused.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from builders import DELETE, NOW, edit, podgroup, pytorchjob
from fakekube import FakeKubeApi, eventually
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException
from promserver import fake_prometheus, sample, vector_body
from structlog.testing import capture_logs
from test_loop import Daemon, settings_for

from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339 as format_time

HOSTILE = "hostile"  # a queue with plenty of free GPUs: anything wrongly managed grows
LAST = "elastic-autoscaler.io/last-scale-time"
W = "spec.pytorchReplicaSpecs.Worker"


def job(name: str, **kw: Any) -> dict[str, Any]:
    kw.setdefault("queue", HOSTILE)
    kw.setdefault("min_replicas", 1)
    kw.setdefault("max_replicas", 4)
    kw.setdefault("replicas", 2)
    kw.setdefault(
        "active",
        kw["replicas"]
        if isinstance(kw["replicas"], int)
        and not isinstance(kw["replicas"], bool)
        and 0 <= kw["replicas"] < 100
        else 2,
    )
    return pytorchjob(name, **kw)


def container(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


def tweak(obj: dict[str, Any], change) -> dict[str, Any]:
    change(obj)
    return obj


def with_annotation(name: str, value: Any) -> dict[str, Any]:
    obj = job(name)
    obj["metadata"]["annotations"] = {LAST: value}
    return obj


@dataclass(frozen=True)
class Bad:
    id: str
    obj: dict[str, Any]
    reason: Reason
    field: str  # what the message must name
    name: str = ""  # the job's name as reported, when it is not `id`

    @property
    def reported_name(self) -> str:
        return self.name or self.id


LONG = "x" * 300
UNICODE_QUEUE = "очередь-队列-🚀"

CORPUS: list[Bad] = [
    Bad(
        "min-above-max",
        job("min-above-max", min_replicas=5, max_replicas=2, replicas=2),
        Reason.INVALID_POLICY,
        "spec.elasticPolicy.minReplicas",
    ),
    Bad(
        "min-zero",
        job("min-zero", min_replicas=0),
        Reason.INVALID_POLICY,
        "spec.elasticPolicy.minReplicas",
    ),
    Bad(
        "min-fractional",
        job("min-fractional", min_replicas=1.5),
        Reason.INVALID_POLICY,
        "spec.elasticPolicy.minReplicas",
    ),
    Bad(
        "max-string",
        job("max-string", max_replicas="8"),
        Reason.INVALID_POLICY,
        "spec.elasticPolicy.maxReplicas",
    ),
    Bad(
        "max-huge",
        job("max-huge", max_replicas=10**12),
        Reason.INVALID_POLICY,
        "spec.elasticPolicy.maxReplicas",
    ),
    Bad(
        "elastic-not-a-mapping",
        edit(job("elastic-not-a-mapping"), "spec.elasticPolicy", "yes please"),
        Reason.INVALID_POLICY,
        "spec.elasticPolicy",
    ),
    Bad(
        "replicas-negative",
        job("replicas-negative", replicas=-1),
        Reason.INVALID_REPLICAS,
        f"{W}.replicas",
    ),
    Bad(
        "replicas-huge",
        job("replicas-huge", replicas=10**9, max_replicas=10**9),
        Reason.INVALID_REPLICAS,
        f"{W}.replicas",
    ),
    Bad(
        "replicas-string",
        job("replicas-string", replicas="3"),
        Reason.INVALID_REPLICAS,
        f"{W}.replicas",
    ),
    Bad(
        "replicas-bool",
        job("replicas-bool", replicas=True),
        Reason.INVALID_REPLICAS,
        f"{W}.replicas",
    ),
    Bad(
        "replicas-null-object",
        job("replicas-null-object", replicas={"$gt": 1}),
        Reason.INVALID_REPLICAS,
        f"{W}.replicas",
    ),
    Bad(
        "replicas-outside-bounds",
        job("replicas-outside-bounds", replicas=9, max_replicas=4),
        Reason.INVALID_REPLICAS,
        "outside the elastic range [1, 4]",
    ),
    Bad(
        "missing-worker",
        edit(job("missing-worker"), "spec.pytorchReplicaSpecs.Worker", DELETE),
        Reason.INVALID_SPEC,
        W,
    ),
    Bad(
        "missing-spec",
        edit(job("missing-spec"), "spec", DELETE),
        Reason.INVALID_SPEC,
        "spec is missing",
    ),
    Bad(
        "missing-containers",
        edit(
            job("missing-containers"),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
            [],
        ),
        Reason.INVALID_SPEC,
        f"{W}.template.spec.containers",
    ),
    Bad(
        "zero-gpus", job("zero-gpus", gpus=0), Reason.INVALID_SPEC, f"{W}.template requests no GPU"
    ),
    Bad(
        "fractional-gpus",
        job("fractional-gpus", gpus="0.5"),
        Reason.INVALID_SPEC,
        f"{W}.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    Bad(
        "negative-gpus",
        job("negative-gpus", gpus=-2),
        Reason.INVALID_SPEC,
        f"{W}.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    Bad(
        "huge-gpus",
        job("huge-gpus", gpus=10**9),
        Reason.INVALID_SPEC,
        f"{W}.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    Bad(
        "milli-gpus",
        job("milli-gpus", gpus="500m"),
        Reason.INVALID_SPEC,
        f"{W}.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
    ),
    Bad(
        "unknown-gpu-resource",
        job("unknown-gpu-resource", resource="amd.com/gpu"),
        Reason.INVALID_SPEC,
        f"{W}.template requests no GPU (nvidia.com/gpu)",
    ),
    Bad(
        "resources-not-a-mapping",
        tweak(
            job("resources-not-a-mapping"),
            lambda o: container(o).update(resources={"limits": "nvidia.com/gpu=8"}),
        ),
        Reason.INVALID_SPEC,
        f"{W}.template.spec.containers[0].resources must be a mapping",
    ),
    Bad(
        "active-garbage",
        edit(job("active-garbage"), "status.replicaStatuses.Worker.active", "two"),
        Reason.INVALID_SPEC,
        "status.replicaStatuses.Worker.active",
    ),
    Bad(
        "operator-hpa",
        edit(
            job("operator-hpa"),
            "spec.elasticPolicy.metrics",
            [{"type": "Resource", "resource": {"name": "cpu"}}],
        ),
        Reason.OPERATOR_HPA,
        "spec.elasticPolicy.metrics",
    ),
    Bad(
        "annotation-garbage-time",
        with_annotation("annotation-garbage-time", "yesterday"),
        Reason.INVALID_ANNOTATION,
        f"metadata.annotations[{LAST}]",
    ),
    Bad(
        "annotation-no-zone",
        with_annotation("annotation-no-zone", "2026-11-22T09:00:00"),
        Reason.INVALID_ANNOTATION,
        f"metadata.annotations[{LAST}]",
    ),
    Bad(
        "annotation-not-a-string",
        with_annotation("annotation-not-a-string", 1732262400),
        Reason.INVALID_ANNOTATION,
        f"metadata.annotations[{LAST}]",
    ),
    Bad(
        "annotation-from-the-future",
        with_annotation("annotation-from-the-future", format_time(NOW + timedelta(days=30))),
        Reason.CLOCK_SKEW,
        "last-scale-time",
    ),
    Bad(
        "annotations-not-a-mapping",
        edit(job("annotations-not-a-mapping"), "metadata.annotations", ["a", "b"]),
        Reason.INVALID_ANNOTATION,
        "metadata.annotations",
    ),
    Bad(
        "paused",
        tweak(
            job("paused"),
            lambda o: o["metadata"].update(annotations={"elastic-autoscaler.io/paused": "TRUE "}),
        ),
        Reason.PAUSED,
        "elastic-autoscaler.io/paused",
    ),
    Bad("name-too-long", job(LONG), Reason.INVALID_SPEC, "metadata.name", name="x" * 253),
    Bad(
        "queue-absent-from-prometheus",
        job("queue-absent-from-prometheus", queue="ghost"),
        Reason.METRICS_MISSING,
        "queue ghost",
    ),
    Bad("missing-queue", job("missing-queue", queue=None), Reason.METRICS_MISSING, "queue default"),
    Bad(
        "unicode-queue",
        job("unicode-queue", queue=UNICODE_QUEUE),
        Reason.METRICS_MISSING,
        f"queue {UNICODE_QUEUE}",
    ),
]

BAD_GANGS = [
    # a PodGroup whose owner does not exist: a gang no job will run in (its job deleted,
    # the PodGroup waiting for the garbage collector); it must not crash, be matched to a
    # job by accident, or make anyone shrink
    (
        "owner-missing",
        podgroup("owner-missing", queue="gangs", gpus=2, owner="no-such-job"),
        Reason.GANG_OWNER_GONE,
        "PyTorchJob ml/no-such-job is gone",
    ),
    (
        "gpus-garbage",
        podgroup("gpus-garbage", queue="gangs", gpus="lots"),
        Reason.INVALID_GANG,
        "spec.minResources[nvidia.com/gpu]",
    ),
    (
        "gpus-negative",
        podgroup("gpus-negative", queue="gangs", gpus=-4),
        Reason.INVALID_GANG,
        "spec.minResources[nvidia.com/gpu]",
    ),
    (
        "min-resources-not-a-mapping",
        edit(podgroup("min-resources-not-a-mapping", queue="gangs"), "spec.minResources", [1, 2]),
        Reason.INVALID_GANG,
        "spec.minResources must be a mapping",
    ),
]

HEALTHY = [
    # (name, namespace, queue): each can take 2 more workers
    ("ok-a", "ml", "team-a"),
    ("twin", "ml", "team-b"),  # the same name in two namespaces: two jobs, not a duplicate
    ("twin", "ml-2", "team-c"),
]


def prometheus_answer() -> dict[str, Any]:
    ts = NOW.timestamp()
    return vector_body(
        sample(HOSTILE, 100_000, ts),
        sample("team-a", 2000, ts),
        sample("team-b", 2000, ts),
        sample("team-c", 2000, ts),
        sample("gangs", 0, ts),
    )


def test_corpus_is_large_and_distinct():
    assert len(CORPUS) + len(BAD_GANGS) >= 20
    names = [b.obj["metadata"]["name"] for b in CORPUS]
    assert len(set(names)) == len(names)


async def test_bad_input_corpus_end_to_end():
    async with FakeKubeApi() as api:
        for bad in CORPUS:
            api.put(copy.deepcopy(bad.obj))
        for _, obj, _, _ in BAD_GANGS:
            api.put(copy.deepcopy(obj))
        for name, ns, queue in HEALTHY:
            api.put(
                pytorchjob(
                    name, ns, queue=queue, min_replicas=1, max_replicas=4, replicas=2, active=2
                )
            )
        async with (
            fake_prometheus(prometheus_answer()) as prom,
            Daemon(api, settings_for(prom.url)) as d,
        ):
            with capture_logs() as logs:
                result = await d.controller.run_once(NOW)
            assert result.result == "ok", result.message

            decisions = {(x.ref.namespace, x.ref.name): x for x in result.plan.decisions}
            problems = []
            for bad in CORPUS:
                x = decisions.get(("ml", bad.reported_name))
                if x is None:
                    problems.append(f"{bad.id}: no decision")
                    continue
                if x.reason is not bad.reason or bad.field not in x.message:
                    problems.append(f"{bad.id}: {x.reason.value}: {x.message}")
                if x.changed:
                    problems.append(f"{bad.id}: planned {x.current} -> {x.target}")
            assert problems == []

            gangs = {g.ref.name: g for g in result.plan.gangs}
            for gid, _, reason, text in BAD_GANGS:
                g = gangs[gid]
                assert g.reason is reason and text in g.message, (gid, g.reason, g.message)

            # none of the bad ones was written to; every healthy one was
            patched = {(r.namespace, r.name) for r in api.writes("pytorchjobs")}
            assert patched == {(ns, name) for name, ns, _ in HEALTHY}
            for name, ns, _ in HEALTHY:
                obj = api.get("pytorchjobs", ns, name)
                assert obj["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 4
            # the logs carry the reason and the field for each bad job
            logged = {e["name"]: e for e in logs if e.get("event") == "decision"}
            for bad in CORPUS:
                line = logged[bad.reported_name]
                assert line["reason"] == bad.reason.value and bad.field in line["message"]
            # and the metrics count them by reason
            from prometheus_client import generate_latest

            text = generate_latest(d.metrics.registry).decode()
            assert f'elastic_autoscaler_jobs{{queue="{HOSTILE}",reason="InvalidSpec"}}' in text

            # a later cycle: still nothing written to the bad ones
            again = await d.controller.run_once(NOW + timedelta(seconds=600))
            assert again.result == "ok"
            patched = {(r.namespace, r.name) for r in api.writes("pytorchjobs")}
            assert patched == {(ns, name) for name, ns, _ in HEALTHY}


async def test_oversized_object_is_dropped_reported_and_never_patched():
    """An object above max_object_bytes never reaches the parser: it is dropped by the
    kube source, logged with its size, and not patched; the rest is planned."""

    big = job("big")
    big["metadata"]["annotations"] = {"note": "x" * 200_000}
    async with FakeKubeApi() as api:
        api.put(big)
        api.put(pytorchjob("ok-a", queue="team-a", replicas=2, active=2, max_replicas=4))
        async with fake_prometheus(prometheus_answer()) as prom:
            settings = settings_for(prom.url, max_object_bytes=64 * 1024)
            with capture_logs() as logs:
                async with Daemon(api, settings) as d:
                    result = await d.controller.run_once(NOW)
                    errors = d.kube.objects().errors
            assert [x.ref.name for x in result.plan.decisions] == ["ok-a"]
            assert {(r.name) for r in api.writes("pytorchjobs")} == {"ok-a"}
            too_large = [e for e in logs if e.get("event") == "kube.object_too_large"]
            assert too_large and too_large[0]["name"] == "big"
            assert too_large[0]["bytes"] > 64 * 1024
            assert any("big dropped" in e and "max_object_bytes" in e for e in errors)


async def test_hostile_object_edited_in_place_is_rejected_on_the_next_cycle():
    """A job that was healthy and grown turns hostile by an edit (watch MODIFIED): the next
    cycle reports it and does not touch it, and does not shrink it either."""

    async with FakeKubeApi() as api:
        api.put(pytorchjob("j", queue="team-a", replicas=2, active=2, max_replicas=4))
        async with (
            fake_prometheus(prometheus_answer()) as prom,
            Daemon(api, settings_for(prom.url)) as d,
        ):
            await d.controller.run_once(NOW)
            assert (
                api.get("pytorchjobs", "ml", "j")["spec"]["pytorchReplicaSpecs"]["Worker"][
                    "replicas"
                ]
                == 4
            )
            api.patch(
                "pytorchjobs",
                "ml",
                "j",
                {"spec": {"elasticPolicy": {"minReplicas": 9, "maxReplicas": 1}}},
            )
            await d.seen("PyTorchJob", "j", lambda j: "minReplicas=9" in getattr(j, "message", ""))
            writes = len(api.writes("pytorchjobs"))
            result = await d.controller.run_once(NOW + timedelta(hours=1))
            x = result.plan.decisions[0]
            assert x.reason is Reason.INVALID_POLICY and "minReplicas=9" in x.message
            assert len(api.writes("pytorchjobs")) == writes


# The fake checks only the fields a scaler writes; a real server would also refuse a
# 300-character name and (with the published CRD schema) a non-object elasticPolicy.
REJECTED_ON_CREATE = {
    "replicas-string",
    "replicas-bool",
    "replicas-null-object",
    "max-string",
    "min-fractional",
    "active-garbage",
    "annotations-not-a-mapping",
    "annotation-not-a-string",
}


@pytest.mark.parametrize("bad", CORPUS, ids=[b.id for b in CORPUS])
async def test_the_fake_api_rejects_some_on_create(bad: Bad):
    """Which of the corpus the validating (client write) path refuses: those are why the
    corpus is stored with `put`. The rest a CRD schema lets through as they are."""

    async with FakeKubeApi() as api, ApiClient(api.configuration()) as client:
        custom = CustomObjectsApi(client)
        body = copy.deepcopy(bad.obj)
        body["metadata"].pop("resourceVersion", None)
        try:
            await custom.create_namespaced_custom_object(
                "kubeflow.org", "v1", "ml", "pytorchjobs", body
            )
        except ApiException as exc:
            assert exc.status in (400, 422), exc
            assert bad.id in REJECTED_ON_CREATE, f"unexpectedly rejected: {exc.body}"
            return
        assert bad.id not in REJECTED_ON_CREATE
        await eventually(lambda: api.objects("pytorchjobs"))


async def test_oversized_prometheus_answer_is_not_read_and_holds():
    from autoscaler.read.prometheus.source import PrometheusSource

    huge = vector_body(sample("team-a", 2000, NOW.timestamp(), junk="x" * (17 * 1024 * 1024)))
    async with fake_prometheus(huge) as prom:
        source = PrometheusSource(settings_for(prom.url).prometheus_options())
        try:
            reading = await source.fetch(NOW)
        finally:
            source.close()
    assert reading.problem is Reason.METRICS_INVALID
    assert "prometheus_max_response_bytes" in reading.message


async def test_large_object_arriving_by_watch_is_read_whole():
    """A big but legal object (a 300 KB last-applied-configuration annotation) arrives as
    one watch line after the caches synced: it is read, parsed and planned like any other."""

    async with FakeKubeApi() as api:
        async with (
            fake_prometheus(prometheus_answer()) as prom,
            Daemon(api, settings_for(prom.url)) as d,
        ):
            big = pytorchjob("big", queue="team-a", replicas=2, active=2, max_replicas=4)
            big["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
                "x" * 300_000
            )
            api.put(big)
            await d.seen("PyTorchJob", "big")
            result = await d.controller.run_once(NOW)
            assert [(x.ref.name, x.target) for x in result.plan.actions] == [("big", 4)]
            assert d.kube.objects().errors == ()
