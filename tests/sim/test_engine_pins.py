"""The discrete-event loop (``sim/engine.py``) pinned on runs small enough to follow by hand: what it
counts (events, steps, actions), what it records, when it calls the policy, its wake-ups, progress
reports, the invariant checks it runs when asked (and only then), the restart charge it passes on,
and the run it refuses (jobs that can never run).

Every trace uses linear curves, P(k) = k steps/s, so a job of W steps on k GPUs takes W/k s.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coddl.core import Cluster, JobSpec
from coddl.core.table import JobRecord
from coddl.perf.curves import CurveTable
from coddl.placement.sharing import SharingRule
from coddl.policies import make_policy
from coddl.policies.base import Context, Policy, Shares
from coddl.scheduler import Scheduler, StepResult
from coddl.sim.engine import InvariantViolation, simulate
from coddl.sim.executor import ColocationLog
from coddl.sim.reconfig import ReconfigCost

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})


def rigid(jid: str, arrival: float, gpus: int, work: float) -> JobSpec:
    return JobSpec(jid, arrival, gpus, work, "lin", max_gpus=gpus)


def fifo(gpus: int = 4, per_node: int = 4, policy: Policy | None = None, **kw) -> Scheduler:
    return Scheduler(Cluster.for_gpus(gpus, per_node), policy or make_policy("fifo"), LIN, **kw)


# a: 2 GPUs, 20 it → 0–10.  b: 2 GPUs, 10 it → 0–5.  c arrives at 5, as b leaves: b's GPUs, 10 it → 5–10.
# Instants: t=0 (two arrivals), t=5 (an exit and an arrival, one step), t=10 (two exits, one step).
TRACE = [rigid("a", 0.0, 2, 20.0), rigid("b", 0.0, 2, 10.0), rigid("c", 5.0, 2, 10.0)]


def test_a_hand_computed_run_and_what_the_loop_counts() -> None:
    s = fifo()
    res = simulate(list(reversed(TRACE)), s)  # the order given does not matter: arrivals are sorted
    assert {r.spec.job_id: (r.first_start, r.finish) for r in res.records} == {
        "a": (0.0, 10.0), "b": (0.0, 5.0), "c": (5.0, 10.0)}
    # GPU-seconds: a 2 × 10, b 2 × 5, c 2 × 5 (c submitted at its arrival: no service before it)
    assert {r.spec.job_id: r.attained_service for r in res.records} == {"a": 20.0, "b": 10.0, "c": 10.0}
    assert [r.spec.job_id for r in res.records] == ["b", "a", "c"]  # in order of exit (a's predicted first)
    assert res.records is s.records
    assert res.events == 6  # three arrivals, three exits
    assert res.steps == 3 == s.steps  # one per instant, the last on an empty table
    assert res.actions == 3  # three starts; an exit is no action
    assert res.utilisation == [(0.0, 4), (10.0, 0)]  # unchanged at t=5: c takes what b gave back
    assert sorted(res.timeline) == [(0.0, "a", 2), (0.0, "b", 2), (5.0, "c", 2)]
    assert res.policy == "fifo" and res.capacity == 4 and res.cpu_capacity == s.cluster.total_cpus
    assert res.audit is None and res.colocation is None  # no checks asked for, no sharing jobs
    assert 0.0 <= res.wall_s < 60.0


def test_check_keeps_an_audit_of_every_jobs_work() -> None:
    res = simulate(TRACE, fifo(), check=True)
    assert res.audit is not None
    assert res.audit.done == pytest.approx({"a": 20.0, "b": 10.0, "c": 10.0})
    assert res.audit.rate == {"a": 0.0, "b": 0.0, "c": 0.0}  # every job's account closed at its exit
    assert res.audit.since == {"a": 10.0, "b": 5.0, "c": 10.0}


def test_without_a_timeline_the_series_are_still_kept() -> None:
    res = simulate(TRACE, fifo(), record_timeline=False)
    assert res.timeline == [] and res.actions == 3 and res.utilisation == [(0.0, 4), (10.0, 0)]
    assert {r.spec.job_id: r.finish for r in res.records} == {"a": 10.0, "b": 5.0, "c": 10.0}


class Counting(Policy):
    """FIFO that notes when it is called."""

    name = "counting"

    def __init__(self, inner: str = "fifo") -> None:
        super().__init__()
        self.inner = make_policy(inner)
        self.calls: list[float] = []

    def allocate(self, ctx: Context):
        self.calls.append(ctx.now)
        return self.inner.allocate(ctx)


def test_the_policy_runs_once_per_instant_and_only_when_something_happened() -> None:
    pol = Counting()
    res = simulate(TRACE, fifo(policy=pol))
    assert pol.calls == [0.0, 5.0]  # t=10 empties the table: stepped, but nobody to decide for
    assert res.steps == 3


def test_an_arrival_at_an_exit_instant_is_decided_together_with_it() -> None:
    """d (4 GPUs, 10 it) arrives at 5 with c, as b leaves: one decision at 5 sees the exit and both
    arrivals. FIFO takes c (given first) onto b's GPUs; d waits for all four: 10–12.5."""
    specs = TRACE + [rigid("d", 5.0, 4, 10.0)]
    pol = Counting()
    res = simulate(specs, fifo(policy=pol), check=True)
    assert {r.spec.job_id: r.finish for r in res.records} == pytest.approx(
        {"a": 10.0, "b": 5.0, "c": 10.0, "d": 12.5})
    assert pol.calls == [0.0, 5.0, 10.0]
    assert res.events == 8 and res.steps == 4


