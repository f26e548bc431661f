"""The analytic estimator: hand-computed all-reduce and overlap cases, the placement question,
heterogeneity, and monotonicity properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.core.cluster import Cluster, GpuType, LinkSpec, Node
from coddl.perf.estimator import (ComputeModel, JobProfile, Placement, ThroughputModel, allreduce_seconds,
                                  overlapped)

LINKS = LinkSpec(intra_node_gbps=10.0, inter_node_gbps=1.0, intra_node_latency_us=5.0, inter_node_latency_us=20.0)
MB100 = 100e6  # four 25 MB buckets


def ar(placement: Placement, algorithm: str = "ring", links: LinkSpec = LINKS, nbytes: float = MB100) -> float:
    return float(allreduce_seconds(nbytes, np.array([placement.num_gpus]), np.array([placement.num_nodes]),
                                   np.array([placement.max_per_node]), links, algorithm)[0])


def test_ring_allreduce_inside_one_node_by_hand():
    # 2(k−1)/k · bytes / bw + 2(k−1) steps × 4 buckets × latency
    assert ar(Placement.on((4,))) == pytest.approx(2 * 3 / 4 * 1e8 / 10e9 + 6 * 4 * 5e-6)


def test_ring_across_nodes_runs_at_the_inter_node_link_by_hand():
    assert ar(Placement.on((2, 2))) == pytest.approx(2 * 3 / 4 * 1e8 / 1e9 + 6 * 4 * 20e-6)


def test_hierarchical_allreduce_by_hand():
    intra = 2 * 3 / 4 * 1e8 / 10e9 + 2 * 3 * 4 * 5e-6
    inter = 2 * 1 / 2 * 1e8 / 1e9 + 2 * 1 * 4 * 20e-6
    assert ar(Placement.on((4, 4)), "hierarchical") == pytest.approx(intra + inter)
    # on one node it is the same ring as the flat algorithm's
    assert ar(Placement.on((4,)), "hierarchical") == pytest.approx(ar(Placement.on((4,))))


def test_one_gpu_communicates_nothing():
    assert ar(Placement.on((1,))) == 0.0


def test_overlap_factor_spans_no_overlap_to_perfect_overlap():
    assert overlapped(np.array(0.3), np.array(0.4), 1.0) == pytest.approx(0.7)
    assert overlapped(np.array(0.3), np.array(0.4), 2.0) == pytest.approx(0.5)
    assert overlapped(np.array(0.3), np.array(0.4), 200.0) == pytest.approx(0.4, rel=1e-3)


def test_iteration_combines_compute_and_communication():
    profile = JobProfile("m", ComputeModel(0.0, 0.01), MB100, batch_size=64)
    model = ThroughputModel(LINKS, overlap=1.0)
    it = model.iteration(profile, Placement.on((2, 2)))
    assert it.compute == pytest.approx(0.01 * 16)
    assert it.communication == pytest.approx(ar(Placement.on((2, 2))))
    assert it.seconds == pytest.approx(it.compute + it.communication)
    assert model.throughput(profile, Placement.on((2, 2))) == pytest.approx(1 / it.seconds)
    assert model.samples_per_s(profile, Placement.on((2, 2))) == pytest.approx(64 / it.seconds)


@pytest.mark.parametrize("inter_gbps, faster", [(12.5, (2, 1)), (0.1, (2,))])
def test_two_gpus_in_a_node_or_three_across_two_nodes_depends_on_the_network(inter_gbps, faster):
    """CoDDL's question. Fixed global batch 96, 10 ms per sample, 100 MB of gradients: with a fast
    network the third GPU's compute wins; with a slow one the inter-node all-reduce costs more."""
    profile = JobProfile("m", ComputeModel(0.0, 0.01), MB100, batch_size=96)
    links = LinkSpec(intra_node_gbps=50.0, inter_node_gbps=inter_gbps)
    model = ThroughputModel(links)
    two, three = Placement.on((2,)), Placement.on((2, 1))
    best = max((two, three), key=lambda p: model.throughput(profile, p))
    assert best.gpus_per_node == faster


