"""The topology- and heterogeneity-aware throughput estimator (ALGORITHMS.md §6).

CoDDL predicts how fast a job trains on any allocation from ONE GPU: the one-GPU run gives the
compute time as a function of the local batch and the bytes to all-reduce; a one-time inspection of
the cluster gives the link bandwidths and latencies (``calibrate.py``). An iteration is then

    compute   C = t1(local batch) / speed of the slowest (or, balanced, every) GPU type
    all-reduce S = ring or hierarchical all-reduce of the gradient bytes over the placement's links
    iteration T = (C^γ + S^γ)^(1/γ)

where γ ≥ 1 is the overlap factor (γ = 1: no overlap, T = C + S; γ → ∞: perfect overlap,
T = max(C, S)); this is the overlap form Pollux fits to its own measurements. Measured throughput
then corrects the estimate per job (``correction.py``).

Policies consume ``curve()`` (consolidated placements, k = 0…kmax); the placer and the simulator ask
``throughput()`` for concrete placements. Both are cached because the simulator asks again at every
placement change and the answer depends only on (profile, placement shape).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

import numpy as np
from scipy.optimize import curve_fit, nnls

from coddl.core.cluster import Cluster, GpuType, LinkSpec

Algorithm = Literal["ring", "hierarchical"]


@dataclass(frozen=True, slots=True)
class ComputeModel:
    """Seconds of forward + backward + update on one GPU at local batch b: α + β·b^γ.

    The power term is there because small batches under-occupy the GPU (sub-linear growth) and an
    affine fit misses that; γ = 1 is the affine model.
    """

    alpha: float
    beta: float
    gamma: float = 1.0

    def seconds(self, local_bsz: float | np.ndarray) -> float | np.ndarray:
        return self.alpha + self.beta * np.power(local_bsz, self.gamma)

    @staticmethod
    def fit(local_bsz: np.ndarray | list[float], seconds: np.ndarray | list[float]) -> "ComputeModel":
        """Least relative error fit to one-GPU measurements (affine when fewer than three batch
        sizes were measured, constant for one)."""
        b = np.asarray(local_bsz, dtype=float)
        t = np.asarray(seconds, dtype=float)
        distinct = len(np.unique(b))
        if distinct == 0:
            raise ValueError("a compute model needs at least one one-GPU measurement")
        if distinct == 1:
            return ComputeModel(float(t.mean()), 0.0)
        (a, c), _ = nnls(np.c_[np.ones_like(b), b] / t[:, None], np.ones_like(t))
        affine = ComputeModel(float(a), float(c))
        if distinct == 2:
            return affine
        (a, c, g), _ = curve_fit(lambda x, a, c, g: a + c * x**g, b, t, sigma=t, maxfev=20000,
                                 p0=[affine.alpha, max(affine.beta, 1e-9), 1.0],
                                 bounds=([0.0, 0.0, 0.3], [np.inf, np.inf, 2.0]))
        return ComputeModel(float(a), float(c), float(g))


@dataclass(frozen=True, slots=True)
class JobProfile:
    """What the one-GPU inspection of a job yields; immutable and hashable (a cache key).

    ``batch_size`` is the global batch split over the GPUs (CoDDL's curves are measured at a fixed
    global batch) unless ``per_gpu_batch``, where every GPU processes ``batch_size`` samples (weak
    scaling, as in Pollux's tables). ``type_speed`` holds measured compute speeds of other GPU types
    relative to ``gpu_type`` for this model (e.g. from Gavel); types not listed fall back to the
    ratio of the cluster's ``GpuType.speed``. ``cpu_speed`` is optional (cores per GPU, relative
    speed) points, e.g. from Synergy's CPU-sensitivity table; empty means CPU-insensitive.
    """

    name: str
    compute: ComputeModel
    param_bytes: float
    batch_size: float
    per_gpu_batch: bool = False
    gpu_type: str = "V100"
    type_speed: tuple[tuple[str, float], ...] = ()
    cpu_speed: tuple[tuple[float, float], ...] = ()

    def speed_on(self, gpu_type: str, gpu_types: Mapping[str, GpuType]) -> float:
        for t, s in self.type_speed:
            if t == gpu_type:
                return s
        if gpu_type == self.gpu_type:
            return 1.0
        ref = gpu_types.get(self.gpu_type, GpuType(self.gpu_type)).speed
        return gpu_types.get(gpu_type, GpuType(gpu_type)).speed / ref

    def cpu_factor(self, cores_per_gpu: float) -> float:
        if not self.cpu_speed:
            return 1.0
        cores, speed = zip(*sorted(self.cpu_speed))
        return float(np.interp(cores_per_gpu, cores, speed))


@dataclass(frozen=True, slots=True)
class Placement:
    """How many GPUs of which type a job holds on each node (order-free: stored sorted), and
    optionally the CPU cores it was given."""

    gpus_per_node: tuple[int, ...]
    gpu_types: tuple[str, ...]
    cpus: int | None = None

    def __post_init__(self) -> None:
        if len(self.gpus_per_node) != len(self.gpu_types):
            raise ValueError(f"placement: {len(self.gpus_per_node)} node GPU counts but "
                             f"{len(self.gpu_types)} GPU types")
        if any(g < 1 for g in self.gpus_per_node):
            raise ValueError(f"placement: every node needs at least one GPU, got {self.gpus_per_node}")
        if self.cpus is not None and self.cpus < 1:
            raise ValueError(f"placement: cpus must be positive, got {self.cpus}")
        nodes = sorted(zip(self.gpus_per_node, self.gpu_types), key=lambda n: (-n[0], n[1]))
        object.__setattr__(self, "gpus_per_node", tuple(g for g, _ in nodes))
        object.__setattr__(self, "gpu_types", tuple(t for _, t in nodes))

    @staticmethod
    def on(gpus_per_node: tuple[int, ...] | list[int], gpu_type: str = "V100",
           cpus: int | None = None) -> "Placement":
        """All nodes of one GPU type, e.g. ``Placement.on((2, 1))``: 3 GPUs on 2 nodes."""
        return Placement(tuple(gpus_per_node), (gpu_type,) * len(gpus_per_node), cpus)

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
class IterationTime:
    compute: float
    communication: float
    seconds: float

    @property
    def iterations_per_s(self) -> float:
        return 1.0 / self.seconds if self.seconds > 0 else 0.0


def allreduce_seconds(nbytes: float, num_gpus: np.ndarray, num_nodes: np.ndarray, max_per_node: np.ndarray,
                      links: LinkSpec, algorithm: Algorithm = "ring", bucket_bytes: float = 25e6) -> np.ndarray:
    """All-reduce time of ``nbytes`` of gradients, vectorised over placement shapes.

    The framework all-reduces in buckets (PyTorch DDP: 25 MB), and each bucket pays the per-step
    latency of the algorithm. Ring: 2(k−1) steps each moving bytes/k; one slow hop paces the ring, so
    any ring that leaves a node runs at the inter-node bandwidth. Hierarchical (2-D): reduce-scatter
    and all-gather inside each node over 2(g−1) steps, and between them every GPU all-reduces its
    1/g shard across the n nodes; the g shards share the node's NIC, so that phase moves
    2(n−1)/n · bytes through it. g is the fullest node's count, and n the node count. Because spreading
    shrinks the intra-node phase, the 2-D form can favour spread placements unless the intra-node
    links are much better than the inter-node ones; the ring never does (given intra ≥ inter).
    Switches are not modelled: all inter-node traffic sees one bandwidth and latency. A job on exactly
    two nodes pays ``links.two_node_factor`` × that time (a calibrated property of the fabric).
    """
    k = np.asarray(num_gpus, dtype=float)
    n = np.asarray(num_nodes, dtype=float)
    g = np.asarray(max_per_node, dtype=float)
    buckets = max(1.0, float(np.ceil(nbytes / bucket_bytes)))
    bw_intra, bw_inter = links.intra_node_gbps * 1e9, links.inter_node_gbps * 1e9
    lat_intra, lat_inter = links.intra_node_latency_us * 1e-6, links.inter_node_latency_us * 1e-6
    if algorithm == "ring":
        one_node = n <= 1
        steps = 2.0 * (k - 1.0)
        t = (steps / np.maximum(k, 1.0) * nbytes / np.where(one_node, bw_intra, bw_inter)
             + steps * buckets * np.where(one_node, lat_intra, lat_inter))
    elif algorithm == "hierarchical":
        gs, ns = 2.0 * (g - 1.0), 2.0 * (n - 1.0)
        t = (gs / np.maximum(g, 1.0) * nbytes / bw_intra + gs * buckets * lat_intra
             + ns / np.maximum(n, 1.0) * nbytes / bw_inter + ns * buckets * lat_inter)
    else:
        raise ValueError(f"unknown all-reduce algorithm {algorithm!r}; use 'ring' or 'hierarchical'")
    t = np.where(n == 2, t * links.two_node_factor, t)
    return np.where(k > 1, t, 0.0)


def overlapped(compute: np.ndarray, comm: np.ndarray, overlap: float) -> np.ndarray:
    """(C^γ + S^γ)^(1/γ), computed as max·(1 + (min/max)^γ)^(1/γ) so large γ cannot overflow."""
    c, s = np.asarray(compute, dtype=float), np.asarray(comm, dtype=float)
    hi, lo = np.maximum(c, s), np.minimum(c, s)
    ratio = np.divide(lo, hi, out=np.zeros_like(hi), where=hi > 0)
    return hi * (1.0 + ratio**overlap) ** (1.0 / overlap)


@dataclass(frozen=True)
class ThroughputModel:
    """Iterations/s of a job on a placement, from its one-GPU profile and the cluster's links.

    ``balance``: a job whose GPUs differ in speed either gives every GPU the same local batch (all
    wait for the slowest) or, CoDDL's dynamic load balancing, splits the global batch in proportion
    to speed. ``overlap`` defaults to γ as calibrated on Pollux's measurements (1.68), ``bucket_mb``
    to PyTorch DDP's bucket size. The cache is unbounded: it holds one entry per (profile, placement
    shape) and per curve asked for, which a simulation keeps small.
    """

    links: LinkSpec = field(default_factory=LinkSpec)
    gpu_types: Mapping[str, GpuType] = field(default_factory=dict)
    algorithm: Algorithm = "ring"
    overlap: float = 1.7
    bucket_mb: float = 25.0
    balance: bool = True
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.overlap < 1.0:
            raise ValueError(f"overlap factor γ must be ≥ 1 (1 = no overlap), got {self.overlap}")
        if self.algorithm not in ("ring", "hierarchical"):
            raise ValueError(f"unknown all-reduce algorithm {self.algorithm!r}; use 'ring' or 'hierarchical'")

    @staticmethod
    def for_cluster(cluster: Cluster, **kwargs) -> "ThroughputModel":
        return ThroughputModel(links=cluster.links, gpu_types=dict(cluster.gpu_types), **kwargs)

    # ---- one placement ----
    def iteration(self, profile: JobProfile, placement: Placement) -> IterationTime:
        key = (profile, placement)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._iteration(profile, placement)
        return hit

    def throughput(self, profile: JobProfile, placement: Placement) -> float:
        """Iterations/s."""
        return self.iteration(profile, placement).iterations_per_s

    def samples_per_s(self, profile: JobProfile, placement: Placement) -> float:
        return self.throughput(profile, placement) * self._global_batch(profile, placement.num_gpus)

    def _iteration(self, profile: JobProfile, placement: Placement) -> IterationTime:
        k = placement.num_gpus
        speeds = np.repeat([profile.speed_on(t, self.gpu_types) for t in placement.gpu_types],
                           placement.gpus_per_node)
        batch = self._global_batch(profile, k)
        if self.balance:
            compute = float(np.max(profile.compute.seconds(batch * speeds / speeds.sum()) / speeds))
        else:
            compute = float(profile.compute.seconds(batch / k) / speeds.min())
        if placement.cpus is not None:
            compute /= profile.cpu_factor(placement.cpus / k)
        comm = float(self._comm(profile.param_bytes, np.array([k]), np.array([placement.num_nodes]),
                                np.array([placement.max_per_node]))[0])
        return IterationTime(compute, comm, float(overlapped(compute, comm, self.overlap)))

    @staticmethod
    def _global_batch(profile: JobProfile, k: int) -> float:
        return profile.batch_size * k if profile.per_gpu_batch else profile.batch_size

    # ---- vectorised paths ----
    def seconds_per_iteration(self, profile: JobProfile, local_bsz: np.ndarray | float, num_gpus: np.ndarray,
                              num_nodes: np.ndarray, max_per_node: np.ndarray, speed: float = 1.0) -> np.ndarray:
        """Iteration times of many placements on GPUs of relative ``speed`` at the given local
        batches (curves, calibration and accuracy checks evaluate thousands of shapes at once)."""
        compute = profile.compute.seconds(np.asarray(local_bsz, dtype=float)) / speed
        return overlapped(compute, self._comm(profile.param_bytes, num_gpus, num_nodes, max_per_node), self.overlap)

    def curve(self, profile: JobProfile, kmax: int, gpus_per_node: int, gpu_type: str | None = None) -> np.ndarray:
        """Iterations/s on consolidated placements of k = 0…kmax GPUs of one type (P(0) = 0): full
        nodes of ``gpus_per_node`` plus one partial node. This is what policies consume."""
        key = ("curve", profile, kmax, gpus_per_node, gpu_type)
        hit = self._cache.get(key)
        if hit is None:
            k = np.arange(1, kmax + 1)
            local = profile.batch_size if profile.per_gpu_batch else profile.batch_size / k
            t = self.seconds_per_iteration(profile, local, k, -(-k // gpus_per_node), np.minimum(k, gpus_per_node),
                                           profile.speed_on(gpu_type or profile.gpu_type, self.gpu_types))
            hit = np.r_[0.0, 1.0 / t]
            hit.setflags(write=False)
            self._cache[key] = hit
        return hit

    def communication_seconds(self, profile: JobProfile, num_gpus: np.ndarray, num_nodes: np.ndarray,
                              max_per_node: np.ndarray) -> np.ndarray:
        """The all-reduce time of ``profile``'s gradients on many placement shapes (before overlap)."""
        return self._comm(profile.param_bytes, num_gpus, num_nodes, max_per_node)

    def _comm(self, nbytes: float, k: np.ndarray, n: np.ndarray, g: np.ndarray) -> np.ndarray:
        return allreduce_seconds(nbytes, k, n, g, self.links, self.algorithm, self.bucket_mb * 1e6)
