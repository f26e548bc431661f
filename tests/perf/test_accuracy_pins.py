"""Pins of the held-out accuracy protocol (``coddl.perf.accuracy``) on small hand-built tables.

Each job has one one-GPU row (0.2 s at local batch 32, so t_ref = 0.2 s at b_ref = 32 and, at
batch 32, the compute time C = t_ref whatever f is) and a few multi-GPU rows, listed in the
protocol's own order (GPU count, node count, GPUs per node, local batch) so that row i of the
table is row i of the protocol. The fabric is given (``RING``), so nothing is fitted but the job.

Where a number is hand-computed the comment says how; where it depends on the job's fit, the
expected value is built from the estimator's parts (``one_gpu_model``, ``JobModel.updated``,
``Estimator.rates``) following the module docstring step by step: before = the one-GPU model's
prediction, after = the prediction once ONE measured row is folded in, scored on the other rows.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from coddl.perf.accuracy import (COLLECTIVE, OTHERS, AppAccuracy, _amdahl_rate, _fit_amdahl, _one, _spread, apps_of,
                                 evaluate_job, evaluate_testbed, every_choice, leave_one_testbed_out, mape,
                                 recommended)
from coddl.perf.calibrate import Population, fit_fabric, job_steps, one_gpu_model, population, prior_from, \
    with_cluster_noise
from coddl.perf.estimator import Estimator
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import Prior, Steps, step_model
from coddl.perf.table import ProfileTable

RING = Fabric(intra_gbps=20.0, inter_gbps=2.0, intra_latency_us=10.0, inter_latency_us=80.0, algorithm="ring")
EST = Estimator(RING)
# not the default Prior() (whose ρ is 0.4966): a job built from the default predicts differently
P = Prior(mean=(0.25, 0.0, 0.4))
T1 = 0.2  # one-GPU seconds at batch 32


def row(model: str = "m", gpus: int = 1, placement: tuple[int, ...] = (1,), steps_per_s: float = 1.0,
        local_batch: float = 32.0, param_bytes: float = 1e8, cluster: str = "c",
        compute_share: float | None = None, kind: str = "job") -> dict:
    return {"cluster": cluster, "model": model, "param_bytes": param_bytes, "gpu_type": "V100", "gpus": gpus,
            "placement": placement, "local_batch": local_batch, "steps_per_s": steps_per_s,
            "compute_share": compute_share, "kind": kind}


def job_rows(model: str, shapes, rates, batches=None, share: float | None = None, cluster: str = "c",
             param_bytes: float = 1e8) -> list[dict]:
    batches = batches or [32.0] * len(shapes)
    return [row(model, 1, (1,), 1.0 / T1, 32.0, param_bytes, cluster)] + [
        row(model, sum(s), s, r, b, param_bytes, cluster, share) for s, r, b in zip(shapes, rates, batches)]


def job_table(shapes, rates, batches=None, share: float | None = None, model: str = "m") -> ProfileTable:
    return ProfileTable.build(job_rows(model, shapes, rates, batches, share))


def first(shapes, batches=None, share: float = 1.0, prior: Prior = P):
    """The prediction before any correction, from the one-GPU row alone, on the rows' shapes."""
    batches = batches or [32.0] * len(shapes)
    job = one_gpu_model(job_table([], []), prior)
    k = np.array([sum(s) for s in shapes])
    n = np.array([len(s) for s in shapes])
    g = np.array([s[0] for s in shapes])
    return EST.rates(job, k, n, g, np.array(batches, dtype=float), uncertainty=True,
                     share=np.full(len(shapes), share))


def corrected(table: ProfileTable, idx, prior: Prior = P) -> np.ndarray:
    """Steps/s on every multi-GPU row once the measured rows ``idx`` are folded into the job."""
    multi = table.take(table.gpus > 1)
    job = one_gpu_model(table, prior).updated(job_steps(multi, RING).take(np.asarray(idx)))
    return EST.rates(job, multi.gpus, multi.nodes, multi.max_per_node, multi.local_batch, uncertainty=False,
                     share=multi.compute_share).steps_per_s


