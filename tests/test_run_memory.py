"""Runs of finished jobs remembered after the API stops listing them (run_memory.py), and
the planner weighing swaps by them as by the runs it lists."""

from __future__ import annotations

from dataclasses import replace

from builders import NOW, ago, ej, gang, policy, snap
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.model import ClusterSnapshot, ObjectRef, UnmanagedJob
from autoscaler.core.reasons import Reason
from autoscaler.plan.planner import plan
from autoscaler.run.run_memory import RunMemory


def done(name: str, run: float, ended: float = 100_000, queue: str = "q") -> UnmanagedJob:
    """A finished job of `queue` as parse.py reads it: it ran `run` seconds and
    completed `ended` seconds ago."""
    return UnmanagedJob(
        ObjectRef("ml", name),
        queue,
        Reason.FINISHED,
        "job has condition Succeeded",
        started=ago(ended + run),
        completed=ago(ended),
    )


def listing(*jobs: UnmanagedJob) -> ClusterSnapshot:
    return ClusterSnapshot(queues={}, unmanaged=jobs)


def runs(snapshot: ClusterSnapshot) -> list[tuple[str, float]]:
    return sorted((r.ref.name, r.seconds) for r in snapshot.finished_runs)


def test_what_is_listed_is_not_handed_over_again_and_what_is_deleted_is():
    memory = RunMemory()
    first = listing(done("a", 100), done("b", 200))
    assert memory.remember(first) is first  # all listed: nothing to add
    assert runs(memory.remember(listing(done("b", 200)))) == [("a", 100.0)]
    assert runs(memory.remember(listing())) == [("a", 100.0), ("b", 200.0)]
    assert len(memory) == 2


def test_only_finished_jobs_with_a_run_are_remembered():
    memory = RunMemory()
    running = UnmanagedJob(ObjectRef("ml", "r"), "q", Reason.INVALID_SPEC, "bad")
    no_end = UnmanagedJob(
        ObjectRef("ml", "n"), "q", Reason.FINISHED, "done", started=ago(10), completed=None
    )
    backwards = UnmanagedJob(
        ObjectRef("ml", "x"), "q", Reason.FINISHED, "done", started=ago(10), completed=ago(20)
    )
    memory.remember(listing(running, no_end, backwards))
    assert len(memory) == 0


def test_the_latest_runs_of_each_queue_are_kept():
    memory = RunMemory(per_queue=2)
    memory.remember(listing(done("old", 1, ended=300), done("mid", 2, ended=200)))
    memory.remember(listing(done("new", 3, ended=100), done("older", 4, ended=400)))
    memory.remember(listing(done("other", 5, ended=500, queue="p")))  # its own queue
    assert runs(memory.remember(listing())) == [("mid", 2.0), ("new", 3.0), ("other", 5.0)]


def test_a_job_created_again_under_its_name_is_another_run():
    memory = RunMemory()
    memory.remember(listing(done("a", 100, ended=5000)))
    again = memory.remember(listing(done("a", 300, ended=10)))
    assert runs(again) == [("a", 100.0)]  # the first run, gone; the second listed


def _cycles(most: int) -> st.SearchStrategy[list[list[tuple[int, str, int]]]]:
    """Cycles of listed finished jobs: (job number, queue, seconds since it ended)."""
    job = st.tuples(st.integers(0, 12), st.sampled_from("qp"), st.integers(1, 50))
    return st.lists(st.lists(job, max_size=8), max_size=most)


@settings(max_examples=60, deadline=None)
@given(_cycles(8))
def test_remembered_runs_are_the_latest_not_listed(cycles):
    """Whatever jobs come and go: the runs handed over are never the listed ones, never
    more than per_queue of a queue, and each is among its queue's latest seen."""
    memory, seen = RunMemory(per_queue=3), {}
    for cycle in cycles:
        jobs = {(f"j{n}", q): done(f"j{n}", 10, ended=end, queue=q) for n, q, end in cycle}
        for job in jobs.values():
            seen[(job.ref.name, job.queue, job.completed)] = job
        out = memory.remember(listing(*jobs.values()))
        listed = {(j.ref.name, j.completed) for j in jobs.values()}
        for q in "qp":
            mine = [r for r in out.finished_runs if r.queue == q]
            assert len(mine) <= 3
            assert not {(r.ref.name, r.completed) for r in mine} & listed
            latest = sorted({c for (_, qq, c) in seen if qq == q}, reverse=True)[:3]
            assert all(r.completed >= latest[-1] for r in mine)


