"""The scheduler core (``coddl/scheduler.py``) on whole-GPU jobs, pinned by hand: what ``submit``
puts in the table, what ``complete`` gives back and records, the measured-rate, speed, resize-cost and
own-curve inputs, the context a policy sees, the shares it refuses, and the plan ``step`` makes of a
decision (which action, the counters and columns it keeps). A ``Given`` policy hands out exactly the
shares a test sets, so each step's input is known.

Cluster: 8 GPUs in two nodes of 4 (32 cores each: 8 cores per GPU); linear curves P(k) = k to 4 GPUs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coddl.core import Cluster, JobSpec
from coddl.core.allocation import ActionKind
from coddl.core.cluster import GpuType, Node
from coddl.core.job import JobStatus
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.policies.base import Context, Policy, Shares, ThroughputSample
from coddl.scheduler import InfeasibleShares, Scheduler

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})
TWO = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}, "flat": {1: 1.0, 2: 1.0}})


class Given(Policy):
    """Hands out ``self.shares`` (job id → GPUs; 0 for the rest), with ``self.types`` / ``self.cpus``
    as Shares.gpu_type / Shares.cpus when set."""

    name = "given"

    def __init__(self) -> None:
        super().__init__()
        self.shares: dict[str, int] = {}
        self.types: dict[str, int] | None = None
        self.cpus: dict[str, int] | None = None
        self.seen: list[Context] = []
        self.wake: float | None = None

    def allocate(self, ctx: Context):
        self.seen.append(ctx)
        ids = ctx.jobs.ids
        g = np.array([self.shares.get(j, 0) for j in ids], dtype=np.int64)
        if self.types is None and self.cpus is None:
            return g
        ty = None if self.types is None else np.array([self.types.get(j, -1) for j in ids], dtype=np.int64)
        cp = None if self.cpus is None else np.array([self.cpus.get(j, 0) for j in ids], dtype=np.int64)
        return Shares(g, ty, cp)

    def wakeup(self, ctx: Context) -> float | None:
        return self.wake


def sched(gpus: int = 8, per_node: int = 4, curves: CurveTable = LIN, **kw) -> tuple[Scheduler, Given]:
    pol = Given()
    return Scheduler(Cluster.for_gpus(gpus, per_node), pol, curves, **kw), pol


def job(jid: str, gpus: int = 1, work: float = 100.0, arrival: float = 0.0, **kw) -> JobSpec:
    return JobSpec(jid, arrival, gpus, work, kw.pop("model", "lin"), **kw)


def col(s: Scheduler, name: str, jid: str):
    return getattr(s.table, name)[s.table.row[jid]]


# ---------------------------------------------------------------- submit
def test_submit_bounds_each_jobs_gpus_by_its_model_the_cluster_and_its_minimum() -> None:
    s, _ = sched()
    s.submit(job("model", 2), 0.0)  # no maximum given: the model's curve stops at 4
    s.submit(job("own", 2, max_gpus=6), 0.0)  # its own, below the cluster's 8
    s.submit(job("big", 2, max_gpus=20), 0.0)  # more than the cluster: 8
    s.submit(job("fixed", 2, min_gpus=2, max_gpus=2), 0.0)
    s.submit(job("huge", 10, min_gpus=10, max_gpus=12), 0.0)  # min above the cluster: 8
    s.submit(job("low", 6, min_gpus=6), 0.0)  # model max 4 < its minimum 6: the minimum wins
    assert s.table.max_gpus[: s.table.n].tolist() == [4, 6, 8, 2, 8, 6]
    assert s.table.uid[: s.table.n].tolist() == [0, 1, 2, 3, 4, 5]
    assert s.table.model[: s.table.n].tolist() == [0] * 6
    assert s.table.gpu_type[: s.table.n].tolist() == [-1] * 6
    assert s.dirty


def test_submit_keeps_cores_types_sharing_and_restored_service() -> None:
    cluster = Cluster(nodes=(Node("n0", 2, "A"), Node("n1", 2, "B")),
                      gpu_types={"A": GpuType("A"), "B": GpuType("B")})
    s = Scheduler(cluster, Given(), TWO)
    s.submit(job("a", 1, gpu_type="B", min_cpus=2, max_cpus=5, model="flat"), 1.0)
    s.submit(job("b", 1, gpu_type="C"), 1.0)  # a type the cluster lacks: any
    s.submit(job("h", 1, gpu_fraction=0.5), 1.0)  # a sharing job without a sharing rule: one whole GPU
    s.submit(job("r", 2, max_gpus=4), 2.0, attained_service=30.0, first_start=0.5)
    assert [col(s, "gpu_type", j) for j in "abhr"] == [1, -1, -1, -1]
    assert (col(s, "min_cpus", "a"), col(s, "max_cpus", "a")) == (2, 5)
    assert (col(s, "min_cpus", "b"), col(s, "max_cpus", "b")) == (0, 0)
    assert col(s, "model", "a") == 1 and col(s, "model", "b") == 0
    assert col(s, "max_gpus", "h") == 1 and col(s, "shared_fraction", "h") == 0.0
    assert col(s, "service0", "r") == 30.0 and col(s, "service0", "a") == 0.0
    assert col(s, "first_start", "r") == 0.5 and math.isnan(col(s, "first_start", "a"))
    assert col(s, "t0", "r") == 2.0
    # the restored job ran before: its first placement is a resume, the others' a start
    s.policy.shares = {"a": 1, "r": 2}
    kinds = {a.job_id: a.kind for a in s.step(3.0).plan.actions}
    assert kinds == {"a": ActionKind.START, "r": ActionKind.RESUME}
    assert col(s, "first_start", "r") == 0.5 and col(s, "first_start", "a") == 3.0
    assert col(s, "last_start", "r") == 3.0


# ---------------------------------------------------------------- step: the plan and its bookkeeping
def test_a_step_turns_shares_into_actions_and_keeps_the_counters() -> None:
    s, pol = sched()
    for j in "abc":
        s.submit(job(j, 1, max_gpus=4), 0.0)
    assert s.step(0.0).plan.actions == []  # nothing given: nothing to do
    assert s.steps == 1 and not s.dirty
    pol.shares = {"a": 2, "b": 1}
    res = s.step(1.0)
    assert [(a.kind, a.job_id, len(a.new), a.cpus) for a in res.plan.actions] == [
        (ActionKind.START, "a", 2, 16), (ActionKind.START, "b", 1, 8)]
    assert res.changed.tolist() == [0, 1]
    assert s.gpus_in_use == 3 and s.cores_in_use == 24
    assert [col(s, "share", j) for j in "abc"] == [2, 1, 0]
    assert [col(s, "cpus", j) for j in "abc"] == [16, 8, 0]
    assert s.allocation.gpus == {"a": (0, 1), "b": (2,)}
    assert col(s, "first_start", "a") == 1.0 and col(s, "last_start", "b") == 1.0
    # same shares: no action, nothing changed
    res = s.step(2.0)
    assert res.plan.actions == [] and res.changed.size == 0 and s.steps == 3
    # a grows, b is suspended, c starts
    s.set_rate("a", 2.0, 1.0)
    s.set_rate("b", 1.0, 1.0)
    pol.shares = {"a": 4, "c": 1}
    res = s.step(5.0)
    got = {a.job_id: (a.kind, a.old, a.new) for a in res.plan.actions}
    assert got["b"] == (ActionKind.SUSPEND, (2,), ())
    assert got["a"][0] is ActionKind.GROW and set(got["a"][1]) < set(got["a"][2]) and len(got["a"][2]) == 4
    assert got["c"][0] is ActionKind.START
    assert s.gpus_in_use == 5 and s.cores_in_use == 40
    assert col(s, "rate", "b") == 0.0 and col(s, "rate", "a") == 2.0  # a keeps its rate until told
    assert col(s, "resizes", "a") == 1 and col(s, "resizes", "b") == 0  # a suspension is no resize
    assert "b" not in s.allocation.gpus and "b" not in s.allocation.cores
    # the rows were advanced to 5 before their shares changed: a did 8 it (2/s from 1), b 4 it
    assert col(s, "work0", "a") == 8.0 and col(s, "work0", "b") == 4.0
    assert col(s, "service0", "a") == 2 * 4.0 and col(s, "service0", "b") == 1 * 4.0
    # b comes back: a resume; a shrinks
    pol.shares = {"a": 2, "b": 1, "c": 1}
    res = s.step(6.0)
    got = {a.job_id: a.kind for a in res.plan.actions}
    assert got == {"a": ActionKind.SHRINK, "b": ActionKind.RESUME}
    assert col(s, "first_start", "b") == 1.0 and col(s, "last_start", "b") == 6.0
    assert col(s, "service_at_last_start", "b") == 4.0
    assert col(s, "resizes", "a") == 2 and col(s, "resizes", "b") == 0
    assert s.gpus_in_use == 4 and s.cores_in_use == 32


def test_a_step_on_an_empty_table_is_counted_and_plans_nothing() -> None:
    s, pol = sched()
    res = s.step(0.0)
    assert res.plan.actions == [] and res.changed.size == 0 and s.steps == 1 and pol.seen == []
    assert s.next_wakeup(0.0) is None


def test_complete_frees_the_gpus_and_records_the_job() -> None:
    s, pol = sched()
    s.submit(job("a", 2, max_gpus=2, arrival=1.0), 1.0)
    s.submit(job("b", 1, max_gpus=1, arrival=1.0), 1.0)
    pol.shares = {"a": 2, "b": 1}
    s.step(2.0)
    s.set_rate("a", 2.0, 2.0)
    s.observe("a", ThroughputSample(2.0, 2, 1, 16, 2.0, 0.0))
    s.dirty = False
    rec = s.complete("a", 7.0)
    assert (rec.spec.job_id, rec.status, rec.finish, rec.first_start, rec.attained_service, rec.resizes) == \
        ("a", "finished", 7.0, 2.0, 10.0, 0)
    assert s.records == [rec] and s.dirty
    assert s.gpus_in_use == 1 and s.cores_in_use == 8
    assert "a" not in s.allocation.gpus and "a" not in s.allocation.cores and "a" not in s.samples
    assert s.placer.free.sum() == 7
    assert s.context(7.0).finished_service.tolist() == [10.0]
    # a failed job is recorded as such and does not count among the finished jobs' services
    rec = s.complete("b", 8.0, JobStatus.FAILED)
    assert (rec.status, rec.attained_service) == ("failed", 6.0)
    assert s.context(8.0).finished_service.tolist() == [10.0]
    assert s.gpus_in_use == 0 and s.cores_in_use == 0 and s.placer.free.all()
    # an id used again is a new job: its first placement is a start
    s.submit(job("a", 1, max_gpus=1), 9.0)
    pol.shares = {"a": 1}
    assert [a.kind for a in s.step(9.0).plan.actions] == [ActionKind.START]


def test_a_queued_job_completed_holds_nothing_to_give_back() -> None:
    s, pol = sched()
    s.submit(job("q", 1), 0.0)
    s.submit(job("r", 1), 0.0)
    pol.shares = {"r": 1}
    s.step(0.0)
    rec = s.complete("q", 3.0, JobStatus.CANCELLED)
    assert rec.status == "cancelled" and math.isnan(rec.first_start) and rec.attained_service == 0.0
    assert s.gpus_in_use == 1 and s.cores_in_use == 8 and s.allocation.gpus == {"r": (0,)}


def test_finished_services_are_kept_past_the_first_64() -> None:
    s, pol = sched()
    for i in range(70):
        s.submit(job(f"j{i}", 1, max_gpus=1), 0.0)
    pol.shares = {f"j{i}": 1 for i in range(8)}
    s.step(0.0)
    for i in range(70):
        s.complete(f"j{i}", 1.0 + i)
    got = s.context(100.0).finished_service
    assert got.tolist() == [1.0 + i if i < 8 else 0.0 for i in range(70)]


# ---------------------------------------------------------------- measured inputs
def test_set_rate_folds_progress_before_the_new_rate() -> None:
    s, pol = sched()
    s.submit(job("a", 1, max_gpus=1), 0.0)
    pol.shares = {"a": 1}
    s.step(0.0)
    s.set_rate("a", 2.0, 0.0)
    assert col(s, "work0", "a") == 0.0 and col(s, "rate", "a") == 2.0 and col(s, "t0", "a") == 0.0
    s.set_rate("a", 3.0, 5.0, paused_until=6.0)  # 10 it at 2/s by t=5, then paused to 6
    assert col(s, "work0", "a") == 10.0 and col(s, "t0", "a") == 5.0 and col(s, "paused_until", "a") == 6.0
    assert s.table.work_done(8.0).tolist() == [10.0 + 3.0 * 2.0]
    s.set_rate("a", 1.0, 5.0)  # at the same instant: no second advance, the pause stands
    assert col(s, "work0", "a") == 10.0 and col(s, "paused_until", "a") == 6.0 and col(s, "rate", "a") == 1.0


def test_observe_keeps_the_last_samples() -> None:
    s, _ = sched()
    s.submit(job("a"), 0.0)
    for i in range(5):
        s.observe("a", ThroughputSample(float(i), 1, 1, 8, float(i), 0.0), keep=3)
    assert [x.time for x in s.samples["a"]] == [2.0, 3.0, 4.0]
    for i in range(70):
        s.observe("b", ThroughputSample(float(i), 1, 1, 8, 1.0, 0.0))
    assert len(s.samples["b"]) == 64 and s.samples["b"][0].time == 6.0


def test_set_speed_and_resize_cost_mark_the_scheduler_dirty() -> None:
    s, _ = sched()
    s.submit(job("a"), 0.0)
    s.dirty = False
    s.set_speed("a", 0.5)
    assert col(s, "speed", "a") == 0.5 and s.dirty
    s.dirty = False
    s.set_resize_cost("a", 0.0)  # unchanged: nothing to decide again
    assert not s.dirty
    s.set_resize_cost("a", 12.5)
    assert col(s, "resize_cost", "a") == 12.5 and s.dirty
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match=r"^resize cost must be a non-negative number of seconds, got "):
            s.set_resize_cost("a", bad)
    assert col(s, "resize_cost", "a") == 12.5


def test_an_own_curve_becomes_a_row_and_its_row_is_reused_after_the_job_leaves() -> None:
    s, _ = sched()
    s.submit(job("a", 1, max_gpus=6), 0.0)
    s.submit(job("b", 1), 0.0)
    s.set_speed("a", 0.5)
    s.dirty = False
    s.set_curve("a", np.array([0.0, 1.5, 2.5]), max_gpus=3)
    assert s.curves.names == ["lin", "job:a"]
    assert s.curves.rate[1].tolist() == [0.0, 1.5, 2.5] + [2.5] * 6  # padded flat to 8 GPUs
    assert s.curves.max_gpus.tolist() == [4, 8] and s.curves.max_gpus.dtype == np.int64  # GPU counts
    assert col(s, "model", "a") == 1 and col(s, "speed", "a") == 1.0 and col(s, "max_gpus", "a") == 3
    assert s.type_speed.shape == (1, 2) and s.dirty
    s.set_curve("a", np.array([0.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 9.0]), max_gpus=7)
    assert s.curves.names == ["lin", "job:a"] and s.curves.rate[1].tolist() == [0.0, 1.0] + [2.0] * 7
    assert col(s, "max_gpus", "a") == 6  # its own limit is smaller
    s.complete("a", 1.0)
    s.set_curve("b", np.array([0.0, 1.0]))
    assert s.curves.names == ["lin", "job:b"] and col(s, "model", "b") == 1  # a's row, reused
    assert col(s, "max_gpus", "b") == 4  # no limit given: unchanged
    s.submit(job("c", 2, min_gpus=2), 1.0)
    s.set_curve("c", np.array([0.0, 1.0]), max_gpus=1)  # never below its minimum
    assert col(s, "max_gpus", "c") == 2 and s.curves.names == ["lin", "job:b", "job:c"]
    assert s.type_speed.shape == (1, 3)


# ---------------------------------------------------------------- what the policy sees
def test_the_context_carries_the_cluster_and_the_jobs() -> None:
    cluster = Cluster(nodes=(Node("n0", 2, "A", cpus=8), Node("n1", 3, "B", cpus=12)),
                      gpu_types={"A": GpuType("A"), "B": GpuType("B")})
    pol = Given()
    s = Scheduler(cluster, pol, LIN)
    s.submit(job("a", 1), 0.0)
    s.step(0.5)
    ctx = pol.seen[-1]
    assert ctx.now == 0.5 and ctx.capacity == 5 and ctx.capacity_by_type.tolist() == [2, 3]
    assert ctx.type_names == ("A", "B") and ctx.cpu_capacity == 20
    assert ctx.jobs.ids == ["a"] and ctx.curves is s.curves.rate and ctx.samples is s.samples
    assert ctx.rng is s.rng and ctx.type_speed is s.type_speed and ctx.finished_service.size == 0
    pol.wake = 9.0
    assert s.next_wakeup(1.0) == 9.0


def test_the_seed_drives_the_policies_random_numbers() -> None:
    a = Scheduler(Cluster.for_gpus(8, 4), Given(), LIN, seed=3).rng.random(3)
    b = Scheduler(Cluster.for_gpus(8, 4), Given(), LIN, seed=3).rng.random(3)
    c = Scheduler(Cluster.for_gpus(8, 4), Given(), LIN).rng.random(3)
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    assert c.tolist() == np.random.default_rng(0).random(3).tolist()


# ---------------------------------------------------------------- shares refused
def refused(shares, *, types=None, cpus=None, validate=True, cluster=None):
    pol = Given()
    s = Scheduler(cluster or Cluster.for_gpus(8, 4), pol, LIN, validate=validate)
    s.submit(job("a", 2, min_gpus=2, max_gpus=4), 0.0)
    s.submit(job("b", 1, max_gpus=2), 0.0)
    pol.shares, pol.types, pol.cpus = shares, types, cpus
    return s


@pytest.mark.parametrize("shares, message", [
    ({"a": 4, "b": 5}, r"^given: 9 GPUs given, capacity 8$"),
    ({"a": 1}, r"^given: job a given 1 GPUs outside \[2, 4\]$"),
    ({"a": 5}, r"^given: job a given 5 GPUs outside \[2, 4\]$"),
    ({"b": 3}, r"^given: job b given 3 GPUs outside \[1, 2\]$"),
    ({"b": -1}, r"^given: job b given -1 GPUs outside \[1, 2\]$"),
])
def test_infeasible_shares_are_refused_with_the_reason(shares, message) -> None:
    s = refused(shares)
    with pytest.raises(InfeasibleShares, match=message):
        s.step(0.0)


def test_feasible_edges_are_accepted() -> None:
    s = refused({"a": 4, "b": 2})  # every bound reached, 6 of 8 GPUs
    assert len(s.step(0.0).plan.actions) == 2
    s = refused({"a": 2, "b": 1})
    assert len(s.step(0.0).plan.actions) == 2
    s = refused({"a": 4, "b": 4})  # over b's bound, not over the capacity: validation off, not checked
    s.validate = False
    s.step(0.0)
    assert s.gpus_in_use == 8


def test_a_share_above_the_maximum_but_within_the_request_is_fine() -> None:
    s, pol = sched()
    s.submit(job("x", 3, max_gpus=1), 0.0)  # asked for 3, may be given up to 3
    pol.shares = {"x": 3}
    assert len(s.step(0.0).plan.actions[0].new) == 3


def test_a_wrong_shape_and_a_type_over_its_capacity_are_refused() -> None:
    class Short(Given):
        def allocate(self, ctx):
            return np.zeros(len(ctx.jobs) + 1, dtype=np.int64)

    s = Scheduler(Cluster.for_gpus(8, 4), Short(), LIN)
    s.submit(job("a"), 0.0)
    with pytest.raises(InfeasibleShares, match=r"^given: shares shape \(2,\), expected \(1,\)$"):
        s.step(0.0)
    cluster = Cluster(nodes=(Node("n0", 2, "A"), Node("n1", 6, "B")), gpu_types={"A": GpuType("A"), "B": GpuType("B")})
    s = refused({"a": 2, "b": 1}, types={"a": 0, "b": 0}, cluster=cluster)
    with pytest.raises(InfeasibleShares, match=r"^given: per-type capacity exceeded: \[3\. 0\.\]$"):
        s.step(0.0)
    s = refused({"a": 2, "b": 1}, types={"a": 0, "b": 1}, cluster=cluster)  # 2 of A, 1 of B: fits
    s.step(0.0)
    assert s.allocation.gpus == {"a": (0, 1), "b": (2,)}
    assert [col(s, "gpu_type", j) for j in "ab"] == [0, 1]


def test_a_job_placed_on_any_type_counts_against_the_total_not_a_type() -> None:
    """Shares.gpu_type -1 means any type (policies/base.py). The per-type check used to pass -1 to
    np.bincount and fail with a ValueError instead of accepting the shares (or refusing them)."""
    cluster = Cluster(nodes=(Node("n0", 2, "A"), Node("n1", 6, "B")), gpu_types={"A": GpuType("A"), "B": GpuType("B")})
    s = refused({"a": 2, "b": 1}, types={"a": 0, "b": -1}, cluster=cluster)
    s.step(0.0)
    assert s.allocation.gpus["a"] == (0, 1) and len(s.allocation.gpus["b"]) == 1
    s = refused({"a": 3, "b": 2}, types={"a": 0, "b": -1}, cluster=cluster)  # still 3 > 2 of type A
    with pytest.raises(InfeasibleShares, match=r"^given: per-type capacity exceeded: \[3\. 0\.\]$"):
        s.step(0.0)
    s = refused({"a": 4, "b": 2}, types={"a": -1, "b": -1}, cluster=cluster)
    s.step(0.0)
    assert s.gpus_in_use == 6


# ---------------------------------------------------------------- types and cores decided by the policy
def test_a_type_change_moves_a_running_job_and_cores_decided_alone_recore_it() -> None:
    cluster = Cluster(nodes=(Node("n0", 2, "A", cpus=8), Node("n1", 2, "B", cpus=8)),
                      gpu_types={"A": GpuType("A"), "B": GpuType("B")})
    pol = Given()
    s = Scheduler(cluster, pol, LIN)
    s.submit(job("a", 1, max_gpus=2), 0.0)
    pol.shares, pol.types = {"a": 1}, {"a": 0}
    s.step(0.0)
    assert s.allocation.gpus == {"a": (0,)} and col(s, "gpu_type", "a") == 0
    pol.types = {"a": 1}  # same count, other type: a migration
    acts = s.step(1.0).plan.actions
    assert [(a.kind, a.old, a.new) for a in acts] == [(ActionKind.MIGRATE, (0,), (2,))]
    assert col(s, "gpu_type", "a") == 1 and col(s, "resizes", "a") == 1
    acts = s.step(2.0).plan.actions  # nothing moved
    assert acts == []
    pol.types, pol.cpus = None, {"a": 2}  # type kept (None: the table's), cores cut from 4 to 2
    acts = s.step(3.0).plan.actions
    assert [(a.kind, a.old, a.new, a.cpus) for a in acts] == [(ActionKind.RECORE, (2,), (2,), 2)]
    assert col(s, "cpus", "a") == 2 and s.cores_in_use == 2 and col(s, "resizes", "a") == 2
    assert s.step(4.0).plan.actions == []  # same cores: nothing
    pol.shares = {}  # a stopped job's cores do not count as changed
    acts = s.step(5.0).plan.actions
    assert [a.kind for a in acts] == [ActionKind.SUSPEND] and s.cores_in_use == 0
    pol.cpus = {"a": 3}  # cores or a type for a job given no GPU change nothing
    res = s.step(6.0)
    assert res.plan.actions == [] and res.changed.size == 0
    pol.cpus, pol.types = None, {"a": 0}
    res = s.step(7.0)
    assert res.plan.actions == [] and res.changed.size == 0


# ---------------------------------------------------------------- restart costs
def test_a_job_whose_growth_costs_a_restart_is_held_and_its_gpus_go_to_another() -> None:
    """Max-min over a (running on 2, 10 it left at 2/s: 5 s to go) and b (waiting): with a resize
    costing 100 s a's growth cannot pay; the GPUs it would get go to b in the same decision."""
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), LIN)
    s.submit(job("a", 2, work=20.0, max_gpus=4), 0.0)
    s.step(0.0)
    assert s.allocation.gpus["a"] == (0, 1, 2, 3)
    s2 = Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), LIN)
    s2.submit(job("a", 2, work=20.0, max_gpus=2), 0.0)
    s2.step(0.0)
    s2.set_rate("a", 2.0, 0.0)
    s2.table.max_gpus[0] = 4
    s2.set_resize_cost("a", 100.0)
    s2.submit(job("b", 1, work=40.0, max_gpus=4), 5.0)
    s2.step(5.0)
    assert len(s2.allocation.gpus["a"]) == 2 and len(s2.allocation.gpus["b"]) == 2
    assert s2.table.max_gpus[s2.table.row["a"]] == 4  # the hold is for that decision only


