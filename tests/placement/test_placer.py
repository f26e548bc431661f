"""Placement properties: no double booking, consolidation, stability of unchanged shares."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from coddl.core import Cluster
from coddl.placement.placer import ConsolidatingPlacer, Request


def nodes_of(c: Cluster, gpus) -> set[int]:
    return {int(c.node_of_gpu[g]) for g in gpus}


def test_best_fit_prefers_the_fullest_node_that_fits():
    c = Cluster.for_gpus(16, 8)
    p = ConsolidatingPlacer(c)
    first = p.place({}, [Request("a", 6)])["a"].gpus
    assert nodes_of(c, first) == {0}
    second = p.place({"a": first}, [Request("b", 2)])["b"].gpus
    assert nodes_of(c, second) == {0}  # fills node 0's hole, keeps node 1 whole for a big job
    third = p.place({}, [Request("c", 8)])["c"].gpus
    assert nodes_of(c, third) == {1}


def test_a_job_larger_than_a_node_spans_the_fewest_nodes():
    c = Cluster.for_gpus(32, 8)
    p = ConsolidatingPlacer(c)
    p.place({}, [Request("x", 3)])
    big = p.place({}, [Request("y", 16)])["y"].gpus
    assert len(nodes_of(c, big)) == 2


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_shrink_keeps_the_gpus_on_the_job_s_main_node(compiled):
    # Two nodes of 4. f takes 3 GPUs of node 0; a (5 GPUs) fits no node, so it spans: 4 on node 1
    # (the emptiest first) and the last free GPU of node 0. Shrinking a keeps node 1's GPUs.
    c = Cluster.for_gpus(8, 4)
    p = ConsolidatingPlacer(c)
    p.compiled = compiled
    f = p.place({}, [Request("f", 3)])["f"].gpus
    assert nodes_of(c, f) == {0}
    a = p.place({"f": f}, [Request("a", 5)])["a"].gpus
    assert np.bincount(c.node_of_gpu[list(a)], minlength=2).tolist() == [1, 4]
    small = p.place({"f": f, "a": a}, [Request("a", 4)])["a"].gpus
    assert set(small) <= set(a) and nodes_of(c, small) == {1}
    assert p.free[[g for g in a if g not in small]].all()  # the released GPU is free again
    two = p.place({"f": f, "a": small}, [Request("a", 2)])["a"].gpus
    assert set(two) <= set(small) and nodes_of(c, two) == {1}
    assert (f, a, small, two) == ((0, 1, 2), (3, 4, 5, 6, 7), (4, 5, 6, 7), (4, 5))  # lowest GPUs kept


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_growing_job_fills_its_own_node_first(compiled):
    # Two nodes of 4. f holds 3 GPUs of node 0 (one free there), a holds 2 of node 1 (two free).
    # a grows by one: best fit alone would pick node 0's single free GPU and split a over two
    # nodes; filling a's own node first keeps it on node 1.
    c = Cluster.for_gpus(8, 4)
    p = ConsolidatingPlacer(c)
    p.compiled = compiled
    f = p.place({}, [Request("f", 3)])["f"].gpus
    a = p.place({"f": f}, [Request("a", 2)])["a"].gpus
    assert nodes_of(c, f) == {0} and nodes_of(c, a) == {1}
    grown = p.place({"f": f, "a": a}, [Request("a", 3)])["a"].gpus
    assert set(a) < set(grown) and nodes_of(c, grown) == {1}
    # growing past its node: the 4th GPU of node 1 first, then the one left on node 0
    more = p.place({"f": f, "a": grown}, [Request("a", 5)])["a"].gpus
    assert set(grown) < set(more)
    assert np.bincount(c.node_of_gpu[list(more)], minlength=2).tolist() == [1, 4]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=6), min_size=1, max_size=8),
       st.sampled_from([(16, 8), (24, 4), (12, 12)]))
def test_random_share_sequences_never_double_book(rounds, shape):
    total, per_node = shape
    c = Cluster.for_gpus(total, per_node)
    p = ConsolidatingPlacer(c)
    current: dict[str, tuple[int, ...]] = {}
    for shares in rounds:
        want = {j: 0 for j in current} | {f"j{i}": k for i, k in enumerate(shares)}
        # scale down to capacity like a policy would
        while sum(want.values()) > total:
            biggest = max(want, key=want.get)
            want[biggest] -= 1
        changed = [Request(j, k) for j, k in want.items() if len(current.get(j, ())) != k]
        placed = p.place(current, changed)
        for j, pl in placed.items():
            g = pl.gpus
            assert len(g) == want[j]
            if g:
                current[j] = g
            else:
                current.pop(j, None)
        unchanged = {j for j in want if j not in placed}
        for j in unchanged:  # unchanged shares keep exactly their GPUs
            assert len(current.get(j, ())) == want[j]
        used = [g for gs in current.values() for g in gs]
        assert len(used) == len(set(used))  # no GPU given twice
        assert set(np.flatnonzero(~p.free).tolist()) == set(used)
        for j, g in current.items():  # never spread wider than the GPUs force it to be
            assert len(nodes_of(c, g)) <= len(g)


def test_per_type_requests_stay_on_their_type():
    from coddl.core.cluster import Node

    c = Cluster(nodes=(Node("k", 4, "K80"), Node("v", 4, "V100")))
    p = ConsolidatingPlacer(c)
    v = c.type_names.index("V100")
    g = p.place({}, [Request("a", 3, v)])["a"].gpus
    assert nodes_of(c, g) == {1}
    moved = p.place({"a": g}, [Request("a", 3, c.type_names.index("K80"))])["a"].gpus
    assert nodes_of(c, moved) == {0}
    assert p.free[4:].all()


def test_cores_follow_gpus_proportionally_and_are_never_shared():
    from coddl.core.cluster import Node

    c = Cluster(nodes=(Node("a", 4, cpus=16), Node("b", 4, cpus=16)))
    p = ConsolidatingPlacer(c)
    x = p.place({}, [Request("x", 2)])["x"]  # default: 4 cores per GPU on these nodes
    assert len(x.cores) == 8 and {int(c.node_of_core[k]) for k in x.cores} == {int(c.node_of_gpu[x.gpus[0]])}
    y = p.place({"x": x.gpus}, [Request("y", 6, cpus=12)], {"x": x.cores})["y"]  # 12 split by GPUs per node
    per_node = {n: sum(1 for k in y.cores if c.node_of_core[k] == n) for n in (0, 1)}
    gpn = {n: sum(1 for g in y.gpus if c.node_of_gpu[g] == n) for n in (0, 1)}
    assert sum(per_node.values()) == 12
    assert all(per_node[n] == 12 * gpn[n] // 6 for n in (0, 1))
    assert not set(x.cores) & set(y.cores)


def test_a_core_only_change_keeps_the_cores_it_can():
    c = Cluster.for_gpus(8, 8)
    p = ConsolidatingPlacer(c)
    a = p.place({}, [Request("a", 2, cpus=4)])["a"]
    more = p.place({"a": a.gpus}, [Request("a", 2, cpus=6)], {"a": a.cores})["a"]
    assert more.gpus == a.gpus and set(a.cores) < set(more.cores) and len(more.cores) == 6
    fewer = p.place({"a": more.gpus}, [Request("a", 2, cpus=2)], {"a": more.cores})["a"]
    assert set(fewer.cores) < set(more.cores) and len(fewer.cores) == 2
    assert int((~p.core.free).sum()) == 2


def test_proportional_cores_are_the_gpus_core_blocks():
    """Without explicit CPU requests, local GPU i of a node owns cores [i·c, (i+1)·c)."""
    c = Cluster.for_gpus(16, 8)  # 32 cores per node → 4 per GPU
    p = ConsolidatingPlacer(c)
    a = p.place({}, [Request("a", 3)])["a"]
    b = p.place({"a": a.gpus}, [Request("b", 2)], {"a": a.cores})["b"]
    for pl in (a, b):
        expect = sorted(int(c.node_first_core[c.node_of_gpu[g]]) + 4 * (g - int(c.node_first_gpu[c.node_of_gpu[g]])) + i
                        for g in pl.gpus for i in range(4))
        assert list(pl.cores) == expect
    assert not set(a.cores) & set(b.cores)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 12), min_size=1, max_size=8), min_size=1, max_size=10),
       st.sampled_from([(16, 8), (24, 4), (12, 12), (40, 8)]))
def test_compiled_one_type_path_places_exactly_as_the_python_path(rounds, shape):
    """On a one-type cluster ``place`` runs compiled kernels (placement/kernels.py); the plain
    Python path is their reference: same GPUs, same cores, same free maps after every call."""
    total, per_node = shape
    c = Cluster.for_gpus(total, per_node)
    fast, plain = ConsolidatingPlacer(c), ConsolidatingPlacer(c)
    plain.compiled = False
    current: dict[str, tuple[int, ...]] = {}
    for shares in rounds:
        want = {j: 0 for j in current} | {f"j{i}": k for i, k in enumerate(shares)}
        while sum(want.values()) > total:
            want[max(want, key=want.get)] -= 1
        changed = [Request(j, k) for j, k in want.items() if len(current.get(j, ())) != k]
        got, ref = fast.place(current, changed), plain.place(current, changed)
        assert got == ref
        assert (fast.free == plain.free).all() and (fast.gpu.node_free == plain.gpu.node_free).all()
        assert fast.fragmentation() == plain.fragmentation()
        for j, pl in got.items():
            if pl.gpus:
                current[j] = pl.gpus
            else:
                current.pop(j, None)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_reachable_shapes_are_where_the_placer_would_put_the_job(data):
    """``reachable(old, kmax)[k - 1]`` is exactly the GPUs per node that ``place`` gives a job holding
    ``old`` when it alone is resized to k, on every occupancy of a 3 × 4 cluster; nothing is taken."""
    c = Cluster.for_gpus(12, 4)
    p = ConsolidatingPlacer(c)
    taken = data.draw(st.lists(st.integers(0, 11), unique=True, max_size=11))
    split = data.draw(st.integers(0, len(taken)))
    old, others = tuple(sorted(taken[:split])), tuple(taken[split:])
    p.claim(old + others)
    free_before = p.free.copy()
    shapes = p.reachable(old, 12)
    assert np.array_equal(p.free, free_before)
    assert len(shapes) == len(old) + int(free_before.sum())
    for k, shape in enumerate(shapes, 1):
        trial = ConsolidatingPlacer(c)
        trial.claim(old + others)
        placed = trial.place({"j": old}, [Request("j", k)])["j"].gpus
        counts = np.bincount(c.node_of_gpu[np.asarray(placed)], minlength=3)
        assert shape == [(int(n), int(counts[n])) for n in np.flatnonzero(counts)], (old, others, k)
