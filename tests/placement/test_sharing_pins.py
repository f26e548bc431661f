"""The GPU-sharing packer (placement/sharing.py) pinned on hand-computed packings: where best fit
puts each newcomer, the bins a packing reports (``opened``, ``joined``) with their types, fractions
and memory, the per-type tallies the scheduler reads, and the room left for waiting jobs. Written
against the survivors of mutation testing; each expectation is worked out by hand in its docstring."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.core.cluster import Cluster, GpuType, Node
from coddl.placement.sharing import NEW, Bin, SharedGpus, SharingRule, Tenant

PAIR = {(0, 1): 0.6, (1, 0): 0.8, (0, 0): 0.7, (1, 1): 0.7}


def retained(a: int, b: int, t: int) -> float:
    return PAIR[(a, b)]


def two_types(a_gpus: int = 2, b_gpus: int = 2, a_mem: float = 16.0, b_mem: float = 32.0) -> Cluster:
    """GPUs 0..a_gpus-1 are type A (index 0), the rest type B (index 1)."""
    return Cluster(nodes=(Node("n0", a_gpus, "A"), Node("n1", b_gpus, "B")),
                   gpu_types={"A": GpuType("A", memory_gb=a_mem), "B": GpuType("B", memory_gb=b_mem)})


def packer(gpus: int = 4, rule: str = "pack", cluster: Cluster | None = None, **kw) -> SharedGpus:
    return SharedGpus(cluster or Cluster.for_gpus(gpus, gpus), SharingRule.parse(rule), retained, **kw)


def t(jid: str, fraction: float, kind: int = 0, memory: float | None = None, gpu_type: int = -1,
      declared: bool = True) -> Tenant:
    return Tenant(jid, fraction, memory, kind, gpu_type, declared)


def seat(sg: SharedGpus, gpu: int, *tenants: Tenant) -> None:
    """Register the tenants and put them on ``gpu`` together (as a committed packing would)."""
    for x in tenants:
        sg.register(x)
    sg.open([Bin(NEW, -1, list(tenants))], lambda ty: gpu)


def ids(b: Bin) -> list[str]:
    return [x.job_id for x in b.tenants]


# ---------------------------------------------------------------- pack_changes: where newcomers go
def test_the_room_a_placement_leaves_steers_the_next_newcomer() -> None:
    """GPU 0 holds 0.5 (room 0.5), GPU 1 holds 0.3 (room 0.7). Newcomers n1, n2 of 0.25: n1 goes to
    GPU 0 (least room that fits), leaving 0.25 there, exactly n2's size: n2 goes to GPU 0 too."""
    sg = packer()
    seat(sg, 0, t("a", 0.5))
    seat(sg, 1, t("b", 0.3))
    for x in (t("n1", 0.25), t("n2", 0.25)):
        sg.register(x)
    p = sg.pack_changes(["n1", "n2"], [])
    assert p.at == {"n1": 0, "n2": 0}
    assert not p.opened and not p.leaving and not p.emptied and p.gpus == 2
    assert list(p.joined) == [0] and ids(p.joined[0]) == ["a", "n1", "n2"]
    assert p.joined[0].used == pytest.approx(1.0)
    # a third quarter no longer fits GPU 0: GPU 1 (room 0.7) takes it
    sg.register(t("n3", 0.25))
    assert sg.pack_changes(["n1", "n2", "n3"], []).at == {"n1": 0, "n2": 0, "n3": 1}


def test_two_newcomers_are_packed_largest_first() -> None:
    """GPU 0 has room 0.7. Given small (0.3) before big (0.7): big is packed first and fills GPU 0,
    small opens a new GPU (in the order given, small would take GPU 0 and big a new one)."""
    sg = packer()
    seat(sg, 0, t("a", 0.3))
    for x in (t("small", 0.3), t("big", 0.7)):
        sg.register(x)
    p = sg.pack_changes(["small", "big"], [])
    assert p.at == {"big": 0}
    assert len(p.opened) == 1 and ids(p.opened[0]) == ["small"] and p.gpus == 2


def test_equal_newcomers_are_packed_in_job_order() -> None:
    """Two GPUs with room 0.5 each, two newcomers of 0.5 given as b, a: a (first by id) takes the
    lower GPU."""
    sg = packer()
    seat(sg, 0, t("x", 0.5))
    seat(sg, 1, t("y", 0.5))
    for x in (t("b", 0.5), t("a", 0.5)):
        sg.register(x)
    assert sg.pack_changes(["b", "a"], []).at == {"a": 0, "b": 1}
    assert sg.pack(["x", "y", "b", "a"]).at == {"a": 0, "b": 1}


def test_three_newcomers_are_packed_largest_first_then_by_id() -> None:
    """No shared GPU yet: 0.6 (c) opens a GPU, 0.4 (a) fills it, 0.4 (b) opens a second."""
    sg = packer()
    for x in (t("b", 0.4), t("a", 0.4), t("c", 0.6)):
        sg.register(x)
    p = sg.pack_changes(["b", "a", "c"], [])
    assert [ids(b) for b in p.opened] == [["c", "a"], ["b"]] and p.gpus == 2 and not p.at
    assert [b.used for b in p.opened] == pytest.approx([1.0, 0.4])


def test_best_fit_takes_the_least_room_then_the_lowest_gpu() -> None:
    """Rooms 0.6, 0.4, 0.4, 0.8: a 0.4 goes to GPU 1 (least room, lowest of equals)."""
    sg = packer()
    for g, f in enumerate((0.4, 0.6, 0.6, 0.2)):
        seat(sg, g, t(f"s{g}", f))
    sg.register(t("n", 0.4))
    assert sg.pack_changes(["n"], []).at == {"n": 1}
    sg.register(t("m", 0.7))
    assert sg.pack_changes(["m"], []).at == {"m": 3}


def test_a_typed_newcomer_pins_its_type_on_the_new_gpu_it_shares() -> None:
    """u (0.5, any type) opens a new GPU; q (0.25, must run on B) joins it: the bin is then B's,
    and q's memory counts at B's 32 GB (8 GB), u's at the smallest type's 16 GB (8 GB)."""
    sg = packer(cluster=two_types())
    for x in (t("u", 0.5), t("q", 0.25, gpu_type=1)):
        sg.register(x)
    p = sg.pack_changes(["u", "q"], [])
    assert len(p.opened) == 1
    b = p.opened[0]
    assert ids(b) == ["u", "q"] and b.gpu_type == 1 and b.gpu == NEW
    assert b.used == pytest.approx(0.75) and b.memory == pytest.approx(8.0 + 8.0)
    used, anywhere = sg.used_by_type(p)
    assert used.tolist() == [0, 1] and anywhere == 0


