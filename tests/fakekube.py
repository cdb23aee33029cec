"""A fake Kubernetes API server over real HTTP, for tests that drive kubernetes_asyncio.

It speaks the wire protocol of kube-apiserver for what elastic-autoscaler uses, so the
real client code runs unchanged: list (with labelSelector/fieldSelector), get, create,
replace (optimistic concurrency), patch (merge, JSON, strategic for built-in types),
delete, the /status and /scale subresources of PyTorchJob, and watch streams with
resourceVersion semantics (replay from a version, 410 Expired after compaction, server
side timeoutSeconds, bookmarks). Status bodies match the real server's shape.

Test controls are plain methods (`put`, `patch`, `delete`, `fail_next`, `compact`,
`close_watches`, ...) that act as "another writer" of the cluster; `requests` records
every call so tests can assert, e.g., that a steady cycle makes no LIST call.

    async with FakeKubeApi() as kube:
        async with ApiClient(kube.configuration()) as api: ...

All state lives in the event loop of the test; the controls must be called from it.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import re
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from aiohttp import web

__all__ = [
    "DEFAULT_RESOURCES",
    "FakeKubeApi",
    "RecordedRequest",
    "ResourceType",
    "eventually",
]

JsonObj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)


# ---- resource types --------------------------------------------------------------------


@dataclass(frozen=True)
class ResourceType:
    """One served resource. `storage` names the store shared by aliases (events)."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    custom: bool  # a CRD: no strategic merge patch, updates need a resourceVersion
    status_subresource: bool = False
    scale_spec_path: tuple[str, ...] | None = None  # CRD scale.specReplicasPath
    scale_status_path: tuple[str, ...] | None = None
    scale_selector_path: tuple[str, ...] | None = None
    storage: str = ""
    allow_create_on_update: bool = False
    allow_unconditional_update: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def store(self) -> str:
        return self.storage or self.plural

    @property
    def qualified(self) -> str:
        """How the real server names the resource in messages: `pytorchjobs.kubeflow.org`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _kubeflow(plural: str, kind: str, replica_specs: str) -> ResourceType:
    return ResourceType(
        "kubeflow.org",
        "v1",
        plural,
        kind,
        namespaced=True,
        custom=True,
        status_subresource=True,
        scale_spec_path=("spec", replica_specs, "Worker", "replicas"),
        scale_status_path=("status", "replicaStatuses", "Worker", "active"),
        scale_selector_path=("status", "replicaStatuses", "Worker", "selector"),
    )


DEFAULT_RESOURCES: tuple[ResourceType, ...] = (
    _kubeflow("pytorchjobs", "PyTorchJob", "pytorchReplicaSpecs"),
    _kubeflow("paddlejobs", "PaddleJob", "paddleReplicaSpecs"),
    ResourceType("kubeflow.org", "v1", "mpijobs", "MPIJob", True, True, status_subresource=True),
    ResourceType("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True, True),
    ResourceType(
        "scheduling.volcano.sh",
        "v1beta1",
        "queues",
        "Queue",
        False,
        True,
        status_subresource=True,
    ),
    ResourceType(
        "batch.volcano.sh",
        "v1alpha1",
        "jobs",
        "Job",
        True,
        True,
        status_subresource=True,
    ),
    ResourceType(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "PriorityClass",
        False,
        False,
        allow_unconditional_update=True,
    ),
    ResourceType("", "v1", "nodes", "Node", False, False, True, allow_unconditional_update=True),
    # the daemon lists bound pods with a field selector this fake does not apply
    ResourceType("", "v1", "pods", "Pod", True, False, True, allow_unconditional_update=True),
    ResourceType(
        "",
        "v1",
        "events",
        "Event",
        True,
        False,
        allow_create_on_update=True,
        allow_unconditional_update=True,
    ),
    ResourceType(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        False,
        storage="events",
        allow_create_on_update=True,
        allow_unconditional_update=True,
    ),
    # the daemon's status object (report/status/writer.py)
    ResourceType("", "v1", "configmaps", "ConfigMap", True, False, allow_unconditional_update=True),
    ResourceType(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        True,
        False,
        status_subresource=True,
        allow_unconditional_update=True,
    ),
    ResourceType(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        True,
        False,
        allow_unconditional_update=True,
    ),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        False,
        status_subresource=True,
        allow_unconditional_update=True,
    ),
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        False,
        status_subresource=True,
        allow_unconditional_update=True,
    ),
)


# ---- errors ----------------------------------------------------------------------------


class ApiError(Exception):
    """An error answer of the API server, rendered as a `Status` object."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: JsonObj | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> JsonObj:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str, message: str, details: JsonObj | None = None) -> JsonObj:
    body: JsonObj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _details(rt: ResourceType, name: str) -> JsonObj:
    details: JsonObj = {"name": name, "kind": rt.plural}
    if rt.group:
        details["group"] = rt.group
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{rt.qualified} "{name}" already exists', _details(rt, name)
    )


def conflict(rt: ResourceType, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        _details(rt, name),
    )


def invalid(rt: ResourceType, name: str, message: str) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'{rt.kind}.{rt.group or "core"} "{name}" is invalid: {message}',
        _details(rt, name),
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


_GENERIC_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# ---- JSON helpers: merge patch, JSON patch, selectors -----------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386. Returns a new value; neither argument is modified."""

    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class JsonPatchError(ValueError):
    """The patch cannot be applied (the real server answers 422)."""


