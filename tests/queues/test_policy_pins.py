"""The policy over queues (``coddl/queues/policy.py``) pinned by hand (found by mutation testing): the
demand and floor each queue adds up, the contexts each queue's policy is asked with, the types and
cores its answer carries through, the wake-ups, a reconfiguration, and ``cut_to_fit``'s order.

A ``Fixed`` job policy (one instance per queue) hands out what a test sets and records what it saw.
Cluster.for_gpus(8, 4): 64 cores, 8 per GPU; linear curves.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from coddl.core import Cluster, JobSpec
from coddl.core.cluster import GpuType, Node
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.policies.base import Context, Policy, Shares
from coddl.queues import Queue, QueueSet
from coddl.queues.policy import QueuedPolicy, cut_to_fit
from coddl.scheduler import Scheduler

LIN = CurveTable.from_points({"lin": {k: float(k) for k in range(1, 9)}})
LAB = QueueSet((Queue("a", 4, cohort="lab", users=("ann",)), Queue("b", 4, cohort="lab", users=("bob",))))


class Book:
    """What every queue's Fixed instance reads and writes."""

    def __init__(self) -> None:
        self.gpus: dict[str, int] = {}
        self.types: dict[str, int] | None = None
        self.cpus: dict[str, int] | None = None
        self.wake: dict[str, float | None] = {}  # by the first job id of the queue's context
        self.calls: list[tuple] = []  # (ids, capacity, cpu capacity, capacity by type)
        self.wakes: list[tuple] = []  # (ids, capacity, cpu capacity)
        self.wake_types: list[list] = []  # capacity by type at each wake-up question
        self.asked: list[tuple] = []  # (what, the policy instance asked)


def fixed(book: Book, elastic: bool = True, cores: bool = False):
    class Fixed(Policy):
        name = "fixed"

        def allocate(self, ctx: Context):
            ids = list(ctx.jobs.ids)
            book.calls.append((ids, ctx.capacity, ctx.cpu_capacity, np.asarray(ctx.capacity_by_type).tolist()))
            book.asked.append(("allocate", self))
            g = np.array([book.gpus.get(j, 0) for j in ids], dtype=np.int64)
            ty = None if book.types is None else np.array([book.types.get(j, -1) for j in ids], dtype=np.int64)
            mine = book.cpus is not None and any(j in book.cpus for j in ids)  # only queues with cores set
            cp = np.array([book.cpus.get(j, 0) for j in ids], dtype=np.int64) if mine else None
            return g if ty is None and cp is None else Shares(g, ty, cp)

        def wakeup(self, ctx: Context) -> float | None:
            ids = list(ctx.jobs.ids)
            book.wakes.append((ids, ctx.capacity, ctx.cpu_capacity))
            book.wake_types.append(np.asarray(ctx.capacity_by_type).tolist())
            book.asked.append(("wakeup", self))
            return book.wake.get(ids[0]) if ids else None

        def assigns_cores(self) -> bool:
            return cores

    Fixed.elastic = elastic
    return Fixed


def job(jid: str, user: str, gpus: int, lo: int = 1, hi: int | None = None, **kw) -> JobSpec:
    return JobSpec(jid, 0.0, gpus, 1e6, "lin", min_gpus=lo, max_gpus=hi, user=user, **kw)


def queued(book: Book, queues: QueueSet = LAB, elastic: bool = True, gpus: int = 8, per_node: int = 4,
           cluster: Cluster | None = None) -> tuple[Scheduler, QueuedPolicy]:
    cls = fixed(book, elastic)
    pol = QueuedPolicy(queues, cls)
    return Scheduler(cluster or Cluster.for_gpus(gpus, per_node), pol, LIN), pol


def held(s: Scheduler) -> dict[str, int]:
    return {jid: len(g) for jid, g in s.allocation.gpus.items()}


# ---------------------------------------------------------------- what it is
def test_it_is_the_job_policy_in_queues() -> None:
    p = QueuedPolicy(LAB, lambda: make_policy("afs-p"))
    assert p.describe() == f"{make_policy('afs-p').describe()} in 3 queues"
    assert p.name == "afs-p" and p.elastic and not p.assigns_cores()
    assert QueuedPolicy(LAB, lambda: make_policy("aiturbo")).assigns_cores()
    assert not QueuedPolicy(LAB, lambda: make_policy("fifo")).elastic
    a, b = p.policy_of("a"), p.policy_of("b")
    assert a is not b and p.policy_of("a") is a and a is not p.inner  # one instance per queue, kept


