"""A job whose resize costs a restart is grown only when the growth saves more than the restart
costs (``coddl.policies.restarts``); the GPUs it does not take go to the others in the same
decision; a job that resizes for free is decided exactly as before. Expected shares are worked
out by hand in the comments (curve P(k) = k steps/s)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy, restarts
from coddl.scheduler import Scheduler

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})
COST = 100.0


def shares(s: Scheduler) -> dict[str, int]:
    return {j: int(s.table.share[s.table.row[j]]) for j in s.table.ids}


def after_b_leaves(work_a: float, cost: float = COST, policy: str = "max-min") -> dict[str, int]:
    """4 GPUs. A and B start on 2 each at t = 0 (max-min); A runs at 2 it/s. B leaves at 50 s,
    when A has ``work_a`` − 100 steps left and may grow to 4 GPUs."""
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy(policy), LIN)
    s.submit(JobSpec("A", 0.0, 1, work_a, "lin", 1, 4), 0.0)
    s.submit(JobSpec("B", 0.0, 1, 1e6, "lin", 1, 4), 0.0)
    s.step(0.0)
    assert shares(s) == {"A": 2, "B": 2}
    s.set_rate("A", 2.0, 0.0)
    s.set_resize_cost("A", cost)
    s.complete("B", 50.0)
    s.step(50.0)
    return shares(s)


@pytest.mark.parametrize(("work_a", "grown"), [
    (250.0, False),  # 150 left: T(2) = 75 s, T(4) = 37.5 s; saves 37.5 s < 100 s: not worth a restart
    (500.0, False),  # 400 left: saves 200 − 100 = exactly 100 s, no more than the cost: kept
    (502.0, True),  # 402 left: saves 100.5 s > 100 s
    (2100.0, True),  # 2,000 left: T(2) = 1,000 s, T(4) = 500 s; saves 500 s > 100 s: grown
])
def test_a_job_is_grown_by_restart_only_when_that_saves_more_than_the_restart_costs(work_a, grown) -> None:
    assert after_b_leaves(work_a) == {"A": 4 if grown else 2}


@pytest.mark.parametrize("policy", ["max-min", "afs-l"])
def test_a_job_that_resizes_for_free_grows_near_its_end(policy) -> None:
    assert after_b_leaves(250.0, cost=0.0, policy=policy) == {"A": 4}


def test_the_gpus_a_job_does_not_take_go_to_the_others_in_the_same_decision() -> None:
    # 4 GPUs: A (restart cost 100 s) and C on 1 GPU each, D rigid on 2 (max-min). D leaves at 50 s:
    # max-min would split its 2 GPUs between A and C (2 each), but A has 200 left at 1 it/s,
    # T(1) = 200 s, T(2) = 100 s: saves exactly 100 s, not more than its restart. C takes both.
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), LIN)
    s.submit(JobSpec("A", 0.0, 1, 250.0, "lin", 1, 4), 0.0)
    s.submit(JobSpec("C", 0.0, 1, 1e6, "lin", 1, 4), 0.0)
    s.submit(JobSpec("D", 0.0, 2, 1e6, "lin", 2, 2), 0.0)
    s.step(0.0)
    assert shares(s) == {"A": 1, "C": 1, "D": 2}
    s.set_rate("A", 1.0, 0.0)
    s.set_resize_cost("A", COST)
    s.complete("D", 50.0)
    step = s.step(50.0)
    assert shares(s) == {"A": 1, "C": 3}
    assert [a.job_id for a in step.plan.actions] == ["C"]
    assert int(s.table.max_gpus[s.table.row["A"]]) == 4  # held for that decision only


def test_a_resize_cost_is_seconds() -> None:
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), LIN)
    s.submit(JobSpec("A", 0.0, 1, 10.0, "lin", 1, 4), 0.0)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="non-negative"):
            s.set_resize_cost("A", bad)


CURVES = CurveTable.from_points({"lin": {k: float(k) for k in range(1, 9)},
                                 "flat": {k: 1.0 + 0.1 * (k - 1) for k in range(1, 9)}})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["lin", "flat"]), st.integers(1, 8), st.floats(10, 5000),
                          st.sampled_from([0.0, 0.0, 30.0, 300.0]), st.floats(0, 0.99)), min_size=2, max_size=6),
       st.sampled_from(["max-min", "afs-l", "optimus"]))
def test_growth_pays_and_no_gpu_is_left_to_a_held_job(jobs, policy) -> None:
    """Random jobs on 8 GPUs, decided once, half done, then decided again after the first leaves:
    every job with a resize cost that grew saves more than that cost; with no costs the decision
    is exactly the policy's; and the rule gives out as many GPUs as the policy alone would unless
    the only ones that wanted more were held (max-min and Optimus hand out every GPU some job wants)."""
    def run(with_costs: bool) -> tuple[Scheduler, np.ndarray, np.ndarray]:
        s = Scheduler(Cluster.for_gpus(8, 8), make_policy(policy), CURVES, seed=3)
        for i, (model, mx, work, _, _) in enumerate(jobs):
            s.submit(JobSpec(f"j{i}", 0.0, 1, work, model, 1, mx), 0.0)
        s.step(0.0)
        t = s.table
        for i, (model, _, work, cost, done) in enumerate(jobs):
            r = t.row[f"j{i}"]
            if t.share[r]:
                s.set_rate(f"j{i}", done * work / 100.0, 0.0)  # `done` of its work by t = 100 s
            if with_costs:
                s.set_resize_cost(f"j{i}", cost)
        s.complete("j0", 100.0)
        before = t.share[: t.n].copy()
        ctx = s.context(100.0)
        s.step(100.0)
        return s, before, ctx.remaining_time(before, slice(None)) - ctx.remaining_time(t.share[: t.n], slice(None))

    free, before, _ = run(False)
    held, before_h, saved = run(True)
    t = held.table
    cost = t.resize_cost[: t.n]
    grew = (t.share[: t.n] > before_h) & (before_h > 0) & (cost > 0)
    assert (saved[grew] > cost[grew]).all()
    if not cost.any():
        assert (t.share[: t.n] == free.table.share[: t.n]).all()
    if policy in ("max-min", "optimus"):
        want = np.where((cost > 0) & (before_h > 0) & (t.share[: t.n] == before_h), before_h, t.max_gpus[: t.n])
        assert held.gpus_in_use == min(8, int(want.sum()))


PEAK = CurveTable.from_points({"peak": {1: 1.0, 2: 2.0, 3: 1.5, 4: 1.2}, "lin": {k: float(k) for k in range(1, 9)}})


def running(work_a: float) -> Scheduler:
    """8 GPUs under FIFO (each job gets its request): A (peak curve: fastest on 2 GPUs) on 1 of up
    to 4, B on 2 of at most 2, C on 1, D (needs all 8) waiting. Nothing done yet: W = the work."""
    s = Scheduler(Cluster.for_gpus(8, 8), make_policy("fifo"), PEAK)
    for spec in (JobSpec("A", 0.0, 1, work_a, "peak", 1, 4), JobSpec("B", 0.0, 2, 500.0, "lin", 2, 2),
                 JobSpec("C", 0.0, 1, 500.0, "lin", 1, 8), JobSpec("D", 0.0, 8, 500.0, "lin", 8, 8)):
        s.submit(spec, 0.0)
    s.step(0.0)
    assert shares(s) == {"A": 1, "B": 2, "C": 1, "D": 0}
    for j, cost in (("A", COST), ("B", COST), ("D", COST)):  # C resizes in place
        s.set_resize_cost(j, cost)
    return s


@pytest.mark.parametrize(("work_a", "hopeless"), [
    (150.0, True),  # T(1) = 150 s; its best, 2 GPUs, T = 75 s: saves 75 s ≤ 100 s whatever it gets
    (200.0, True),  # saves exactly 100 s: no more than the cost
    (250.0, False),  # saves 125 s on 2 GPUs (on 4, the slowest of its growths, only 42 s)
])
def test_a_job_no_growth_pays_for_is_held_before_the_policy_runs(work_a, hopeless) -> None:
    # B is at its maximum, C resizes for free, D is not running (a start is not a resize)
    s = running(work_a)
    ctx = s.context(0.0)
    assert [ctx.jobs.ids[r] for r in restarts.hopeless(ctx)] == (["A"] if hopeless else [])


def test_the_hold_reads_each_job_at_its_own_corrected_speed() -> None:
    # A twice as fast as its curve: T(1) = 125 s, on 2 GPUs 62.5 s: saves 62.5 s. C (lin) with a
    # restart cost too, W = 500: T(1) = 500 s, on 8 GPUs 62.5 s: saves 437.5 s, grows; at a tenth of
    # its curve's speed it saves ten times that.
    s = running(250.0)
    s.set_speed("A", 2.0)
    s.set_resize_cost("C", COST)
    ctx = s.context(0.0)
    assert [ctx.jobs.ids[r] for r in restarts.hopeless(ctx)] == ["A"]
    s.set_speed("A", 0.5)  # T(1) = 500 s, on 2 GPUs 250 s: saves 250 s
    s.set_resize_cost("C", 450.0)  # > 437.5 s
    ctx = s.context(0.0)
    assert [ctx.jobs.ids[r] for r in restarts.hopeless(ctx)] == ["C"]
    s.set_speed("C", 0.1)
    ctx = s.context(0.0)
    assert list(restarts.hopeless(ctx)) == []


def test_a_growth_is_unprofitable_when_it_saves_no_more_than_the_cost() -> None:
    s = running(250.0)
    ctx = s.context(0.0)
    rows = {j: s.table.row[j] for j in "ABCD"}

    def judged(**gpus: int) -> list[str]:
        g = ctx.jobs.share.copy()
        for j, k in gpus.items():
            g[rows[j]] = k
        return sorted(ctx.jobs.ids[r] for r in restarts.unprofitable(ctx, g))

    assert judged(A=2) == []  # T(1) = 250 s → T(2) = 125 s: saves 125 s > 100 s
    assert judged(A=3) == ["A"]  # T(3) = 166.7 s: saves 83 s
    assert judged(A=4) == ["A"]  # T(4) = 208 s: saves 42 s
    assert judged(C=8, D=8) == []  # C resizes for free; D starts
    assert judged(A=1, B=1) == []  # a shrink is the policy's to decide


def judge(s: Scheduler, **gpus: int) -> tuple[list[str], list[str]]:
    """(held before the policy runs, growths in ``gpus`` judged unprofitable), as job ids."""
    ctx = s.context(0.0)
    g = ctx.jobs.share.copy()
    for j, k in gpus.items():
        g[s.table.row[j]] = k
    return ([ctx.jobs.ids[r] for r in restarts.hopeless(ctx)],
            sorted(ctx.jobs.ids[r] for r in restarts.unprofitable(ctx, g)))


def fifo_running(curves: CurveTable, gpus: int, *specs: JobSpec, costs: dict[str, float]) -> Scheduler:
    s = Scheduler(Cluster.for_gpus(gpus, gpus), make_policy("fifo"), curves)
    for spec in specs:
        s.submit(spec, 0.0)
    s.step(0.0)
    for j, cost in costs.items():
        s.set_resize_cost(j, cost)
    return s


def test_a_job_that_resizes_for_free_is_neither_held_nor_judged_even_when_growth_slows_it() -> None:
    # E on the peak curve at 2 GPUs, its fastest: 3 or 4 GPUs would slow it. It resizes in place
    # (cost 0), so whether to grow it is the policy's alone.
    s = fifo_running(PEAK, 8, JobSpec("E", 0.0, 2, 500.0, "peak", 1, 4), costs={"E": 0.0})
    assert judge(s, E=3) == ([], [])


def test_a_sub_second_cost_still_has_to_be_paid_for() -> None:
    # F (linear, 1 of up to 2 GPUs) has 0.5 steps left: T(1) = 0.5 s, T(2) = 0.25 s. A resize
    # costing 0.5 s (say, a regroup that reloads state) saves 0.25 s: not worth it.
    s = fifo_running(LIN, 4, JobSpec("F", 0.0, 1, 0.5, "lin", 1, 2), costs={"F": 0.5})
    assert judge(s, F=2) == (["F"], ["F"])
    s.set_resize_cost("F", 0.2)  # now the 0.25 s saved is more than the cost
    assert judge(s, F=2) == ([], [])


def test_the_hold_looks_only_at_counts_up_to_the_jobs_own_maximum() -> None:
    # G (linear to 8 GPUs, but its maximum is 2) on 1 GPU, W = 150: T(1) = 150 s, T(2) = 75 s:
    # saves 75 s ≤ 100 s. That 8 GPUs would save 131 s does not count: it may not have them.
    s = fifo_running(CURVES, 8, JobSpec("G", 0.0, 1, 150.0, "lin", 1, 2), costs={"G": COST})
    assert judge(s)[0] == ["G"]


def test_the_hold_reads_a_faster_job_at_its_corrected_speed() -> None:
    # A (peak curve) at twice its curve's speed, W = 500: T(1) = 250 s, on 2 GPUs 125 s: saves
    # 125 s > 100 s, so it is not held (at half its curve's speed it would save 250 s; read at
    # the curve's own speed, 125 s too — only a speed read the wrong way round sees no saving).
    s = running(500.0)
    s.set_speed("A", 2.0)
    assert judge(s)[0] == []


SLOW = CurveTable.from_points({"slow": {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4}})  # under 1 step/s


def test_the_hold_on_a_slow_model_and_at_the_end_of_its_measured_curve() -> None:
    # 8 GPUs, a model measured to 4 GPUs at 0.1 steps/s per GPU, restart cost 100 s.
    #   H on 1 of up to 2, W = 15: T(1) = 150 s, T(2) = 75 s: saves 75 s: held.
    #   K on 4 of up to 8 (its own maximum is past the curve, which is flat beyond 4), W = 100:
    #   no count it may grow to is faster: held (T(4) = 250 s whatever it gets).
    s = fifo_running(SLOW, 8, JobSpec("H", 0.0, 1, 15.0, "slow", 1, 2), JobSpec("K", 0.0, 4, 100.0, "slow", 1, 8),
                     costs={"H": COST, "K": COST})
    assert int(s.table.max_gpus[s.table.row["K"]]) == 8
    assert judge(s, H=2, K=8) == (["H", "K"], ["H", "K"])
    s.set_resize_cost("H", 50.0)  # H's growth now pays
    assert judge(s, H=2) == (["K"], [])


def test_a_job_that_makes_no_progress_is_held_and_a_waiting_one_is_not_judged() -> None:
    # 4 GPUs under FIFO: Z (1 of up to 4) and Y (3) run, D (4) waits; Z and D run at speed 0 (no
    # progress on any count) and cost 100 s to resize. Growing Z saves nothing (∞ − ∞: no gain):
    # held, and its growth is unprofitable. D is not running: a start is not a resize, whatever
    # its speed. No numpy warning is printed on the way.
    s = fifo_running(LIN, 4, JobSpec("Z", 0.0, 1, 100.0, "lin", 1, 4), JobSpec("Y", 0.0, 3, 100.0, "lin", 3, 3),
                     JobSpec("D", 0.0, 4, 100.0, "lin", 4, 4), costs={"Z": COST, "D": COST})
    assert shares(s) == {"Z": 1, "Y": 3, "D": 0}
    s.set_speed("Z", 0.0)
    s.set_speed("D", 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert judge(s, Z=2) == (["Z"], ["Z"])
        assert judge(s, D=4) == (["Z"], [])
