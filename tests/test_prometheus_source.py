"""PrometheusSource against a raw fake Prometheus HTTP API: one case per bad answer.

Every bad answer must hold (a problem Reason, free_gpus None), never read as 0 GPUs.
`now` is fixed: sample ages are computed against it, not against the wall clock.
"""

from __future__ import annotations

import asyncio
import base64
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from promserver import (
    Canned,
    error_body,
    fake_prometheus,
    free_port,
    make_tls_files,
    matrix_body,
    sample,
    scalar_body,
    string_body,
    vector_body,
)

from autoscaler.core.model import Plugin, VolcanoQueue
from autoscaler.core.reasons import Reason
from autoscaler.read.prometheus.answer import FreeGpuReading, parse_query_result
from autoscaler.read.prometheus.source import PrometheusSource
from autoscaler.settings import Settings

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TS = NOW.timestamp()


# The canned answers below are what one custom free-GPU query returns; the default
# two-part query is tested with `parts_body` and, against a real Prometheus, in
# test_prometheus_real.py.
SINGLE_QUERY = "elastic_autoscaler_test_free_gpus"


def make_settings(**fields: Any) -> Settings:
    fields.setdefault("prometheus_timeout_seconds", 5)
    fields.setdefault("free_gpus_query", SINGLE_QUERY)
    return Settings(**fields)


async def fetch(url: str, **fields: Any) -> FreeGpuReading:
    source = PrometheusSource(
        make_settings(prometheus_url=url, **fields).prometheus_options(), backoff_seconds=0.01
    )
    try:
        return await source.fetch(NOW)
    finally:
        source.close()


# ---- parse_query_result: the pure validation -------------------------------------------------


def parse(body: Any, **fields: Any) -> FreeGpuReading:
    return parse_query_result(body, make_settings(**fields).prometheus_options(), NOW)


def test_vector_gives_free_gpus_per_queue_in_gpus():
    reading = parse(vector_body(sample("team-a", 5000, TS), sample("team-b", 0, TS)))
    assert reading.problem is None
    assert {q: s.free_gpus for q, s in reading.queues.items()} == {"team-a": 5.0, "team-b": 0.0}
    assert all(s.usable for s in reading.queues.values())
    assert reading.errors == ()


def test_queue_label_and_divisor_come_from_settings():
    body = vector_body(sample(None, 3, TS, queue="q1"))
    reading = parse(body, queue_label="queue", metric_unit_divisor=1)
    assert reading.queues["q1"].free_gpus == 3.0


BAD_SAMPLES = [
    ("nan", float("nan"), TS, Reason.METRICS_INVALID, "NaN"),
    ("inf", float("inf"), TS, Reason.METRICS_INVALID, "+inf"),
    ("inf", float("-inf"), TS, Reason.METRICS_INVALID, "-inf"),
    ("negative", -1000, TS, Reason.METRICS_INVALID, "negative"),
    ("bad_value", "lots", TS, Reason.METRICS_INVALID, "not a number"),
    ("stale", 4000, TS - 301, Reason.METRICS_STALE, "301s old"),
    ("clock_skew", 4000, TS + 600, Reason.CLOCK_SKEW, "ahead of our clock"),
]


@pytest.mark.parametrize(("kind", "value", "ts", "reason", "words"), BAD_SAMPLES)
def test_bad_sample_holds_its_queue_only(kind, value, ts, reason, words):
    reading = parse(vector_body(sample("bad", value, ts), sample("good", 2000, TS)))
    assert reading.problem is None
    bad = reading.queues["bad"]
    assert bad.free_gpus is None
    assert bad.problem is reason
    assert "queue bad" in bad.message and words in bad.message
    assert reading.queues["good"].free_gpus == 2.0 and reading.queues["good"].usable
    assert reading.errors == (kind,)


def test_sample_just_within_max_age_is_fresh():
    reading = parse(vector_body(sample("q", 1000, TS - 299)), max_metric_age_seconds=300)
    assert reading.queues["q"].free_gpus == 1.0


def test_duplicate_series_for_one_queue_holds_that_queue():
    body = vector_body(
        sample("dup", 1000, TS, resource="nvidia.com/gpu"),
        sample("dup", 5000, TS, resource="baidu.com/a800_80g_cgpu"),
        sample("single", 1000, TS),
    )
    reading = parse(body)
    assert reading.queues["dup"].free_gpus is None
    assert reading.queues["dup"].problem is Reason.METRICS_INVALID
    assert "2 series" in reading.queues["dup"].message
    assert "sum by (queue_name)" in reading.queues["dup"].message
    assert reading.queues["single"].free_gpus == 1.0
    assert reading.errors == ("duplicate",)


