"""The memory of a plan for the next: kept decisions, the jobs' index, the listing and
the in-flight placement (`PlanMemory`), and how a job's decision is built.

A steady cycle hands the planner the same job objects as the last one and decides
the same of most of them: building 10k frozen decisions and indexes again each cycle
would be most of a steady plan. What is kept is only ever what planning anew gives
(each input of a decision is compared), so a plan is the same with or without it.
plan() takes the memory as a keyword (`planner.plan(..., memory=...)`); by default the
module's own `MEMORY`, one per process."""

from __future__ import annotations

from functools import cache
from typing import Any

from autoscaler.core.model import Action, Decision, ElasticJob
from autoscaler.core.reasons import Reason

from .fit import Replay
from .listing import _Unmanaged
from .work import _Job, _Jobs

_NO_MIN_AVAILABLE = (
    "no runPolicy.schedulingPolicy.minAvailable: training-operator sets the "
    "gang size to all replicas, so growing raises it (grown only with "
    "grow_without_min_available)",
)


def _notes(j: ElasticJob) -> tuple[str, ...]:
    """What the plan says beside a job's decision: a gang it would raise, what node fit
    does not judge of its workers, a queue it names but does not run in (the first two
    one shared tuple per combination: this runs for every job every cycle)."""
    shape = j.shape
    unmodelled = shape.unmodelled if shape is not None and j.replicas < j.max_replicas else ()
    notes = _notes_for(j.has_min_available, unmodelled)
    return (*notes, j.queue_warning) if j.queue_warning else notes


@cache
def _notes_for(has_min_available: bool, unmodelled: tuple[str, ...]) -> tuple[str, ...]:
    notes: tuple[str, ...] = () if has_min_available else _NO_MIN_AVAILABLE
    if unmodelled:
        notes += (
            f"node fit does not judge its workers' {', '.join(unmodelled)}: a worker "
            "granted may stay Pending, and is trimmed after unplaced_timeout_seconds",
        )
    return notes


# the decisions of the last plan by id() of their job: (job, target, reason, message,
# default restart cost, decision). Built anew by every plan from the one before: a
# steady cycle decides the same of most of its 10k jobs, and building each frozen
# Decision again took a fifth of a steady plan. The job object is kept, so an id cannot
# match a new job at an old address; every other input of a decision is compared.
_Seen = tuple[ElasticJob, int, Reason, str, float, Decision]
_Decided = tuple[dict[int, _Seen], dict[int, _Seen]]  # (the last plan's, this plan's)
# the nodes after the last plan's in-flight workers took their room, with what it was
# made of: (nodes, jobs and their workers, unmanaged jobs and their GPUs, the room);
# the objects are kept, so an identity test cannot match a new object at an old address
_InFlight = tuple[object, list[tuple[Any, int]], list[tuple[Any, int]], Any]


class PlanMemory:
    """What a plan leaves for the next (docs/design.md), so that a steady cycle is not
    planned from scratch: the index of its tuple of jobs (a steady cluster hands the
    planner the same tuple of the same jobs every cycle: the watch caches assemble a
    new one only when one changed, `_index`), its unmanaged jobs' listing (`_listing`),
    its decisions (`_Decided`), the nodes after in-flight workers took their room
    (`cluster._placed_in_flight`) and the last plan's Placer, whose log of calls the
    next plan's answers from while it asks the same of the same room (`fit.Replay`).
    What is kept is what planning anew gives: a plan made with an empty memory
    (`reset()`) is the same plan."""

    __slots__ = ("decided", "in_flight", "jobs", "placed", "unmanaged")

    jobs: _Jobs | None
    decided: dict[int, _Seen]
    unmanaged: _Unmanaged | None
    in_flight: _InFlight | None
    placed: Replay | None

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every plan before: the next plan is made from scratch."""
        self.jobs = None
        self.decided = {}
        self.unmanaged = None
        self.in_flight = None
        self.placed = None


# plan()'s memory when it is handed none: one per process, as one planner runs in it
MEMORY = PlanMemory()


def _decision(j: ElasticJob, w: _Job, default_cost: float) -> Decision:
    # positional, costs inline: this runs once per job whose decision changed
    return (Action if w.target != j.replicas else Decision)(
        j.ref,
        j.queue,
        j.replicas,
        w.target,
        w.reason or Reason.NO_IDLE_GPUS,
        w.message,
        j.min_replicas,
        j.max_replicas,
        j.gpus_per_worker,
        j.resource_version,
        _notes(j),
        j.workers_at,
        default_cost if j.restart_cost_seconds is None else j.restart_cost_seconds,
        j.restart_cost_source or "default",
        (j.queue_warning,) if j.queue_warning else (),
        j.other_gpus,
    )
