"""What the benchmark's API server and etcd did while a child ran: their processes' CPU
(from /proc) and the counters of their /metrics that say how each LIST was served.

`take(server)` reads both once; `delta(before, after)` is what happened in between:

- `api_cpu_s`, `etcd_cpu_s`: the kube-apiserver's and etcd's CPU seconds;
- `cache_lists`: LISTs the API server answered from its watch cache
  (`apiserver_cache_list_total`), `storage_lists`: from etcd
  (`apiserver_storage_list_total`), each by resource where any were;
- `consistent_fallbacks`: consistent reads the watch cache could not serve in time and
  sent to etcd (`apiserver_watch_cache_consistent_read_total{fallback="true"}`);
- `consistency_checks`: the server's own checks of a watch cache against etcd
  (`apiserver_storage_consistency_checks_total`; each reads a whole collection from
  both);
- `gc_cycles`: the API server's Go collections completed, `gc_cpu_s` the time its
  collector took by the Go runtime's account (a collection started is counted as it
  goes), `heap_goal_mib` / `heap_live_mib` after.

[placement] #27, fifth round (docs/benchmarks.md): which mode the server served a
child's LISTs in.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')
_COUNTERS = {
    "apiserver_cache_list_total": "cache_lists",
    "apiserver_storage_list_total": "storage_lists",
    "apiserver_storage_list_fetched_objects_total": "storage_fetched",
}


def cpu_seconds(pid: int) -> float:
    """A process's user + system CPU seconds so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Target:
    """The benchmark's API server and etcd: where to read their metrics and CPU."""

    url: str
    token: str
    ca_file: str
    api_pid: int
    etcd_pid: int

    @classmethod
    def of(cls, server: Any) -> Target:
        """Of a running `kubeserver.EnvTest`."""
        return cls(server.url, server.token, str(server.ca_file), server._api.pid, server._etcd.pid)

    def to_env(self) -> dict[str, str]:
        """For a child process (`from_env`)."""
        return {ENV: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls) -> Target | None:
        found = os.environ.get(ENV)
        return cls(**json.loads(found)) if found else None


ENV = "BENCH_SERVER"


def _get(target: Target, path: str, timeout: float = 30) -> bytes:
    req = urllib.request.Request(target.url + path)
    req.add_header("Authorization", f"Bearer {target.token}")
    context = ssl.create_default_context(cafile=target.ca_file)
    with urllib.request.urlopen(req, context=context, timeout=timeout) as resp:
        data: bytes = resp.read()
    return data


def _metrics(target: Target) -> dict[str, float]:
    text = _get(target, "/metrics").decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        found = _SAMPLE.match(line)
        if not found:
            continue
        name, labels, value = found.groups()
        tags = dict(_LABEL.findall(labels or ""))
        if name in _COUNTERS:
            what = tags.get("resource_prefix") or tags.get("resource") or "?"
            key = f"{_COUNTERS[name]}:{what.rsplit('/', 1)[-1]}"
            out[key] = out.get(key, 0.0) + float(value)
        elif name == "apiserver_storage_consistency_checks_total":
            out["consistency_checks"] = out.get("consistency_checks", 0.0) + float(value)
        elif name == "apiserver_watch_cache_consistent_read_total":
            key = f"consistent_{'fallbacks' if tags.get('fallback') == 'true' else 'cache'}"
            out[key] = out.get(key, 0.0) + float(value)
        elif name in _GAUGES:
            out[name] = float(value)
    return out


_GAUGES = (
    "go_gc_cycles_total_gc_cycles_total",
    "go_gc_heap_goal_bytes",
    "go_gc_heap_live_bytes",
    # the Go runtime's own account of its processors' time (from wall time, not the
    # system's CPU clock: an estimate where other processes compete for the cores)
    "go_cpu_classes_gc_total_cpu_seconds_total",
)


