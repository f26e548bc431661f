"""Hand-computed placements that pin ConsolidatingPlacer's rules one at a time (and, on one-type
clusters, the compiled kernels of ``placement/kernels.py``, run on the same cases).

Every expected placement below was worked out by hand from the rules of ``placement/placer.py``:
shrinks keep the nodes holding most of the job (ties: lower node, then lower GPU); a grow fills
the job's own nodes first (most free first, ties: lower node), then best fit (the fullest node
that holds the rest, ties: lower node) or, when none does, the emptiest node first; grows run
big first, typed before "any"; a node hands out its lowest-numbered free GPUs.
"""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.cluster import Cluster, GpuType, Node
from coddl.placement import kernels, placer as placer_module
from coddl.placement.placer import ConsolidatingPlacer, Placed, PlacementError, Request

BOTH = pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])


def make(c: Cluster, compiled: bool = True, **kw) -> ConsolidatingPlacer:
    p = ConsolidatingPlacer(c, **kw)
    p.compiled = compiled
    return p


def per_node(c: Cluster, gpus) -> list[int]:
    return np.bincount(c.node_of_gpu[np.asarray(gpus, dtype=np.int64)], minlength=len(c.nodes)).tolist()


# ---------------------------------------------------------------------------- the free maps
def test_the_pools_claim_release_and_take_the_lowest_free_gpus():
    c = Cluster(nodes=(Node("a", 2, cpus=4), Node("b", 3, cpus=6)))
    p = ConsolidatingPlacer(c)
    assert p.free.dtype == bool and p.free.tolist() == [True] * 5
    assert p.node_free.tolist() == [2, 3] and p.gpu.size.tolist() == [2, 3]
    assert p.core.node_free.tolist() == [4, 6]
    p.claim((1, 3))
    assert p.free.tolist() == [True, False, True, False, True]
    assert p.node_free.tolist() == [1, 2]
    with pytest.raises(PlacementError, match=r"^\[1, 3\] are not all free$"):
        p.claim((3, 1, 3))
    assert p.free.tolist() == [True, False, True, False, True] and p.node_free.tolist() == [1, 2]
    p.release((3,))
    assert p.free.tolist() == [True, False, True, True, True] and p.node_free.tolist() == [1, 3]
    p.release(())
    assert p.node_free.tolist() == [1, 3]
    assert p.gpu.take(1, 2) == [2, 3]  # node b's lowest free GPUs
    assert p.node_free.tolist() == [1, 1]
    assert p.gpu.take(1, 5) == [4]  # only what is free
    assert p.gpu.take(0, 1) == [0]  # GPU 1 is taken
    assert p.node_free.tolist() == [0, 0] and not p.free.any()
    assert p.gpu.size.tolist() == [2, 3]  # the sizes are not the free counts
    # without explicit cores, claim and release leave the cores alone
    p.release((0, 4), (0, 1))
    p.claim((0,), (0, 1, 2))
    assert p.core.free.all() and p.core.node_free.tolist() == [4, 6]
    assert p.node_free.tolist() == [0, 1]


def test_claim_and_release_book_cores_once_a_job_has_asked_for_cores():
    c = Cluster(nodes=(Node("a", 2, cpus=4), Node("b", 2, cpus=4)))
    p = ConsolidatingPlacer(c)
    assert p.pools_cores is False
    x = p.place({}, [Request("x", 1, cpus=3)])["x"]
    assert p.pools_cores
    assert x == Placed((0,), (0, 1, 2))
    p.claim((2,), (4, 5))
    assert p.core.free.tolist() == [False, False, False, True, False, False, True, True]
    assert p.core.node_free.tolist() == [1, 2]
    p.release((2,), (4,))
    assert p.core.free.tolist() == [False, False, False, True, True, False, True, True]
    assert p.core.node_free.tolist() == [1, 3] and p.node_free.tolist() == [1, 2]


@BOTH
def test_fragmentation_is_the_share_of_free_gpus_on_partly_used_nodes(compiled):
    c = Cluster.for_gpus(12, 4)
    p = make(c, compiled)
    assert p.fragmentation() == 0.0
    a = p.place({}, [Request("a", 1)])["a"].gpus
    assert a == (0,)
    assert p.fragmentation() == pytest.approx(3 / 11)
    b = p.place({"a": a}, [Request("b", 6)])["b"].gpus  # 3 + 4 + 4 free: node 1 whole, 2 of node 0
    assert b == (1, 2, 4, 5, 6, 7)
    assert p.fragmentation() == pytest.approx(1 / 5)
    p.place({"a": a, "b": b}, [Request("c", 5)])
    assert not p.free.any() and p.fragmentation() == 0.0
    q = make(c, compiled)
    q.claim((0, 4))  # two partly used nodes with 3 free each, one whole node
    assert q.fragmentation() == pytest.approx(6 / 10)


def test_one_type_clusters_take_the_compiled_path(monkeypatch):
    calls = []
    real = kernels.place

    def spy(*args):
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(kernels, "place", spy)
    c = Cluster.for_gpus(8, 4)
    p = ConsolidatingPlacer(c)
    assert p.compiled is True
    got = p.place({}, [Request("a", 2)])["a"]
    assert got == Placed((0, 1), tuple(range(16)))  # 32 cores per node: 8 per GPU
    assert len(calls) == 1
    ConsolidatingPlacer(c).place({}, [Request("a", 2, cpus=4)])  # explicit cores: the Python path
    assert len(calls) == 1
    p.place({"a": got.gpus}, [Request("b", 1, cpus=2)])
    p.place({"a": got.gpus}, [Request("a", 1)])  # the pool of cores stays: the Python path
    assert len(calls) == 1
    m = Cluster(nodes=(Node("v", 2, "V100"), Node("k", 2, "K80")))
    ConsolidatingPlacer(m).place({}, [Request("a", 1)])
    assert len(calls) == 1