# ---------------------------------------------------------------- properties
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.lists(st.integers(0, 3), min_size=5, max_size=5), min_size=1, max_size=6))
def test_counters_and_columns_follow_any_sequence_of_shares(steps) -> None:
    """Five jobs (max 3 GPUs each) on 8 GPUs under any sequence of decisions (cut to the capacity):
    the GPUs and cores counted equal those held, each job's share and cores columns its allocation,
    a job's resizes count its grows/shrinks/migrations, and START comes once per job."""
    s, pol = sched()
    ids = [f"j{i}" for i in range(5)]
    for j in ids:
        s.submit(job(j, 1, max_gpus=3), 0.0)
    resizes = dict.fromkeys(ids, 0)
    starts = dict.fromkeys(ids, 0)
    for t, shares in enumerate(steps):
        left, given_ = 8, {}
        for j, k in zip(ids, shares):
            given_[j] = min(k, left)
            left -= given_[j]
        pol.shares = given_
        for a in s.step(float(t)).plan.actions:
            if a.kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MIGRATE, ActionKind.RECORE):
                resizes[a.job_id] += 1
            starts[a.job_id] += a.kind is ActionKind.START
        held = s.allocation.gpus
        assert s.gpus_in_use == sum(len(g) for g in held.values()) == sum(given_.values())
        assert s.cores_in_use == sum(len(c) for c in s.allocation.cores.values())
        for j in ids:
            assert col(s, "share", j) == len(held.get(j, ())) == given_[j]
            assert col(s, "cpus", j) == len(s.allocation.cores.get(j, ()))
            assert col(s, "resizes", j) == resizes[j]
        assert (~s.placer.free).sum() == s.gpus_in_use
    assert all(v <= 1 for v in starts.values())


