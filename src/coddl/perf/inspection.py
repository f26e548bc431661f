"""A job's one-GPU profile from its own first steps (CoDDL's step 2: inspection of the job).

A job run with inspection times the forward and backward pass of its first steps at its local
batch b and at b/2, b/4 and b/16 (the same samples as micro-batches, see ``coddl.elastic.inspection``) and
the per-step cost outside them (flattening gradients, the optimizer's update). One GPU would take

    step(m) = median compute seconds at local batch m + median step overhead

for a step at local batch m, so each timed batch size becomes one one-GPU row of the profile
format (``perf/table.py``): a measured real job and a bundled table are the same kind of data,
and ``calibrate.one_gpu_model`` turns the rows into the estimator's job model exactly as it does
for a published profile. The gradient bytes the job all-reduces come from its model's parameters.
Later measured steps on more GPUs are rows of the same format too (``measured_row``), which the
estimator's own correction (``correction.correct``) folds into the job's belief.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from coddl.perf.table import ProfileTable

INSPECTION_CLUSTER = "inspection"  # the ``cluster`` column of rows a job measured itself


@dataclass(frozen=True, slots=True)
class Timings:
    """What the job measured on its own device: ``timings`` are (local batch, seconds of forward and
    backward) pairs; ``step_overhead_s`` the rest of one step on one device."""

    param_bytes: float
    timings: tuple[tuple[int, float], ...]
    step_overhead_s: float

    def per_batch(self) -> dict[int, float]:
        """Median compute seconds of each timed local batch (the median, as a busy host's slow
        steps measure other work)."""
        by: dict[int, list[float]] = {}
        for b, s in self.timings:
            by.setdefault(int(b), []).append(float(s))
        return {b: float(np.median(v)) for b, v in sorted(by.items())}


def profile_rows(timings: Timings, model: str, gpu_type: str) -> ProfileTable:
    """The job's one-GPU rows in the profile format, one per timed local batch."""
    if not timings.timings:
        raise ValueError(f"{model}: inspection timed no step")
    if not (timings.param_bytes >= 0 and np.isfinite(timings.param_bytes)):
        raise ValueError(f"{model}: param_bytes must be a finite count, got {timings.param_bytes}")
    overhead = max(0.0, float(timings.step_overhead_s))
    return ProfileTable.build([
        {"cluster": INSPECTION_CLUSTER, "model": model, "param_bytes": timings.param_bytes, "gpu_type": gpu_type,
         "gpus": 1, "local_batch": b, "steps_per_s": 1.0 / (seconds + overhead)}
        for b, seconds in timings.per_batch().items()
    ])


def measured_row(model: str, param_bytes: float, gpu_type: str, placement: Sequence[int], local_batch: float,
                 steps_per_s: float) -> dict[str, Any]:
    """One measured training step of the job on ``placement`` (GPUs per node), as a profile row."""
    return {"cluster": INSPECTION_CLUSTER, "model": model, "param_bytes": param_bytes, "gpu_type": gpu_type,
            "gpus": int(sum(placement)), "placement": tuple(int(g) for g in placement), "local_batch": local_batch,
            "steps_per_s": steps_per_s}


def table_records(table: ProfileTable) -> list[dict[str, Any]]:
    """Rows as plain dicts of the profile format's columns (what the store keeps; ``ProfileTable.build``
    reads them back)."""
    return [{"cluster": table.cluster[i], "model": table.model[i], "param_bytes": float(table.param_bytes[i]),
             "gpu_type": table.gpu_type[i], "gpus": int(table.gpus[i]), "placement": list(table.placement[i]),
             "local_batch": float(table.local_batch[i]), "steps_per_s": float(table.steps_per_s[i])}
            for i in range(len(table))]