# ---------------------------------------------------------------- demand and floor
def four_jobs(book: Book, elastic: bool, gpus: int = 8, per_node: int = 4,
              queues: QueueSet = LAB) -> tuple[Scheduler, QueuedPolicy]:
    s, p = queued(book, queues, elastic=elastic, gpus=gpus, per_node=per_node)
    s.submit(job("A1", "ann", 2, lo=1, hi=4), 0.0)
    s.submit(job("A2", "ann", 1, lo=1, hi=2, max_cpus=5), 0.0)
    s.submit(job("B1", "bob", 3, lo=2 if elastic else 3, hi=3, min_cpus=3), 0.0)
    s.submit(job("Z", "zed", 1, lo=1, hi=1), 0.0)
    book.gpus = {"A1": 2, "B1": 3}
    s.step(0.0)
    assert held(s) == {"A1": 2, "B1": 3}
    return s, p


def test_demand_is_what_jobs_could_use_and_the_floor_what_running_jobs_need() -> None:
    """Queues a (A1: 2 of 1..4, running; A2: 1 of 1..2, at most 5 cores), b (B1: 3 of 2..3, running,
    at least 3 cores), default (Z: 1). Elastic: demand a = 4 + 2, b 3, default 1; cores: a 4 × 8 + 5,
    b 3 × 8, default 8. Floor: the running jobs' minimums: a 1 (8 cores), b 2 (its 3 cores)."""
    s, p = four_jobs(Book(), elastic=True)
    ctx = s.context(1.0)
    q = p.queue_rows(ctx)
    assert q.tolist() == [0, 0, 1, 2]
    demand, floor = p.demand(ctx, q)
    assert demand.tolist() == [[6, 3, 1], [37, 24, 8]]
    assert floor.tolist() == [[1, 2, 0], [8, 3, 0]]
    assert demand.dtype == np.int64 and floor.dtype == np.int64


def test_a_rigid_policys_demand_and_floor_are_the_requests() -> None:
    s, p = four_jobs(Book(), elastic=False)
    ctx = s.context(1.0)
    demand, floor = p.demand(ctx, p.queue_rows(ctx))
    assert demand.tolist() == [[3, 3, 1], [21, 24, 8]]  # a: 2 × 8 + 5 cores
    assert floor.tolist() == [[2, 3, 0], [16, 3, 0]]


def test_cores_worked_out_per_gpu_are_rounded_up() -> None:
    """6 GPUs (a node of 4, one of 2: 64 cores): 32/3 cores a GPU. a wants 4 × 32/3 = 42.7 → 43 and 5;
    b 3 × 32/3 = 32 exactly (not 33); its floor 3 cores; a's floor 32/3 → 11."""
    small = QueueSet((Queue("a", 3, cohort="lab", users=("ann",)), Queue("b", 3, cohort="lab", users=("bob",))))
    s, p = four_jobs(Book(), elastic=True, gpus=6, per_node=4, queues=small)
    ctx = s.context(1.0)
    demand, floor = p.demand(ctx, p.queue_rows(ctx))
    assert demand.tolist() == [[6, 3, 1], [48, 32, 11]]
    assert floor.tolist() == [[1, 2, 0], [11, 3, 0]]
    empty = dataclasses.replace(ctx, capacity=0)  # no GPUs: no cores per GPU, only the cores asked for
    demand, floor = p.demand(empty, p.queue_rows(ctx))
    assert demand[1].tolist() == [5, 0, 0] and floor[1].tolist() == [0, 3, 0]


def test_entitlements_cap_demand_at_the_cluster() -> None:
    """One queue of everything (default, 8 GPUs): a job wanting 12 (of a 16-GPU curve) is entitled to
    the 8 there are, and its cores to the 64."""
    book = Book()
    s, p = queued(book, QueueSet())
    s.submit(job("X", "ann", 4, lo=4, hi=8), 0.0)
    s.submit(job("Y", "ann", 4, lo=4, hi=8), 0.0)
    ctx = s.context(0.0)
    assert p.entitlements(ctx, p.queue_rows(ctx)).tolist() == [[8], [64]]