def test_a_newcomer_of_type_a_pins_type_a() -> None:
    """The same with type index 0: the bin becomes A's; an untyped pair stays of no type."""
    sg = packer(cluster=two_types())
    for x in (t("u", 0.5), t("q", 0.25, gpu_type=0), t("v", 0.5), t("w", 0.25)):
        sg.register(x)
    p = sg.pack_changes(["u", "q"], [])
    assert [b.gpu_type for b in p.opened] == [0]
    assert sg.used_by_type(p)[0].tolist() == [1, 0]
    p = sg.pack_changes(["v", "w"], [])
    assert [b.gpu_type for b in p.opened] == [-1] and sg.used_by_type(p)[0].tolist() == [0, 0]
    assert sg.used_by_type(p)[1] == 1


def test_a_type_chosen_by_the_policy_pins_the_new_gpu() -> None:
    """``types``: the policy put u on B: the new GPU is B's and a newcomer that must run on A
    does not join it."""
    sg = packer(cluster=two_types())
    for x in (t("u", 0.5), t("a", 0.25, gpu_type=0)):
        sg.register(x)
    p = sg.pack_changes(["u", "a"], [], types={"u": 1})
    assert sorted((b.gpu_type, tuple(ids(b))) for b in p.opened) == [(0, ("a",)), (1, ("u",))]
    p = sg.pack_changes(["u", "a"], [], types={"u": 0})
    assert [(b.gpu_type, ids(b)) for b in p.opened] == [(0, ["u", "a"])]
    # no types given: one bin, pinned to A by a
    assert [(b.gpu_type, ids(b)) for b in sg.pack_changes(["u", "a"], []).opened] == [(0, ["u", "a"])]


def test_the_bin_of_a_gpu_a_leaver_leaves_is_its_stayers_at_the_gpus_type() -> None:
    """GPU 2 (type B, 32 GB) holds a (0.5, 4 GB) and b (0.25, its fraction: 8 GB). a leaves as c
    (0.5) arrives: c joins GPU 2, whose bin is then b and c on B: 0.75 and 8 + 16 GB."""
    sg = packer(cluster=two_types())
    seat(sg, 2, t("a", 0.5, memory=4.0), t("b", 0.25))
    sg.register(t("c", 0.5))
    p = sg.pack_changes(["c"], ["a"])
    assert p.at == {"c": 2} and p.leaving == ["a"] and not p.emptied and not p.opened and p.gpus == 1
    b = p.joined[2]
    assert (b.gpu, b.gpu_type, ids(b)) == (2, 1, ["b", "c"])
    assert b.used == pytest.approx(0.75) and b.memory == pytest.approx(24.0)
    # the GPU's own bin is untouched until the packing is carried out
    assert ids(sg._bins[2]) == ["a", "b"] and sg.on[2] == [t("a", 0.5, memory=4.0), t("b", 0.25)]


def test_room_a_leaver_frees_is_counted_before_newcomers_are_placed() -> None:
    """GPU 0 holds a (0.75) and b (0.25), GPU 1 holds e (0.5). a leaves, c (0.75) arrives: GPU 0
    then has exactly 0.75: c goes there, not to a new GPU, even with no GPU free."""
    sg = packer()
    seat(sg, 0, t("a", 0.75), t("b", 0.25))
    seat(sg, 1, t("e", 0.5))
    sg.register(t("c", 0.75))
    p = sg.pack_changes(["c"], ["a"], free=2)
    assert p.at == {"c": 0} and p.gpus == 2 and list(p.joined) == [0]
    assert ids(p.joined[0]) == ["b", "c"]


def test_joined_lists_only_gpus_a_newcomer_joins() -> None:
    """A leaver changes GPU 1, a newcomer joins GPU 0: ``joined`` holds GPU 0 alone, as it will be."""
    sg = packer()
    seat(sg, 0, t("a", 0.5))
    seat(sg, 1, t("b", 0.25), t("c", 0.25))
    sg.register(t("n", 0.5))
    p = sg.pack_changes(["n"], ["b"])
    assert p.at == {"n": 0}
    assert list(p.joined) == [0] and ids(p.joined[0]) == ["a", "n"] and p.joined[0].gpu == 0
    # only leavers: nothing joined
    assert sg.pack_changes([], ["b"]).joined == {}
    assert sg.pack_changes([], ["b", "c"]).emptied == [1]


def test_a_second_newcomer_on_a_gpu_a_leaver_left_keeps_the_first() -> None:
    """GPU 0 holds a (0.5) and b (0.5); a leaves as c and d (0.25 each) arrive: both join GPU 0,
    whose bin is b, c, d."""
    sg = packer()
    seat(sg, 0, t("a", 0.5), t("b", 0.5))
    for x in (t("c", 0.25), t("d", 0.25)):
        sg.register(x)
    p = sg.pack_changes(["c", "d"], ["a"])
    assert p.at == {"c": 0, "d": 0} and ids(p.joined[0]) == ["b", "c", "d"]
    assert p.joined[0].used == pytest.approx(1.0)


def test_a_packing_that_needs_more_than_the_free_gpus_reports_one_more() -> None:
    """``free``: a packing that cannot fit stops with ``gpus == free + 1`` and never lists more new
    GPUs than are free. Three quarter-GPU jobs of 10 GB each fit no 16 GB GPU in pairs: each needs
    its own GPU. With a 10 GB tenant already on GPU 0 and one GPU free, the first newcomer is one
    too many (the fractions alone, 0.75 in 0.75 of room, did not show it)."""
    sg = packer()
    seat(sg, 0, t("a", 0.25, memory=10.0))
    for j in ("b", "c", "d"):
        sg.register(t(j, 0.25, memory=10.0))
    p = sg.pack_changes(["b", "c", "d"], [], free=1)
    assert p.gpus == 2 and not p.at and not p.opened
    p = sg.pack_changes(["b", "c", "d"], [], free=2)
    assert p.gpus == 3 and len(p.opened) <= 1
    p = sg.pack_changes(["b", "c", "d"], [], free=3)
    assert p.gpus == 4 and len(p.opened) <= 2
    p = sg.pack_changes(["b", "c", "d"], [], free=4)
    assert p.gpus == 4 and [ids(b) for b in p.opened] == [["b"], ["c"], ["d"]]
    # no shared GPU at all: four such jobs on two free GPUs
    sg = packer()
    for j in ("b", "c", "d", "e"):
        sg.register(t(j, 0.25, memory=10.0))
    p = sg.pack_changes(["b", "c", "d", "e"], [], free=2)
    assert p.gpus == 3 and len(p.opened) <= 2
    assert sg.pack_changes(["b", "c", "d", "e"], [], free=None).gpus == 4


def test_fractions_beyond_the_free_gpus_stop_at_once_with_one_more() -> None:
    """GPU 0 holds 0.5; newcomers of 0.75 and 0.75 need 1.5 of a GPU with 0.5 of room: at least one
    new GPU, so with only GPU 0's own (free = 1) the packing needs 2."""
    sg = packer()
    seat(sg, 0, t("a", 0.5))
    sg.register(t("b", 0.75))
    sg.register(t("c", 0.75))
    assert sg.pack_changes(["b", "c"], [], free=1).gpus == 2
    assert sg.pack_changes(["b", "c"], [], free=2).gpus == 3
    p = sg.pack_changes(["b", "c"], [], free=3)
    assert p.gpus == 3 and [ids(b) for b in p.opened] == [["b"], ["c"]]


