"""Each GPU's block of its node's cores, as the placer hands it out when nobody assigns cores
(``ConsolidatingPlacer._cores_of``): a set of GPUs gets exactly the concatenation of its GPUs'
blocks, however it is computed (one run of cores for consecutive GPUs of one node, remembered
sets, the plain walk over the GPUs)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.core import Cluster
from coddl.core.cluster import Node
from coddl.placement.placer import ConsolidatingPlacer


def block(cluster: Cluster, gpus: tuple[int, ...]) -> tuple[int, ...]:
    """The reference: node n's local GPU i owns cores [first_core(n) + i·c, … + c), c = cores ÷ GPUs."""
    out = []
    firsts = [0]
    for n in cluster.nodes:
        firsts.append(firsts[-1] + n.cpus)
    gpu_first = [0]
    for n in cluster.nodes:
        gpu_first.append(gpu_first[-1] + n.gpus)
    for g in gpus:
        node = max(i for i in range(len(cluster.nodes)) if gpu_first[i] <= g)
        c = cluster.nodes[node].cpus // cluster.nodes[node].gpus
        base = firsts[node] + (g - gpu_first[node]) * c
        out.extend(range(base, base + c))
    return tuple(out)


@settings(max_examples=80, deadline=None)
@given(nodes=st.lists(st.tuples(st.integers(1, 8), st.integers(1, 40)), min_size=1, max_size=4),
       data=st.data())
def test_a_gpu_sets_cores_are_its_gpus_blocks_in_order(nodes, data) -> None:
    cluster = Cluster(nodes=tuple(Node(f"n{i}", gpus=g, cpus=max(c, g)) for i, (g, c) in enumerate(nodes)))
    placer = ConsolidatingPlacer(cluster)
    total = cluster.total_gpus
    for _ in range(3):  # the same sets again: what is remembered must still be right
        for gpus in data.draw(st.lists(st.sets(st.integers(0, total - 1), min_size=1), min_size=1, max_size=6)):
            ordered = tuple(sorted(gpus))
            assert placer._cores_of(ordered) == block(cluster, ordered)


def test_consecutive_gpus_across_a_node_boundary_take_each_nodes_own_cores() -> None:
    """GPUs 3 and 4 are consecutive numbers on two nodes of 4 GPUs and 32 cores: cores 24–31 of
    node 0 and 32–39 of node 1 — one run here only by coincidence; with 20 cores per node (5 each)
    they are 15–19 and 20–24, and node 0's cores 20 … do not exist."""
    placer = ConsolidatingPlacer(Cluster.for_gpus(8, 4))
    assert placer._cores_of((3, 4)) == tuple(range(24, 40))
    odd = Cluster(nodes=(Node("a", gpus=4, cpus=22), Node("b", gpus=4, cpus=20)))
    assert ConsolidatingPlacer(odd)._cores_of((3, 4)) == (15, 16, 17, 18, 19, 22, 23, 24, 25, 26)
    assert ConsolidatingPlacer(odd)._cores_of((1, 2)) == tuple(range(5, 15))
    assert placer._cores_of(()) == ()  # a suspended job holds no cores