def take(target: Target) -> dict[str, Any]:
    """The API server's and etcd's CPU and the counters, now."""
    return {
        "api_cpu_s": cpu_seconds(target.api_pid),
        "etcd_cpu_s": cpu_seconds(target.etcd_pid),
        "metrics": _metrics(target),
    }


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What the server did between two `take`s (see the module's doc)."""
    old, new = before["metrics"], after["metrics"]

    def by_resource(prefix: str) -> dict[str, int]:
        out = {}
        for key, value in new.items():
            if key.startswith(prefix + ":"):
                moved = int(value - old.get(key, 0.0))
                if moved:
                    out[key.split(":", 1)[1]] = moved
        return out

    cache, storage = by_resource("cache_lists"), by_resource("storage_lists")
    return {
        "api_cpu_s": round(after["api_cpu_s"] - before["api_cpu_s"], 2),
        "etcd_cpu_s": round(after["etcd_cpu_s"] - before["etcd_cpu_s"], 2),
        "cache_lists": sum(cache.values()),
        "storage_lists": sum(storage.values()),
        "storage_lists_by": storage,
        "storage_fetched": sum(by_resource("storage_fetched").values()),
        "consistent_cache": int(new.get("consistent_cache", 0) - old.get("consistent_cache", 0)),
        "consistent_fallbacks": int(
            new.get("consistent_fallbacks", 0) - old.get("consistent_fallbacks", 0)
        ),
        "consistency_checks": int(
            new.get("consistency_checks", 0) - old.get("consistency_checks", 0)
        ),
        "gc_cpu_s": round(
            new.get("go_cpu_classes_gc_total_cpu_seconds_total", 0)
            - old.get("go_cpu_classes_gc_total_cpu_seconds_total", 0),
            2,
        ),
        "gc_cycles": int(
            new.get("go_gc_cycles_total_gc_cycles_total", 0)
            - old.get("go_gc_cycles_total_gc_cycles_total", 0)
        ),
        "heap_goal_mib": round(new.get("go_gc_heap_goal_bytes", 0) / 2**20),
        "heap_live_mib": round(new.get("go_gc_heap_live_bytes", 0) / 2**20),
    }


# One object of each collection the daemon lists in pages, touched before a child (an
# annotation nothing reads): see `settle`.
_TOUCHED = (
    ("/api/v1", "pods"),
    ("/api/v1", "nodes"),
    ("/apis/kubeflow.org/v1", "pytorchjobs"),
    ("/apis/scheduling.volcano.sh/v1beta1", "podgroups"),
)
# the benchmark's server, for `settle`: its /debug/pprof (the collection), and without its
# watch caches' consistency check (DetectCacheInconsistency, on by default since 1.34):
# every 5-7.5 minutes, for each collection, the server reads it whole from its cache and
# from etcd (at 10k jobs ~95k objects decoded, ~10 s of its CPU), whenever that lands
SERVER_ARGS = ["--profiling=true", "--feature-gates=DetectCacheInconsistency=false"]


def settle(server: Any, mark: int) -> float:
    """Put the server in the same state before each child; the seconds it took.

    - A write to each paged collection (`_TOUCHED`): the watch cache serves a LIST's
      next pages from its snapshot at the first page's version, and drops every snapshot
      older than the revision etcd was compacted to (kube-apiserver compacts every 5
      minutes); a collection with no write since then has none left, and its next
      pages are read from etcd (decoded, converted and encoded again: at 10k jobs the
      child's LISTs cost the server ~4x). A live cluster writes its pods, nodes and
      jobs all the time; the loaded benchmark cluster is quiet.
    - A Go collection (`/debug/pprof/heap?gc=1`, the server started with SERVER_ARGS): at
      10k jobs the server's live heap is ~3.5 GB, a collection of it ~5 s of its CPU,
      and one landed in every other child (the LISTs of a child allocate about half
      the heap's headroom at GOGC=100). After it, at cycle_real's GOGC=200, a child's
      LISTs allocate less than the headroom.
    """
    t0 = time.perf_counter()
    for prefix, plural in _TOUCHED:
        found = server.request("GET", f"{prefix}/{plural}?limit=1")["items"]
        if not found:
            continue
        meta = found[0]["metadata"]
        where = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
        server.request(
            "PATCH",
            f"{prefix}{where}/{plural}/{meta['name']}",
            {"metadata": {"annotations": {"benchmark.example.com/settled": str(mark)}}},
            content_type="application/merge-patch+json",
        )
    _get(Target.of(server), "/debug/pprof/heap?gc=1&debug=1", timeout=300)
    return time.perf_counter() - t0
