"""The policies compared: how each sets a job's size, gang and replicas, and what (if
anything) resizes jobs while they run.

- static           every job at its requested size, gang = requested, never resized.
- hpa              per-job HorizontalPodAutoscaler (training-operator style), each job
                   alone, on a queue-level "pressure" metric; see HpaController.
- volcano-default  stock Volcano: replicas = max, gang = min; elastic pods placed when
                   GPUs are free, never preempted (enqueue, allocate, backfill; no
                   preempt action in the scheduler configuration).
- volcano-elastic  an ideal, tuned Volcano: the same plus preemption of elastic pods for
                   any waiting gang. Real Volcano does that only with the preempt action
                   on AND a configuration where the priority plugin does not filter
                   victims (by default it refuses victims of equal or higher job
                   priority), so this is a bound, not what a stock install does.
- planner          replicas = requested, gang = min; the daemon's real cycle
                   (`autoscaler.run.loop.Controller.run_once`, so the real planner) on a
                   ClusterSnapshot of the simulated state, every interval_seconds and
                   early (at most once per min_interval_seconds) on submit/finish.
                   It sees each job's trace priority and restart cost.

Job priority (a trace's priority column) reaches only the planner: the Volcano baselines
admit FIFO with backfill and volcano-elastic preempts whatever the priorities (ideal).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import structlog

from autoscaler.act.results import ActionResult, ApplyResult, Outcome, refusal
from autoscaler.core.model import (
    ClusterSnapshot,
    ElasticJob,
    ObjectRef,
    PendingGroup,
    Plan,
    QueueState,
    UnmanagedJob,
)
from autoscaler.core.reasons import Reason
from autoscaler.report.metrics import Metrics
from autoscaler.run import loop
from autoscaler.settings import Settings

from .engine import Cluster, Controller, SimJob

POLICIES = ("static", "hpa", "volcano-default", "volcano-elastic", "planner")
# what each policy stands for: the --policies help and (the Volcano ones) the table legend
DESCRIPTIONS = {
    "static": "every job at its requested size",
    "hpa": "a per-job HorizontalPodAutoscaler",
    "volcano-default": "stock Volcano (enqueue, allocate, backfill; no preempt action: "
    "elastic pods are never evicted)",
    "volcano-elastic": "an ideal, tuned Volcano (preempt action on AND a priority plugin "
    "that does not filter victims: elastic pods of any job evicted for any waiting gang; "
    "stock Volcano refuses victims of equal or higher job priority)",
    "planner": "this daemon's planner",
}
# what simulated jobs declare of their run to the planner, as the annotations would
# (autoscaler/plan/payoff.py): nothing; their expected run time (their work: seconds at the
# size they asked for); their progress (the fraction of work done, to 0.01, as a trainer
# reports it at epoch ends); or both
JOB_INFO = ("none", "runtime", "progress", "both")
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # simulated second 0 as the planner's clock
# finished jobs of each queue the simulated API lists, the most recent first: a finished
# PyTorchJob stays (with status.startTime and completionTime) until it is deleted; a
# cluster keeping a few hundred per queue is assumed, the rest deleted
FINISHED_LISTED = 200
NAMESPACE = "sim"


def sim_time(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


class _Passive:
    """No controller: Volcano alone."""

    def __init__(self, name: str) -> None:
        self.name = name

    def setup(self, job: SimJob) -> None:
        if self.name == "static":
            job.min_workers = job.max_workers = job.replicas = job.gang = job.spec.requested
        else:  # volcano-*: the whole range asked for, the gang at min
            job.replicas = job.max_workers
            job.gang = job.min_workers

    def next_time(self) -> float:
        return math.inf

    def notify(self, now: float, cluster: Cluster, event: str) -> None:
        pass

    def cycle(self, now: float, cluster: Cluster) -> None:
        pass

    def close(self) -> None:
        pass


class _Elastic:
    """Jobs submitted as users do: replicas = requested, gang = min."""

    name = "elastic"

    def setup(self, job: SimJob) -> None:
        job.replicas = job.spec.requested
        job.gang = job.min_workers

    def close(self) -> None:
        pass


class PlannerController(_Elastic):
    """Our daemon in simulated time: the loop's real `Controller.run_once` (source ->
    plan -> actuator, with the actuator's refusal checks and the cycle's metrics) on a
    source that reads the simulated cluster and an actuator that resizes its jobs."""

    name = "planner"

    def __init__(
        self,
        settings: Settings,
        job_info: str = "none",
        history: Sequence[tuple[str, float]] = (),
    ) -> None:
        if job_info not in JOB_INFO:
            raise ValueError(f"unknown job info {job_info!r}: choose from {', '.join(JOB_INFO)}")
        self.settings = settings
        self.job_info = job_info
        self.history = history
        self.interval = settings.interval_seconds
        self.min_interval = settings.min_interval_seconds
        self._next = math.inf
        self._last = -math.inf
        self._now = 0.0
        self._cluster: Cluster | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # one for the run: cheaper
        self.daemon = loop.Controller(
            settings.loop_options(),
            settings.planner_policy(),
            _SimSource(self),
            _SimActuator(self),
            Metrics(),
            clock=lambda: self._now,
            # a cycle that goes wrong raises below; its log lines would only flood
            logger=structlog.wrap_logger(
                None, wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL)
            ).bind(),
        )

    def next_time(self) -> float:
        return self._next

    def notify(self, now: float, cluster: Cluster, event: str) -> None:
        if event == "start":
            # the daemon's start trigger (triggers.GangStarts): a gang bound in a queue
            # the last plan left idle GPUs in calls a cycle at once, not debounced
            if cluster.started & self.daemon.idle_queues:
                self._next = now
            return
        early = max(now, self._last + self.min_interval)
        self._next = min(self._next, early)

    def cycle(self, now: float, cluster: Cluster) -> None:
        self._now, self._cluster = now, cluster
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        try:
            outcome = self._loop.run_until_complete(self.daemon.run_once(sim_time(now)))
        finally:
            self._cluster = None
        refused = (
            [r for r in outcome.applied.results if r.outcome is Outcome.REFUSED]
            if (outcome.applied is not None)
            else []
        )
        if outcome.result is not loop.CycleStatus.OK or refused:
            # every input is well formed here: anything but a clean cycle is a bug
            why = outcome.message or "; ".join(
                f"{r.decision.ref.name}: {r.message}" for r in refused
            )
            raise RuntimeError(f"planner cycle at t={now:g}s: {outcome.result}: {why}")
        self._last = now
        self._next = now + self.interval if cluster.live() else math.inf

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None


class _SimSource:
    """What the daemon's sources would read from the simulated cluster."""

    def __init__(self, owner: PlannerController) -> None:
        self._owner = owner
        self._jobs: dict[str, tuple[tuple[object, ...], ElasticJob]] = {}
        self._done = _Finished(owner.history)

    async def read(self, now: datetime) -> ClusterSnapshot:
        cluster = self._owner._cluster
        assert cluster is not None
        if len(self._jobs) > 2 * len(cluster.live()) + 64:  # forget finished jobs
            live = {j.name for j in cluster.live()}
            self._jobs = {k: v for k, v in self._jobs.items() if k in live}
        snapshot = snapshot_of(cluster, self._jobs, self._owner.job_info)
        return replace(snapshot, unmanaged=self._done.listed(cluster))


