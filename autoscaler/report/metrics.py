"""Our own /metrics. One registry per daemon (tests make their own), no import-time globals."""

from __future__ import annotations

import platform
from collections import Counter as Counter_
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from autoscaler.core.model import Plan

PREFIX = "elastic_autoscaler"
STATUS_WRITE_RESULTS = ("written", "unchanged", "skipped", "failed")


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("elastic-autoscaler")
    except PackageNotFoundError:  # run from a clone without installing
        return "(not installed)"


def start_at_zero(counter: Counter, *label_values: Iterable[str]) -> None:
    """Export a labelled counter's series from 0 (one per value), so `rate()` and alerts see
    the first increment instead of a series that appears out of nowhere."""
    for values in label_values:
        for value in values:
            counter.labels(value)


class Metrics:
    """Every metric the daemon exports. Names are a contract with deploy/ (dashboard,
    alerts); tests check that every name those use exists here."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._cycle_metrics(self.registry)
        self._write_metrics(self.registry)
        self._source_metrics(self.registry)
        self._status_metrics(self.registry)
        # elastic_autoscaler_build_info{version,python} 1: which build runs where
        self.build_info = Info(
            f"{PREFIX}_build",
            "The running build: package version and Python.",
            registry=self.registry,
        )
        self.build_info.info({"version": package_version(), "python": platform.python_version()})

    def _cycle_metrics(self, r: CollectorRegistry) -> None:
        """The loop: cycles, their duration and result, what they decided."""
        self.cycle_duration = Histogram(
            f"{PREFIX}_cycle_duration_seconds",
            "Duration of one planning cycle.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.cycles = Counter(
            f"{PREFIX}_cycles",
            "Planning cycles by result (ok, hold, throttled, write_failed, error, timeout, "
            "follower).",
            ["result"],
            registry=r,
        )
        self.actions = Counter(
            f"{PREFIX}_actions",
            "Replica changes applied, by queue, direction, reason and job kind.",
            ["queue", "direction", "reason", "kind"],
            registry=r,
        )
        # Per-plan gauges (one series per job, queue and reason) come from the last plan
        # at scrape time: building 10k labelled children every cycle costs more than
        # planning them.
        self.plan_collector = PlanCollector()
        r.register(self.plan_collector)
        self.last_success = Gauge(
            f"{PREFIX}_last_success_timestamp_seconds",
            "Unix time of the last cycle that completed.",
            registry=r,
        )
        self.is_leader = Gauge(
            f"{PREFIX}_is_leader",
            "1 when this replica holds the Lease and may write.",
            registry=r,
        )

    def _write_metrics(self, r: CollectorRegistry) -> None:
        """The actuator: resizes by result, throttling, the write window, Events."""
        self.writes = Counter(
            f"{PREFIX}_writes",
            "Resizes by result: applied, conflict, gone, denied (refused by the cluster: "
            "admission, validation, RBAC), throttled and deferred (carried to the next "
            "cycle), error (5xx, timeout, unreachable), backoff, not_leader, dry_run, "
            "refused (a planner bug caught before writing).",
            ["result"],
            registry=r,
        )
        self.write_throttles = Counter(
            f"{PREFIX}_write_throttles",
            "429 (or 503 with Retry-After) answers to our writes; each write is sent again "
            "after its Retry-After.",
            registry=r,
        )
        self.write_window = Gauge(
            f"{PREFIX}_write_window",
            "Writes allowed in flight at once: halves on throttling, grows back as writes "
            "land, at most max_parallel_writes.",
            registry=r,
        )
        self.events_waiting = Gauge(
            f"{PREFIX}_events_waiting",
            "Kubernetes Events carried to the next cycle (the server throttled or failed).",
            registry=r,
        )

    def _source_metrics(self, r: CollectorRegistry) -> None:
        """The sources: which job kinds the API serves, errors reading."""
        self.kind_installed = Gauge(
            f"{PREFIX}_job_kind_installed",
            "1 when the API server serves the job kind (its CRD is installed), 0 when not; "
            "a kind not installed is checked again every few seconds.",
            ["kind"],
            registry=r,
        )
        self.cache_age = Gauge(
            f"{PREFIX}_kube_cache_age_seconds",
            "Seconds since the API server last said anything to a watch cache (a LIST, a "
            "watch's answer, an event or a bookmark), read when scraped; past "
            "watch_stall_seconds its watch is restarted and writes hold until it connects.",
            ["cache"],
            registry=r,
        )
        self.cache_stalled = Gauge(
            f"{PREFIX}_kube_cache_stalled",
            "1 while a cache's watch has delivered nothing for watch_stall_seconds and has "
            "not connected again: its objects may be stale, and writes hold.",
            ["cache"],
            registry=r,
        )
        self.source_errors = Counter(
            f"{PREFIX}_source_errors",
            "Errors reading sources, by source and kind.",
            ["source", "kind"],
            registry=r,
        )

    def _status_metrics(self, r: CollectorRegistry) -> None:
        """The status object's writer."""
        self.status_writes = Counter(
            f"{PREFIX}_status_writes",
            "Writes of the status ConfigMap by result (written; unchanged: nothing new "
            "before the heartbeat; skipped: not the leader, or a live daemon's object in a "
            "dry run; failed: logged, the cycle goes on).",
            ["result"],
            registry=r,
        )
        start_at_zero(self.status_writes, STATUS_WRITE_RESULTS)
        self.status_bytes = Gauge(
            f"{PREFIX}_status_bytes",
            "Size of the status document last written.",
            registry=r,
        )

    def record_plan(self, plan: Plan) -> None:
        """The gauges of this plan replace the last one's (jobs that left disappear)."""

        self.plan_collector.plan = plan


