"""The snapshot file: what `plan --snapshot` and the tests read.

now: "2026-11-22T10:00:00Z"          # optional; default: the current time
free_gpus: {team-a: 6, team-b: 0}     # per queue, in GPUs, taken as the headroom as given;
                                       # a missing queue is unknown
volcano:                               # optional: compute the headroom as the daemon does
  plugin: proportion                   #   or capacity
  queues:                              #   Volcano's metrics per queue, in GPUs
    team-c: {allocated: 2, request: 2, inqueue: 0, real_capacity: 16, deserved: 2}
objects: [...]                         # objects as `kubectl get -o yaml` prints them
                                       # (a list, or one `kind: List` object); Node and
                                       # Pod objects give the cluster's idle GPUs per node
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from autoscaler.core.errors import yaml_error_line
from autoscaler.core.model import ClusterSnapshot, Plugin, QueueState, VolcanoQueue
from autoscaler.core.options import ReadOptions
from autoscaler.core.reasons import Reason

from .fields import BadField, parse_time
from .parse import RawObjects, build_snapshot

MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024


class SnapshotError(ValueError):
    """The file cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    """A snapshot file as read (docs/snapshot.md): the raw objects, the free GPUs per
    queue and the instant, turned into a ClusterSnapshot with the settings' read options."""

    now: datetime | None
    free: Mapping[str, QueueState]
    raw: RawObjects
    plugin: Plugin | None = None

    def snapshot(self, options: ReadOptions) -> ClusterSnapshot:
        # Node objects bound even given free GPUs by the nodes' idle GPUs
        plugin = self.plugin or (Plugin.GIVEN if self.raw.nodes else None)
        return build_snapshot(self.raw, self.free, options, plugin=plugin)


_VOLCANO_FIELDS = ("allocated", "request", "inqueue", "real_capacity", "deserved")


def volcano_states(data: Any, where: str) -> tuple[Plugin, dict[str, QueueState]]:
    """The `volcano` section: the plugin and each queue's metric values (GPUs). A bad
    value holds its queue, naming the field; a bad section is an error."""
    if not isinstance(data, Mapping):
        raise SnapshotError(f"{where}: volcano must be a mapping with plugin and queues")
    unknown = sorted(set(map(str, data)) - {"plugin", "queues"})
    if unknown:
        raise SnapshotError(f"{where}: unknown key(s) in volcano: {', '.join(unknown)}")
    try:
        plugin = Plugin(str(data.get("plugin", "proportion")))
    except ValueError:
        raise SnapshotError(
            f"{where}: volcano.plugin must be proportion or capacity, got {data.get('plugin')!r}"
        ) from None
    if plugin in (Plugin.GIVEN, Plugin.UNKNOWN):
        raise SnapshotError(f"{where}: volcano.plugin must be proportion or capacity")
    queues = data.get("queues") or {}
    if not isinstance(queues, Mapping):
        raise SnapshotError(f"{where}: volcano.queues must be a mapping of queue: values")
    states: dict[str, QueueState] = {}
    for queue, values in queues.items():
        name = str(queue)
        field = f"volcano.queues[{name}]"
        if not isinstance(values, Mapping):
            states[name] = QueueState(
                name, None, Reason.METRICS_INVALID, f"{field} is not a mapping: {values!r}"
            )
            continue
        bad = sorted(set(map(str, values)) - set(_VOLCANO_FIELDS))
        numbers: dict[str, float] = {}
        problem = f"{field}: unknown field(s) {', '.join(bad)}" if bad else ""
        for key in _VOLCANO_FIELDS:
            value = values.get(key)
            if value is None or problem:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                problem = f"{field}.{key} must be a finite number >= 0, got {value!r}"
            else:
                numbers[key] = float(value)
        if problem:
            states[name] = QueueState(name, None, Reason.METRICS_INVALID, problem)
            continue
        states[name] = QueueState(
            name,
            None,
            volcano=VolcanoQueue(
                name,
                allocated=numbers.get("allocated", 0.0),
                request=numbers.get("request", numbers.get("allocated", 0.0)),
                inqueue=numbers.get("inqueue", 0.0),
                real_capacity=numbers.get("real_capacity"),
                deserved=numbers.get("deserved"),
            ),
        )
    return plugin, states


