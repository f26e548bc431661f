"""Simulated hyperparameter studies (``coddl.sim.hpo``): the successive-halving schedule worked out by
hand, a two-policy study whose times and GPU-hours are computed by hand, and ``coddl experiment
fluid`` as a user runs it."""

from __future__ import annotations

import csv
import math
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coddl.core.cluster import Cluster
from coddl.perf.curves import CurveTable
from coddl.policies.registry import make_policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate
from coddl.sim.hpo import gpu_seconds_until, rungs, stop_rung, study_outcomes, study_workload, survivors
from coddl.sim.recorder import SimResult


def test_rungs_and_survivors_by_hand():
    assert rungs(81, 81.0, 3) == (1.0, 3.0, 9.0, 27.0, 81.0)
    assert rungs(8, 90.0, 3) == (30.0, 90.0)  # ⌊log3 8⌋ = 1
    assert rungs(9, 90.0, 3) == (10.0, 30.0, 90.0)  # log3 9 = 2 exactly (no float shortfall)
    assert rungs(1, 5.0, 2) == (5.0,)
    assert [survivors(81, 3, r) for r in range(4)] == [27, 9, 3, 1]
    assert [survivors(8, 3, r) for r in range(2)] == [2, 1]
    # of 8 trials at η = 3: the best two pass the first rung, the other six stop there
    assert [stop_rung(q, 8, 3, 2) for q in range(8)] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert [stop_rung(q, 81, 3, 5) for q in (0, 1, 2, 3, 8, 9, 26, 27, 80)] == [4, 3, 3, 2, 2, 1, 1, 0, 0]
    # with fewer rungs than the trials would allow, whoever passes the others stops at the last one
    assert [stop_rung(q, 81, 3, 2) for q in (0, 5, 26, 27)] == [1, 1, 1, 0]
    for bad in ((0, 1.0, 3), (5, 1.0, 1), (5, 0.0, 3), (5, float("nan"), 3)):
        with pytest.raises(ValueError, match=r"rungs: need trials >= 1, eta >= 2 and full > 0"):
            rungs(bad[0], bad[1], bad[2])


@given(st.integers(1, 400), st.integers(2, 5))
def test_every_rung_keeps_its_share_and_the_best_runs_to_the_end(n, eta):
    rs = rungs(n, 1.0, eta)
    stops = [stop_rung(q, n, eta, len(rs)) for q in range(n)]
    assert stops[0] == len(rs) - 1 and rs[-1] == 1.0
    assert stops == sorted(stops, reverse=True)  # better trials never stop earlier
    for r in range(len(rs) - 1):
        assert sum(s > r for s in stops) == survivors(n, eta, r)


def test_a_workload_of_81_trials_does_the_work_successive_halving_leaves():
    curves = CurveTable.from_points({"lin": {1: 2.0, 2: 4.0, 4: 8.0}})  # 2 steps/s on one GPU
    w = study_workload([81, 8], curves, ["lin"], trial_s=81.0, eta=3, interval_s=100.0, seed=4)
    full = 162.0
    a, b = w.studies
    assert (a.trials, a.first_job, b.first_job, b.arrival) == (81, 0, 81, 100.0) and a.rungs[-1] == full
    work_a = sorted(j.total_work for j in w.jobs if j.extra["study"] == 0)
    assert math.isclose(sum(work_a), full * (54 / 81 + 18 / 27 + 6 / 9 + 2 / 3 + 1))
    assert work_a[-1] == full and work_a[-2] < full  # one trial runs to the end: the best
    assert w.jobs[a.best].total_work == full and w.jobs[b.best].total_work == full
    assert all(j.requested_gpus == 1 and j.user == f"study-{j.extra['study']}" for j in w.jobs)
    assert [j.extra["trial"] for j in w.jobs] == [*range(81), *range(8)] and [j.job_id for j in w.jobs] == [*range(89)]
    assert (a.name, b.name, a.model, b.model) == ("study-0", "study-1", "lin", "lin")
    # by default the studies arrive together, and the seed is 0
    assert study_workload([4, 4], curves, ["lin"], trial_s=9.0) == study_workload([4, 4], curves, ["lin"], trial_s=9.0,
                                                                                    interval_s=0.0, seed=0)
    assert {j.arrival for j in study_workload([4, 4], curves, ["lin"], trial_s=9.0).jobs} == {0.0}
    assert study_workload([9], curves, ["lin"], trial_s=9.0).studies[0].rungs == (2.0, 6.0, 18.0)  # η = 3 by default
    again = study_workload([81, 8], curves, ["lin"], trial_s=81.0, eta=3, interval_s=100.0, seed=4)
    assert again == w  # seeded: the same seed gives the same studies
    others = [study_workload([81], curves, ["lin"], trial_s=81.0, seed=s).studies[0].best for s in range(5)]
    assert len(set(others)) > 1  # and the seed decides which trial is best