# ---------------------------------------------------------------- sharing jobs leaving
def test_sharing_jobs_leave_their_gpu_and_the_last_one_gives_it_back() -> None:
    """Three half-GPU jobs on one GPU (32 cores): x and y share it, z waits. z cancelled while
    waiting holds nothing; x leaving keeps the GPU (y is on it); y leaving empties it: its GPU and
    its cores are given back."""
    from coddl.placement.sharing import SharingRule

    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("fifo"), LIN, sharing=SharingRule.parse("pack"),
                  retained=lambda a, b, t: 0.5)
    for j in "xyz":
        s.submit(JobSpec(j, 0.0, 1, 10.0, "lin", max_gpus=1, gpu_fraction=0.5), 0.0)
    assert [col(s, "shared_fraction", j) for j in "xyz"] == [0.5, 0.5, 0.5]
    s.step(0.0)
    assert s.allocation.gpus == {"x": (0,), "y": (0,)} and s.gpus_in_use == 1 and s.cores_in_use == 32
    rec = s.complete("z", 1.0, JobStatus.CANCELLED)
    assert rec.status == "cancelled" and s.gpus_in_use == 1 and s.cores_in_use == 32
    s.complete("x", 2.0)
    assert s.allocation.gpus == {"y": (0,)} and "x" not in s.allocation.cores
    assert s.gpus_in_use == 1 and s.cores_in_use == 32 and not s.placer.free[0]
    s.complete("y", 3.0)
    assert s.allocation.gpus == {} and s.allocation.cores == {}
    assert s.gpus_in_use == 0 and s.cores_in_use == 0 and s.placer.free.all()


