"""Randomised soak of the planner's invariants over an evolving simulated cluster.

    python benchmarks/soak.py --cycles 10000 --seed 1
    python benchmarks/soak.py --cycles 10000 --seeds 1-5
    python benchmarks/soak.py --cycles 1000 --seed 1 --mode parse
    python benchmarks/soak.py --cycles 1500 --seeds 1-8 --declared   # jobs declare their run
    python benchmarks/soak.py --cycles 1500 --seeds 1-8 --crowded    # 30+ jobs run in a queue

A seeded driver runs `plan()` once per cycle (60 s of simulated time) over a cluster that
keeps changing: elastic jobs and non-elastic gangs arrive, get placed by a Volcano-like
scheduler (gang first, then elastic workers one at a time, sometimes late, sometimes never),
finish, get edited by users (max changed, replicas cut, paused, min set above max and
fixed again), queues get closed for a while; Prometheus answers lag a cycle and fail now
and then (down, missing, NaN, negative, stale); some writes fail (409).
After every cycle the plan is checked against what the planner knew (the snapshot) and
against the history of its own actions:

  bounds        every managed job's target is within [min, max]
  accounted     every job and every waiting gang has a decision with a message
  hold          a queue with missing/bad data, or Closed/Closing, changes nothing
  overcommit    growth fits in free GPUs minus in-flight (minus reserve), plus what trims
                and reclaims hand back; gangs served plus growth fit in free + releasing
  gangs-first   nothing grows while a waiting gang that reclaim could cover is left
                uncovered (no gang is blocked while something grows)
  cooldown      growth only after cooldown_seconds since the last resize, reclaim only
                after reclaim_cooldown_seconds
  flapping      (from the history of applied actions, not the annotation) no growth within
                cooldown_seconds after one of our shrinks; no shrink by trim or reclaim
                within reclaim_cooldown_seconds after one of our growths. A reclaim for a
                waiting gang may follow a growth once reclaim_cooldown_seconds have passed:
                that is the design (grown workers stay reclaimable), not flapping.
  idempotent    planning again on the applied result at the same instant changes nothing
  deterministic the plan of a shuffled snapshot is the same plan; the run's digest (every
                plan's actions and gang verdicts) depends only on the seed
  parse         (--mode parse) the cluster goes through raw objects and build_snapshot, and
                the plan equals the plan of the model-level snapshot

Prints one line per seed (violations, runtime, actions) and exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.core.model import (
    ClusterSnapshot,
    Decision,
    ElasticJob,
    ObjectRef,
    PendingGroup,
    Plan,
    QueueState,
    UnmanagedJob,
)
from autoscaler.core.policy import PlannerPolicy
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import rfc3339 as format_time
from autoscaler.plan.planner import plan
from autoscaler.read.parse import RawObjects, build_snapshot
from autoscaler.settings import Settings

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TICK = 60  # seconds of simulated time per cycle
CAPACITY = {"qa": 32, "qb": 16, "qc": 64}
PRIORITIES = {"low": 0, "mid": 10, "high": 100}
GPU = "nvidia.com/gpu"
# our annotations as the daemon names them (the default prefix)
_NAMES = Settings().annotations
ANNOTATION, PAUSED, EXPECTED = _NAMES.last_scale, _NAMES.paused, _NAMES.expected_runtime
# the reasons a job may shrink by: for a gang of its queue, of another (lent shares), or
# workers that never landed
_SHRINKS = (Reason.RECLAIM_FOR_PENDING, Reason.RECLAIM_FOR_QUEUE, Reason.TRIM_UNPLACED)


# ---- the simulated cluster -------------------------------------------------------------


@dataclass
class SimJob:
    name: str
    queue: str
    min: int
    max: int
    replicas: int
    active: int
    gpw: int
    priority: str
    created: datetime
    version: int = 1
    last_scale: datetime | None = None
    started: datetime | None = None
    paused: bool = False
    broken: bool = False  # a user typo: minReplicas above maxReplicas (InvalidPolicy)
    stuck: bool = False  # its extra workers never land (e.g. a node selector nobody fits)
    expected: float | None = None  # its declared run (--declared), seconds from its start
    completed: datetime | None = None  # when it finished (--history)

    @property
    def ref(self) -> ObjectRef:
        return ObjectRef("ml", self.name, "PyTorchJob", f"uid-{self.name}")


@dataclass
class SimGang:
    """A non-elastic job's PodGroup: waits for all its GPUs, then runs."""

    name: str
    queue: str
    gpus: int
    priority: str
    created: datetime
    running: bool = False