def test_mixed_types_unbalanced_wait_for_the_slowest_balanced_split_by_speed():
    """1 V100 + 1 K80 (speeds 1 and 0.25), 1 s per sample on a V100, no gradients to exchange,
    global batch 2. Unbalanced: 1 sample each, the K80 takes 4 s → 0.5 samples/s (2 × 0.25).
    Balanced: 1.6 and 0.4 samples, both take 1.6 s → 1.25 samples/s (1 + 0.25)."""
    types = {"V100": GpuType("V100", speed=1.0), "K80": GpuType("K80", speed=0.25)}
    profile = JobProfile("m", ComputeModel(0.0, 1.0), 0.0, batch_size=2)
    mixed = Placement((1, 1), ("V100", "K80"))
    assert ThroughputModel(gpu_types=types, balance=False).samples_per_s(profile, mixed) == pytest.approx(0.5)
    assert ThroughputModel(gpu_types=types, balance=True).samples_per_s(profile, mixed) == pytest.approx(1.25)


def test_per_model_type_speed_overrides_the_cluster_default():
    types = {"V100": GpuType("V100", speed=1.0), "K80": GpuType("K80", speed=0.25)}
    measured = JobProfile("m", ComputeModel(0.0, 1.0), 0.0, batch_size=1, type_speed=(("K80", 0.5),))
    generic = JobProfile("m", ComputeModel(0.0, 1.0), 0.0, batch_size=1)
    model = ThroughputModel(gpu_types=types)
    assert model.throughput(measured, Placement.on((1,), "K80")) == pytest.approx(0.5)
    assert model.throughput(generic, Placement.on((1,), "K80")) == pytest.approx(0.25)


def test_cpu_starved_jobs_slow_down_by_their_cpu_curve():
    profile = JobProfile("m", ComputeModel(0.0, 1.0), 0.0, batch_size=2, cpu_speed=((1.0, 0.5), (3.0, 1.0)))
    model = ThroughputModel()
    assert model.throughput(profile, Placement.on((2,), cpus=6)) == pytest.approx(1.0)
    assert model.throughput(profile, Placement.on((2,), cpus=2)) == pytest.approx(0.5)
    assert model.throughput(profile, Placement.on((2,))) == pytest.approx(1.0)


def test_curve_is_consolidated_throughput_with_zero_at_zero_and_cached():
    profile = JobProfile("m", ComputeModel(0.002, 0.001), 40e6, batch_size=256)
    model = ThroughputModel()
    curve = model.curve(profile, 20, gpus_per_node=8)
    assert curve.shape == (21,) and curve[0] == 0.0
    for k in (1, 5, 8, 9, 16, 20):
        assert curve[k] == pytest.approx(model.throughput(profile, Placement.consolidated(k, 8)))
    assert model.curve(profile, 20, gpus_per_node=8) is curve
    assert not curve.flags.writeable


def test_curve_on_a_slower_type_scales_compute_only():
    types = {"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)}
    profile = JobProfile("m", ComputeModel(0.01, 0.001), 40e6, batch_size=256)
    model = ThroughputModel(gpu_types=types)
    curve = model.curve(profile, 8, gpus_per_node=4, gpu_type="K80")
    assert curve[6] == pytest.approx(model.throughput(profile, Placement.on((4, 2), "K80")))


def test_placements_are_order_free_and_validated():
    assert Placement.on((1, 2)) == Placement.on((2, 1))
    assert Placement((1, 2), ("K80", "V100")).gpu_types == ("V100", "K80")
    assert Placement.consolidated(10, 4).gpus_per_node == (4, 4, 2)
    with pytest.raises(ValueError):
        Placement.on((2, 0))
    with pytest.raises(ValueError):
        Placement((2,), ("V100", "K80"))


def test_model_for_cluster_takes_its_links_and_gpu_types():
    cluster = Cluster((Node("a", 4, "K80"),), {"K80": GpuType("K80", speed=0.25)}, LINKS)
    model = ThroughputModel.for_cluster(cluster)
    assert model.links == LINKS and model.gpu_types["K80"].speed == 0.25


def test_unknown_algorithm_and_bad_overlap_are_rejected():
    with pytest.raises(ValueError):
        ThroughputModel(algorithm="tree")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ThroughputModel(overlap=0.5)


def test_compute_model_fit_recovers_a_power_law_and_falls_back_to_affine():
    b = np.array([4, 8, 16, 32, 64, 128])
    fit = ComputeModel.fit(b, 0.02 + 0.003 * b**0.8)
    assert (fit.alpha, fit.beta, fit.gamma) == pytest.approx((0.02, 0.003, 0.8), rel=1e-3)
    two = ComputeModel.fit([10, 20], [0.2, 0.3])
    assert (two.alpha, two.beta, two.gamma) == pytest.approx((0.1, 0.01, 1.0))
    assert ComputeModel.fit([10, 10], [0.2, 0.4]).seconds(99) == pytest.approx(0.3)


# ---- properties ----

def _spread(draw, k: int, per_node: int) -> tuple[int, ...]:
    parts: list[int] = []
    while sum(parts) < k:
        parts.append(draw(st.integers(1, min(per_node, k - sum(parts)))))
    return tuple(parts)


profiles = st.builds(
    lambda a, b, mb, bs, per_gpu: JobProfile("p", ComputeModel(a, b), mb * 1e6, bs, per_gpu),
    st.floats(0.0, 0.5), st.floats(1e-5, 1e-2), st.floats(0.0, 2000.0), st.integers(1, 1024), st.booleans())


@settings(max_examples=150, deadline=None)
@given(data=st.data(), profile=profiles, k=st.integers(1, 32), per_node=st.integers(1, 8),
       inter=st.floats(0.1, 50.0), intra_x=st.floats(1.0, 20.0), lat_inter=st.floats(0.0, 500.0),
       lat_x=st.floats(0.0, 1.0), overlap=st.floats(1.0, 8.0))
def test_spreading_a_ring_job_over_more_nodes_is_never_faster(data, profile, k, per_node, inter, intra_x,
                                                               lat_inter, lat_x, overlap):
    links = LinkSpec(inter * intra_x, inter, lat_inter * lat_x, lat_inter)
    model = ThroughputModel(links, overlap=overlap)
    tight = Placement.consolidated(k, per_node)
    spread = Placement.on(_spread(data.draw, k, per_node))
    assert model.throughput(profile, spread) <= model.throughput(profile, tight) * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), profile=profiles, k=st.integers(1, 32), per_node=st.integers(1, 8),
       inter=st.floats(0.1, 50.0), lat_inter=st.floats(0.0, 500.0), lat_x=st.floats(0.0, 1.0))