# ---------------------------------------------------------------- what each queue's policy is asked
def test_each_queue_decides_on_its_entitlement_and_an_unchanged_queue_is_not_asked_again() -> None:
    """a and b own 4 each; A1 (1..4) and B1 (1..4) want 4 each: each queue's policy sees its 4 GPUs,
    32 cores; zed's default queue is entitled to nothing: Z gets 0 and its policy is never asked.
    Asked again with nothing changed, no queue's policy runs and the shares stand."""
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("B1", "bob", 1, hi=4), 0.0)
    s.submit(job("Z", "zed", 1, hi=1), 0.0)
    book.gpus = {"A1": 4, "B1": 4, "Z": 1}
    s.step(0.0)
    assert book.calls == [(["A1"], 4, 32, [4]), (["B1"], 4, 32, [4])]
    assert held(s) == {"A1": 4, "B1": 4}
    assert p._entitled.tolist() == [[4, 4, 0], [32, 32, 0]]
    book.calls.clear()
    out = p.allocate(s.context(1.0))
    assert book.calls == [] and out.gpus.tolist() == [4, 4, 0] and out.gpu_type is None and out.cpus is None
    # a speed correction of B1 is something b's policy looks at: b alone is asked
    s.set_speed("B1", 0.5)
    s.step(2.0)
    assert book.calls == [(["B1"], 4, 32, [4])]


def two_types() -> Cluster:
    return Cluster(nodes=(Node("n0", 4, "A"), Node("n1", 4, "B")), gpu_types={"A": GpuType("A"), "B": GpuType("B")})


def test_types_chosen_by_one_queue_leave_the_rest_of_that_type_to_the_next() -> None:
    """Types A and B, 4 GPUs each. a's policy puts A1 on 2 GPUs of A and A0 on 1: b's policy sees
    A's 1 left (and B's 4, within its 4). Next, only b changes (B2 arrives): a's 3 GPUs of A still
    count."""
    book = Book()
    s, p = queued(book, cluster=two_types())
    s.submit(job("A1", "ann", 1, hi=2), 0.0)
    s.submit(job("A0", "ann", 1, hi=2), 0.0)
    s.submit(job("B1", "bob", 1, hi=4), 0.0)
    book.gpus, book.types = {"A1": 2, "A0": 1, "B1": 4}, {"A1": 0, "A0": 0, "B1": 1}
    s.step(0.0)
    assert book.calls == [(["A1", "A0"], 4, 32, [4, 4]), (["B1"], 4, 32, [1, 4])]
    assert held(s) == {"A1": 2, "A0": 1, "B1": 4}
    assert s.table.gpu_type[:3].tolist() == [0, 0, 1]
    book.calls.clear()
    s.submit(job("B2", "bob", 1, hi=4), 1.0)
    book.gpus["B2"] = 0
    s.step(1.0)
    assert book.calls == [(["B1", "B2"], 4, 32, [1, 4])]
    assert held(s) == {"A1": 2, "A0": 1, "B1": 4}


def test_cores_a_queue_leaves_to_the_placer_are_its_gpus_share() -> None:
    """a's policy sets A1's cores (10); b's sets none: B1's 3 GPUs get 3 × 8 = 24. Next, only a changes:
    b's jobs keep the cores they hold."""
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("B1", "bob", 1, hi=4), 0.0)
    book.gpus, book.cpus = {"A1": 2, "B1": 3}, {"A1": 10}
    out = p.allocate(s.context(0.0))
    assert out.gpus.tolist() == [2, 3] and out.cpus.tolist() == [10, 24] and out.gpu_type is None
    s.step(0.0)
    assert [len(s.allocation.cores[j]) for j in ("A1", "B1")] == [10, 24]
    book.cpus = {"A1": 12}
    s.set_speed("A1", 0.5)
    out = p.allocate(s.context(1.0))
    assert out.cpus.tolist() == [12, 24]
    # b's policy sets B1's cores (5) once; then only a is asked: B1 keeps its 5, not 3 GPUs' 24
    book.cpus = {"A1": 12, "B1": 5}
    s.set_speed("B1", 0.5)
    s.step(2.0)
    assert [len(s.allocation.cores[j]) for j in ("A1", "B1")] == [12, 5]
    s.set_speed("A1", 0.25)
    out = p.allocate(s.context(3.0))
    assert [c[0] for c in book.calls[-1:]] == [["A1"]] and out.cpus.tolist() == [12, 5]