@dataclass(frozen=True)
class Violation:
    cycle: int
    kind: str
    detail: str


@dataclass
class SoakResult:
    seed: int
    mode: str
    cycles: int
    violations: list[Violation]
    seconds: float
    digest: str
    actions: Counter = field(default_factory=Counter)
    holds: int = 0
    gangs_served: int = 0
    gangs_refused: int = 0  # verdicts GangReclaimDoesNotPay (rule 3b)

    @property
    def by_kind(self) -> Counter:
        return Counter(v.kind for v in self.violations)


FINISHED_KEPT = 60  # finished jobs listed per queue (--history), the most recent


CROWDED_JOBS = 160  # --crowded: jobs at most (else 40), mostly 1-GPU workers
CROWDED_QUEUES = ["qc", "qc", "qc", "qa", "qb"]  # --crowded: most of them in the largest


class World:
    def __init__(
        self,
        rng: random.Random,
        declared: bool = False,
        history: bool = False,
        crowded: bool = False,
    ) -> None:
        self.rng = rng
        self.declared = declared
        # --crowded: a queue runs 30 jobs and more (rule 3b's busy queues: a swap before
        # the queue has run times to weigh it by is refused there)
        self.crowded = crowded
        # --history: jobs that finished after running stay listed with their start and
        # completion (the queue's run times weigh swaps where nothing is declared)
        self.history = history
        self.finished: dict[str, list[SimJob]] = {q: [] for q in CAPACITY}
        self.jobs: dict[str, SimJob] = {}
        self.gangs: dict[str, SimGang] = {}
        self.serial = 0
        self.last_free: dict[str, int] = {q: c for q, c in CAPACITY.items()}
        self.queue_state: dict[str, str] = {q: "Open" for q in CAPACITY}

    def used(self, queue: str) -> int:
        return sum(j.active * j.gpw for j in self.jobs.values() if j.queue == queue) + sum(
            g.gpus for g in self.gangs.values() if g.queue == queue and g.running
        )

    def free(self, queue: str) -> int:
        return CAPACITY[queue] - self.used(queue)

    def _name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    # -- arrivals, departures, edits ----------------------------------------------------

    def evolve(self, now: datetime) -> None:
        r = self.rng
        # load comes in waves: busy hours (queues full, gangs wait) and quiet ones
        busy = (now - T0).total_seconds() // (400 * TICK) % 2 == 1
        most, rate = (CROWDED_JOBS, 3.0) if self.crowded else (40, 1.0)
        if r.random() < (0.3 if busy else 0.08) * rate and len(self.jobs) < most:
            lo = r.randint(1, 2) if self.crowded else r.randint(1, 4)
            hi = lo + r.choice([0, 1, 2, 4, 8])
            name = self._name("j")
            self.jobs[name] = SimJob(
                name,
                r.choice(CROWDED_QUEUES if self.crowded else list(CAPACITY)),
                lo,
                hi,
                r.randint(lo, min(hi, lo + 1)),
                0,
                r.choice([1, 1, 1, 2] if self.crowded else [1, 1, 2, 4]),
                r.choice(["low", "low", "mid", "high"]),
                now,
                stuck=r.random() < 0.05,
                expected=_expected_run(name) if self.declared else None,
            )
        if r.random() < (0.08 if busy else 0.03) and len(self.gangs) < 12:
            name = self._name("g")
            self.gangs[name] = SimGang(
                name,
                r.choice(list(CAPACITY)),
                r.choice([1, 2, 4, 8, 12]),
                r.choice(["low", "mid", "high"]),
                now,
            )
        for j in list(self.jobs.values()):
            if r.random() < (0.012 if j.active else 0.01):
                del self.jobs[j.name]  # finished, or given up on while waiting
                if self.history and j.active and j.started is not None:
                    j.completed = now
                    kept = self.finished[j.queue]
                    kept.append(j)
                    del kept[:-FINISHED_KEPT]
            elif r.random() < 0.004:
                self._edit(j)
        for q, state in self.queue_state.items():  # an admin closes a queue for a while
            if state == "Open" and r.random() < 0.002:
                self.queue_state[q] = r.choice(["Closed", "Closing"])
            elif state != "Open" and r.random() < 0.05:
                self.queue_state[q] = "Open"
        for g in list(self.gangs.values()):
            if r.random() < (0.03 if g.running else 0.003):
                del self.gangs[g.name]

    def _edit(self, j: SimJob) -> None:
        r = self.rng
        what = r.random()
        j.version += 1
        if what < 0.5:  # the user changes max (and cuts replicas to it if needed)
            j.max = r.randint(j.min, j.min + 10)
            j.replicas = min(j.replicas, j.max)
        elif what < 0.8:  # the user resizes by hand, within bounds
            j.replicas = r.randint(j.min, j.max)
        elif what < 0.9 or j.paused:
            j.paused = not j.paused
        elif what < 0.95 or j.broken:
            j.broken = not j.broken  # and fixed again by a later edit

    # -- the scheduler -----------------------------------------------------------------

    def schedule(self, now: datetime) -> None:
        r = self.rng
        for j in self.jobs.values():
            if j.active > j.replicas:  # released workers are gone within a cycle
                j.active = j.replicas
        waiting = sorted(
            [
                (-PRIORITIES[g.priority], g.created, g.name, g)
                for g in self.gangs.values()
                if not g.running
            ]
            + [
                (-PRIORITIES[j.priority], j.created, j.name, j)
                for j in self.jobs.values()
                if j.active == 0 and j.replicas > 0
            ],
            key=lambda t: t[:3],
        )
        for *_, item in waiting:
            need = item.gpus if isinstance(item, SimGang) else item.min * item.gpw
            if need <= self.free(item.queue) and r.random() < 0.8:
                if isinstance(item, SimGang):
                    item.running = True
                else:
                    item.active = min(item.min, item.replicas)
                    item.started = item.started or now
        for j in sorted(self.jobs.values(), key=lambda j: j.name):
            if j.active == 0 or j.stuck:
                continue
            while j.active < j.replicas and j.gpw <= self.free(j.queue) and r.random() < 0.7:
                j.active += 1

    # -- what the planner sees -----------------------------------------------------------

    def free_gpus(self) -> tuple[dict[str, QueueState], Reason | None, str]:
        """Prometheus's answer: free GPUs by queue, a cycle late half the time, sometimes
        wrong. Bad values are what the real source would turn them into."""

        r = self.rng
        if r.random() < 0.02:
            return {}, Reason.METRICS_UNAVAILABLE, "prometheus: cannot connect"
        states: dict[str, QueueState] = {}
        for q in CAPACITY:
            value = self.last_free[q] if r.random() < 0.5 else self.free(q)
            self.last_free[q] = self.free(q)
            roll = r.random()
            if roll < 0.02:
                continue  # no series: unknown
            if roll < 0.03:
                states[q] = QueueState(q, None, Reason.METRICS_INVALID, "sample value is NaN")
            elif roll < 0.035:
                states[q] = QueueState(q, float("nan"))  # a bug upstream: the planner holds
            elif roll < 0.04:
                states[q] = QueueState(q, -3.0)
            elif roll < 0.05:
                states[q] = QueueState(q, None, Reason.METRICS_STALE, "sample is 900s old")
            else:
                states[q] = QueueState(q, float(max(0, value)) + r.choice([0, 0, 0, 0.4]))
        return states, None, ""

    def snapshot(
        self, free: dict[str, QueueState], problem: Reason | None, message: str
    ) -> ClusterSnapshot:
        jobs, pending, unmanaged = [], [], []
        for j in sorted(self.jobs.values(), key=lambda j: j.name):
            inflight = max(0, j.replicas - j.active) * j.gpw
            if j.paused:
                unmanaged.append(
                    UnmanagedJob(
                        j.ref,
                        j.queue,
                        Reason.PAUSED,
                        f'annotation {PAUSED} is "true"',
                        replicas=j.replicas,
                        gpus_per_worker=j.gpw,
                        inflight_gpus=inflight,
                    )
                )
            elif j.broken:
                # what parse.py reports; its in-flight GPUs still count in the queue
                unmanaged.append(
                    UnmanagedJob(
                        j.ref,
                        j.queue,
                        Reason.INVALID_POLICY,
                        f"spec.elasticPolicy.minReplicas={j.max + 1} is above maxReplicas={j.max}",
                        replicas=j.replicas,
                        gpus_per_worker=j.gpw,
                        inflight_gpus=inflight,
                    )
                )
            else:
                jobs.append(
                    ElasticJob(
                        ref=j.ref,
                        queue=j.queue,
                        min_replicas=j.min,
                        max_replicas=j.max,
                        replicas=j.replicas,
                        active=j.active,
                        gpus_per_worker=j.gpw,
                        created=j.created,
                        priority=PRIORITIES[j.priority],
                        last_scale_time=j.last_scale,
                        started=j.started,
                        resource_version=str(j.version),
                        expected_runtime_seconds=j.expected,
                    )
                )
            if j.active == 0:
                pending.append(
                    PendingGroup(
                        ObjectRef("ml", j.name, "PodGroup"),
                        j.queue,
                        j.min * j.gpw,
                        j.created,
                        PRIORITIES[j.priority],
                        owner=ObjectRef("ml", j.name, "PyTorchJob", f"uid-{j.name}"),
                    )
                )
        for q in sorted(self.finished):
            for j in self.finished[q]:
                unmanaged.append(
                    UnmanagedJob(
                        j.ref,
                        j.queue,
                        Reason.FINISHED,
                        "job has condition Succeeded",
                        started=j.started,
                        completed=j.completed,
                    )
                )
        for g in sorted(self.gangs.values(), key=lambda g: g.name):
            if not g.running:
                pending.append(
                    PendingGroup(
                        ObjectRef("ml", g.name, "PodGroup"),
                        g.queue,
                        g.gpus,
                        g.created,
                        PRIORITIES[g.priority],
                    )
                )
        # queues the source did not mention are unknown, as build_snapshot makes them
        queues = dict(free)
        for q in CAPACITY:
            queues.setdefault(
                q,
                QueueState(
                    q,
                    None,
                    Reason.METRICS_MISSING,
                    f"queue {q} has no series in the free-GPU query",
                ),
            )
            queues[q] = replace(queues[q], state=self.queue_state[q])
        return ClusterSnapshot(
            queues=queues,
            jobs=tuple(jobs),
            unmanaged=tuple(unmanaged),
            pending=tuple(pending),
            problem=problem,
            message=message,
        )

    def raw(self) -> RawObjects:
        """The same cluster as the API server would serve it."""

        jobs = [raw_job(j) for j in sorted(self.jobs.values(), key=lambda j: j.name)]
        jobs += [raw_job(j) for q in sorted(self.finished) for j in self.finished[q]]
        groups = [
            raw_podgroup(j.name, j.queue, j.min * j.gpw, j.priority, j.created, owner=j.name)
            for j in sorted(self.jobs.values(), key=lambda j: j.name)
            if j.active == 0
        ]
        groups += [
            raw_podgroup(
                g.name,
                g.queue,
                g.gpus,
                g.priority,
                g.created,
                phase="Running" if g.running else "Inqueue",
            )
            for g in sorted(self.gangs.values(), key=lambda g: g.name)
        ]
        classes = [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": n},
                "value": v,
            }
            for n, v in PRIORITIES.items()
        ]
        queues = [
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": q},
                "spec": {"weight": 1},
                "status": {"state": state},
            }
            for q, state in self.queue_state.items()
        ]
        return RawObjects(tuple(jobs), tuple(groups), tuple(queues), tuple(classes))

    def apply(self, plan: Plan, now: datetime) -> list[Decision]:
        """Write the plan's actions; 2% of writes lose a race (409) and change nothing."""

        applied = []
        for d in plan.actions:
            j = self.jobs.get(d.ref.name)
            if j is None or self.rng.random() < 0.02:
                continue
            j.replicas = d.target  # type: ignore[assignment]
            j.last_scale = now
            j.version += 1
            applied.append(d)
        return applied


