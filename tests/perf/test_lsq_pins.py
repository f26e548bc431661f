"""Hand-computed pins of the bounded Levenberg–Marquardt solver (``coddl.perf.lsq``): its first
damped steps on a linear problem, its stopping rule, its bounds and what it returns."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.perf.lsq import levenberg_marquardt

INF = np.full(2, np.inf)


def linear(a: np.ndarray, y: np.ndarray, calls: list | None = None):
    def fun(x):
        if calls is not None:
            calls.append(np.array(x))
        return a @ x - y, a.copy()
    return fun


def test_the_first_steps_are_damped_by_a_thousandth_then_a_third_of_that():
    """Diagonal A: each damped Gauss–Newton step goes 1/(1 + λ) of the way to the solution; λ
    starts at 1e-3 and shrinks 3× after an accepted step."""
    a, y = np.diag([2.0, 5.0]), np.array([4.0, -10.0])  # solution (2, −2)
    x1, r1, j1 = levenberg_marquardt(linear(a, y), np.zeros(2), -INF, INF, iterations=1)
    assert x1 == pytest.approx(np.array([2.0, -2.0]) / 1.001, rel=1e-12)
    assert r1 == pytest.approx(a @ x1 - y) and np.array_equal(j1, a)
    x2, *_ = levenberg_marquardt(linear(a, y), np.zeros(2), -INF, INF, iterations=2)
    lam = 1e-3 / 3
    assert x2 == pytest.approx(x1 + (np.array([2.0, -2.0]) - x1) / (1 + lam), rel=1e-12)


def test_it_stops_once_a_step_gains_less_than_the_tolerance():
    a, y = np.diag([2.0, 5.0]), np.array([4.0, -10.0])
    calls: list = []
    x, *_ = levenberg_marquardt(linear(a, y, calls), np.zeros(2), -INF, INF, iterations=60)
    assert x == pytest.approx([2.0, -2.0], rel=1e-6)
    # the start, then steps until one gains ≤ 1e-5 × (1 + cost): the cost falls from 116 by about
    # (λ/(1 + λ))² a step (λ = 1e-3, 3.3e-4, 1.1e-4) — to 1.16e-4, 1.3e-11, 1.6e-19: the first two steps
    # gain more than 1e-5, the third less, so the start and three steps: four calls
    assert len(calls) == 4
    calls.clear()
    levenberg_marquardt(linear(a, y, calls), np.zeros(2), -INF, INF, iterations=60, tol=0.0)
    assert len(calls) > 3  # no tolerance: it goes on while the cost falls


def test_the_solution_is_clipped_to_the_bounds_and_the_start_too():
    a, y = np.eye(2), np.array([3.0, -3.0])
    lower, upper = np.array([-1.0, -1.0]), np.array([1.0, 1.0])
    x, r, jac = levenberg_marquardt(linear(a, y), np.array([5.0, 0.0]), lower, upper)
    assert x.tolist() == [1.0, -1.0]
    assert r.tolist() == [-2.0, 2.0]
    x0, r0, _ = levenberg_marquardt(linear(a, y), np.array([5.0, -7.0]), lower, upper, iterations=0)
    assert x0.tolist() == [1.0, -1.0] and r0.tolist() == [-2.0, 2.0]


def test_a_nonlinear_problem_against_its_bound():
    """Rosenbrock's residuals (10(x₁ − x₀²), 1 − x₀): minimum (1, 1); with x₀ ≤ 0.5 the best is
    x₀ = 0.5, x₁ = 0.25."""
    def fun(x):
        return np.array([10 * (x[1] - x[0] ** 2), 1 - x[0]]), np.array([[-20 * x[0], 10.0], [-1.0, 0.0]])
    x, *_ = levenberg_marquardt(fun, np.array([-1.2, 1.0]), -INF, INF, iterations=200, tol=1e-14)
    assert x == pytest.approx([1.0, 1.0], abs=1e-6)
    x, r, _ = levenberg_marquardt(fun, np.array([-1.2, 1.0]), -INF, np.array([0.5, np.inf]), iterations=200,
                                  tol=1e-14)
    # x₀ sits on its bound; against a bound the stopping rule (a step's gain ≤ 1e-5 × (1 + cost)) leaves
    # x₁ a little short, the cost within that tolerance of the best, 0.25
    assert x[0] == 0.5 and x[1] == pytest.approx(0.25, abs=1e-3)
    assert float(r @ r) == pytest.approx(0.25, rel=1e-4)


def test_a_rejected_step_raises_the_damping_until_one_is_accepted():
    """r = 1 − e^{10x} from x = −1: the Gauss–Newton step (≈ 2200, clipped to the bound 5) overshoots
    into a cost far larger than at the start and is refused; the damping grows 10× until a step
    helps, and the solver still reaches the root."""
    def fun(x):
        e = np.exp(10 * x)
        return 1 - e, -10 * e[:, None]
    x, r, _ = levenberg_marquardt(fun, np.array([-1.0]), np.array([-5.0]), np.array([5.0]), iterations=100)
    assert x == pytest.approx([0.0], abs=1e-4)


def test_a_function_with_no_better_point_returns_the_start():
    calls: list = []

    def fun(x):
        calls.append(1)
        return np.array([1.0]), np.array([[0.0]])  # flat: no step lowers the cost
    x, r, jac = levenberg_marquardt(fun, np.array([0.3]), np.array([0.0]), np.array([1.0]))
    assert x.tolist() == [0.3] and r.tolist() == [1.0]
    # refused steps raise the damping 10× from 1e-3 until it passes 1e10: 14 tries after the start
    assert len(calls) == 1 + 14


def test_the_tolerance_is_relative_to_the_cost_left():
    """Two equations x = 100 and x = −100: the best cost is 2·10⁴. From x = 50 the first step leaves
    x ≈ 0.05 (cost 20000.005), the second gains ~0.005 ≤ 1e-5 × (1 + 20000): done after two steps."""
    calls: list = []
    x, *_ = levenberg_marquardt(linear(np.array([[1.0], [1.0]]), np.array([100.0, -100.0]), calls), np.array([50.0]),
                                np.array([-np.inf]), np.array([np.inf]))
    assert x == pytest.approx([0.0], abs=1e-3)
    assert len(calls) == 3


def test_without_a_tolerance_the_iterations_bound_the_work():
    """r = x², J = 2x: each step roughly halves x and the cost x⁴ falls forever; with no tolerance
    the solver stops after its 60 default iterations: the start and 60 steps."""
    calls: list = []

    def fun(x):
        calls.append(1)
        return x**2, np.diag(2 * x)
    levenberg_marquardt(fun, np.array([1.0]), np.array([-10.0]), np.array([10.0]), tol=0.0)
    assert len(calls) == 61


def test_a_parameter_the_residuals_ignore_stays_put_while_the_others_are_solved():
    # x₁ has a column of zeros: its damping scale falls back to 1 so the damped system stays solvable
    def fun(x):
        return np.array([x[0] - 3.0]), np.array([[1.0, 0.0]])
    x, r, _ = levenberg_marquardt(fun, np.array([0.0, 0.7]), -INF, INF)
    assert x == pytest.approx([3.0, 0.7], abs=1e-6) and r == pytest.approx([0.0], abs=1e-6)


def test_an_integer_start_comes_back_as_floats():
    def fun(x):
        return np.array([1.0]), np.array([[0.0]])
    x, *_ = levenberg_marquardt(fun, np.array([0]), np.array([0]), np.array([1]))
    assert x.dtype == np.float64
