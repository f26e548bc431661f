"""Optimus's speed model and loss curve (perf/nnls.py) pinned on hand-computed values: the features
and speeds of a known θ, exact recovery from noise-free samples (a zero coefficient stays zero), the
relative-error objective against an independent bounded least-squares solve, and the loss curve's
steps to a target with every edge."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import lsq_linear

from coddl.perf.nnls import LossCurve, OptimusSpeed


def test_features_and_speed_of_a_known_model():
    assert OptimusSpeed.features(np.array([2]), np.array([4]), 256.0).tolist() == [[64.0, 1.0, 2.0, 4.0, 2.0]]
    assert OptimusSpeed.features([1, 4], [2, 2], 10.0).tolist() == [[5, 1, 2, 2, 1], [5, 1, 0.5, 2, 4]]
    m = OptimusSpeed((0.01, 0.1, 0.2, 0.05, 0.3), 100.0)
    # 0.01·100/4 + 0.1 + 0.2·4/2 + 0.05·4 + 0.3·2 = 0.25 + 0.1 + 0.4 + 0.2 + 0.6 = 1.55 s per step
    assert m.speed(2, 4).tolist() == pytest.approx([1 / 1.55])
    assert m.speed(np.array([1, 2]), np.array([1, 4])) == pytest.approx([1 / 1.65, 1 / 1.55])  # p = w = 1: 1 + 0.1 + 0.2 + 0.05 + 0.3


def test_noise_free_samples_give_back_theta_and_a_zero_term_stays_zero():
    theta = (0.02, 0.05, 0.0, 0.004, 0.01)
    p, w = np.array([1, 2, 4, 1, 3, 8, 2]), np.array([1, 4, 8, 16, 3, 2, 12])
    truth = OptimusSpeed(theta, 64)
    fit = OptimusSpeed.fit(p, w, truth.speed(p, w), batch=64)
    assert fit.theta == pytest.approx(theta, abs=1e-9)
    assert fit.batch == 64.0 and isinstance(fit.batch, float) and all(isinstance(v, float) for v in fit.theta)


def test_the_fit_minimises_relative_errors_of_the_step_time():
    """Inconsistent samples: the fit is the non-negative minimiser of Σ((φ·θ − t)/t)², solved
    here independently with bounded least squares."""
    p = np.array([1.0, 1.0, 2.0, 2.0, 4.0, 1.0])
    w = np.array([1.0, 2.0, 2.0, 4.0, 8.0, 8.0])
    t = np.array([1.0, 0.2, 0.9, 0.1, 3.0, 0.05])  # deliberately far from any one model
    fit = OptimusSpeed.fit(p, w, 1.0 / t, batch=8.0)
    phi = OptimusSpeed.features(p, w, 8.0)
    ref = lsq_linear(phi / t[:, None], np.ones_like(t), bounds=(0, np.inf), tol=1e-12).x
    assert np.allclose(fit.theta, ref, atol=1e-7)
    unweighted = lsq_linear(phi, t, bounds=(0, np.inf), tol=1e-12).x
    assert not np.allclose(ref, unweighted, atol=1e-3)  # the weighting matters on these samples


def test_the_speed_fit_needs_a_sample():
    with pytest.raises(ValueError, match="^fitting the Optimus speed model needs at least one observation$"):
        OptimusSpeed.fit([], [], [], batch=1)


def test_loss_and_steps_to_a_target():
    c = LossCurve(0.01, 0.5, 0.2)
    assert c.loss(0) == pytest.approx(2.2) and c.loss(150) == pytest.approx(0.7)
    assert c.loss(np.array([0.0, 150.0])) == pytest.approx([2.2, 0.7])
    assert c.steps_to(0.7) == pytest.approx(150.0)  # (1/0.5 − 0.5)/0.01
    assert c.steps_to(2.2) == pytest.approx(0.0, abs=1e-9)
    assert c.steps_to(5.0) == 0.0  # already below it at k = 0
    assert c.steps_to(0.2) == math.inf and c.steps_to(0.1) == math.inf
    assert c.steps_to(0.2000001) == pytest.approx((1 / 1e-7 - 0.5) / 0.01, rel=1e-6)
    assert LossCurve(0.0, 0.5, 0.2).steps_to(0.7) == math.inf
    assert LossCurve(-0.01, 0.5, 0.2).steps_to(0.7) == math.inf


def test_a_noise_free_loss_curve_is_recovered_with_its_floor():
    truth = LossCurve(0.004, 0.8, 0.25)
    k = np.array([0.0, 50, 100, 200, 400, 800, 1600, 3200])
    fit = LossCurve.fit(k, truth.loss(k))
    assert (fit.beta0, fit.beta1, fit.beta2) == pytest.approx((0.004, 0.8, 0.25), rel=1e-4)


def test_a_curve_without_a_floor_keeps_floor_zero():
    truth = LossCurve(0.01, 1.0, 0.0)
    k = np.array([0.0, 10, 30, 100, 300])
    fit = LossCurve.fit(k, truth.loss(k))
    assert fit.beta2 == 0.0
    assert (fit.beta0, fit.beta1) == pytest.approx((0.01, 1.0), rel=1e-9)


def test_two_points_suffice_and_fewer_or_non_positive_losses_do_not():
    fit = LossCurve.fit([0.0, 100.0], [1.0, 0.5])
    assert fit.loss(np.array([0.0, 100.0])) == pytest.approx([1.0, 0.5], rel=1e-6)
    with pytest.raises(ValueError, match="^fitting a loss curve needs at least two points with positive loss$"):
        LossCurve.fit([1.0], [0.5])
    with pytest.raises(ValueError, match="at least two points"):
        LossCurve.fit([1.0, 2.0], [0.5, 0.0])
