"""Regression: a job whose cores fit on too few nodes still gets its GPUs (found by AITurbo)."""

from __future__ import annotations

from coddl.core.cluster import Cluster, Node
from coddl.placement.placer import ConsolidatingPlacer, Request


def test_grow_falls_back_to_nodes_without_free_cores():
    placer = ConsolidatingPlacer(Cluster(nodes=(Node("n0", 4, cpus=8), Node("n1", 4, cpus=8))))
    held = placer.place({}, [Request("a", 2, cpus=8)])  # all of one node's cores
    held |= placer.place({}, [Request("b", 2, cpus=2)])  # lands on the other node
    a_node = placer.cluster.node_of_gpu[held["a"].gpus[0]]
    assert placer.cluster.node_of_gpu[held["b"].gpus[0]] != a_node
    current = {j: p.gpus for j, p in held.items()}
    cores = {j: p.cores for j, p in held.items()}
    c = placer.place(current, [Request("c", 4, cpus=4)], cores)["c"]
    assert len(c.gpus) == 4  # 2 free GPUs on each node, though only one node has free cores
    assert not set(c.gpus) & (set(held["a"].gpus) | set(held["b"].gpus))
    assert len(c.cores) <= 4 and not set(c.cores) & (set(held["a"].cores) | set(held["b"].cores))