def others(n: int, *idx: int) -> np.ndarray:
    rest = np.ones(n, dtype=bool)
    rest[list(idx)] = False
    return rest


def amdahl_rates(shapes, p: float, compute: float) -> list[float]:
    """Weak-scaling Amdahl: k GPUs take C·((1 − p)k + p) per step."""
    return [1.0 / (compute * ((1.0 - p) * sum(s) + p)) for s in shapes]


# ------------------------------------------------------------------------------ helpers


def test_amdahl_rate_is_the_weak_scaling_law():
    # C = 2 s, k = 4, p = 0.5: a step takes 2·(0.5·4 + 0.5) = 5 s, so 0.2 steps/s
    assert _amdahl_rate(np.array([2.0]), np.array([4.0]), 0.5) == pytest.approx([0.2], rel=1e-15)
    # p = 1: perfect weak scaling, the one-GPU rate 1/C at every k
    assert _amdahl_rate(np.array([0.5, 0.5]), np.array([2.0, 8.0]), 1.0) == pytest.approx([2.0, 2.0])


@pytest.mark.parametrize("p", [0.9, 0.25])
def test_fit_amdahl_recovers_the_parallel_fraction_of_noise_free_rows(p):
    compute, k = np.array([0.4, 0.4, 0.4]), np.array([2.0, 4.0, 8.0])
    rate = 1.0 / (compute * ((1.0 - p) * k + p))
    assert _fit_amdahl(compute, k, rate) == pytest.approx(p, abs=1e-12)  # p is on the 0.0005 grid


def test_spread_takes_every_row_up_to_count_and_evenly_spaced_rows_beyond():
    assert _spread(3, 40).tolist() == [0, 1, 2]
    assert _spread(5, 5).tolist() == [0, 1, 2, 3, 4]
    assert _spread(10, 4).tolist() == [0, 3, 6, 9]  # round(0, 3, 6, 9)
    assert _spread(7, 3).tolist() == [0, 3, 6]
    s = _spread(41, 40)
    assert len(s) == 40 and s[0] == 0 and s[-1] == 40


def test_one_takes_the_named_rows_of_every_column():
    steps = Steps(np.array([8.0, 16.0, 32.0]), np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0]),
                  np.array([np.nan, 0.5, 0.6]), np.array([0.5, 1.0, 2.0]))
    s = _one(steps, [2, 0])
    assert s.local_batch.tolist() == [32.0, 8.0]
    assert s.comm_base.tolist() == [0.3, 0.1]
    assert s.seconds.tolist() == [3.0, 1.0]
    assert s.comm_s[0] == 0.6 and np.isnan(s.comm_s[1])
    assert s.speed.tolist() == [2.0, 0.5]
    assert s.distributed.tolist() == [True, True]


def test_apps_are_jobs_with_a_one_gpu_row_and_three_multi_gpu_job_rows():
    r = [1.0, 1.0, 1.0]
    rows = (job_rows("a", [(2,), (4,), (4, 4)], r)  # 1 + 3: an app
            + job_rows("b", [(2,), (4,)], [1.0, 1.0]) + [row("b", 1, (1,), 4.0, 16.0)]  # two 1-GPU, 2 multi: not
            + job_rows("c", [(2,), (4,), (8,)], r)[1:]  # no one-GPU row: not
            + job_rows("d", [(4,), (2, 2), (4, 4)], r)  # no two-GPU row, still an app
            + job_rows("f", [(2,), (4,)], [1.0, 1.0])  # 2 job rows + same-named micro-benchmarks: not
            + [row("f", 2, (2,), 10.0, 0.0, kind="collective"), row("f", 4, (4,), 10.0, 0.0, kind="collective")])
    table = ProfileTable.build(rows)
    assert apps_of(table) == ["a", "d"]
    assert recommended(table) == COLLECTIVE  # it has micro-benchmarks
    assert every_choice(table) == [COLLECTIVE, "a", "d"]
    jobs_only = table.where(kind="job")
    assert recommended(jobs_only) == OTHERS
    assert every_choice(jobs_only) == [OTHERS, "a", "d"]