def test_a_slower_rate_model_slows_every_job() -> None:
    class Half:
        def rate(self, model: int, gpus: tuple[int, ...], cpus: int) -> float:
            return 0.5 * len(gpus)

    res = simulate(TRACE, fifo(), rate_model=Half(), check=True)
    # a 20 it at 1/s: 0–20; b 10 it at 1/s: 0–10; c arrives at 5 behind b (no room): 10–20
    assert {r.spec.job_id: r.finish for r in res.records} == pytest.approx({"a": 20.0, "b": 10.0, "c": 20.0})


def test_a_reconfiguration_cost_given_is_charged() -> None:
    # restart: each start pays cold start + a step at least; the exact sum is the cost model's
    cost = ReconfigCost("restart", default_cold_start_s=3.0)
    res = simulate([rigid("a", 0.0, 2, 20.0)], fifo(), cost, check=True)
    assert res.records[0].finish > 10.0 + 3.0 - 1e-9
    free = simulate([rigid("a", 0.0, 2, 20.0)], fifo(), None, check=True)
    assert free.records[0].finish == pytest.approx(10.0)


# ---------------------------------------------------------------- wake-ups
class Alarm(Policy):
    """FIFO that asks for wake-ups from a list: the i-th decision asks for ``times[i]`` (None once
    the list is spent)."""

    name = "alarm"

    def __init__(self, times: list[float | None]) -> None:
        super().__init__()
        self.fifo = make_policy("fifo")
        self.times = list(times)
        self.calls: list[float] = []
        self.asked: list[float] = []

    def allocate(self, ctx: Context):
        self.calls.append(ctx.now)
        return self.fifo.allocate(ctx)

    def wakeup(self, ctx: Context) -> float | None:
        self.asked.append(ctx.now)
        return self.times[len(self.asked) - 1] if len(self.asked) <= len(self.times) else None


def long_job() -> list[JobSpec]:
    return [rigid("a", 0.0, 1, 1000.0)]


def test_a_wakeup_runs_the_policy_and_counts_as_an_event() -> None:
    pol = Alarm([100.0, 300.0])
    res = simulate(long_job(), fifo(policy=pol), check=True)
    assert pol.calls == [0.0, 100.0, 300.0]
    assert pol.asked == [0.0, 100.0, 300.0]  # asked after every step while jobs remain
    assert res.events == 1 + 2 + 1  # an arrival, two wake-ups, an exit
    assert res.steps == 4
    assert res.records[0].finish == pytest.approx(1000.0)


def test_an_earlier_wakeup_replaces_a_later_one_and_a_later_one_does_not() -> None:
    # t=0 asks for 500; the arrival at 50 asks for 200 (earlier: replaces 500); 200 asks for 900;
    # the arrival at 100 asks for 950 (later than 900: ignored) — so wake-ups at 200 and 900.
    pol = Alarm([500.0, 200.0, 950.0, 900.0])
    specs = [rigid("a", 0.0, 1, 1000.0), rigid("b", 50.0, 1, 2000.0), rigid("c", 100.0, 1, 2000.0)]
    simulate(specs, fifo(policy=pol), check=True)
    assert pol.calls[:5] == [0.0, 50.0, 100.0, 200.0, 900.0]


def test_a_wakeup_at_or_before_now_is_ignored() -> None:
    class Now(Alarm):
        def wakeup(self, ctx: Context) -> float | None:
            self.asked.append(ctx.now)
            return ctx.now if len(self.asked) % 2 else ctx.now - 1.0

    pol = Now([])
    res = simulate(long_job(), fifo(policy=pol), check=True)
    assert pol.calls == [0.0] and res.steps == 2 and res.events == 2


def test_a_policy_without_wakeup_is_never_asked() -> None:
    calls = []

    class Spy(Scheduler):
        def next_wakeup(self, now: float) -> float | None:
            calls.append(now)
            return super().next_wakeup(now)

    simulate(TRACE, Spy(Cluster.for_gpus(4, 4), make_policy("fifo"), LIN))
    assert calls == []
    pol = Alarm([])
    simulate(TRACE, Spy(Cluster.for_gpus(4, 4), pol, LIN))
    assert calls == [0.0, 5.0]  # after each step that leaves jobs in the table


