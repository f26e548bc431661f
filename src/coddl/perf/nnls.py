"""Optimus's online performance models (EuroSys'18), fitted with non-negative least squares.

Both are linear in their coefficients once rewritten, and every coefficient is a physical cost or
rate that cannot be negative, so NNLS fits them from a handful of observed points without the
nonsensical negative terms an unconstrained fit produces on noisy samples. Optimus (ALGORITHMS.md
§4) and AITurbo's predictor (§5) build on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class OptimusSpeed:
    """Training speed f(p, w) = (θ0·M/w + θ1 + θ2·w/p + θ3·w + θ4·p)^−1 steps/s with p parameter
    servers, w workers and global batch M: per-worker compute, fixed overhead, push/pull through the
    servers, and the per-worker and per-server coordination costs."""

    theta: tuple[float, float, float, float, float]
    batch: float

    @staticmethod
    def features(p: np.ndarray, w: np.ndarray, batch: float) -> np.ndarray:
        p, w = np.asarray(p, dtype=float), np.asarray(w, dtype=float)
        return np.c_[batch / w, np.ones_like(w), w / p, w, p]

    def speed(self, p: np.ndarray | float, w: np.ndarray | float) -> np.ndarray:
        return 1.0 / (self.features(np.atleast_1d(p), np.atleast_1d(w), self.batch) @ np.array(self.theta))

    @staticmethod
    def fit(p: np.ndarray, w: np.ndarray, speed: np.ndarray, batch: float) -> "OptimusSpeed":
        """NNLS on the step time 1/f, each row scaled by its measured time so that every sample's
        relative error counts equally."""
        t = 1.0 / np.asarray(speed, dtype=float)
        if len(t) < 1:
            raise ValueError("fitting the Optimus speed model needs at least one observation")
        from scipy.optimize import nnls  # here: importing scipy costs every simulation 0.3 s
        theta, _ = nnls(OptimusSpeed.features(p, w, batch) / t[:, None], np.ones_like(t))
        return OptimusSpeed(tuple(float(v) for v in theta), float(batch))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class LossCurve:
    """Training loss after k steps, l(k) = 1/(β0·k + β1) + β2, and the steps still needed to reach
    a target loss: Optimus's estimate of a job's remaining work."""

    beta0: float
    beta1: float
    beta2: float

    def loss(self, steps: np.ndarray | float) -> np.ndarray:
        return 1.0 / (self.beta0 * np.asarray(steps, dtype=float) + self.beta1) + self.beta2

    def steps_to(self, target_loss: float) -> float:
        """Total steps until the loss reaches ``target_loss``; ∞ if the curve never gets there."""
        if target_loss <= self.beta2 or self.beta0 <= 0.0:
            return math.inf
        return max(0.0, (1.0 / (target_loss - self.beta2) - self.beta1) / self.beta0)

    @staticmethod
    def fit(steps: np.ndarray, losses: np.ndarray) -> "LossCurve":
        """For a fixed floor β2, 1/(l − β2) = β0·k + β1 is an NNLS problem; the floor is chosen in
        [0, min loss) to minimise the squared error of the loss itself."""
        from scipy.optimize import minimize_scalar, nnls  # here: see OptimusSpeed.fit

        k, loss = np.asarray(steps, dtype=float), np.asarray(losses, dtype=float)
        if len(k) < 2 or loss.min() <= 0.0:
            raise ValueError("fitting a loss curve needs at least two points with positive loss")
        design = np.c_[k, np.ones_like(k)]

        def inner(floor: float) -> tuple[float, np.ndarray]:
            gap = loss - floor
            # weight by gap²: the error of 1/gap is ≈ error of the loss divided by gap²
            coef, _ = nnls(design * gap[:, None] ** 2, np.ones_like(gap) * gap)
            pred = 1.0 / np.maximum(design @ coef, 1e-300) + floor
            return float(np.sum((pred - loss) ** 2)), coef

        top = float(loss.min()) * (1.0 - 1e-9)
        best = minimize_scalar(lambda f: inner(f)[0], bounds=(0.0, top), method="bounded",
                               options={"xatol": top * 1e-10})
        candidates = [(inner(f)[0], f) for f in (0.0, float(best.x))]
        floor = min(candidates)[1]
        b0, b1 = inner(floor)[1]
        return LossCurve(float(b0), float(b1), floor)