def test_a_summary_rounds_every_score_to_two_decimals_and_leaves_the_points_out():
    r = AppAccuracy("c", "m", OTHERS, 5, 12.3456, 7.891, 20.0, 33.333, 9.4449, float("nan"), 8.0, 0.125, 0.96,
                    (np.ones(5), np.ones(5), np.ones(5)))
    d = r.as_dict()
    assert list(d) == ["cluster", "app", "calibration", "rows", "before", "after", "after_worst", "linear", "amdahl",
                       "after_two", "amdahl_two", "worse_near", "coverage"]
    assert np.isnan(d.pop("after_two"))
    assert d == {"cluster": "c", "app": "m", "calibration": "others", "rows": 5, "before": 12.35, "after": 7.89,
                 "after_worst": 20.0, "linear": 33.33, "amdahl": 9.44, "amdahl_two": 8.0, "worse_near": 0.12,
                 "coverage": 0.96}
    assert all(type(v) is float for k, v in d.items() if k not in ("cluster", "app", "calibration", "rows"))


# ------------------------------------------------------------------------------ one job

SHAPES_A = [(2,), (4,), (2, 2), (4, 4), (4, 4, 4, 4)]
SHARE = 0.5
# every row follows Amdahl with p = 0.9 on C = t_ref / share = 0.4 s
RATES_A = amdahl_rates(SHAPES_A, 0.9, T1 / SHARE)


def test_the_baselines_are_priced_from_the_one_gpu_compute_time_over_the_share():
    table = job_table(SHAPES_A, RATES_A, share=SHARE)
    r = evaluate_job(EST, table, P, "somejob")
    assert (r.cluster, r.app, r.calibration, r.rows) == ("c", "m", "somejob", 5)
    # linear: 1/C = 2.5 steps/s at every k; measured 1/(0.4·(0.1k + 0.9)), so the error is
    # 0.1k + 0.9 − 1 = 0.1(k − 1): 10, 30, 30, 70, 150 % → mean 58 %
    assert r.linear == pytest.approx(58.0, rel=1e-12)
    # Amdahl fitted to any one row (or two) finds p = 0.9 and explains every other row exactly
    assert r.amdahl == pytest.approx(0.0, abs=1e-9)
    assert r.amdahl_two == pytest.approx(0.0, abs=1e-9)


def test_before_and_after_follow_the_protocol_row_by_row():
    table = job_table(SHAPES_A, RATES_A, share=SHARE)
    rate = np.array(RATES_A)
    r = evaluate_job(EST, table, P, OTHERS)
    before = first(SHAPES_A, share=SHARE).steps_per_s
    assert r.before == pytest.approx(mape(before, rate), rel=1e-12)
    after = [corrected(table, [m]) for m in range(5)]
    scores = [mape(a[others(5, m)], rate[others(5, m)]) for m, a in enumerate(after)]  # scored on the OTHER rows
    assert len(set(scores)) == 5
    assert r.after == pytest.approx(np.mean(scores), rel=1e-9)
    assert r.after_worst == pytest.approx(max(scores), rel=1e-9)
    measured, pred_before, pred_after = r.points
    assert measured.tolist() == rate.tolist()
    assert pred_before == pytest.approx(before, rel=1e-12)
    # the median single correction: the third of the five by its score
    assert pred_after == pytest.approx(after[int(np.argsort(scores)[2])], rel=1e-9)
    assert not np.allclose(after[int(np.argsort(scores)[1])], after[int(np.argsort(scores)[2])], rtol=1e-6)