def free_gpu_states(values: Mapping[str, Any], where: str = "free_gpus") -> dict[str, QueueState]:
    """Queue -> free GPUs, as a source reported them. Bad values hold that queue."""

    states: dict[str, QueueState] = {}
    for queue, value in values.items():
        name = str(queue)
        if value is None:
            states[name] = QueueState(
                name, None, Reason.METRICS_MISSING, f"{where}[{name}] is null"
            )
        elif isinstance(value, bool) or not isinstance(value, int | float):
            states[name] = QueueState(
                name, None, Reason.METRICS_INVALID, f"{where}[{name}] is not a number: {value!r}"
            )
        elif not math.isfinite(value) or value < 0:
            states[name] = QueueState(
                name,
                None,
                Reason.METRICS_INVALID,
                f"{where}[{name}] must be finite and >= 0, got {value!r}",
            )
        else:
            states[name] = QueueState(name, float(value))
    return states


def load_snapshot_file(path: Path) -> SnapshotFile:
    try:
        size = path.stat().st_size
        if size > MAX_SNAPSHOT_BYTES:
            raise SnapshotError(f"{path}: {size} bytes is over the {MAX_SNAPSHOT_BYTES} limit")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SnapshotError(f"{path}: not UTF-8 text") from None
    return parse_snapshot_data(_decode(text, path), str(path))


# libyaml's loader where PyYAML was built with it: the pure-Python one took over two
# minutes for a 17 MB (10k-job) snapshot
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _decode(text: str, path: Path) -> Any:
    """JSON parsed as JSON (0.3 s for 10k jobs); anything else as YAML."""
    if text.lstrip().startswith(("{", "[")):
        try:
            return json.loads(text)
        except ValueError as exc:
            if path.suffix.lower() == ".json":
                raise SnapshotError(f"{path}: not valid JSON: {exc}") from None
            # a YAML flow mapping that is not JSON: let YAML have it
    try:
        return yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise SnapshotError(yaml_error_line(path, exc, "not valid YAML or JSON")) from None


def parse_snapshot_data(data: Any, where: str = "snapshot") -> SnapshotFile:
    if not isinstance(data, Mapping):
        raise SnapshotError(f"{where}: must be a mapping with free_gpus and objects")
    unknown = sorted(set(map(str, data)) - {"now", "free_gpus", "objects", "volcano"})
    if unknown:
        raise SnapshotError(f"{where}: unknown key(s): {', '.join(unknown)}")
    now = None
    if data.get("now") is not None:
        raw_now = data["now"]
        if isinstance(raw_now, datetime):  # YAML parses unquoted timestamps itself
            raw_now = raw_now.isoformat()
        try:
            now = parse_time(raw_now, "now")
        except BadField as exc:
            raise SnapshotError(f"{where}: {exc}") from None
    free = data.get("free_gpus", {})
    if not isinstance(free, Mapping):
        raise SnapshotError(f"{where}: free_gpus must be a mapping of queue: GPUs")
    objects = data.get("objects", [])
    if isinstance(objects, Mapping):
        objects = [objects]
    if not isinstance(objects, list):
        raise SnapshotError(f"{where}: objects must be a list or a kind: List object")
    states = free_gpu_states(free)
    plugin = None
    if data.get("volcano") is not None:
        plugin, volcano = volcano_states(data["volcano"], where)
        both = sorted(set(volcano) & set(states))
        if both:
            raise SnapshotError(
                f"{where}: queue(s) {', '.join(both)} in both free_gpus and volcano.queues"
            )
        states.update(volcano)
    return SnapshotFile(now, states, RawObjects.from_objects(objects), plugin)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
