"""Optimus's speed model and loss curve, fitted with NNLS from synthetic observations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.perf.nnls import LossCurve, OptimusSpeed

THETA = (0.02, 0.05, 0.03, 0.004, 0.01)


def observations(noise: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    p, w = rng.integers(1, 9, 60), rng.integers(1, 17, 60)
    speed = OptimusSpeed(THETA, 256).speed(p, w) * (1 + rng.uniform(-noise, noise, 60))
    return p, w, speed


def test_nnls_recovers_known_optimus_parameters_within_5_percent():
    p, w, speed = observations(noise=0.001)
    fit = OptimusSpeed.fit(p, w, speed, batch=256)
    assert np.allclose(fit.theta, THETA, rtol=0.05)


def test_optimus_predictions_stay_close_under_noise_and_coefficients_stay_non_negative():
    p, w, speed = observations(noise=0.02, seed=3)
    fit = OptimusSpeed.fit(p, w, speed, batch=256)
    assert min(fit.theta) >= 0.0
    grid_p, grid_w = np.meshgrid(np.arange(1, 9), np.arange(1, 17))
    truth = OptimusSpeed(THETA, 256).speed(grid_p.ravel(), grid_w.ravel())
    assert np.max(np.abs(fit.speed(grid_p.ravel(), grid_w.ravel()) / truth - 1)) < 0.03


def test_loss_curve_is_recovered_and_gives_remaining_steps():
    truth = LossCurve(0.002, 0.5, 0.3)
    k = np.arange(0, 5000, 100)
    noisy = truth.loss(k) * (1 + np.random.default_rng(1).normal(0, 0.003, len(k)))
    fit = LossCurve.fit(k, noisy)
    assert (fit.beta0, fit.beta1, fit.beta2) == pytest.approx((0.002, 0.5, 0.3), rel=0.05)
    assert truth.steps_to(0.5) == pytest.approx(2250.0)
    assert fit.steps_to(0.5) == pytest.approx(2250.0, rel=0.05)
    assert truth.steps_to(0.3) == math.inf


def test_fits_reject_too_little_data():
    with pytest.raises(ValueError):
        LossCurve.fit([1.0], [0.5])
    with pytest.raises(ValueError):
        OptimusSpeed.fit([], [], [], batch=1)
