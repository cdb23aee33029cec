"""PrometheusSource against the real Prometheus (Debian 2.42) scraping a Volcano-shaped
exporter: the default query's arithmetic, scrape-to-answer latency, staleness, auth.

One Prometheus serves the whole module (it takes ~5 s to its first scrape). It scrapes two
exporters: `main` for the arithmetic tests and `side`, which the staleness test breaks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from promserver import (
    HAVE_PROMETHEUS,
    SKIP_REASON,
    PrometheusProcess,
    VolcanoExporter,
    auth_proxy,
    make_tls_files,
    running_exporter,
    running_prometheus,
    wait_until,
)

from autoscaler.core.model import Plugin, VolcanoView
from autoscaler.core.reasons import Reason
from autoscaler.plan.headroom import plugin_limit
from autoscaler.read.prometheus.answer import FreeGpuReading
from autoscaler.read.prometheus.source import PrometheusSource
from autoscaler.settings import Settings

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(not HAVE_PROMETHEUS, reason=SKIP_REASON),
    pytest.mark.asyncio(loop_scope="module"),
]

SCRAPE_DEADLINE = 15.0  # scrape interval is 1 s; generous for a loaded CI runner


@dataclass
class Stack:
    prometheus: PrometheusProcess
    main: VolcanoExporter
    side: VolcanoExporter
    bad: VolcanoExporter


# Queues whose raw parts are garbage, as a broken or hostile exporter serves them: each
# must hold its own queue with its own kind. A clamped `deserved - allocated` query read
# -8000 allocated as 16 free GPUs in an 8-GPU queue and grew a job 2 -> 18.
BAD_QUEUES = {
    "neg-allocated": ((8000, -8000), Reason.METRICS_INVALID, "negative"),
    "neg-deserved": ((-4000, 0), Reason.METRICS_INVALID, "negative"),
    "nan-deserved": ((float("nan"), 0), Reason.METRICS_INVALID, "nan"),
    "inf-allocated": ((8000, float("inf")), Reason.METRICS_INVALID, "inf"),
    "huge-allocated": ((8000, 5e12), Reason.METRICS_INVALID, "bad_value"),
}
LAGGING = "lagging"  # scraped now, but its samples are stamped 60 s ago


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack() -> AsyncIterator[Stack]:
    main, side = VolcanoExporter(), VolcanoExporter()
    main.set_queue("team-a", deserved=8000, allocated=3000)
    main.set_queue("team-b", deserved=4000, allocated=None)  # nothing ever allocated
    main.set_queue("team-c", deserved=2000, allocated=5000)  # over its share (reclaimable)
    main.set_queue("team-half", deserved=4000, allocated=2500)
    side.set_queue("side-q", deserved=3000, allocated=1000)
    bad = VolcanoExporter()
    for name, ((deserved, allocated), _, _) in BAD_QUEUES.items():
        bad.set_queue(name, deserved=deserved, allocated=allocated)
    bad.set_queue(LAGGING, deserved=8000, allocated=1000)
    bad.lag_seconds[LAGGING] = 60
    async with running_exporter(main), running_exporter(side), running_exporter(bad):
        async with running_prometheus([main.target, side.target, bad.target]) as prometheus:
            yield Stack(prometheus, main, side, bad)


async def fetch(url: str, now: datetime | None = None, **fields: Any) -> FreeGpuReading:
    fields.setdefault("prometheus_timeout_seconds", 5)
    source = PrometheusSource(Settings(prometheus_url=url, **fields).prometheus_options())
    try:
        return await source.fetch(now or datetime.now(UTC))
    finally:
        source.close()


async def fetch_until(
    url: str, holds: Callable[[FreeGpuReading], bool], what: str
) -> FreeGpuReading:
    last: list[FreeGpuReading] = []

    async def check() -> bool:
        last[:] = [await fetch(url)]
        return holds(last[0])

    try:
        await wait_until(check, deadline_seconds=SCRAPE_DEADLINE, what=what)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; last reading: {last}") from None
    return last[0]


def free(reading: FreeGpuReading, queue: str) -> float | None:
    """The queue's room under its plugin, from what Prometheus answered: the exporter
    speaks the capacity plugin (real capacity - allocated - inqueue)."""
    state = reading.queues.get(queue)
    if state is None or reading.plugin is Plugin.GIVEN:
        return None if state is None else state.free_gpus  # a custom query: as given
    if state.volcano is None:
        return None
    view = VolcanoView(reading.plugin or Plugin.PROPORTION, {queue: state.volcano})
    limit = plugin_limit(queue, view, {})
    return None if limit is None else max(0.0, limit.gpus)


async def test_default_query_gives_free_gpus_per_queue(stack: Stack):
    reading = await fetch(stack.prometheus.url)
    assert reading.problem is None, reading.message
    assert Settings().free_gpus_query is None  # deserved and allocated read apart
    assert free(reading, "team-a") == 5.0  # (8000 - 3000) / 1000
    assert free(reading, "team-b") == 4.0  # no allocated series: nothing allocated
    assert free(reading, "team-c") == 0.0  # over its share: nothing free, not negative
    assert free(reading, "team-half") == 1.5  # fractions are kept; the planner floors
    assert free(reading, "side-q") == 2.0  # second target, same query
    # the cpu series make no duplicates; only the bad exporter's queues hold
    assert sorted(reading.errors) == sorted(kind for _, _, kind in BAD_QUEUES.values())


@pytest.mark.parametrize("queue", sorted(BAD_QUEUES))
async def test_a_garbage_part_holds_its_queue_with_its_own_reason(stack: Stack, queue: str):
    reading = await fetch(stack.prometheus.url)
    _, reason, kind = BAD_QUEUES[queue]
    state = reading.queues[queue]
    assert state.free_gpus is None and state.problem is reason, state
    assert kind in reading.errors
    part = "allocated" if "allocated" in queue else "deserved"
    assert f"{part} GPUs (volcano_queue_{part}_scalar_resources" in state.message
    assert free(reading, "team-a") == 5.0  # the other queues stand


async def test_a_series_scraped_long_ago_holds_though_the_answer_is_fresh(stack: Stack):
    """The answer is evaluated now, so its own timestamp is fresh; the samples behind it
    were stamped 60 s ago. The age of what was scraped is what counts."""
    reading = await fetch(stack.prometheus.url, max_metric_age_seconds=30)
    state = reading.queues[LAGGING]
    assert state.free_gpus is None and state.problem is Reason.METRICS_STALE, state
    assert "last scraped" in state.message and "max_metric_age_seconds=30" in state.message
    assert free(reading, "team-a") == 5.0  # scraped every second: fresh
    relaxed = await fetch(stack.prometheus.url, max_metric_age_seconds=300)
    assert free(relaxed, LAGGING) == 7.0


async def test_a_custom_single_query_gets_the_same_value_checks(stack: Stack):
    query = (
        "sum by (queue_name) (volcano_queue_deserved_scalar_resources"
        '{resource="nvidia.com/gpu"}) - sum by (queue_name) '
        '(volcano_queue_allocated_scalar_resources{resource="nvidia.com/gpu"})'
    )
    reading = await fetch(stack.prometheus.url, free_gpus_query=query)
    assert free(reading, "team-a") == 5.0
    assert reading.queues["team-c"].problem is Reason.METRICS_INVALID  # 2000 - 5000 < 0
    assert reading.queues["neg-deserved"].problem is Reason.METRICS_INVALID
    assert reading.queues["inf-allocated"].problem is Reason.METRICS_INVALID


async def test_exporter_changes_show_after_a_scrape(stack: Stack):
    stack.main.set_queue("team-new", deserved=6000, allocated=1000)
    reading = await fetch_until(
        stack.prometheus.url, lambda r: free(r, "team-new") == 5.0, "team-new to appear"
    )
    assert reading.queues["team-new"].usable
    stack.main.set_queue("team-new", deserved=6000, allocated=6000)
    await fetch_until(
        stack.prometheus.url, lambda r: free(r, "team-new") == 0.0, "team-new to fill up"
    )
    stack.main.remove_queue("team-new")
    reading = await fetch_until(
        stack.prometheus.url, lambda r: "team-new" not in r.queues, "team-new to go stale"
    )
    assert free(reading, "team-a") == 5.0  # the rest is untouched


async def test_failed_scrape_makes_the_queue_unknown_not_zero(stack: Stack):
    stack.side.failing = True  # Prometheus writes staleness markers on a failed scrape
    try:
        reading = await fetch_until(
            stack.prometheus.url, lambda r: "side-q" not in r.queues, "side-q to go stale"
        )
        assert reading.problem is None
        assert free(reading, "team-a") == 5.0
    finally:
        stack.side.failing = False
    await fetch_until(stack.prometheus.url, lambda r: free(r, "side-q") == 2.0, "side-q back")


async def test_answer_older_than_max_age_holds(stack: Stack):
    later = datetime.now(UTC) + timedelta(seconds=400)  # as if the answer were 400 s old
    reading = await fetch(stack.prometheus.url, now=later, max_metric_age_seconds=300)
    assert reading.queues["team-a"].free_gpus is None
    assert reading.queues["team-a"].problem is Reason.METRICS_STALE
    good = ("team-a", "team-b", "team-c", "team-half", "side-q")
    assert all(reading.queues[q].problem is Reason.METRICS_STALE for q in good)


@pytest.mark.parametrize(
    ("query", "reason", "kind"),
    [
        ("scalar(vector(1))", Reason.METRICS_INVALID, "non_vector"),
        ('"text"', Reason.METRICS_INVALID, "non_vector"),
        ("volcano_queue_deserved_scalar_resources[10s]", Reason.METRICS_INVALID, "non_vector"),
        ("vector(1000)", Reason.METRICS_INVALID, "missing_label"),
        # a PromQL the real Prometheus cannot parse: a setting to fix, named as such
        ("sum by (queue_name) (", Reason.METRICS_UNAVAILABLE, "bad_query"),
    ],
)
async def test_real_answers_of_the_wrong_kind_hold_every_queue(stack, query, reason, kind):
    reading = await fetch(stack.prometheus.url, free_gpus_query=query)
    assert reading.problem is reason, reading.message
    assert reading.queues == {}
    assert reading.errors == (kind,)


@pytest.mark.parametrize(
    ("query", "reason", "kind"),
    [
        (
            'sum by (queue_name) (volcano_queue_deserved_scalar_resources{queue_name="team-a"})'
            " * NaN",
            Reason.METRICS_INVALID,
            "nan",
        ),
        (
            'sum by (queue_name) (volcano_queue_deserved_scalar_resources{queue_name="team-a"})'
            " * -Inf",
            Reason.METRICS_INVALID,
            "inf",
        ),
        (
            'sum by (queue_name) (volcano_queue_deserved_scalar_resources{queue_name="team-a"})'
            " - 1e9",
            Reason.METRICS_INVALID,
            "negative",
        ),
        (
            'volcano_queue_deserved_scalar_resources{queue_name="team-a"}',
            Reason.METRICS_INVALID,
            "duplicate",
        ),  # one series per resource
    ],
)
async def test_real_bad_samples_hold_the_queue(stack, query, reason, kind):
    reading = await fetch(stack.prometheus.url, free_gpus_query=query)
    assert reading.problem is None, reading.message
    assert reading.queues["team-a"].free_gpus is None
    assert reading.queues["team-a"].problem is reason
    assert reading.errors == (kind,)


async def test_bearer_token_through_an_auth_proxy(stack: Stack, tmp_path: Path):
    token_file = tmp_path / "token"
    token_file.write_text("token-1\n")
    async with auth_proxy(stack.prometheus.url, "token-1") as proxy:
        source = PrometheusSource(
            Settings(
                prometheus_url=proxy.url, prometheus_bearer_token_file=token_file
            ).prometheus_options()
        )
        try:
            good = await source.fetch(datetime.now(UTC))
            proxy.token = "token-2"  # the proxy rotated first: we are refused ...
            refused = await source.fetch(datetime.now(UTC))
            token_file.write_text("token-2")  # ... until the mounted file catches up
            rotated = await source.fetch(datetime.now(UTC))
        finally:
            source.close()
    assert free(good, "team-a") == 5.0
    assert refused.problem is Reason.METRICS_UNAVAILABLE and refused.errors == ("auth",)
    assert "token-1" not in refused.message and "token-2" not in refused.message
    assert free(rotated, "team-a") == 5.0
    assert proxy.seen == ["Bearer token-1", "Bearer token-1", "Bearer token-2"]


async def test_real_prometheus_over_tls(tmp_path: Path):
    """Prometheus's own TLS (--web.config.file): verified by default, against our CA."""
    tls = make_tls_files(tmp_path)
    async with running_prometheus([], tls=tls) as prometheus:
        query = 'label_replace(vector(3000), "queue_name", "tls-q", "", "")'
        default = await fetch(prometheus.url, free_gpus_query=query)
        with_ca = await fetch(prometheus.url, free_gpus_query=query, prometheus_ca_file=tls.ca_cert)
        insecure = await fetch(
            prometheus.url, free_gpus_query=query, prometheus_insecure_skip_verify=True
        )
    assert prometheus.url.startswith("https://")
    assert default.problem is Reason.METRICS_UNAVAILABLE and default.errors == ("tls",)
    assert default.queues == {}
    assert free(with_ca, "tls-q") == 3.0
    assert free(insecure, "tls-q") == 3.0