def test_room_on_every_shared_gpu_counts_when_a_leaver_changes_one() -> None:
    """GPUs 0-2 each have 0.5 of room; on GPU 0, b (0.25) leaves: 0.75 there. Newcomers of 0.75,
    0.5 and 0.25 (1.5 in all) fit the 1.75 of room with no GPU free beyond the three."""
    sg = packer()
    seat(sg, 0, t("a", 0.25), t("b", 0.25))
    seat(sg, 1, t("c", 0.5))
    seat(sg, 2, t("d", 0.5))
    for j, f in (("x", 0.75), ("y", 0.5), ("z", 0.25)):
        sg.register(t(j, f))
    p = sg.pack_changes(["x", "y", "z"], ["b"], free=3)
    assert p.gpus == 3 and p.at == {"x": 0, "y": 1, "z": 2} and not p.opened
    assert sorted(p.joined) == [0, 1, 2]


def test_a_shareable_job_gets_a_gpu_to_itself_while_gpus_are_spare() -> None:
    """GPU 0 holds s0 (shareable, packed as 0.5). Two GPUs free for sharing jobs: one is s0's, one
    is spare: s1 gets it to itself; s2 then shares (GPU 0, the lowest of two with 0.5 of room)."""
    sg = packer()
    seat(sg, 0, t("s0", 0.5, declared=False))
    for j in ("s1", "s2"):
        sg.register(t(j, 0.5, declared=False))
    p = sg.pack_changes(["s1", "s2"], [], free=2)
    assert p.at == {"s2": 0} and [ids(b) for b in p.opened] == [["s1"]] and p.gpus == 2
    # three free: both get GPUs of their own
    p = sg.pack_changes(["s1", "s2"], [], free=3)
    assert not p.at and [ids(b) for b in p.opened] == [["s1"], ["s2"]] and p.gpus == 3
    # one free (s0's): no spare, both share
    p = sg.pack_changes(["s1"], [], free=1)
    assert p.at == {"s1": 0} and p.gpus == 1
    # no limit given: nothing spare, the shareable job shares
    assert sg.pack_changes(["s1"], []).at == {"s1": 0}
    # a job that asked for a fraction shares even with GPUs spare
    sg.register(t("f", 0.5))
    assert sg.pack_changes(["f"], [], free=4).at == {"f": 0}


def test_a_refusal_by_a_gpu_as_a_packing_would_change_it_is_not_remembered() -> None:
    """GPU 0 (16 GB) holds a (4 GB). In one packing n (8 GB) joins it and x (8 GB) is refused there;
    that refusal is of GPU 0 as the packing would leave it: packed alone next, x joins GPU 0."""
    sg = packer()
    seat(sg, 0, t("a", 0.25, memory=4.0))
    sg.register(t("n", 0.25, memory=8.0))
    sg.register(t("x", 0.25, memory=8.0))
    p = sg.pack_changes(["n", "x"], [])
    assert p.at == {"n": 0} and [ids(b) for b in p.opened] == [["x"]]
    assert sg.pack_changes(["x"], []).at == {"x": 0}


def test_a_gpu_refused_by_memory_is_asked_again_after_its_tenants_change() -> None:
    """GPU 0 holds a (0.25, 12 GB) and k (0.25, 1 GB): m (0.25, 8 GB) does not fit beside them, and
    still does not in a second packing (the refusal is remembered); in a packing where a leaves it
    fits; once b joins nothing changes for m; when a leaves, m fits again."""
    sg = packer()
    seat(sg, 0, t("a", 0.25, memory=12.0), t("k", 0.25, memory=1.0))
    sg.register(t("m", 0.25, memory=8.0))
    sg.register(t("b", 0.25, memory=1.0))
    assert sg.pack_changes(["m"], []).opened and sg.pack_changes(["m"], []).opened
    assert sg.pack_changes(["m"], ["a"]).at == {"m": 0}
    sg.commit(sg.pack_changes(["b"], []), lambda ty: 3, lambda g: None)
    assert sg.gpu_of == {"a": 0, "k": 0, "b": 0}
    assert sg.pack_changes(["m"], []).opened
    assert sg.forget("a") is None
    assert sg.pack_changes(["m"], []).at == {"m": 0}


# ---------------------------------------------------------------- what a GPU may take (_fits)
def test_a_typed_newcomer_joins_only_gpus_of_its_type() -> None:
    """GPU 0 is A's, GPU 2 B's, each with 0.5 of room."""
    sg = packer(cluster=two_types())
    seat(sg, 0, t("x", 0.5))
    seat(sg, 2, t("y", 0.5))
    for j, ty in (("qa", 0), ("qb", 1), ("qn", -1)):
        sg.register(t(j, 0.5, gpu_type=ty))
    assert sg.pack_changes(["qa"], []).at == {"qa": 0}
    assert sg.pack_changes(["qb"], []).at == {"qb": 2}
    assert sg.pack_changes(["qn"], []).at == {"qn": 0}
    # only B's GPU has room: the type-A job opens a new GPU of type A
    sg = packer(cluster=two_types())
    seat(sg, 2, t("y", 0.5))
    sg.register(t("qa", 0.5, gpu_type=0))
    p = sg.pack_changes(["qa"], [])
    assert not p.at and [(b.gpu_type, ids(b)) for b in p.opened] == [(0, ["qa"])]
    # only A's GPU has room: the type-B job opens a new GPU of type B
    sg = packer(cluster=two_types())
    seat(sg, 0, t("x", 0.5))
    sg.register(t("qb", 0.5, gpu_type=1))
    p = sg.pack_changes(["qb"], [])
    assert not p.at and [(b.gpu_type, ids(b)) for b in p.opened] == [(1, ["qb"])]


def test_a_clash_is_asked_for_the_pair_in_order_on_the_gpus_type() -> None:
    """The clash function is asked (newcomer's kind, tenant's kind, GPU type); here only kind 1
    beside kind 0 clashes, and only on type B (index 1); a new GPU of no type asks for type 0."""
    def clash(a: int, b: int, ty: int) -> bool:
        return (a, b, ty) == (1, 0, 1)

    sg = packer(cluster=two_types(), clash=clash)
    seat(sg, 2, t("old0", 0.5, kind=0, declared=False))
    sg.register(t("new1", 0.5, kind=1, declared=False))
    assert not sg.pack_changes(["new1"], []).at  # (1, 0, B): apart
    sg = packer(cluster=two_types(), clash=clash)
    seat(sg, 0, t("old0", 0.5, kind=0, declared=False))
    sg.register(t("new1", 0.5, kind=1, declared=False))
    assert sg.pack_changes(["new1"], []).at == {"new1": 0}  # on A: no clash
    sg = packer(cluster=two_types(), clash=clash)
    seat(sg, 2, t("old1", 0.5, kind=1, declared=False))
    sg.register(t("new0", 0.5, kind=0, declared=False))
    assert sg.pack_changes(["new0"], []).at == {"new0": 2}  # (0, 1, B): no clash
    # a new GPU of no type is asked as type 0
    sg = packer(cluster=two_types(), clash=lambda a, b, ty: ty == 0)
    for j in ("u", "v"):
        sg.register(t(j, 0.25, declared=False))
    assert len(sg.pack_changes(["u", "v"], []).opened) == 2
    sg = packer(cluster=two_types(), clash=lambda a, b, ty: ty == 1)
    for j in ("u", "v"):
        sg.register(t(j, 0.25, declared=False))
    assert len(sg.pack_changes(["u", "v"], []).opened) == 1


