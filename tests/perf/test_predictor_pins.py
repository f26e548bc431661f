"""AITurbo's predictor (perf/predictor.py) pinned on hand-computed values: the speed model's terms,
the closed-form two-column NNLS, the fit's objective and normalisation, and the online predictor's
bookkeeping (what it keeps, when it refits, when a job counts as predictable, the remaining steps)
with a fixed model whose every error is exact."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import lsq_linear

from coddl.perf.nnls import LossCurve
from coddl.perf.predictor import (CpuEfficiency, JobPredictor, PredictorParams, SpeedModel, _nnls2,
                                  converged_steps)

ONE = SpeedModel((1.0, 0.0, 0.0, 0.0), CpuEfficiency(0.0, 1.0, 1.0))  # 1 step/s on one GPU at any share


def test_the_terms_of_the_step_time():
    assert SpeedModel.features(np.array([2.0]), np.array([3.0])).tolist() == [[0.5, 1.0, 1.0, 2.0]]
    assert SpeedModel.features([4], [1]).tolist() == [[0.25, 1.0, 3.0, 0.0]]
    eff = CpuEfficiency(2.0, 0.5, 0.5)
    assert float(eff(2.0)) == pytest.approx(2.0 * math.exp(-1.0) + 0.5)
    m = SpeedModel((1.0, 0.1, 0.05, 0.2), eff)
    # (1/4 + 0.1 + 0.05·3 + 0.2·1) · (2·e^−1 + 0.5) = 0.7 · 1.2357588823
    assert m.step_time(4, 2, 2.0).tolist() == pytest.approx([0.7 * (2 * math.exp(-1) + 0.5)])
    assert m.speed(4, 2, 2.0).tolist() == pytest.approx([1 / (0.7 * (2 * math.exp(-1) + 0.5))])
    both = m.speed(np.array([1, 4]), 1, np.array([2.0, 2.0]))
    assert both.shape == (2,) and both[0] == pytest.approx(1 / (1.1 * (2 * math.exp(-1) + 0.5)))
    zero = SpeedModel((0.0, 0.0, 0.0, 0.0), eff)
    assert zero.speed(np.array([1, 2]), 1, 3.0).tolist() == [0.0, 0.0]


def test_two_column_nnls_in_closed_form():
    c1, c2 = np.array([1.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0])
    assert _nnls2(c1, c2, 2 * c1 + 3 * c2) == pytest.approx((2.0, 3.0))
    # y = 2·c1 − c2: the unconstrained d is negative; a alone leaves less error than d alone
    a, d = _nnls2(c1, c2, 2 * c1 - c2)
    r1, g11 = float(c1 @ (2 * c1 - c2)), float(c1 @ c1)
    assert (a, d) == pytest.approx((r1 / g11, 0.0)) and a == pytest.approx(1.5)
    a, d = _nnls2(c1, c2, -c1 + 2 * c2)
    assert (a, d) == pytest.approx((0.0, 1.5))
    assert _nnls2(c1, c2, -c1 - c2) == (0.0, 0.0)
    # collinear columns: one of them carries it all
    assert _nnls2(c1, 2 * c1, 4 * c1) == pytest.approx((0.0, 2.0))
    assert _nnls2(np.zeros(3), c2, 3 * c2) == pytest.approx((0.0, 3.0))
    assert _nnls2(c1, np.zeros(3), 3 * c1) == pytest.approx((3.0, 0.0))
    # a unit column and a small coefficient: y = 0.5·e1 − (e2 + e3) keeps a = 0.5 (under 1) and drops d
    e1 = np.array([1.0, 0.0, 0.0])
    assert _nnls2(e1, np.array([0.0, 1.0, 1.0]), np.array([0.5, -1.0, -1.0])) == pytest.approx((0.5, 0.0))
    assert _nnls2(np.zeros(3), np.zeros(3), c1) == (0.0, 0.0)
    assert _nnls2(np.array([0.0, 1.0, 1.0]), e1, np.array([0.5, -1.0, -1.0])) == pytest.approx((0.0, 0.5))


def _truth(reference: float = 3.0) -> SpeedModel:
    eff = CpuEfficiency(2.0, 0.8, 0.4)
    s = float(eff(reference))
    return SpeedModel(tuple(v * s for v in (0.5, 0.02, 0.004, 0.05)), CpuEfficiency(2.0 / s, 0.8, 0.4 / s))


def _grid():
    w = np.array([1, 2, 4, 8, 16, 2, 4, 8, 1, 16, 4, 2], dtype=float)
    n = np.array([1, 1, 1, 1, 2, 1, 1, 2, 1, 4, 1, 1], dtype=float)
    x = np.array([1, 2, 3, 4, 6, 9, 1, 2, 6, 3, 9, 4], dtype=float)
    return w, n, x


@pytest.mark.parametrize("reference", [3.0, 2.0])
def test_noise_free_samples_give_the_model_back_normalised_at_the_reference(reference):
    t = _truth(reference)
    w, n, x = _grid()
    fit = SpeedModel.fit(w, n, x, t.speed(w, n, x), reference=reference)
    assert float(fit.eff(reference)) == pytest.approx(1.0, abs=1e-9)
    assert np.allclose(fit.theta, t.theta, rtol=2e-3, atol=1e-6)
    assert (fit.eff.a, fit.eff.b, fit.eff.d) == pytest.approx((t.eff.a, t.eff.b, t.eff.d), rel=2e-3)
    warm = SpeedModel.fit(w, n, x, t.speed(w, n, x), reference=reference, start=fit)
    assert warm.eff.b == pytest.approx(0.8, rel=2e-2)
    assert np.allclose(warm.speed(w, n, x), t.speed(w, n, x), rtol=1e-3)


def test_with_one_core_count_the_fit_minimises_weighted_relative_errors():
    w = np.array([1.0, 2.0, 4.0, 8.0, 2.0])
    n = np.array([1.0, 1.0, 1.0, 2.0, 2.0])
    t = np.array([1.0, 0.3, 0.4, 0.05, 0.9])  # far from any one model
    weight = np.array([1.0, 3.0, 0.5, 2.0, 1.0])
    fit = SpeedModel.fit(w, n, np.full(5, 2.0), 1.0 / t, weight)
    phi = SpeedModel.features(w, n)
    ref = lsq_linear(phi * (weight / t)[:, None], weight, bounds=(0, np.inf), tol=1e-12).x
    assert np.allclose(fit.theta, ref, atol=1e-8)
    assert (fit.eff.a, fit.eff.b, fit.eff.d) == (0.0, 1.0, 1.0)
    plain = SpeedModel.fit(w, n, np.full(5, 2.0), 1.0 / t)
    assert not np.allclose(plain.theta, fit.theta, atol=1e-3)
    with pytest.raises(ValueError, match="^fitting a speed model needs at least one sample$"):
        SpeedModel.fit(np.array([]), np.array([]), np.array([]), np.array([]))


def _fixed(**kw) -> JobPredictor:
    """A predictor holding ONE (1 step/s everywhere): with settled = 10 it never refits, so every
    error is |1 − rate| / rate exactly."""
    return JobPredictor(PredictorParams(**({"settled": 10.0} | kw)), model=ONE)


def test_a_given_model_is_kept_and_bad_samples_are_ignored():
    p = _fixed()
    assert p.model is ONE and p.version == 0
    p.observe(0, 1, 3, 1.0, 0.0)
    p.observe(1, 1, 3, 0.0, 0.0)
    p.observe(1, 1, 3, -1.0, 0.0)
    assert p.observations == [] and p.errors == [] and p.cpu_configs == 0
    p.observe(1, 1, 3, 2.0, 5.0, loss=0.5)
    assert p.errors == [0.5] and p.model is ONE and p.version == 0
    o = p.observations[0]
    assert (o.gpus, o.nodes, o.cores_per_gpu, o.rate, o.progress, o.loss) == (1, 1, 3.0, 2.0, 5.0, 0.5)


def test_only_the_latest_history_samples_are_kept():
    p = _fixed(history=2)
    for r in (1.0, 2.0, 4.0):
        p.observe(1, 1, 1, r, 0.0)
    assert [o.rate for o in p.observations] == [2.0, 4.0] and p.errors == [0.0, 0.5, 0.75]


def test_core_counts_are_told_apart_to_two_decimals():
    p = _fixed()
    p.observe(3, 1, 1, 1.0, 0.0)  # 1/3 core per GPU
    p.observe(300, 1, 100, 1.0, 0.0)  # 0.3333…
    p.observe(1000, 1, 331, 1.0, 0.0)
    p.observe(1000, 1, 334, 1.0, 0.0)  # 0.331 and 0.334: the same at two decimals
    assert p.cpu_configs == 1 and p.observations[0].cores_per_gpu == pytest.approx(1 / 3)
    p.observe(2, 1, 1, 1.0, 0.0)
    p.observe(100, 1, 51, 1.0, 0.0)  # 0.51
    assert p.cpu_configs == 3


def test_a_sample_outside_settled_refits_and_one_inside_does_not():
    p = JobPredictor(PredictorParams(settled=0.5), model=ONE)
    p.observe(1, 1, 3, 1.0, 0.0)
    p.observe(1, 1, 3, 2.0, 0.0)  # error exactly 0.5: not more than settled
    assert p.version == 0 and p.model is ONE
    p.observe(1, 1, 3, 0.5, 0.0)  # error 1.0
    assert p.version == 1 and p.model is not ONE
    first = JobPredictor()
    assert first.model is None and first.version == 0
    first.observe(2, 1, 6, 4.0, 0.0)  # no model yet: fitted on the first sample, no error scored
    assert first.errors == [] and first.version == 1
    assert float(first.speed(2, 1, 3.0)[0]) == pytest.approx(4.0)


@pytest.mark.parametrize("rates, predictable", [
    ([1.0, 2.0, 1.0], False),  # last two errors 0.5 + 0 = 0.5: not under 0.25 · 2
    ([2.0, 1.0, 1.0], True),  # 0 + 0
    ([1.0, 1.0], False),  # three samples needed
    ([4.0, 4.0, 4.0, 1.0, 1.0], True),  # only the window counts
    ([1.0, 1.0, 1.0, 1.0, 2.0], False),
])
def test_predictable_after_enough_samples_with_a_small_mean_error(rates, predictable):
    p = _fixed(threshold=0.25, window=2, min_samples=3, min_cpu_configs=1)
    for r in rates:
        p.observe(1, 1, 3, r, 0.0)
    assert p.predictable is predictable


def test_predictable_needs_a_full_window_of_errors_and_enough_core_counts():
    p = _fixed(threshold=0.25, window=3, min_samples=1, min_cpu_configs=1)
    p.observe(1, 1, 3, 1.0, 0.0)
    p.observe(1, 1, 3, 1.0, 0.0)
    assert not p.predictable
    p.observe(1, 1, 3, 1.0, 0.0)
    assert p.predictable
    q = _fixed(threshold=0.25, window=1, min_samples=1, min_cpu_configs=3)
    for cores in (1, 2):
        q.observe(1, 1, cores, 1.0, 0.0)
    assert not q.predictable
    q.observe(1, 1, 4, 1.0, 0.0)
    assert q.predictable and q.cpu_configs == 3
    r = _fixed(threshold=0.6, window=1, min_samples=1, min_cpu_configs=1)
    r.observe(1, 1, 3, 2.0, 0.0)  # 0.5 < 0.6
    assert r.predictable


def test_a_prior_is_fitted_at_once_and_weighs_prior_weight():
    w = np.array([1.0, 2.0, 4.0])
    prior = (w, np.ones(3), np.full(3, 3.0), np.array([1.0, 1.5, 2.0]))
    p = JobPredictor(PredictorParams(prior_weight=0.3), prior)
    assert p.version == 1 and p.model is not None
    expected = SpeedModel.fit(w, np.ones(3), np.full(3, 3.0), prior[3], np.full(3, 0.3), 3.0)
    assert p.model.theta == pytest.approx(expected.theta)
    p.observe(1, 1, 3, 3.0, 0.0)  # far from the prior: refitted with the sample at weight 1
    both = SpeedModel.fit(np.r_[1.0, w], np.ones(4), np.full(4, 3.0), np.r_[3.0, prior[3]],
                          np.r_[1.0, np.full(3, 0.3)], 3.0)
    assert p.model.theta == pytest.approx(both.theta) and p.version == 2
    equal = SpeedModel.fit(np.r_[1.0, w], np.ones(4), np.full(4, 3.0), np.r_[3.0, prior[3]], None, 3.0)
    assert p.model.theta != pytest.approx(equal.theta)
    with pytest.raises(ValueError, match="^no model yet: the predictor has neither a prior nor a sample$"):
        JobPredictor().speed(1, 1, 3.0)


def test_remaining_steps_from_the_loss_curve():
    curve = LossCurve(0.002, 0.5, 0.3)
    p = _fixed()
    p.observe(1, 1, 3, 1.0, 0.0, loss=float(curve.loss(0)))
    p.observe(1, 1, 3, 1.0, 300.0, loss=None)
    p.observe(1, 1, 3, 1.0, 600.0, loss=0.0)
    p.observe(1, 1, 3, 1.0, 600.0, loss=float(curve.loss(600)))
    assert p.remaining_steps(1e6) == 1e6  # two distinct progress points with a positive loss
    p.observe(1, 1, 3, 1.0, 600.0, loss=float(curve.loss(600)))
    assert p.remaining_steps(1e6) == 1e6  # still two
    p.observe(1, 1, 3, 1.0, 1200.0, loss=float(curve.loss(1200)))
    # converged at β1·(1/0.05 − 1)/β0 = 0.5·19/0.002 = 4750 steps; 1200 done
    assert p.remaining_steps(1e6) == pytest.approx(3550.0, rel=1e-3)
    assert p.remaining_steps(100.0) == 100.0
    tight = _fixed(loss_tolerance=0.5)  # 0.5·1/0.002 = 250 steps: already past
    for k in (0.0, 600.0, 1200.0):
        tight.observe(1, 1, 3, 1.0, k, loss=float(curve.loss(k)))
    assert tight.remaining_steps(1e6) == 0.0


def test_the_loss_curve_is_refitted_only_when_a_new_loss_arrives():
    curve = LossCurve(0.002, 0.5, 0.3)
    p = _fixed()
    for k in (0.0, 600.0, 1200.0):
        p.observe(1, 1, 3, 1.0, k, loss=float(curve.loss(k)))
    first = p.remaining_steps(1e6)
    fitted = p._loss
    assert fitted is not None and fitted[0] == 1200.0
    assert p.remaining_steps(1e6) == first and p._loss is fitted
    p.observe(1, 1, 3, 1.0, 1800.0, loss=float(curve.loss(1800)))
    assert p.remaining_steps(1e6) == pytest.approx(4750.0 - 1800.0, rel=1e-3) and p._loss is not fitted


def test_converged_steps():
    assert converged_steps(LossCurve(0.002, 0.5, 0.3), 0.05) == pytest.approx(4750.0)
    assert converged_steps(LossCurve(0.01, 2.0, 0.0), 0.2) == pytest.approx(800.0)
    assert converged_steps(LossCurve(0.0, 1.0, 0.0), 0.05) == math.inf
    assert converged_steps(LossCurve(-1.0, 1.0, 0.0), 0.05) == math.inf


def test_a_refit_is_warm_from_the_last_model_at_the_predictors_reference():
    t = _truth(2.0)
    w, n, x = _grid()
    prior = (w, n, x, t.speed(w, n, x))
    p = JobPredictor(PredictorParams(reference=2.0), prior)
    assert float(p.model.eff(2.0)) == pytest.approx(1.0, abs=1e-9)
    first = p.model
    p.observe(4, 1, 8, 3.0 * float(t.speed(4, 1, 2.0)[0]), 0.0)  # far off: refitted, warm from the first model
    ww, nn, xx = np.r_[4.0, w], np.r_[1.0, n], np.r_[2.0, x]
    rr, wt = np.r_[3.0 * float(t.speed(4, 1, 2.0)[0]), prior[3]], np.r_[1.0, np.full(len(w), 0.3)]
    warm = SpeedModel.fit(ww, nn, xx, rr, wt, 2.0, start=first)
    cold = SpeedModel.fit(ww, nn, xx, rr, wt, 2.0)
    assert p.model.theta == pytest.approx(warm.theta, rel=1e-12) and p.model.eff == warm.eff
    assert p.model.eff != cold.eff


def test_a_given_model_is_kept_even_with_a_prior():
    w = np.array([1.0, 2.0])
    p = JobPredictor(PredictorParams(), (w, np.ones(2), np.full(2, 3.0), np.array([1.0, 1.8])), model=ONE)
    assert p.model is ONE and p.version == 0


def test_the_fit_normalises_at_three_cores_per_gpu_by_default():
    t = _truth(3.0)
    w, n, x = _grid()
    fit = SpeedModel.fit(w, n, x, t.speed(w, n, x))
    assert float(fit.eff(3.0)) == pytest.approx(1.0, abs=1e-9)


def test_two_core_counts_are_enough_to_fit_the_cpu_term():
    t = _truth(3.0)
    w, n, _ = _grid()
    x = np.where(np.arange(w.size) % 2 == 0, 1.0, 6.0)
    fit = SpeedModel.fit(w, n, x, t.speed(w, n, x))
    assert fit.eff.a > 0.0
    assert np.allclose(fit.speed(w, n, x), t.speed(w, n, x), rtol=1e-3)
