"""Hand-computed pins of the per-job model (``coddl.perf.jobmodel``): the overlap exponent, the
prior's and the model's checks with their messages, the measured steps' columns, the one-GPU
model's reference step, the step model's parts, the MAP fit against its documented objective and
the fit's second starting point."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.optimize import minimize

from coddl.perf.jobmodel import (LN2, NP, THETA_LOWER, THETA_UPPER, JobModel, Prior, Steps, _comm_start, _pairs,
                                 compute_floor,
                                 affine_fit, gamma_of, map_fit, overlapped, step_model, theta_of)

NAN = float("nan")


def model(f: float = 0.2, eta: float = 1.0, rho: float = 0.0, t_ref: float = 1.0, b_ref: float = 32.0,
          prior: Prior | None = None, t_floor: float = 0.0) -> JobModel:
    prior = prior or Prior()
    return JobModel("m", 1e8, t_ref, b_ref, theta_of(f, eta, rho), prior.cov, prior, "V100", t_floor=t_floor)


# ---- the overlap exponent, θ and the pairs of parameters ----

def test_gamma_is_one_without_overlap_and_ln2_over_ln_1_5_at_half():
    assert gamma_of(0.0) == pytest.approx(1.0)
    assert gamma_of(0.5) == pytest.approx(math.log(2) / math.log(1.5))
    assert gamma_of(np.array([0.0, 0.5])).tolist() == pytest.approx([1.0, 1.7095112913514547])
    assert LN2 == pytest.approx(0.6931471805599453)


def test_theta_of_takes_the_log_of_the_efficiency_and_has_pollux_s_defaults():
    assert theta_of().tolist() == pytest.approx([0.25, 0.0, 0.4966])
    assert theta_of(0.1, math.e, 0.3).tolist() == pytest.approx([0.1, 1.0, 0.3])
    assert _pairs() == [(0, 1), (0, 2), (1, 2)]


# ---- the prior ----

def test_a_prior_s_covariance_places_each_correlation_on_its_pair():
    p = Prior(sd=(1.0, 2.0, 4.0), corr=(0.1, 0.2, 0.3))
    assert p.cov == pytest.approx(np.array([[1.0, 0.2, 0.8], [0.2, 4.0, 2.4], [0.8, 2.4, 16.0]]))
    corr = np.array([[1.0, 0.1, 0.2], [0.1, 1.0, 0.3], [0.2, 0.3, 1.0]])
    assert Prior.correlations(corr) == (0.1, 0.2, 0.3)


@pytest.mark.parametrize("kwargs", [dict(mean=(0.0, 0.0)), dict(sd=(1.0, 1.0, 1.0, 1.0)), dict(corr=(0.0, 0.0))])
def test_a_prior_needs_three_means_three_sds_and_three_correlations(kwargs):
    with pytest.raises(ValueError, match="a prior has 3 means and standard deviations and 3 correlations"):
        Prior(**kwargs)


@pytest.mark.parametrize("kwargs", [dict(mean=(0.0, NAN, 0.0)), dict(mean=(0.0, 0.0, float("inf"))),
                                    dict(sd=(0.0, 1.0, 1.0)), dict(sd=(1.0, -1.0, 1.0)),
                                    dict(sd=(1.0, 1.0, float("inf")))])
def test_a_prior_needs_finite_means_and_positive_finite_sds(kwargs):
    with pytest.raises(ValueError, match="prior: means must be finite and standard deviations positive"):
        Prior(**kwargs)


@pytest.mark.parametrize("name", ["noise", "comm_noise", "one_gpu_noise"])
@pytest.mark.parametrize("value", [0.0, -0.1])
def test_a_prior_needs_positive_noise_levels(name, value):
    with pytest.raises(ValueError, match="^prior: noise levels must be positive$"):
        Prior(**{name: value})


@pytest.mark.parametrize("corr", [(1.0, 0.0, 0.0), (0.0, -1.0, 0.0), (0.0, 0.0, 1.5), (0.9, 0.9, -0.9)])
def test_a_prior_s_correlations_must_make_a_positive_definite_covariance(corr):
    with pytest.raises(ValueError, match="prior: correlations must make a positive-definite covariance"):
        Prior(corr=corr)


def test_a_valid_prior_with_small_noise_and_strong_correlations_is_accepted():
    p = Prior(mean=(0.0, -1.0, 0.5), sd=(1e-6, 1.0, 1.0), noise=1e-9, comm_noise=1e-9, one_gpu_noise=1e-9,
              corr=(0.0, 0.0, 0.95))
    assert p.cov[1, 2] == pytest.approx(0.95)


# ---- measured steps ----

def test_steps_broadcast_the_speed_and_count_placements_with_an_all_reduce_as_distributed():
    s = Steps(np.array([8.0, 16.0, 32.0]), np.array([0.0, 0.5, 0.0]), np.array([1.0, 2.0, 3.0]), np.full(3, NAN),
              speed=2.0)
    assert s.speed.tolist() == [2.0, 2.0, 2.0]
    assert s.distributed.tolist() == [False, True, False]
    assert len(s) == 3
    given = Steps(np.array([8.0, 16.0]), np.zeros(2), np.ones(2), np.full(2, NAN), np.array([1.0, 0.5]),
                  np.array([True, False]))
    assert given.distributed.tolist() == [True, False] and given.speed.tolist() == [1.0, 0.5]


def test_taking_rows_keeps_every_column_of_those_rows():
    s = Steps(np.array([8.0, 16.0, 32.0]), np.array([0.0, 0.5, 0.7]), np.array([1.0, 2.0, 3.0]),
              np.array([NAN, 0.2, 0.3]), np.array([1.0, 0.5, 0.25]), np.array([False, True, False]))
    t = s.take(np.array([2, 0]))
    assert t.local_batch.tolist() == [32.0, 8.0]
    assert t.comm_base.tolist() == [0.7, 0.0]
    assert t.seconds.tolist() == [3.0, 1.0]
    assert t.comm_s[0] == 0.3 and math.isnan(t.comm_s[1])
    assert t.speed.tolist() == [0.25, 1.0]
    assert t.distributed.tolist() == [False, False]


# ---- the job model's checks ----

@pytest.mark.parametrize("t_ref, b_ref", [(0.0, 32.0), (-1.0, 32.0), (NAN, 32.0), (float("inf"), 32.0),
                                          (1.0, 0.0), (1.0, NAN), (1.0, float("inf"))])
def test_a_job_model_needs_a_positive_finite_reference_step(t_ref, b_ref):
    p = Prior()
    with pytest.raises(ValueError, match="m: one-GPU step time and batch must be positive"):
        JobModel("m", 0.0, t_ref, b_ref, np.array(p.mean), p.cov)


@pytest.mark.parametrize("nbytes", [-1.0, float("inf"), NAN])
def test_a_job_model_needs_non_negative_finite_bytes(nbytes):
    p = Prior()
    with pytest.raises(ValueError, match="m: param_bytes must be non-negative"):
        JobModel("m", nbytes, 1.0, 32.0, np.array(p.mean), p.cov)


def test_a_job_model_needs_three_parameters_and_a_three_by_three_covariance():
    p = Prior()
    with pytest.raises(ValueError, match=r"m: θ has 3 parameters \(fixed_share, comm_efficiency, overlap\)"):
        JobModel("m", 0.0, 1.0, 32.0, np.zeros(2), p.cov)
    with pytest.raises(ValueError, match="m: θ has 3 parameters"):
        JobModel("m", 0.0, 1.0, 32.0, np.zeros(3), np.eye(2))
    ok = JobModel("m", 0.0, 1.0, 32.0, np.zeros(3), np.eye(3), t_floor=0.0)  # zero bytes and floor are fine
    assert (ok.measured, ok.t_floor, ok.gpu_type) == (0, 0.0, "")


def test_the_physical_parameters_of_theta():
    j = model(f=0.3, eta=2.5, rho=0.5)
    assert j.fixed_share == pytest.approx(0.3)
    assert j.comm_efficiency == pytest.approx(2.5)
    assert j.overlap == pytest.approx(math.log(2) / math.log(1.5))


def test_compute_pivots_on_the_reference_batch_and_stops_at_the_floor():
    j = model(f=0.25, t_ref=2.0, b_ref=16.0, t_floor=0.9)
    # 2 · (0.25 + 0.75 · b/16): 8 → 1.25, 32 → 3.5, 2 → 0.6875 below the floor 0.9
    assert j.compute_seconds(np.array([8.0, 32.0, 2.0])).tolist() == pytest.approx([1.25, 3.5, 0.9])


# ---- the one-GPU model ----

def test_one_profiled_batch_gives_the_geometric_mean_of_its_steps_and_the_prior_s_shares():
    prior = Prior(mean=(0.3, 0.1, 0.2))
    j = JobModel.from_one_gpu("net", 5e7, np.array([64.0, 64.0]), np.array([0.2, 0.8]), prior, "T4")
    assert (j.name, j.param_bytes, j.gpu_type, j.measured, j.t_floor) == ("net", 5e7, "T4", 0, 0.0)
    assert j.prior is prior
    assert j.b_ref == pytest.approx(64.0)
    assert j.t_ref == pytest.approx(0.4)  # √(0.2 · 0.8)
    # steps at the reference batch say nothing about the fixed share; S = 0 says nothing about η, ρ
    assert j.theta.tolist() == pytest.approx([0.3, 0.1, 0.2], abs=1e-9)
    assert j.cov == pytest.approx(prior.cov, rel=1e-6)


def test_without_a_prior_the_default_one_is_used():
    j = JobModel.from_one_gpu("net", 1e6, np.array([32.0]), np.array([0.5]))
    assert j.prior == Prior() and j.gpu_type == ""
    assert j.theta.tolist() == pytest.approx(list(Prior().mean), abs=1e-9)


def test_a_profile_of_fractional_or_integer_batches_is_a_profile():
    # a CPU worker's micro-batch may be below one sample; integer columns are read as numbers, cleanly
    half = JobModel.from_one_gpu("net", 0.0, np.array([0.5]), np.array([0.01]))
    assert (half.b_ref, half.t_ref) == (pytest.approx(0.5), pytest.approx(0.01))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ints = JobModel.from_one_gpu("net", 0, np.array([16, 64]), np.array([1, 2]))
    floats = JobModel.from_one_gpu("net", 0.0, np.array([16.0, 64.0]), np.array([1.0, 2.0]))
    assert (ints.t_ref, ints.b_ref) == (pytest.approx(floats.t_ref), pytest.approx(floats.b_ref))
    assert ints.theta == pytest.approx(floats.theta) and ints.cov == pytest.approx(floats.cov)


def test_an_affine_profile_gives_the_line_at_the_geometric_mean_batch():
    b = np.array([16.0, 64.0])
    j = JobModel.from_one_gpu("net", 0.0, b, 0.2 + 0.01 * b)  # 0.36 and 0.84 s
    assert j.b_ref == pytest.approx(32.0)
    assert j.t_ref == pytest.approx(0.52)
    # f at the truth 0.2/0.52 = 0.385, pulled little towards the prior's 0.25 by two one-GPU steps
    assert j.fixed_share == pytest.approx(0.2 / 0.52, abs=0.01)


def test_the_affine_fit_weighs_each_step_relatively_and_keeps_both_terms_non_negative():
    alpha, beta = affine_fit(np.array([1.0, 2.0, 4.0]), np.array([3.0, 5.0, 9.0]))
    assert (alpha, beta) == pytest.approx((1.0, 2.0))
    # a falling profile: no negative slope, the constant that best fits relatively
    alpha, beta = affine_fit(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0]))
    assert beta == 0.0
    # minimise Σ(α/t − 1)²: α = Σ(1/t) / Σ(1/t²) = (11/6) / (49/36)
    assert alpha == pytest.approx((11 / 6) / (49 / 36))


def test_a_one_gpu_update_moves_only_the_fixed_share_by_its_own_noise():
    """Laplace: one step's precision on f is (∂log C/∂f / noise)², added to the prior's."""
    prior = Prior(sd=(0.3, 0.5, 0.35), noise=0.2, one_gpu_noise=0.05)
    j = model(f=0.2, prior=prior)
    truth = 0.2 * 1.0 + 0.8 * 0.25  # f = 0.2 at b = 8 = b_ref/4: the step the belief already predicts
    one = j.updated(Steps(np.array([8.0]), np.zeros(1), np.array([truth]), np.full(1, NAN)))
    g = (1 - 0.25) / (0.2 + 0.8 * 0.25)
    assert one.theta.tolist() == pytest.approx([0.2, 0.0, 0.0], abs=1e-6)
    assert one.cov[0, 0] == pytest.approx(1 / (1 / 0.3**2 + (g / 0.05) ** 2), rel=1e-6)
    assert one.cov[1, 1] == pytest.approx(0.25) and one.cov[2, 2] == pytest.approx(0.35**2)
    assert one.measured == 1 - 1  # one-GPU steps are not counted as measured placements
    # the same step flagged distributed (a multi-GPU step without an all-reduce) weighs with the larger noise
    dist = j.updated(Steps(np.array([8.0]), np.zeros(1), np.array([truth]), np.full(1, NAN), 1.0, np.array([True])))
    assert dist.cov[0, 0] == pytest.approx(1 / (1 / 0.3**2 + (g / 0.2) ** 2), rel=1e-6)
    assert dist.measured == 1


def test_updates_count_distributed_steps_unless_told_not_to_and_nothing_changes_nothing():
    j = model(f=0.2, eta=1.0, rho=0.3)
    steps = Steps(np.array([32.0, 32.0, 32.0]), np.array([0.2, 0.0, 0.4]), np.array([1.3, 1.0, 1.5]), np.full(3, NAN))
    assert j.updated(steps).measured == 2
    assert j.updated(steps).updated(steps).measured == 4
    assert j.updated(steps, count=False).measured == 0
    empty = Steps(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0))
    assert j.updated(empty) is j


# ---- the step model ----

def test_overlap_by_hand():
    assert overlapped(1.0, 1.0, 1.0) == pytest.approx(2.0)
    assert overlapped(3.0, 4.0, 2.0) == pytest.approx(5.0)
    assert overlapped(4.0, 3.0, 2.0) == pytest.approx(5.0)
    assert overlapped(2.0, 0.0, 1.7) == pytest.approx(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0, no uninitialised output where both parts are 0
        assert overlapped(np.zeros(3), np.array([0.0, 1.0, 0.0]), 1.7).tolist() == [0.0, 1.0, 0.0]
        assert overlapped(0.0, 0.0, 1.7) == 0.0
    g = float(gamma_of(0.5))
    assert overlapped(1.0, 1.0, g) == pytest.approx(2 - 0.5)  # ρ: the share hidden when both are equal
    out = overlapped(np.array([1.0, 8.0]), np.array([1.0, 6.0]), np.array([1.0, 2.0]))
    assert out.tolist() == pytest.approx([2.0, 10.0])
    assert overlapped(1e300, 1e300, 1000.0) == pytest.approx(1e300 * 2 ** 0.001)  # no overflow


def test_the_step_model_s_parts_by_hand():
    """t_ref 2 s at b_ref 32, f = 0.25, at b = 16 on a device 2× as fast: C = 2·(0.25 + 0.75/2)/2 =
    0.625; S = η · A = 2 · 0.25 = 0.5; γ = 1 (ρ = 0): T = 1.125."""
    theta = theta_of(0.25, 2.0, 0.0)
    log_t, g, c, s, t, dlogc = step_model(2.0, 32.0, 16.0, 2.0, 0.25, theta, grad=True)
    assert float(c) == pytest.approx(0.625) and float(s) == pytest.approx(0.5)
    assert float(t) == pytest.approx(1.125) and float(log_t) == pytest.approx(math.log(1.125))
    assert float(dlogc) == pytest.approx(0.5 / 0.625)  # (1 − b/b_ref) / (f + (1 − f) b/b_ref)
    # γ = 1: ∂log T/∂log C = C/T, ∂log T/∂log η = S/T
    assert g.tolist()[:2] == pytest.approx([0.625 / 1.125 * 0.8, 0.5 / 1.125])
    (no_grad,) = step_model(2.0, 32.0, 16.0, 2.0, 0.25, theta)
    assert float(no_grad) == pytest.approx(math.log(1.125))
    # no floor unless given: 8 samples on the profiled device compute for 2 · (0.25 + 0.75/4) = 0.875 s
    (alone,) = step_model(2.0, 32.0, 8.0, 1.0, 0.0, theta)
    assert float(alone) == pytest.approx(math.log(0.875))


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.8])
@pytest.mark.parametrize("where", ["compute", "comm", "floor"])
def test_the_gradient_matches_finite_differences_where_either_part_dominates(rho, where):
    b = np.array([4.0, 16.0, 64.0])
    base = {"compute": np.array([0.05, 0.1, 0.2]), "comm": np.array([3.0, 5.0, 9.0]),
            "floor": np.array([0.3, 0.01, 0.0])}[where]
    floor = 0.6 if where == "floor" else 0.0
    speed = np.array([1.0, 0.5, 2.0])
    theta = np.array([0.3, 0.4, rho])
    _, g, *_ = step_model(1.5, 32.0, b, speed, base, theta, grad=True, floor=floor)
    for i in range(NP):
        d = np.zeros(NP)
        d[i] = 1e-6
        hi, = step_model(1.5, 32.0, b, speed, base, theta + d, floor=floor)
        lo, = step_model(1.5, 32.0, b, speed, base, theta - d, floor=floor)
        assert g[:, i] == pytest.approx((hi - lo) / 2e-6, abs=1e-5)


def test_without_communication_only_the_fixed_share_moves_a_step_and_the_floor_scales_with_speed():
    theta = np.array([0.4, 3.0, 0.7])
    log_t, g, c, s, t, dlogc = step_model(1.0, 10.0, np.array([5.0, 1.0]), 2.0, 0.0, theta, grad=True, floor=0.8)
    # b = 5: 1 · (0.4 + 0.6 · 0.5) / 2 = 0.35, b = 1: 0.23; the floor 0.8 / 2 = 0.4 sets C at both
    assert c.tolist() == pytest.approx([0.4, 0.4]) and float(s) == 0.0
    assert np.all(np.isfinite(g)) and g == pytest.approx(np.zeros((2, 3)))
    assert dlogc.tolist() == [0.0, 0.0]
    log_t, g, c, *_ = step_model(1.0, 10.0, np.array([20.0]), 2.0, 0.0, theta, grad=True, floor=0.8)
    assert c.tolist() == pytest.approx([(0.4 + 0.6 * 2) / 2])
    assert g[0].tolist() == pytest.approx([(1 - 2) / (0.4 + 0.6 * 2), 0.0, 0.0])


def test_theta_per_row_is_the_same_as_one_row_at_a_time():
    thetas = np.array([[0.1, 0.0, 0.2], [0.5, 1.0, 0.9]])
    both, = step_model(1.0, 32.0, np.array([16.0, 64.0]), 1.0, np.array([0.5, 0.2]), thetas)
    for i in range(2):
        one, = step_model(1.0, 32.0, np.array([16.0, 64.0])[i], 1.0, np.array([0.5, 0.2])[i], thetas[i])
        assert float(both[i]) == pytest.approx(float(one))


# ---- the MAP fit against the documented objective ----

def _objective(job: JobModel, steps: Steps):
    noise = np.where(steps.distributed, job.prior.noise, job.prior.one_gpu_noise)
    timed = np.isfinite(steps.comm_s) & steps.distributed
    inv = np.linalg.inv(job.cov)

    def residuals(theta):
        log_t, = step_model(job.t_ref, job.b_ref, steps.local_batch, steps.speed, steps.comm_base, theta,
                            floor=job.t_floor)
        t = np.exp(log_t)
        f = theta[0]
        c = np.maximum(job.t_ref * (f + (1 - f) * steps.local_batch / job.b_ref), job.t_floor) / steps.speed
        r = [(log_t - np.log(steps.seconds)) / noise,
             ((t - c - steps.comm_s) / (steps.seconds * job.prior.comm_noise))[timed]]
        return np.concatenate(r)

    def value(theta):
        r = residuals(theta)
        d = theta - job.theta
        return float(r @ r + d @ inv @ d)

    return residuals, value


def _check_map(job: JobModel, steps: Steps) -> None:
    theta, cov = map_fit(job, steps)
    residuals, value = _objective(job, steps)
    best = minimize(value, job.theta, method="L-BFGS-B", bounds=list(zip(THETA_LOWER, THETA_UPPER)),
                    options={"ftol": 1e-14, "gtol": 1e-10})
    assert value(theta) <= best.fun + 1e-6 * (1 + best.fun)
    assert theta == pytest.approx(best.x, abs=2e-3)
    # Laplace covariance: the inverse Gauss–Newton Hessian, Jacobian by central differences
    jac = np.empty((len(residuals(theta)), NP))
    for i in range(NP):
        d = np.zeros(NP)
        d[i] = 1e-6
        jac[:, i] = (residuals(theta + d) - residuals(theta - d)) / 2e-6
    want = np.linalg.inv(jac.T @ jac + np.linalg.inv(job.cov))
    assert cov == pytest.approx(want, rel=1e-3, abs=1e-9)
    assert np.array_equal(cov, cov.T)


def test_the_fit_of_step_times_minimises_the_documented_objective():
    prior = Prior(sd=(0.2, 0.8, 0.3), noise=0.1, one_gpu_noise=0.02, corr=(0.2, -0.1, 0.4))
    job = model(f=0.25, eta=1.0, rho=0.4, prior=prior)
    steps = Steps(np.array([32.0, 16.0, 64.0, 8.0]), np.array([0.3, 0.6, 0.2, 0.0]),
                  np.array([1.5, 1.4, 2.1, 0.5]), np.full(4, NAN))
    _check_map(job, steps)


def test_the_fit_of_step_and_communication_times_minimises_the_documented_objective():
    prior = Prior(sd=(0.2, 0.8, 0.3), noise=0.1, comm_noise=0.05, one_gpu_noise=0.02)
    job = model(f=0.25, eta=1.0, rho=0.4, prior=prior, t_floor=0.3)
    # an optimum inside the bounds (at a bound the solver's stopping rule leaves it a little short)
    steps = Steps(np.array([32.0, 16.0, 4.0, 8.0]), np.array([0.3, 0.6, 0.2, 0.0]),
                  np.array([1.17, 1.098, 0.859, 0.475]), np.array([0.3, 0.5, 0.2, NAN]), np.array([1.0, 1.0, 0.5, 1.0]))
    _check_map(job, steps)


def test_measured_communication_pins_the_efficiency_the_step_time_alone_leaves_open():
    """With overlap and efficiency both uncertain, one step time has many explanations; its exposed
    communication picks the one that generated it."""
    prior = Prior(sd=(0.01, 1.0, 0.3), noise=0.05, comm_noise=0.02)
    truth = model(f=0.2, eta=3.0, rho=0.6, prior=prior)
    b, base = np.array([32.0, 32.0]), np.array([0.2, 0.5])
    log_t, _, c, _, t, _ = step_model(1.0, 32.0, b, 1.0, base, truth.theta, grad=True)
    start = model(f=0.2, eta=1.0, rho=0.3, prior=prior)
    fitted = start.updated(Steps(b, base, t, t - c))
    assert fitted.comm_efficiency == pytest.approx(3.0, rel=0.05)
    assert fitted.theta[2] == pytest.approx(0.6, abs=0.05)


# ---- the fit's second start ----

def test_no_second_start_without_an_all_reduce_or_when_the_belief_explains_the_steps():
    j = model(f=0.2, eta=1.0, rho=0.0, prior=Prior(noise=0.1))
    one = Steps(np.array([32.0]), np.zeros(1), np.array([5.0]), np.full(1, NAN))
    assert _comm_start(j, one, j.theta) is None
    # C = 1, S = 0.1: predicted 1.1; a step e^{0.19} × slower is within 2 × noise, e^{0.21} × is not
    near = Steps(np.array([32.0]), np.array([0.1]), np.array([1.1 * math.exp(0.19)]), np.full(1, NAN))
    assert _comm_start(j, near, j.theta) is None
    far = Steps(np.array([32.0]), np.array([0.1]), np.array([1.1 * math.exp(0.21)]), np.full(1, NAN))
    assert _comm_start(j, far, j.theta) is not None
    # a distributed step with no all-reduce priced does not count
    flat = Steps(np.array([32.0]), np.zeros(1), np.array([5.0]), np.full(1, NAN), 1.0, np.array([True]))
    assert _comm_start(j, flat, j.theta) is None


def test_the_second_start_puts_the_efficiency_where_the_slow_steps_need_it():
    # γ = 1: the step needs S = T − C; C = 1 at b_ref; η = S / A
    j = model(f=0.2, eta=1.0, rho=0.0, prior=Prior(noise=0.05))
    steps = Steps(np.array([32.0, 32.0, 32.0, 8.0]), np.array([0.1, 0.1, 0.1, 0.0]), np.array([3.0, 2.0, 5.0, 9.0]),
                  np.full(4, NAN))
    start = _comm_start(j, steps, j.theta)
    # the needs of the three distributed steps are 2, 1 and 4 s (the one-GPU step is left out): median 2
    assert start.tolist() == pytest.approx([0.2, math.log(2.0 / 0.1), 0.0])
    assert j.theta[1] == 0.0  # the belief is not changed in place


def test_the_second_start_with_overlap_speed_and_floor():
    rho = 0.5
    gamma = math.log(2) / math.log(1.5)
    j = model(f=0.2, eta=1.0, rho=rho, t_floor=1.6, prior=Prior(noise=0.05))
    # b = 8 on a device twice as fast: the line gives 0.4/2, the floor 1.6/2 = 0.8 sets C
    steps = Steps(np.array([8.0]), np.array([0.05]), np.array([2.0]), np.full(1, NAN), 2.0)
    start = _comm_start(j, steps, j.theta)
    need = (2.0**gamma - 0.8**gamma) ** (1 / gamma)
    assert start.tolist() == pytest.approx([0.2, math.log(need / 0.05), rho])


def test_the_second_start_stays_within_the_bounds():
    j = model(f=0.2, eta=1.0, rho=0.0, prior=Prior(noise=0.05))
    steps = Steps(np.array([32.0]), np.array([1e-9]), np.array([1e3]), np.full(1, NAN))
    assert _comm_start(j, steps, j.theta)[1] == THETA_UPPER[1]


# ---- the fit's bounds and its second start at work ----

def test_a_flat_profile_stops_the_fixed_share_at_its_upper_bound_and_a_steep_one_at_zero():
    flat = JobModel.from_one_gpu("m", 0.0, np.array([8.0, 64.0]), np.array([1.0, 1.0]))
    assert flat.fixed_share == THETA_UPPER[0] == 0.99
    # steeper than proportional (8 → 64 samples: 0.1 → 0.9 s) would need a negative fixed share
    steep = JobModel.from_one_gpu("m", 0.0, np.array([8.0, 64.0]), np.array([0.1, 0.9]))
    assert steep.fixed_share == 0.0


def test_steps_slower_than_no_overlap_allows_stop_the_overlap_at_zero():
    """The belief priced communication at e^-10 of the fabric's time; two steps of 3 s at all-reduce
    times 0.5 and 1 s (C = 1 s) are slower than C + S at any one η, which only an overlap below zero
    (T > C + S) would explain: from the second start the fit must stop at ρ = 0."""
    prior = Prior(mean=(0.2, -10.0, 0.3), sd=(0.3, 4.0, 0.3), noise=0.05)
    j = JobModel("m", 1e8, 1.0, 32.0, np.array(prior.mean), prior.cov, prior)
    steps = Steps(np.array([32.0, 32.0]), np.array([0.5, 1.0]), np.array([3.0, 3.0]), np.full(2, NAN))
    assert _comm_start(j, steps, j.theta) is not None
    theta = j.updated(steps).theta
    assert theta[2] == 0.0 and np.all(theta >= THETA_LOWER) and np.all(theta <= THETA_UPPER)
    # at γ = 1 the steps cost 1 + 0.5η and 1 + η: η = 2.63 splits the misfit in log time (2.31 and 3.63 s)
    assert math.exp(theta[1]) == pytest.approx(2.63, rel=0.01)


def test_the_second_start_reaches_communication_the_belief_priced_at_nearly_nothing():
    prior = Prior(mean=(0.2, -10.0, 0.3), sd=(0.3, 4.0, 0.3), noise=0.05)
    j = JobModel("m", 1e8, 1.0, 32.0, np.array(prior.mean), prior.cov, prior)
    steps = Steps(np.array([32.0, 32.0]), np.array([0.5, 1.0]), np.array([1.5, 2.0]), np.full(2, NAN))
    fitted = j.updated(steps)
    assert fitted.theta[1] > -1.0  # from −10: the communication the steps need
    log_t, = step_model(1.0, 32.0, steps.local_batch, 1.0, steps.comm_base, fitted.theta)
    assert np.exp(log_t) == pytest.approx([1.5, 2.0], rel=0.05)


# ---- the compute floor's search ----

def test_a_floor_step_may_equal_the_first_step_on_the_line():
    # 1, 2 and 4 samples at 4 s; the line through 4, 8, 16 (4, 6, 10 s: 2 + 0.5·b) prices 1 and 2 at
    # 2.5 and 3 s; the floor's slowest step (4 s) is no slower than the line's fastest (4 s): a floor
    assert compute_floor(np.array([1.0, 2.0, 4.0, 8.0, 16.0]), np.array([4.0, 4.0, 4.0, 6.0, 10.0]), 0.03) == \
        (2.0, 4.0)


def test_a_split_that_fails_the_order_check_does_not_end_the_search():
    # three on the floor fails: the 4-sample step (2.2 s) is slower than the 8-sample one (2.1 s);
    # two on the floor (1 and 2 samples at 2 s, above the line through 4 to 32 samples) counts
    b = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    assert compute_floor(b, np.array([2.0, 2.0, 2.2, 2.1, 3.0, 5.0]), 0.03) == (2.0, 2.0)


def test_correlations_that_make_a_singular_covariance_are_refused_whatever_the_rounding():
    """(0.5, 0.5, −0.5) makes the correlation matrix singular (its determinant is 0); with these
    standard deviations the computed smallest eigenvalue rounds to +4e-19, which a bare `> 0` took
    for positive, and the first update then failed inverting the covariance ("Singular matrix")."""
    with pytest.raises(ValueError, match="prior: correlations must make a positive-definite covariance"):
        Prior(sd=(0.05, 0.2, 0.1), corr=(0.5, 0.5, -0.5))
    # a perfect correlation whose covariance rounds to a positive smallest eigenvalue (+1.7e-18)
    with pytest.raises(ValueError, match="prior: correlations must make a positive-definite covariance"):
        Prior(sd=(0.1, 0.7, 0.3), corr=(1.0, 0.0, 0.0))
    nearly = Prior(sd=(0.05, 0.2, 0.1), corr=(0.5, 0.5, -0.49))  # nearly singular, but not: accepted
    assert np.linalg.eigvalsh(nearly.cov).min() > 0


def test_the_second_start_prices_the_belief_with_the_device_floor():
    # 8 samples: the line gives 0.4 s but the floor 2 s; with S = 0.1 the belief predicts 2.1 s, as measured
    prior = Prior(noise=0.05)
    j = JobModel("m", 1e8, 1.0, 32.0, theta_of(0.2, 1.0, 0.0), prior.cov, prior, t_floor=2.0)
    steps = Steps(np.array([8.0]), np.array([0.1]), np.array([2.1]), np.full(1, NAN))
    assert _comm_start(j, steps, j.theta) is None


def test_a_step_faster_than_its_compute_needs_almost_no_communication():
    # γ = 1, C = 1: a 10 s step needs 9 s of exposed all-reduce, a 0.5 s one (faster than C) needs
    # C/T held just under 1: 0.5 · 1e-9 s; log η is the median of log(need / A) over both
    prior = Prior(noise=0.05)
    j = JobModel("m", 1e8, 1.0, 32.0, theta_of(0.2, 1.0, 0.0), prior.cov, prior)
    steps = Steps(np.array([32.0, 32.0]), np.array([0.1, 0.1]), np.array([10.0, 0.5]), np.full(2, NAN))
    start = _comm_start(j, steps, j.theta)
    assert start[1] == pytest.approx((math.log(9.0 / 0.1) + math.log(0.5e-9 / 0.1)) / 2, rel=1e-6)
    # the same steps against a 100 s all-reduce the belief prices at e^-10 of it: log η would be −14.2,
    # below the bound −12
    far = JobModel("m", 1e8, 1.0, 32.0, theta_of(0.2, math.exp(-10.0), 0.0), prior.cov, prior)
    steps = Steps(np.array([32.0, 32.0]), np.array([100.0, 100.0]), np.array([10.0, 0.5]), np.full(2, NAN))
    assert (math.log(9.0 / 100) + math.log(0.5e-9 / 100)) / 2 < -14
    assert _comm_start(far, steps, far.theta)[1] == THETA_LOWER[1] == -12.0