def _expected_run(name: str) -> float:
    """A job's declared run time (--declared): 5 minutes to 3 hours, drawn from its name
    alone, so the world's own draws (and so the cycles) are those of the same seed
    without it."""
    return float(random.Random(f"run-{name}").randrange(300, 10_800, 60))


def raw_job(j: SimJob) -> dict[str, Any]:
    annotations = {}
    if j.last_scale is not None:
        annotations[ANNOTATION] = format_time(j.last_scale)
    if j.paused:
        annotations[PAUSED] = "true"
    if j.expected is not None:
        annotations[EXPECTED] = f"{j.expected:g}"
    status: dict[str, Any] = {"replicaStatuses": {"Worker": {"active": j.active}}}
    if j.started is not None:
        status["startTime"] = format_time(j.started)
    if j.completed is not None:
        status["completionTime"] = format_time(j.completed)
        status["conditions"] = [{"type": "Succeeded", "status": "True"}]
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": j.name,
            "namespace": "ml",
            "uid": f"uid-{j.name}",
            "resourceVersion": str(j.version),
            "creationTimestamp": format_time(j.created),
            "annotations": annotations,
        },
        "spec": {
            "elasticPolicy": {
                "minReplicas": j.max + 1 if j.broken else j.min,
                "maxReplicas": j.max,
            },
            "runPolicy": {
                "schedulingPolicy": {
                    "queue": j.queue,
                    "priorityClass": j.priority,
                    "minAvailable": j.min,
                }
            },
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": j.replicas,
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "pytorch", "resources": {"limits": {GPU: j.gpw}}}
                            ]
                        }
                    },
                }
            },
        },
        "status": status,
    }