def test_the_job_starts_from_the_prior_it_is_given():
    table = job_table(SHAPES_A, RATES_A, share=SHARE)
    r = evaluate_job(EST, table, P, OTHERS)
    default = evaluate_job(EST, table, Prior(), OTHERS)
    assert r.before == pytest.approx(mape(first(SHAPES_A, share=SHARE, prior=P).steps_per_s, np.array(RATES_A)))
    assert default.before == pytest.approx(
        mape(first(SHAPES_A, share=SHARE, prior=Prior()).steps_per_s, np.array(RATES_A)))
    assert r.before != pytest.approx(default.before, rel=1e-6)


def test_coverage_counts_rows_on_the_interval_s_bounds_as_inside():
    shapes = [(2,), (4,), (4, 4)]
    f = first(shapes)
    # measured exactly at the 90% interval's low end, exactly at its high end, and 10× too fast
    rates = [float(f.low[0]), float(f.high[1]), 10.0 * float(f.high[2])]
    r = evaluate_job(EST, job_table(shapes, rates), P, OTHERS)
    assert r.coverage == pytest.approx(2 / 3, rel=1e-15)


# rows in the protocol's order; "near" = the measured row's neighbours: same local batch, same
# one-node/multi-node kind, between half and twice its GPUs (the other rows)
SHAPES_N = [(2,), (1, 1), (3,), (4,), (4,), (2, 2), (2, 2), (4, 4), (4, 4, 4), (4, 4, 4, 4)]
BATCH_N = [32.0, 32.0, 32.0, 32.0, 64.0, 32.0, 64.0, 32.0, 64.0, 32.0]
OUTLIER = 7  # (4, 4) at 32: neighbours (2, 2) at 32 and (4, 4, 4, 4)
# rows with no neighbours: (4,) at 64 (no other one-node row at 64), (2, 2) at 64 (the only other
# multi-node row at 64 has 12 GPUs, more than twice 4), (4, 4, 4) at 64 (4 GPUs, less than half 12)
WITH_NEIGHBOURS = 7


def outlier_table(slower: float) -> ProfileTable:
    """Every row measured exactly as predicted before correction, but OUTLIER ``slower`` slower."""
    rates = first(SHAPES_N, BATCH_N).steps_per_s.copy()
    rates[OUTLIER] /= slower
    return job_table(SHAPES_N, rates.tolist(), BATCH_N)


def test_worse_near_is_the_share_of_corrections_that_hurt_the_measured_row_s_neighbours():
    """A row measured as predicted leaves the job as it was (its neighbours exactly as good as
    before: not worse); the outlier pulls the job towards it and its neighbours, predicted exactly
    before, get worse (by far less than one percentage point). Of the 7 rows with neighbours, one
    correction hurt them: 1/7."""
    table = outlier_table(1.005)
    r = evaluate_job(EST, table, P, OTHERS)
    assert r.worse_near == pytest.approx(1 / WITH_NEIGHBOURS, rel=1e-12)
    near = [5, 9]  # the outlier's neighbours, listed by hand above
    rate = table.take(table.gpus > 1).steps_per_s
    moved = corrected(table, [OUTLIER])
    assert 1e-6 < mape(moved[near], rate[near]) < 1.0


def test_without_neighbours_worse_near_is_0():
    # 2, 8 and 32 GPUs on one node: none within a factor of two of another
    shapes = [(2,), (8,), (32,)]
    r = evaluate_job(EST, job_table(shapes, first(shapes).steps_per_s.tolist()), P, OTHERS)
    assert r.worse_near == 0.0 and isinstance(r.worse_near, float)


