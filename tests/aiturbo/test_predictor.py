"""AITurbo's predictor: the CPU-extended Optimus-style speed model, remaining steps from the loss
curve, and when a job counts as predictable."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.perf.nnls import LossCurve
from coddl.perf.predictor import CpuEfficiency, JobPredictor, PredictorParams, SpeedModel, converged_steps

REFERENCE = 3.0


def truth() -> SpeedModel:
    """θ and eff(x) = a·e^(−b·x) + d, normalised so that eff(3) = 1 (as the fit reports it)."""
    eff = CpuEfficiency(2.0, 0.8, 0.4)
    s = float(eff(REFERENCE))
    return SpeedModel(tuple(v * s for v in (0.5, 0.02, 0.004, 0.05)), CpuEfficiency(2.0 / s, 0.8, 0.4 / s))


def samples(model: SpeedModel, count: int, noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.integers(1, 17, count)
    n = np.ceil(w / rng.choice([4, 8], count))
    x = rng.choice([1, 2, 3, 4, 6, 9], count).astype(float)
    return w, n, x, model.speed(w, n, x) * (1 + rng.normal(0, noise, count))


def test_speed_model_recovers_known_parameters_within_5_percent():
    t = truth()
    fit = SpeedModel.fit(*samples(t, 60, noise=0.002), reference=REFERENCE)
    assert np.allclose(fit.theta, t.theta, rtol=0.05)
    for name in ("a", "b", "d"):
        assert getattr(fit.eff, name) == pytest.approx(getattr(t.eff, name), rel=0.05)
    assert float(fit.eff(REFERENCE)) == pytest.approx(1.0)


def test_a_refit_from_the_previous_model_finds_the_same_fit():
    t = truth()
    w, n, x, r = samples(t, 40, noise=0.01, seed=5)
    cold = SpeedModel.fit(w, n, x, r, reference=REFERENCE)
    warm = SpeedModel.fit(w, n, x, r, reference=REFERENCE, start=cold)
    grid = np.meshgrid(np.arange(1, 17), np.arange(1, 10))
    a = cold.speed(grid[0].ravel(), 1, grid[1].ravel())
    assert np.allclose(warm.speed(grid[0].ravel(), 1, grid[1].ravel()), a, rtol=0.01)


def test_one_core_count_holds_eff_at_one():
    t = truth()
    w = np.array([1, 2, 4, 8])
    fit = SpeedModel.fit(w, np.ones(4), np.full(4, 4.0), t.speed(w, 1, 4.0))
    assert fit.eff.a == 0.0 and fit.eff.d == 1.0
    assert np.allclose(fit.speed(w, 1, 4.0), t.speed(w, 1, 4.0), rtol=0.02)


def predictor_from_prior(model: SpeedModel, **kw) -> JobPredictor:
    w = np.array([1.0, 2, 4, 8, 16])
    n = np.ceil(w / 8)
    return JobPredictor(PredictorParams(**kw), (w, n, np.full(5, REFERENCE), model.speed(w, n, REFERENCE)))


def test_job_becomes_predictable_after_its_core_counts_are_predicted():
    t = truth()
    p = predictor_from_prior(t)
    rng = np.random.default_rng(1)
    for i, x in enumerate([4, 6, 3, 8, 5, 4]):
        rate = float(t.speed(2, 1, x)[0]) * (1 + rng.normal(0, 0.02))
        p.observe(2, 1, 2 * x, rate, progress=100.0 * i)
        if i < 2:
            assert not p.predictable  # fewer than min_samples, or fewer than three core counts
    assert p.cpu_configs == 5
    assert p.predictable
    assert np.mean(p.errors[-3:]) < 0.10
    assert float(p.speed(2, 1, 5)[0]) == pytest.approx(float(t.speed(2, 1, 5)[0]), rel=0.05)


def test_a_job_whose_speed_jumps_around_is_not_predictable():
    t = truth()
    p = predictor_from_prior(t)
    rng = np.random.default_rng(2)
    for i, x in enumerate([4, 6, 3, 8, 5, 4, 6]):
        p.observe(2, 1, 2 * x, float(t.speed(2, 1, x)[0]) * rng.uniform(0.4, 1.6), progress=float(i))
    assert p.cpu_configs >= 3 and not p.predictable


def test_with_cores_not_a_decision_one_core_count_is_enough():
    t = truth()
    p = predictor_from_prior(t, min_cpu_configs=1)
    for i in range(4):
        p.observe(4, 1, 12, float(t.speed(4, 1, 3.0)[0]), progress=float(i))
    assert p.predictable


def test_remaining_steps_follow_the_loss_curve_when_losses_are_reported():
    curve = LossCurve(0.002, 0.5, 0.3)
    p = JobPredictor()
    assert p.remaining_steps(5000.0) == 5000.0  # no losses: what was declared
    for k in range(0, 3000, 300):
        p.observe(1, 1, 3, 1.0, progress=float(k), loss=float(curve.loss(k)))
    done = 2700.0
    expected = converged_steps(curve, 0.05) - done  # β1·(1/0.05 − 1)/β0 − done = 4750 − 2700
    assert expected == pytest.approx(2050.0)
    assert p.remaining_steps(1e9) == pytest.approx(expected, rel=0.05)
    assert p.remaining_steps(100.0) == 100.0  # never more than declared
    assert math.isinf(converged_steps(LossCurve(0.0, 1.0, 0.0), 0.05))
