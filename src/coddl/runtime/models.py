"""Throughput curves for real jobs before their own profile arrives: the measured CoDDL models plus
one assumed curve for the rest.

A job may name its model. A name with a measured curve uses it as a prior; any other name, or none,
gets the ``default`` curve, a conservative one (Amdahl's law with a quarter of the one-GPU step not
parallel: 2.9× on 8 GPUs, never above 4×), so that a job nothing is known about is not handed many
GPUs it may not use. Either curve lasts only until the job's inspection of its first steps reports
(``coddl.runtime.estimation``: from then on the estimator plans it); meanwhile the job's measured
throughput corrects it online (one factor per job, see ``coddl.perf.correction``). One shared default
row suffices because the correction is per job: per-name copies of the same assumed curve would add
nothing.
"""

from __future__ import annotations

from coddl.perf.curves import CurveTable, load_coddl_curves

DEFAULT_CURVE = "default"
DEFAULT_MAX_GPUS = 64
SERIAL_SHARE = 0.25


def default_points(kmax: int = DEFAULT_MAX_GPUS) -> dict[int, float]:
    """Steps/s on k GPUs relative to one GPU: k / (1 + 0.25 (k − 1))."""
    return {k: k / (1.0 + SERIAL_SHARE * (k - 1)) for k in range(1, kmax + 1)}


def runtime_curves() -> CurveTable:
    table = load_coddl_curves()
    table.add_model(DEFAULT_CURVE, default_points())
    return table


def curve_for(table: CurveTable, model: str) -> str:
    """The curve a job with this model name is planned with."""
    return model if model in table.index else DEFAULT_CURVE