def test_two_corrections_pair_each_row_with_the_one_half_the_list_further_on():
    shapes = [(2,), (1, 1), (4,), (2, 2)]  # k = 2, 2, 4, 4; half = 2: pairs (0,2) (1,3) (2,0) (3,1)
    rates = amdahl_rates(shapes, 0.8, T1)
    rates[1] *= 0.9  # off Amdahl, so which rows pair matters to both scores
    table = job_table(shapes, rates)
    rate, k = np.array(rates), np.array([2.0, 2.0, 4.0, 4.0])
    compute = np.full(4, T1)
    pairs = [(0, 2), (1, 3), (2, 0), (3, 1)]
    after_two = [mape(corrected(table, [a, b])[others(4, a, b)], rate[others(4, a, b)]) for a, b in pairs]
    amdahl_two = []
    for a, b in pairs:
        p = _fit_amdahl(compute[[a, b]], k[[a, b]], rate[[a, b]])
        amdahl_two.append(mape(_amdahl_rate(compute[others(4, a, b)], k[others(4, a, b)], p),
                               rate[others(4, a, b)]))
    r = evaluate_job(EST, table, P, OTHERS)
    assert r.after_two == pytest.approx(np.mean(after_two), rel=1e-9)
    assert r.amdahl_two == pytest.approx(np.mean(amdahl_two), rel=1e-9)


def test_pairs_of_equal_gpu_counts_are_skipped_not_an_end():
    shapes = [(2,), (1, 1), (4,)]  # k = 2, 2, 4; half = 1: (0,1) skipped, (1,2) and (2,0) used
    rates = amdahl_rates(shapes, 0.8, T1)
    table = job_table(shapes, rates)
    rate = np.array(rates)
    expected = [mape(corrected(table, [a, b])[others(3, a, b)], rate[others(3, a, b)]) for a, b in [(1, 2), (2, 0)]]
    r = evaluate_job(EST, table, P, OTHERS)
    assert r.after_two == pytest.approx(np.mean(expected), rel=1e-9)


def test_with_two_points_the_two_chosen_rows_pair_with_each_other():
    shapes = [(2,), (4,), (4, 4)]  # points=2: rows 0 and 2, paired both ways
    rates = amdahl_rates(shapes, 0.8, T1)
    table = job_table(shapes, rates)
    rate = np.array(rates)
    r = evaluate_job(EST, table, P, OTHERS, points=2)
    assert r.after_two == pytest.approx(mape(corrected(table, [0, 2])[[1]], rate[[1]]), rel=1e-9)
    assert r.after == pytest.approx(np.mean([mape(corrected(table, [m])[others(3, m)], rate[others(3, m)])
                                             for m in (0, 2)]), rel=1e-9)