def raw_podgroup(
    name: str,
    queue: str,
    gpus: int,
    priority: str,
    created: datetime,
    *,
    owner: str | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ml",
        "creationTimestamp": format_time(created),
    }
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ]
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": meta,
        "spec": {"queue": queue, "minResources": {GPU: str(gpus)}, "priorityClassName": priority},
        "status": {"phase": phase},
    }


# ---- the checker ----------------------------------------------------------------------


@dataclass
class History:
    """Our applied actions per job: (time, direction, reason)."""

    actions: dict[ObjectRef, list[tuple[datetime, str, Reason]]] = field(default_factory=dict)

    def record(self, decisions: Iterable[Decision], now: datetime) -> None:
        for d in decisions:
            self.actions.setdefault(d.ref, []).append((now, d.direction, d.reason))

    def last(self, ref: ObjectRef, direction: str) -> datetime | None:
        for when, dirn, _ in reversed(self.actions.get(ref, [])):
            if dirn == direction:
                return when
        return None


def _usable(state: QueueState | None, snapshot: ClusterSnapshot) -> bool:
    return (
        snapshot.problem is None
        and state is not None
        and state.problem is None
        and state.free_gpus is not None
        and math.isfinite(state.free_gpus)
        and state.free_gpus >= 0
        and state.state not in ("Closed", "Closing")
    )