def test_a_clash_keeps_a_declared_job_from_a_shareable_one() -> None:
    """Only two jobs that both declared their fractions share despite a clash."""
    sg = packer(clash=lambda a, b, ty: True)
    seat(sg, 0, t("s", 0.5, declared=False))
    sg.register(t("f", 0.25))
    assert sg.pack_changes(["f"], []).opened
    sg = packer(clash=lambda a, b, ty: True)
    seat(sg, 0, t("f0", 0.5))
    sg.register(t("s", 0.25, declared=False))
    assert sg.pack_changes(["s"], []).opened
    sg.register(t("f", 0.25))
    assert sg.pack_changes(["f"], []).at == {"f": 0}


def test_a_pair_that_keeps_nothing_is_never_packed_even_under_pack() -> None:
    """f(a|b) = 0 (Gavel's "did not fit"): no floor, yet the pair stays apart."""
    sg = SharedGpus(Cluster.for_gpus(4, 4), SharingRule("pack"), lambda a, b, ty: 0.0 if (a, b) == (0, 1) else 1.0)
    seat(sg, 0, t("b", 0.25, kind=1))
    sg.register(t("a", 0.25, kind=0))
    assert sg.pack_changes(["a"], []).opened
    sg.register(t("c", 0.25, kind=1))
    assert sg.pack_changes(["c"], []).at == {"c": 0}


def test_aware_admits_a_tenant_at_its_floor_within_the_tolerance() -> None:
    """Under aware:0.6, a pair where a keeps exactly 0.6 − 1e-9 shares; one that keeps 0.599 not."""
    floor = 0.6
    for kept, shares in ((floor - 1e-9, True), (0.599, False), (floor, True)):
        sg = SharedGpus(Cluster.for_gpus(2, 2), SharingRule("aware", floor), lambda a, b, ty, k=kept: k)
        seat(sg, 0, t("x", 0.5))
        sg.register(t("y", 0.5))
        assert bool(sg.pack_changes(["y"], []).at) is shares


def test_aware_checks_every_tenant_beside_all_the_others() -> None:
    """aware:0.45. x (kind 0) with z (kind 0): x keeps 0.7. Adding q (kind 1): x keeps 0.7 × 0.6
    = 0.42 < 0.45: refused; under aware:0.4 it fits. retained() reports the product."""
    for floor, fits in ((0.45, False), (0.4, True)):
        sg = SharedGpus(Cluster.for_gpus(2, 2), SharingRule("aware", floor), retained)
        seat(sg, 0, t("x", 0.25, kind=0), t("z", 0.25, kind=0))
        sg.register(t("q", 0.25, kind=1))
        assert (sg.pack_changes(["q"], []).at == {"q": 0}) is fits
    seat(sg, 1, t("x2", 0.25, kind=0), t("z2", 0.25, kind=0), t("q2", 0.25, kind=1))
    assert sg.retained("x2") == pytest.approx(0.7 * 0.6)
    assert sg.retained("q2") == pytest.approx(0.8 * 0.8)
    assert sg.retained("nobody") == 1.0
    sg = packer()
    seat(sg, 0, t("alone", 0.25))
    assert sg.retained("alone") == 1.0


# ---------------------------------------------------------------- carrying a packing out: the books
def test_the_books_follow_tenants_joining_and_leaving_a_gpu() -> None:
    """GPU 2 (type B, 32 GB): a (0.5, its fraction: 16 GB) and b (0.25, 4 GB). Each change updates
    the GPU's tenants, bin, room, memory, count, the per-type tallies and the touched set."""
    sg = packer(cluster=two_types())
    a, b, c = t("a", 0.5), t("b", 0.25, memory=4.0), t("c", 0.25)
    for x in (a, b, c):
        sg.register(x)
    where = sg.open([Bin(NEW, 1, [a, b])], lambda ty: {1: 2}[ty])
    assert where == {"a": 2, "b": 2} and sg.gpu_of == {"a": 2, "b": 2} and sg.on == {2: [a, b]}
    assert sg._bins[2].gpu == 2 and sg._bins[2].gpu_type == 1 and ids(sg._bins[2]) == ["a", "b"]
    assert sg._room.tolist() == [-1.0, -1.0, 0.25, -1.0] and sg._memory.tolist() == [0, 0, 20.0, 0]
    assert sg._count.tolist() == [0, 0, 2, 0] and sg._room_sum == pytest.approx(0.25)
    assert sg.saved_by_type().tolist() == [0, 1] and sg._shared_by_type.tolist() == [0, 1]
    assert sg.gpus_used == 1
    assert sg.take_touched() == {2} and sg.take_touched() == set()
    # c joins GPU 2 (0.25, 8 GB)
    p = sg.pack_changes(["c"], [])
    assert p.at == {"c": 2}
    assert sg.join(p) == {"c": 2}
    assert sg.on[2] == [a, b, c] and sg.gpu_of["c"] == 2 and ids(sg._bins[2]) == ["a", "b", "c"]
    assert sg._room[2] == pytest.approx(0.0) and sg._memory[2] == pytest.approx(28.0) and sg._count[2] == 3
    assert sg.saved_by_type().tolist() == [0, 2] and sg._shared_by_type.tolist() == [0, 1]
    assert sg.take_touched() == {2}
    assert sg.join(p) == {"c": 2} and sg.on[2] == [a, b, c] and sg.take_touched() == set()  # already there
    # b leaves
    assert sg.forget("b") is None
    assert sg.on[2] == [a, c] and "b" not in sg.gpu_of and "b" not in sg.tenants
    assert sg._room[2] == pytest.approx(0.25) and sg._memory[2] == pytest.approx(24.0) and sg._count[2] == 2
    assert sg._bins[2].used == pytest.approx(0.75) and ids(sg._bins[2]) == ["a", "c"]
    assert sg.saved_by_type().tolist() == [0, 1] and sg._room_sum == pytest.approx(0.25)
    assert sg.take_touched() == {2}
    # a leaves: c alone
    assert sg.forget("a") is None
    assert sg._count[2] == 1 and sg.saved_by_type().tolist() == [0, 0] and sg._shared_by_type.tolist() == [0, 1]
    assert sg._room_sum == pytest.approx(0.75)
    # c leaves: the GPU is given back and forgotten
    assert sg.forget("c") == 2
    assert sg.on == {} and sg.gpu_of == {} and 2 not in sg._bins and sg.gpus_used == 0
    assert sg._room.tolist() == [-1.0] * 4 and sg._memory.tolist() == [0.0] * 4 and sg._count.tolist() == [0] * 4
    assert sg.saved_by_type().tolist() == [0, 0] and sg._shared_by_type.tolist() == [0, 0]
    assert sg._room_sum == pytest.approx(0.0) and sg.take_touched() == {2}
    assert sg.forget("c") is None and sg.forget("never") is None and sg.take_touched() == set()


