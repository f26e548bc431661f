"""A small bounded Levenberg–Marquardt solver for the estimator's fits.

The fits here have few parameters (3 per job, 4 per fabric) and up to thousands of residuals, with
analytic Jacobians; solving the normal equations (p × p) is far cheaper than the SVD of the full
Jacobian a general solver takes at every step, and bounds are kept by clipping the step.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

ResidualsAndJacobian = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def levenberg_marquardt(fun: ResidualsAndJacobian, x0: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                        iterations: int = 60, tol: float = 1e-5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minimise ‖r(x)‖² within [lower, upper]; returns (x, r(x), J(x))."""
    x = np.clip(np.asarray(x0, dtype=float), lower, upper)
    r, jac = fun(x)
    cost = float(r @ r)
    damping = 1e-3
    for _ in range(iterations):
        # einsum, not BLAS: a multi-threaded BLAS on a busy machine takes 100× longer for these shapes
        grad = np.einsum("ni,n->i", jac, r)
        hess = np.einsum("ni,nj->ij", jac, jac)
        scale = np.diag(hess).copy()
        scale[scale <= 0] = 1.0
        try:
            step = np.linalg.solve(hess + damping * np.diag(scale), -grad)
        except np.linalg.LinAlgError:
            damping *= 10.0
            continue
        trial = np.clip(x + step, lower, upper)
        r_t, jac_t = fun(trial)
        cost_t = float(r_t @ r_t)
        if np.isfinite(cost_t) and cost_t < cost:
            done = cost - cost_t <= tol * (1.0 + cost)
            x, r, jac, cost = trial, r_t, jac_t, cost_t
            damping = max(damping / 3.0, 1e-12)
            if done:
                break
        else:
            damping *= 10.0
            if damping > 1e10:
                break
    return x, r, jac