def test_a_study_of_three_trials_by_hand():
    """Three trials of a linearly scaling model (1 step/s per GPU, up to 4 GPUs), R = 3600; two
    stop at R/3. FIFO, one GPU each: losers end at 1200 s, the best at 3600 s, 6000 GPU-s spent.
    Max-min on 6 GPUs: 2 GPUs each, the losers end at 600 s; the best then gets 4 GPUs and does its
    remaining 2400 steps in 600 s: best at 1200 s, again 2·600·3 + 4·600 = 6000 GPU-s."""
    curves = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})
    w = study_workload([3], curves, ["lin"], trial_s=3600.0, eta=3, seed=0)
    for policy, gpus, best_s in (("fifo", 3, 3600.0), ("max-min", 6, 1200.0)):
        sched = Scheduler(Cluster.homogeneous(1, gpus), make_policy(policy), curves)
        res = simulate(list(w.jobs), sched, check=True)
        (o,) = study_outcomes(res, w)
        assert math.isclose(o.best_h * 3600, best_s) and math.isclose(o.makespan_h * 3600, best_s), policy
        assert math.isclose(o.gpu_hours_to_best * 3600, 6000.0) and math.isclose(o.gpu_hours * 3600, 6000.0), policy
        assert o.study == "study-0"


def test_each_study_counts_its_own_trials_from_its_own_arrival():
    """Two such studies, the second 100 s later, FIFO on 6 GPUs: each trial has a GPU at once, so each
    study takes an hour from its arrival and spends 6000 GPU-s (not the other study's as well)."""
    curves = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})
    w = study_workload([3, 3], curves, ["lin"], trial_s=3600.0, eta=3, interval_s=100.0, seed=0)
    res = simulate(list(w.jobs), Scheduler(Cluster.homogeneous(1, 6), make_policy("fifo"), curves), check=True)
    for o in study_outcomes(res, w):
        assert math.isclose(o.makespan_h, 1.0) and math.isclose(o.best_h, 1.0), o
        assert math.isclose(o.gpu_hours * 3600, 6000.0) and math.isclose(o.gpu_hours_to_best * 3600, 6000.0), o
    empty = SimResult("p", res.records, 6, 0)  # a run without its timeline cannot say
    with pytest.raises(ValueError, match=r"^study_outcomes needs the run's timeline \(simulate\(\.\.\., record_timeline=True\)\)$"):
        study_outcomes(empty, w)


def test_gpu_seconds_stop_at_the_cutoff_and_at_the_jobs_finish():
    from coddl.core.job import JobSpec
    from coddl.core.table import JobRecord

    spec = JobSpec(job_id=7, arrival=0.0, requested_gpus=1, total_work=1.0, model="m")
    res = SimResult("p", [JobRecord(spec, "finished", 50.0, 0.0, 0.0, 2)], 8, 0,
                    timeline=[(0.0, 5, 8), (0.0, 7, 2), (5.0, 9, 3), (10.0, 7, 4), (30.0, 7, 1), (40.0, 9, 1)])
    assert gpu_seconds_until(res, {7: math.inf}) == {7: 2 * 10 + 4 * 20 + 1 * 20}
    assert gpu_seconds_until(res, {7: 20.0}) == {7: 2 * 10 + 4 * 10}
    assert gpu_seconds_until(res, {7: 5.0}) == {7: 10.0}
    # job 9 has no record (still running when the run was cut): it counts up to the cutoff
    assert gpu_seconds_until(res, {9: 60.0, 7: 60.0}) == {9: 3 * 35 + 1 * 20, 7: 120.0}


def test_the_fluid_experiment_as_a_user_runs_it(tmp_path):
    out = tmp_path / "fluid"
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "experiment", "fluid", "--scenarios", "few", "--seeds", "1",
                        "--policies", "fifo,max-min", "--workers", "1", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env={"COLUMNS": "200", "PATH": ""})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {row["policy"]: row for row in csv.DictReader((out / "table.csv").open())}
    assert set(rows) == {"fifo", "max-min"} and (out / "fluid.png").stat().st_size > 10_000
    # FIFO, one GPU per trial: the best trial runs its hour alone; max-min spreads 32 GPUs over 8 trials
    assert math.isclose(float(rows["fifo"]["best_h"]), 1.0, rel_tol=0.02) and float(rows["fifo"]["best_vs_fifo"]) == 1.0
    assert float(rows["max-min"]["best_vs_fifo"]) < 0.8 and float(rows["max-min"]["gpu_hours_vs_fifo"]) > 1.0
    assert "Fluid's even split" in r.stdout
    bad = subprocess.run([sys.executable, "-m", "coddl.cli", "experiment", "fluid", "--scenarios", "few,lots"],
                         capture_output=True, text=True, timeout=120, env={"COLUMNS": "200", "PATH": ""})
    assert bad.returncode == 2 and "--scenarios: unknown scenario 'lots'" in bad.stderr and "Traceback" not in bad.stderr