class JsonPatchDecodeError(JsonPatchError):
    """The patch is not a list of operations (the real server answers 400)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list[Any], token: str, *, allow_end: bool) -> int:
    if allow_end and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise JsonPatchError(f"invalid array index {token!r}")
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not allow_end):
        raise JsonPatchError(f"array index {idx} out of range")
    return idx


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise JsonPatchError(f"path component {token!r} does not exist")
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise JsonPatchError(f"cannot traverse into {type(node).__name__}")
    return node


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"path component {last!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, allow_end=False)]
    raise JsonPatchError("cannot index a scalar")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise JsonPatchError("cannot add into a scalar")
    return doc


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise JsonPatchError(f"path component {last!r} does not exist")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, allow_end=False)]
    else:
        raise JsonPatchError("cannot remove from a scalar")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test). Returns a new document."""

    if not isinstance(ops, list):
        raise JsonPatchDecodeError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise JsonPatchDecodeError(f"malformed operation {op!r}")
        kind, tokens = op["op"], _pointer(op["path"])
        if kind in ("add", "replace", "test") and "value" not in op:
            raise JsonPatchError(f"operation {kind} needs a value")
        if kind == "add":
            doc = _add(doc, tokens, copy.deepcopy(op["value"]))
        elif kind == "remove":
            doc = _remove(doc, tokens)
        elif kind == "replace":
            _get(doc, tokens)  # must exist
            doc = (
                _add(_remove(doc, tokens), tokens, copy.deepcopy(op["value"]))
                if tokens
                else copy.deepcopy(op["value"])
            )
        elif kind == "test":
            if _get(doc, tokens) != op["value"]:
                raise JsonPatchError(f"test failed at {op['path']}")
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = copy.deepcopy(_get(doc, source))
            if kind == "move":
                doc = _remove(doc, source)
            doc = _add(doc, tokens, value)
        else:
            raise JsonPatchError(f"unknown operation {kind!r}")
    return doc


_REQ_RE = re.compile(
    r"^\s*(?P<key>[A-Za-z0-9_.\-/]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)\s*$"
)
_EQ_RE = re.compile(r"^\s*(?P<key>[A-Za-z0-9_.\-/]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^,]*?)\s*$")
_EXISTS_RE = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[A-Za-z0-9_.\-/]+)\s*$")

_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")

Requirement = Callable[[dict[str, str]], bool]


def _label_value(value: str, part: str) -> str:
    if not _VALUE_RE.match(value):
        raise bad_request(f"unable to parse requirement: invalid label value {value!r} in {part!r}")
    return value


def _split_selector(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str) -> Requirement:
    """Equality (`a=b`, `a==b`, `a!=b`), existence (`a`, `!a`) and set (`in`, `notin`)."""

    reqs: list[Requirement] = []
    for part in _split_selector(text or ""):
        if m := _REQ_RE.match(part):
            key = m["key"]
            values = {_label_value(v.strip(), part) for v in m["values"].split(",")}
            if m["op"] == "in":
                reqs.append(lambda lb, k=key, vs=values: lb.get(k) in vs)
            else:
                reqs.append(lambda lb, k=key, vs=values: lb.get(k) not in vs)
        elif m := _EQ_RE.match(part):
            key, value = m["key"], _label_value(m["value"], part)
            if m["op"] == "!=":
                reqs.append(lambda lb, k=key, v=value: lb.get(k) != v)
            else:
                reqs.append(lambda lb, k=key, v=value: lb.get(k) == v)
        elif m := _EXISTS_RE.match(part):
            key = m["key"]
            if m["neg"]:
                reqs.append(lambda lb, k=key: k not in lb)
            else:
                reqs.append(lambda lb, k=key: k in lb)
        else:
            raise bad_request(f"unable to parse requirement: {part!r}")
    return lambda labels: all(r(labels) for r in reqs)


def _field_value(obj: JsonObj, path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    if node is None:
        return ""
    return str(node).lower() if isinstance(node, bool) else str(node)


def parse_field_selector(text: str, rt: ResourceType) -> Callable[[JsonObj], bool]:
    reqs: list[Callable[[JsonObj], bool]] = []
    for part in _split_selector(text or ""):
        m = _EQ_RE.match(part)
        if not m:
            raise bad_request(f"invalid field selector: {part!r}")
        key, value, negate = m["key"], m["value"], m["op"] == "!="
        # CRDs support only metadata.name and metadata.namespace, like the real server.
        if rt.custom and key not in ("metadata.name", "metadata.namespace"):
            raise bad_request(f"field label not supported: {key}")
        reqs.append(lambda o, k=key, v=value, n=negate: (_field_value(o, k) == v) != n)
    return lambda obj: all(r(obj) for r in reqs)


def _labels(obj: JsonObj | None) -> dict[str, str]:
    if not obj:
        return {}
    return (obj.get("metadata") or {}).get("labels") or {}


def _rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "t", "true")