# ---------------------------------------------------------------- the restart rule's rounds
class Capped(Given):
    """Given, but never above a job's current maximum (as every policy keeps to ctx.jobs.max_gpus)."""

    def allocate(self, ctx: Context):
        out = super().allocate(ctx)
        g = out.gpus if isinstance(out, Shares) else out
        np.minimum(g, ctx.jobs.max_gpus, out=g)
        return out


def restart_priced(pol: Given) -> Scheduler:
    """a runs on 1 GPU (10 it left at 1/s: 10 s to go; on 4 GPUs 2.5 s) and each resize costs 100 s:
    growing it never pays."""
    s = Scheduler(Cluster.for_gpus(4, 4), pol, LIN)
    s.submit(job("a", 1, work=10.0, max_gpus=4), 0.0)
    pol.shares = {"a": 1}
    s.step(0.0)
    s.set_rate("a", 1.0, 0.0)
    s.set_resize_cost("a", 100.0)
    pol.shares = {"a": 4}
    pol.seen.clear()
    return s


@pytest.mark.parametrize("typed", [False, True])
def test_a_growth_that_cannot_pay_for_its_restart_is_held_whatever_the_policy_returns(typed) -> None:
    pol = Capped()
    if typed:
        pol.types = {"a": 0}  # the policy answers with Shares, not a bare array
    s = restart_priced(pol)
    assert s.step(0.0).plan.actions == []
    assert len(pol.seen) == 1  # held before the policy is asked: no growth of a can pay (hopeless)
    assert s.allocation.gpus == {"a": (0,)} and col(s, "max_gpus", "a") == 4