def test_cores_per_gpu_left_to_the_placer_are_whole_cores() -> None:
    """6 GPUs, 64 cores: 10 whole cores a GPU (64 // 6). b's 3 GPUs get 30."""
    small = QueueSet((Queue("a", 3, cohort="lab", users=("ann",)), Queue("b", 3, cohort="lab", users=("bob",))))
    book = Book()
    s, p = queued(book, small, gpus=6)
    s.submit(job("A1", "ann", 1, hi=3), 0.0)
    s.submit(job("B1", "bob", 1, hi=3), 0.0)
    book.gpus, book.cpus = {"A1": 2, "B1": 3}, {"A1": 7}
    out = p.allocate(s.context(0.0))
    assert out.cpus.tolist() == [7, 30] and out.cpus.dtype.kind == "i"


# ---------------------------------------------------------------- wake-ups and reconfiguration
def test_the_earliest_wakeup_is_asked_only_of_queues_that_ran_and_forgotten_with_the_queue() -> None:
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("B1", "bob", 1, hi=4), 0.0)
    book.gpus, book.wake = {"A1": 4, "B1": 4}, {"A1": 50.0, "B1": 30.0}
    s.step(0.0)
    assert s.next_wakeup(0.0) == 30.0
    assert book.wakes == [(["A1"], 4, 32), (["B1"], 4, 32)]  # on each queue's entitlement
    assert s.next_wakeup(1.0) == 30.0 and len(book.wakes) == 2  # nobody ran since: not asked again
    book.calls.clear()
    s.step(29.0)  # before b's time: its answer stands
    assert book.calls == []
    s.step(30.0)  # b's time has come: b's policy runs again, a's does not
    assert book.calls == [(["B1"], 4, 32, [4])]
    book.wake["B1"] = None
    assert s.next_wakeup(30.0) == 50.0 and book.wakes[-1] == (["B1"], 4, 32)
    s.complete("B1", 31.0)
    s.step(31.0)
    assert s.next_wakeup(31.0) == 50.0  # b has no jobs: its wake-up is gone
    assert set(p._wakes) == {0} and set(p._answer) <= {0} and set(p._signature) == {0}
    book.wake["A1"] = None
    s.complete("A1", 32.0)
    s.submit(job("A2", "ann", 1, hi=4), 32.0)
    s.step(32.0)
    assert s.next_wakeup(32.0) is None


def test_a_reconfiguration_keeps_the_queues_that_stay_and_looks_every_job_up_again() -> None:
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("B1", "bob", 1, hi=4), 0.0)
    book.gpus = {"A1": 4, "B1": 4}
    s.step(0.0)
    a = p.policy_of("a")
    moved = QueueSet((Queue("a", 6, cohort="lab", users=("ann", "bob")), Queue("c", 2, cohort="lab", users=("cid",))))
    p.reconfigure(moved)
    assert set(p._policies) == {"a"} and p.policy_of("a") is a and p.queues is moved
    ctx = s.context(1.0)
    assert p.queue_rows(ctx).tolist() == [0, 0]  # bob is in a now
    assert p.quotas(8, 64).nominal[0].tolist() == [6, 2, 0]
    book.calls.clear()
    s.dirty = True
    s.step(1.0)
    assert book.calls == [(["A1", "B1"], 8, 64, [8])]  # a: its 6 and c's idle 2, asked afresh


def test_queues_are_looked_up_once_per_job_by_user_then_account() -> None:
    qs = QueueSet((Queue("a", 2, users=("ann",)), Queue("v", 2, accounts=("vc1",))))
    book = Book()
    s, p = queued(book, qs, gpus=4)
    s.submit(job("x", "ann", 1, account="vc1"), 0.0)  # its user's queue first
    s.submit(job("y", "zed", 1, account="vc1"), 0.0)
    s.submit(job("z", "zed", 1), 0.0)
    assert p.queue_rows(s.context(0.0)).tolist() == [0, 1, 2]
    for i in range(9):  # the lookup table grows with the job ids
        s.submit(job(f"n{i}", ("ann", "zed")[i % 2], 1, account="vc1"), 0.0)
    assert p.queue_rows(s.context(0.0)).tolist() == [0, 1, 2] + [0, 1] * 4 + [0]
    assert p.quotas(4, 64) is p.quotas(4, 64) and p.quotas(4, 32).nominal[1].tolist() == [16, 16, 0]