class _Finished:
    """The finished jobs the API lists, as the daemon parses them (UnmanagedJob, reason
    FINISHED, with their start and completion): the workload's history before it
    started, then the jobs that finished since, the last FINISHED_LISTED of each queue."""

    def __init__(self, history: Sequence[tuple[str, float]]) -> None:
        self._by_queue: dict[str, list[UnmanagedJob]] = {}
        for i, (queue, run) in enumerate(history):
            self._add(f"before-{i}", queue, sim_time(-1.0 - run), sim_time(-1.0))
        self._seen: dict[str, int] = {}
        self._listed: tuple[UnmanagedJob, ...] = ()

    def _add(self, name: str, queue: str, started: datetime, completed: datetime) -> None:
        ref = ObjectRef(NAMESPACE, name)
        job = UnmanagedJob(
            ref,
            queue,
            Reason.FINISHED,
            f"{ref}: job has condition Succeeded",
            started=started,
            completed=completed,
        )
        kept = self._by_queue.setdefault(queue, [])
        kept.append(job)
        del kept[:-FINISHED_LISTED]

    def listed(self, cluster: Cluster) -> tuple[UnmanagedJob, ...]:
        changed = not self._listed and bool(self._by_queue)
        for queue, done in cluster.done_by_queue.items():
            for j in done[self._seen.get(queue, 0) :]:
                assert j.first_start is not None and j.finish is not None
                self._add(j.name, queue, sim_time(j.first_start), sim_time(j.finish))
                changed = True
            self._seen[queue] = len(done)
        if changed:
            self._listed = tuple(u for q in sorted(self._by_queue) for u in self._by_queue[q])
        return self._listed


