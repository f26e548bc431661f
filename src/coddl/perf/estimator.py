"""The topology- and heterogeneity-aware throughput estimator (ALGORITHMS.md §6).

CoDDL predicts how fast a job trains on any allocation from ONE GPU: the job's one-GPU inspection
gives its compute time as a function of the local batch and the bytes it all-reduces
(``jobmodel.JobModel``); a one-time inspection of the cluster gives the fabric — link bandwidths
and latencies per level and the collective algorithm (``fabric.Fabric``, ``calibrate.py``). An
``Estimator`` combines the two for any placement and returns a prediction with its uncertainty;
measured throughput then sharpens each job's belief (``JobModel.updated``, ``correction.py``).

Two paths: ``predict`` evaluates many (job, placement) pairs in one vectorised pass (the placer,
the policies and the accuracy protocol ask thousands at a time), and ``throughput`` answers one
placement that may mix GPU types (a job spanning types either waits for its slowest GPU or, with
``balance``, splits its batch in proportion to speed — CoDDL's dynamic load balancing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from coddl.core.cluster import Cluster, GpuType
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import NP, THETA_LOWER, THETA_UPPER, JobModel, overlapped, step_model

Z90 = 1.6448536269514722  # two-sided 90% interval of a normal


@dataclass(frozen=True, slots=True)
class Placement:
    """How many GPUs of which type a job holds on each node (order-free: stored largest first)."""

    gpus_per_node: tuple[int, ...]
    gpu_types: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.gpus_per_node) != len(self.gpu_types):
            raise ValueError(f"placement: {len(self.gpus_per_node)} node GPU counts but "
                             f"{len(self.gpu_types)} GPU types")
        if not self.gpus_per_node or any(g < 1 for g in self.gpus_per_node):
            raise ValueError(f"placement: every node needs at least one GPU, got {self.gpus_per_node}")
        nodes = sorted(zip(self.gpus_per_node, self.gpu_types), key=lambda n: (-n[0], n[1]))
        object.__setattr__(self, "gpus_per_node", tuple(g for g, _ in nodes))
        object.__setattr__(self, "gpu_types", tuple(t for _, t in nodes))

    @staticmethod
    def on(gpus_per_node: Sequence[int], gpu_type: str = "V100") -> "Placement":
        """All nodes of one GPU type, e.g. ``Placement.on((2, 1))``: 3 GPUs on 2 nodes."""
        return Placement(tuple(gpus_per_node), (gpu_type,) * len(gpus_per_node))

    @staticmethod
    def consolidated(k: int, gpus_per_node: int, gpu_type: str = "V100") -> "Placement":
        """k GPUs on as few nodes of ``gpus_per_node`` as possible (what the placer aims for)."""
        full, rest = divmod(k, gpus_per_node)
        return Placement.on((gpus_per_node,) * full + ((rest,) if rest else ()), gpu_type)

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus_per_node)

    @property
    def num_nodes(self) -> int:
        return len(self.gpus_per_node)

    @property
    def max_per_node(self) -> int:
        return self.gpus_per_node[0]


@dataclass(frozen=True, slots=True)
class Prediction:
    """Steps/s with a 90% interval; ``log_sd`` is the spread of log time (0 = certain):
    the interval's half-width in log space ÷ 1.645."""

    steps_per_s: np.ndarray
    low: np.ndarray
    high: np.ndarray
    log_sd: np.ndarray
    compute_s: np.ndarray
    comm_s: np.ndarray


@dataclass(frozen=True)
class JobBatch:
    """Several jobs' parameters as columns, so one query can cover thousands of (job, placement)
    pairs: ``predict(batch, index, ...)`` with ``index`` naming each pair's job."""

    t_ref: np.ndarray
    b_ref: np.ndarray
    param_bytes: np.ndarray
    theta: np.ndarray  # (J, NP)
    cov: np.ndarray  # (J, NP, NP)
    noise: np.ndarray
    t_floor: np.ndarray

    @staticmethod
    def of(jobs: Sequence[JobModel]) -> "JobBatch":
        return JobBatch(np.array([j.t_ref for j in jobs]), np.array([j.b_ref for j in jobs]),
                        np.array([j.param_bytes for j in jobs]), np.array([j.theta for j in jobs]).reshape(-1, NP),
                        np.array([j.cov for j in jobs]).reshape(-1, NP, NP), np.array([j.prior.noise for j in jobs]),
                        np.array([j.t_floor for j in jobs]))