def check_plan(
    snapshot: ClusterSnapshot,
    result: Plan,
    policy: Settings,
    now: datetime,
    history: History | None = None,
    cycle: int = 0,
) -> list[Violation]:
    """Every invariant of one plan against what the planner knew. Empty: all hold."""

    out: list[Violation] = []

    def bad(kind: str, detail: str) -> None:
        out.append(Violation(cycle, kind, detail))

    jobs = {j.ref: j for j in snapshot.jobs}
    decided = {d.ref: d for d in result.decisions}
    if set(decided) != set(jobs) | {u.ref for u in snapshot.unmanaged}:
        bad("accounted", "decisions do not match the jobs")
    if {g.ref for g in result.gangs} != {g.ref for g in snapshot.pending} | {
        g.ref for g in snapshot.invalid_groups
    }:
        bad("accounted", "gang decisions do not match the waiting gangs")
    for d in result.decisions:
        if not d.message:
            bad("accounted", f"{d.ref.name}: no message")
        if d.reason.unmanaged and d.changed:
            bad("bounds", f"{d.ref.name}: unmanaged ({d.reason.value}) but changed")

    for ref, j in jobs.items():
        d = decided.get(ref)
        if d is None:
            continue
        if d.target is None or not j.min_replicas <= d.target <= j.max_replicas:
            bad(
                "bounds",
                f"{ref.name}: target {d.target} outside [{j.min_replicas}, {j.max_replicas}]",
            )
        if not d.changed:
            continue
        since = None if j.last_scale_time is None else (now - j.last_scale_time).total_seconds()
        if d.direction == "up":
            if d.reason is not Reason.SCALE_UP_IDLE_GPUS:
                bad("bounds", f"{ref.name}: grown with reason {d.reason.value}")
            if since is not None and (since < policy.cooldown_seconds or since <= 0):
                bad("cooldown", f"{ref.name}: grown {since:.0f}s after its last resize")
        else:
            if d.reason not in _SHRINKS:
                bad("bounds", f"{ref.name}: shrunk with reason {d.reason.value}")
            if (
                d.reason in (Reason.RECLAIM_FOR_PENDING, Reason.RECLAIM_FOR_QUEUE)
                and since is not None
                and since < policy.reclaim_cooldown_seconds
            ):
                bad("cooldown", f"{ref.name}: reclaimed {since:.0f}s after its last resize")
        if history is not None:
            if d.direction == "up":
                shrunk = history.last(ref, "down")
                if shrunk is not None and (now - shrunk).total_seconds() < policy.cooldown_seconds:
                    bad(
                        "flapping",
                        f"{ref.name}: grown {(now - shrunk).total_seconds():.0f}s "
                        "after we shrank it",
                    )
            else:
                grown = history.last(ref, "up")
                if (
                    grown is not None
                    and (now - grown).total_seconds() < policy.reclaim_cooldown_seconds
                ):
                    bad(
                        "flapping",
                        f"{ref.name}: shrunk ({d.reason.value}) "
                        f"{(now - grown).total_seconds():.0f}s after we grew it",
                    )

    for name in set(snapshot.queues) | {j.queue for j in snapshot.jobs}:
        state = snapshot.queues.get(name)
        qjobs = [j for j in snapshot.jobs if j.queue == name]
        changes = {
            j.ref: decided[j.ref].target - j.replicas
            for j in qjobs  # type: ignore
            if j.ref in decided and decided[j.ref].changed
        }
        if not _usable(state, snapshot):
            if changes:
                bad("hold", f"queue {name}: data unusable but {len(changes)} job(s) changed")
            continue
        assert state is not None and state.free_gpus is not None
        gangs = sorted(
            (g for g in snapshot.pending if g.queue == name),
            key=lambda g: (-g.priority, g.created, g.ref),
        )
        own = {g.owner.name for g in gangs if g.owner} | {g.ref.name for g in gangs}
        counted = [j for j in qjobs if j.ref.name not in own]
        inflight = sum(j.inflight_workers * j.gpus_per_worker for j in counted)
        inflight += sum(
            u.inflight_gpus for u in snapshot.unmanaged if u.queue == name and u.ref.name not in own
        )
        releasing = sum(j.releasing_workers * j.gpus_per_worker for j in counted)
        gpw = {j.ref: j.gpus_per_worker for j in qjobs}
        growth = sum(n * gpw[r] for r, n in changes.items() if n > 0)
        shrink = -sum(n * gpw[r] for r, n in changes.items() if n < 0)
        idle = math.floor(state.free_gpus + 1e-9) - inflight
        if growth > max(0, idle + shrink - policy.reserve_gpus_per_queue):
            bad(
                "overcommit",
                f"queue {name}: grew {growth} GPU(s) with {idle} idle "
                f"(free {state.free_gpus:g} - in flight {inflight}), {shrink} "
                f"given back, reserve {policy.reserve_gpus_per_queue}",
            )
        verdicts = {g.ref: g.reason for g in result.gangs}
        served = sum(
            g.gpus for g in gangs if verdicts.get(g.ref) in (Reason.GANG_FITS, Reason.GANG_COVERED)
        )
        if served + growth > 0 and served + growth > idle + releasing + shrink:
            bad(
                "overcommit",
                f"queue {name}: served {served} + grew {growth} > idle {idle} + "
                f"releasing {releasing} + given back {shrink}",
            )
        if growth == 0:
            continue
        # gangs first: with growth, every gang left uncovered must be beyond all capacity
        # free, being released and reclaimable (counted generously: any job of no higher
        # priority out of its reclaim cooldown, down to its min)
        served = 0
        for g in gangs:
            reason = verdicts.get(g.ref)
            if reason in (Reason.GANG_FITS, Reason.GANG_COVERED):
                served += g.gpus
                continue
            if reason is not Reason.GANG_UNCOVERABLE:
                bad(
                    "gangs-first",
                    f"queue {name}: gang {g.ref.name} is {reason} while {growth} GPU(s) grow",
                )
                continue
            reclaimable = 0
            for j in qjobs:
                last = j.last_scale_time
                cool = (
                    last is not None
                    and (now - last).total_seconds() < policy.reclaim_cooldown_seconds
                )
                lower = j.priority <= g.priority or policy.reclaim_from_higher_priority
                # a job this plan resized starts its reclaim cooldown now: where a
                # reclaim is weighed (rule 3b) no later gang of the plan takes from it
                cool = cool or (j.ref in changes and policy.reclaim_cooldown_seconds > 0)
                if lower and not cool and j.ref.name not in own:
                    reclaimable += (j.replicas - j.min_replicas) * j.gpus_per_worker
            if g.gpus <= idle + releasing + reclaimable - served:
                bad(
                    "gangs-first",
                    f"queue {name}: gang {g.ref.name} ({g.gpus} GPUs) left "
                    f"uncovered with idle {idle}, releasing {releasing}, "
                    f"reclaimable {reclaimable}, served {served}, while "
                    f"{growth} GPU(s) grow",
                )
    return out


