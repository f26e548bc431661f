"""Tiresias-L (ALGORITHMS.md §4), pinned decision by decision: every decision's shares AND the time
the policy asks to be woken at (the next demotion of a job it runs, the next promotion of one it
leaves waiting), worked out by hand in the comments; plus the threshold's tolerance, backfilling and
the parameter checks."""

from __future__ import annotations

import numpy as np
import pytest

import reference as ref
from test_reference_equivalence import run_lockstep

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies.registry import PolicySpecError
from coddl.policies.tiresias import TiresiasL
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})  # P(k) = k steps/s


class Recorded(TiresiasL):
    """Tiresias-L that writes down each decision: (time, GPUs per running job, its wakeup)."""

    def __init__(self, params: TiresiasL.Params) -> None:
        super().__init__(params)
        self.log: list[tuple[float, dict[str, int], float | None]] = []

    def allocate(self, ctx):
        out = super().allocate(ctx)
        held = {jid: int(g) for jid, g in zip(ctx.jobs.ids, out) if g}
        self.log.append((ctx.now, held, self.wakeup(ctx)))
        return out


def decisions(params: TiresiasL.Params, specs: list[JobSpec], gpus: int) -> list[tuple[float, dict, float | None]]:
    pol = Recorded(params)
    simulate(specs, Scheduler(Cluster.for_gpus(gpus, 8), pol, LIN), check=True)
    return pol.log


def same(got, want) -> None:
    assert len(got) >= len(want)
    for (t, held, wake), (t2, held2, wake2) in zip(got, want):
        assert (t, held) == (pytest.approx(t2), held2)
        assert wake == (None if wake2 is None else pytest.approx(wake2)), f"wakeup after the decision at {t}"


@pytest.mark.parametrize("keep", [True, False])
def test_knob_promotions_and_their_wakeups(keep: bool) -> None:
    """One GPU, threshold 100 GPU-s, knob 2, accumulated waits; A at 0 and B at 50, both long.
    0: A runs, demoted at 100.   50: B waits in the top queue behind A (no promotion to wait for).
    100: A demoted, B runs (demoted at 200); A waits from 100 after running 100 s: promoted at
         100 + 2 × 100 = 300.
    200: B demoted; both low, A first: A resumes (its wait 100–200 counted, waited 100); B waits
         from 200 after 100 s run: promoted at 200 + 200 = 400 (A, low, has no demotion left).
    400: B promoted (waited 200 = 2 × 100), runs from the top queue, demoted at 500; A waits from
         400, ran 300 s, waited 100: promoted at 400 + 600 − 100 = 900.
    500: B demoted; A (waited 100 + 100 = 200 < 600) resumes; B promoted at 500 + 200 = 700.
    700: B promoted (its run since the promotion at 400: 100 s); demoted at 800; A (ran 500,
         waited 200) at 700 + 1,000 − 200 = 1,500.
    800: A resumes (waited 300); B, waited 0 since its promotion, at 800 + 200 = 1,000.
    Clearing a demotion when a job is given GPUs again (keep_demotion=False) changes nothing here:
    service is counted since the last promotion, so a resumed job crosses its threshold again at
    once, and a job left waiting keeps its demotion (and so can be promoted)."""
    specs = [JobSpec("A", 0.0, 1, 5000.0, "lin"), JobSpec("B", 50.0, 1, 5000.0, "lin")]
    got = decisions(TiresiasL.Params(thresholds=(100.0,), knob=2.0, keep_demotion=keep), specs, 1)
    same(got, [(0, {"A": 1}, 100), (50, {"A": 1}, 100), (100, {"B": 1}, 200), (200, {"A": 1}, 400),
               (400, {"B": 1}, 500), (500, {"A": 1}, 700), (700, {"B": 1}, 800), (800, {"A": 1}, 1000)])