def test_a_wakeup_asked_for_after_the_last_exit_still_fires_on_an_empty_table() -> None:
    """The wake-up asked at 0 (for 5000) outlives the job (exit at 1000): the step at 1000 asks
    nothing (no jobs left), and the pending wake-up is one more event and step, with no decision."""
    pol = Alarm([5000.0])
    res = simulate(long_job(), fifo(policy=pol), check=True)
    assert pol.calls == [0.0] and pol.asked == [0.0]
    assert res.events == 3 and res.steps == 3
    assert res.utilisation == [(0.0, 1), (1000.0, 0)]


# ---------------------------------------------------------------- progress
def test_progress_is_reported_every_two_hundredth_of_the_jobs_and_at_the_end() -> None:
    """401 one-step jobs on one GPU finish one a second: with 401 // 200 = 2, a report every two
    finished jobs, and the last count once more at the end."""
    specs = [rigid(f"j{i:03d}", 0.0, 1, 1.0) for i in range(401)]
    seen: list[int] = []
    res = simulate(specs, fifo(1, 1), progress=seen.append)
    assert seen == [*range(2, 401, 2), 401]
    assert len(res.records) == 401 and res.records[-1].finish == pytest.approx(401.0)


def test_progress_for_a_few_jobs_reports_every_finished_job() -> None:
    seen: list[int] = []
    simulate([rigid("a", 0.0, 4, 4.0), rigid("b", 0.0, 4, 8.0), rigid("c", 0.0, 4, 12.0)], fifo(),
             progress=seen.append)
    assert seen == [1, 2, 3, 3]


def test_progress_counts_jobs_finished_together() -> None:
    seen: list[int] = []
    simulate(TRACE, fifo(), progress=seen.append)
    assert seen == [1, 3, 3]  # b at 5; a and c together at 10; the final report


# ---------------------------------------------------------------- noise and seeds
class Watch(Policy):
    """FIFO that keeps the throughput samples it is shown, per job."""

    name = "watch"

    def __init__(self) -> None:
        super().__init__()
        self.fifo = make_policy("fifo")
        self.seen: dict[str, list[float]] = {}

    def allocate(self, ctx: Context):
        for job, samples in ctx.samples.items():
            self.seen[job] = [x.rate for x in samples]
        return self.fifo.allocate(ctx)


def watched(**kw) -> dict[str, list[float]]:
    pol = Watch()
    simulate(TRACE, fifo(policy=pol), **kw)
    return pol.seen


def test_samples_are_reported_only_with_noise_and_follow_the_seed() -> None:
    assert watched() == {}
    a, b, c = watched(sample_noise=0.2, seed=0), watched(sample_noise=0.2, seed=0), watched(sample_noise=0.2, seed=1)
    assert a == b and a != c
    assert watched(sample_noise=0.2) == a  # the default seed is 0
    # the only decision after t=0 is at t=5, where b has left: a's one sample, from its start at 0
    assert list(a) == ["a"] and len(a["a"]) == 1 and a["a"][0] != 2.0 and a["a"][0] > 0  # 2 it/s, made noisy


# ---------------------------------------------------------------- restart charges
class CostSpy(Scheduler):
    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.costs: list[tuple[str, float]] = []

    def set_resize_cost(self, job_id, seconds: float) -> None:
        self.costs.append((job_id, seconds))
        super().set_resize_cost(job_id, seconds)


def test_restart_costs_are_passed_on_only_when_charged_and_not_zero() -> None:
    restart = ReconfigCost("restart")
    per = restart.resize_cost("lin")
    assert per > 0
    # a model with a measured cold start is charged its own, not the default
    chat = CurveTable.from_points({"ChatbotModel256": {1: 1.0, 2: 2.0}})
    s = CostSpy(Cluster.for_gpus(4, 4), make_policy("fifo"), chat)
    simulate([JobSpec("m", 0.0, 2, 4.0, "ChatbotModel256", max_gpus=2)], s, restart, charge_restarts=True)
    assert s.costs == [("m", restart.resize_cost("ChatbotModel256"))] and s.costs[0][1] < per
    s = CostSpy(Cluster.for_gpus(4, 4), make_policy("fifo"), LIN)
    simulate(TRACE, s, restart, charge_restarts=True)
    assert s.costs == [("a", per), ("b", per), ("c", per)]
    s = CostSpy(Cluster.for_gpus(4, 4), make_policy("fifo"), LIN)
    simulate(TRACE, s, restart)
    assert s.costs == []
    s = CostSpy(Cluster.for_gpus(4, 4), make_policy("fifo"), LIN)
    simulate(TRACE, s, ReconfigCost("in-place"), charge_restarts=True)  # 0: an in-place resize is free
    assert s.costs == []