def test_partition_yields_each_queue_with_its_rows_ascending() -> None:
    part = QueuedPolicy._partition
    assert [(q, r.tolist()) for q, r in part(np.array([2, 0, 2, 1, 0]))] == [(0, [1, 4]), (1, [3]), (2, [0, 2])]
    assert [(q, r.tolist()) for q, r in part(np.array([1, 1, 1]))] == [(1, [0, 1, 2])]
    assert list(part(np.zeros(0, dtype=np.int64))) == []


# ---------------------------------------------------------------- cut_to_fit
def started(book: Book) -> Scheduler:
    """J0 (min 1) on 3 GPUs from t=0; J1 (min 2) on 4 and J2 (min 1) on 1 from t=5; J3 waiting."""
    s = Scheduler(Cluster.for_gpus(8, 4), fixed(book)(), LIN)
    for jid, lo in (("J0", 1), ("J1", 2), ("J2", 1), ("J3", 1)):
        s.submit(JobSpec(jid, 0.0, 1, 1e6, "lin", min_gpus=lo, max_gpus=4), 0.0)
    book.gpus = {"J0": 3}
    s.step(0.0)
    book.gpus = {"J0": 3, "J1": 4, "J2": 1}
    s.step(5.0)
    return s


def test_cut_to_fit_shrinks_elastic_jobs_by_the_largest_surplus_first() -> None:
    s = started(Book())
    ctx = s.context(6.0)
    g = np.array([3, 4, 1, 0])
    at = lambda cap: dataclasses.replace(ctx, capacity=cap)  # noqa: E731
    assert cut_to_fit(at(8), g, None, True).tolist() == [3, 4, 1, 0]  # fits: unchanged
    assert cut_to_fit(at(5), g, None, True).tolist() == [1, 3, 1, 0]  # J0 gives 2, J1 1 (equal surplus: J0 first)
    assert cut_to_fit(at(7), g, None, True).tolist() == [2, 4, 1, 0]
    assert g.tolist() == [3, 4, 1, 0]  # the input is not changed
    # below every minimum: jobs stop, the latest started first (J2 then J1: started together, J2
    # submitted after); 4 GPUs at minimum need one stop: J2
    assert cut_to_fit(at(3), g, None, True).tolist() == [1, 2, 0, 0]
    assert cut_to_fit(at(2), g, None, True).tolist() == [1, 0, 0, 0]


def test_cut_to_fit_stops_rigid_jobs_not_running_first_then_the_latest_started() -> None:
    s = started(Book())
    ctx = s.context(6.0)
    g = np.array([3, 4, 1, 2])  # J3 is not running: it is left out first
    at = lambda cap: dataclasses.replace(ctx, capacity=cap)  # noqa: E731
    assert cut_to_fit(at(10), g, None, False).tolist() == [3, 4, 1, 2]
    assert cut_to_fit(at(8), g, None, False).tolist() == [3, 4, 1, 0]
    assert cut_to_fit(at(7), g, None, False).tolist() == [3, 4, 0, 0]
    assert cut_to_fit(at(6), g, None, False).tolist() == [3, 0, 0, 0]  # J2 (1) then J1 (4): 4 freed
    assert cut_to_fit(at(3), g, None, False).tolist() == [3, 0, 0, 0]
    assert cut_to_fit(at(2), g, None, False).tolist() == [0, 0, 0, 0]


def test_cut_to_fit_cuts_each_type_to_its_capacity() -> None:
    s = started(Book())
    ctx = dataclasses.replace(s.context(6.0), capacity=8, capacity_by_type=np.array([3, 5]))
    types = np.array([0, 1, 0, -1])
    # type 0: J0 3 + J2 1 = 4 > 3: J2 (latest started) stops; type 1: J1's 4 fit its 5
    assert cut_to_fit(ctx, np.array([3, 4, 1, 0]), types, False).tolist() == [3, 4, 0, 0]
    assert cut_to_fit(ctx, np.array([3, 4, 1, 0]), types, True).tolist() == [2, 4, 1, 0]
    assert cut_to_fit(ctx, np.array([3, 4, 1, 0]), None, False).tolist() == [3, 4, 1, 0]