@pytest.mark.parametrize("keep", [True, False])
def test_several_thresholds_given_out_of_order_demote_by_gpu_seconds(keep: bool) -> None:
    """Two GPUs, thresholds (200, 50) — sorted: 50 then 200 GPU-s, three queues; no knob.
    A (2 GPUs, 1,000 steps) at 0, B (1 GPU) at 10.
    0: A runs, 50 GPU-s on 2 GPUs at 25.   10: B cannot fit beside A (same queue, A first): 25.
    25: A in queue 1, B (queue 0) runs alone (A needs 2), demoted at 25 + 50 = 75.
    75: both in queue 1, A first: A runs, its next threshold 200 at 75 + (200 − 50) / 2 = 150.
    150: A in queue 2, B (queue 1) runs, reaches 200 at 150 + 150 = 300.
    300: both in queue 2, A first, no threshold left: no wakeup. A has done 2 × 100 s = 200
    steps and ends at 300 + 800 / 2 = 700; then B alone.
    Clearing a demotion when a job is given GPUs again (keep_demotion=False) changes nothing with
    service counted since the last promotion: A, resumed at 75 with 50 GPU-s, is back in queue 1 at
    once, and its next threshold (200) is still to be waited for."""
    specs = [JobSpec("A", 0.0, 2, 1000.0, "lin"), JobSpec("B", 10.0, 1, 1000.0, "lin")]
    got = decisions(TiresiasL.Params(thresholds=(200.0, 50.0), knob=None, keep_demotion=keep), specs, 2)
    same(got, [(0, {"A": 2}, 25), (10, {"A": 2}, 25), (25, {"B": 1}, 75), (75, {"A": 2}, 150),
               (150, {"B": 1}, 300), (300, {"A": 2}, None), (700, {"B": 1}, None)])


def test_coddl_rule_restarts_the_count_and_clears_the_demotion() -> None:
    """The coddl rule (service since the last start, demotion cleared when given GPUs again, order
    by first start), one GPU, threshold 60 GPU-s; A at 0, B at 10.
    0: A starts: demoted 60 s later.   10: B waits (A started first; B never did): still 60.
    60: A demoted, B starts (its count from 0): 120.
    120: B demoted; both in queue 1, A started first (0 < 60): A restarts, its demotion cleared
         and its count from 0 again: 180.
    180: A demoted again, but still first by first start: it keeps running and no threshold is
         left to wait for (it is in the last queue while it runs). A ends at 1,060."""
    specs = [JobSpec("A", 0.0, 1, 1000.0, "lin"), JobSpec("B", 10.0, 1, 1000.0, "lin")]
    params = TiresiasL.Params(thresholds=(60.0,), knob=None, service="since-start", queue_order="first-start",
                              keep_demotion=False)
    got = decisions(params, specs, 1)
    same(got, [(0, {"A": 1}, 60), (10, {"A": 1}, 60), (60, {"B": 1}, 120), (120, {"A": 1}, 180),
               (180, {"A": 1}, None), (1060, {"B": 1}, 1120)])


def test_accumulated_waits_and_a_job_promoted_while_preempted() -> None:
    """One GPU, threshold 100, knob 1, accumulated waits; A (10,000 s), B (30 s) at 100, C at 150
    (test_handbuilt's scenario, here with the wakeups).
    100: A demoted (ran 100) waits; B runs: B's demotion at 200 before A's promotion at 200 — 200.
    130: B ends; A resumes (waited 30); nothing left to wait for.
    150: C runs; A (ran 120, waited 30) waits from 150: promoted at 150 + 120 − 30 = 240; C's
         demotion at 250.   200: an earlier wakeup, nothing changes.
    240: A promoted, runs, demoted at 340 (C waits in the top queue: nothing to promote).
    340: C resumes (its wait 240–340 counted: 100), reaches 100 GPU-s at 350; A waits from 340
         (ran 100 since its promotion, waited 0): 440.
    350: C demoted behind A, but its waits (100) already meet 1 × its run (100): promoted at once,
         keeps running, demoted at 450; A still promoted at 440.
    440: A promoted and runs: 540."""
    specs = [JobSpec("A", 0.0, 1, 10_000.0, "lin"), JobSpec("B", 100.0, 1, 30.0, "lin"),
             JobSpec("C", 150.0, 1, 1_000.0, "lin")]
    got = decisions(TiresiasL.Params(thresholds=(100.0,), knob=1.0, starvation_wait="accumulated"), specs, 1)
    same(got, [(0, {"A": 1}, 100), (100, {"B": 1}, 200), (130, {"A": 1}, None), (150, {"C": 1}, 240),
               (200, {"C": 1}, 240), (240, {"A": 1}, 340), (340, {"C": 1}, 350), (350, {"C": 1}, 440),
               (440, {"A": 1}, 540)])