def applied_snapshot(snapshot: ClusterSnapshot, result: Plan, now: datetime) -> ClusterSnapshot:
    targets = {d.ref: d.target for d in result.actions}
    jobs = tuple(
        replace(j, replicas=targets[j.ref], last_scale_time=now) if j.ref in targets else j
        for j in snapshot.jobs
    )
    return replace(snapshot, jobs=jobs)


def _plan_key(result: Plan) -> tuple:
    return (
        tuple((d.ref.name, d.current, d.target, d.reason.value) for d in result.decisions),
        tuple((g.ref.name, g.reason.value, g.victims) for g in result.gangs),
    )


# ---- the driver -------------------------------------------------------------------------


def policy_for(seed: int) -> Settings:
    """A policy per seed, so a range of seeds covers the policy knobs too."""

    r = random.Random(f"policy-{seed}")
    return Settings(
        cooldown_seconds=r.choice([300, 600, 900]),
        reclaim_cooldown_seconds=r.choice([0, 60, 120]),
        max_gang_wait_seconds=r.choice([600, 1800]),
        unplaced_timeout_seconds=r.choice([180, 300]),
        growth_policy=r.choice(["fill", "fill", "fair"]),
        min_step_workers=r.choice([1, 1, 2]),
        reserve_gpus_per_queue=r.choice([0, 0, 2]),
        victim_order=r.choice(["most-workers", "least-work-lost"]),
        growth_payoff_factor=r.choice([0.0, 0.0, 1.0]),
        reclaim_from_higher_priority=r.choice([True, True, False]),
    )