def test_the_rounds_of_holding_back_end_after_one_per_job_and_one_more() -> None:
    """A policy that ignores the hold (it gives a 4 GPUs, within its bounds only because it asked for
    1 and may have 4) would be asked forever; the rounds stop at n + 1 = 2 and its last answer stands."""
    pol = Given()
    s = restart_priced(pol)
    acts = s.step(0.0).plan.actions
    assert len(pol.seen) == 2
    assert [(a.kind, len(a.new)) for a in acts] == [(ActionKind.GROW, 4)]


# ---------------------------------------------------------------- what step reads of a decision
def test_shares_given_as_floats_are_whole_gpu_counts() -> None:
    """A policy that works its shares out in floating point (2.0 GPUs) gets them as counts."""

    class Floats(Given):
        def allocate(self, ctx):
            out = super().allocate(ctx)
            return out.astype(float) if isinstance(out, np.ndarray) else Shares(out.gpus.astype(float), out.gpu_type)

    for types in (None, {"a": -1, "b": -1}):
        pol = Floats()
        s = Scheduler(Cluster.for_gpus(8, 4), pol, LIN)
        s.submit(job("a", 1, max_gpus=4), 0.0)
        s.submit(job("b", 1, max_gpus=4), 0.0)
        pol.shares, pol.types = {"a": 2, "b": 1}, types
        acts = s.step(0.0).plan.actions
        assert [(a.job_id, a.new) for a in acts] == [("a", (0, 1)), ("b", (2,))]
        assert s.table.share[:2].dtype == np.int64 and s.table.share[:2].tolist() == [2, 1]
        assert s.gpus_in_use == 3