def test_the_tallies_are_kept_per_type() -> None:
    """Three tenants on GPU 0 (A), one on GPU 1 (A), two on GPU 3 (B): A holds 2 shared GPUs and
    saves 2, B holds 1 and saves 1. saved_by_type is a copy."""
    sg = packer(cluster=two_types())
    seat(sg, 0, t("a", 0.25), t("b", 0.25), t("c", 0.25))
    seat(sg, 1, t("d", 0.5))
    seat(sg, 3, t("e", 0.5), t("f", 0.5))
    assert sg._shared_by_type.tolist() == [2, 1] and sg.saved_by_type().tolist() == [2, 1]
    assert sg._count.tolist() == [3, 1, 0, 2]
    sg.saved_by_type()[0] = 99
    assert sg.saved_by_type().tolist() == [2, 1]
    assert sg.used_by_type(sg.pack_changes([], []))[0].tolist() == [2, 1]
    assert sg._room_sum == pytest.approx(0.25 + 0.5 + 0.0)
    assert sg.forget("d") == 1 and sg._shared_by_type.tolist() == [1, 1] and sg.saved_by_type().tolist() == [2, 1]


def test_commit_releases_first_then_joins_then_opens() -> None:
    """GPU 0 holds a (0.75), GPU 1 holds b (0.5). a leaves, c (0.5) joins GPU 1, d (0.75) needs a
    new GPU: GPU 0 is given back first, so ``take`` may hand it out again for d."""
    sg = packer()
    seat(sg, 0, t("a", 0.75))
    seat(sg, 1, t("b", 0.5))
    for x in (t("c", 0.5), t("d", 0.75)):
        sg.register(x)
    free: list[int] = [2, 3]
    calls: list[tuple[str, int]] = []

    def give_back(g: int) -> None:
        calls.append(("back", g))
        free.insert(0, g)

    def take(ty: int) -> int:
        calls.append(("take", ty))
        return free.pop(0)

    p = sg.pack(["b", "c", "d"])
    assert p.leaving == ["a"] and p.emptied == [0] and p.at == {"c": 1} and [ids(x) for x in p.opened] == [["d"]]
    where = sg.commit(p, take, give_back)
    assert calls == [("back", 0), ("take", -1)]
    assert where == {"c": 1, "d": 0} and sg.gpu_of == {"b": 1, "c": 1, "d": 0}
    assert sg.on == {1: [t("b", 0.5), t("c", 0.5)], 0: [t("d", 0.75)]}


def test_release_gives_back_only_gpus_left_empty() -> None:
    sg = packer()
    seat(sg, 0, t("a", 0.5), t("b", 0.5))
    seat(sg, 1, t("c", 0.5))
    back: list[int] = []
    sg.release(sg.pack(["b"]), back.append)
    assert back == [1] and sg.gpu_of == {"b": 0} and sg.on == {0: [t("b", 0.5)]}


def test_open_asks_for_a_gpu_of_each_bins_type() -> None:
    sg = packer(cluster=two_types())
    for x in (t("u", 0.5), t("q", 0.75, gpu_type=1)):
        sg.register(x)
    asked: list[int] = []

    def take(ty: int) -> int:
        asked.append(ty)
        return 3 if ty == 1 else 0

    p = sg.pack(["u", "q"], types={})
    assert sorted(b.gpu_type for b in p.opened) == [-1, 1]
    assert sg.open(p.opened, take) == {"u": 0, "q": 3}
    assert sorted(asked) == [-1, 1] and sg._shared_by_type.tolist() == [1, 1]
    assert sg._memory[0] == pytest.approx(8.0) and sg._memory[3] == pytest.approx(24.0)
    assert sg.gpu_of == {"u": 0, "q": 3} and sg._room[[0, 3]].tolist() == pytest.approx([0.5, 0.25])


def test_pack_passes_its_limit_and_types_on() -> None:
    """``pack`` is pack_changes of what differs: its ``free`` and ``types`` count."""
    sg = packer(cluster=two_types())
    seat(sg, 0, t("x", 0.5))
    for j in ("b", "c"):
        sg.register(t(j, 0.75))
    assert sg.pack(["x", "b", "c"], free=1).gpus == 2
    assert sg.pack(["x", "b", "c"]).gpus == 3
    sg.register(t("u", 0.5))
    assert sg.pack(["x", "u"]).at == {"u": 0}
    p = sg.pack(["x", "u"], None, {"u": 1})
    assert not p.at and [b.gpu_type for b in p.opened] == [1]
    assert sg.pack(["x", "u"], 1, {"u": 1}).gpus == 2


# ---------------------------------------------------------------- room for waiting jobs
def scene() -> tuple[SharedGpus, object]:
    """Now: GPU 0 (A) holds a (0.5); GPU 2 (B) holds b (0.25); GPU 3 (B) holds c (0.75).
    The packing, largest first: c leaves (GPU 3 emptied); u (0.75) takes GPU 2's 0.75 of room;
    q (0.5, type B) finds no B GPU with room: a new one of type B; n (0.25) joins GPU 0."""
    sg = packer(cluster=two_types())
    seat(sg, 0, t("a", 0.5))
    seat(sg, 2, t("b", 0.25))
    seat(sg, 3, t("c", 0.75))
    for x in (t("n", 0.25), t("q", 0.5, gpu_type=1), t("u", 0.75)):
        sg.register(x)
    return sg, sg.pack(["a", "b", "n", "q", "u"])


def test_the_scene_packs_as_described() -> None:
    sg, p = scene()
    assert p.emptied == [3] and p.leaving == ["c"]
    assert p.at == {"u": 2, "n": 0}
    assert [(b.gpu_type, ids(b)) for b in p.opened] == [(1, ["q"])]


