"""Throughput curves for real jobs: the measured CoDDL models plus one assumed curve for the rest.

A job names its model for the estimator. A name with a measured curve uses it; any other name gets
the ``default`` curve, near-linear (5 % efficiency lost per extra GPU, up to 64 GPUs). Either way the
job's measured throughput then corrects the curve online (one factor per job, see
``coddl.perf.correction``), so an unknown model starts with a reasonable shape and the right scale
arrives with its first progress reports. One shared default row suffices because the correction is
per job: per-name copies of the same assumed curve would add nothing.
"""

from __future__ import annotations

from coddl.perf.curves import CurveTable, load_coddl_curves

DEFAULT_CURVE = "default"
DEFAULT_MAX_GPUS = 64
LOSS_PER_EXTRA_GPU = 0.05


def default_points(kmax: int = DEFAULT_MAX_GPUS) -> dict[int, float]:
    """Iterations/s on k GPUs relative to one GPU: k / (1 + 0.05 (k − 1))."""
    return {k: k / (1.0 + LOSS_PER_EXTRA_GPU * (k - 1)) for k in range(1, kmax + 1)}


def runtime_curves() -> CurveTable:
    table = load_coddl_curves()
    table.add_model(DEFAULT_CURVE, default_points())
    return table


def curve_for(table: CurveTable, model: str) -> str:
    """The curve a job with this model name is planned with."""
    return model if model in table.index else DEFAULT_CURVE