def test_series_without_queue_label_is_ignored_and_counted():
    body = vector_body(sample("team-a", 1000, TS), sample(None, 9000, TS, queue="x"))
    reading = parse(body)
    assert reading.problem is None
    assert set(reading.queues) == {"team-a"}
    assert "ignored 1 series" in reading.message and "queue_name" in reading.message
    assert reading.errors == ("missing_label",)


def test_no_series_with_queue_label_is_a_cycle_problem():
    body = vector_body(sample(None, 1000, TS, queue="a"), sample(None, 0, TS, queue="b"))
    reading = parse(body)
    assert reading.problem is Reason.METRICS_INVALID
    assert reading.queues == {}
    assert "'queue_name'" in reading.message and 'queue="a"' in reading.message
    assert reading.errors == ("missing_label", "missing_label")


def test_empty_result_is_no_queues_and_no_problem():
    reading = parse(vector_body())
    assert reading.problem is None and reading.queues == {}
    assert "empty result" in reading.message


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (scalar_body(4, TS), "non_vector"),
        (string_body("4", TS), "non_vector"),
        (matrix_body("q", [(TS - 1, 1000), (TS, 1000)]), "non_vector"),
        ("<html><body>Bad Gateway</body></html>", "garbage"),
        ('{"status":"success","data":{"resultType":"vector","result":[{"metr', "garbage"),
        (b"\xff\xfe\x00", "garbage"),
        (error_body("execution", "query timed out"), "garbage"),
        ({"status": "success", "data": {"resultType": "histogram", "result": []}}, "garbage"),
        ({"status": "success", "data": {"resultType": "vector", "result": {}}}, "garbage"),
        (vector_body({"metric": {"queue_name": "q"}, "value": ["x", "1"]}), "garbage"),
        (vector_body({"metric": {"queue_name": "q"}}), "garbage"),
        (vector_body(["not", "a", "sample"]), "garbage"),
        ([TS, "4"], "non_vector"),  # custom_query's bare result of a scalar
        ([{"metric": {"queue_name": "q"}, "values": [[TS, "1"]]}], "non_vector"),
    ],
)
def test_unusable_answer_is_a_cycle_problem(body, kind):
    reading = parse(body)
    assert reading.problem is Reason.METRICS_INVALID
    assert reading.queues == {}
    assert reading.errors == (kind,)
    assert reading.message


def test_bare_result_list_as_custom_query_returns_it():
    reading = parse([sample("team-a", 3000, TS)])
    assert reading.queues["team-a"].free_gpus == 3.0