def test_room_counts_what_each_gpu_of_a_packing_could_still_take() -> None:
    """After the scene's packing: GPU 0 has 0.25 of room (a, n), GPU 2 none (b, u), GPU 3 is
    emptied, the new B GPU has 0.5. Jobs of 0.25: 1 on A, 2 on B; of 0.5: 1 on B."""
    sg, p = scene()
    per, anywhere = sg.room(p, 2, 10, 0.25)
    assert per.tolist() == [1, 2] and anywhere == 0
    per, anywhere = sg.room(p, 2, 10, 0.5)
    assert per.tolist() == [0, 1] and anywhere == 0
    per, anywhere = sg.room(p, 2, 2, 0.25)  # no more than are waiting: the roomiest type first
    assert per.tolist() == [0, 2] and anywhere == 0
    per, anywhere = sg.room(p, 2, 0, 0.25)
    assert per.tolist() == [0, 0] and anywhere == 0
    assert sg.has_room(p, 1, 0.5) and sg.has_room(p, 1, 0.25)
    assert not sg.has_room(p, 1, 0.75) and not sg.has_room(p, 0, 0.25)
    used, anywhere = sg.used_by_type(p)
    assert used.tolist() == [1, 2] and anywhere == 0  # A: GPU 0; B: GPU 2 and the new one (GPU 3 emptied)
    assert sg._shared_by_type.tolist() == [1, 2]  # unchanged by asking


def test_room_on_new_gpus_of_no_type_is_counted_apart() -> None:
    """Two new GPUs of no type: u (0.75, room 0.25) and v (0.5, room 0.5); one new B GPU, w (0.75)."""
    sg = packer(cluster=two_types())
    for x in (t("u", 0.75), t("v", 0.5), t("w", 0.75, gpu_type=1)):
        sg.register(x)
    p = sg.pack(["u", "v", "w"])
    assert sorted((b.gpu_type, tuple(ids(b))) for b in p.opened) == [(-1, ("u",)), (-1, ("v",)), (1, ("w",))]
    per, anywhere = sg.room(p, 2, 10, 0.25)
    assert per.tolist() == [0, 1] and anywhere == 3
    per, anywhere = sg.room(p, 2, 3, 0.25)
    assert per.tolist() == [0, 1] and anywhere == 2
    per, anywhere = sg.room(p, 2, 1, 0.25)
    assert per.tolist() == [0, 1] and anywhere == 0
    per, anywhere = sg.room(p, 2, 10, 0.5)
    assert per.tolist() == [0, 0] and anywhere == 1
    used, anywhere = sg.used_by_type(p)
    assert used.tolist() == [0, 1] and anywhere == 2
    assert sg.has_room(p, 1, 0.5) and not sg.has_room(p, 1, 0.6)


def test_room_reads_a_joined_gpu_as_the_packing_leaves_it() -> None:
    """GPU 0 has 0.5 of room now; a packing fills it: no room there. GPU 1's 0.25, untouched, counts."""
    sg = packer()
    seat(sg, 0, t("a", 0.5))
    seat(sg, 1, t("b", 0.75))
    sg.register(t("n", 0.5))
    p = sg.pack(["a", "b", "n"])
    assert p.at == {"n": 0}
    assert sg.room(p, 1, 10, 0.25)[0].tolist() == [1]
    assert sg.room(p, 1, 10, 0.5)[0].tolist() == [0]
    assert not sg.has_room(p, 1, 0.5) and sg.has_room(p, 1, 0.25)
    # an emptied GPU's room does not count either
    p = sg.pack(["a"])
    assert p.emptied == [1] and not sg.has_room(p, 1, 0.75) and sg.has_room(p, 1, 0.5)
    assert sg.room(p, 1, 10, 0.25)[0].tolist() == [2]


def test_room_allows_for_rounding() -> None:
    """A GPU holding 0.9 has 1 − 0.9 = 0.0999…98 left: room for one 0.1 job."""
    sg = packer()
    seat(sg, 0, t("a", 0.9))
    p = sg.pack(["a"])
    assert sg.room(p, 1, 5, 0.1)[0].tolist() == [1] and sg.has_room(p, 1, 0.1)
    sg.register(t("b", 0.1))
    assert sg.pack(["a", "b"]).at == {"b": 0}
    sg = packer()
    for j in ("x", "y"):
        sg.register(t(j, 0.9))
    sg.register(t("z", 0.1))
    p = sg.pack(["x", "y"])
    per, anywhere = sg.room(p, 1, 5, 0.1)
    assert per.tolist() == [0] and anywhere == 2
    assert sg.has_room(p, 1, 0.1)


# ---------------------------------------------------------------- speed beside co-tenants
def test_observe_learns_only_from_a_job_beside_exactly_one_other() -> None:
    """x (kind 0) and y (kind 1) on GPU 2 (type B). f is read per (kind, kind, type): x keeps 0.6
    beside y, y 0.8 beside x (on B, 0.9 for x). Observing y at 0.4 moves (1, 0, B) halfway."""
    def by_type(a: int, b: int, ty: int) -> float:
        return 0.9 if (a, b, ty) == (0, 1, 1) else PAIR[(a, b)]

    sg = SharedGpus(two_types(), SharingRule("aware", 0.3), by_type)
    seat(sg, 2, t("x", 0.5, kind=0), t("y", 0.5, kind=1))
    assert sg.retained("x") == pytest.approx(0.9) and sg.retained("y") == pytest.approx(0.8)
    assert sg.observe("y", 0.4)
    assert sg.measured == {(1, 0, 1): pytest.approx(0.6)}
    assert sg.retained("y") == pytest.approx(0.6) and sg.retained("x") == pytest.approx(0.9)
    assert sg.observe("x", 1.5, weight=0.25)  # a measurement above 1 counts as 1
    assert sg.measured[(0, 1, 1)] == pytest.approx(0.75 * 0.9 + 0.25 * 1.0)
    before = dict(sg.measured)
    assert not sg.observe("x", 0.0) and not sg.observe("y", -1.0) and sg.measured == before
    # alone, or beside two: nothing learnt
    sg.register(t("z", 0.25, kind=0))
    sg.register(t("w", 0.25, kind=0))
    sg.commit(sg.pack_changes(["z"], []), lambda ty: 0, lambda g: None)
    assert sg.gpu_of["z"] == 0 and not sg.observe("z", 0.5)
    sg.commit(sg.pack_changes(["w"], ["y"]), lambda ty: 1, lambda g: None)
    assert sg.gpu_of == {"x": 2, "z": 0, "w": 2}  # best fit: GPU 2 has 0.5 left, GPU 0 0.75
    assert sg.on[2] == [t("x", 0.5, kind=0), t("w", 0.25, kind=0)]
    assert sg.observe("w", 0.5) and sg.measured[(0, 0, 1)] == pytest.approx(0.5 * 0.7 + 0.5 * 0.5)
    seat(sg, 1, t("p", 0.25), t("q", 0.25), t("r", 0.25))
    before = dict(sg.measured)
    assert not sg.observe("q", 0.5) and sg.measured == before


def test_measured_pairs_replace_the_table_in_packing() -> None:
    """aware:0.65: x (kind 0) beside y (kind 1) keeps 0.6 by the table: apart. Once the pair is
    measured at 0.9 (weight 1: the measurement replaces the value), together."""
    sg = SharedGpus(Cluster.for_gpus(4, 4), SharingRule("aware", 0.65), retained)
    seat(sg, 0, t("x0", 0.5, kind=0), t("y0", 0.5, kind=1))
    seat(sg, 1, t("x", 0.5, kind=0))
    sg.register(t("y", 0.5, kind=1))
    assert sg.pack_changes(["y"], []).opened
    assert sg.observe("x0", 0.9, weight=1.0)
    assert sg.measured == {(0, 1, 0): pytest.approx(0.9)}
    assert sg.pack_changes(["y"], []).at == {"y": 1}