def test_current_waits_only() -> None:
    """As above with only the wait in progress counted.
    150: C runs; A (ran 120) waits from 150: promotion at 270, after C's demotion at 250.
    250: C demoted; A (current wait 100 < 120) first in the low queue resumes; C (ran 100)
         waits from 250: promoted at 350.
    350: C promoted, runs, demoted at 450; A (ran 220) waits from 350: 570.
    450: A resumes; C waits from 450: 550."""
    specs = [JobSpec("A", 0.0, 1, 10_000.0, "lin"), JobSpec("B", 100.0, 1, 30.0, "lin"),
             JobSpec("C", 150.0, 1, 1_000.0, "lin")]
    got = decisions(TiresiasL.Params(thresholds=(100.0,), knob=1.0, starvation_wait="current"), specs, 1)
    same(got, [(0, {"A": 1}, 100), (100, {"B": 1}, 200), (130, {"A": 1}, None), (150, {"C": 1}, 250),
               (200, {"C": 1}, 250), (250, {"A": 1}, 350), (350, {"C": 1}, 450), (450, {"A": 1}, 550),
               (550, {"C": 1}, 650)])


# ------------------------------------------------------------------ one decision
def one_decision(params: TiresiasL.Params, jobs: list[tuple[str, int, float]], gpus: int,
                 now: float = 0.0) -> tuple[dict[str, int], TiresiasL, Scheduler]:
    """Jobs (id, GPUs, attained GPU-seconds) submitted at 0 in that order, none running."""
    pol = TiresiasL(params)
    s = Scheduler(Cluster.for_gpus(gpus, 8), pol, LIN)
    for jid, g, served in jobs:
        s.submit(JobSpec(jid, 0.0, g, 1e6, "lin"), 0.0, attained_service=served)
    out = pol.allocate(s.context(now))
    return {jid: int(g) for jid, g in zip(s.context(now).jobs.ids, out) if g}, pol, s


@pytest.mark.parametrize("served, demoted", [(100.0 - 5e-7, True), (100.0 - 1e-5, False), (100.0, True)])
def test_a_job_within_a_millionth_of_its_threshold_has_crossed_it(served: float, demoted: bool) -> None:
    # X (served just short of 100) and Y (nothing) on one GPU: X first in the top queue unless demoted
    got, _, _ = one_decision(TiresiasL.Params(thresholds=(100.0,), knob=None), [("X", 1, served), ("Y", 1, 0.0)], 1)
    assert got == ({"Y": 1} if demoted else {"X": 1})


@pytest.mark.parametrize("served, demoted", [(1e6 - 5e-4, True), (1e6 - 5e-3, False)])
def test_the_tolerance_is_relative_for_large_thresholds(served: float, demoted: bool) -> None:
    # 10⁻⁹ of a million GPU-seconds is 10⁻³
    got, _, _ = one_decision(TiresiasL.Params(thresholds=(1e6,), knob=None), [("X", 1, served), ("Y", 1, 0.0)], 1)
    assert got == ({"Y": 1} if demoted else {"X": 1})


@pytest.mark.parametrize("backfill, want", [(True, {"A": 2, "C": 1}), (False, {"A": 2})])
def test_backfilling_past_a_job_that_does_not_fit(backfill: bool, want: dict) -> None:
    # three GPUs; A (2) runs, B (2) does not fit, C (1) takes the last GPU only with backfilling
    jobs = [("A", 2, 0.0), ("B", 2, 0.0), ("C", 1, 0.0)]
    got, _, _ = one_decision(TiresiasL.Params(thresholds=(100.0,), knob=None, backfill=backfill), jobs, 3)
    assert got == want


def test_demoted_jobs_queue_behind_and_the_wakeup_is_the_first_demotion() -> None:
    # two GPUs, thresholds 50 and 500; X served 60 (queue 1), Y 10, Z 0 (queue 0): Y and Z run.
    # Y's next threshold (50) at 40 s, Z's at 50 s: wake at 40; at 40 the view of 40 s later
    # is not before the wakeup, so nothing is asked then
    got, pol, s = one_decision(TiresiasL.Params(thresholds=(50.0, 500.0), knob=None),
                               [("X", 1, 60.0), ("Y", 1, 10.0), ("Z", 1, 0.0)], 2)
    assert got == {"Y": 1, "Z": 1}
    assert pol.wakeup(s.context(0.0)) == pytest.approx(40.0)
    assert pol.wakeup(s.context(39.0)) == pytest.approx(40.0)
    assert pol.wakeup(s.context(40.0)) is None


def test_a_fresh_policy_asks_for_no_wakeup() -> None:
    pol = TiresiasL()
    s = Scheduler(Cluster.for_gpus(1, 8), pol, LIN)
    s.submit(JobSpec("A", 0.0, 1, 10.0, "lin"), 0.0)
    assert pol.wakeup(s.context(0.0)) is None