@settings(max_examples=60, deadline=None)
@given(_cycles(6))
def test_the_same_jobs_in_a_new_tuple_are_read_as_they_were(cycles):
    """The sources assemble a new tuple whenever any cache changed: the same job
    objects read again hand over what a memory that read them once hands over, and a
    memory fed copies after an empty listing (which keeps nothing: it only makes the
    next listing one to read) alike."""
    memory, fresh = RunMemory(per_queue=3), RunMemory(per_queue=3)
    for cycle in cycles:
        jobs = tuple(done(f"j{n}", 10 + n, ended=end, queue=q) for n, q, end in cycle)
        fresh.remember(listing())
        once = fresh.remember(listing(*[replace(j) for j in jobs]))
        assert runs(memory.remember(listing(*jobs))) == runs(once)
        assert runs(memory.remember(listing(*jobs))) == runs(once)  # a new tuple


def _swap_scene(listed=()):
    """Four 1-GPU jobs grown to 2 workers 300 s into their run, a 1-GPU gang waiting,
    nothing free, nothing declared; `listed`: finished jobs the API lists."""
    jobs = [ej(f"a{i}", min=1, max=2, replicas=2, started=ago(300)) for i in range(4)]
    jobs.append(ej("w", min=1, max=2, replicas=1, active=0, created=ago(30)))
    return snap({"q": 0}, jobs, [gang("w", 1, owner="w", created=ago(30))], list(listed))


def _deleted(snapshot, finished):
    """`snapshot` as the daemon plans it once it saw `finished` listed and then deleted."""
    memory = RunMemory()
    memory.remember(ClusterSnapshot(queues={}, unmanaged=tuple(finished)))
    return memory.remember(snapshot)


def test_runs_remembered_weigh_a_swap_as_runs_listed_do():
    finished = [done(f"d{i}", 2000) for i in range(40)]
    for scene in (_swap_scene(listed=finished), _deleted(_swap_scene(), finished)):
        p = plan(scene, policy(), NOW)
        w = next(g for g in p.gangs if g.ref.name == "w")
        assert w.reason is Reason.GANG_RECLAIM_UNPAID, w.message
        assert "(40 finished, 4 running" in w.message
    other_queue = [done(f"d{i}", 2000, queue="p") for i in range(40)]
    p = plan(_deleted(_swap_scene(), other_queue), policy(), NOW)
    assert next(g for g in p.gangs if g.ref.name == "w").reason is Reason.GANG_COVERED


def test_a_swap_is_weighed_by_the_latest_runs_listed():
    """A cluster that keeps every finished job: of 500 listed, the latest 200 (by
    completion: 2000 s runs) are the evidence, not 300 older 200 s runs, which would
    make a newcomer look shorter (~920 s as the jobs ran)."""
    latest = [done(f"d{i}", 2000, ended=1000 + i) for i in range(200)]
    older = [done(f"o{i}", 200, ended=100_000 + i) for i in range(300)]
    p = plan(_swap_scene(listed=[*older[:150], *latest, *older[150:]]), policy(), NOW)
    w = next(g for g in p.gangs if g.ref.name == "w")
    assert w.reason is Reason.GANG_RECLAIM_UNPAID, w.message
    assert "(200 finished, 4 running" in w.message
    assert "newcomer runs ~4000s at its gang's size (~2000s as the queue's jobs ran" in w.message


def test_a_run_listed_in_another_queue_than_before_is_not_handed_over():
    """A finished job seen in queue p, then listed in queue q (its PodGroup gone, its
    own queue field read) where q keeps later runs only: still listed, so not handed
    over as a deleted job's run."""
    memory = RunMemory(per_queue=2)
    memory.remember(listing(done("moved", 10, ended=300, queue="p")))
    later = listing(
        done("a", 10, ended=100), done("b", 10, ended=200), done("moved", 10, ended=300)
    )
    assert runs(memory.remember(later)) == []
    assert runs(memory.remember(listing(done("a", 10, ended=100)))) == [
        ("b", 10.0),
        ("moved", 10.0),
    ]