def test_without_two_rows_of_different_gpu_counts_the_two_row_scores_are_nan_quietly():
    shapes = [(4,), (2, 2), (1, 1, 1, 1)]  # all on 4 GPUs
    table = job_table(shapes, amdahl_rates(shapes, 0.8, T1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mean of empty slice"
        r = evaluate_job(EST, table, P, OTHERS)
    assert isinstance(r.after_two, float) and np.isnan(r.after_two)
    assert isinstance(r.amdahl_two, float) and np.isnan(r.amdahl_two)
    assert np.isfinite(r.after)


def test_a_job_needs_a_one_gpu_row_and_three_multi_gpu_rows():
    shapes = [(2,), (4,), (4, 4)]
    rates = amdahl_rates(shapes, 0.8, T1)
    assert evaluate_job(EST, job_table(shapes, rates), P, OTHERS).rows == 3  # exactly three suffice
    assert evaluate_job(EST, job_table(shapes, rates).take(np.arange(1, 4)), P, OTHERS) is None  # no 1-GPU row
    assert evaluate_job(EST, job_table(shapes[:2], rates[:2]), P, OTHERS) is None  # two multi-GPU rows
    no_two = [(4,), (2, 2), (4, 4)]  # no two-GPU row: fine
    assert evaluate_job(EST, job_table(no_two, amdahl_rates(no_two, 0.8, T1)), P, OTHERS).rows == 3


# 42 multi-GPU rows, all on two GPUs (one node or two) at local batches 4…24: by default 40 of
# them are corrected with, not all; no pair has two GPU counts, so only single corrections run
SHAPES_42 = [s for _ in range(21) for s in ((2,), (1, 1))]
BATCH_42 = [float(b) for b in range(4, 25) for _ in range(2)]
SUMMARY = ("before", "after", "after_worst", "linear", "amdahl", "worse_near", "coverage")


def summary(r) -> tuple:
    return tuple(getattr(r, f) for f in SUMMARY)


@pytest.fixture(scope="module")
def long_job() -> ProfileTable:
    rates = [1.0 / (T1 * (0.25 + 0.75 * b / 32.0) * (1.1 + 0.01 * i)) for i, b in enumerate(BATCH_42)]
    return job_table(SHAPES_42, rates, BATCH_42)


def test_a_job_is_corrected_with_at_most_40_rows_by_default(long_job):
    r = evaluate_job(EST, long_job, P, OTHERS)
    assert r.rows == 42
    assert summary(r) == summary(evaluate_job(EST, long_job, P, OTHERS, points=40))
    every = evaluate_job(EST, long_job, P, OTHERS, points=42)
    assert summary(r) != summary(every) and r.after != every.after


# ------------------------------------------------------------------------------ one testbed

def collectives(shapes, model=None) -> list[dict]:
    rows = []
    for shape in shapes:
        for mb in (1, 16, 256):
            t = float(RING.allreduce_seconds(mb * 1e6, sum(shape), len(shape), shape[0])[0])
            rows.append(row(model or f"ar{mb}", sum(shape), shape, 1.0 / t, 0.0, mb * 1e6, kind="collective"))
    return rows


def model_rates(shapes, theta, nbytes=1e8, t_ref=T1) -> list[float]:
    out = []
    for s in shapes:
        a = RING.allreduce_seconds(nbytes, sum(s), len(s), s[0])
        out.append(float(np.exp(-step_model(t_ref, 32.0, 32.0, 1.0, a, np.asarray(theta))[0])[0]))
    return out


SHAPES_T = [(2,), (4,), (2, 2), (4, 4), (4, 4, 4)]


@pytest.fixture(scope="module")
def testbed() -> ProfileTable:
    """Micro-benchmarks from RING (and two named like job a), job a scattered ±10% around its
    model, jobs b and c noise-free with other θ."""
    a = model_rates(SHAPES_T, (0.25, 0.5, 0.3))
    a = [x * f for x, f in zip(a, (1.1, 0.9, 1.1, 0.9, 1.1))]
    b = model_rates(SHAPES_T, (0.25, -0.5, 0.6), nbytes=3e7)
    c = model_rates(SHAPES_T, (0.25, 1.0, 0.2), nbytes=2e8)
    rows = (collectives([(2,), (4,), (2, 2), (4, 4), (4, 4, 4)])
            + [row("a", 2, (2,), 50.0, 0.0, 1e6, kind="collective"),
               row("a", 4, (2, 2), 20.0, 0.0, 1e6, kind="collective")]
            + job_rows("a", SHAPES_T, a) + job_rows("b", SHAPES_T, b, param_bytes=3e7)
            + job_rows("c", SHAPES_T, c, param_bytes=2e8))
    return ProfileTable.build(rows)


def expected(table, fabric, prior, app, calibration, points):
    return evaluate_job(Estimator(fabric), table.where(model=app, kind="job"), prior, calibration, points)


def test_collective_calibration_uses_the_micro_benchmarks_and_the_prior_as_given(testbed):
    fabric = fit_fabric(testbed, [], "tree").fabric
    out = evaluate_testbed(testbed, P, COLLECTIVE, 3, "tree")
    assert [r.app for r in out] == ["a", "b", "c"]
    assert [r.rows for r in out] == [5, 5, 5]  # job rows only, not the micro-benchmarks named "a"
    for r in out:
        assert r == expected(testbed, fabric, P, r.app, COLLECTIVE, 3)
        assert r.calibration == COLLECTIVE


def test_a_job_s_calibration_takes_its_fabric_and_noise_from_that_job_alone(testbed):
    fit = fit_fabric(testbed, ["a"], "tree")
    prior = with_cluster_noise(P, population(testbed, fit=fit))
    assert prior.noise > 0.05  # a's scatter, above the floor
    out = evaluate_testbed(testbed, P, "a", 3, "tree")
    assert [r.app for r in out] == ["b", "c"]  # the calibration job itself is not scored
    for r in out:
        assert r == expected(testbed, fit.fabric, prior, r.app, "a", 3)
        assert r.calibration == "a"


def test_others_calibration_fits_each_app_s_fabric_on_the_other_apps(testbed):
    out = evaluate_testbed(testbed, P, OTHERS, 3, "tree")
    assert [r.app for r in out] == ["a", "b", "c"]
    for r, rest in zip(out, [["b", "c"], ["a", "c"], ["a", "b"]]):
        fit = fit_fabric(testbed, rest, "tree")
        assert r == expected(testbed, fit.fabric, with_cluster_noise(P, population(testbed, fit=fit)), r.app,
                             OTHERS, 3)


def long_testbed(long_job: ProfileTable) -> ProfileTable:
    return ProfileTable.concat([ProfileTable.build(collectives([(2,), (4,), (2, 2)])), long_job])


def test_a_testbed_s_jobs_are_corrected_with_at_most_40_rows_by_default(long_job):
    table = long_testbed(long_job)
    default = evaluate_testbed(table, P, COLLECTIVE, algorithm="ring")
    assert [summary(r) for r in default] == [summary(r) for r in evaluate_testbed(table, P, COLLECTIVE, 40, "ring")]


# ------------------------------------------------------------------------------ leave one testbed out

def pop(cluster: str, *thetas) -> Population:
    return Population(cluster, np.array(thetas, dtype=float).reshape(-1, 3), np.array([0.06] * len(thetas)),
                      np.array([]), np.array([]))


def test_extra_populations_of_the_held_out_testbed_s_name_are_left_out(testbed):
    msg = "c: no other testbed to learn a prior from; give at least two testbeds"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        leave_one_testbed_out(testbed, extra=[pop("c", (0.2, 0.0, 0.3), (0.3, 0.1, 0.5))])


def test_two_jobs_from_other_testbeds_are_enough_for_a_prior(testbed):
    seen = []

    def choices(sub):
        seen.append(sub.clusters)
        return []

    out = leave_one_testbed_out(testbed, choices, extra=[pop("x", (0.2, 0.0, 0.3)), pop("y", (0.3, 0.1, 0.5))])
    assert out == {}  # the choices were asked and named none
    assert seen == [["c"]]


def test_each_choice_is_evaluated_with_the_prior_of_the_other_testbeds(testbed):
    extra = [pop("x", (0.2, 0.0, 0.3), (0.3, 0.1, 0.5))]
    said = []
    out = leave_one_testbed_out(testbed, lambda sub: ["a"], points=3, algorithm="tree", extra=extra,
                                progress=said.append)
    assert said == ["c: calibrated on a"]
    assert out == {"c": evaluate_testbed(testbed, prior_from(extra), "a", 3, "tree")}


def test_a_testbed_s_population_is_announced_before_it_is_fitted():
    shapes = [(2,), (4,), (2, 2)]
    b = job_rows("j", shapes, model_rates(shapes, (0.25, 0.0, 0.4)), cluster="B")
    table = ProfileTable.build(job_rows("j", shapes, [1.0, 1.0, 1.0], cluster="A") + b)
    said = []
    with pytest.raises(ValueError, match="^A: no other testbed"):  # B has one job: one θ
        leave_one_testbed_out(table, algorithm="ring", progress=said.append)
    assert said == ["B: fitting its population"]


def test_leave_one_testbed_out_corrects_with_at_most_40_rows_by_default(long_job):
    table = long_testbed(long_job)
    extra = [pop("x", (0.2, 0.0, 0.3), (0.3, 0.1, 0.5))]
    out = leave_one_testbed_out(table, algorithm="ring", extra=extra)
    assert list(out) == ["c"]
    assert [summary(r) for r in out["c"]] == [summary(r) for r in
                                              evaluate_testbed(table, prior_from(extra), COLLECTIVE, 40, "ring")]
