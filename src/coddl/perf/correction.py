"""Online correction of the estimate with a running job's measured throughput (CoDDL's step 3).

The analytic model is right about *shape* (how throughput changes with the placement) far more often
than about *scale*: a job's data pipeline, kernel mix or gradient layout can make it uniformly
faster or slower than its one-GPU profile suggests. So each job carries one multiplicative factor,
measured ÷ predicted, estimated in log space (a 2× error up and down weigh the same):

- the first ``warmup`` samples are averaged plainly, so a wrong prior is replaced at the first sample;
- after that an exponentially weighted mean follows slow drift;
- every sample's deviation from the current estimate is clipped to ±``clip`` (log space), so a
  stray measurement (a stalled step, a checkpoint) cannot throw the factor far.

Where the shape is off too, ``ModelCorrection`` corrects the estimator's compute and communication
parts separately, from samples at several batch sizes of one placement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from coddl.perf.estimator import overlapped


@dataclass
class OnlineCorrection:
    warmup: int = 5
    alpha: float = 0.2
    clip: float = math.log(1.5)
    log_factor: float = 0.0
    samples: int = 0

    def __post_init__(self) -> None:
        if self.warmup < 1 or not 0.0 < self.alpha <= 1.0 or self.clip <= 0.0:
            raise ValueError("correction needs warmup ≥ 1, 0 < alpha ≤ 1 and clip > 0")

    @property
    def factor(self) -> float:
        """Multiply the model's throughput by this to get the job's."""
        return math.exp(self.log_factor)

    def observe(self, predicted: float, measured: float) -> float:
        """Fold in one measurement of the same quantity the model predicted (iterations/s or
        samples/s); returns the updated factor. Non-positive values carry no information."""
        if predicted <= 0.0 or measured <= 0.0:
            return self.factor
        deviation = math.log(measured / predicted) - self.log_factor
        if self.samples >= 1:
            deviation = max(-self.clip, min(self.clip, deviation))
        self.samples += 1
        weight = 1.0 / self.samples if self.samples <= self.warmup else self.alpha
        self.log_factor += weight * deviation
        return self.factor

    def corrected(self, predicted: float) -> float:
        return predicted * self.factor


@dataclass
class ModelCorrection:
    """Per-job correction of the estimator's two parts, from a running job's measured step times.

    A job measured on one placement at several batch sizes shows more than a scale: its compute time
    moves with the batch while its all-reduce does not, so the samples tell how far each part is off
    and how much of the all-reduce hides under compute. Each sample is the estimator's compute and
    communication seconds for that step plus the measured seconds; the fit (least squares in log
    time) is a compute factor between 0.6 and 1.65, a communication factor and the job's own overlap γ.
    Fewer than ``min_batches`` distinct compute times cannot separate those, and samples from one
    node say nothing about the inter-node links that other placements use: then one factor scales
    both parts (with the cluster's γ), the correction ``OnlineCorrection`` applies.
    """

    overlap: float  # the cluster's calibrated γ: the starting point and the fallback
    min_batches: int = 3
    compute_factor: float = 1.0
    comm_factor: float = 1.0
    job_overlap: float = field(init=False)
    _samples: list[tuple[float, float, float]] = field(default_factory=list, init=False, repr=False)
    _across_nodes: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self.job_overlap = self.overlap

    def observe(self, compute_s: float, comm_s: float, measured_s: float, nodes: int) -> None:
        """One measured step: the estimator's parts for it, the measured seconds, and how many nodes
        the job spanned."""
        if compute_s <= 0.0 or comm_s < 0.0 or measured_s <= 0.0:
            return
        self._samples.append((compute_s, comm_s, measured_s))
        self._across_nodes |= nodes > 1
        self._fit()

    def seconds(self, compute_s: np.ndarray | float, comm_s: np.ndarray | float) -> np.ndarray:
        """Corrected step time of steps the estimator puts at ``compute_s`` + ``comm_s``."""
        return overlapped(np.asarray(compute_s) * self.compute_factor, np.asarray(comm_s) * self.comm_factor,
                          self.job_overlap)

    def _fit(self) -> None:
        c, s, t = (np.array(col) for col in zip(*self._samples))
        if not self._across_nodes or np.unique(np.round(c, 12)).size < self.min_batches:
            f = float(np.exp(np.mean(np.log(t / overlapped(c, s, self.overlap)))))
            self.compute_factor = self.comm_factor = f
            self.job_overlap = self.overlap
            return
        fit = least_squares(
            lambda x: np.log(overlapped(c * np.exp(x[1]), s * np.exp(x[2]), x[0]) / t),
            [self.overlap, 0.0, 0.0], bounds=([1.0, -0.5, -3.0], [10.0, 0.5, 3.0]))
        self.job_overlap, self.compute_factor, self.comm_factor = (
            float(fit.x[0]), float(np.exp(fit.x[1])), float(np.exp(fit.x[2])))