def run_soak(
    cycles: int,
    seed: int,
    *,
    mode: str = "model",
    policy: Settings | None = None,
    check_every: int = 1,
    planner: Callable[[ClusterSnapshot, PlannerPolicy, datetime], Plan] = plan,
    declared: bool = False,
    history: bool = False,
    crowded: bool = False,
) -> SoakResult:
    """`planner` is for testing the checker with a broken planner; the soak uses plan()."""
    if mode not in ("model", "parse"):
        raise ValueError(f"mode must be model or parse, not {mode!r}")
    policy = policy or policy_for(seed)
    planner_policy = policy.planner_policy()
    rng = random.Random(seed)
    world = World(rng, declared, history, crowded)
    history = History()
    violations: list[Violation] = []
    digest = hashlib.sha256()
    actions: Counter = Counter()
    holds = served = refused = 0
    started = time.perf_counter()
    for cycle in range(cycles):
        now = T0 + timedelta(seconds=cycle * TICK)
        world.evolve(now)
        world.schedule(now)
        free, problem, message = world.free_gpus()
        snapshot = world.snapshot(free, problem, message)
        result = planner(snapshot, planner_policy, now)
        if mode == "parse":
            parsed = build_snapshot(
                world.raw(), free, policy.read_options(), problem=problem, message=message
            )
            from_raw = planner(parsed, planner_policy, now)
            if _plan_key(from_raw) != _plan_key(result):
                diff = set(_plan_key(from_raw)[0]) ^ set(_plan_key(result)[0])
                diff |= set(_plan_key(from_raw)[1]) ^ set(_plan_key(result)[1])
                violations.append(
                    Violation(
                        cycle,
                        "parse",
                        "the plan of the parsed cluster differs from the "
                        f"model-level plan: {sorted(diff, key=repr)[:4]}",
                    )
                )
            snapshot, result = parsed, from_raw
        if cycle % check_every == 0:
            violations += check_plan(snapshot, result, policy, now, history, cycle)
            again = planner(applied_snapshot(snapshot, result, now), planner_policy, now)
            if again.actions:
                violations.append(
                    Violation(
                        cycle,
                        "idempotent",
                        ", ".join(f"{d.ref.name} {d.current}->{d.target}" for d in again.actions),
                    )
                )
            if cycle % 10 == 0:
                shuffled = replace(
                    snapshot,
                    jobs=tuple(reversed(snapshot.jobs)),
                    pending=tuple(reversed(snapshot.pending)),
                )
                if planner(shuffled, planner_policy, now) != result:
                    violations.append(Violation(cycle, "deterministic", "order changed plan"))
        digest.update(repr(_plan_key(result)).encode())
        applied = world.apply(result, now)
        history.record(applied, now)
        for d in applied:
            actions[d.reason.value] += 1
        holds += sum(1 for q in result.queues.values() if q.reason is not None)
        served += sum(
            1 for g in result.gangs if g.reason in (Reason.GANG_FITS, Reason.GANG_COVERED)
        )
        refused += sum(1 for g in result.gangs if g.reason is Reason.GANG_RECLAIM_UNPAID)
    return SoakResult(
        seed,
        mode,
        cycles,
        violations,
        time.perf_counter() - started,
        digest.hexdigest()[:16],
        actions,
        holds,
        served,
        refused,
    )


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-", 1)
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", help="a range a-b or a list a,b,c (overrides --seed)")
    parser.add_argument("--mode", choices=("model", "parse"), default="model")
    parser.add_argument("--show", type=int, default=5, help="violations to print per seed")
    parser.add_argument(
        "--declared",
        action="store_true",
        help="every job declares its run (expected-runtime-seconds, 5 min to 3 h): the "
        "planner weighs its reclaims (rule 3b, reclaim_payoff_factor)",
    )
    parser.add_argument(
        "--crowded",
        action="store_true",
        help=f"up to {CROWDED_JOBS} jobs, mostly of 1-GPU workers, arriving three times as "
        "often: a queue runs 30 jobs and more (rule 3b's busy queues)",
    )
    parser.add_argument(
        "--history",
        action="store_true",
        help="jobs that finished stay listed with their start and completion: the planner "
        "weighs swaps by the queue's run times where nothing is declared (rule 3b)",
    )
    args = parser.parse_args(argv)
    total = 0
    seeds = _seeds(args.seeds) if args.seeds else [args.seed]
    for seed in seeds:
        res = run_soak(
            args.cycles,
            seed,
            mode=args.mode,
            declared=args.declared,
            history=args.history,
            crowded=args.crowded,
        )
        total += len(res.violations)
        kinds = ", ".join(f"{k}={n}" for k, n in sorted(res.by_kind.items())) or "-"
        acts = ", ".join(f"{k}={n}" for k, n in sorted(res.actions.items()))
        print(
            f"seed={seed} mode={res.mode} cycles={res.cycles} violations={len(res.violations)}"
            f" ({kinds}) runtime={res.seconds:.1f}s digest={res.digest} actions: {acts};"
            f" gangs served={res.gangs_served} refused={res.gangs_refused}"
            f" queue-holds={res.holds}"
        )
        for v in res.violations[: args.show]:
            print(f"  cycle {v.cycle}: {v.kind}: {v.detail}")
    print(f"total violations: {total} over {len(seeds)} seed(s)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