def test_a_tenant_of_a_job_spec() -> None:
    from coddl.core.job import JobSpec

    base = dict(arrival=0.0, requested_gpus=1, total_work=10.0, model="a")
    f = Tenant.of(JobSpec(job_id="f", gpu_fraction=0.25, gpu_memory_gb=3.0, **base), 2, 1)
    assert f == Tenant("f", 0.25, 3.0, 2, 1, True)
    s = Tenant.of(JobSpec(job_id="s", shareable=True, **base), 1, -1)
    assert s == Tenant("s", 0.5, None, 1, -1, False)
    assert s.declared is False and f.declared is True


def test_memory_is_a_need_capped_at_the_gpu_or_a_fraction_of_it() -> None:
    sg = packer(cluster=two_types(a_mem=16.0, b_mem=40.0))
    assert sg.capacity_of(0) == 16.0 and sg.capacity_of(1) == 40.0 and sg.capacity_of(-1) == 16.0
    assert sg.memory_of(t("f", 0.25), 1) == pytest.approx(10.0)
    assert sg.memory_of(t("f", 0.25), -1) == pytest.approx(4.0)
    assert sg.memory_of(t("m", 0.25, memory=24.0), 1) == 24.0
    assert sg.memory_of(t("m", 0.25, memory=24.0), 0) == 16.0
    sg = packer(cluster=two_types(a_mem=40.0, b_mem=24.0))
    assert sg.capacity_of(-1) == 24.0 and sg.capacity_of(0) == 40.0 and sg.capacity_of(1) == 24.0
    assert sg.memory_of(t("f", 0.25), 0) == pytest.approx(10.0)


def test_defaults_keep_every_pair_at_full_speed_and_clash_none() -> None:
    sg = SharedGpus(Cluster.for_gpus(2, 2), SharingRule("aware", 0.99))
    seat(sg, 0, t("a", 0.5, kind=3, declared=False))
    sg.register(t("b", 0.5, kind=7, declared=False))
    assert sg.pack_changes(["b"], []).at == {"b": 0}
    sg.commit(sg.pack_changes(["b"], []), lambda ty: 1, lambda g: None)
    assert sg.retained("a") == 1.0 and sg.retained("b") == 1.0
    assert sg.cluster.total_gpus == 2 and sg.rule == SharingRule("aware", 0.99)
    assert sg.touched == {0} and sg.tenants.keys() == {"a", "b"}


# ---------------------------------------------------------------- the rule
@pytest.mark.parametrize("text, mode, floor", [
    ("exclusive", "exclusive", 0.5), ("pack", "pack", 0.5), ("aware", "aware", 0.5), (" aware ", "aware", 0.5),
    ("aware:", "aware", 0.5), ("aware:min_retained=0.6", "aware", 0.6), ("aware:min_retained=0", "aware", 0.0),
    ("aware:min_retained=1", "aware", 1.0), ("aware:min_retained=0.2,min_retained=0.7", "aware", 0.7)])
def test_a_rule_is_parsed(text: str, mode: str, floor: float) -> None:
    rule = SharingRule.parse(text)
    assert (rule.mode, rule.min_retained) == (mode, floor)
    assert rule.shares is (mode != "exclusive")


@pytest.mark.parametrize("text, message", [
    ("share", "unknown sharing rule 'share'; valid: exclusive, pack, aware[:min_retained=F]"),
    ("pack:min_retained=0.5", "sharing rule 'pack:min_retained=0.5': unknown option 'min_retained'; pack takes none"),
    ("exclusive:x=1", "sharing rule 'exclusive:x=1': unknown option 'x'; exclusive takes none"),
    ("aware:floor=1", "sharing rule 'aware:floor=1': unknown option 'floor'; valid: min_retained"),
    ("aware:min_retained=x", "sharing rule 'aware:min_retained=x': min_retained must be a number, got 'x'"),
    ("aware:min_retained=0.5=1", "sharing rule 'aware:min_retained=0.5=1': min_retained must be a number, got '0.5=1'"),
    ("aware:min_retained=1.5", "sharing rule 'aware:min_retained=1.5': min_retained must be in [0, 1], got 1.5"),
    ("aware:min_retained=-0.1", "sharing rule 'aware:min_retained=-0.1': min_retained must be in [0, 1], got -0.1")])
def test_a_bad_rule_says_exactly_what_is_wrong(text: str, message: str) -> None:
    from coddl.placement.sharing import SharingRuleError

    with pytest.raises(SharingRuleError) as e:
        SharingRule.parse(text)
    assert str(e.value) == message


def test_a_sharing_rule_refuses_a_policy_that_assigns_cores() -> None:
    from coddl.placement.sharing import SharingRuleError
    from coddl.policies.base import Policy
    from coddl.policies.registry import make_policy

    class Cores(Policy):
        name = "cores"

        def allocate(self, ctx):  # pragma: no cover - never asked
            raise AssertionError

        def assigns_cores(self) -> bool:
            return True

    with pytest.raises(SharingRuleError) as e:
        SharingRule("pack").check_policy(make_policy("aiturbo"))
    assert str(e.value) == ("policy aiturbo assigns each job its CPU cores, which jobs sharing a GPU cannot have "
                            "(they run on their GPU's cores): use sharing 'exclusive' or aiturbo:unified=false")
    with pytest.raises(SharingRuleError) as e:
        SharingRule("aware").check_policy(Cores())
    assert str(e.value) == ("policy cores assigns each job its CPU cores, which jobs sharing a GPU cannot have "
                            "(they run on their GPU's cores): use sharing 'exclusive'")
    SharingRule("exclusive").check_policy(Cores())
    SharingRule("pack").check_policy(make_policy("aiturbo:unified=false"))
    SharingRule("pack").check_policy(make_policy("fifo"))


# ---------------------------------------------------------------- against a plain best-fit-decreasing
EIGHTHS = st.sampled_from([0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875])  # exact in binary: no rounding


def reference(groups: list[list[tuple[str, float]]], arriving: list[tuple[str, float]], leaving: set[str]):
    """Best fit decreasing written plainly: GPU g holds groups[g]; leavers go; newcomers, largest
    first (then by id), go where the least room is left (the lowest GPU among equals, existing GPUs
    before new ones), else to a new GPU. Returns (at, opened tenants, gpus)."""
    room = {g: 1.0 - sum(f for j, f in grp if j not in leaving) for g, grp in enumerate(groups)
            if any(j not in leaving for j, _ in grp)}
    opened: list[list[str]] = []
    new_room: list[float] = []
    at = {}
    for j, f in sorted(arriving, key=lambda x: (-x[1], x[0])):
        options = [(r, g) for g, r in room.items() if r >= f] + [(r, len(groups) + k) for k, r in enumerate(new_room) if r >= f]
        if options:
            r, g = min(options)
            if g < len(groups):
                room[g] -= f
                at[j] = g
            else:
                new_room[g - len(groups)] -= f
                opened[g - len(groups)].append(j)
        else:
            opened.append([j])
            new_room.append(1.0 - f)
    return at, opened, len(room) + len(opened)