json_values = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "-0", "x"]),
    st.integers(-(10**6), 10**6),
)
vector_samples = st.lists(
    st.builds(
        lambda q, v, age: {
            "metric": {} if q is None else {"queue_name": q},
            "value": [TS - age, v],
        },
        st.none() | st.sampled_from(["a", "b", "c"]),
        values,
        st.floats(-1000, 1000),
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(json_values, vector_samples.map(lambda s: vector_body(*s))))
def test_parse_never_raises_and_never_reads_bad_data_as_a_number(body):
    reading = parse(body)
    if reading.problem is not None:
        assert reading.queues == {}
    for state in reading.queues.values():
        assert (state.free_gpus is None) == (state.problem is not None)
        if state.free_gpus is not None:
            assert 0 <= state.free_gpus < float("inf")
    assert len(reading.errors) >= sum(1 for q in reading.queues.values() if q.problem)


# ---- the default query: deserved and allocated read apart ------------------------------------


def parts_body(
    queue: str, *, deserved=None, allocated=None, deserved_time=TS, allocated_time=TS, eval_ts=TS
) -> dict[str, Any]:
    """What the default query answers for one queue: each part as its own series."""
    from autoscaler.read.prometheus.answer import PART_LABEL

    result = []
    for part, value in (
        ("deserved", deserved),
        ("allocated", allocated),
        ("deserved_time", deserved_time if deserved is not None else None),
        ("allocated_time", allocated_time if allocated is not None else None),
    ):
        if value is not None:
            result.append(
                {"metric": {"queue_name": queue, PART_LABEL: part}, "value": [eval_ts, str(value)]}
            )
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def parts(body: Any, **fields: Any) -> FreeGpuReading:
    return parse_query_result(body, Settings(**fields).prometheus_options(), NOW)


@pytest.mark.parametrize(
    ("answer", "free"),
    [
        (dict(deserved=8000, allocated=3000), 5.0),
        (dict(deserved=8000), 8.0),  # nothing ever allocated
        (dict(deserved=2000, allocated=5000), 0.0),  # over its share: nothing free
        (dict(deserved=4000, allocated=2500), 1.5),
        (dict(deserved=8000, allocated=0, deserved_time=TS - 119), 8.0),
    ],
)
def test_deprecated_deserved_plugin_reads_deserved_minus_allocated(answer, free):
    reading = parts(parts_body("q", **answer), headroom_plugin="deserved")
    state = reading.queues["q"]
    assert state.usable and state.free_gpus == free and state.volcano is None
    assert reading.plugin is Plugin.GIVEN


def test_parts_give_volcano_queue_figures_and_the_plugin():
    from autoscaler.read.prometheus.answer import PART_LABEL

    def series(part: str, value: float) -> dict[str, Any]:
        return {"metric": {"queue_name": "q", PART_LABEL: part}, "value": [TS, str(value)]}

    result = [
        series("allocated", 2000),
        series("allocated_time", TS),
        series("request", 3000),
        series("request_time", TS),
        series("inqueue", 1000),
        series("deserved", 2000),
        series("deserved_time", TS),
    ]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    reading = parts(body)
    assert reading.plugin is Plugin.PROPORTION  # no real-capacity series
    assert reading.queues["q"].volcano == VolcanoQueue(
        "q", allocated=2.0, request=3.0, inqueue=1.0, deserved=2.0
    )
    with_capacity = {
        **body,
        "data": {**body["data"], "result": [*result, series("real_capacity", 8000)]},
    }
    reading = parts(with_capacity)
    assert reading.plugin is Plugin.CAPACITY
    assert reading.queues["q"].volcano.real_capacity == 8.0  # type: ignore[union-attr]
    # the setting wins over what the answer shows
    assert parts(with_capacity, headroom_plugin="proportion").plugin is Plugin.PROPORTION
    # a queue with neither allocated nor request series is unknown, not zero
    only_deserved = {**body, "data": {**body["data"], "result": [series("deserved", 1000)]}}
    assert parts(only_deserved).queues == {}


@pytest.mark.parametrize(
    ("answer", "reason", "kind", "says"),
    [
        (
            dict(deserved=8000, allocated=-8000),
            Reason.METRICS_INVALID,
            "negative",
            "allocated GPUs (volcano_queue_allocated_scalar_resources",
        ),
        (dict(deserved=-1, allocated=0), Reason.METRICS_INVALID, "negative", "deserved GPUs"),
        (dict(deserved="NaN", allocated=0), Reason.METRICS_INVALID, "nan", "NaN"),
        (dict(deserved=8000, allocated="+Inf"), Reason.METRICS_INVALID, "inf", "+inf"),
        (
            dict(deserved=8000, allocated=2e12),
            Reason.METRICS_INVALID,
            "bad_value",
            "more than 1000000 GPUs",
        ),
        (dict(deserved=8000, allocated="x"), Reason.METRICS_INVALID, "bad_value", "not a number"),
        (
            dict(deserved=8000, allocated=0, allocated_time=TS - 121),
            Reason.METRICS_STALE,
            "stale",
            "last scraped 121s ago",
        ),
        (
            dict(deserved=8000, allocated=0, deserved_time=TS - 500),
            Reason.METRICS_STALE,
            "stale",
            "deserved GPUs",
        ),
        (
            dict(deserved=8000, allocated=0, deserved_time=TS + 3600),
            Reason.CLOCK_SKEW,
            "clock_skew",
            "ahead",
        ),
        (
            dict(deserved=8000, allocated=0, deserved_time="NaN"),
            Reason.METRICS_INVALID,
            "bad_value",
            "not a time",
        ),
    ],
)
def test_a_bad_part_holds_its_queue_with_its_reason(answer, reason, kind, says):
    reading = parts(parts_body("q", **answer))
    state = reading.queues["q"]
    assert state.free_gpus is None and state.problem is reason, state
    assert says in state.message and reading.errors == (kind,)


def test_a_queue_without_its_series_is_unknown_not_zero():
    # the headroom stands on allocated and request: deserved alone says nothing
    reading = parts(parts_body("q", deserved=1000))
    assert "q" not in reading.queues and reading.problem is None
    # the deprecated deserved - allocated needs deserved
    reading = parts(parts_body("q", allocated=1000), headroom_plugin="deserved")
    assert "q" not in reading.queues and reading.problem is None


def test_the_default_query_reads_parts_raw_with_their_scrape_times():
    from autoscaler.read.prometheus.answer import free_gpus_query

    query = free_gpus_query(Settings().prometheus_options())
    assert "clamp" not in query
    # deserved, allocated, request, inqueue, real capacity; the first three with their age
    assert query.count("timestamp(") == 3 and query.count("label_replace(") == 8
    for series in ("request", "inqueue", "real_capacity", "allocated", "deserved"):
        assert f"volcano_queue_{series}_scalar_resources" in query
    assert free_gpus_query(Settings(free_gpus_query="my_rule").prometheus_options()) == "my_rule"


# ---- fetch() over HTTP: one fake server per bad answer ---------------------------------------


async def test_good_answer_and_what_is_sent():
    async with fake_prometheus(vector_body(sample("team-a", 6000, TS))) as fake:
        reading = await fetch(fake.url)
    assert reading.problem is None
    assert reading.queues["team-a"].free_gpus == 6.0
    assert reading.duration_seconds > 0
    assert fake.hits == 1
    query = fake.requests[0]["query"]
    assert query["query"] == SINGLE_QUERY
    assert 0 < float(query["timeout"]) <= 5  # Prometheus gives up when we do
    assert "time" not in query  # evaluated at Prometheus's clock: see the age check
    assert "Authorization" not in fake.requests[0]["headers"]


@pytest.mark.parametrize(
    ("answer", "reason", "kind"),
    [
        (vector_body(sample("q", float("nan"), TS)), Reason.METRICS_INVALID, "nan"),
        (vector_body(sample("q", float("inf"), TS)), Reason.METRICS_INVALID, "inf"),
        (vector_body(sample("q", float("-inf"), TS)), Reason.METRICS_INVALID, "inf"),
        (vector_body(sample("q", -2000, TS)), Reason.METRICS_INVALID, "negative"),
        (
            vector_body(sample("q", 1, TS), sample("q", 2, TS, x="y")),
            Reason.METRICS_INVALID,
            "duplicate",
        ),
        (vector_body(sample("q", 4000, TS - 3600)), Reason.METRICS_STALE, "stale"),
    ],
)
async def test_bad_sample_over_http_holds_the_queue(answer, reason, kind):
    async with fake_prometheus(answer) as fake:
        reading = await fetch(fake.url)
    assert reading.problem is None
    assert reading.queues["q"].free_gpus is None
    assert reading.queues["q"].problem is reason
    assert reading.errors == (kind,)
    assert fake.hits == 1  # a bad answer is not retried


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (scalar_body(3, TS), "non_vector"),
        (matrix_body("q", [(TS, 1000)]), "non_vector"),
        (string_body("3", TS), "non_vector"),
        (vector_body(sample(None, 3000, TS, queue="q")), "missing_label"),
        (Canned("<html>oops</html>", content_type="text/html"), "garbage"),
        (Canned('{"status":"success","data":{"resultType":"vec'), "garbage"),
        (error_body("internal", "something broke"), "garbage"),
    ],
)
async def test_unusable_answer_over_http_holds_every_queue(answer, kind):
    async with fake_prometheus(answer) as fake:
        reading = await fetch(fake.url)
    assert reading.problem is Reason.METRICS_INVALID
    assert reading.queues == {}
    assert reading.errors == (kind,)
    assert fake.hits == 1


