"""Gavel's max-min LP: the equal share by hand, a two-job case by hand, and the class-aggregated
HiGHS model against an independent per-job LP (scipy's linprog) on random instances."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy.optimize import linprog

from coddl.policies.gavel import equal_share_fraction, equal_share_speed, job_classes, max_min_lp


def per_job_optimum(speed: np.ndarray, demand: np.ndarray, cap: np.ndarray) -> float:
    """max z s.t. Σ_t X[j,t]·speed[j,t]/eq_j ≥ z, Σ_t X[j,t] ≤ 1, Σ_j d_j X[j,t] ≤ cap_t, X = 0
    where d_j > cap_t — one variable per job and type, solved by scipy."""
    n, T = speed.shape
    eq = equal_share_speed(speed, demand, cap)
    fits = demand[:, None] <= cap[None, :]
    a = np.where(fits, speed, 0.0) / eq[:, None]
    nv = n * T + 1
    A, b = [], []
    for j in range(n):
        row = np.zeros(nv)
        row[j * T:(j + 1) * T] = -a[j]
        row[-1] = 1.0
        A.append(row), b.append(0.0)
        row = np.zeros(nv)
        row[j * T:(j + 1) * T] = 1.0
        A.append(row), b.append(1.0)
    for t in range(T):
        row = np.zeros(nv)
        row[t:n * T:T] = demand
        A.append(row), b.append(cap[t])
    bounds = [(0.0, 1.0 if fits[j, t] else 0.0) for j in range(n) for t in range(T)] + [(0.0, None)]
    c = np.zeros(nv)
    c[-1] = -1.0
    res = linprog(c, A_ub=np.array(A), b_ub=np.array(b), bounds=bounds, method="highs")
    assert res.status == 0
    return float(res.x[-1])


def normalised(x_class: np.ndarray, classes) -> np.ndarray:
    return (x_class * classes.norm_speed).sum(axis=1)


def test_equal_share_water_fills_gpu_time():
    # 8 GPUs, demands 1, 2, 4, 8: level L with 1 + 2 + L + L = 8 → L = 2.5
    assert equal_share_fraction(np.array([1, 2, 4, 8]), 8) == pytest.approx([1, 1, 0.625, 0.3125])
    assert equal_share_fraction(np.array([1, 2]), 8) == pytest.approx([1, 1])


def test_two_jobs_two_types_by_hand():
    # one V100 and one K80; job 0 runs 4× faster on the V100, job 1 equally fast on both.
    # Equal share: each job half the time on each type → 0.625 and 1.0 (relative to the V100).
    # Optimum: job 0 all the time on the V100 (1.0 / 0.625 = 1.6), job 1 all the time on the K80
    # (1.0 / 1.0 = 1): min 1. Anything giving job 1 V100 time takes it from job 0 for no gain.
    speed = np.array([[1.0, 0.25], [1.0, 1.0]])
    demand = np.array([1, 1])
    cap = np.array([1, 1])
    classes = job_classes(np.array([0, 1]), demand, speed, cap)
    x = max_min_lp(classes, cap)
    assert x[classes.of_row] == pytest.approx(np.array([[1.0, 0.0], [0.0, 1.0]]), abs=1e-6)
    assert normalised(x, classes).min() == pytest.approx(1.0)


def test_the_second_stage_uses_capacity_the_max_min_optimum_leaves_idle():
    # job 0 cannot run on the small type; job 1 is the bottleneck. Stage 2 must still give job 0
    # all it can use.
    speed = np.array([[1.0, 1.0], [1.0, 1.0]])
    demand = np.array([4, 1])
    cap = np.array([4, 1])
    classes = job_classes(np.array([0, 1]), demand, speed, cap)
    x = max_min_lp(classes, cap)[classes.of_row]
    used = (x * demand[:, None]).sum(axis=0)
    assert used == pytest.approx([4.0, 1.0], abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), T=st.integers(1, 3), data=st.data())
def test_class_aggregated_lp_matches_an_independent_per_job_lp(n, T, data):
    models = np.array(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    demand = np.array(data.draw(st.lists(st.sampled_from([1, 2, 4]), min_size=n, max_size=n)))
    cap = np.array(data.draw(st.lists(st.sampled_from([2, 4, 8]), min_size=T, max_size=T)))
    demand = np.minimum(demand, cap.max())  # the policy caps demand at the largest type
    per_model = np.array(data.draw(st.lists(st.lists(st.floats(0.1, 3.0), min_size=T, max_size=T),
                                            min_size=3, max_size=3)))
    speed = per_model[models]
    classes = job_classes(models, demand, speed, cap)
    x = max_min_lp(classes, cap)
    ours = normalised(x, classes)[classes.of_row]
    assert ours.min() == pytest.approx(per_job_optimum(speed, demand, cap), rel=1e-5, abs=1e-7)
    # feasible for the jobs it describes: time ≤ 1 each, capacity per type
    xj = x[classes.of_row]
    assert (xj.sum(axis=1) <= 1 + 1e-7).all()
    assert ((xj * demand[:, None]).sum(axis=0) <= cap + 1e-6).all()