def test_asked_again_before_its_answer_is_carried_out_a_queue_repeats_its_answer_types_and_cores() -> None:
    """Two decisions on the same jobs without a step between (what the sharing path does): the
    second asks no policy and repeats the first answer — GPUs, types and cores — not the shares held."""
    book = Book()
    s, p = queued(book, cluster=two_types())
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("B1", "bob", 1, hi=4), 0.0)
    book.gpus, book.types, book.cpus = {"A1": 3, "B1": 2}, {"A1": 0, "B1": 1}, {"A1": 7}
    first = p.allocate(s.context(0.0))
    assert first.gpus.tolist() == [3, 2] and first.gpu_type.tolist() == [0, 1] and first.cpus.tolist() == [7, 16]
    assert len(book.calls) == 2
    again = p.allocate(s.context(0.0))
    assert len(book.calls) == 2
    assert again.gpus.tolist() == [3, 2] and again.gpu_type.tolist() == [0, 1] and again.cpus.tolist() == [7, 16]
    # only b asked again (a speed change): a's answer stands as given, b's new one is used
    s.set_speed("B1", 0.5)
    book.gpus["B1"] = 4
    third = p.allocate(s.context(0.0))
    assert [c[0] for c in book.calls[2:]] == [["B1"]]
    assert third.gpus.tolist() == [3, 4] and third.gpu_type.tolist() == [0, 1] and third.cpus.tolist() == [7, 32]
    assert book.calls[2][3] == [1, 4]  # A's 3 of 4 held by a's answer



def test_a_queue_whose_gpus_change_is_asked_again_though_its_cores_do_not() -> None:
    """A1 (1..8, at most 4 cores) alone: a's 8 GPUs (b lends its 4), 4 cores. B1 arrives (1..4, 4
    cores): a is down to its own 4 GPUs, still 4 cores — its policy must decide again."""
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, hi=8, max_cpus=4), 0.0)
    book.gpus = {"A1": 8, "B1": 4}
    s.step(0.0)
    assert book.calls == [(["A1"], 8, 4, [8])] and held(s) == {"A1": 8}
    s.submit(job("B1", "bob", 1, hi=4, max_cpus=4), 1.0)
    book.gpus["A1"] = 4
    s.step(1.0)
    assert book.calls[1:] == [(["A1"], 4, 4, [4]), (["B1"], 4, 4, [4])]
    assert held(s) == {"A1": 4, "B1": 4}


def test_a_queue_entitled_to_nothing_is_skipped_and_the_next_still_decides() -> None:
    """a has no quota and no cohort: entitled to nothing, A1 gets 0 and a's policy is not asked;
    b, after it, decides. When A1 leaves, a's bookkeeping goes."""
    qs = QueueSet((Queue("a", 0, users=("ann",)), Queue("b", 8, users=("bob",))))
    book = Book()
    s, p = queued(book, qs)
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("B1", "bob", 1, hi=4), 0.0)
    book.gpus = {"A1": 4, "B1": 4}
    s.step(0.0)
    assert book.calls == [(["B1"], 4, 32, [4])] and held(s) == {"B1": 4}
    assert s.next_wakeup(0.0) is None
    again = p.allocate(s.context(1.0))  # nothing changed: a still skipped, without an answer to repeat
    assert again.gpus.tolist() == [0, 4] and len(book.calls) == 1
    s.complete("A1", 2.0)
    s.step(2.0)
    assert s.next_wakeup(2.0) is None and 0 not in p._wakes and 0 not in p._signature


def test_the_queue_lookup_grows_exactly_at_its_size() -> None:
    qs = QueueSet((Queue("a", 2, users=("ann",)), Queue("b", 2, users=("bob",))))
    s, p = queued(Book(), qs, gpus=4)
    users = ["ann", "bob", "zed", "bob", "ann", "bob", "zed"]
    want = [0, 1, 2, 1, 0, 1, 2]
    for n in range(1, len(users) + 1):  # one job more at a time: uid n - 1 reaches the table's size
        s.submit(job(f"j{n}", users[n - 1], 1), 0.0)
        assert p.queue_rows(s.context(0.0)).tolist() == want[:n]


def test_a_queue_policys_type_over_its_capacity_is_cut() -> None:
    """a's policy takes A's 4 GPUs; b's puts B1 on 2 of B and B2 on 2 of A, which has none left:
    B2 is cut to its minimum (1) and, still over A's 0, stopped."""
    book = Book()
    s, p = queued(book, cluster=two_types())
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("B1", "bob", 2, lo=2, hi=2), 0.0)
    s.submit(job("B2", "bob", 1, lo=1, hi=2), 0.0)
    book.gpus, book.types = {"A1": 4, "B1": 2, "B2": 2}, {"A1": 0, "B1": 1, "B2": 0}
    out = p.allocate(s.context(0.0))
    assert book.calls[1][3] == [0, 4]
    assert out.gpus.tolist() == [4, 2, 0] and out.gpu_type.tolist() == [0, 1, 0]