@settings(max_examples=150, deadline=None)
@given(groups=st.lists(st.lists(EIGHTHS, min_size=1, max_size=3).filter(lambda g: sum(g) <= 1), max_size=6),
       arriving=st.lists(EIGHTHS, max_size=8), gone=st.sets(st.integers(0, 20)))
def test_packing_is_plain_best_fit_decreasing(groups, arriving, gone) -> None:
    sg = packer(16)
    named = [[(f"g{g}t{i}", f) for i, f in enumerate(grp)] for g, grp in enumerate(groups)]
    for g, grp in enumerate(named):
        seat(sg, g, *(t(j, f) for j, f in grp))
    placed = [j for grp in named for j, _ in grp]
    leaving = [j for i, j in enumerate(placed) if i in gone]
    new = [(f"n{i}", f) for i, f in enumerate(arriving)]
    for j, f in new:
        sg.register(t(j, f))
    at, opened, gpus = reference(named, new, set(leaving))
    p = sg.pack_changes([j for j, _ in new], leaving)
    assert p.at == at and [ids(b) for b in p.opened] == opened and p.gpus == gpus
    assert p.leaving == leaving
    assert sorted(p.emptied) == sorted(g for g, grp in enumerate(named) if grp and all(j in leaving for j, _ in grp))
    for b in p.opened:
        assert b.gpu == NEW and b.used == pytest.approx(sum(f for j, f in new if j in ids(b)))
    for g, b in p.joined.items():
        stay = [j for j, _ in named[g] if j not in leaving]
        assert ids(b) == stay + sorted((j for j in at if at[j] == g), key=lambda j: (-dict(new)[j], j))
        assert b.gpu == g and b.used == pytest.approx(1.0 - sg._room[g] - sum(f for j, f in named[g] if j in leaving)
                                                       + sum(dict(new)[j] for j in at if at[j] == g))
    assert set(p.joined) == set(at.values())
    # with exactly the GPUs it needs it fits; with one fewer it reports one more than given
    assert sg.pack_changes([j for j, _ in new], leaving, free=gpus).gpus == gpus
    if gpus > 0:
        assert sg.pack_changes([j for j, _ in new], leaving, free=gpus - 1).gpus == gpus
    # carried out, the books agree with the tenants
    free = list(range(len(groups), 16))
    sg.commit(p, lambda ty: free.pop(0), free.append)
    for g, grp in sg.on.items():
        assert sg._room[g] == pytest.approx(1.0 - sum(x.fraction for x in grp)) and sg._count[g] == len(grp)
    assert sg._room_sum == pytest.approx(sum(1.0 - sum(x.fraction for x in grp) for grp in sg.on.values()))
    assert sg.saved_by_type().tolist() == [sum(len(grp) - 1 for grp in sg.on.values())]
    assert sg._shared_by_type.tolist() == [len(sg.on)] and sg.gpus_used == gpus



def test_a_policy_choosing_type_a_pins_type_a() -> None:
    """The policy puts u on A (type index 0): b, which must run on B, cannot share u's new GPU."""
    sg = packer(cluster=two_types())
    for x in (t("u", 0.5), t("b", 0.25, gpu_type=1)):
        sg.register(x)
    p = sg.pack_changes(["u", "b"], [], types={"u": 0})
    assert [(x.gpu_type, ids(x)) for x in p.opened] == [(0, ["u"]), (1, ["b"])]
    assert [(x.gpu_type, ids(x)) for x in sg.pack_changes(["u", "b"], []).opened] == [(1, ["u", "b"])]


def test_room_counts_new_gpus_of_type_a_and_adds_to_a_types_shared_gpus() -> None:
    """GPU 0 (A) holds a (0.5), GPU 2 (B) holds b (0.5). New: qa (0.75, type A) and qb (0.75, type B)
    each on a GPU of their own (no shared GPU has 0.75 of room). Quarter jobs: A 2 + 1, B 2 + 1."""
    sg = packer(cluster=two_types())
    seat(sg, 0, t("a", 0.5))
    seat(sg, 2, t("b", 0.5))
    for x in (t("qa", 0.75, gpu_type=0), t("qb", 0.75, gpu_type=1)):
        sg.register(x)
    p = sg.pack(["a", "b", "qa", "qb"])
    assert sorted((x.gpu_type, tuple(ids(x))) for x in p.opened) == [(0, ("qa",)), (1, ("qb",))]
    per, anywhere = sg.room(p, 2, 10, 0.25)
    assert per.tolist() == [3, 3] and anywhere == 0 and per.dtype.kind == "i"
    assert sg.room(p, 2, 0, 0.25)[0].dtype.kind == "i"
    used, anywhere = sg.used_by_type(p)
    assert used.tolist() == [2, 2] and anywhere == 0


def test_has_room_allows_the_packers_tolerance() -> None:
    """A job EPS (1e-9) larger than a GPU's room still counts as fitting, as the packer takes it."""
    sg = packer()
    seat(sg, 0, t("a", 0.5))
    sg.register(t("b", 0.75))
    p = sg.pack(["a", "b"])  # b on a new GPU, 0.25 of room there; GPU 0 keeps 0.5
    assert sg.has_room(p, 1, 0.5 + 1e-9) and not sg.has_room(p, 1, 0.5 + 1e-6)
    sg2 = packer()
    sg2.register(t("b", 0.5))
    p = sg2.pack(["b"])
    assert sg2.has_room(p, 1, 0.5 + 1e-9) and not sg2.has_room(p, 1, 0.5 + 1e-6)


def test_room_caps_ties_in_type_order() -> None:
    """17 types, one GPU each; quarter jobs fit 2 on a type whose GPU holds 0.5, 1 where it holds
    0.75. Three waiting: the roomiest types first and, among equals, the lower type: 2 on type 0,
    1 on type 9 (a sort that is not stable may pick another of the tied types)."""
    per = [2, 1, 1, 0, 0, 0, 0, 0, 0, 2, 1, 2, 1, 1, 2, 2, 1]
    cluster = Cluster(nodes=tuple(Node(f"n{i}", 1, f"T{i}") for i in range(17)),
                      gpu_types={f"T{i}": GpuType(f"T{i}") for i in range(17)})
    sg = packer(cluster=cluster)
    for g, n in enumerate(per):
        if n:
            seat(sg, g, t(f"j{g}", 0.5 if n == 2 else 0.75))
    p = sg.pack(list(sg.gpu_of))
    assert sg.room(p, 17, 100, 0.25)[0].tolist() == per
    expect = [0] * 17
    expect[0], expect[9] = 2, 1
    assert sg.room(p, 17, 3, 0.25)[0].tolist() == expect
