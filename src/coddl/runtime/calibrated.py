"""The live cluster with what a cluster spec knows about it (``coddl server start --cluster SPEC``).

The executor knows the nodes it can start workers on and their slots; an inspected (or hand-written)
spec knows each node's device type and memory and the links' bandwidth and latency, which the
scheduler's estimator prices placements with. The two must describe the same shape — the same number
of nodes with the same slots, in the executor's order — or the spec is about another cluster.
"""

from __future__ import annotations

from dataclasses import replace

from coddl.core.cluster import Cluster
from coddl.errors import ConfigError


def with_spec(live: Cluster, spec: Cluster, source: str) -> Cluster:
    """``live`` (names and cores as the executor has them) with ``spec``'s device types and links."""
    have, want = [n.gpus for n in live.nodes], [n.gpus for n in spec.nodes]
    if have != want:
        raise ConfigError(f"{source}: describes {len(want)} node(s) with {want} GPUs, but the executor's cluster has "
                          f"{len(have)} node(s) with {have} GPUs; re-run coddl cluster inspect on this cluster")
    nodes = tuple(replace(n, gpu_type=s.gpu_type, memory_gb=s.memory_gb) for n, s in zip(live.nodes, spec.nodes))
    return Cluster(nodes=nodes, gpu_types=dict(spec.gpu_types), links=spec.links)