# ---------------------------------------------------------------- the checks run when asked, only then
class LosesAGpu(Scheduler):
    """After its first step, a free GPU is marked busy though nobody holds it."""

    def step(self, now: float) -> StepResult:
        out = super().step(now)
        if self.steps == 1:
            self.placer.free[int(np.flatnonzero(self.placer.free)[-1])] = False
        return out


class FinishesTwice(Scheduler):
    def complete(self, job_id, now, *a, **kw) -> JobRecord:
        rec = super().complete(job_id, now, *a, **kw)
        self.records.append(rec)
        return rec


def test_step_checks_run_when_asked_and_only_then() -> None:
    with pytest.raises(InvariantViolation, match=r"^t=0\.0: placer free-map disagrees with the allocation$"):
        simulate(TRACE, LosesAGpu(Cluster.for_gpus(5, 5), make_policy("fifo"), LIN), check=True)
    res = simulate(TRACE, LosesAGpu(Cluster.for_gpus(5, 5), make_policy("fifo"), LIN))
    assert len(res.records) == 3


def test_final_checks_run_when_asked_and_only_then() -> None:
    with pytest.raises(InvariantViolation, match="^not every job finished exactly once$"):
        simulate(TRACE, FinishesTwice(Cluster.for_gpus(4, 4), make_policy("fifo"), LIN), check=True)
    res = simulate(TRACE, FinishesTwice(Cluster.for_gpus(4, 4), make_policy("fifo"), LIN))
    assert len(res.records) == 6


# ---------------------------------------------------------------- a run that cannot end
class Idle(Policy):
    name = "idle"

    def allocate(self, ctx: Context):
        return Shares(np.zeros(len(ctx.jobs), dtype=np.int64))


def test_jobs_that_can_never_run_are_refused_with_their_names() -> None:
    specs = [rigid("x", 0.0, 3, 10.0), rigid("y", 2.6, 1, 10.0)]
    with pytest.raises(InvariantViolation, match=r"^idle: 2 jobs can never run \(no GPUs given at t=3\); "
                                                 r"e\.g\. x requests 3 GPUs$"):
        simulate(specs, fifo(policy=Idle()))


def test_a_job_left_waiting_while_others_still_arrive_is_not_refused() -> None:
    """FIFO without backfill: b (4 GPUs) waits behind a; it is not 'never' while a runs."""
    specs = [rigid("a", 0.0, 2, 20.0), rigid("b", 1.0, 4, 8.0), rigid("c", 2.0, 1, 1.0)]
    res = simulate(specs, fifo(policy=make_policy("fifo:backfill=false")), check=True)
    assert {r.spec.job_id: r.finish for r in res.records} == pytest.approx({"a": 10.0, "b": 12.0, "c": 13.0})


# ---------------------------------------------------------------- sharing jobs
def test_a_sharing_run_returns_its_colocation_log() -> None:
    specs = [JobSpec("x", 0.0, 1, 10.0, "lin", max_gpus=1, gpu_fraction=0.5),
             JobSpec("y", 0.0, 1, 10.0, "lin", max_gpus=1, gpu_fraction=0.5)]
    s = fifo(1, 1, sharing=SharingRule.parse("pack"), retained=lambda a, b, t: 0.5)
    res = simulate(specs, s, check=True)
    assert isinstance(res.colocation, ColocationLog)
    assert res.colocation.ran == pytest.approx({"x": 20.0, "y": 20.0})  # both at half speed: 20 s
    assert {r.spec.job_id: r.finish for r in res.records} == pytest.approx({"x": 20.0, "y": 20.0})


# ---------------------------------------------------------------- properties
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 4), st.integers(1, 40)), min_size=1, max_size=8))
def test_rigid_fifo_on_one_gpu_per_job_counts_every_event(jobs) -> None:
    """Whatever the trace: every job arrives and exits once (2n events, more only for wake-ups, none
    here); at most one step per distinct instant; the jobs' work adds up (check=True)."""
    specs = [rigid(f"j{i}", float(a), g, float(w)) for i, (a, g, w) in enumerate(jobs)]
    s = fifo()
    res = simulate(specs, s, check=True)
    assert res.events == 2 * len(specs)
    instants = {sp.arrival for sp in specs} | {r.finish for r in res.records}
    assert res.steps == s.steps <= len(instants)
    assert res.actions == len(specs)  # rigid FIFO: each job started once, never resized
    assert res.utilisation[-1][1] == 0
    for r in res.records:
        assert r.finish == pytest.approx(r.first_start + r.spec.total_work / r.spec.requested_gpus)
