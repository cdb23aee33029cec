"""The simulated cluster: queues, jobs, and a Volcano-like scheduler, driven by an event
loop in simulated seconds.

Volcano's behaviour as modelled (see docs/simulator.md):
- a queue's room is what the daemon's headroom function (`autoscaler.plan.headroom`) says the
  real scheduler binds under the queue plugin in use, from the same figures (allocated,
  request, inqueue, weight, capability, the cluster's GPUs), bounded by the GPUs idle in
  the cluster. `capacity` (the default): each queue's share is its capability (a hard
  partition: real capacity - allocated - inqueue); `proportion`: each queue's share is
  its weight, and a queue may use another's idle GPUs up to its water-filled share
  (no reclaim action: what it borrowed is given back only as its pods finish or are
  resized away). Room is computed once per scheduling pass (Volcano's session);
- a job is admitted when its gang (min workers) fits in its queue's room; waiting gangs
  are tried FIFO per queue and a smaller gang behind one that does not fit may go first
  (backfill);
- gangs are served before extra pods of running jobs (the gang plugin orders not-ready
  jobs first); extra pods then go one at a time to the running job with the fewest
  allocated GPUs (drf job order), ties by submit time;
- optionally (`preempt=True`, Volcano's preempt action with the gang plugin) a gang that
  does not fit evicts elastic pods (beyond min) of running jobs of its queue, the job
  holding the most GPUs first, only when that makes the gang fit. Evicted pods stay
  pending and come back when GPUs free up;
- pods land the instant GPUs are free; removed workers free their GPUs at once;
- optionally (`tree`, the capacity plugin with enableHierarchy) queues have parents: a
  pod is bound only while its leaf AND every ancestor stay within their capability
  (checkQueueAllocatableHierarchically); only leaves run jobs, a leaf's capability is
  inherited from its nearest ancestor and its `deserved` is its spec.deserved (what the
  daemon's reclaim across siblings reads). No reclaim action: what a sibling holds is
  given back only as its pods end or are resized away.
Every change of a running job's worker count restarts it: progress pauses for the job's
restart cost (its model's, or the run's flat one), whatever policy made the change
(several changes at one instant are one restart). Job priority plays no part here.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from autoscaler.core.model import NodeGpus, Plugin, VolcanoQueue, VolcanoView
from autoscaler.plan.headroom import plugin_limit

from .nodes import Nodes, PoolSpec
from .workload import JobSpec

EPS = 1e-9
_ROOM_EPS = 1e-6  # water-filled shares are fractional: 2.9999999 GPUs of room is 3
PLUGINS = (Plugin.CAPACITY, Plugin.PROPORTION)  # the Volcano queue plugins modelled


@dataclass(frozen=True)
class QueueTree:
    """Parent queues over the simulated ones (the capacity plugin's tree): `parents`
    maps a queue (leaf or parent) to its parent, `capability` each parent to its GPUs.
    A queue not in `parents` is top-level; the cluster's GPUs are the top-level queues'
    (a parent's capability, a top-level leaf's deserved)."""

    parents: Mapping[str, str]
    capability: Mapping[str, int]

    def ancestors(self, queue: str) -> list[str]:
        """Its parents, nearest first."""
        out: list[str] = []
        up = self.parents.get(queue)
        while up is not None and up not in out:
            out.append(up)
            up = self.parents.get(up)
        return out

    def limit(self, queue: str) -> int | None:
        """The least capability over its ancestors (what it inherits and is bounded
        by); None for a top-level queue."""
        caps = [self.capability[a] for a in self.ancestors(queue)]
        return min(caps) if caps else None

    def gpus(self, deserved: Mapping[str, int]) -> int:
        top = [p for p in self.capability if p not in self.parents]
        return sum(self.capability[p] for p in top) + sum(
            g for q, g in deserved.items() if q not in self.parents
        )

    def under(self, parent: str, leaves: Iterable[str]) -> list[str]:
        """The leaves below `parent`."""
        return [q for q in leaves if parent in self.ancestors(q)]

    def exported(
        self,
        allocated: Mapping[str, int],
        request: Mapping[str, int],
        deserved: Mapping[str, int],
    ) -> dict[str, VolcanoQueue]:
        """The parent queues as Volcano exports them: allocated and request summed over
        their leaves, their capability (the least over them and their ancestors)."""
        out = {}
        for p in sorted(self.capability):
            under = self.under(p, deserved)
            cap = float(min(self.capability[p], self.limit(p) or math.inf))
            out[p] = VolcanoQueue(
                p,
                allocated=float(sum(allocated[q] for q in under)),
                request=float(sum(request[q] for q in under)),
                capability=cap,
                real_capacity=cap,
                spec_deserved=float(sum(deserved[q] for q in under)),
                parent=self.parents.get(p, ""),
            )
        return out

    def check(self, leaves: Mapping[str, int]) -> None:
        """A tree the scheduler would refuse (a leaf that is a parent, an unknown
        parent, a cycle) is a ValueError naming the queue."""
        for queue, parent in self.parents.items():
            if parent not in self.capability:
                raise ValueError(f"queue {queue}: parent {parent!r} has no capability")
            if queue in self.ancestors(queue):
                raise ValueError(f"queue {queue}: its parents make a cycle")
        for parent in self.capability:
            if parent in leaves:
                raise ValueError(f"queue {parent}: a parent cannot run jobs")


@dataclass(slots=True)
class SimJob:
    """A job's mutable state in one simulation run."""

    spec: JobSpec
    min_workers: int
    max_workers: int
    replicas: int  # the job's spec: workers wanted
    gang: int  # workers needed to admit it (PodGroup minMember)
    index: int  # submit order, the FIFO tie-break
    remaining: float = 0.0  # seconds of work at requested size still to do
    active: int = 0  # workers placed and running
    submitted: bool = False
    admitted: bool = False
    done: bool = False
    first_start: float | None = None
    finish: float | None = None
    paused_until: float = 0.0
    restarts: int = 0
    last_restart: float = -math.inf
    last_scale_time: float | None = None  # set by a controller's resize (the annotation)
    gpu_seconds: float = 0.0
    last_update: float = 0.0
    changed_at: float = -math.inf  # last instant its worker count changed
    nodes: list[str] = field(default_factory=list)  # with node pools: where each worker runs

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def queue(self) -> str:
        return self.spec.queue

    @property
    def gpw(self) -> int:
        return self.spec.gpus_per_worker

    @property
    def running(self) -> bool:
        return self.admitted and not self.done

    @property
    def waiting(self) -> bool:
        return self.submitted and not self.admitted

    def rate(self) -> float:
        return self.spec.rate(self.active)

    def eta(self, now: float) -> float:
        r = self.rate()
        if r <= 0:
            return math.inf
        return max(now, self.paused_until) + self.remaining / r


class Controller(Protocol):
    """A scaling policy acting on the cluster between scheduler steps."""

    name: str

    def setup(self, job: SimJob) -> None:
        """Set the job's initial replicas, range and gang before it is submitted."""

    def next_time(self) -> float:
        """When this controller wants to run next (math.inf: never)."""

    def notify(self, now: float, cluster: Cluster, event: str) -> None:
        """A job was submitted or finished at `now`, or gangs were admitted (event:
        "submit" | "finish" | "start"; for "start", `cluster.started` holds their
        queues)."""

    def cycle(self, now: float, cluster: Cluster) -> None:
        """Run one cycle: may change replicas of jobs through `cluster.resize`."""

    def close(self) -> None:
        """Release what the controller holds; called once when the run ends."""


@dataclass(slots=True)
class Sample:
    time: float
    allocated: int  # GPUs allocated cluster-wide right after this instant
    demand: int  # GPUs of the physical bound right after this instant (capped per queue)
    # GPUs idle while wanted right after this instant: what the scheduler would bind for
    # a queue now (its room, within the cluster's idle GPUs) that a job of that queue
    # could use (a waiting job up to its max, a running one from its workers to its max)
    idle_wanted: int = 0


@dataclass
class Cluster:
    """Queues, jobs and the scheduler. `deserved` maps queue -> GPUs: under the capacity
    plugin the queue's capability (and real capacity: no queue has a guarantee), under
    proportion its weight (so with every queue busy the shares are the same split)."""

    deserved: dict[str, int]
    jobs: list[SimJob]
    restart_penalty: float
    preempt: bool = False
    plugin: Plugin = Plugin.CAPACITY
    now: float = 0.0
    allocated: dict[str, int] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    queue_gpu_seconds: dict[str, float] = field(default_factory=dict)
    preemptions: int = 0
    cycles: int = 0  # controller cycles run
    # queues where a gang was admitted (a job started) since the controllers were told
    started: set[str] = field(default_factory=set)
    unbound_asks: int = 0  # workers a resize asked for, given up before they were bound
    # node pools (sim/nodes.py): pods bound where the fit filters admit them; None: every
    # GPU is interchangeable (no nodes)
    pool: Nodes | None = None
    planner_sees_shapes: bool = True  # False: nodes shown as GPU counts (the old rule)
    # parent queues over `deserved`'s (capacity only); None: flat, as before
    tree: QueueTree | None = None

    def __post_init__(self) -> None:
        if self.plugin not in PLUGINS:
            raise ValueError(f"no Volcano model for the {self.plugin} plugin")
        if self.tree is not None:
            if self.plugin is not Plugin.CAPACITY:
                raise ValueError(f"the {self.plugin} plugin has no queue tree")
            self.tree.check(self.deserved)
        self.allocated = {q: 0 for q in self.deserved}
        self.queue_gpu_seconds = {q: 0.0 for q in self.deserved}
        self._by_queue: dict[str, list[SimJob]] = {q: [] for q in self.deserved}
        self._live: list[SimJob] = []  # submitted, not done
        self.done_by_queue: dict[str, list[SimJob]] = {q: [] for q in self.deserved}
        # queues whose jobs or free GPUs changed since the scheduler last looked: the
        # scheduler is a function of a queue's state, so a clean queue needs no pass
        self._dirty: set[str] = set()
        # a scheduling pass (Volcano's session): each queue's ceiling on allocated GPUs,
        # fixed when the pass opens, as Volcano computes deserved at session open
        self._ceiling: dict[str, float] = {}
        # kept as jobs change, not summed per look: the view is read on every pass
        self._request = {q: 0 for q in self.deserved}  # GPUs of admitted jobs' pods
        self._held = 0  # GPUs allocated cluster-wide
        self._free_all: tuple[tuple[tuple[int, ...], ...], dict[str, int]] | None = None

    # ---- state queries -----------------------------------------------------------------

    def volcano_queue(self, queue: str) -> VolcanoQueue:
        """The queue as Volcano's metrics and Queue object would show it (GPUs).
        request: every pod that exists, bound or not: an admitted job has a pod per spec
        replica; a job waiting for its gang has none (its PodGroup is Pending, so the
        operator has created no pods). inqueue: 0, a gang is bound the moment it is
        admitted."""
        allocated = self.allocated[queue]
        request = self._request[queue]
        share = float(self.deserved[queue])
        if self.tree is not None and queue in self.tree.parents:
            # a leaf under a parent: capability inherited, deserved its own (its share
            # of the parent, what reclaim between siblings reads)
            cap = float(self.tree.limit(queue) or 0)
            return VolcanoQueue(
                queue,
                allocated=float(allocated),
                request=float(request),
                capability=cap,
                real_capacity=cap,
                spec_deserved=share,
                parent=self.tree.parents[queue],
            )
        if self.plugin is Plugin.CAPACITY:
            return VolcanoQueue(
                queue,
                allocated=float(allocated),
                request=float(request),
                capability=share,
                real_capacity=share,
            )
        return VolcanoQueue(queue, allocated=float(allocated), request=float(request), weight=share)

    def view(self) -> VolcanoView:
        """What the daemon would read: the plugin, every queue's figures and the cluster.
        Under capacity no nodes (the queues partition the cluster: its idle GPUs never
        bind); under proportion one node holding the cluster's GPUs, so the cluster's
        idle GPUs bound growth (queues borrow from each other) and no fragmentation."""
        queues = {q: self.volcano_queue(q) for q in sorted(self.deserved)}
        if self.tree is not None:
            queues.update(self.tree.exported(self.allocated, self._request, self.deserved))
        nodes = None
        if self.pool is not None:  # node pools: the nodes as the daemon reads them
            nodes = self.pool.view(self.planner_sees_shapes)
        elif self.plugin is Plugin.PROPORTION:
            nodes = (NodeGpus("sim", self.capacity, self._held),)
        return VolcanoView(self.plugin, queues, nodes, cluster_gpus=self.capacity)

    def _above(self, queue: str) -> int:
        """Whole GPUs every ancestor of the queue may still take (capability less what
        its leaves hold); the cluster's GPUs without a tree or an ancestor."""
        room = self.capacity
        if self.tree is not None:
            for a in self.tree.ancestors(queue):
                held = sum(self.allocated[q] for q in self.tree.under(a, self.deserved))
                room = min(room, self.tree.capability[a] - held)
        return room

    def idle(self) -> int:
        """GPUs no pod holds, cluster-wide."""
        return self.capacity - self._held

    def free(self, queue: str) -> int:
        """GPUs of this queue's pods the scheduler would bind now: its room under the
        plugin (`headroom.plugin_limit`, as the daemon computes it) in whole GPUs,
        bounded by the cluster's idle GPUs."""
        return self._free(queue, self._ceiling_of(queue, self.view()))

    def free_all(self) -> dict[str, int]:
        """`free` of every queue, from one view (the same until a pod or spec changes:
        an HPA reads it every 15 s)."""
        key = (tuple(self.allocated.values()), tuple(self._request.values()))
        if self._free_all is None or self._free_all[0] != key:
            view = self.view()
            free = {q: self._free(q, self._ceiling_of(q, view)) for q in self.deserved}
            self._free_all = (key, free)
        return dict(self._free_all[1])

    def _ceiling_of(self, queue: str, view: VolcanoView) -> float:
        """Allocated GPUs the plugin lets the queue reach: its room plus what it holds.
        `wanted` empty: the scheduler sees only the pods that exist."""
        limit = plugin_limit(queue, view, {})
        if limit is None:  # every figure is known here
            raise AssertionError(f"queue {queue}: no headroom under {self.plugin}")
        return limit.gpus + view.queues[queue].allocated

    def _free(self, queue: str, ceiling: float) -> int:
        room = math.floor(ceiling - self.allocated[queue] + _ROOM_EPS)
        if self.tree is not None:  # and within every ancestor, as allocated now
            room = min(room, self._above(queue))
        return max(0, min(room, self.idle()))

    def live(self, queue: str | None = None) -> list[SimJob]:
        if queue is None:
            return self._live
        if self.tree is not None and queue in self.tree.capability:  # a parent: its leaves'
            return [j for q in self.tree.under(queue, self.deserved) for j in self._by_queue[q]]
        return self._by_queue[queue]

    @property
    def capacity(self) -> int:
        if self.tree is not None:
            return self.tree.gpus(self.deserved)
        return sum(self.deserved.values())

    # ---- changes -----------------------------------------------------------------------

    def submit(self, job: SimJob) -> None:
        job.submitted = True
        job.remaining = job.spec.work
        job.last_update = self.now
        self._live.append(job)
        self._by_queue[job.queue].append(job)
        self._dirty.add(job.queue)

    def resize(self, job: SimJob, replicas: int) -> None:
        """A controller sets the job's spec (and the last-resize annotation). Workers
        above the new spec go at once; new ones land when the scheduler places them."""

        replicas = max(job.min_workers, min(job.max_workers, replicas))
        if replicas == job.replicas:
            return
        # workers asked for and never bound, now given up (e.g. the planner's trim)
        self.unbound_asks += max(0, job.replicas - max(replicas, job.active))
        self._dirty.add(job.queue)
        if job.admitted:  # its pods exist: the queue's request follows the spec
            self._request[job.queue] += (replicas - job.replicas) * job.gpw
        job.replicas = replicas
        job.last_scale_time = self.now
        if job.active > replicas:
            self._set_active(job, replicas)

    def _bind(self, job: SimJob, workers: int = 1) -> bool:
        """With node pools, bind `workers` more pods of the job (all or none); True
        without pools. The caller then raises `active`."""
        if self.pool is None:
            return True
        names = self.pool.place_all(job.spec.worker_shape, workers)
        if names is None:
            return False
        job.nodes.extend(names)
        return True

    def _unbind(self, job: SimJob, workers: int) -> None:
        """The highest-indexed `workers` pods go (as the operators delete them)."""
        if self.pool is None:
            return
        for _ in range(min(workers, len(job.nodes))):
            self.pool.release(job.nodes.pop(), job.spec.worker_shape)

    def _set_active(self, job: SimJob, workers: int) -> None:
        if workers == job.active:
            return
        if workers < job.active:
            self._unbind(job, job.active - workers)
        self.allocated[job.queue] += (workers - job.active) * job.gpw
        self._held += (workers - job.active) * job.gpw
        job.active = workers
        now = self.now
        if job.first_start is None:
            job.first_start = now
        elif job.first_start < now and job.last_restart < now:
            # the job was running before this instant: torchrun restarts the worker group
            job.restarts += 1
            job.last_restart = now
            cost = job.spec.restart_cost
            job.paused_until = now + (self.restart_penalty if cost is None else cost)
        job.changed_at = now

    def advance(self, t: float) -> None:
        """Integrate progress and GPU-time of every running job up to `t`."""

        dt_all = t - self.now
        if dt_all < 0:
            raise AssertionError(f"time went backwards: {self.now} -> {t}")
        if dt_all == 0:
            return
        for job in self._live:
            if not job.admitted:
                continue
            start = max(job.last_update, job.paused_until)
            if t > start:
                job.remaining -= (t - start) * job.rate()
            job.gpu_seconds += (t - job.last_update) * job.active * job.gpw
            job.last_update = t
        for q, a in self.allocated.items():
            self.queue_gpu_seconds[q] += a * dt_all
        self.now = t

    def finish_due(self) -> list[SimJob]:
        done = []
        for job in self._live:
            if job.admitted and job.remaining <= 1e-6 * max(1.0, job.spec.work):
                done.append(job)
        for job in done:
            self._set_active_no_restart(job, 0)
            job.remaining = 0.0
            job.done = True
            job.finish = self.now
            self._live.remove(job)
            self._request[job.queue] -= job.replicas * job.gpw
            self._by_queue[job.queue].remove(job)
            self.done_by_queue[job.queue].append(job)
            self._dirty.add(job.queue)
        return done

    def _set_active_no_restart(self, job: SimJob, workers: int) -> None:
        self._unbind(job, job.active - workers)
        self.allocated[job.queue] += (workers - job.active) * job.gpw
        self._held += (workers - job.active) * job.gpw
        job.active = workers

    def next_finish(self) -> float:
        best = math.inf
        for job in self._live:
            if job.admitted:
                best = min(best, job.eta(self.now))
        return best

    # ---- the scheduler -------------------------------------------------------------------

    def schedule(self) -> None:
        """One scheduling pass over the queues that changed (under proportion every
        queue with jobs: one queue's request moves the others' shares). Each queue's
        room is fixed when the pass opens; waiting gangs of every queue are served
        before extra pods of any, queues in the order of what they hold per share."""
        if not self._dirty:
            return
        if self.plugin is Plugin.PROPORTION or self.tree is not None:
            # (under a tree, a leaf's pods ending make room for its siblings too)
            queues = [q for q in self.deserved if self._by_queue[q]]
        else:
            queues = [q for q in self._dirty if self._by_queue[q]]
        self._dirty.clear()
        if not queues:
            return
        view = self.view()
        self._ceiling = {q: self._ceiling_of(q, view) for q in queues}
        order = sorted(queues, key=lambda q: (self.allocated[q] / self.deserved[q], q))
        try:
            for queue in order:
                self._admit_gangs(queue, self._by_queue[queue])
            for queue in order:
                self._place_pods(queue, self._by_queue[queue])
        finally:
            self._ceiling = {}

    def _admit_gangs(self, queue: str, jobs: list[SimJob]) -> None:
        waiting = sorted((j for j in jobs if not j.admitted), key=lambda j: j.index)
        if not waiting:
            return
        ceiling = self._ceiling[queue]
        spare = 0  # GPUs preemption could still free in this queue
        if self.preempt:
            spare = sum((j.active - j.min_workers) * j.gpw for j in jobs if j.admitted)
        free = self._free(queue, ceiling)
        for job in waiting:
            need = job.gang * job.gpw
            if need > free and 0 < need - free <= spare:
                spare -= self._preempt_for(queue, jobs, need - free)
                free = self._free(queue, ceiling)
            if need <= free and self._bind(job, job.gang):  # room, and nodes that admit it
                free -= need  # out of both the queue's room and the cluster's idle GPUs
                job.admitted = True
                self.started.add(queue)
                self._request[queue] += job.replicas * job.gpw
                job.last_update = self.now
                job.paused_until = self.now
                self._set_active(job, job.gang)

    def _place_pods(self, queue: str, jobs: list[SimJob]) -> None:
        """Extra pods, one at a time to the job holding the fewest GPUs (drf)."""
        heap = [
            (j.active * j.gpw, j.index, j) for j in jobs if j.admitted and j.active < j.replicas
        ]
        if not heap:
            return
        heapq.heapify(heap)
        placed: dict[int, int] = {}
        free = self._free(queue, self._ceiling[queue])
        while heap:
            held, idx, job = heapq.heappop(heap)
            if job.gpw > free or not self._bind(job):
                continue  # no room, or no node admits one more of its pods
            free -= job.gpw
            placed[idx] = placed.get(idx, 0) + 1
            if job.active + placed[idx] < job.replicas:
                heapq.heappush(heap, (held + job.gpw, idx, job))
        for job in jobs:
            extra = placed.get(job.index)
            if extra:
                self._set_active(job, job.active + extra)

    def _preempt_for(self, queue: str, jobs: list[SimJob], shortfall: int) -> int:
        """Evict elastic pods for a gang short of `shortfall` GPUs; the GPUs freed."""

        victims = [j for j in jobs if j.admitted and j.active > j.min_workers]
        if sum((j.active - j.min_workers) * j.gpw for j in victims) < shortfall:
            return 0
        freed = 0
        take: dict[int, int] = {}
        held = {j.index: j.active for j in victims}
        by_index = {j.index: j for j in victims}
        while shortfall > 0:
            idx = max(
                (i for i in held if held[i] > by_index[i].min_workers),
                key=lambda i: (held[i] * by_index[i].gpw, i),
            )
            held[idx] -= 1
            take[idx] = take.get(idx, 0) + 1
            shortfall -= by_index[idx].gpw
            freed += by_index[idx].gpw
        for idx, n in take.items():
            job = by_index[idx]
            self.preemptions += n
            self._set_active(job, job.active - n)
        return freed

    def sample(self) -> None:
        demand = 0
        wanted: dict[str, int] = {}
        for queue, cap in self.deserved.items():
            if self.tree is not None:
                cap = queue_limit(self.plugin, self.deserved, queue, self.tree)
            jobs = self._by_queue[queue]
            want = sum(j.max_workers * j.gpw for j in jobs)
            # proportion: a queue may hold more than its weighted share (borrowing)
            demand += want if self.plugin is Plugin.PROPORTION else min(cap, want)
            wanted[queue] = want - sum(j.active * j.gpw for j in jobs)
        demand = min(demand, self.capacity)
        alloc = self._held
        s = Sample(self.now, alloc, demand, self._idle_wanted(wanted))
        if self.samples and self.samples[-1].time == self.now:
            self.samples[-1] = s
        else:
            self.samples.append(s)

    def _idle_wanted(self, wanted: dict[str, int]) -> int:
        """Idle GPUs some job could use: per queue the least of its room (what the
        scheduler would bind for it now) and what its jobs could still take, summed and
        cut to the cluster's idle GPUs (under proportion queues share them)."""
        if not any(w > 0 for w in wanted.values()) or self.idle() <= 0:
            return 0
        free = self.free_all()
        usable = sum(min(free[q], w) for q, w in wanted.items() if w > 0)
        return min(usable, self.idle())


def queue_limit(
    plugin: Plugin, deserved: dict[str, int], queue: str, tree: QueueTree | None = None
) -> int:
    """The most GPUs a queue's pods can ever hold: its capability under capacity (a
    partition; under a parent, the least capability over its ancestors), the whole
    cluster under proportion (no capability: a queue may hold every idle GPU while the
    others ask for nothing)."""
    if plugin is Plugin.PROPORTION:
        return sum(deserved.values())
    if tree is not None:
        inherited = tree.limit(queue)
        if inherited is not None:
            return inherited
    return deserved[queue]


def split_capacity(gpus: int, jobs: Sequence[JobSpec]) -> dict[str, int]:
    """Deserved GPUs per queue: proportional to each queue's requested GPU-time within
    the submission window (a job counts gpus x min(duration, window), so one month-long
    job does not buy its queue most of the cluster), every queue at least its largest
    min gang, largest remainder rounding. One queue gets everything."""

    queues = sorted({j.queue for j in jobs})
    if len(queues) == 1:
        return {queues[0]: gpus}
    weight = {q: 0.0 for q in queues}
    floor_ = {q: 1 for q in queues}
    window = max(1.0, max(j.submit for j in jobs) - min(j.submit for j in jobs))
    for j in jobs:
        weight[j.queue] += min(j.work, window) * j.requested_gpus
        floor_[j.queue] = max(floor_[j.queue], j.min_workers * j.gpus_per_worker)
    if sum(floor_.values()) > gpus:
        raise ValueError(
            f"{gpus} GPUs cannot hold the smallest gang of each of "
            f"{len(queues)} queues ({sum(floor_.values())} needed): use more "
            "--gpus or fewer --queues"
        )
    total = sum(weight.values()) or 1.0
    share = {q: weight[q] / total * gpus for q in queues}
    out = {q: max(floor_[q], math.floor(share[q])) for q in queues}
    # take back from the largest shares, or hand out by largest remainder, to sum to gpus
    while sum(out.values()) > gpus:
        q = max((q for q in queues if out[q] > floor_[q]), key=lambda q: (out[q], q))
        out[q] -= 1
    order = sorted(queues, key=lambda q: (-(share[q] - math.floor(share[q])), q))
    i = 0
    while sum(out.values()) < gpus:
        out[order[i % len(order)]] += 1
        i += 1
    return out


@dataclass(frozen=True)
class RunResult:
    policy: str
    jobs: tuple[SimJob, ...]
    deserved: dict[str, int]
    samples: tuple[Sample, ...]
    queue_gpu_seconds: dict[str, float]
    end: float
    cycles: int
    preemptions: int
    plugin: Plugin = Plugin.CAPACITY
    unbound_asks: int = 0
    tree: QueueTree | None = None

    @property
    def gpus(self) -> int:
        """The cluster's GPUs (the queues' deserved summed, or under a tree its top)."""
        return self.tree.gpus(self.deserved) if self.tree else sum(self.deserved.values())


def simulate(
    specs: Sequence[JobSpec],
    deserved: dict[str, int],
    controller: Controller,
    restart_penalty: float,
    preempt: bool = False,
    progress: Callable[[float, int], None] | None = None,
    horizon: float = math.inf,
    plugin: Plugin = Plugin.CAPACITY,
    pools: tuple[PoolSpec, ...] = (),
    planner_sees_shapes: bool = True,
    tree: QueueTree | None = None,
) -> RunResult:
    """Replay `specs` on the cluster under `controller`. Pure: same input, same result.
    `deserved`: each queue's GPUs (capability under `plugin` capacity, weight under
    proportion). A job's max is cut to what its queue can ever hold (`queue_limit`).
    `pools`: node pools every pod is bound on by the fit filters (none: no nodes);
    `planner_sees_shapes` False shows the planner the nodes as GPU counts and the jobs
    by their GPUs (the rule before node fit by shape). `tree`: parent queues over
    `deserved`'s (capacity only): each queue with a parent then inherits its capability
    and `deserved` is its spec.deserved."""

    jobs = []
    names: set[str] = set()
    for i, spec in enumerate(sorted(specs, key=lambda s: (s.submit, s.name))):
        if spec.name in names:  # controllers address jobs by name, as Kubernetes does
            raise ValueError(f"job {spec.name}: the name appears more than once in the trace")
        names.add(spec.name)
        if spec.queue not in deserved:
            raise ValueError(f"job {spec.name}: queue {spec.queue!r} has no capacity")
        job = SimJob(spec, spec.min_workers, spec.max_workers, spec.requested, spec.min_workers, i)
        controller.setup(job)
        most = queue_limit(plugin, deserved, spec.queue, tree)
        cap = most // spec.gpus_per_worker
        if job.gang > cap:
            raise ValueError(
                f"job {spec.name}: its gang of {job.gang} worker(s) can never "
                f"fit queue {spec.queue} ({most} GPUs)"
            )
        job.max_workers = min(job.max_workers, cap)
        job.replicas = min(job.replicas, job.max_workers)
        jobs.append(job)
    cluster = Cluster(dict(deserved), jobs, restart_penalty, preempt, plugin, tree=tree)
    if pools:
        cluster.pool = Nodes(pools)
        cluster.planner_sees_shapes = planner_sees_shapes
    if jobs:
        cluster.now = jobs[0].spec.submit
    try:
        _replay(jobs, cluster, controller, progress, horizon)
    finally:
        controller.close()
    return RunResult(
        controller.name,
        tuple(jobs),
        dict(deserved),
        tuple(cluster.samples),
        dict(cluster.queue_gpu_seconds),
        cluster.now,
        cluster.cycles,
        cluster.preemptions,
        plugin,
        cluster.unbound_asks,
        tree,
    )


def _replay(
    jobs: list[SimJob],
    cluster: Cluster,
    controller: Controller,
    progress: Callable[[float, int], None] | None,
    horizon: float,
) -> None:
    nxt = 0
    finished = 0
    while True:
        t_submit = jobs[nxt].spec.submit if nxt < len(jobs) else math.inf
        t_finish = cluster.next_finish()
        t_ctrl = controller.next_time()
        if t_submit == math.inf and not cluster.live():
            break
        t = min(t_submit, t_finish, t_ctrl)
        if t == math.inf or t > horizon:
            raise RuntimeError(
                "simulation stalled: live jobs can never run "
                f"({[j.name for j in cluster.live()][:5]})"
            )
        cluster.advance(max(t, cluster.now))
        for _ in cluster.finish_due():
            finished += 1
            controller.notify(cluster.now, cluster, "finish")
        while nxt < len(jobs) and jobs[nxt].spec.submit <= cluster.now:
            cluster.submit(jobs[nxt])
            nxt += 1
            controller.notify(cluster.now, cluster, "submit")
        cluster.schedule()
        if cluster.started:  # as the daemon's watch sees PodGroups bound
            controller.notify(cluster.now, cluster, "start")
            cluster.started.clear()
        if controller.next_time() <= cluster.now + EPS:
            controller.cycle(cluster.now, cluster)
            cluster.cycles += 1
            cluster.schedule()
            cluster.started.clear()  # gangs the cycle made room for: it planned them
        cluster.sample()
        if progress is not None:
            progress(cluster.now, finished)