def test_the_default_and_the_thresholds_it_keeps() -> None:
    pol = TiresiasL()
    assert pol.params == TiresiasL.Params()
    assert pol._thr.tolist() == [3600.0] and pol._thr.dtype == np.float64
    assert TiresiasL(TiresiasL.Params(thresholds=(7, 3)))._thr.tolist() == [3.0, 7.0]


@pytest.mark.parametrize("field, value, message", [
    ("service", "wall", "tiresias-l: service must be 'attained' or 'since-start', got 'wall'"),
    ("queue_order", "random", "tiresias-l: queue_order must be 'arrival' or 'first-start', got 'random'"),
    ("starvation_wait", "total", "tiresias-l: starvation_wait must be 'accumulated' or 'current', got 'total'"),
])
def test_each_choice_is_checked_with_one_exact_message(field: str, value: str, message: str) -> None:
    with pytest.raises(PolicySpecError) as e:
        TiresiasL(TiresiasL.Params(**{field: value}))
    assert str(e.value) == message


def test_a_run_shorter_than_a_second_still_counts_the_wait() -> None:
    """One GPU, threshold 0.5 GPU-s, knob 2; A and B at 0 (A submitted first).
    0: A runs, demoted at 0.5.   0.5: B runs (demoted at 1); A (ran 0.5 s) promoted at 0.5 + 1 = 1.5.
    1: both low, A first resumes (waited 0.5); B (ran 0.5) waits from 1: promoted at 2.
    2: B promoted — a run of half a second is a run — and demoted at 2.5; A (ran 1.5, waited 0.5)
       at 2 + 3 − 0.5 = 4.5.   2.5: A resumes (waited 1); B promoted at 2.5 + 1 = 3.5."""
    specs = [JobSpec("A", 0.0, 1, 100.0, "lin"), JobSpec("B", 0.0, 1, 100.0, "lin")]
    got = decisions(TiresiasL.Params(thresholds=(0.5,), knob=2.0), specs, 1)
    same(got, [(0, {"A": 1}, 0.5), (0.5, {"B": 1}, 1.0), (1.0, {"A": 1}, 2.0), (2.0, {"B": 1}, 2.5),
               (2.5, {"A": 1}, 3.5)])


def test_a_job_taken_over_with_service_waits_from_its_arrival() -> None:
    """A job taken over after a controller restart arrives with 200 GPU-s (one GPU, threshold 100,
    knob 1): it starts demoted and waits from its arrival at 500, so it is promoted at 500 + 200.
    Y (new, submitted first) runs; it is demoted at 600 but stays ahead of X in the low queue
    (same arrival, earlier submission) until X's promotion."""
    pol = TiresiasL(TiresiasL.Params(thresholds=(100.0,), knob=1.0))
    s = Scheduler(Cluster.for_gpus(1, 1), pol, LIN)
    s.submit(JobSpec("Y", 500.0, 1, 1e6, "lin"), 500.0)
    s.submit(JobSpec("X", 500.0, 1, 1e6, "lin"), 500.0, attained_service=200.0)
    for t, runs, wake in ((500.0, "Y", 600.0), (600.0, "Y", 700.0), (700.0, "X", 800.0)):
        s.step(t)
        assert [s.table.ids[r] for r in range(s.table.n) if s.table.share[r]] == [runs], t
        assert s.next_wakeup(t) == pytest.approx(wake)


def test_a_job_exactly_the_tolerance_short_of_its_threshold_has_crossed_it() -> None:
    # the threshold is 99 + 10⁻⁶ as the policy computes 99 + its tolerance: within it, inclusive
    got, _, _ = one_decision(TiresiasL.Params(thresholds=(99.0 + 1e-6,), knob=None), [("X", 1, 99.0), ("Y", 1, 0.0)], 1)
    assert got == {"Y": 1}
    got, _, _ = one_decision(TiresiasL.Params(thresholds=(99.0 + 2e-6,), knob=None), [("X", 1, 99.0), ("Y", 1, 0.0)], 1)
    assert got == {"X": 1}


def test_a_preempted_job_is_promoted_at_once_by_its_time_not_its_gpu_seconds() -> None:
    """test_accumulated_waits_and_a_job_promoted_while_preempted on two GPUs with every job asking
    for both and twice the threshold (200 GPU-s): the same times. At 350 C has run 200 GPU-s = 100 s
    since its promotion and waited 100 s: promoted at once (counted in GPU-seconds it would not be)."""
    specs = [JobSpec("A", 0.0, 2, 20_000.0, "lin"), JobSpec("B", 100.0, 2, 60.0, "lin"),
             JobSpec("C", 150.0, 2, 2_000.0, "lin")]
    got = decisions(TiresiasL.Params(thresholds=(200.0,), knob=1.0, starvation_wait="accumulated"), specs, 2)
    same(got, [(0, {"A": 2}, 100), (100, {"B": 2}, 200), (130, {"A": 2}, None), (150, {"C": 2}, 240),
               (200, {"C": 2}, 240), (240, {"A": 2}, 340), (340, {"C": 2}, 350), (350, {"C": 2}, 440),
               (440, {"A": 2}, 540)])