async def test_5xx_then_success_is_retried():
    answers = [
        Canned(error_body("unavailable", "TSDB not ready"), status=503),
        Canned("<html>502</html>", status=502),
        Canned(vector_body(sample("q", 2000, TS))),
    ]
    async with fake_prometheus(*answers) as fake:
        reading = await fetch(fake.url, prometheus_retries=2)
    assert reading.problem is None
    assert reading.queues["q"].free_gpus == 2.0
    assert fake.hits == 3
    assert reading.errors == ("http_5xx", "http_5xx")  # counted even though we recovered


async def test_always_500_gives_up_after_the_retries():
    async with fake_prometheus(Canned(error_body("internal", "boom"), status=500)) as fake:
        reading = await fetch(fake.url, prometheus_retries=2)
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    assert reading.queues == {}
    assert fake.hits == 3
    assert reading.errors == ("http_5xx",) * 3
    assert fake.url in reading.message and "HTTP 500" in reading.message
    assert "internal: boom" in reading.message and "after 3 attempts" in reading.message


async def test_default_backoff_is_applied_between_retries():
    async with fake_prometheus(Canned("down", status=503)) as fake:
        source = PrometheusSource(
            make_settings(prometheus_url=fake.url, prometheus_retries=2).prometheus_options()
        )
        started = time.monotonic()
        try:
            reading = await source.fetch(NOW)
        finally:
            source.close()
    assert reading.errors == ("http_5xx",) * 3
    assert time.monotonic() - started >= 0.2 + 0.4


