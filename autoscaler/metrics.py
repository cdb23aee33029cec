"""Our own /metrics. One registry per daemon (tests make their own), no import-time globals."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .model import Plan

PREFIX = "elastic_autoscaler"


class Metrics:
    """Every metric the daemon exports. Names are a contract with deploy/ (dashboard,
    alerts); tests check that every name those use exists here."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.cycle_duration = Histogram(
            f"{PREFIX}_cycle_duration_seconds", "Duration of one planning cycle.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=r,
        )
        self.cycles = Counter(
            f"{PREFIX}_cycles", "Planning cycles by result (ok, hold, error, timeout).",
            ["result"], registry=r,
        )
        self.actions = Counter(
            f"{PREFIX}_actions", "Replica changes applied, by queue, direction and reason.",
            ["queue", "direction", "reason"], registry=r,
        )
        self.writes = Counter(
            f"{PREFIX}_writes", "Write calls to the API server by result "
            "(applied, conflict, gone, throttled, error, backoff, not_leader, dry_run).",
            ["result"], registry=r,
        )
        self.jobs = Gauge(
            f"{PREFIX}_jobs", "Jobs in the last plan by queue and reason.",
            ["queue", "reason"], registry=r,
        )
        self.gangs = Gauge(
            f"{PREFIX}_gangs", "Waiting gangs in the last plan by queue and reason.",
            ["queue", "reason"], registry=r,
        )
        self.queue_free = Gauge(
            f"{PREFIX}_queue_free_gpus", "Free GPUs per queue as read from Prometheus.",
            ["queue"], registry=r,
        )
        self.queue_pending = Gauge(
            f"{PREFIX}_queue_pending_gpus", "GPUs waiting gangs need, per queue.",
            ["queue"], registry=r,
        )
        self.queue_granted = Gauge(
            f"{PREFIX}_queue_granted_gpus", "GPUs granted to growing jobs in the last plan.",
            ["queue"], registry=r,
        )
        self.queue_reclaimed = Gauge(
            f"{PREFIX}_queue_reclaimed_gpus", "GPUs reclaimed for waiting gangs in the last plan.",
            ["queue"], registry=r,
        )
        self.queue_inflight = Gauge(
            f"{PREFIX}_queue_inflight_gpus", "GPUs promised to workers not yet running.",
            ["queue"], registry=r,
        )
        self.queue_growable = Gauge(
            f"{PREFIX}_queue_growable_gpus", "GPUs managed jobs of the queue could still take "
            "(up to their max) after the last plan.", ["queue"], registry=r,
        )
        self.queue_holding = Gauge(
            f"{PREFIX}_queue_holding", "1 when the whole queue holds (missing or bad data).",
            ["queue", "reason"], registry=r,
        )
        self.job_current = Gauge(
            f"{PREFIX}_job_current_replicas", "Worker replicas in the job's spec.",
            ["namespace", "name", "queue"], registry=r,
        )
        self.job_desired = Gauge(
            f"{PREFIX}_job_desired_replicas", "Worker replicas the last plan wants.",
            ["namespace", "name", "queue"], registry=r,
        )
        self.source_errors = Counter(
            f"{PREFIX}_source_errors", "Errors reading sources, by source and kind.",
            ["source", "kind"], registry=r,
        )
        self.last_success = Gauge(
            f"{PREFIX}_last_success_timestamp_seconds",
            "Unix time of the last cycle that completed.", registry=r,
        )
        self.is_leader = Gauge(
            f"{PREFIX}_is_leader", "1 when this replica holds the Lease and may write.",
            registry=r,
        )

    def record_plan(self, plan: Plan) -> None:
        """Replace the per-plan gauges with this plan's view (jobs that left disappear)."""

        for gauge in (self.jobs, self.gangs, self.queue_free, self.queue_pending,
                      self.queue_granted, self.queue_reclaimed, self.queue_inflight,
                      self.queue_growable, self.queue_holding, self.job_current,
                      self.job_desired):
            gauge.clear()
        jobs: dict[tuple[str, str], int] = {}
        growable: dict[str, int] = {}
        for d in plan.decisions:
            key = (d.queue, d.reason.value)
            jobs[key] = jobs.get(key, 0) + 1
            if d.current is not None:
                labels = (d.ref.namespace, d.ref.name, d.queue)
                self.job_current.labels(*labels).set(d.current)
                self.job_desired.labels(*labels).set(d.target if d.target is not None
                                                     else d.current)
            if (not d.reason.unmanaged and d.max_replicas is not None
                    and d.gpus_per_worker is not None and d.target is not None):
                growable[d.queue] = growable.get(d.queue, 0) + (
                    (d.max_replicas - d.target) * d.gpus_per_worker)
        for (queue, reason), n in jobs.items():
            self.jobs.labels(queue, reason).set(n)
        gangs: dict[tuple[str, str], int] = {}
        for g in plan.gangs:
            key = (g.queue, g.reason.value)
            gangs[key] = gangs.get(key, 0) + 1
        for (queue, reason), n in gangs.items():
            self.gangs.labels(queue, reason).set(n)
        for name, q in plan.queues.items():
            if q.free_gpus is not None:
                self.queue_free.labels(name).set(q.free_gpus)
            self.queue_pending.labels(name).set(q.pending_gpus)
            self.queue_granted.labels(name).set(q.granted_gpus)
            self.queue_reclaimed.labels(name).set(q.reclaimed_gpus)
            self.queue_inflight.labels(name).set(q.inflight_gpus)
            self.queue_growable.labels(name).set(growable.get(name, 0))
            if q.reason is not None:
                self.queue_holding.labels(name, q.reason.value).set(1)