class _SimActuator:
    """Applies each action as the Kubernetes actuator would (new Worker replicas and the
    last-resize annotation, here `SimJob.last_scale_time`), refusing what it refuses."""

    def __init__(self, owner: PlannerController) -> None:
        self._owner = owner

    async def apply(
        self, plan: Plan, now: datetime, may_write: Callable[[], bool] = lambda: True
    ) -> ApplyResult:
        cluster = self._owner._cluster
        assert cluster is not None
        by_name = {j.name: j for j in cluster.live()}
        results = []
        for d in plan.actions:
            why = refusal(d)
            if why is None:
                cluster.resize(by_name[d.ref.name], d.target)
                results.append(ActionResult(d, Outcome.APPLIED, "resized"))
            else:
                results.append(ActionResult(d, Outcome.REFUSED, why))
        return ApplyResult(tuple(results))


def snapshot_of(
    cluster: Cluster,
    cache: dict[str, tuple[tuple[object, ...], ElasticJob]] | None = None,
    job_info: str = "none",
) -> ClusterSnapshot:
    """What the daemon's sources would read: Volcano's view (the plugin, each queue's
    allocated, request, inqueue, weight, capability; the cluster's GPUs) from which the
    planner computes each queue's headroom with the same function the simulated
    scheduler admits by, every live job as an ElasticJob, every job still waiting for
    its gang also as a PendingGroup owned by it. `cache` (name -> (state, ElasticJob))
    reuses a job's model object while its state is unchanged, as the daemon's parse cache
    does by resourceVersion: most jobs do not change between cycles. `job_info`: what
    each job declares of its run (JOB_INFO)."""

    view = cluster.view()
    # as the daemon's sources build it: no free-GPU reading (the headroom replaces it);
    # capacity_gpus from the Queue object's capability, where it has one
    queues = {
        q: QueueState(
            q,
            None,
            volcano=vq,
            capacity_gpus=None if vq.capability is None else int(vq.capability),
        )
        for q, vq in view.queues.items()
    }
    cache = {} if cache is None else cache
    jobs = []
    pending = []
    runtime = job_info in ("runtime", "both")
    # node pools: each job's worker shape and where its workers run, as the pod watch
    # says (unless the planner is to see GPUs alone: the old rule)
    shapes = cluster.pool is not None and cluster.planner_sees_shapes
    for j in cluster.live():
        progress = _progress(j) if job_info in ("progress", "both") else None
        state = (
            j.min_workers,
            j.max_workers,
            j.replicas,
            j.active,
            j.last_scale_time,
            j.first_start,
            progress,
            tuple(j.nodes) if shapes else (),
        )
        hit = cache.get(j.name)
        if hit is not None and hit[0] == state:
            job = hit[1]
        else:
            job = ElasticJob(
                ref=ObjectRef(NAMESPACE, j.name),
                queue=j.queue,
                min_replicas=j.min_workers,
                max_replicas=j.max_workers,
                replicas=j.replicas,
                active=j.active,
                gpus_per_worker=j.gpw,
                created=sim_time(j.spec.submit),
                last_scale_time=(
                    None if j.last_scale_time is None else sim_time(j.last_scale_time)
                ),
                started=None if j.first_start is None else sim_time(j.first_start),
                resource_version="1",
                priority=j.spec.priority,
                # the daemon measures it after a resize; the simulator knows it
                restart_cost_seconds=j.spec.restart_cost,
                restart_cost_source="" if j.spec.restart_cost is None else "measured",
                expected_runtime_seconds=j.spec.work if runtime else None,
                progress=progress,
                shape=j.spec.shape if shapes else None,
                worker_nodes=tuple(j.nodes) if shapes else (),
            )
            cache[j.name] = (state, job)
        jobs.append(job)
        if not j.admitted:
            pending.append(
                PendingGroup(
                    ref=ObjectRef(NAMESPACE, j.name, "PodGroup"),
                    queue=j.queue,
                    gpus=j.gang * j.gpw,
                    created=sim_time(j.spec.submit),
                    priority=j.spec.priority,
                    owner=job.ref,
                    pods=((j.spec.worker_shape, j.gang),) if shapes else (),
                )
            )
    return ClusterSnapshot(queues=queues, jobs=tuple(jobs), pending=tuple(pending), volcano=view)