async def test_no_retry_when_retries_is_zero():
    async with fake_prometheus(Canned("down", status=503)) as fake:
        reading = await fetch(fake.url, prometheus_retries=0)
    assert fake.hits == 1
    assert reading.problem is Reason.METRICS_UNAVAILABLE


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_4xx_is_not_retried(status):
    body = error_body("bad_data", "1:7: parse error: unexpected end of input")
    async with fake_prometheus(Canned(body, status=status)) as fake:
        reading = await fetch(fake.url, prometheus_retries=3)
    assert fake.hits == 1
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    # 400 bad_data is Prometheus refusing the query itself: a setting to fix
    assert reading.errors == ("bad_query" if status == 400 else "http_4xx",)
    assert f"HTTP {status}" in reading.message and "parse error" in reading.message


async def test_429_is_retried():
    answers = [Canned("slow down", status=429), Canned(vector_body(sample("q", 0, TS)))]
    async with fake_prometheus(*answers) as fake:
        reading = await fetch(fake.url, prometheus_retries=1)
    assert fake.hits == 2
    assert reading.queues["q"].free_gpus == 0.0


async def test_connection_refused_is_retried_then_unavailable():
    url = f"http://127.0.0.1:{free_port()}"
    reading = await fetch(url, prometheus_retries=1)
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    assert reading.errors == ("connection", "connection")
    assert url in reading.message and "refused" in reading.message.lower()


async def test_bad_url_is_a_config_problem_without_retries():
    # a URL without a scheme no longer gets this far (settings refuse it: test_cli_errors);
    # one requests cannot send still is a setting to fix, not a retry
    reading = await fetch("http://prom etheus:9090", prometheus_retries=2)
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    assert reading.errors == ("config",)


async def test_slow_server_times_out_within_the_deadline():
    async with fake_prometheus(Canned(vector_body(), hold=True)) as fake:
        started = time.monotonic()
        reading = await fetch(fake.url, prometheus_timeout_seconds=0.5, prometheus_retries=2)
        elapsed = time.monotonic() - started
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    assert reading.errors[-1] == "timeout"
    assert "timeout" in reading.message or "timed out" in reading.message
    assert elapsed < 1.5  # the server never answers; we do not wait for it


async def test_errors_before_a_timeout_are_kept():
    answers = [Canned("overloaded", status=503), Canned(vector_body(), hold=True)]
    async with fake_prometheus(*answers) as fake:
        reading = await fetch(fake.url, prometheus_timeout_seconds=0.5, prometheus_retries=2)
    assert fake.hits == 2
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    assert reading.errors == ("http_5xx", "timeout")


