"""parse.delta.Assembler: assembling from what changed gives what assembling whole
gives, after any sequence of changes to pods, jobs, nodes and PodGroups; and a job or
node that did not change is handed on as the very object it was."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from builders import podgroup, pytorchjob
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.model import Node
from autoscaler.core.options import default_read_options
from autoscaler.core.shapes import HostPort
from autoscaler.read.parse import Records, assemble, decoders, delta
from autoscaler.read.parse.delta import Assembler
from autoscaler.read.records import Changes, GroupRecord, JobRecord, PodUse

DECODE = decoders(default_read_options())
JOBS = 5
NODES = ("n0", "n1", "n2", "n3")


def _job(i: int, variant: int) -> JobRecord:
    raw = pytorchjob(
        f"job-{i}",
        "ml",
        queue="team-a" if variant % 3 else "team-b",
        replicas=1 + variant % 3,
        active=1 + variant % 3,
        max_replicas=4 + variant % 2,
        gpus=1 + variant % 2,
    )
    raw["metadata"]["uid"] = f"uid-ml-job-{i}"
    record = DECODE["PyTorchJob"](raw)
    assert isinstance(record, JobRecord)
    return record


def _group(name: str, variant: int, owner: str) -> GroupRecord:
    raw = podgroup(
        name,
        "ml",
        queue="team-a" if variant % 2 else "team-b",
        phase="Pending" if name.startswith("wait") and variant % 4 else "Running",
        gpus=1 + variant % 3,
        owner=owner,
    )
    record = DECODE["PodGroup"](raw)
    assert isinstance(record, GroupRecord)
    return record


def _pod(variant: int) -> PodUse:
    owner = variant % (JOBS + 1)
    node = ("", *NODES, "elsewhere")[variant % 6]
    gpus = variant % 3
    group = ("", f"ml/job-{variant % JOBS}", f"ml/wait-{variant % 2}")[variant % 3]
    return PodUse(
        node,
        gpus,
        requests=(("cpu", 1000 * (1 + variant % 4)), ("nvidia.com/gpu", 1000 * gpus)),
        ports=(HostPort(8000 + variant % 2),) if variant % 7 == 0 else (),
        owner=("ml", "PyTorchJob", f"job-{owner}", "worker") if owner < JOBS else None,
        index=variant % 4 - (1 if variant % 5 == 0 else 0),
        group=group,
    )


@dataclass
class World:
    """What the caches hold, and what changed since the last read (as they report it)."""

    jobs: dict[tuple[str, str], JobRecord] = field(default_factory=dict)
    groups: dict[tuple[str, str], GroupRecord] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    pods: dict[tuple[str, str], PodUse] = field(default_factory=dict)
    changed_jobs: set[tuple[str, str, str]] = field(default_factory=set)
    changed_nodes: set[str] = field(default_factory=set)
    changed_pods: dict[tuple[str, str], Any] = field(default_factory=dict)
    changed_groups: bool = False

    def apply(self, op: str, a: int, b: int) -> None:
        if op == "pod":
            key = ("ml", f"p{a % 14}")
            self.changed_pods.setdefault(key, self.pods.get(key))
            if b % 6 == 0:
                self.pods.pop(key, None)
            else:
                self.pods[key] = _pod(b)
        elif op == "job":
            key = ("ml", f"job-{a % JOBS}")
            self.changed_jobs.add(("ml", "PyTorchJob", key[1]))
            if b % 9 == 0:
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = _job(a % JOBS, b)
        elif op == "node":
            name = NODES[a % len(NODES)]
            self.changed_nodes.add(name)
            if b % 7 == 0:
                self.nodes.pop(name, None)
            else:
                self.nodes[name] = Node(name, 8 if b % 2 else 4, schedulable=b % 5 != 0)
        elif op == "group":
            name = f"wait-{a % 3}" if a % 2 else f"job-{a % JOBS}"
            self.groups[("ml", name)] = _group(name, b, f"job-{b % (JOBS + 1)}")
            self.changed_groups = True

    def read(self) -> tuple[Records, Changes]:
        pods = sorted(self.pods.items())
        records = Records(
            jobs=tuple(r for _, r in sorted(self.jobs.items())),
            groups=tuple(r for _, r in sorted(self.groups.items())),
            nodes=tuple(n for _, n in sorted(self.nodes.items())),
            pods=tuple(p for _, p in pods),
            pods_known=True,
            job_kinds=("PyTorchJob",),
            pod_keys=tuple(k for k, _ in pods),
        )
        changes = Changes(
            frozenset(self.changed_jobs),
            frozenset(self.changed_nodes),
            dict(self.changed_pods),
            self.changed_groups,
        )
        self.changed_jobs, self.changed_nodes, self.changed_pods = set(), set(), {}
        self.changed_groups = False
        return records, changes


def _world() -> World:
    world = World()
    for i in range(JOBS):
        world.apply("job", i, 1)
        world.apply("group", 2 * i, i)
    for i, _ in enumerate(NODES):
        world.apply("node", i, 1)
    for i in range(10):
        world.apply("pod", i, i + 1)
    for i in range(3):
        world.apply("group", 2 * i + 1, i + 1)
    return world


OPS = st.lists(
    st.tuples(
        st.sampled_from(("pod", "pod", "pod", "job", "node", "group", "read")),
        st.integers(0, 50),
        st.integers(0, 50),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_assembled_from_changes_is_the_whole_assembly(ops: list[tuple[str, int, int]]) -> None:
    world = _world()
    assembler = Assembler()
    records, _ = world.read()
    assert assembler.assemble(records) == assemble(records)
    for op, a, b in [*ops, ("read", 0, 0)]:
        if op != "read":
            world.apply(op, a, b)
            continue
        records, changes = world.read()
        assert assembler.assemble(records, changes) == assemble(records)


def test_what_did_not_change_is_the_same_object(monkeypatch: pytest.MonkeyPatch) -> None:
    """One pod added on n1 (a worker of job-1): every other job and node is the object
    the last assembly handed on, and nothing is assembled whole."""
    world = _world()
    world.pods = {("ml", "a"): _pod(7), ("ml", "b"): _pod(2), ("ml", "c"): _pod(14)}
    whole = delta.assemble
    assembler = Assembler()
    records, _ = world.read()
    before = assembler.assemble(records)
    world.apply("pod", 0, 0)  # ("ml", "p0") added
    key = ("ml", "p0")
    world.changed_pods = {key: None}
    world.pods[key] = PodUse(
        "n1", 1, (("nvidia.com/gpu", 1000),), owner=("ml", "PyTorchJob", "job-1", "worker"), index=3
    )
    records, changes = world.read()
    wholes: list[Records] = []
    monkeypatch.setattr(delta, "assemble", lambda r: wholes.append(r) or whole(r))
    after = assembler.assemble(records, changes)
    assert after == assemble(records)
    changed_jobs = [j.ref.name for j, k in zip(after.jobs, before.jobs, strict=True) if j is not k]
    assert changed_jobs == ["job-1"]
    changed_nodes = [
        n.name for n, m in zip(after.nodes or (), before.nodes or (), strict=True) if n is not m
    ]
    assert changed_nodes == ["n1"]
    # nothing changed: the very same jobs
    records, changes = world.read()
    assert assembler.assemble(records, changes).jobs is after.jobs
    assert wholes == []


def _cache() -> Any:
    from autoscaler.core.resources import POD
    from autoscaler.read.kube.cache import _Cache
    from autoscaler.settings import Settings

    def decode(obj: dict[str, Any]) -> Any:
        value = obj.get("v")
        return None if value == 0 else (obj["metadata"]["name"], value)

    return _Cache(
        POD, None, "", None, Settings().kube_options(), lambda *a: None, lambda n: 0.0, 100, decode
    )  # type: ignore[arg-type]


CACHE_OPS = st.lists(
    st.tuples(
        st.sampled_from(("ADDED", "MODIFIED", "DELETED", "read", "read", "take", "relist")),
        st.integers(0, 40),
        st.integers(0, 3),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(CACHE_OPS)
def test_a_cache_keeps_its_sorted_records_and_what_changed(
    ops: list[tuple[str, int, int]],
) -> None:
    """keyed() is always the records sorted by key (patched or sorted anew), and
    take_changed() each key changed since the last take with its record before then."""
    cache = _cache()
    for i in range(40):  # a cache of 40 objects: a few changed are patched in
        cache._apply(
            "ADDED", {"metadata": {"namespace": f"ns{i % 2}", "name": f"p{i}"}, "v": 1}, 10
        )
    cache.keyed()
    before: dict[tuple[str, str], Any] = {}  # what each changed key held at the last take
    taken = False
    for op, i, v in ops:
        key = (f"ns{i % 2}", f"p{i}")
        obj = {"metadata": {"namespace": key[0], "name": key[1]}, "v": v}
        if op in ("ADDED", "MODIFIED", "DELETED"):
            held = cache.items.get(key)
            cache._apply(op, obj, 10)
            if cache.items.get(key) != held or (key in cache.items) != (held is not None):
                before.setdefault(key, held)
        elif op == "relist":
            fresh = {k: r for k, r in cache.items.items() if k != key}
            cache._install(fresh, set(fresh), "1")
            taken = False
        elif op == "read":
            records, keys = cache.keyed()
            kept = sorted((k, r) for k, r in cache.items.items() if r is not None)
            assert keys == tuple(k for k, _ in kept)
            assert records == tuple(r for _, r in kept)
        else:
            changed = cache.take_changed()
            if taken:
                assert changed is not None
                now = {k: b for k, b in changed.items() if b != cache.items.get(k)}
                assert now == {k: b for k, b in before.items() if b != cache.items.get(k)}
            else:
                assert changed is None  # the first take, or after a relist: maybe all
            before, taken = {}, True
