"""CoDDL's one-time "offline system inspection": fit the cluster's link parameters once, from the
multi-GPU measurements of ONE job, so that every later job needs only its own one-GPU profile.

What is fitted is cluster-wide: inter-node bandwidth and per-step latency, intra-node bandwidth and
latency (kept no worse than inter-node: the fit may not explain a slow node with a fast network), the
slowdown of two-node all-reduces, and the compute/communication overlap factor γ. The job used for it
contributes its one-GPU compute model and its parameter bytes exactly like any other job would.

The fit explains the job's step times and, where the runs recorded it, the time each step spent in
the all-reduce (Pollux's ``sync_time``): the step times alone cannot tell slow links that overlap
little from fast links that overlap much, and the other jobs inherit exactly that split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy.optimize import least_squares

from coddl.core.cluster import GpuType, LinkSpec
from coddl.perf.estimator import Algorithm, ComputeModel, JobProfile, ThroughputModel
from coddl.perf.profiles import POLLUX_GPU, PolluxApp, PolluxRow


@dataclass(frozen=True, slots=True)
class RowArrays:
    """Measured rows as arrays, the shape the vectorised estimator takes."""

    local_bsz: np.ndarray
    num_gpus: np.ndarray
    num_nodes: np.ndarray
    max_per_node: np.ndarray
    step_time: np.ndarray

    @staticmethod
    def of(rows: Sequence[PolluxRow]) -> "RowArrays":
        return RowArrays(np.array([r.local_bsz for r in rows], dtype=float),
                         np.array([r.num_gpus for r in rows]), np.array([r.num_nodes for r in rows]),
                         np.array([max(r.gpus_per_node) for r in rows]),
                         np.array([r.step_time for r in rows]))

    def predict(self, model: ThroughputModel, profile: JobProfile) -> np.ndarray:
        return model.seconds_per_iteration(profile, self.local_bsz, self.num_gpus, self.num_nodes,
                                           self.max_per_node)


def throughput_mape(predicted_seconds: np.ndarray, measured_seconds: np.ndarray) -> float:
    """Mean absolute percentage error of the predicted throughput (1/time), in percent."""
    return float(100.0 * np.mean(np.abs(np.asarray(measured_seconds) / np.asarray(predicted_seconds) - 1.0)))


def pollux_profile(app: PolluxApp, local_bsz: float = 1.0) -> JobProfile:
    """A job profile from the app's one-GPU rows only, as CoDDL's online inspection would build it
    (T4, per-GPU batch ``local_bsz``; the rows' own batches are passed to the vectorised path)."""
    one = app.single_gpu
    compute = ComputeModel.fit([r.local_bsz for r in one], [r.step_time for r in one])
    return JobProfile(app.name, compute, app.model.param_bytes, local_bsz, per_gpu_batch=True,
                      gpu_type=POLLUX_GPU)


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fitted link parameters, and how well they explain the calibration job's own rows."""

    app: str
    links: LinkSpec
    overlap: float
    algorithm: Algorithm
    bucket_mb: float
    rows: int
    mape: float

    def model(self, gpu_types: Mapping[str, GpuType] | None = None, balance: bool = True) -> ThroughputModel:
        return ThroughputModel(self.links, dict(gpu_types or {}), self.algorithm, self.overlap, self.bucket_mb,
                               balance)


def _model(x: np.ndarray, algorithm: Algorithm, bucket_mb: float) -> ThroughputModel:
    """x = (log inter GB/s, log intra/inter ≥ 0, intra/inter latency ∈ [0,1], log inter µs, γ,
    log two-node factor)."""
    inter, lat_inter = float(np.exp(x[0])), float(np.exp(x[3]))
    links = LinkSpec(intra_node_gbps=inter * float(np.exp(x[1])), inter_node_gbps=inter,
                     intra_node_latency_us=lat_inter * float(x[2]), inter_node_latency_us=lat_inter,
                     two_node_factor=float(np.exp(x[5])))
    return ThroughputModel(links, algorithm=algorithm, overlap=float(x[4]), bucket_mb=bucket_mb)


def calibrate_links(app: PolluxApp, algorithm: Algorithm = "ring", bucket_mb: float = 25.0,
                    initial: LinkSpec | None = None, use_sync: bool = True) -> Calibration:
    """Least squares in log time over all multi-GPU rows of ``app`` (relative errors, so a 0.02 s NCF
    step weighs as much as a 2 s BERT step): each row's step time and, with ``use_sync``, its
    measured all-reduce time against the model's communication time."""
    profile = pollux_profile(app)
    rows = RowArrays.of(app.multi_gpu)
    if len(rows.step_time) == 0:
        raise ValueError(f"{app.name}: no multi-GPU rows to calibrate the links from")
    sync = np.array([r.sync_time for r in app.multi_gpu])
    timed = (sync > 0) if use_sync else np.zeros(sync.size, dtype=bool)
    start = initial or LinkSpec()
    x0 = np.array([np.log(start.inter_node_gbps), np.log(max(1.0, start.intra_node_gbps / start.inter_node_gbps)),
                   min(1.0, start.intra_node_latency_us / start.inter_node_latency_us),
                   np.log(start.inter_node_latency_us), 2.0, np.log(start.two_node_factor)])
    lower = np.array([np.log(1e-3), 0.0, 0.0, np.log(0.1), 1.0, np.log(0.5)])
    upper = np.array([np.log(1e3), np.log(1e3), 1.0, np.log(1e5), 10.0, np.log(4.0)])

    def residuals(x: np.ndarray) -> np.ndarray:
        model = _model(x, algorithm, bucket_mb)
        step = np.log(rows.predict(model, profile) / rows.step_time)
        comm = model.communication_seconds(profile, rows.num_gpus[timed], rows.num_nodes[timed],
                                           rows.max_per_node[timed])
        return np.concatenate([step, np.log(comm / sync[timed])])

    fit = least_squares(residuals, np.clip(x0, lower, upper), bounds=(lower, upper))
    model = _model(fit.x, algorithm, bucket_mb)
    return Calibration(app.name, model.links, model.overlap, algorithm, bucket_mb, len(rows.step_time),
                       throughput_mape(rows.predict(model, profile), rows.step_time))
