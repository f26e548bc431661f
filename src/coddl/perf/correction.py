"""Online correction of the estimate with a running job's measured throughput (CoDDL's step 3).

``correct`` is the estimator's own correction: measured steps — rows of the profile format, the
same kind of data as the one-GPU profile — update the job's belief over its per-job parameters
(fixed share, communication efficiency, overlap) by regularised least squares from its current
belief (``JobModel.updated``). One measurement moves the estimate only as far as its noise allows
against how unsure the prior was, so a stray step cannot throw the job's curve far, and steps at
two or more sizes pin down how the job scales rather than one factor at one size.

``OnlineCorrection`` is the scalar form the real system's controller uses today: one
multiplicative factor per job, measured ÷ predicted, estimated in log space (a 2× error up and
down weigh the same):

- the first ``warmup`` samples are averaged plainly, so a wrong prior is replaced at the first sample;
- after that an exponentially weighted mean follows slow drift;
- every sample's deviation from the current estimate is clipped to ±``clip`` (log space), so a
  stray measurement (a stalled step, a checkpoint) cannot throw the factor far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from coddl.perf.calibrate import job_steps
from coddl.perf.estimator import Estimator
from coddl.perf.jobmodel import JobModel
from coddl.perf.table import ProfileTable


def correct(job: JobModel, estimator: Estimator, measured: ProfileTable) -> JobModel:
    """``job`` after its measured rows (any GPU counts; one-GPU rows refine only the fixed share).
    Rows are in the profile format; their ``comm_s``, where given, is used too."""
    if len(measured) == 0:
        return job
    speed = np.array([estimator.speed(job, t) for t in measured.gpu_type])
    return job.updated(job_steps(measured, estimator.fabric, speed))


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
        """Fold in one measurement of the same quantity the model predicted (steps/s or
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