def test_counting_only_the_current_wait_a_preempted_job_has_waited_nothing() -> None:
    """One GPU, threshold 0.5 GPU-s, knob 1, current waits; A and B at 0.
    0.5: A demoted after 0.5 s — preempted, its current wait is 0, so it is not promoted at once; B
         runs (demoted at 1), A promoted at 0.5 + 0.5 = 1.
    1: A promoted, runs (demoted at 1.5); B waits from 1: promoted at 1.5. And so on, alternating."""
    specs = [JobSpec("A", 0.0, 1, 100.0, "lin"), JobSpec("B", 0.0, 1, 100.0, "lin")]
    got = decisions(TiresiasL.Params(thresholds=(0.5,), knob=1.0, starvation_wait="current"), specs, 1)
    same(got, [(0, {"A": 1}, 0.5), (0.5, {"B": 1}, 1.0), (1.0, {"A": 1}, 1.5), (1.5, {"B": 1}, 2.0),
               (2.0, {"A": 1}, 2.5)])


@pytest.mark.parametrize("order, first", [("first-start", "A"), ("arrival", "A")])
def test_ties_go_to_the_earlier_arrival_not_the_earlier_submission(order: str, first: str) -> None:
    # B (arrives 5) is submitted before A (arrives 1); neither has started: A first either way
    pol = TiresiasL(TiresiasL.Params(thresholds=(100.0,), knob=None, queue_order=order))
    s = Scheduler(Cluster.for_gpus(1, 1), pol, LIN)
    s.submit(JobSpec("B", 5.0, 1, 1e6, "lin"), 5.0)
    s.submit(JobSpec("A", 1.0, 1, 1e6, "lin"), 5.0)
    ctx = s.context(5.0)
    out = pol.allocate(ctx)
    assert [jid for jid, g in zip(ctx.jobs.ids, out) if g] == [first]


def test_a_preempted_job_that_ran_less_than_a_second_is_promoted_at_once_too() -> None:
    """test_accumulated_waits_and_a_job_promoted_while_preempted with every time and length divided
    by 128 (exact in binary): at 350/128 C has run 100/128 s (under a second) and waited as long."""
    k = 128.0
    specs = [JobSpec("A", 0.0, 1, 10_000.0 / k, "lin"), JobSpec("B", 100.0 / k, 1, 30.0 / k, "lin"),
             JobSpec("C", 150.0 / k, 1, 1_000.0 / k, "lin")]
    got = decisions(TiresiasL.Params(thresholds=(100.0 / k,), knob=1.0, starvation_wait="accumulated"), specs, 1)
    want = [(0, {"A": 1}, 100), (100, {"B": 1}, 200), (130, {"A": 1}, None), (150, {"C": 1}, 240),
            (200, {"C": 1}, 240), (240, {"A": 1}, 340), (340, {"C": 1}, 350), (350, {"C": 1}, 440),
            (440, {"A": 1}, 540)]
    same(got, [(t / k, held, None if w is None else w / k) for t, held, w in want])


def test_promotions_at_preemption_by_first_start_match_the_reference() -> None:
    """The re-fit after a preempted job's promotion orders and backfills as the first fit does: in
    lockstep with the reference transcription, first-start order and the knob, on a few workloads
    where such promotions happen."""
    kw = dict(thresholds=(50.0,), knob=2.0, queue_order="first-start")

    def make():
        r = ref.TiresiasL(kw["thresholds"], kw["knob"], "attained", "first-start", "accumulated")
        return TiresiasL(TiresiasL.Params(**kw)), r.decide, None

    assert run_lockstep(make, range(3), rigid=True) > 20


def test_promotions_at_preemption_without_backfilling_match_the_reference() -> None:
    """As above with backfilling off: the re-fit stops at the first job that does not fit, too."""
    kw = dict(thresholds=(50.0,), knob=2.0, backfill=False)

    def make():
        r = ref.TiresiasL(kw["thresholds"], kw["knob"], "attained", "arrival", "accumulated", backfill=False)
        return TiresiasL(TiresiasL.Params(**kw)), r.decide, None

    assert run_lockstep(make, range(3), rigid=True) > 20
