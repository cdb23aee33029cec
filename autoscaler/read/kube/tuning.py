"""The garbage collector tuned for a daemon whose caches hold a record per object.

A sync allocates a record per object and keeps it; a steady cycle allocates tens of
thousands of short-lived objects. Both process-wide settings live here, and only the
daemon calls them (before its caches list, once they have synced).
"""

from __future__ import annotations

import gc

import structlog

from autoscaler.core.heap import release_free_memory

__all__ = ["GC_GEN0_THRESHOLD", "settle_gc", "sync_gc"]

log = structlog.get_logger("autoscaler.read.kube.tuning")

GC_GEN0_THRESHOLD = 50_000


def sync_gc() -> None:
    """Tune the collector for the sync (the daemon calls it before its caches list; it
    changes the whole process, so nothing else does). A sync allocates a record per
    object and keeps it: with the default first-generation threshold (700) the collector
    ran ~250 times over the records of 17k objects and took ~12% of the sync's CPU
    (measured at 10k jobs); at 50,000 it runs a few times.
    What is freed by reference counting (nearly everything: records form no cycles) is
    freed as before."""
    first, second, third = gc.get_threshold()
    gc.set_threshold(max(first, GC_GEN0_THRESHOLD), second, third)


def settle_gc() -> None:
    """Tune the collector for a daemon whose caches have synced (the daemon calls it once
    they have; it changes the whole process, so nothing else does). Measured on the real API
    server (docs/benchmarks.md, [structure] #21): at 20k jobs the collector took 119 of a
    steady cycle's 253 ms, walking the caches' records again and again. What the sync
    read lives as long as the process (records are replaced, never mutated, and form no
    cycles): gc.freeze() takes it out of the collector's walks. A cycle then allocates
    tens of thousands of short-lived objects (the plan, its log lines), nearly all freed
    by reference counting: a first-generation threshold of 50,000 instead of 700 stops
    the collector from running every few hundred of them (`sync_gc`)."""
    gc.freeze()
    sync_gc()
    # the sync's pages and the dicts they were decoded into are gone: what glibc kept of
    # them (~17 MiB at 10k jobs, 26k nodes, 50k pods) goes back to the system
    release_free_memory()
    log.debug("kube.gc_settled", frozen=gc.get_freeze_count(), threshold=gc.get_threshold())