def _dig(obj: Any, path: Iterable[str]) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _set_path(obj: JsonObj, path: tuple[str, ...], value: Any) -> None:
    node = obj
    for part in path[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[path[-1]] = value


_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# Fields whose type the real CRD schemas fix, among those a scaler reads or writes.
# "*" matches every key of a map.
_TYPED_PATHS: dict[str, tuple[tuple[str, str], ...]] = {
    "pytorchjobs": (
        ("spec.pytorchReplicaSpecs.*.replicas", "integer"),
        ("spec.pytorchReplicaSpecs.*.restartPolicy", "string"),
        ("spec.elasticPolicy.minReplicas", "integer"),
        ("spec.elasticPolicy.maxReplicas", "integer"),
        ("spec.elasticPolicy.maxRestarts", "integer"),
        ("spec.elasticPolicy.nProcPerNode", "integer"),
        ("spec.elasticPolicy.metrics", "array"),
        ("spec.runPolicy.schedulingPolicy.minAvailable", "integer"),
        ("spec.runPolicy.schedulingPolicy.queue", "string"),
        ("spec.runPolicy.schedulingPolicy.priorityClass", "string"),
        ("spec.runPolicy.suspend", "boolean"),
        ("status.replicaStatuses.*.active", "integer"),
    ),
    "podgroups": (
        ("spec.minMember", "integer"),
        ("spec.queue", "string"),
        ("spec.priorityClassName", "string"),
        ("spec.minResources", "object"),
        ("status.phase", "string"),
        ("status.conditions", "array"),
    ),
    "queues": (
        ("spec.weight", "integer"),
        ("spec.capability", "object"),
        ("spec.deserved", "object"),
    ),
}


def _walk(obj: Any, path: str) -> Iterable[tuple[str, Any]]:
    """(concrete path, value) for each match of a dotted path with "*" map wildcards."""

    nodes: list[tuple[str, Any]] = [("", obj)]
    for part in path.split("."):
        nxt: list[tuple[str, Any]] = []
        for where, node in nodes:
            if not isinstance(node, dict):
                continue
            keys = list(node) if part == "*" else [part] if part in node else []
            nxt.extend((f"{where}.{k}" if where else k, node[k]) for k in keys)
        nodes = nxt
    return nodes


def _is_type(value: Any, expected: str) -> bool:
    if expected == "integer":
        # Like go-openapi: a JSON number with no fractional part is an integer.
        return not isinstance(value, bool) and (
            isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        )
    return {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
    }[expected]


# events.k8s.io/v1 field <-> core/v1 field; the rest have the same name in both.
_EVENT_FIELDS = (
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
)


def _is_events_v1(rt: ResourceType) -> bool:
    return rt.group == "events.k8s.io"


def _view(rt: ResourceType, obj: JsonObj) -> JsonObj:
    """A stored object as served by `rt` (events are stored in their core/v1 shape)."""

    if not _is_events_v1(rt):
        return obj
    out = {k: v for k, v in obj.items() if k not in {core for _, core in _EVENT_FIELDS}}
    for new, core in _EVENT_FIELDS:
        if core in obj:
            out[new] = obj[core]
    out["apiVersion"] = rt.api_version
    return out


def _unview(rt: ResourceType, obj: JsonObj) -> JsonObj:
    """The inverse of `_view`: what to store for an object written through `rt`."""

    if not _is_events_v1(rt):
        return obj
    out = {k: v for k, v in obj.items() if k not in {new for new, _ in _EVENT_FIELDS}}
    for new, core in _EVENT_FIELDS:
        if new in obj:
            out[core] = obj[new]
    out["apiVersion"] = "v1"
    return out


# ---- requests, faults, watchers -------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any  # parsed JSON, or None
    is_watch: bool
    verb: str  # list, watch, get, create, update, patch, delete, or "" for unknown paths
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None
    authorization: str | None


@dataclass
class _Fault:
    method: str | None
    path_re: re.Pattern[str]
    status: int
    remaining: int
    delay: float
    body: Any
    watch: bool | None
    drop: bool
    headers: dict[str, str]

    def matches(self, method: str, path: str, is_watch: bool) -> bool:
        if self.remaining <= 0:
            return False
        if self.method is not None and self.method.upper() != method:
            return False
        if self.watch is not None and self.watch != is_watch:
            return False
        return bool(self.path_re.search(path))


_CLOSE = "close"
_ABORT = "abort"


@dataclass(eq=False)
class _Watcher:
    rt: ResourceType
    namespace: str | None
    labels: Requirement
    fields: Callable[[JsonObj], bool]
    bookmarks: bool
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    def _match(self, obj: JsonObj | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None:
            if (obj.get("metadata") or {}).get("namespace") != self.namespace:
                return False
        return self.labels(_labels(obj)) and self.fields(obj)

    def event_for(self, etype: str, obj: JsonObj, old: JsonObj | None) -> JsonObj | None:
        """What the real watch cache sends this watcher, applying its filter to both sides."""

        event = self._event_for(etype, obj, old)
        if event is not None:
            event = {"type": event["type"], "object": _view(self.rt, event["object"])}
        return event

    def _event_for(self, etype: str, obj: JsonObj, old: JsonObj | None) -> JsonObj | None:
        new_ok = self._match(obj)
        if etype == "ADDED":
            return {"type": "ADDED", "object": obj} if new_ok else None
        if etype == "DELETED":
            return {"type": "DELETED", "object": obj} if new_ok else None
        old_ok = self._match(old)
        if new_ok and old_ok:
            return {"type": "MODIFIED", "object": obj}
        if new_ok:
            return {"type": "ADDED", "object": obj}
        if old_ok and old is not None:
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            return {"type": "DELETED", "object": gone}
        return None


@dataclass(frozen=True)
class _Event:
    rv: int
    type: str
    obj: JsonObj
    old: JsonObj | None


# ---- the server ------------------------------------------------------------------------


class FakeKubeApi:
    """A fake kube-apiserver on 127.0.0.1, random port. See the module docstring."""

    def __init__(
        self,
        *,
        token: str | None = None,
        history_limit: int = 1000,
        resources: Iterable[ResourceType] = DEFAULT_RESOURCES,
        clock: Callable[[], dt.datetime] | None = None,
        default_watch_timeout: float = 1800.0,
    ) -> None:
        self.token = token
        self.history_limit = history_limit
        self.default_watch_timeout = default_watch_timeout
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._by_plural: dict[str, ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        for rt in resources:
            self.register(rt)
        self._rv = 1
        self._store: dict[str, dict[Key, JsonObj]] = {}
        self._history: dict[str, deque[_Event]] = {}
        self._floor: dict[str, int] = {}  # oldest rv a watch may start from, per store
        self._watchers: set[_Watcher] = set()
        self._faults: list[_Fault] = []
        self._stalled: set[str] = set()  # plurals whose watches carry nothing ("*": all)
        self._unstalled = asyncio.Event()  # set while nothing is stalled
        self._unstalled.set()
        # requests held by a `delay` fault right now, and the most at once: concurrency seen
        self.delayed_now = self.max_delayed = 0
        self._continues: dict[str, tuple[list[JsonObj], int]] = {}
        self.requests: list[RecordedRequest] = []
        self._runner: web.AppRunner | None = None
        self._port = 0

    # -- lifecycle ----------------------------------------------------------------------

    def register(self, rt: ResourceType) -> None:
        """Serve another resource type (call before or after start)."""

        self._types[(rt.group, rt.version, rt.plural)] = rt
        self._by_plural.setdefault(rt.plural, rt)
        self._by_kind.setdefault((rt.api_version, rt.kind), rt)

    async def start(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that hangs up ends its watch handler at once.
        self._runner = web.AppRunner(
            app, handler_cancellation=True, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self.close_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeKubeApi:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        if not self._port:
            raise RuntimeError("FakeKubeApi is not started")
        return f"http://127.0.0.1:{self._port}"

    def configuration(self, token: str | None = None) -> Any:
        """A kubernetes_asyncio Configuration pointing here (bearer token if given/set)."""

        from kubernetes_asyncio.client import Configuration

        config = Configuration(host=self.url)
        bearer = token if token is not None else self.token
        if bearer:
            config.api_key = {"BearerToken": bearer}
            config.api_key_prefix = {"BearerToken": "Bearer"}
        return config

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig file whose current context points here (for config loaders)."""

        user: JsonObj = {"token": self.token} if self.token else {}
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": user}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        path.write_text(json.dumps(doc), encoding="utf-8")  # JSON is YAML
        return path

    # -- test controls ------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""

        return str(self._rv)

    def resource(self, plural: str) -> ResourceType:
        try:
            return self._by_plural[plural]
        except KeyError:
            raise KeyError(f"FakeKubeApi does not serve {plural!r}") from None

    def put(self, obj: JsonObj) -> JsonObj:
        """Create or replace `obj` as another writer would (controller, kubectl).

        The type comes from apiVersion/kind. Unlike an API create, a given uid or
        creationTimestamp is kept (tests order by age); status is written as given.
        A write that changes nothing is a no-op, like on the real server.
        """

        rt = self._type_of(obj)
        obj = _unview(rt, copy.deepcopy(obj))
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            raise ValueError("put: metadata.name is required")
        key = self._key(rt, meta.get("namespace"), meta["name"])
        current = self._store.get(rt.store, {}).get(key)
        meta.pop("resourceVersion", None)
        if current is None:
            return copy.deepcopy(self._create(rt, obj, keep_system_fields=True))
        meta.setdefault("uid", current["metadata"]["uid"])
        meta.setdefault("creationTimestamp", current["metadata"]["creationTimestamp"])
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return copy.deepcopy(self._update(rt, key, current, obj, subresource="*"))

    def patch(self, plural: str, namespace: str | None, name: str, patch: JsonObj) -> JsonObj:
        """Merge-patch an object as another writer (may touch status). KeyError if absent."""

        rt = self.resource(plural)
        key = self._key(rt, namespace, name)
        current = self._store.get(rt.store, {}).get(key)
        if current is None:
            raise KeyError(f"{plural} {namespace}/{name} not found")
        updated = merge_patch(current, patch)
        updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return copy.deepcopy(self._update(rt, key, current, updated, subresource="*"))

    def get(self, plural: str, namespace: str | None, name: str) -> JsonObj | None:
        rt = self.resource(plural)
        obj = self._store.get(rt.store, {}).get(self._key(rt, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def delete(self, plural: str, namespace: str | None, name: str) -> bool:
        """Remove an object at once (finalizers ignored); False if it did not exist."""

        rt = self.resource(plural)
        key = self._key(rt, namespace, name)
        if key not in self._store.get(rt.store, {}):
            return False
        self._remove(rt, key)
        return True

    def objects(self, plural: str, namespace: str | None = None) -> list[JsonObj]:
        rt = self.resource(plural)
        items = sorted(self._store.get(rt.store, {}).items())
        return [copy.deepcopy(o) for (ns, _), o in items if namespace is None or ns == namespace]

    def fail_next(
        self,
        method: str | None,
        path_regex: str,
        status: int,
        times: int = 1,
        delay: float = 0.0,
        body: Any = None,
        *,
        watch: bool | None = None,
        drop: bool = False,
        retry_after: int = 1,
    ) -> None:
        """Make the next `times` matching requests fail.

        `method` None matches any; `path_regex` is searched in the URL path; `watch`
        restricts to watch (True) or non-watch (False) requests. `status` 0 with a
        `delay` only delays the request (for client timeouts), then serves it normally.
        `body` replaces the Status body. `drop` closes the connection without answer.
        A 429 carries `Retry-After: retry_after`.
        """

        headers = {"Retry-After": str(retry_after)} if status == 429 else {}
        self._faults.append(
            _Fault(method, re.compile(path_regex), status, times, delay, body, watch, drop, headers)
        )

    def clear_faults(self) -> None:
        self._faults.clear()

    def close_watches(self, plural: str | None = None, *, abrupt: bool = False) -> int:
        """End open watch streams (cleanly, like a server timeout; or drop the connection).

        Returns how many were closed.
        """

        closed = 0
        for w in list(self._watchers):
            if plural is None or w.rt.plural == plural:
                w.queue.put_nowait(_ABORT if abrupt else _CLOSE)
                self._watchers.discard(w)
                closed += 1
        return closed

    def compact(self, plural: str | None = None) -> None:
        """Forget event history, so a watch from an older resourceVersion gets 410.

        Pending list continue tokens expire too (410 on the next page).
        """
        self._continues.clear()

        stores = (
            {self.resource(plural).store}
            if plural
            else set(self._history) | set(rt.store for rt in self._types.values())
        )
        for store in stores:
            self._history.pop(store, None)
            self._floor[store] = self._rv

    def stall_watches(self, plural: str | None = None) -> None:
        """Watch streams of `plural` (None: every one) carry nothing from now on, their
        connections left open, and new watches get no answer at all: a proxy or load
        balancer that stopped forwarding. Nothing is lost: `unstall_watches` lets it all
        flow again (a client that gave up on a stream has hung up by then)."""
        self._stalled.add(plural or "*")
        self._unstalled.clear()

    def unstall_watches(self) -> None:
        self._stalled.clear()
        self._unstalled.set()

    async def _flowing(self, plural: str) -> None:
        if "*" in self._stalled or plural in self._stalled:
            await self._unstalled.wait()

    def send_bookmarks(self) -> int:
        """Send a BOOKMARK at the current resourceVersion to watchers that allow them."""

        sent = 0
        for w in list(self._watchers):
            if w.bookmarks:
                w.queue.put_nowait(self._bookmark(w.rt))
                sent += 1
        return sent

    def send_line(self, plural: str, line: bytes) -> int:
        """Send `line` as it is to the open watches of `plural`: what a broken proxy or a
        server bug would put in a stream. Returns how many got it."""

        sent = 0
        for w in list(self._watchers):
            if w.rt.plural == plural:
                w.queue.put_nowait(line)
                sent += 1
        return sent

    def watchers(self, plural: str | None = None) -> int:
        """How many watch streams are open (optionally of one plural)."""

        return sum(1 for w in self._watchers if plural is None or w.rt.plural == plural)

    def count(
        self,
        method: str | None = None,
        plural: str | None = None,
        watch: bool | None = None,
        *,
        verb: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> int:
        """How many recorded requests match all the given filters."""

        return sum(
            1
            for r in self.requests
            if (method is None or r.method == method.upper())
            and (plural is None or r.plural == plural)
            and (watch is None or r.is_watch == watch)
            and (verb is None or r.verb == verb)
            and (namespace is None or r.namespace == namespace)
            and (name is None or r.name == name)
        )

    def writes(self, plural: str | None = None) -> list[RecordedRequest]:
        """Recorded create/update/patch/delete requests."""

        return [
            r
            for r in self.requests
            if r.method in ("POST", "PUT", "PATCH", "DELETE")
            and (plural is None or r.plural == plural)
        ]

    def reset_requests(self) -> None:
        self.requests.clear()

    # -- storage ------------------------------------------------------------------------

    def _type_of(self, obj: JsonObj) -> ResourceType:
        key = (obj.get("apiVersion", ""), obj.get("kind", ""))
        try:
            return self._by_kind[key]
        except KeyError:
            raise KeyError(f"FakeKubeApi does not serve {key[0]} {key[1]}") from None

    @staticmethod
    def _key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rt.namespaced else "", name)

    def _bump(self) -> int:
        self._rv += 1
        return self._rv

    def _record_event(
        self, rt: ResourceType, etype: str, obj: JsonObj, old: JsonObj | None, rv: int
    ) -> None:
        history = self._history.setdefault(rt.store, deque())
        history.append(_Event(rv, etype, obj, old))
        while len(history) > self.history_limit:
            evicted = history.popleft()
            self._floor[rt.store] = max(self._floor.get(rt.store, 0), evicted.rv)
        for w in list(self._watchers):
            if w.rt.store == rt.store:
                event = w.event_for(etype, obj, old)
                if event is not None:
                    w.queue.put_nowait(event)

    def _create(self, rt: ResourceType, obj: JsonObj, *, keep_system_fields: bool) -> JsonObj:
        meta = obj["metadata"]
        rv = self._bump()
        if not keep_system_fields or not meta.get("uid"):
            meta["uid"] = str(uuid.uuid4())
        if not keep_system_fields or not meta.get("creationTimestamp"):
            meta["creationTimestamp"] = _rfc3339(self._clock())
        meta["resourceVersion"] = str(rv)
        if rt.custom:
            meta["generation"] = 1
        obj["apiVersion"], obj["kind"] = obj.get("apiVersion") or rt.api_version, rt.kind
        key = self._key(rt, meta.get("namespace"), meta["name"])
        self._store.setdefault(rt.store, {})[key] = obj
        self._record_event(rt, "ADDED", obj, None, rv)
        return obj

    def _update(
        self, rt: ResourceType, key: Key, current: JsonObj, new: JsonObj, subresource: str | None
    ) -> JsonObj:
        """Store `new` in place of `current` unless nothing changes. Caller checked rv."""

        new = copy.deepcopy(new)
        meta = new.setdefault("metadata", {})
        cur_meta = current["metadata"]
        # System fields are not writable through updates.
        for fixed in (
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "generation",
            "deletionTimestamp",
        ):
            if subresource == "*" and fixed in ("uid", "creationTimestamp"):
                continue
            if fixed in cur_meta:
                meta[fixed] = cur_meta[fixed]
            else:
                meta.pop(fixed, None)
        if subresource == "*":
            meta.setdefault("uid", cur_meta["uid"])
            meta.setdefault("creationTimestamp", cur_meta["creationTimestamp"])
        new["apiVersion"], new["kind"] = current["apiVersion"], current["kind"]
        if rt.status_subresource and subresource is None:
            # The main resource ignores status changes when /status exists.
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        elif rt.status_subresource and subresource == "status":
            status = new.get("status")
            new = copy.deepcopy(current)
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
            meta = new["metadata"]
        meta["resourceVersion"] = cur_meta["resourceVersion"]
        if new == current:
            return current  # a no-op: no new resourceVersion, no watch event
        if rt.custom and _spec_of(new, rt) != _spec_of(current, rt):
            meta["generation"] = int(cur_meta.get("generation", 1)) + 1
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(rt, key)
            return new
        rv = self._bump()
        meta["resourceVersion"] = str(rv)
        self._store[rt.store][key] = new
        self._record_event(rt, "MODIFIED", new, current, rv)
        return new

    def _remove(self, rt: ResourceType, key: Key) -> JsonObj:
        current = self._store[rt.store].pop(key)
        rv = self._bump()
        gone = copy.deepcopy(current)
        gone["metadata"]["resourceVersion"] = str(rv)
        self._record_event(rt, "DELETED", gone, current, rv)
        return gone

    def _bookmark(self, rt: ResourceType) -> JsonObj:
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": rt.kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self._rv)},
            },
        }

    # -- HTTP ---------------------------------------------------------------------------

    def _discovery(self, method: str, path: str) -> web.Response | None:
        """GET /apis/<group>/<version>: the APIResourceList the real server serves, so
        clients can tell which CRDs are installed (404 for a group/version it lacks)."""
        parts = [p for p in path.split("/") if p]
        if method != "GET" or len(parts) != 3 or parts[0] != "apis":
            return None
        group, version = parts[1], parts[2]
        found = [rt for (g, v, _), rt in self._types.items() if (g, v) == (group, version)]
        if not found:
            return self._error(
                ApiError(404, "NotFound", "the server could not find the requested resource")
            )
        return web.json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": [
                    {
                        "name": rt.plural,
                        "singularName": rt.kind.lower(),
                        "namespaced": rt.namespaced,
                        "kind": rt.kind,
                        "verbs": ["get", "list", "watch", "patch", "update", "create", "delete"],
                    }
                    for rt in found
                ],
            }
        )

    def _route(self, path: str) -> tuple[ResourceType, str | None, str | None, str | None]:
        """(type, namespace, name, subresource) for an API path; ApiError 404 otherwise."""

        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        rt = self._types.get((group, version, rest[0]))
        if rt is None or (namespace is not None and not rt.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) == 3 else None
        if rt.namespaced and name is not None and namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if sub is not None and not (
            (sub == "status" and rt.status_subresource) or (sub == "scale" and rt.scale_spec_path)
        ):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return rt, namespace, name, sub

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method = request.method
        query = dict(request.query)
        is_watch = method == "GET" and _truthy(query.get("watch"))
        content_type = request.headers.get("Content-Type", "")
        raw = await request.read()
        body: Any = None
        body_error = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError as exc:
                body_error = str(exc)
        discovery = self._discovery(method, request.path)
        if discovery is not None:
            return discovery
        try:
            rt, namespace, name, sub = self._route(request.path)
        except ApiError as exc:
            self._record(request, query, content_type, body, is_watch, "", "", None, None, None)
            if request.path in ("/version", "/healthz", "/readyz", "/livez"):
                return self._meta_endpoint(request.path)
            return self._error(exc)
        verb = _verb(method, name, is_watch)
        self._record(
            request, query, content_type, body, is_watch, verb, rt.plural, namespace, name, sub
        )

        if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
            return self._error(ApiError(401, "Unauthorized", "Unauthorized"))
        fault = next((f for f in self._faults if f.matches(method, request.path, is_watch)), None)
        if fault is not None:
            fault.remaining -= 1
            if fault.delay:
                self.delayed_now += 1
                self.max_delayed = max(self.max_delayed, self.delayed_now)
                try:
                    await asyncio.sleep(fault.delay)
                finally:
                    self.delayed_now -= 1
            if fault.drop:
                if request.transport is not None:
                    request.transport.close()
                return web.Response(status=500)
            if fault.status:
                if fault.body is not None:
                    return web.json_response(fault.body, status=fault.status, headers=fault.headers)
                reason = _GENERIC_REASONS.get(fault.status, "Unknown")
                details = _details(rt, name) if name else None
                if fault.status == 429:
                    details = {**(details or {}), "retryAfterSeconds": 1}
                return self._error(
                    ApiError(
                        fault.status,
                        reason,
                        f"injected {fault.status} {reason}",
                        details,
                        headers=fault.headers,
                    )
                )
        try:
            if body_error is not None and method in ("POST", "PUT", "PATCH"):
                raise bad_request(f"the body of the request is not valid JSON: {body_error}")
            if is_watch:
                return await self._watch(request, rt, namespace, query)
            if verb == "list":
                return web.json_response(self._list(rt, namespace, query))
            if verb == "create" and name is None:
                obj, _ = self._http_create(rt, namespace, body)
                return web.json_response(obj, status=201)
            if name is None or verb not in ("get", "update", "patch", "delete"):
                raise ApiError(
                    405,
                    "MethodNotAllowed",
                    f"the server does not allow this method on {request.path}",
                )
            if verb == "get":
                return web.json_response(self._get_or_404(rt, namespace, name, sub))
            if verb == "update":
                obj, created = self._http_update(rt, namespace, name, sub, body)
                return web.json_response(obj, status=201 if created else 200)
            if verb == "patch":
                obj = self._http_patch(rt, namespace, name, sub, body, content_type)
                return web.json_response(obj)
            return web.json_response(self._http_delete(rt, namespace, name, body))
        except ApiError as exc:
            return self._error(exc)

    def _record(
        self,
        request: web.Request,
        query: dict[str, str],
        content_type: str,
        body: Any,
        is_watch: bool,
        verb: str,
        plural: str,
        namespace: str | None,
        name: str | None,
        sub: str | None,
    ) -> None:
        self.requests.append(
            RecordedRequest(
                method=request.method,
                path=request.path,
                query=query,
                content_type=content_type.split(";")[0].strip(),
                body=body,
                is_watch=is_watch,
                verb=verb,
                plural=plural,
                namespace=namespace,
                name=name,
                subresource=sub,
                authorization=request.headers.get("Authorization"),
            )
        )

    @staticmethod
    def _error(exc: ApiError) -> web.Response:
        return web.json_response(exc.status(), status=exc.code, headers=exc.headers)

    @staticmethod
    def _meta_endpoint(path: str) -> web.Response:
        if path == "/version":
            return web.json_response(
                {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake", "platform": "fake"}
            )
        return web.Response(text="ok")

    def _selected(
        self, rt: ResourceType, namespace: str | None, query: dict[str, str]
    ) -> list[JsonObj]:
        labels = parse_label_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(query.get("fieldSelector", ""), rt)
        return [
            obj
            for (ns, _), obj in sorted(self._store.get(rt.store, {}).items())
            if (namespace is None or ns == namespace) and labels(_labels(obj)) and fields(obj)
        ]

    def _list(self, rt: ResourceType, namespace: str | None, query: dict[str, str]) -> JsonObj:
        token = query.get("continue", "")
        if token:
            # A continued list pages through the snapshot taken by its first request.
            if token not in self._continues:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a "
                    "consistent list result. You can start a new list without the continue "
                    "parameter.",
                )
            items, rv = self._continues.pop(token)
        else:
            items, rv = self._selected(rt, namespace, query), self._rv
        items = [_view(rt, o) for o in items]
        if not rt.custom:
            # Built-in list items carry no kind/apiVersion on the wire; CRD items do.
            items = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        meta: JsonObj = {"resourceVersion": str(rv)}
        limit = int(query.get("limit") or 0)
        if 0 < limit < len(items):
            rest = items[limit:]
            items = items[:limit]
            next_token = secrets.token_urlsafe(12)
            self._continues[next_token] = (rest, rv)
            meta["continue"] = next_token
            meta["remainingItemCount"] = len(rest)
        return {
            "apiVersion": rt.api_version,
            "kind": f"{rt.kind}List",
            "metadata": meta,
            "items": items,
        }

    def _get_or_404(
        self, rt: ResourceType, namespace: str | None, name: str, sub: str | None
    ) -> JsonObj:
        obj = self._store.get(rt.store, {}).get(self._key(rt, namespace, name))
        if obj is None:
            raise not_found(rt, name)
        if sub == "scale":
            return self._scale_of(rt, obj)
        return _view(rt, obj)

    def _scale_of(self, rt: ResourceType, obj: JsonObj) -> JsonObj:
        assert rt.scale_spec_path is not None
        meta = obj["metadata"]
        status: JsonObj = {"replicas": int(_dig(obj, rt.scale_status_path or ()) or 0)}
        selector = _dig(obj, rt.scale_selector_path or ())
        if selector:
            status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
                "creationTimestamp": meta["creationTimestamp"],
            },
            "spec": {"replicas": int(_dig(obj, rt.scale_spec_path) or 0)},
            "status": status,
        }

    def _check_body(self, rt: ResourceType, namespace: str | None, body: Any) -> JsonObj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a JSON object")
        body = copy.deepcopy(body)
        if (
            body.get("apiVersion", rt.api_version) != rt.api_version
            or body.get("kind", rt.kind) != rt.kind
        ):
            raise bad_request(
                f"the API version in the data ({body.get('apiVersion')}) and kind "
                f"({body.get('kind')}) do not match {rt.api_version} {rt.kind}"
            )
        body["apiVersion"], body["kind"] = rt.api_version, rt.kind
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            meta = body["metadata"] = {}
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace "
                    "sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        # Drop null values the client serializer may emit for unset optional fields.
        for k in [k for k, v in meta.items() if v is None]:
            del meta[k]
        return body

    def _http_create(
        self, rt: ResourceType, namespace: str | None, body: Any
    ) -> tuple[JsonObj, bool]:
        obj = self._check_body(rt, namespace, body)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        name = meta.get("name") or ""
        if not name:
            raise invalid(rt, "", "metadata.name: Required value: name or generateName is required")
        if meta.get("resourceVersion"):
            raise ApiError(
                500, "InternalError", "resourceVersion should not be set on objects to be created"
            )
        if self._key(rt, namespace, name) in self._store.get(rt.store, {}):
            raise already_exists(rt, name)
        self._validate(rt, obj)
        for system in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            meta.pop(system, None)
        if rt.status_subresource and rt.custom:
            obj.pop("status", None)  # CRDs with /status drop status on create
        created = self._create(rt, _unview(rt, obj), keep_system_fields=False)
        return _view(rt, created), True

    def _validate(self, rt: ResourceType, obj: JsonObj) -> None:
        """What the real server rejects among what our daemon writes (not a full schema)."""

        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        for field_name in ("labels", "annotations"):
            mapping = meta.get(field_name)
            if mapping is None:
                continue
            if not isinstance(mapping, dict) or not all(
                isinstance(v, str) for v in mapping.values()
            ):
                raise bad_request(
                    f"json: cannot unmarshal into Go struct field ObjectMeta.metadata."
                    f"{field_name} of type string"
                )
        for key, value in (meta.get("labels") or {}).items():
            if not _VALUE_RE.match(value) or len(value) > 63:
                raise invalid(
                    rt,
                    name,
                    f'metadata.labels: Invalid value: "{value}": a '
                    f"valid label must be 63 characters or less ({key})",
                )
        if len(json.dumps(meta.get("annotations") or {})) > 256 * 1024:
            raise invalid(
                rt, name, "metadata.annotations: Too long: must have at most 262144 bytes"
            )
        if name and not _NAME_RE.match(name):
            raise invalid(
                rt,
                name,
                f'metadata.name: Invalid value: "{name}": a lowercase '
                "RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.'",
            )
        for path, expected in _TYPED_PATHS.get(rt.plural, ()):
            for where, value in _walk(obj, path):
                if value is None:
                    continue
                if not _is_type(value, expected):
                    raise invalid(
                        rt,
                        name,
                        f'{where}: Invalid value: "{type(value).__name__}": '
                        f"{where} in body must be of type {expected}: "
                        f"{json.dumps(value)}",
                    )
        if rt.store == "events":
            involved = obj.get("involvedObject") or obj.get("regarding") or {}
            ns = involved.get("namespace")
            if ns and ns != meta.get("namespace"):
                raise invalid(
                    rt,
                    name,
                    "involvedObject.namespace: Invalid value: "
                    f'"{ns}": does not match event.namespace',
                )
        if rt.group == "events.k8s.io":
            # The events.k8s.io API insists on the fields its consumers index by.
            for required in (
                "eventTime",
                "reportingController",
                "reportingInstance",
                "action",
                "reason",
            ):
                if not obj.get(required):
                    raise invalid(rt, name, f"{required}: Required value")
            if obj.get("type") not in ("Normal", "Warning"):
                raise invalid(
                    rt, name, 'type: Unsupported value: supported values: "Normal", "Warning"'
                )
            if len(str(obj.get("note") or "").encode()) > 1024:
                raise invalid(rt, name, "note: Too long: must have at most 1024 bytes")

    def _http_update(
        self, rt: ResourceType, namespace: str | None, name: str, sub: str | None, body: Any
    ) -> tuple[JsonObj, bool]:
        key = self._key(rt, namespace, name)
        current = self._store.get(rt.store, {}).get(key)
        if sub == "scale":
            return self._update_scale(rt, key, current, name, body), False
        obj = self._check_body(rt, namespace, body)
        meta = obj["metadata"]
        if meta.get("name", name) != name:
            raise bad_request("the name of the object does not match the name on the URL")
        meta["name"] = name
        if current is None:
            if rt.allow_create_on_update and sub is None:
                meta.pop("resourceVersion", None)
                self._validate(rt, obj)
                created = self._create(rt, _unview(rt, obj), keep_system_fields=False)
                return _view(rt, created), True
            raise not_found(rt, name)
        if meta.get("uid") and meta["uid"] != current["metadata"]["uid"]:
            raise conflict(rt, name)  # the real message: "Precondition failed: UID ..."
        rv = meta.get("resourceVersion")
        if not rv:
            if not rt.allow_unconditional_update:
                raise invalid(
                    rt,
                    name,
                    "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
                )
        elif rv != current["metadata"]["resourceVersion"]:
            raise conflict(rt, name)
        self._validate(rt, obj)
        return _view(rt, self._update(rt, key, current, _unview(rt, obj), sub)), False

    def _update_scale(
        self, rt: ResourceType, key: Key, current: JsonObj | None, name: str, scale: Any
    ) -> JsonObj:
        if current is None:
            raise not_found(rt, name)
        if not isinstance(scale, dict):
            raise bad_request("the body of the request must be a JSON object")
        rv = (scale.get("metadata") or {}).get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise conflict(rt, name)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid(rt, name, "spec.replicas: Invalid value: must be a non-negative integer")
        assert rt.scale_spec_path is not None
        new = copy.deepcopy(current)
        _set_path(new, rt.scale_spec_path, replicas)
        return self._scale_of(rt, self._update(rt, key, current, new, None))

    def _http_patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        sub: str | None,
        patch: Any,
        content_type: str,
    ) -> JsonObj:
        media = content_type.split(";")[0].strip().lower()
        supported = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
        if not rt.custom:
            supported.append("application/strategic-merge-patch+json")
        if media not in supported or media == "application/apply-patch+yaml":
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(supported)}",
            )
        key = self._key(rt, namespace, name)
        current = self._store.get(rt.store, {}).get(key)
        if current is None:
            raise not_found(rt, name)
        base = self._scale_of(rt, current) if sub == "scale" else _view(rt, current)
        try:
            if media == "application/json-patch+json":
                patched = json_patch(base, patch)
            else:
                if not isinstance(patch, dict):
                    raise bad_request("a merge patch must be a JSON object")
                patched = merge_patch(base, patch)
        except JsonPatchDecodeError as exc:
            raise bad_request(str(exc)) from None
        except JsonPatchError as exc:
            raise ApiError(
                422,
                "Invalid",
                f"the server rejected our request due to an error in our request: {exc}",
            ) from None
        if not isinstance(patched, dict):
            raise bad_request("a patch must leave an object")
        rv = (patched.get("metadata") or {}).get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise conflict(rt, name)
        if sub == "scale":
            return self._update_scale(rt, key, current, name, patched)
        patched.setdefault("metadata", {})
        self._validate(rt, patched)
        return _view(rt, self._update(rt, key, current, _unview(rt, patched), sub))

    def _http_delete(
        self, rt: ResourceType, namespace: str | None, name: str, options: Any
    ) -> JsonObj:
        key = self._key(rt, namespace, name)
        current = self._store.get(rt.store, {}).get(key)
        if current is None:
            raise not_found(rt, name)
        pre = (options or {}).get("preconditions") or {} if isinstance(options, dict) else {}
        if (
            pre.get("resourceVersion")
            and pre["resourceVersion"] != current["metadata"]["resourceVersion"]
        ):
            raise conflict(rt, name)
        if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
            raise conflict(rt, name)
        if current["metadata"].get("finalizers"):
            if current["metadata"].get("deletionTimestamp"):
                return _view(rt, current)
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = _rfc3339(self._clock())
            rv = self._bump()
            marked["metadata"]["resourceVersion"] = str(rv)
            self._store[rt.store][key] = marked
            self._record_event(rt, "MODIFIED", marked, current, rv)
            return _view(rt, marked)
        return _view(rt, self._remove(rt, key))

    async def _watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None, query: dict[str, str]
    ) -> web.StreamResponse:
        labels = parse_label_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(query.get("fieldSelector", ""), rt)
        watcher = _Watcher(
            rt, namespace, labels, fields, bookmarks=_truthy(query.get("allowWatchBookmarks"))
        )
        timeout = float(query.get("timeoutSeconds") or self.default_watch_timeout)
        rv_text = query.get("resourceVersion", "")
        initial: list[JsonObj] = []
        expired: JsonObj | None = None
        if rv_text in ("", "0"):
            # "Start at most recent": synthetic ADDED for the current state, then live.
            initial = [{"type": "ADDED", "object": o} for o in self._selected(rt, namespace, query)]
        else:
            try:
                since = int(rv_text)
            except ValueError:
                raise bad_request(f"invalid resource version: {rv_text!r}") from None
            floor = self._floor.get(rt.store, 0)
            if since < floor:
                expired = status_body(
                    410, "Expired", f"too old resource version: {since} ({floor})"
                )
            else:
                for ev in self._history.get(rt.store, ()):
                    if ev.rv > since:
                        out = watcher.event_for(ev.type, ev.obj, ev.old)
                        if out is not None:
                            initial.append(out)
        # Registered before the first await, so no write can slip between replay and live.
        if expired is None:
            self._watchers.add(watcher)
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        try:
            await self._flowing(rt.plural)
            await response.prepare(request)
            if expired is not None:
                await _write_event(response, {"type": "ERROR", "object": expired})
                await response.write_eof()
                return response
            for event in initial:
                await _write_event(response, event)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    # not wait_for: on 3.11 it can swallow the cancel of server shutdown
                    async with asyncio.timeout(remaining):
                        item = await watcher.queue.get()
                except TimeoutError:
                    break
                await self._flowing(rt.plural)
                if item == _CLOSE:
                    break
                if item == _ABORT:
                    if request.transport is not None:
                        request.transport.close()
                    return response
                if isinstance(item, bytes):
                    await response.write(item + b"\n")
                    continue
                await _write_event(response, item)
            await response.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            self._watchers.discard(watcher)
        return response


async def _write_event(response: web.StreamResponse, event: JsonObj) -> None:
    await response.write(json.dumps(event, separators=(",", ":")).encode() + b"\n")


def _verb(method: str, name: str | None, is_watch: bool) -> str:
    if method == "GET":
        if is_watch:
            return "watch"
        return "get" if name else "list"
    return {
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }.get(method, "")


def _spec_of(obj: JsonObj, rt: ResourceType) -> JsonObj:
    """What counts for metadata.generation: everything but metadata (and status if /status)."""

    skip = {"metadata", "status"} if rt.status_subresource else {"metadata"}
    return {k: v for k, v in obj.items() if k not in skip}


def job(name: str, namespace: str = "ns1", replicas: int = 2, **labels: str) -> JsonObj:
    """A bare PyTorchJob: just what the server and the caches look at."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": replicas}}},
    }


async def eventually(
    predicate: Callable[[], Any],
    within: float = 5.0,
    interval: float = 0.01,
    message: str = "condition",
) -> Any:
    """Poll `predicate` until truthy (returns its value) or raise AssertionError.

    For waiting on a real server/daemon reaching a state; not for timing behaviour.
    """

    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {within}s waiting for {message}")
        await asyncio.sleep(interval)
