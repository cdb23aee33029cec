"""Volcano Jobs (`batch.volcano.sh/v1alpha1` Job).

A vcjob is elastic when its gang minimum `spec.minAvailable` is below the sum of
`spec.tasks[*].replicas`: Volcano starts it with minAvailable pods and places the rest
when there is room. Volcano's admission webhook sets a task's minAvailable to its replicas
when the Job is created without one (and spec.minAvailable to their sum), and refuses
replicas below it: the range is read from what the webhook left on the object
(tests/test_real_volcano_jobs.py runs the real webhook and controller). It has no max
field, so the user names one: the annotation
`<prefix>/max-replicas` on the Job. With one task its value is a number (`"8"`); with
several tasks it names the one elastic task (`"worker=8"`). Only that task is resized,
and a vcjob without the annotation is never resized.

The elastic task's minimum is what keeps the whole gang whole: its own `minAvailable`
if set, and at least `spec.minAvailable` minus the other tasks' replicas, at least 1.
Its workers are `tasks[i].replicas`, running ones `status.taskStatusCount[<task>]
.phase.Running`. A resize is a JSON patch: a test of the resourceVersion we planned on
and of the task's name, then the task's replicas and our annotations (a merge patch
would replace the whole task list, templates included, which the caches do not keep).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from autoscaler.core.options import ReadOptions
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import JSON_PATCH, VCJOB
from autoscaler.read.fields import BadField, dig, int_field

from .base import NotManaged, Workers, Write, read_workers, replica_gpus
from .gang import GangPods, vcjob_gang

DEFAULT_QUEUE = "default"
FINISHED_PHASES = frozenset({"Completed", "Completing", "Failed", "Terminated", "Terminating"})
SUSPENDED_PHASES = frozenset({"Aborted", "Aborting"})


class VolcanoJob:
    """A Volcano Job (batch.volcano.sh): tasks, each with replicas and minAvailable, as
    its admission webhook lets them change."""

    resource = VCJOB
    queue_field = "spec.queue"
    operator = "Volcano's job controller"

    def __repr__(self) -> str:
        return "VolcanoJob()"

    def queue(self, obj: Mapping[str, Any]) -> str:
        queue = dig(obj, "spec", "queue")
        return queue if isinstance(queue, str) and queue else DEFAULT_QUEUE

    def priority_class(self, obj: Mapping[str, Any]) -> Any:
        return dig(obj, "spec", "priorityClassName")

    def finished(self, obj: Mapping[str, Any]) -> tuple[Reason, str] | None:
        phase = dig(obj, "status", "state", "phase")
        if phase in FINISHED_PHASES:
            return Reason.FINISHED, f"status.state.phase is {phase}"
        if phase in SUSPENDED_PHASES:
            return Reason.SUSPENDED, f"status.state.phase is {phase}"
        return None

    def gang(self, obj: Mapping[str, Any], options: ReadOptions) -> GangPods | None:
        return vcjob_gang(obj, options)

    def workers(self, obj: Mapping[str, Any], options: ReadOptions) -> Workers:
        tasks = _tasks(obj)
        index, _ = self._elastic_task(obj, tasks, options)
        task = tasks[index]
        name = task["name"]
        where = f"spec.tasks[{index}]"
        active = dig(obj, "status", "taskStatusCount", name, "phase", "Running")
        field = f"status.taskStatusCount[{name}].phase.Running"
        workers = read_workers(task, where, 0, active, field, options, f"{index}:{name}")
        # the other tasks' pods are in the job's one PodGroup too: their GPUs are the job's
        other = sum(
            replica_gpus(
                t.get("replicas", 0), t.get("template"), f"spec.tasks[{i}].template", options, None
            )
            for i, t in enumerate(tasks)
            if i != index
        )
        return replace(workers, other_gpus=other) if other else workers

    def bounds(
        self, obj: Mapping[str, Any], workers: Workers, options: ReadOptions
    ) -> tuple[int, int]:
        tasks = _tasks(obj)
        index, max_r = self._elastic_task(obj, tasks, options)
        task = tasks[index]
        where = f"spec.tasks[{index}]"
        try:
            others = sum(
                int_field(t.get("replicas", 0), f"spec.tasks[{i}].replicas")
                for i, t in enumerate(tasks)
                if i != index
            )
            gang = dig(obj, "spec", "minAvailable")
            gang_min = 0 if gang is None else int_field(gang, "spec.minAvailable")
            own = task.get("minAvailable")
            own_min = 0 if own is None else int_field(own, f"{where}.minAvailable")
        except BadField as exc:
            raise NotManaged(Reason.INVALID_POLICY, str(exc), range_error=True) from None
        min_r = max(1, gang_min - others, own_min)
        if max_r < min_r:
            raise NotManaged(
                Reason.INVALID_ANNOTATION,
                f"annotation {_annotation(options)} says at most {max_r} worker(s), below "
                f"the {min_r} that {where} needs (spec.minAvailable={gang_min}, "
                f"{others} replica(s) in other tasks)",
                range_error=True,
            )
        return min_r, max_r

    def gang_grows(self, obj: Mapping[str, Any]) -> str:
        # The gang is spec.minAvailable (PodGroup minMember), which a resize leaves alone.
        # A task without minAvailable gets minTaskMember = its replicas from the
        # controller, but Volcano's webhook sets every task's minAvailable at create, and
        # without the webhook the scheduler still places a Running job's extra pods one
        # by one (observed on the real scheduler): growth does not stall it.
        return ""

    def grow_blocked(self, obj: Mapping[str, Any]) -> str:
        # Volcano's job controller flips a Job to phase Pending when its Pending pods
        # exceed (replicas - minAvailable). A grow step adds as many replicas as Pending
        # pods, so it keeps that difference: it flips a job only if the job is over the
        # line already, i.e. fewer of its pods run than its gang needs. Those are held.
        try:
            pending = int_field(dig(obj, "status", "pending") or 0, "status.pending")
            gang = int_field(dig(obj, "spec", "minAvailable") or 0, "spec.minAvailable")
            total = sum(
                int_field(t.get("replicas", 0), f"spec.tasks[{i}].replicas")
                for i, t in enumerate(_tasks(obj))
            )
        except (BadField, NotManaged):
            return ""  # bounds() reports what is malformed
        if pending > total - gang:
            return (
                f"{pending} pod(s) of the job are Pending, more than replicas - minAvailable "
                f"= {total} - {gang}: Volcano keeps the job in phase Pending until they run, "
                "and growing would add more"
            )
        return ""

    def write(self, at: str, target: int, annotations: Mapping[str, str], rv: str) -> Write:
        index, _, task = at.partition(":")
        if not index.isdigit() or not task:
            raise ValueError(f"not a Volcano Job task locator: {at!r}")
        pointer = f"/spec/tasks/{index}"
        ops: list[dict[str, Any]] = []
        if rv:
            ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
        # the index was read with that resourceVersion; the name makes sure anyway
        ops.append({"op": "test", "path": f"{pointer}/name", "value": task})
        ops.append({"op": "replace", "path": f"{pointer}/replicas", "value": target})
        for key, value in annotations.items():
            path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
            ops.append({"op": "add", "path": path, "value": value})
        return Write(ops, JSON_PATCH)

    def workers_name(self, at: str) -> str:
        return f"task {at.partition(':')[2]}"

    # ---- the elastic task ---------------------------------------------------------------

    def _elastic_task(
        self, obj: Mapping[str, Any], tasks: list[Mapping[str, Any]], options: ReadOptions
    ) -> tuple[int, int]:
        """(index of the elastic task, its max) from the max-replicas annotation."""
        key = _annotation(options)
        annotations = dig(obj, "metadata", "annotations")
        if annotations is not None and not isinstance(annotations, Mapping):
            raise NotManaged(Reason.INVALID_ANNOTATION, "metadata.annotations must be a mapping")
        value = (annotations or {}).get(key)
        if value is None:
            raise NotManaged(
                Reason.NOT_ELASTIC,
                f"no annotation {key}: a Volcano Job has no max field, so it is resized only "
                "when this annotation names its max workers",
            )
        where = f"metadata.annotations[{key}]"
        if not isinstance(value, str) or not value.strip():
            raise NotManaged(Reason.INVALID_ANNOTATION, f"{where} must be a number or task=number")
        names = [t["name"] for t in tasks]
        text = value.strip()
        if "=" in text:
            pairs = [p.strip() for p in text.split(",") if p.strip()]
            if len(pairs) != 1:
                raise NotManaged(
                    Reason.INVALID_ANNOTATION,
                    f"{where}={value!r} names {len(pairs)} tasks; one task per Job is elastic",
                )
            name, _, number = pairs[0].partition("=")
            name = name.strip()
            if name not in names:
                raise NotManaged(
                    Reason.INVALID_ANNOTATION,
                    f"{where} names task {name!r}, which is not in spec.tasks ({', '.join(names)})",
                )
            index = names.index(name)
        else:
            if len(tasks) != 1:
                raise NotManaged(
                    Reason.INVALID_ANNOTATION,
                    f"{where}={value!r}: the Job has {len(tasks)} tasks "
                    f"({', '.join(names)}); say which is elastic, e.g. {names[0]}={text}",
                )
            index, number = 0, text
        try:
            max_r = int_field(int(number.strip()), where, minimum=1)
        except BadField as exc:  # a number, out of range (BadField is a ValueError: first)
            raise NotManaged(Reason.INVALID_ANNOTATION, str(exc)) from None
        except ValueError:
            raise NotManaged(
                Reason.INVALID_ANNOTATION, f"{where}={value!r}: {number.strip()!r} is not a number"
            ) from None
        return index, max_r


def _annotation(options: ReadOptions) -> str:
    return options.annotations.max_replicas


def _tasks(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    tasks = dig(obj, "spec", "tasks")
    if not isinstance(tasks, list) or not tasks:
        raise NotManaged(Reason.INVALID_SPEC, "spec.tasks is missing or empty")
    for i, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            raise NotManaged(Reason.INVALID_SPEC, f"spec.tasks[{i}] must be a mapping")
        if not isinstance(task.get("name"), str) or not task["name"]:
            raise NotManaged(Reason.INVALID_SPEC, f"spec.tasks[{i}].name is missing")
    return tasks


VCJOB_KIND = VolcanoJob()