def test_gpu_cores_and_proportional_blocks_follow_each_node_s_cores_per_gpu():
    c = Cluster(nodes=(Node("a", 4, cpus=8), Node("b", 3, cpus=12)))
    p = ConsolidatingPlacer(c)
    assert p.gpu_cores(0) == (0, 1)
    assert p.gpu_cores(2) == (4, 5)
    assert p.gpu_cores(4) == (8, 9, 10, 11)
    assert p.gpu_cores(6) == (16, 17, 18, 19)
    got = p.place({}, [Request("a", 5)])["a"]  # no node holds 5: node a's 4 first, then 1 of b
    assert got == Placed((0, 1, 2, 3, 4), (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11))
    plain = make(c, False)
    assert plain.place({}, [Request("a", 5)])["a"] == got


# ---------------------------------------------------------------------------- take_one, types
def test_take_one_is_best_fit_on_the_type_asked_or_the_type_with_most_free():
    c = Cluster.for_gpus(12, 4)
    p = ConsolidatingPlacer(c)
    p.claim((0, 1, 2, 4))  # free: 1, 3, 4
    assert p.take_one() == 3  # the fullest node with a free GPU
    assert p.take_one() == 5
    assert p.node_free.tolist() == [0, 2, 4]

    m = Cluster(nodes=(Node("v", 4, "V100"), Node("k0", 4, "K80"), Node("k1", 4, "K80")),
                gpu_types={"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)})
    q = ConsolidatingPlacer(m)
    assert q.free_by_type().tolist() == [4, 8] and q.free_by_type().dtype == np.int64  # counts
    assert q.take_one() == 4  # K80 has the most free; its nodes tie: the first
    assert q.take_one() == 5  # now the fullest K80 node
    assert q.take_one(0) == 0  # the type asked for, though K80 has more free
    assert q.free_by_type().tolist() == [3, 6]
    q.claim((1, 2, 3))
    with pytest.raises(PlacementError, match=r"^no free GPU left to share \(type 0\)$"):
        q.take_one(0)
    q.claim((6, 7, 8, 9, 10))
    assert q.free_by_type().tolist() == [0, 1]
    assert q.take_one() == 11
    with pytest.raises(PlacementError, match=r"type 0\)$"):  # no type has a free GPU
        q.take_one()


# ---------------------------------------------------------------------------- _shape
def test_shape_is_best_fit_or_the_emptiest_nodes_first():
    shape = ConsolidatingPlacer._shape
    free = np.array([3, 5, 2, 4])
    assert shape(free, 4) == [(3, 4)]  # nodes 1 and 3 hold it: the fuller one
    assert shape(free, 2) == [(2, 2)]
    assert shape(free, 3) == [(0, 3)]
    assert shape(free, 5) == [(1, 5)]
    assert shape(free, 7) == [(1, 5), (2, 2)]  # none holds 7: the emptiest, then best fit for 2
    assert shape(free, 11) == [(1, 5), (3, 4), (2, 2)]
    assert shape(free, 14) == [(1, 5), (3, 4), (0, 3), (2, 2)]
    assert free.tolist() == [3, 5, 2, 4]  # nothing is taken
    assert shape(np.array([2, 3, 2]), 2) == [(0, 2)]  # ties: the lower node
    assert shape(np.array([4, 4, 1]), 6) == [(0, 4), (1, 2)]
    assert shape(np.array([1, 4, 4, 1]), 9) == [(1, 4), (2, 4), (0, 1)]
    assert shape(np.array([0, 2, 1]), 1) == [(2, 1)]


@BOTH
def test_a_new_job_spans_the_emptiest_node_then_the_best_fit(compiled):
    c = Cluster.for_gpus(20, 5)
    p = make(c, compiled)
    p.claim((0, 1, 10, 11, 12, 15))  # free per node: 3, 5, 2, 4
    got = p.place({}, [Request("a", 7)])["a"].gpus
    assert got == (5, 6, 7, 8, 9, 13, 14)
    assert p.node_free.tolist() == [3, 0, 0, 4]
    got = p.place({}, [Request("b", 3)])["b"].gpus  # nodes 0 and 3 hold 3: the fuller node 0
    assert got == (2, 3, 4)
    got = p.place({}, [Request("c", 1)])["c"].gpus
    assert got == (16,)


# ---------------------------------------------------------------------------- shrinks
@BOTH
def test_a_shrink_keeps_the_node_holding_most_of_the_job(compiled):
    c = Cluster.for_gpus(12, 4)
    p = make(c, compiled)
    a = (0, 1, 4, 5, 6)  # 2 on node 0, 3 on node 1
    p.claim(a)
    got = p.place({"a": a}, [Request("a", 3)])["a"].gpus
    assert got == (4, 5, 6)
    assert p.free[[0, 1]].all() and p.node_free.tolist() == [4, 1, 4]
    p.claim((0, 1))
    got = p.place({"a": a}, [Request("a", 4)])["a"].gpus  # node 1's three, then node 0's lowest
    assert got == (0, 4, 5, 6)
    assert p.free.tolist()[:2] == [False, True] and p.node_free.tolist() == [3, 1, 4]


@BOTH
def test_a_shrink_between_equal_nodes_keeps_the_lower_node_and_the_lower_gpus(compiled):
    c = Cluster.for_gpus(12, 4)
    p = make(c, compiled)
    a = (2, 3, 8, 9)
    p.claim(a)
    assert p.place({"a": a}, [Request("a", 2)])["a"].gpus == (2, 3)
    assert p.node_free.tolist() == [2, 4, 4]
    b = (1, 3, 9, 10)
    p2 = make(c, compiled)
    p2.claim(b)
    assert p2.place({"b": b}, [Request("b", 3)])["b"].gpus == (1, 3, 9)
    assert p2.free.tolist() == [True, False, True, False] + [True] * 5 + [False, True, True]
    p3 = make(c, compiled)
    p3.claim((5, 6, 7))
    assert p3.place({"d": (5, 6, 7)}, [Request("d", 1)])["d"].gpus == (5,)
    assert p3.node_free.tolist() == [4, 3, 4]


@BOTH
def test_a_shrink_when_the_job_spans_two_nodes_keeps_its_bigger_share_even_on_a_later_node(compiled):
    # node 0 holds 1 of a's GPUs, node 2 holds 3: the count decides, not the node order
    c = Cluster.for_gpus(12, 4)
    p = make(c, compiled)
    a = (3, 8, 10, 11)
    p.claim(a)
    assert p.place({"a": a}, [Request("a", 2)])["a"].gpus == (8, 10)
    assert p.node_free.tolist() == [4, 4, 2]


@BOTH
def test_zero_gpus_releases_the_job_and_other_jobs_keep_theirs(compiled):
    c = Cluster.for_gpus(8, 4)
    p = make(c, compiled)
    placed = p.place({}, [Request("a", 3), Request("b", 2)])
    assert placed["a"].gpus == (0, 1, 2) and placed["b"].gpus == (4, 5)
    cur = {j: pl.gpus for j, pl in placed.items()}
    out = p.place(cur, [Request("a", 0)])
    assert out == {"a": Placed((), ())}
    assert p.free.tolist() == [True] * 4 + [False, False, True, True]
    out = p.place({"b": cur["b"]}, [Request("b", 0), Request("c", 8)])
    assert out["c"].gpus == tuple(range(8))


# ---------------------------------------------------------------------------- grows
@BOTH
def test_a_grow_fills_its_most_free_own_node_first(compiled):
    c = Cluster.for_gpus(12, 4)
    p = make(c, compiled)
    p.claim((1, 2))  # other jobs: node 0 has 1 free (GPU 3)
    a = (0, 4)  # node 1 has 3 free
    p.claim(a)
    got = p.place({"a": a}, [Request("a", 4)])["a"].gpus
    assert got == (0, 4, 5, 6)
    assert p.node_free.tolist() == [1, 1, 4]


@BOTH
def test_a_grow_between_equally_free_own_nodes_fills_the_lower_one(compiled):
    c = Cluster.for_gpus(12, 4)
    p = make(c, compiled)
    a = (0, 4)
    p.claim(a)
    got = p.place({"a": a}, [Request("a", 3)])["a"].gpus
    assert got == (0, 1, 4)
    got = p.place({"a": got}, [Request("a", 7)])["a"].gpus  # node 0: 2 free, node 1: 3 → node 1 first
    assert got == (0, 1, 2, 4, 5, 6, 7)
    assert p.node_free.tolist() == [1, 0, 4]


@BOTH
def test_a_grow_past_its_own_nodes_takes_the_best_fit_for_the_rest(compiled):
    c = Cluster.for_gpus(16, 4)
    p = make(c, compiled)
    p.claim((1, 2, 5, 6, 8, 9))  # free: 1, 1, 2, 4
    a = (0, 4)
    p.claim(a)
    got = p.place({"a": a}, [Request("a", 5)])["a"].gpus  # 3 and 7 on its nodes, then node 2
    assert got == (0, 3, 4, 7, 10)
    assert p.node_free.tolist() == [0, 0, 1, 4]
    got = p.place({"a": got}, [Request("a", 9)])["a"].gpus  # node 2's last, then node 3 holds 3
    assert got == (0, 3, 4, 7, 10, 11, 12, 13, 14)
    assert p.node_free.tolist() == [0, 0, 0, 1]


@BOTH
def test_a_grow_that_its_own_node_covers_takes_nothing_elsewhere(compiled):
    c = Cluster.for_gpus(8, 4)
    p = make(c, compiled)
    p.claim((4, 5, 6))  # node 1 has one free, the best fit for a single GPU
    a = (0,)
    p.claim(a)
    got = p.place({"a": a}, [Request("a", 2)])["a"].gpus
    assert got == (0, 1)
    got = p.place({"a": got}, [Request("a", 4)])["a"].gpus
    assert got == (0, 1, 2, 3) and p.node_free.tolist() == [0, 1]


@BOTH
def test_too_few_free_gpus_is_a_placement_error(compiled):
    c = Cluster.for_gpus(8, 4)
    p = make(c, compiled)
    a = p.place({}, [Request("a", 4)])["a"].gpus
    p.place({"a": a}, [Request("b", 4)])
    msg = r"^no free GPU left for the GPUs asked for$" if compiled else r"^no free GPU left for 1 GPUs \(type -1\)$"
    with pytest.raises(PlacementError, match=msg):
        p.place({}, [Request("c", 1)])
    p2 = make(c, compiled)
    p2.claim((0, 1, 2))
    with pytest.raises(PlacementError, match=r"^no free GPU left for"):
        p2.place({}, [Request("c", 6)])
    p3 = make(c, compiled)
    p3.claim((0, 1, 2))
    assert p3.place({}, [Request("c", 5)])["c"].gpus == (3, 4, 5, 6, 7)  # exactly what is free


@BOTH
def test_big_grows_are_placed_before_small_ones(compiled):
    c = Cluster.for_gpus(8, 4)
    p = make(c, compiled)
    p.claim((0,))  # free: 3, 4
    out = p.place({}, [Request("s", 1), Request("b", 3)])
    assert out["b"].gpus == (1, 2, 3)  # best fit, placed first
    assert out["s"].gpus == (4,)


@BOTH
def test_shrinks_free_their_gpus_before_the_grows_are_placed(compiled):
    c = Cluster.for_gpus(8, 4)
    p = make(c, compiled)
    a = (0, 1, 2, 3)
    b = (4, 5, 6, 7)
    p.claim(a + b)
    out = p.place({"a": a, "b": b}, [Request("b", 7), Request("a", 1)])
    assert out["a"].gpus == (0,)
    assert out["b"].gpus == (1, 2, 3, 4, 5, 6, 7)


def test_typed_grows_are_placed_before_any_type_ones():
    c = Cluster(nodes=(Node("v", 4, "V100"), Node("k", 4, "K80")),
                gpu_types={"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)})
    p = ConsolidatingPlacer(c)
    out = p.place({}, [Request("any", 3), Request("typed", 2, 0)])
    assert out["typed"].gpus == (0, 1)
    assert out["any"].gpus == (4, 5, 6)


# ---------------------------------------------------------------------------- reachable
def test_reachable_lists_each_count_s_gpus_per_node():
    c = Cluster.for_gpus(12, 4)
    p = ConsolidatingPlacer(c)
    old = (0, 1, 4)  # node 0: 2, node 1: 1
    p.claim(old + (8,))  # free: 2, 3, 3
    assert p.reachable(old, 20) == [
        [(0, 1)], [(0, 2)], [(0, 2), (1, 1)],
        [(0, 2), (1, 2)], [(0, 2), (1, 3)], [(0, 2), (1, 4)],  # node 1 has more free: it fills first
        [(0, 3), (1, 4)], [(0, 4), (1, 4)],
        [(0, 4), (1, 4), (2, 1)], [(0, 4), (1, 4), (2, 2)], [(0, 4), (1, 4), (2, 3)],
    ]
    assert p.reachable(old, 2) == [[(0, 1)], [(0, 2)]]
    assert p.node_free.tolist() == [2, 3, 3]
    q = ConsolidatingPlacer(c)
    q.claim((1, 2, 3, 9))  # free: 1, 4, 3; a new job
    assert q.reachable((), 6) == [[(0, 1)], [(2, 2)], [(2, 3)], [(1, 4)], [(0, 1), (1, 4)], [(1, 4), (2, 2)]]


def test_reachable_between_two_equal_shares_keeps_the_lower_node_and_counts_only_its_type():
    c = Cluster(nodes=(Node("v0", 4, "V100"), Node("k", 4, "K80"), Node("v1", 4, "V100")),
                gpu_types={"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)})
    p = ConsolidatingPlacer(c)
    old = (0, 1, 8, 9)  # 2 on v0, 2 on v1
    p.claim(old)
    assert p.reachable(old, 3, 0) == [[(0, 1)], [(0, 2)], [(0, 2), (2, 1)]]
    assert len(p.reachable(old, 99, 0)) == 8  # its 4 and the 4 free V100s, not the K80s
    assert len(p.reachable(old, 99)) == 12


# ---------------------------------------------------------------------------- cores
def test_explicit_cores_are_split_by_gpus_per_node_with_the_largest_remainder():
    c = Cluster(nodes=(Node("a", 4, cpus=16), Node("b", 4, cpus=16)))
    p = ConsolidatingPlacer(c)
    a = (0, 4, 5)
    p.claim(a)
    got = p.place({"a": a}, [Request("a", 3, cpus=5)])["a"]  # 5 × (1, 2) / 3 = 1.67, 3.33 → 2, 3
    assert got == Placed(a, (0, 1, 16, 17, 18))
    got = p.place({"a": a}, [Request("a", 3, cpus=7)], {"a": got.cores})["a"]  # 2.33, 4.67 → 2, 5
    assert got == Placed(a, (0, 1, 16, 17, 18, 19, 20))
    got = p.place({"a": a}, [Request("a", 3, cpus=6)], {"a": got.cores})["a"]  # exactly 2, 4
    assert got == Placed(a, (0, 1, 16, 17, 18, 19))
    got = p.place({"a": a}, [Request("a", 3)], {"a": got.cores})["a"]  # 4 cores per GPU
    assert got == Placed(a, (0, 1, 2, 3, 16, 17, 18, 19, 20, 21, 22, 23))
    assert p.core.node_free.tolist() == [12, 8]


def test_an_even_split_s_leftover_core_goes_to_the_lower_node():
    c = Cluster(nodes=(Node("a", 2, cpus=8), Node("b", 2, cpus=8)))
    p = ConsolidatingPlacer(c)
    a = (1, 2)
    p.claim(a)
    got = p.place({"a": a}, [Request("a", 2, cpus=3)])["a"]
    assert got == Placed(a, (0, 1, 8))


def test_cores_keep_what_they_had_first_then_take_the_lowest_free():
    c = Cluster(nodes=(Node("a", 4, cpus=4),))
    p = ConsolidatingPlacer(c)
    held = {"a": (0,), "b": (1,)}
    p.claim((0, 1))
    cores = {"a": (2,), "b": (0, 3)}
    out = p.place(held, [Request("a", 1, cpus=2), Request("b", 1, cpus=1)], cores)
    assert out["a"] == Placed((0,), (1, 2))  # kept core 2, then the lowest free one
    assert out["b"] == Placed((1,), (0,))  # kept the first of its own
    assert p.core.free.tolist() == [False, False, False, True]


def test_a_job_moved_off_a_node_does_not_keep_its_cores_there():
    c = Cluster(nodes=(Node("a", 2, cpus=4), Node("b", 2, cpus=4)))
    p = ConsolidatingPlacer(c)
    x = p.place({}, [Request("x", 2, cpus=4)])["x"]
    assert x == Placed((0, 1), (0, 1, 2, 3))
    y = p.place({"x": x.gpus}, [Request("y", 1, cpus=2)], {"x": x.cores})["y"]
    assert y == Placed((2,), (4, 5))
    # x shrinks to one GPU and one core: it keeps its first core
    x1 = p.place({"x": x.gpus, "y": y.gpus}, [Request("x", 1, cpus=1)], {"x": x.cores, "y": y.cores})["x"]
    assert x1 == Placed((0,), (0,))
    assert p.core.free.tolist() == [False, True, True, True, False, False, True, True]


def test_cores_prefer_nodes_with_enough_free_cores_per_gpu():
    c = Cluster(nodes=(Node("a", 4, cpus=8), Node("b", 4, cpus=8)))
    p = ConsolidatingPlacer(c)
    x = p.place({}, [Request("x", 1, cpus=7)])["x"]
    assert x == Placed((0,), tuple(range(7)))  # node a: 3 GPUs and 1 core free
    # one core per GPU: node a still has one, and is the best fit
    y = p.place({"x": x.gpus}, [Request("y", 2, cpus=2)], {"x": x.cores})["y"]
    assert y == Placed((1, 2), (7,))  # its target was 2 there, 1 was free
    p2 = ConsolidatingPlacer(c)
    x = p2.place({}, [Request("x", 1, cpus=7)])["x"]
    # two cores per GPU (3 cores ÷ 2 GPUs, rounded up): node a has too few, node b has them
    z = p2.place({"x": x.gpus}, [Request("z", 2, cpus=3)], {"x": x.cores})["z"]
    assert z == Placed((4, 5), (8, 9, 10))
    # no node has room for the cores of 5 GPUs: any node, the emptiest first
    p3 = ConsolidatingPlacer(c)
    x = p3.place({}, [Request("x", 1, cpus=8)])["x"]
    w = p3.place({"x": x.gpus}, [Request("w", 5, cpus=5)], {"x": x.cores})["w"]
    assert w.gpus == (1, 4, 5, 6, 7)
    assert w.cores == (8, 9, 10, 11)  # node a has no core left for its GPU there


def test_a_grow_on_a_node_with_free_gpus_but_no_free_cores_stays_there():
    # the job's own node comes first whatever its cores
    c = Cluster(nodes=(Node("a", 4, cpus=4), Node("b", 4, cpus=8)))
    p = ConsolidatingPlacer(c)
    x = p.place({}, [Request("x", 1, cpus=4)])["x"]
    assert x == Placed((0,), (0, 1, 2, 3))
    x2 = p.place({"x": x.gpus}, [Request("x", 2, cpus=4)], {"x": x.cores})["x"]
    assert x2 == Placed((0, 1), (0, 1, 2, 3))


# ---------------------------------------------------------------------------- mixed clusters
TYPES = {"V100": GpuType("V100", speed=1.0), "K80": GpuType("K80", speed=0.25)}


def mixed(*nodes: tuple[str, int]) -> Cluster:
    return Cluster(nodes=tuple(Node(f"{t}{i}", g, t) for i, (t, g) in enumerate(nodes)), gpu_types=TYPES)


def test_an_any_type_job_goes_to_the_type_that_holds_it_on_one_node_with_the_most_free():
    c = mixed(("V100", 4), ("V100", 4), ("K80", 4), ("K80", 2))
    p = ConsolidatingPlacer(c)
    assert p.free_by_type().tolist() == [8, 6]
    assert p.place({}, [Request("a", 4)])["a"].gpus == (0, 1, 2, 3)  # both hold it; V100 has more
    assert p.free_by_type().tolist() == [4, 6]
    assert p.place({}, [Request("b", 2)])["b"].gpus == (12, 13)  # K80 has more: its best fit node
    assert p.place({}, [Request("c", 3)])["c"].gpus == (4, 5, 6)  # a tie (4, 4): the first type
    # neither type holds 5 on one node; no scorer: the type with the most free
    q = ConsolidatingPlacer(mixed(("V100", 4), ("V100", 2), ("K80", 4), ("K80", 4)))
    assert q.place({}, [Request("d", 5)])["d"].gpus == (6, 7, 8, 9, 10)


def test_an_any_type_job_on_a_type_with_too_few_free_is_not_put_there():
    c = mixed(("V100", 4), ("K80", 4), ("K80", 4))
    p = ConsolidatingPlacer(c)
    # V100's node holds 4 on one node; K80 has 8 free but no single node of 5
    assert p.place({}, [Request("a", 5)])["a"].gpus == (4, 5, 6, 7, 8)
    # both types hold 3 on one node; V100 has more free (4 against 3)
    out = p.place({"a": (4, 5, 6, 7, 8)}, [Request("b", 3)])["b"]
    assert out.gpus == (0, 1, 2)
    r = ConsolidatingPlacer(c)
    r.claim((0, 1, 2))  # V100 has 1 free: not enough for 2
    assert r.place({}, [Request("b", 2)])["b"].gpus == (4, 5)


def test_a_growing_any_type_job_stays_on_its_type_while_it_has_room():
    c = mixed(("V100", 4), ("K80", 4), ("K80", 4))
    p = ConsolidatingPlacer(c)
    a = (0,)
    p.claim(a)
    # V100 has 3 free, K80 8: the job's own type has room for 3 more
    assert p.place({"a": a}, [Request("a", 4)])["a"].gpus == (0, 1, 2, 3)
    q = ConsolidatingPlacer(c)
    q.claim(a)
    # 4 more do not fit on V100: moved whole to K80, one node
    assert q.place({"a": a}, [Request("a", 5)])["a"].gpus == (4, 5, 6, 7, 8)
    assert q.free.tolist()[:4] == [True] * 4


def test_without_room_on_one_type_the_job_spreads_fastest_type_first_and_keeps_its_gpus():
    c = mixed(("K80", 4), ("V100", 2), ("V100", 2))
    p = ConsolidatingPlacer(c)
    assert c.type_names == ("K80", "V100")
    got = p.place({}, [Request("a", 6)])["a"].gpus
    assert got == (0, 1, 4, 5, 6, 7)  # V100 (the faster) all, then 2 K80s
    q = ConsolidatingPlacer(c)
    q.claim((4,))  # the V100s: 3 free, in two nodes
    got = q.place({}, [Request("a", 5)])["a"].gpus
    assert got == (0, 1, 5, 6, 7)


def test_spreading_over_types_does_not_take_the_first_type_s_node_again():
    # K80 nodes are filled after the V100s; the V100 node held is never asked for a K80
    c = mixed(("V100", 2), ("K80", 2), ("V100", 2), ("K80", 2))
    p = ConsolidatingPlacer(c)
    got = p.place({}, [Request("a", 7)])["a"].gpus
    assert sorted(got) == [0, 1, 2, 3, 4, 5, 6]
    assert per_node(c, got) == [2, 2, 2, 1]


def test_the_scorer_sees_each_candidate_s_gpus_per_node_and_types_and_the_best_wins():
    c = mixed(("V100", 4), ("V100", 4), ("K80", 4), ("K80", 4))
    seen = []

    def score(job, shape, types):
        seen.append((job, shape, types))
        return {"V100": 1.0, "K80": 2.0}[types[0]]  # K80 scored faster here

    p = ConsolidatingPlacer(c, scorer=score)
    p.claim((0, 4, 8))  # V100: 3 + 3, K80: 3 + 4
    got = p.place({}, [Request("a", 5)])["a"].gpus
    # ranked by free: K80 (7) first, then V100 (6); shapes: K80 4 (node 3) + 1, V100 3 + 2
    assert seen == [("a", (4, 1), ("K80", "K80")), ("a", (3, 2), ("V100", "V100"))]
    assert got == (9, 12, 13, 14, 15)

    seen.clear()
    q = ConsolidatingPlacer(c, scorer=lambda job, shape, types: seen.append(types) or (types[0] == "V100"))
    q.claim((0, 4, 8))
    assert q.place({}, [Request("a", 5)])["a"].gpus == (1, 2, 3, 5, 6)
    assert seen == [("K80", "K80"), ("V100", "V100")]

    seen.clear()
    r = ConsolidatingPlacer(c, scorer=lambda job, shape, types: seen.append(types) or 1.0)
    r.claim((0, 4, 8))
    assert r.place({}, [Request("a", 5)])["a"].gpus == (9, 12, 13, 14, 15)  # a tie: the first ranked


def test_a_scorer_is_not_asked_when_only_one_type_has_room():
    c = mixed(("V100", 4), ("V100", 4), ("K80", 4))
    calls = []
    p = ConsolidatingPlacer(c, scorer=lambda *a: calls.append(a) or 1.0)
    assert p.place({}, [Request("a", 6)])["a"].gpus == (0, 1, 2, 3, 4, 5)
    assert calls == []


def test_with_mixing_a_job_no_node_holds_is_scored_per_type_and_across_types():
    c = mixed(("V100", 4), ("K80", 4), ("K80", 4))
    seen = []

    def score(job, shape, types):
        seen.append((shape, types))
        return len(set(types)) + 0.1 * sum(shape)

    p = ConsolidatingPlacer(c, allow_mixing=True, scorer=score)
    p.claim((0, 1, 4, 8))  # V100: 2 free; K80: 3 + 3
    got = p.place({}, [Request("a", 5)])["a"].gpus
    # candidates: V100 has too few; K80 3 + 2; across types the emptiest node (K80, 3) and then
    # the best fit for 2, the V100 node: scored 1.5 and 2.5
    assert seen == [((3, 2), ("K80", "K80")), ((3, 2), ("K80", "V100"))]
    assert got == (2, 3, 5, 6, 7)

    seen.clear()
    q = ConsolidatingPlacer(c, allow_mixing=True, scorer=score)
    q.claim((4, 5, 8, 9))  # V100: 4; K80: 2 + 2
    got = q.place({}, [Request("a", 6)])["a"].gpus
    assert seen == [((4, 2), ("V100", "K80"))]  # no single type has 6
    assert got == (0, 1, 2, 3, 6, 7)


def test_with_mixing_one_node_that_holds_the_job_needs_no_scorer():
    c = mixed(("V100", 2), ("K80", 4))
    calls = []
    p = ConsolidatingPlacer(c, allow_mixing=True, scorer=lambda *a: calls.append(a) or 1.0)
    assert p.place({}, [Request("a", 4)])["a"].gpus == (2, 3, 4, 5)
    a = p.place({}, [Request("b", 1)])["b"].gpus
    assert a == (0,)
    # a job that grows fills its own node, then any node: no scorer either
    assert p.place({"b": a}, [Request("b", 2)])["b"].gpus == (0, 1)
    assert calls == []
    q = ConsolidatingPlacer(c, allow_mixing=True)  # no scorer: the plain grow, across types
    assert q.place({}, [Request("a", 5)])["a"].gpus == (0, 2, 3, 4, 5)


# ---------------------------------------------------------------------------- cores on mixed clusters
def cored(*nodes: tuple[str, int]) -> Cluster:
    return Cluster(nodes=tuple(Node(f"{t}{i}", g, t, cpus=8) for i, (t, g) in enumerate(nodes)), gpu_types=TYPES)


@pytest.mark.timeout(20)
def test_a_scored_any_type_job_whose_cores_fit_too_few_nodes_falls_back_to_any_node():
    """Regression: the candidates were shaped on the nodes with room for the cores only; when those
    held fewer GPUs than asked, ``_shape`` never finished (the placer hung)."""
    c = cored(("V100", 4), ("V100", 4), ("K80", 4), ("K80", 4))
    seen = []

    def score(job, shape, types):
        seen.append((job, shape, types))
        return 2.0 if types[0] == "V100" else 1.0

    p = ConsolidatingPlacer(c, scorer=score)
    x = p.place({}, [Request("x", 1, 0, cpus=8)])["x"]  # all of V100 node 0's cores
    assert x == Placed((0,), tuple(range(8)))
    got = p.place({"x": x.gpus}, [Request("a", 6, cpus=6)], {"x": x.cores})["a"]
    # K80 (8 free) ranks first: its nodes have the cores, 4 + 2; V100's node with cores holds only
    # 4, so its candidate is any V100 node: 4 on node 1, then the best fit for 2, node 0
    assert seen == [("a", (4, 2), ("K80", "K80")), ("a", (4, 2), ("V100", "V100"))]
    assert got.gpus == (1, 2, 4, 5, 6, 7)
    assert got.cores == (8, 9, 10, 11)  # node 0 has no core left for its 2 GPUs

    q = ConsolidatingPlacer(c, scorer=lambda job, shape, types: 1.0)
    x = q.place({}, [Request("x", 1, 0, cpus=8)])["x"]
    got = q.place({"x": x.gpus}, [Request("a", 6, cpus=6)], {"x": x.cores})["a"]
    assert got == Placed((8, 9, 10, 11, 12, 13), (16, 17, 18, 19, 24, 25))  # a tie: K80, 4 and 2 cores


@pytest.mark.timeout(20)
def test_a_mixing_job_whose_cores_fit_too_few_nodes_falls_back_to_any_node():
    c = cored(("V100", 4), ("V100", 4), ("K80", 4), ("K80", 4))
    seen = []
    p = ConsolidatingPlacer(c, allow_mixing=True, scorer=lambda job, shape, types: seen.append((shape, types)) or 1.0)
    cur, cores = {}, {}
    for j, t in (("x", 0), ("y", 1), ("z", 1)):  # all the cores of nodes 0, 2 and 3
        pl = p.place(cur, [Request(j, 1, t, cpus=8)], cores)[j]
        cur[j], cores[j] = pl.gpus, pl.cores
    assert cur == {"x": (0,), "y": (8,), "z": (12,)} and p.core.node_free.tolist() == [0, 8, 0, 0]
    got = p.place(cur, [Request("a", 6, cpus=6)], cores)["a"]
    # only node 1 has cores (4 GPUs): no type holds 6 there; across types on any node: 4 on node 1,
    # then the best fit for 2 (3 free on nodes 0, 2 and 3: node 0)
    assert seen == [((4, 2), ("V100", "V100"))]
    assert got == Placed((1, 2, 4, 5, 6, 7), (8, 9, 10, 11))


@pytest.mark.timeout(20)
def test_a_mixing_job_asking_for_more_than_is_free_is_a_placement_error():
    c = mixed(("V100", 4), ("K80", 4))
    p = ConsolidatingPlacer(c, allow_mixing=True, scorer=lambda *a: 1.0)
    p.claim((0,))
    with pytest.raises(PlacementError, match=r"^no free GPU left for 8 GPUs \(type -1\)$"):
        p.place({}, [Request("a", 8)])


def test_a_leftover_core_goes_to_the_lower_node_among_equal_remainders_on_many_nodes():
    # 24 nodes of 2 GPUs; the job holds 1 GPU on even nodes, 2 on odd ones (36 GPUs). 18 cores:
    # 0.5 per even node and 1 per odd node; the 6 cores left go to nodes 0, 2, …, 10 (ties in order,
    # which an unstable sort of 24 remainders would not keep)
    c = Cluster(nodes=tuple(Node(f"n{i}", 2, cpus=8) for i in range(24)))
    p = ConsolidatingPlacer(c)
    a = tuple(sorted([2 * n for n in range(24)] + [2 * n + 1 for n in range(1, 24, 2)]))
    p.claim(a)
    got = p.place({"a": a}, [Request("a", 36, cpus=18)])["a"]
    assert got.gpus == a
    assert got.cores == tuple(sorted([8 * n for n in range(1, 24, 2)] + [8 * n for n in range(0, 12, 2)]))


def test_a_type_that_holds_the_job_on_one_node_wins_though_its_nodes_lack_cores():
    # V100: node 0 full (its cores partly free), node 1 with 3 GPUs and no core; K80: 3 GPUs with
    # cores. Both types hold 3 on one node with 3 free: the tie goes to the first type, V100.
    c = Cluster(nodes=(Node("v0", 2, "V100", cpus=8), Node("v1", 4, "V100", cpus=8), Node("k", 3, "K80", cpus=8)),
                gpu_types=TYPES)
    p = ConsolidatingPlacer(c)
    cur, cores = {}, {}
    for j, k, cpus in (("f", 2, 2), ("x", 1, 8)):
        pl = p.place(cur, [Request(j, k, 0, cpus=cpus)], cores)[j]
        cur[j], cores[j] = pl.gpus, pl.cores
    assert cur == {"f": (0, 1), "x": (2,)} and p.core.node_free.tolist() == [6, 0, 8]
    got = p.place(cur, [Request("a", 3, cpus=3)], cores)["a"]
    assert got == Placed((3, 4, 5), ())


def test_take_one_and_reachable_ignore_cores():
    c = Cluster(nodes=(Node("a", 4, cpus=4), Node("b", 4, cpus=8)))
    p = ConsolidatingPlacer(c)
    x = p.place({}, [Request("x", 2, cpus=4)])["x"]
    assert x == Placed((0, 1), (0, 1, 2, 3))  # node a: 2 GPUs, no core free
    assert p.reachable(x.gpus, 4) == [[(0, 1)], [(0, 2)], [(0, 3)], [(0, 4)]]
    assert p.take_one() == 2  # the fullest node, though its cores are all taken


def test_a_mixing_job_s_candidates_are_each_type_with_room_in_type_order_then_across_types():
    c = mixed(("V100", 4), ("V100", 4), ("K80", 4), ("K80", 4))
    seen = []

    def score(job, shape, types):
        seen.append((job, shape, types))
        return float(len(set(types)))  # the mix wins

    p = ConsolidatingPlacer(c, allow_mixing=True, scorer=score)
    p.claim((0, 4, 5, 8))  # V100: 3 + 2 (exactly 5), K80: 3 + 4
    got = p.place({}, [Request("a", 5)])["a"].gpus
    assert seen == [("a", (3, 2), ("V100", "V100")), ("a", (4, 1), ("K80", "K80")),
                    ("a", (4, 1), ("K80", "V100"))]  # across types: node 3, then the best fit for 1
    assert got == (6, 12, 13, 14, 15)


def test_a_mixing_job_without_a_scorer_asking_for_more_than_is_free_is_a_placement_error():
    c = mixed(("V100", 4), ("K80", 4))
    p = ConsolidatingPlacer(c, allow_mixing=True)
    p.claim((0,))
    with pytest.raises(PlacementError, match=r"^no free GPU left for 8 GPUs \(type -1\)$"):
        p.place({}, [Request("a", 8)])


def cores3() -> tuple[ConsolidatingPlacer, dict, dict]:
    """Three nodes of 4 GPUs and 8 cores: node 0 full, node 1 with 3 GPUs and no core, node 2
    with 3 GPUs and 7 cores."""
    c = Cluster(nodes=tuple(Node(f"n{i}", 4, cpus=8) for i in range(3)))
    p = ConsolidatingPlacer(c)
    cur, cores = {}, {}
    for j, k, cpus in (("f", 4, 4), ("x", 1, 8), ("w", 1, 1)):
        pl = p.place(cur, [Request(j, k, cpus=cpus)], cores)[j]
        cur[j], cores[j] = pl.gpus, pl.cores
    assert cur == {"f": (0, 1, 2, 3), "x": (4,), "w": (8,)}
    assert p.node_free.tolist() == [0, 3, 3] and p.core.node_free.tolist() == [4, 0, 7]
    return p, cur, cores


def test_nodes_with_room_for_the_cores_that_hold_exactly_the_gpus_take_the_job():
    p, cur, cores = cores3()
    got = p.place(cur, [Request("z", 3, cpus=3)], cores)["z"]
    assert got == Placed((9, 10, 11), (17, 18, 19))


def test_when_nodes_with_cores_hold_too_few_gpus_any_free_node_takes_them_never_a_full_one():
    p, cur, cores = cores3()
    got = p.place(cur, [Request("z", 4, cpus=4)], cores)["z"]
    # any node: none holds 4, node 1 (3, the first of the emptiest), then 1 on node 2
    assert got == Placed((5, 6, 7, 9), (17,))
    assert p.node_free.tolist() == [0, 0, 2]


@BOTH
def test_a_request_for_the_one_type_by_index_is_typed_and_placed_before_any_type(compiled):
    c = Cluster.for_gpus(8, 4)
    p = make(c, compiled)
    p.claim((0,))  # free: 3, 4
    out = p.place({}, [Request("any", 3), Request("typed", 1, 0)])
    assert out["typed"].gpus == (1,)  # placed first: the best fit for one GPU
    assert out["any"].gpus == (4, 5, 6)


def test_a_request_without_cpus_has_no_preference_for_nodes_with_free_cores():
    c = Cluster(nodes=(Node("a", 4, cpus=4), Node("b", 4, cpus=8)))
    p = ConsolidatingPlacer(c)
    x = p.place({}, [Request("x", 1, cpus=4)])["x"]  # node a: 3 GPUs, no core
    got = p.place({"x": x.gpus}, [Request("y", 2)], {"x": x.cores})["y"]
    assert got == Placed((1, 2), ())  # the best fit; its 1 core per GPU is not there
    got = p.place({"x": x.gpus, "y": (1, 2)}, [Request("z", 1, cpus=0)], {"x": x.cores, "y": ()})["z"]
    assert got == Placed((3,), ())


def five_nodes() -> tuple[Cluster, ConsolidatingPlacer]:
    """V100: 4 + 4 GPUs; K80: 4 + 4 + 5, each node with 8 cores. Booked: GPU 0 with core 0 (this
    turns the pool of cores on), one GPU and one core on each of the first two K80 nodes, and one
    GPU with all 8 cores of the third: V100 3 + 4 free, K80 3 + 3 with cores and 4 without."""
    c = Cluster(nodes=(Node("v0", 4, "V100", cpus=8), Node("v1", 4, "V100", cpus=8), Node("k0", 4, "K80", cpus=8),
                       Node("k1", 4, "K80", cpus=8), Node("k2", 5, "K80", cpus=8)), gpu_types=TYPES)
    return c, ConsolidatingPlacer(c)


def test_scored_candidates_use_the_nodes_with_room_for_the_cores_when_those_hold_exactly_the_job():
    c, _ = five_nodes()
    seen = []
    p = ConsolidatingPlacer(c, scorer=lambda job, shape, types: seen.append((job, shape, types)) or
                            (2.0 if types[0] == "K80" else 1.0))
    d = p.place({}, [Request("d", 1, 0, cpus=1)])["d"]
    assert d == Placed((0,), (0,))
    p.claim((8,), (16,))
    p.claim((12,), (24,))
    p.claim((16,), tuple(range(32, 40)))
    assert p.node_free.tolist() == [3, 4, 3, 3, 4] and p.core.node_free.tolist() == [7, 8, 7, 7, 0]
    got = p.place({"d": d.gpus}, [Request("a", 6, cpus=6)], {"d": d.cores})["a"]
    # K80 (10 free) first: its nodes with cores hold exactly 6, 3 + 3 (not node k2's 4 + 2)
    assert seen == [("a", (3, 3), ("K80", "K80")), ("a", (4, 2), ("V100", "V100"))]
    assert got == Placed((9, 10, 11, 13, 14, 15), (17, 18, 19, 25, 26, 27))


def test_a_scored_candidate_on_any_node_of_a_type_stays_on_that_type():
    c = cored(("V100", 4), ("V100", 4), ("K80", 4), ("K80", 4))
    seen = []
    p = ConsolidatingPlacer(c, scorer=lambda job, shape, types: seen.append((shape, types)) or
                            (2.0 if types[0] == "V100" else 1.0))
    x = p.place({}, [Request("x", 1, 0, cpus=8)])["x"]  # V100 node 0: no core left
    got = p.place({"x": x.gpus}, [Request("a", 5, cpus=5)], {"x": x.cores})["a"]
    # V100's nodes with cores hold 4: any V100 node, 4 on node 1 and the best fit for 1, node 0
    assert seen == [((4, 1), ("K80", "K80")), ((4, 1), ("V100", "V100"))]
    assert got == Placed((1, 4, 5, 6, 7), (8, 9, 10, 11))


def test_a_mixing_job_may_take_exactly_every_free_gpu():
    c = mixed(("V100", 4), ("K80", 4))
    p = ConsolidatingPlacer(c, allow_mixing=True, scorer=lambda *a: 1.0)
    p.claim((0,))
    assert p.place({}, [Request("a", 7)])["a"].gpus == (1, 2, 3, 4, 5, 6, 7)


def test_a_growing_job_fills_its_own_node_though_that_node_has_no_free_core():
    c = Cluster(nodes=(Node("a", 4, cpus=4), Node("b", 4, cpus=8)))
    p = ConsolidatingPlacer(c)
    cur, cores = {}, {}
    for j, k, cpus in (("y", 1, 4), ("x", 1, 0), ("z", 3, 0)):
        pl = p.place(cur, [Request(j, k, cpus=cpus)], cores)[j]
        cur[j], cores[j] = pl.gpus, pl.cores
    assert cur == {"y": (0,), "x": (1,), "z": (4, 5, 6)}
    assert p.node_free.tolist() == [2, 1] and p.core.node_free.tolist() == [0, 8]
    got = p.place(cur, [Request("x", 2, cpus=0)], cores)["x"]
    assert got == Placed((1, 2), ())  # its own node, not node b's single free GPU (the best fit)


def test_a_type_that_holds_the_job_on_one_node_beats_a_type_with_more_free_gpus_spread_over_nodes():
    c = mixed(("V100", 3), ("V100", 3), ("K80", 4))
    p = ConsolidatingPlacer(c)
    assert p.free_by_type().tolist() == [6, 4]
    assert p.place({}, [Request("a", 4)])["a"].gpus == (6, 7, 8, 9)  # not V100's 3 + 1
