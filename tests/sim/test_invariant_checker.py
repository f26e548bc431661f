"""The simulator's invariant checker catches each broken state it exists for, one at a time, and the
engine keeps the earliest wake-up a policy asked for. (The "invariants hold" property tests are only
as strong as this checker: a checker that checks nothing would pass them all.)"""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core import Cluster, JobSpec
from coddl.core.table import JobRecord
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.policies.base import Context, Policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import InvariantViolation, SimResult, _check_final, _check_invariants, simulate
from coddl.sim.executor import WorkAudit

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})


def running() -> Scheduler:
    """Two jobs placed on a 2-node × 4-GPU cluster: a (2 GPUs) and b (3 GPUs)."""
    s = Scheduler(Cluster.for_gpus(8, 4), make_policy("fifo"), LIN)
    s.submit(JobSpec("a", 0.0, 2, 100.0, "lin", max_gpus=2), 0.0)
    s.submit(JobSpec("b", 0.0, 3, 100.0, "lin", max_gpus=3), 0.0)
    s.step(0.0)
    _check_invariants(s, 0.0)  # the unbroken state passes
    return s


def test_a_gpu_given_to_two_jobs_is_caught() -> None:
    s = running()
    a = s.allocation.gpus["a"]
    s.allocation.gpus["b"] = (a[0],) + s.allocation.gpus["b"][1:]
    with pytest.raises(InvariantViolation, match="shares a GPU"):
        _check_invariants(s, 1.0)


def test_more_gpus_than_the_cluster_has_is_caught() -> None:
    s = running()
    s.allocation.gpus["ghost"] = tuple(range(8))
    with pytest.raises(InvariantViolation, match="allocated > capacity"):
        _check_invariants(s, 1.0)


def test_a_free_map_that_disagrees_with_the_allocation_is_caught() -> None:
    s = running()
    s.placer.free[s.allocation.gpus["a"][0]] = True  # the placer would hand this GPU out again
    with pytest.raises(InvariantViolation, match="free-map"):
        _check_invariants(s, 1.0)
    s = running()
    free = int(np.flatnonzero(s.placer.free)[0])
    s.placer.free[free] = False  # a GPU lost: held by nobody, never free
    with pytest.raises(InvariantViolation, match="free-map"):
        _check_invariants(s, 1.0)


def test_a_core_given_to_two_jobs_is_caught() -> None:
    s = running()
    s.allocation.cores["b"] = (s.allocation.cores["a"][0],)
    with pytest.raises(InvariantViolation, match="shares a CPU core"):
        _check_invariants(s, 1.0)


def test_a_node_with_more_cores_held_than_it_has_is_caught() -> None:
    s = running()
    node0 = s.cluster.nodes[0].cpus
    first1 = int(s.cluster.node_first_core[1])
    s.allocation.cores = {"a": tuple(range(node0)), "b": (first1,)}
    _check_invariants(s, 1.0)  # every core of node 0 held: still fine
    # a core index past node 0's last counts against node 1; node 1 over-committed by one:
    s.cluster.node_of_core[first1] = 0
    try:
        with pytest.raises(InvariantViolation, match="over-committed"):
            _check_invariants(s, 1.0)
    finally:
        s.cluster.node_of_core[first1] = 1


def record(job: str, arrival: float, finish: float, first_start: float, work: float = 10.0) -> JobRecord:
    return JobRecord(JobSpec(job, arrival, 1, work, "lin"), "finished", finish, first_start, 0.0, 0)


def result(records: list[JobRecord], done: dict[str, float]) -> SimResult:
    audit = WorkAudit()
    audit.done.update(done)
    return SimResult("x", records, 1, 1, audit=audit)


def test_final_checks_catch_each_broken_record() -> None:
    specs = [JobSpec("a", 1.0, 1, 10.0, "lin"), JobSpec("b", 1.0, 1, 10.0, "lin")]
    good = [record("a", 1.0, 11.0, 1.0), record("b", 1.0, 21.0, 11.0)]
    _check_final(result(good, {"a": 10.0, "b": 10.0}), specs)
    with pytest.raises(InvariantViolation, match="exactly once"):
        _check_final(result(good[:1], {"a": 10.0}), specs)
    with pytest.raises(InvariantViolation, match="exactly once"):
        _check_final(result(good + good[1:], {"a": 10.0, "b": 10.0}), specs)
    with pytest.raises(InvariantViolation, match="before its arrival"):
        _check_final(result([good[0], record("b", 1.0, 21.0, 0.5)], {"a": 10.0, "b": 10.0}), specs)
    with pytest.raises(InvariantViolation, match="before its arrival"):
        _check_final(result([good[0], record("b", 1.0, 0.5, 1.0)], {"a": 10.0, "b": 10.0}), specs)
    with pytest.raises(InvariantViolation, match="total work"):
        _check_final(result(good, {"a": 10.0, "b": 9.9}), specs)
    with pytest.raises(InvariantViolation, match="total work"):
        _check_final(result(good, {"a": 10.0, "b": 10.1}), specs)


class Alarm(Policy):
    """FIFO that asks to be woken at fixed times: at 100 after its first decision, and — at the
    arrival at 10 — at 200. The later request must not replace the earlier one."""

    name = "alarm"

    def __init__(self) -> None:
        super().__init__()
        self.fifo = make_policy("fifo")
        self.calls: list[float] = []

    def allocate(self, ctx: Context):
        self.calls.append(ctx.now)
        return self.fifo.allocate(ctx)

    def wakeup(self, ctx: Context) -> float | None:
        return 100.0 if ctx.now < 10.0 else 200.0


def test_a_later_wakeup_does_not_replace_an_earlier_one() -> None:
    pol = Alarm()
    specs = [JobSpec("a", 0.0, 1, 1000.0, "lin", max_gpus=1), JobSpec("b", 10.0, 1, 1000.0, "lin", max_gpus=1)]
    simulate(specs, Scheduler(Cluster.for_gpus(2, 4), pol, LIN), check=True)
    assert pol.calls[:4] == [0.0, 10.0, 100.0, 200.0]