def test_spreading_a_hierarchical_job_over_more_nodes_is_never_faster_with_much_faster_nodes(
        data, profile, k, per_node, inter, lat_inter, lat_x):
    """For the 2-D algorithm spreading shrinks the intra-node phase, so the property needs the
    intra-node links to be much better than the inter-node ones; intra ≥ k² × inter bandwidth and
    ≤ 1/k × inter latency is sufficient (the intra phase saves at most 2/bw_intra + 2k·λ_intra per
    bucket, an extra node costs at least 2/(k²·bw_inter) + 2·λ_inter)."""
    links = LinkSpec(inter * k * k, inter, lat_inter * lat_x / k, lat_inter)
    model = ThroughputModel(links, algorithm="hierarchical")
    tight = Placement.consolidated(k, per_node)
    spread = Placement.on(_spread(data.draw, k, per_node))
    if spread.num_nodes > tight.num_nodes:
        assert model.throughput(profile, spread) <= model.throughput(profile, tight) * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(profile=profiles, shape=st.lists(st.integers(1, 8), min_size=1, max_size=6),
       algorithm=st.sampled_from(["ring", "hierarchical"]), inter=st.floats(0.1, 50.0),
       more=st.floats(1.0, 10.0), which=st.sampled_from(["intra", "inter"]))
def test_more_bandwidth_is_never_slower(profile, shape, algorithm, inter, more, which):
    base = LinkSpec(inter * 4, inter)
    faster = (LinkSpec(base.intra_node_gbps * more, inter) if which == "intra"
              else LinkSpec(base.intra_node_gbps, inter * more))
    p = Placement.on(tuple(shape))
    slow = ThroughputModel(base, algorithm=algorithm).throughput(profile, p)
    assert ThroughputModel(faster, algorithm=algorithm).throughput(profile, p) >= slow * (1 - 1e-12)


def test_two_node_factor_scales_exactly_the_two_node_all_reduces():
    """Hand-computed ring: 2(k−1)/k · bytes / bandwidth + 2(k−1) · buckets · latency, × 1.5 on 2 nodes."""
    links = LinkSpec(intra_node_gbps=10.0, inter_node_gbps=1.0, intra_node_latency_us=5.0,
                     inter_node_latency_us=20.0, two_node_factor=1.5)
    nbytes = 1e8  # 4 buckets of 25 MB
    t = allreduce_seconds(nbytes, np.array([4, 4, 6]), np.array([1, 2, 3]), np.array([4, 2, 2]), links)
    one_node = 2 * 3 / 4 * nbytes / 10e9 + 2 * 3 * 4 * 5e-6
    two_nodes = 1.5 * (2 * 3 / 4 * nbytes / 1e9 + 2 * 3 * 4 * 20e-6)
    three_nodes = 2 * 5 / 6 * nbytes / 1e9 + 2 * 5 * 4 * 20e-6
    assert t.tolist() == pytest.approx([one_node, two_nodes, three_nodes])
