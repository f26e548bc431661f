"""Throughput estimation: the public profile format, the estimator, calibration, correction and
the accuracy protocol. ``coddl estimate`` is the same API on the command line.

    from coddl import perf
    table = perf.read_profiles("my-cluster.csv")                  # validated; errors name file:line: field
    cal = perf.calibrate(table, cluster)                           # the cluster's fabric (+ the bundled prior)
    est = cal.estimator()
    job = perf.one_gpu_model(table.where(model="bert"), cal.prior)  # a job from its one-GPU rows
    p = est.rates(job, gpus, nodes, max_per_node, local_batch)     # steps/s with a 90% interval
    job = perf.correct(job, est, measured_rows)                    # after measuring it on a placement
"""

from importlib import import_module
from typing import Any

# name → submodule; resolved on first use so that importing a light module such as
# ``coddl.perf.curves`` does not pull in the estimator's machinery
_API = {
    "AppAccuracy": "accuracy", "evaluate_testbed": "accuracy", "leave_one_testbed_out": "accuracy",
    "Calibration": "calibrate", "calibrate": "calibrate", "default_prior": "calibrate", "fit_fabric": "calibrate",
    "job_steps": "calibrate", "learn_prior": "calibrate", "one_gpu_model": "calibrate",
    "OnlineCorrection": "correction", "correct": "correction",
    "Estimator": "estimator", "JobBatch": "estimator", "Placement": "estimator", "Prediction": "estimator",
    "Fabric": "fabric", "JobModel": "jobmodel", "Prior": "jobmodel", "Steps": "jobmodel",
    "ProfileError": "table", "ProfileTable": "table", "read_many": "table", "read_profiles": "table",
    "write_profiles": "table",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(import_module(f"coddl.perf.{_API[name]}"), name)
    raise AttributeError(f"module 'coddl.perf' has no attribute {name!r}")
