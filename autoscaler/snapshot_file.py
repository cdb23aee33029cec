"""The snapshot file: what `plan --snapshot` and the tests read.

now: "2026-11-22T10:00:00Z"          # optional; default: the current time
free_gpus: {team-a: 6, team-b: 0}     # per queue, in GPUs; a missing queue is unknown
objects: [...]                         # objects as `kubectl get -o yaml` prints them
                                       # (a list, or one `kind: List` object)
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

from .fields import BadField, parse_time
from .model import ClusterSnapshot, QueueState, Reason
from .parse import RawObjects, build_snapshot
from .settings import Settings

MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024


class SnapshotError(ValueError):
    """The file cannot be used; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    now: datetime | None
    free: Mapping[str, QueueState]
    raw: RawObjects

    def snapshot(self, settings: Settings) -> ClusterSnapshot:
        return build_snapshot(self.raw, self.free, settings)


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
        raise SnapshotError(f"{path}: not valid YAML or JSON: {_first_line(exc)}") from None


def parse_snapshot_data(data: Any, where: str = "snapshot") -> SnapshotFile:
    if not isinstance(data, Mapping):
        raise SnapshotError(f"{where}: must be a mapping with free_gpus and objects")
    unknown = sorted(set(map(str, data)) - {"now", "free_gpus", "objects"})
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
    return SnapshotFile(now, free_gpu_states(free), RawObjects.from_objects(objects))


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