def test_partition_rows_stay_in_table_order_within_a_queue_on_many_jobs() -> None:
    rng = np.random.default_rng(7)
    q = rng.integers(0, 3, 200)
    got = list(QueuedPolicy._partition(q))
    assert [qi for qi, _ in got] == [0, 1, 2]
    for qi, rows in got:
        assert rows.tolist() == np.flatnonzero(q == qi).tolist()


def test_cut_to_fit_counts_a_suspended_job_as_not_running() -> None:
    """J4 ran from t=0 and was suspended at t=5: it holds nothing, so it is the first left out,
    before J2 (started last)."""
    book = Book()
    s = Scheduler(Cluster.for_gpus(8, 4), fixed(book)(), LIN)
    for jid in ("J0", "J1", "J2", "J3", "J4"):
        s.submit(JobSpec(jid, 0.0, 1, 1e6, "lin", min_gpus=1, max_gpus=4), 0.0)
    book.gpus = {"J0": 3, "J4": 2}
    s.step(0.0)
    book.gpus = {"J0": 3, "J1": 4, "J2": 1}
    s.step(5.0)
    ctx = dataclasses.replace(s.context(6.0), capacity=8)
    assert cut_to_fit(ctx, np.array([3, 4, 1, 0, 2]), None, False).tolist() == [3, 4, 1, 0, 0]



def test_wakeups_are_asked_of_each_queues_own_policy_on_its_entitlement_by_type() -> None:
    book = Book()
    s, p = queued(book, cluster=two_types())
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("B1", "bob", 1, hi=4), 0.0)
    book.gpus, book.wake = {"A1": 4, "B1": 4}, {"A1": 9.0}
    s.step(0.0)
    assert s.next_wakeup(0.0) == 9.0
    a, b = p.policy_of("a"), p.policy_of("b")
    assert book.asked == [("allocate", a), ("allocate", b), ("wakeup", a), ("wakeup", b)]
    assert book.wake_types == [[4, 4], [4, 4]]  # each type's GPUs, within the queue's 4


def test_after_a_reconfiguration_wakeups_before_the_next_decision_see_no_entitlement() -> None:
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    book.gpus, book.wake = {"A1": 4}, {"A1": 7.0}
    s.step(0.0)
    p.reconfigure(QueueSet((Queue("a", 8, users=("ann",)),)))
    book.wakes.clear()
    assert s.next_wakeup(1.0) == 7.0
    assert book.wakes == [(["A1"], 0, 0)]  # entitlements come with the next decision


def test_a_queue_whose_jobs_leave_before_any_decision_is_forgotten() -> None:
    """B1 arrives and a wake-up is asked before any decision; B1 leaves: b's wake-up is dropped."""
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    book.gpus, book.wake = {"A1": 4}, {"A1": 7.0, "B1": 3.0}
    s.step(0.0)
    assert s.next_wakeup(0.0) == 7.0
    s.submit(job("B1", "bob", 1, hi=4), 1.0)
    assert s.next_wakeup(1.0) == 3.0
    s.complete("B1", 2.0)
    assert s.next_wakeup(2.0) == 7.0 and set(p._wakes) == {0}


def test_a_queue_policy_over_its_entitlement_is_cut_elastic_jobs_shrinking_first() -> None:
    """a is entitled to 4 (b wants its 4); a's policy keeps A1 and A2 on 3 each (1..4): elastic,
    so both shrink — A1 (the larger surplus first, A1 before A2 on a tie) gives 2: 1 and 3. A rigid
    policy in the same place stops A2 (started with A1, submitted after it) instead."""
    for elastic, want in ((True, {"A1": 1, "A2": 3}), (False, {"A1": 3})):
        book = Book()
        s, p = queued(book, elastic=elastic)
        s.submit(job("A1", "ann", 3, lo=1 if elastic else 3, hi=4 if elastic else 3), 0.0)
        s.submit(job("A2", "ann", 3, lo=1 if elastic else 3, hi=4 if elastic else 3), 0.0)
        book.gpus = {"A1": 3, "A2": 3, "B1": 4}
        s.step(0.0)
        assert held(s) == {"A1": 3, "A2": 3}
        s.submit(job("B1", "bob", 4, lo=4, hi=4), 1.0)
        s.step(1.0)
        assert held(s) == {**want, "B1": 4}