def test_cores_decided_for_one_job_change_only_that_job() -> None:
    s, pol = sched()
    s.submit(job("a", 1, max_gpus=2), 0.0)
    s.submit(job("b", 1, max_gpus=2), 0.0)
    pol.shares, pol.cpus = {"a": 1, "b": 1}, {"a": 8, "b": 8}
    first = s.step(0.0)
    assert first.changed.tolist() == [0, 1]
    pol.cpus = {"a": 4, "b": 8}
    res = s.step(1.0)
    assert res.changed.tolist() == [0]  # b: same GPUs, same type, same cores
    assert [(a.kind, a.job_id, a.cpus) for a in res.plan.actions] == [(ActionKind.RECORE, "a", 4)]
    assert s.cores_in_use == 12


def test_a_type_chosen_for_a_waiting_job_changes_nothing_until_it_gets_gpus() -> None:
    cluster = Cluster(nodes=(Node("n0", 2, "A"), Node("n1", 2, "B")), gpu_types={"A": GpuType("A"), "B": GpuType("B")})
    s = refused({"a": 2}, types={"a": 0, "b": 1}, cluster=cluster)
    res = s.step(0.0)
    assert res.changed.tolist() == [0] and [a.job_id for a in res.plan.actions] == ["a"]
    assert col(s, "gpu_type", "b") == -1  # b holds nothing: its table type stays "any"
    s.policy.types = {"a": 0, "b": 0}
    assert s.step(1.0).changed.size == 0