@dataclass(frozen=True)
class Estimator:
    """A cluster's fabric and GPU types; predicts any job's throughput on any placement.

    ``type_speed`` gives per-(job name, GPU type) compute speeds relative to the type the job was
    profiled on (e.g. Gavel's measured ratios); otherwise the ratio of ``GpuType.speed``.
    """

    fabric: Fabric = field(default_factory=Fabric)
    gpu_types: Mapping[str, GpuType] = field(default_factory=dict)
    type_speed: Mapping[tuple[str, str], float] = field(default_factory=dict)
    balance: bool = True

    @staticmethod
    def for_cluster(cluster: Cluster, fabric: Fabric | None = None, **kwargs) -> "Estimator":
        return Estimator(fabric or Fabric.of(cluster.links), dict(cluster.gpu_types), **kwargs)

    def speed(self, job: JobModel, gpu_type: str) -> float:
        hit = self.type_speed.get((job.name, gpu_type))
        if hit is not None:
            return hit
        if not job.gpu_type or gpu_type == job.gpu_type:
            return 1.0
        ref = self.gpu_types.get(job.gpu_type, GpuType(job.gpu_type)).speed
        return self.gpu_types.get(gpu_type, GpuType(gpu_type)).speed / ref

    # ---- vectorised ----
    def predict(self, jobs: JobBatch, index: np.ndarray | int, gpus: np.ndarray, nodes: np.ndarray,
                max_per_node: np.ndarray, local_batch: np.ndarray, speed: np.ndarray | float = 1.0,
                uncertainty: bool = True, share: np.ndarray | float = 1.0) -> Prediction:
        """Steps/s of ``jobs[index]`` on each placement shape at each local batch (arrays of
        equal length; ``speed`` the GPUs' compute speed relative to the job's profiled type;
        ``share`` the share of a device each worker has, 1 for a GPU of its own)."""
        i = np.asarray(index)
        comm_base = self.fabric.allreduce_seconds(jobs.param_bytes[i], gpus, nodes, max_per_node, share)
        speed = np.asarray(speed, dtype=float) * share
        theta = jobs.theta[i]
        if not uncertainty:
            log_t, = step_model(jobs.t_ref[i], jobs.b_ref[i], local_batch, speed, comm_base, theta,
                                floor=jobs.t_floor[i])
            rate = np.exp(-log_t)
            z = np.zeros_like(rate)
            return Prediction(rate, rate, rate, z, z, z)
        log_t, g, c, s, _, _ = step_model(jobs.t_ref[i], jobs.b_ref[i], local_batch, speed, comm_base, theta,
                                          grad=True, floor=jobs.t_floor[i])
        # The parameters' part of the interval: log T at θ ± z·Σg/√(gᵀΣg), the points where the
        # linearised log T is ±z standard deviations, kept within the parameters' bounds. Far from
        # the profiled batch the model is far from linear in f, and this stays finite and honest
        # where a linear propagation would not.
        cov = jobs.cov[i]
        sg = np.einsum("nij,nj->ni", cov, g)
        lin_sd = np.sqrt(np.maximum(np.einsum("ni,ni->n", g, sg), 1e-300))
        shift = Z90 * sg / lin_sd[:, None]
        up, = step_model(jobs.t_ref[i], jobs.b_ref[i], local_batch, speed, comm_base,
                         np.clip(theta + shift, THETA_LOWER, THETA_UPPER), floor=jobs.t_floor[i])
        down, = step_model(jobs.t_ref[i], jobs.b_ref[i], local_batch, speed, comm_base,
                           np.clip(theta - shift, THETA_LOWER, THETA_UPPER), floor=jobs.t_floor[i])
        noise = Z90 * jobs.noise[i]
        slower = np.sqrt(np.maximum(up - log_t, 0.0) ** 2 + noise**2)
        faster = np.sqrt(np.maximum(log_t - down, 0.0) ** 2 + noise**2)
        rate = np.exp(-log_t)
        # exposed communication T − C is never negative; the difference of two huge, nearly equal
        # times can round below 0 (a local batch of 1e300 gave −4e284 s)
        return Prediction(rate, np.exp(-log_t - slower), np.exp(-log_t + faster), (slower + faster) / (2 * Z90), c,
                          np.maximum(np.exp(log_t) - c, 0.0))

    def rates(self, job: JobModel, gpus: np.ndarray, nodes: np.ndarray, max_per_node: np.ndarray,
              local_batch: np.ndarray, speed: np.ndarray | float = 1.0, uncertainty: bool = True,
              share: np.ndarray | float = 1.0) -> Prediction:
        """``predict`` for one job on many shapes."""
        n = np.asarray(gpus).shape
        return self.predict(JobBatch.of([job]), np.zeros(n, dtype=np.int64), np.asarray(gpus), np.asarray(nodes),
                            np.asarray(max_per_node), np.broadcast_to(np.asarray(local_batch, float), n), speed,
                            uncertainty, share)

    # ---- one placement (may mix types) ----
    def throughput(self, job: JobModel, placement: Placement, global_batch: float) -> float:
        """Steps/s of ``job`` on ``placement`` at ``global_batch`` samples per step."""
        k = placement.num_gpus
        speeds = np.repeat([self.speed(job, t) for t in placement.gpu_types], placement.gpus_per_node)
        comm = float(self.fabric.allreduce_seconds(job.param_bytes, k, placement.num_nodes, placement.max_per_node)[0])
        if self.balance and speeds.min() != speeds.max():
            local = global_batch * speeds / speeds.sum()  # CoDDL's load balancing: batch ∝ speed
            compute = float(np.max(job.compute_seconds(local) / speeds))
        else:  # every GPU the same local batch: all wait for the slowest
            compute = float(job.compute_seconds(global_batch / k)) / float(speeds.min())
        return 1.0 / float(overlapped(compute, job.comm_efficiency * comm, job.overlap))

    def curve(self, job: JobModel, kmax: int, gpus_per_node: int, global_batch: float | None = None,
              local_batch: float | None = None, speed: float = 1.0) -> np.ndarray:
        """Steps/s on consolidated placements of k = 0…kmax GPUs (P(0) = 0): full nodes of
        ``gpus_per_node`` plus one partial node. A fixed ``global_batch`` is split over the GPUs
        (strong scaling); a fixed ``local_batch`` is what every GPU processes (weak scaling)."""
        if (global_batch is None) == (local_batch is None):
            raise ValueError("curve: give exactly one of global_batch and local_batch")
        k = np.arange(1, kmax + 1)
        local = np.full(kmax, float(local_batch)) if local_batch is not None else float(global_batch) / k
        rate = self.rates(job, k, -(-k // gpus_per_node), np.minimum(k, gpus_per_node), local, speed,
                          uncertainty=False).steps_per_s
        out = np.r_[0.0, rate]
        out.setflags(write=False)
        return out