async def test_cancel_mid_query_propagates():
    async with fake_prometheus(Canned(vector_body(), hold=True)) as fake:
        source = PrometheusSource(make_settings(prometheus_url=fake.url).prometheus_options())
        try:
            task = asyncio.create_task(source.fetch(NOW))
            await asyncio.wait_for(fake.received.wait(), 5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            source.close()


# ---- auth and secrets -------------------------------------------------------------------------


async def test_bearer_token_is_sent_and_reread_every_fetch(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("first-token\n")
    async with fake_prometheus(vector_body(sample("q", 1000, TS))) as fake:
        settings = make_settings(prometheus_url=fake.url, prometheus_bearer_token_file=token_file)
        source = PrometheusSource(settings.prometheus_options())
        try:
            assert (await source.fetch(NOW)).problem is None
            token_file.write_text("  rotated-token  ")
            assert (await source.fetch(NOW)).problem is None
        finally:
            source.close()
    sent = [r["headers"]["Authorization"] for r in fake.requests]
    assert sent == ["Bearer first-token", "Bearer rotated-token"]


async def test_basic_auth_is_sent(tmp_path: Path):
    async with fake_prometheus(vector_body(sample("q", 1000, TS))) as fake:
        await fetch(fake.url, prometheus_username="ops", prometheus_password="s3cret")
    expected = "Basic " + base64.b64encode(b"ops:s3cret").decode()
    assert fake.requests[0]["headers"]["Authorization"] == expected


async def test_401_is_auth_not_retried_and_never_shows_the_token(tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("super-secret-token")
    # a proxy that echoes what it got, as some do, must not leak it into our message
    answer = Canned("invalid bearer token super-secret-token", status=401)
    async with fake_prometheus(answer) as fake:
        reading = await fetch(fake.url, prometheus_bearer_token_file=token_file)
    assert fake.hits == 1
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    assert reading.errors == ("auth",)
    assert "HTTP 401" in reading.message
    assert "super-secret-token" not in reading.message


async def test_403_with_basic_auth_never_shows_the_password():
    answer = Canned("user ops with password hunter2 is forbidden", status=403)
    async with fake_prometheus(answer) as fake:
        reading = await fetch(fake.url, prometheus_username="ops", prometheus_password="hunter2")
    assert reading.errors == ("auth",)
    assert "hunter2" not in reading.message


async def test_password_in_url_is_not_shown():
    url = f"http://ops:pw-in-url@127.0.0.1:{free_port()}"
    reading = await fetch(url, prometheus_retries=0)
    assert reading.errors == ("connection",)
    assert "pw-in-url" not in reading.message
    assert "127.0.0.1" in reading.message


async def test_unreadable_token_file_holds_without_querying(tmp_path: Path):
    async with fake_prometheus(vector_body()) as fake:
        missing = await fetch(fake.url, prometheus_bearer_token_file=tmp_path / "nope")
        (tmp_path / "empty").write_text(" \n")
        empty = await fetch(fake.url, prometheus_bearer_token_file=tmp_path / "empty")
    assert fake.hits == 0
    for reading in (missing, empty):
        assert reading.problem is Reason.METRICS_UNAVAILABLE
        assert reading.errors == ("auth",)
    assert "nope" in missing.message and "empty" in empty.message


# ---- TLS --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"))


async def test_tls_is_verified_by_default(tls):
    async with fake_prometheus(vector_body(), ssl_context=tls.server_context()) as fake:
        reading = await fetch(fake.url, prometheus_retries=2)
    assert fake.url.startswith("https://")
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    assert reading.errors == ("tls",)  # not retried: a retry cannot fix a certificate
    assert "certificate" in reading.message.lower()


async def test_tls_with_custom_ca(tls):
    body = vector_body(sample("q", 1000, TS))
    async with fake_prometheus(body, ssl_context=tls.server_context()) as fake:
        reading = await fetch(fake.url, prometheus_ca_file=tls.ca_cert)
    assert reading.problem is None
    assert reading.queues["q"].free_gpus == 1.0


async def test_tls_with_the_wrong_ca_fails(tls, tmp_path):
    other = make_tls_files(tmp_path)
    async with fake_prometheus(vector_body(), ssl_context=tls.server_context()) as fake:
        reading = await fetch(fake.url, prometheus_ca_file=other.ca_cert)
    assert reading.errors == ("tls",)


async def test_missing_ca_file_is_a_config_problem(tls, tmp_path):
    async with fake_prometheus(vector_body(), ssl_context=tls.server_context()) as fake:
        reading = await fetch(fake.url, prometheus_ca_file=tmp_path / "no-ca.crt")
    assert fake.hits == 0
    assert reading.problem is Reason.METRICS_UNAVAILABLE
    assert reading.errors == ("config",)
    assert "no-ca.crt" in reading.message


async def test_tls_insecure_skip_verify(tls):
    body = vector_body(sample("q", 1000, TS))
    async with fake_prometheus(body, ssl_context=tls.server_context()) as fake:
        reading = await fetch(fake.url, prometheus_insecure_skip_verify=True)
    assert reading.problem is None
    assert reading.queues["q"].free_gpus == 1.0