def _progress(j: SimJob) -> float | None:
    """The fraction of its work a started job reports done, to 0.01; None before."""
    if j.first_start is None or j.spec.work <= 0:
        return None
    return round(min(1.0, max(0.0, 1.0 - j.remaining / j.spec.work)), 2)


class HpaController(_Elastic):
    """One HPA per job, as training-operator builds it from elasticPolicy.metrics, run by
    the HPA controller every `period` seconds (its default sync period, 15 s).

    Metric: queue pressure seen by the job alone, in its workers:
        ratio = (replicas + (free GPUs of its queue - GPUs of gangs waiting in it) / gpw)
                / replicas
    i.e. "use the idle GPUs, give back what waiting jobs need". HPA defaults:
    desired = ceil(replicas x ratio), nothing when |ratio - 1| <= tolerance (0.1); scale-up
    at most max(+100%, +4 pods) per period; scale-down takes the highest recommendation
    of the last 300 s (stabilisation window); clamped to [min, max]. A job with no running
    pod has no metric and is left alone."""

    name = "hpa"

    def __init__(
        self, period: float = 15.0, tolerance: float = 0.1, stabilisation: float = 300.0
    ) -> None:
        self.period = period
        self.tolerance = tolerance
        self.stabilisation = stabilisation
        self._next = math.inf
        self._history: dict[str, deque[tuple[float, int]]] = {}

    def next_time(self) -> float:
        return self._next

    def notify(self, now: float, cluster: Cluster, event: str) -> None:
        if event == "start":  # an HPA reads its metric on its period, whatever starts
            return
        if self._next == math.inf:
            self._next = now

    def cycle(self, now: float, cluster: Cluster) -> None:
        waiting_gpus = {q: 0 for q in cluster.deserved}
        for j in cluster.live():
            if not j.admitted:
                waiting_gpus[j.queue] += j.gang * j.gpw
        # every HPA reads the same metric sample this period, then acts
        free = cluster.free_all()
        reading = {q: free[q] - waiting_gpus[q] for q in cluster.deserved}
        for j in list(cluster.live()):
            if not j.admitted or j.active == 0:
                continue
            current = j.replicas
            ratio = (current + reading[j.queue] / j.gpw) / current
            desired = current
            if abs(ratio - 1.0) > self.tolerance:
                desired = math.ceil(current * ratio - 1e-9)
            desired = max(j.min_workers, min(j.max_workers, desired))
            hist = self._history.setdefault(j.name, deque())
            hist.append((now, desired))
            while hist and hist[0][0] < now - self.stabilisation:
                hist.popleft()
            if desired < current:
                desired = min(current, max(d for _, d in hist))  # scale-down stabilisation
            elif desired > current:
                desired = min(desired, max(2 * current, current + 4))
            if desired != current:
                cluster.resize(j, desired)
        self._next = now + self.period if cluster.live() else math.inf


def make_controller(
    name: str,
    settings: Settings,
    job_info: str = "none",
    history: Sequence[tuple[str, float]] = (),
) -> Controller:
    if name in ("static", "volcano-default", "volcano-elastic"):
        return _Passive(name)
    if name == "hpa":
        return HpaController()
    if name == "planner":
        return PlannerController(settings, job_info, history)
    raise ValueError(f"unknown policy {name!r}: choose from {', '.join(POLICIES)}")


def preempts(name: str) -> bool:
    return name == "volcano-elastic"
