"""The raw objects as they come, and what every decoder reads of any object.

`RawObjects` sorts a mixed list (a snapshot file, `kubectl get -o yaml`) by kind and
counts what it leaves out; the helpers read an object's metadata the same way for every
kind: its reference (name, namespace, uid, checked), its creation time, its owner. They
sit below the per-kind readers (queues, nodes, jobs, podgroups, hpas) that all use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from autoscaler.core.model import ObjectRef
from autoscaler.read.fields import BadField, dig, parse_time
from autoscaler.read.kinds import KIND_NAMES, kind_of

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
HPA_KIND = "HorizontalPodAutoscaler"
DEFAULT_QUEUE = "default"
MAX_NAME_LENGTH = 253


@dataclass(frozen=True, slots=True)
class RawObjects:
    """Raw objects by kind, as read from the API or a snapshot file."""

    jobs: tuple[Mapping[str, Any], ...] = ()
    podgroups: tuple[Mapping[str, Any], ...] = ()
    queues: tuple[Mapping[str, Any], ...] = ()
    priorityclasses: tuple[Mapping[str, Any], ...] = ()
    nodes: tuple[Mapping[str, Any], ...] = ()
    pods: tuple[Mapping[str, Any], ...] = ()
    hpas: tuple[Mapping[str, Any], ...] = ()  # autoscaling/v2 HorizontalPodAutoscalers
    # what from_objects left out, counted: "ConfigMap (v1)", "no kind", "not a mapping"
    ignored: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objects: Iterable[Any]) -> RawObjects:
        """Sort a mixed list (e.g. `kubectl get ... -o yaml` items) by kind; a `List` is
        flattened; objects of kinds we do not use (or without a kind) are left out and
        counted in `ignored`, for the caller to warn about."""

        buckets: dict[str, list[Mapping[str, Any]]] = {
            "jobs": [],
            "PodGroup": [],
            "Queue": [],
            "PriorityClass": [],
            "Node": [],
            "Pod": [],
            HPA_KIND: [],
        }
        ignored: dict[str, int] = {}
        stack = list(objects)
        stack.reverse()
        while stack:
            obj = stack.pop()
            if not isinstance(obj, Mapping):
                ignored["not a mapping"] = ignored.get("not a mapping", 0) + 1
                continue
            kind = obj.get("kind")
            if (
                isinstance(kind, str)
                and kind.endswith("List")
                and isinstance(obj.get("items"), list)
            ):
                stack.extend(reversed(obj["items"]))
            elif kind_of(obj) is not None:
                buckets["jobs"].append(obj)
            elif kind in buckets:
                buckets[kind].append(obj)
            else:
                what = _kind_words(kind, obj.get("apiVersion"))
                ignored[what] = ignored.get(what, 0) + 1
        return cls(
            jobs=tuple(buckets["jobs"]),
            podgroups=tuple(buckets["PodGroup"]),
            queues=tuple(buckets["Queue"]),
            priorityclasses=tuple(buckets["PriorityClass"]),
            nodes=tuple(buckets["Node"]),
            pods=tuple(buckets["Pod"]),
            hpas=tuple(buckets[HPA_KIND]),
            ignored=ignored,
        )


def _kind_words(kind: Any, api_version: Any) -> str:
    if not isinstance(kind, str) or not kind:
        return "no kind"
    return f"{kind} ({api_version})" if isinstance(api_version, str) else kind


def ignored_words(ignored: Mapping[str, int]) -> str:
    """`3 object(s) ignored: 2 ConfigMap (v1), 1 no kind`, or "" when none were."""
    if not ignored:
        return ""
    total = sum(ignored.values())
    detail = ", ".join(f"{n} {what}" for what, n in sorted(ignored.items()))
    return f"{total} object(s) of kinds not planned ignored: {detail}"


def _created(meta: Mapping[str, Any]) -> datetime:
    return created_at(meta.get("creationTimestamp"))


def created_at(value: Any) -> datetime:
    """metadata.creationTimestamp as read (any JSON), EPOCH where it is not a time."""
    try:
        return parse_time(value, "metadata.creationTimestamp")
    except BadField:
        return EPOCH  # hand-written snapshots omit it; oldest-first is a safe default


def _ref(obj: Mapping[str, Any], kind: str, *, namespaced: bool = True) -> ObjectRef:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        raise BadField("metadata is missing")
    name = meta.get("name")
    namespace = meta.get("namespace", "default" if namespaced else "")
    if not isinstance(name, str) or not name:
        raise BadField("metadata.name is missing")
    if len(name) > MAX_NAME_LENGTH:
        raise BadField(f"metadata.name is longer than {MAX_NAME_LENGTH} characters")
    if namespaced and (not isinstance(namespace, str) or not namespace):
        raise BadField("metadata.namespace is missing")
    uid = meta.get("uid")
    return ObjectRef(namespace or "", name, kind, uid if isinstance(uid, str) else "")


def _fallback_ref(obj: Any, kind: str) -> ObjectRef:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    namespace = meta.get("namespace")
    name = name[:MAX_NAME_LENGTH] if isinstance(name, str) and name else "<no name>"
    namespace = namespace if isinstance(namespace, str) and namespace else "<no namespace>"
    return ObjectRef(namespace, name, kind)


def _owner(obj: Mapping[str, Any], namespace: str) -> ObjectRef | None:
    return owner_of(dig(obj, "metadata", "ownerReferences"), namespace)


def owner_of(owners: Any, namespace: str) -> ObjectRef | None:
    """The object's owner by its metadata.ownerReferences (as served: any JSON): its
    controller, else its first reference with a name and a kind."""
    if not isinstance(owners, list):
        return None
    candidates = [o for o in owners if isinstance(o, Mapping)]
    controller = [o for o in candidates if o.get("controller") is True] or candidates
    for o in controller:
        name, kind = o.get("name"), o.get("kind")
        if isinstance(name, str) and isinstance(kind, str):
            api_version = o.get("apiVersion")
            if kind_of({"kind": kind, "apiVersion": api_version}) is None and kind in KIND_NAMES:
                # same kind name, other API group (a batch/v1 Job is no Volcano Job)
                kind = f"{kind}.{str(api_version).split('/')[0]}"
            uid = o.get("uid")
            return ObjectRef(namespace, name, kind, uid if isinstance(uid, str) else "")
    return None