def test_cores_given_as_floats_are_core_counts() -> None:
    class Floats(Given):
        def allocate(self, ctx):
            out = super().allocate(ctx)
            return Shares(out.gpus, out.gpu_type, out.cpus.astype(float))

    pol = Floats()
    s = Scheduler(Cluster.for_gpus(8, 4), pol, LIN)
    s.submit(job("a", 1, max_gpus=2), 0.0)
    s.submit(job("b", 1, max_gpus=2), 0.0)
    pol.shares, pol.cpus = {"a": 1, "b": 1}, {"a": 4, "b": 8}
    acts = s.step(0.0).plan.actions
    assert [(a.job_id, a.cpus, a.cores) for a in acts] == [("a", 4, (0, 1, 2, 3)), ("b", 8, tuple(range(4, 12)))]
    pol.cpus = {"a": 4, "b": 6}
    res = s.step(1.0)
    assert res.changed.tolist() == [1] and [(a.kind, a.cpus) for a in res.plan.actions] == [(ActionKind.RECORE, 6)]
    assert s.cores_in_use == 10


def test_cores_handed_out_by_the_policy_never_take_a_running_jobs_cores() -> None:
    """a starts with its GPU's cores (8: the placer's default); then the policy starts deciding cores:
    b's 4 cores and a's new 4 come from the cores nobody holds, never from each other's."""
    s, pol = sched()
    s.submit(job("a", 1, max_gpus=1), 0.0)
    s.submit(job("b", 1, max_gpus=1), 0.0)
    pol.shares = {"a": 1}
    s.step(0.0)
    a_cores = set(s.allocation.cores["a"])
    assert len(a_cores) == 8
    pol.shares, pol.cpus = {"a": 1, "b": 1}, {"a": 8, "b": 4}
    s.step(1.0)
    assert set(s.allocation.cores["a"]) == a_cores and len(s.allocation.cores["b"]) == 4
    assert not a_cores & set(s.allocation.cores["b"])
    pol.cpus = {"a": 4, "b": 4}
    s.step(2.0)
    held = [set(c) for c in s.allocation.cores.values()]
    assert len(held[0]) == len(held[1]) == 4 and not held[0] & held[1] and s.cores_in_use == 8