_GAUGES = {
    "jobs": ("Jobs in the last plan by queue and reason.", ["queue", "reason"]),
    "gangs": ("Waiting gangs in the last plan by queue and reason.", ["queue", "reason"]),
    "queue_free_gpus": ("Free GPUs per queue as read from Prometheus.", ["queue"]),
    "queue_pending_gpus": ("GPUs waiting gangs need, per queue.", ["queue"]),
    "queue_granted_gpus": ("GPUs granted to growing jobs in the last plan.", ["queue"]),
    "queue_reclaimed_gpus": ("GPUs reclaimed for waiting gangs in the last plan.", ["queue"]),
    "queue_inflight_gpus": ("GPUs promised to workers not yet running.", ["queue"]),
    "queue_growable_gpus": (
        "GPUs managed jobs of the queue could still take (up to their max) after the last plan.",
        ["queue"],
    ),
    "queue_holding": ("1 when the whole queue holds (missing or bad data).", ["queue", "reason"]),
    "job_current_replicas": (
        "Worker replicas in the job's spec.",
        ["namespace", "name", "kind", "queue"],
    ),
    "job_desired_replicas": (
        "Worker replicas the last plan wants.",
        ["namespace", "name", "kind", "queue"],
    ),
}


class PlanCollector(Collector):
    """Gauges describing the last plan, computed when Prometheus scrapes."""

    def __init__(self) -> None:
        self.plan: Plan | None = None

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return [GaugeMetricFamily(f"{PREFIX}_{n}", h, labels=ls) for n, (h, ls) in _GAUGES.items()]

    def collect(self) -> Iterable[GaugeMetricFamily]:
        families = {
            n: GaugeMetricFamily(f"{PREFIX}_{n}", h, labels=ls) for n, (h, ls) in _GAUGES.items()
        }
        plan = self.plan
        if plan is not None:
            self._fill(plan, families)
        return families.values()

    @staticmethod
    def _fill(plan: Plan, f: dict[str, GaugeMetricFamily]) -> None:
        jobs: Counter_[tuple[str, str]] = Counter_()
        growable: Counter_[str] = Counter_()
        for d in plan.decisions:
            jobs[(d.queue, d.reason.value)] += 1
            if d.current is not None:
                labels = [d.ref.namespace, d.ref.name, d.ref.kind, d.queue]
                f["job_current_replicas"].add_metric(labels, d.current)
                f["job_desired_replicas"].add_metric(
                    labels, d.target if d.target is not None else d.current
                )
            if (
                not d.reason.unmanaged
                and d.max_replicas is not None
                and d.gpus_per_worker is not None
                and d.target is not None
            ):
                growable[d.queue] += (d.max_replicas - d.target) * d.gpus_per_worker
        for (queue, reason), n in sorted(jobs.items()):
            f["jobs"].add_metric([queue, reason], n)
        gangs = Counter_((g.queue, g.reason.value) for g in plan.gangs)
        for (queue, reason), n in sorted(gangs.items()):
            f["gangs"].add_metric([queue, reason], n)
        for name, q in sorted(plan.queues.items()):
            if q.free_gpus is not None:
                f["queue_free_gpus"].add_metric([name], q.free_gpus)
            f["queue_pending_gpus"].add_metric([name], q.pending_gpus)
            f["queue_granted_gpus"].add_metric([name], q.granted_gpus)
            f["queue_reclaimed_gpus"].add_metric([name], q.reclaimed_gpus)
            f["queue_inflight_gpus"].add_metric([name], q.inflight_gpus)
            f["queue_growable_gpus"].add_metric([name], growable.get(name, 0))
            if q.reason is not None:
                f["queue_holding"].add_metric([name, q.reason.value], 1)
