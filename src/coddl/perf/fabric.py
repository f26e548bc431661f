"""What a cluster's network costs a data-parallel job: the per-cluster half of the estimator.

An all-reduce of M bytes over a placement of k GPUs on n nodes (at most g on one node) is priced
with two link levels — inside a node (NVLink/PCIe, or loopback for CPU workers) and between nodes
(the NIC) — each with a bandwidth B and a per-step latency L, and with the collective algorithm the
cluster's communication library uses:

``ring``          one ring through all k GPUs: 2(k−1) steps, each moving M/k bytes over the slowest
                  link on the ring (any ring that leaves a node runs at the inter-node bandwidth):
                  2(k−1)/k · M/B + 2(k−1) · L.
``hierarchical``  reduce-scatter inside each node, an all-reduce of each 1/g shard between nodes
                  (the node's g shards share its NIC, so it carries 2(n−1)/n · M), all-gather inside
                  the node: 2(g−1)/g · M/B_intra + 2(g−1) L_intra + 2(n−1)/n · M/B_inter + 2(n−1) L_inter.
``tree``          as hierarchical inside nodes; between nodes a pipelined binary tree (reduce up,
                  broadcast down) whose NIC carries ~M each way with full-duplex links, and whose
                  depth adds latency: 2(g−1)/g · M/B_intra + 2(g−1) L_intra + M/B_inter + 2⌈log2 n⌉ L_inter.
``auto``          the cheapest of the three for each message and placement — what NCCL's tuner
                  does — so a 2-node job can run rings while larger ones run trees.

Every step pays the latency once per gradient bucket (frameworks all-reduce gradients in buckets,
PyTorch DDP 25 MB), so many small messages cost more than one large one of the same bytes.

The fabric holds only what is the same for every job on the cluster. How well a particular job
uses it — its effective communication efficiency and how much of its all-reduce hides under
backward compute — is per job (``perf/jobmodel.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from coddl.core.cluster import LinkSpec

Algorithm = Literal["ring", "hierarchical", "tree", "auto"]
ALGORITHMS: tuple[str, ...] = ("ring", "hierarchical", "tree", "auto")


@dataclass(frozen=True, slots=True)
class Fabric:
    """Link bandwidths (GB/s) and per-step latencies (µs) of the two levels, the collective
    algorithm and the gradient bucket size (MB)."""

    intra_gbps: float = 100.0
    inter_gbps: float = 12.5
    intra_latency_us: float = 5.0
    inter_latency_us: float = 20.0
    algorithm: Algorithm = "ring"
    bucket_mb: float = 25.0
    two_node_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"unknown all-reduce algorithm {self.algorithm!r}; use one of {', '.join(ALGORITHMS)}")
        for name in ("intra_gbps", "inter_gbps", "bucket_mb", "two_node_factor"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"fabric: {name} must be a positive number, got {v}")
        for name in ("intra_latency_us", "inter_latency_us"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ValueError(f"fabric: {name} must be a non-negative number, got {v}")

    @staticmethod
    def of(links: LinkSpec, algorithm: Algorithm = "ring", bucket_mb: float = 25.0) -> "Fabric":
        return Fabric(links.intra_node_gbps, links.inter_node_gbps, links.intra_node_latency_us,
                      links.inter_node_latency_us, algorithm, bucket_mb, links.two_node_factor)

    def links(self) -> LinkSpec:
        return LinkSpec(self.intra_gbps, self.inter_gbps, self.intra_latency_us, self.inter_latency_us,
                        self.two_node_factor)

    @property
    def weights(self) -> np.ndarray:
        """(1/B_intra, 1/B_inter, L_intra, L_inter) in s/byte and s/step: every algorithm's time is
        linear in these, ``terms(...) @ weights`` (which is what makes calibration a fast fit)."""
        return np.array([1e-9 / self.intra_gbps, 1e-9 / self.inter_gbps, 1e-6 * self.intra_latency_us,
                         1e-6 * self.inter_latency_us])

    def allreduce_seconds(self, nbytes: np.ndarray | float, gpus: np.ndarray | int, nodes: np.ndarray | int,
                          max_per_node: np.ndarray | int, share: np.ndarray | float = 1.0) -> np.ndarray:
        """Seconds to all-reduce ``nbytes`` on each placement shape (broadcasting arrays); 0 on
        one GPU. ``share``: the share of a device each worker has (see ``terms``)."""
        return self.terms(nbytes, gpus, nodes, max_per_node, share) @ self.weights * self.node_factor(nodes)

    def node_factor(self, nodes: np.ndarray | int) -> np.ndarray:
        """× ``two_node_factor`` where a job spans exactly two nodes: libraries pick a different
        algorithm there (rings, where more nodes get trees), which the calibration measures."""
        return np.where(np.atleast_1d(np.asarray(nodes)) == 2, self.two_node_factor, 1.0)

    def terms(self, nbytes: np.ndarray | float, gpus: np.ndarray | int, nodes: np.ndarray | int,
              max_per_node: np.ndarray | int, share: np.ndarray | float = 1.0) -> np.ndarray:
        """(N, 4): bytes over each link level and latency steps on each, per placement, for this
        fabric's algorithm (``auto``: the cheapest algorithm of each row under these weights).

        Workers with ``share`` < 1 of a device (CPU workers time-sharing a core) do the copies and
        reductions inside a node on that share, so the intra-node terms grow by 1/share; what
        crosses the NIC does not."""
        m, k, n, g, sh = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, dtype=float))
                                               for a in (nbytes, gpus, nodes, max_per_node, share)))
        nb = np.maximum(1.0, np.ceil(m / (self.bucket_mb * 1e6)))
        scale = np.stack([1.0 / sh, np.ones_like(sh), 1.0 / sh, np.ones_like(sh)], axis=-1)
        if self.algorithm != "auto":
            x = _TERMS[self.algorithm](m, k, n, g, nb) * scale
        else:
            options = np.stack([_TERMS[a](m, k, n, g, nb) for a in ("ring", "hierarchical", "tree")]) * scale
            best = np.argmin(options @ self.weights, axis=0)
            x = np.take_along_axis(options, best[None, :, None], axis=0)[0]
        return np.where((k > 1)[:, None], x, 0.0)


def _ring(m: np.ndarray, k: np.ndarray, n: np.ndarray, g: np.ndarray, nb: np.ndarray) -> np.ndarray:
    steps = 2.0 * (k - 1.0)
    vol = steps / np.maximum(k, 1.0) * m
    across = n > 1
    z = np.zeros_like(m)
    return np.stack([np.where(across, z, vol), np.where(across, vol, z),
                     np.where(across, z, steps * nb), np.where(across, steps * nb, z)], axis=-1)


def _intra(m: np.ndarray, g: np.ndarray, nb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    steps = 2.0 * (g - 1.0)
    return steps / np.maximum(g, 1.0) * m, steps * nb


def _hierarchical(m: np.ndarray, k: np.ndarray, n: np.ndarray, g: np.ndarray, nb: np.ndarray) -> np.ndarray:
    vol, steps = _intra(m, g, nb)
    inter_steps = 2.0 * (n - 1.0)
    return np.stack([vol, inter_steps / np.maximum(n, 1.0) * m, steps, inter_steps * nb], axis=-1)


def _tree(m: np.ndarray, k: np.ndarray, n: np.ndarray, g: np.ndarray, nb: np.ndarray) -> np.ndarray:
    vol, steps = _intra(m, g, nb)
    depth = np.ceil(np.log2(np.maximum(n, 1.0)))
    across = n > 1
    return np.stack([vol, np.where(across, m, 0.0), steps, np.where(across, 2.0 * depth * nb, 0.0)], axis=-1)


_TERMS = {"ring": _ring, "hierarchical": _hierarchical, "tree": _tree}
