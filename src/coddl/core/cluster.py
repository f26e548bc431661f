"""Cluster topology: GPU types, nodes, switches and link bandwidths.

A GPU is addressed by a global index 0..G-1; nodes own contiguous index ranges, so an allocation is
just a set of GPU indices and the node of a GPU is a table lookup (fast for the simulator, concrete
for the real executors, which map an index to a device or a slot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

# Sizes past any real cluster, so that a mistyped count (a spec's nodes, a --gpus flag) is an error
# rather than a cluster that exhausts memory being built: 64× the largest the benchmarks simulate.
MAX_GPUS = 2**20
MAX_GPUS_PER_NODE = 2**16
MAX_CPUS_PER_NODE = 2**16


@dataclass(frozen=True, slots=True)
class GpuType:
    """A GPU model. ``speed`` is a default relative compute speed (V100 = 1.0) used when no
    per-model profile for this type exists."""

    name: str
    memory_gb: float = 16.0
    speed: float = 1.0


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """Bandwidths in GB/s and latencies in microseconds of the two link levels."""

    intra_node_gbps: float = 100.0  # NVLink / PCIe class
    inter_node_gbps: float = 12.5  # 100 Gb/s Ethernet / InfiniBand class
    intra_node_latency_us: float = 5.0
    inter_node_latency_us: float = 20.0
    # All-reduce time × this when a job spans exactly two nodes. 1 = no effect; calibration finds it
    # where the fabric treats a two-node ring differently (Pollux's T4 testbed: ~1.5×, in every app).
    two_node_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    gpus: int
    gpu_type: str = "V100"
    cpus: int = 32
    memory_gb: float = 256.0
    switch: str = "switch0"


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]
    gpu_types: dict[str, GpuType] = field(default_factory=lambda: {"V100": GpuType("V100")})
    links: LinkSpec = field(default_factory=LinkSpec)

    @staticmethod
    def homogeneous(num_nodes: int, gpus_per_node: int, gpu_type: str = "V100", cpus_per_node: int = 32,
                    memory_gb: float = 256.0, nodes_per_switch: int | None = None,
                    links: LinkSpec | None = None) -> "Cluster":
        if num_nodes < 1 or gpus_per_node < 1:
            raise ValueError("a cluster needs at least one node with at least one GPU")
        per_switch = nodes_per_switch or num_nodes
        nodes = tuple(
            Node(name=f"n{i}", gpus=gpus_per_node, gpu_type=gpu_type, cpus=cpus_per_node,
                 memory_gb=memory_gb, switch=f"switch{i // per_switch}")
            for i in range(num_nodes)
        )
        return Cluster(nodes=nodes, gpu_types={gpu_type: GpuType(gpu_type)}, links=links or LinkSpec())

    @staticmethod
    def for_gpus(total_gpus: int, gpus_per_node: int = 8) -> "Cluster":
        """``--gpus N`` on the command line: N GPUs in nodes of ``gpus_per_node`` (last node smaller)."""
        if total_gpus < 1:
            raise ValueError(f"a cluster needs at least one GPU, got {total_gpus}")
        full, rest = divmod(total_gpus, gpus_per_node)
        sizes = [gpus_per_node] * full + ([rest] if rest else [])
        nodes = tuple(Node(name=f"n{i}", gpus=g) for i, g in enumerate(sizes))
        return Cluster(nodes=nodes)

    # ---- derived tables (computed once; the cluster is immutable) ----
    @cached_property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @cached_property
    def total_cpus(self) -> int:
        return sum(n.cpus for n in self.nodes)

    @cached_property
    def type_names(self) -> tuple[str, ...]:
        """GPU types present, in first-seen order; index t in shares refers to this tuple."""
        seen: dict[str, None] = {}
        for n in self.nodes:
            seen.setdefault(n.gpu_type, None)
        return tuple(seen)

    @cached_property
    def capacity_by_type(self) -> dict[str, int]:
        cap = {t: 0 for t in self.type_names}
        for n in self.nodes:
            cap[n.gpu_type] += n.gpus
        return cap

    @cached_property
    def node_of_gpu(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.nodes)), [n.gpus for n in self.nodes])

    @cached_property
    def node_first_gpu(self) -> np.ndarray:
        sizes = np.array([n.gpus for n in self.nodes])
        return np.concatenate([[0], np.cumsum(sizes)[:-1]])

    @cached_property
    def node_of_core(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.nodes)), [n.cpus for n in self.nodes])

    @cached_property
    def node_first_core(self) -> np.ndarray:
        """Global CPU-core indices are laid out like GPU indices: node i owns a contiguous range,
        and core c of a node is that node's OS core c (what the runtime pins workers to)."""
        sizes = np.array([n.cpus for n in self.nodes])
        return np.concatenate([[0], np.cumsum(sizes)[:-1]])

    @cached_property
    def cores_per_gpu(self) -> np.ndarray:
        """The GPU-proportional core share of each node (cores ÷ GPUs, rounded down)."""
        return np.array([n.cpus // n.gpus if n.gpus else 0 for n in self.nodes], dtype=np.int64)

    @cached_property
    def node_type_index(self) -> np.ndarray:
        idx = {t: i for i, t in enumerate(self.type_names)}
        return np.array([idx[n.gpu_type] for n in self.nodes])

    @cached_property
    def node_switch_index(self) -> np.ndarray:
        names: dict[str, int] = {}
        return np.array([names.setdefault(n.switch, len(names)) for n in self.nodes])

    def gpu_type_of(self, name: str) -> GpuType:
        return self.gpu_types.get(name) or GpuType(name)