def test_cut_to_fit_shrinks_equal_surpluses_in_table_order_on_many_jobs() -> None:
    """20 elastic jobs (minimum 1) on 2, 1, 2, 1, … GPUs (30); cut to 25: the first five on 2 GPUs
    (a surplus of 1 each) give one each, in table order; the others keep theirs."""
    book = Book()
    s = Scheduler(Cluster.for_gpus(32, 8), fixed(book)(), LIN)
    ids = [f"J{i:02d}" for i in range(20)]
    for jid in ids:
        s.submit(JobSpec(jid, 0.0, 1, 1e6, "lin", min_gpus=1, max_gpus=4), 0.0)
    book.gpus = {jid: 2 - i % 2 for i, jid in enumerate(ids)}
    s.step(0.0)
    g = np.array([2 - i % 2 for i in range(20)])
    ctx = dataclasses.replace(s.context(1.0), capacity=25)
    want = g.copy()
    want[[0, 2, 4, 6, 8]] = 1
    assert cut_to_fit(ctx, g, None, True).tolist() == want.tolist()


def test_a_wakeup_before_any_decision_asks_each_queue_on_no_entitlement() -> None:
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    book.wake = {"A1": 4.0}
    assert s.next_wakeup(0.0) == 4.0 and book.wakes == [(["A1"], 0, 0)]


def test_cut_to_fit_stops_the_latest_started_not_the_latest_submitted() -> None:
    """J0 (submitted first, 2 GPUs) started at t=5, J1 (1 GPU) at t=0: cut by one, J0 stops."""
    book = Book()
    s = Scheduler(Cluster.for_gpus(4, 4), fixed(book)(), LIN)
    s.submit(JobSpec("J0", 0.0, 2, 1e6, "lin", min_gpus=2, max_gpus=2), 0.0)
    s.submit(JobSpec("J1", 0.0, 1, 1e6, "lin", min_gpus=1, max_gpus=1), 0.0)
    book.gpus = {"J1": 1}
    s.step(0.0)
    book.gpus = {"J0": 2, "J1": 1}
    s.step(5.0)
    ctx = dataclasses.replace(s.context(6.0), capacity=2)
    assert cut_to_fit(ctx, np.array([2, 1]), None, False).tolist() == [0, 1]


def test_a_one_gpu_running_job_has_a_floor_and_a_waiting_job_none() -> None:
    """a: A1 runs on 1 GPU (minimum 1): floor 1 GPU, 8 cores. b: B1 waits (at least 3 cores): no floor."""
    book = Book()
    s, p = queued(book)
    s.submit(job("A1", "ann", 1, lo=1, hi=2), 0.0)
    s.submit(job("B1", "bob", 1, lo=1, hi=2, min_cpus=3), 0.0)
    book.gpus = {"A1": 1}
    s.step(0.0)
    ctx = s.context(1.0)
    _, floor = p.demand(ctx, p.queue_rows(ctx))
    assert floor.tolist() == [[1, 0, 0], [8, 0, 0]]


@pytest.mark.parametrize("policy", ["max-min", "afs-p"])
def test_a_queue_decides_again_when_a_jobs_bounds_or_curve_change(policy: str) -> None:
    """Queue a holds A1 (1..4) and A2 (1..8) on 8 GPUs, 4 each. A1's own profile then lowers its
    maximum to 2 (``set_curve(..., max_gpus=2)``) while its queue's entitlement stays 8 (demand
    2 + 8 ≥ 8): the queue's policy must decide again — its last answer (4) is now outside A1's
    bounds, and standing by it made the scheduler refuse the step (found by `coddl demo --nodes 2`:
    "job 6 given 3 GPUs outside [1, 2]")."""
    s = Scheduler(Cluster.for_gpus(8, 4), QueuedPolicy(LAB, lambda: make_policy(policy)), LIN)
    s.validate = True
    s.submit(job("A1", "ann", 1, hi=4), 0.0)
    s.submit(job("A2", "ann", 1, hi=8), 0.0)
    s.step(0.0)
    assert held(s) == {"A1": 4, "A2": 4}
    s.set_curve("A1", np.array([0.0, 1.0, 2.0]), max_gpus=2)
    s.step(1.0)  # no InfeasibleShares
    assert held(s) == {"A1": 2, "A2": 6}