def test_cores_decided_by_a_policy_are_refused_beside_sharing_jobs() -> None:
    from coddl.placement.sharing import SharingRule

    pol = Given()
    s = Scheduler(Cluster.for_gpus(2, 2), pol, LIN, sharing=SharingRule.parse("pack"), retained=lambda a, b, t: 0.5)
    s.submit(JobSpec("h", 0.0, 1, 10.0, "lin", max_gpus=1, gpu_fraction=0.5), 0.0)
    pol.shares, pol.cpus = {"h": 1}, {"h": 4}
    with pytest.raises(InfeasibleShares, match=r"^given: a policy that assigns CPU cores cannot run with "
                                               r"GPU sharing \(sharing jobs use their GPU's cores\)$"):
        s.step(0.0)


# ---------------------------------------------------------------- steps the scheduler need not take
def test_a_newcomer_to_a_full_cluster_under_fifo_asks_for_no_step_but_one_with_a_free_gpu_does() -> None:
    """FIFO never takes GPUs from a running job (``holds_running``): a job arriving while every GPU
    is held cannot change the decision, so ``submit`` leaves the scheduler clean; with one GPU
    free it must decide (the newcomer may fit), and a policy that preempts always decides."""
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("fifo"), LIN)
    s.submit(job("a", 3), 0.0)
    s.step(0.0)
    s.submit(job("b", 2), 1.0)
    assert s.dirty  # one GPU free: b does not fit, but the scheduler cannot know without asking
    s.step(1.0)
    s.submit(job("c", 1), 2.0)
    s.step(2.0)
    assert s.allocation.gpus["c"] == (3,) and s.gpus_in_use == 4  # backfilled: the cluster is full
    s.dirty = False
    s.submit(job("d", 1), 3.0)
    assert not s.dirty
    s.complete("c", 4.0)
    assert s.dirty
    s.step(4.0)
    assert s.allocation.gpus["d"] == (3,) and "b" not in s.allocation.gpus  # b still waits for 2
    p, _ = sched(4, 4)
    p.submit(job("x", 4), 0.0)
    p.policy.shares = {"x": 4}
    p.step(0.0)
    p.dirty = False
    p.submit(job("y", 1), 1.0)
    assert p.dirty  # Given holds nothing fixed: a newcomer may take GPUs from x


def test_the_restart_rule_holds_while_any_active_job_has_a_resize_cost() -> None:
    """The rule runs only while some active job's resize costs a restart; the count follows
    ``set_resize_cost`` (set, changed, cleared) and each costly job's exit. With a costly and a
    cost-free job gone and a costly one left, the costly one is still held back; with every costly job gone or
    cleared, max-min grows a job for free again."""
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), LIN)
    s.submit(job("a", 2, work=20.0, max_gpus=2), 0.0)
    s.submit(job("z", 1, work=1e6, max_gpus=1), 0.0)
    s.submit(job("f", 1, work=1e6, max_gpus=1), 0.0)
    s.step(0.0)
    s.set_rate("a", 2.0, 0.0)
    s.table.max_gpus[s.table.row["a"]] = 4
    s.set_resize_cost("z", 7.0)
    s.set_resize_cost("z", 9.0)  # changed, not a second costly job
    s.set_resize_cost("a", 100.0)
    s.complete("z", 1.0)  # a costly job leaves; a's cost still counts
    s.complete("f", 1.0)  # and a cost-free one: nothing to uncount
    s.step(1.0)
    assert len(s.allocation.gpus["a"]) == 2  # 9 s to go: growing cannot pay for 100 s
    s.set_resize_cost("a", 0.0)
    s.step(2.0)
    assert len(s.allocation.gpus["a"]) == 4  # free again: max-min gives it every GPU
