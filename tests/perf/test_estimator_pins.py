"""Hand-computed pins of the estimator (``coddl.perf.estimator``): placements, a batch of jobs as
columns, the speed of a GPU type relative to the profiled one, the 90% interval, the scalar path
on mixed types with communication, and the scaling curves."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.core.cluster import Cluster, GpuType, LinkSpec, Node
from coddl.perf.estimator import Z90, Estimator, JobBatch, Placement
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import JobModel, Prior, gamma_of, theta_of

FAB = Fabric(intra_gbps=10.0, inter_gbps=1.0, intra_latency_us=0.0, inter_latency_us=0.0)
M = 1e8
TYPES = {"V100": GpuType("V100", speed=1.0), "K80": GpuType("K80", speed=0.25), "A100": GpuType("A100", speed=2.0)}


def job(f: float = 0.2, eta: float = 1.0, rho: float = 0.0, t_ref: float = 1.0, b_ref: float = 32.0,
        nbytes: float = M, prior: Prior | None = None, gpu_type: str = "V100", name: str = "m",
        t_floor: float = 0.0, cov: np.ndarray | None = None) -> JobModel:
    prior = prior or Prior()
    return JobModel(name, nbytes, t_ref, b_ref, theta_of(f, eta, rho), prior.cov if cov is None else cov, prior,
                    gpu_type, t_floor=t_floor)


# ---- placements ----

def test_a_placement_sorts_its_nodes_largest_first_then_by_type():
    p = Placement((1, 3, 3), ("V100", "V100", "K80"))
    assert p.gpus_per_node == (3, 3, 1) and p.gpu_types == ("K80", "V100", "V100")
    assert (p.num_gpus, p.num_nodes, p.max_per_node) == (7, 3, 3)
    assert Placement.on((1, 2)).gpu_types == ("V100", "V100")
    assert Placement.on((2,), "K80") == Placement((2,), ("K80",))


def test_a_placement_refuses_mismatched_columns_and_empty_nodes():
    with pytest.raises(ValueError, match=r"^placement: 2 node GPU counts but 1 GPU types$"):
        Placement((1, 2), ("V100",))
    with pytest.raises(ValueError, match=r"^placement: every node needs at least one GPU, got \(2, 0\)$"):
        Placement.on((2, 0))
    with pytest.raises(ValueError, match=r"^placement: every node needs at least one GPU, got \(\)$"):
        Placement((), ())
    assert Placement.on((1,)).num_gpus == 1  # one GPU on one node is a placement


def test_consolidated_fills_whole_nodes_and_one_partial_node():
    assert Placement.consolidated(10, 4).gpus_per_node == (4, 4, 2)
    assert Placement.consolidated(8, 4).gpus_per_node == (4, 4)
    assert Placement.consolidated(3, 4, "K80") == Placement.on((3,), "K80")
    assert Placement.consolidated(3, 4).gpu_types == ("V100",)


# ---- a batch of jobs ----

def test_a_job_batch_holds_each_job_s_columns_in_order():
    a = job(f=0.1, eta=2.0, rho=0.3, t_ref=0.5, b_ref=16.0, nbytes=1e6, prior=Prior(noise=0.2), t_floor=0.1)
    b = job(f=0.4, eta=0.5, rho=0.6, t_ref=2.0, b_ref=64.0, nbytes=3e6, prior=Prior(noise=0.05))
    batch = JobBatch.of([a, b])
    assert batch.t_ref.tolist() == [0.5, 2.0]
    assert batch.b_ref.tolist() == [16.0, 64.0]
    assert batch.param_bytes.tolist() == [1e6, 3e6]
    assert batch.theta == pytest.approx(np.array([a.theta, b.theta]))
    assert batch.cov.shape == (2, 3, 3) and np.array_equal(batch.cov[1], b.cov)
    assert batch.noise.tolist() == [0.2, 0.05]
    assert batch.t_floor.tolist() == [0.1, 0.0]
    empty = JobBatch.of([])
    assert empty.theta.shape == (0, 3) and empty.cov.shape == (0, 3, 3)


# ---- speeds of GPU types ----

def test_the_speed_of_a_type_is_relative_to_the_type_the_job_was_profiled_on():
    est = Estimator(FAB, TYPES, type_speed={("m", "K80"): 0.3, ("other", "A100"): 5.0})
    assert est.speed(job(), "K80") == 0.3  # measured ratios first
    assert est.speed(job(), "A100") == pytest.approx(2.0)
    assert est.speed(job(gpu_type="K80"), "A100") == pytest.approx(8.0)
    assert est.speed(job(gpu_type="K80", name="n"), "K80") == 1.0
    assert est.speed(job(gpu_type=""), "A100") == 1.0  # profiled on no named type: every type the same
    assert est.speed(job(gpu_type="K80"), "T4") == pytest.approx(4.0)  # an unknown type: speed 1
    assert est.speed(job(gpu_type="T4"), "A100") == pytest.approx(2.0)


def test_an_estimator_for_a_cluster_takes_its_links_and_gpu_types():
    links = LinkSpec(40.0, 5.0, 3.0, 30.0, 1.2)
    c = Cluster(nodes=(Node("a", 4, "V100"), Node("b", 4, "K80")), gpu_types=TYPES, links=links)
    est = Estimator.for_cluster(c)
    assert est.fabric == Fabric(40.0, 5.0, 3.0, 30.0, "ring", 25.0, 1.2)
    assert set(est.gpu_types) == set(TYPES) and est.gpu_types["K80"].speed == 0.25 and est.balance
    tree = Fabric(1.0, 1.0, algorithm="tree")
    other = Estimator.for_cluster(c, tree, balance=False, type_speed={("m", "K80"): 0.5})
    assert other.fabric is tree and other.balance is False and other.type_speed == {("m", "K80"): 0.5}


# ---- the vectorised path ----

def test_without_uncertainty_the_interval_is_the_estimate_itself():
    est = Estimator(FAB)
    p = est.rates(job(f=0.2, rho=0.0), [4], [1], [4], [32.0], uncertainty=False)
    a = 2 * 3 / 4 * M / 10e9  # a ring inside one node
    assert p.steps_per_s[0] == pytest.approx(1 / (1.0 + a))
    assert p.low[0] == p.high[0] == p.steps_per_s[0]
    assert p.log_sd.tolist() == p.compute_s.tolist() == p.comm_s.tolist() == [0.0]


def test_the_interval_of_a_one_gpu_step_comes_from_the_fixed_share_and_the_noise():
    """One GPU: log T = log(f + (1 − f)·b/32). Only f is uncertain (σ = 0.1), so the ±z points are
    f ± 1.645·0.1·sign(∂log T/∂f); the noise adds in quadrature."""
    prior = Prior(noise=0.05)
    cov = np.diag([0.01, 1e-12, 1e-12])
    j = job(f=0.3, prior=prior, cov=cov)
    est = Estimator(FAB)
    p = est.rates(j, [1, 1], [1, 1], [1, 1], [8.0, 128.0])
    for i, b in enumerate((8.0, 128.0)):
        def log_t(f):
            return math.log(f + (1 - f) * b / 32)
        r = b / 32
        sign = 1.0 if r < 1 else -1.0  # a larger f slows a small batch and speeds a large one
        up, down = log_t(0.3 + Z90 * 0.1 * sign), log_t(0.3 - Z90 * 0.1 * sign)
        mid = log_t(0.3)
        slower = math.hypot(up - mid, Z90 * 0.05)
        faster = math.hypot(mid - down, Z90 * 0.05)
        assert p.steps_per_s[i] == pytest.approx(math.exp(-mid))
        assert p.low[i] == pytest.approx(math.exp(-mid - slower))
        assert p.high[i] == pytest.approx(math.exp(-mid + faster))
        assert p.log_sd[i] == pytest.approx((slower + faster) / (2 * Z90))
        assert p.compute_s[i] == pytest.approx(math.exp(mid)) and p.comm_s[i] == pytest.approx(0.0, abs=1e-12)


def test_exposed_communication_is_never_negative_even_where_its_difference_rounds_below_0():
    # a local batch of 1e300 on 2+2 GPUs: T and C are ~1e299 and their difference is the all-reduce's
    # ~1e-2 s lost in rounding — it came out at about −4e284 s; it is at least 0 and at most T
    j = job(f=0.2, eta=2.0)
    p = Estimator(FAB).rates(j, [4, 1], [2, 1], [2, 1], [1e300, 32.0])
    assert p.comm_s[0] >= 0.0 and p.comm_s[0] <= 1.0 / p.steps_per_s[0]
    assert p.comm_s[1] == 0.0  # one GPU: exactly nothing exposed


def test_the_interval_stays_within_the_parameters_bounds():
    """f = 0.95 with σ 0.5: f + z·σ would be 1.77; clipped at 0.99, so the slower side stops there."""
    prior = Prior(noise=0.01)
    j = job(f=0.95, prior=prior, cov=np.diag([0.25, 1e-12, 1e-12]))
    p = Estimator(FAB).rates(j, [1], [1], [1], [8.0])
    mid, up = math.log(0.95 + 0.05 / 4), math.log(0.99 + 0.01 / 4)
    down = math.log(max(0.95 - Z90 * 0.5, 0.0) + (1 - max(0.95 - Z90 * 0.5, 0.0)) / 4)
    assert p.low[0] == pytest.approx(math.exp(-mid - math.hypot(up - mid, Z90 * 0.01)))
    assert p.high[0] == pytest.approx(math.exp(-mid + math.hypot(mid - down, Z90 * 0.01)))


def test_communication_splits_the_step_and_a_shared_device_slows_compute_and_intra_node_copies():
    est = Estimator(FAB)
    j = job(f=0.2, eta=2.0, rho=0.0)
    a = 2 * 3 / 4 * M / 10e9
    p = est.rates(j, [4, 4], [1, 1], [4, 4], [32.0, 32.0], share=np.array([1.0, 0.5]))
    assert p.compute_s.tolist() == pytest.approx([1.0, 2.0])
    assert p.comm_s.tolist() == pytest.approx([2 * a, 2 * 2 * a])
    assert p.steps_per_s.tolist() == pytest.approx([1 / (1 + 2 * a), 1 / (2 + 4 * a)])
    fast = est.rates(j, [4], [1], [4], [32.0], speed=2.0, uncertainty=False).steps_per_s[0]
    assert fast == pytest.approx(1 / (0.5 + 2 * a))


def test_each_pair_is_priced_with_its_own_job_s_bytes_floor_and_noise():
    small = job(f=0.0, nbytes=0.0, t_floor=0.5, prior=Prior(noise=0.3), name="s")
    big = job(f=0.0, nbytes=4e8, prior=Prior(noise=0.01), name="b")
    est = Estimator(FAB)
    p = est.predict(JobBatch.of([small, big]), np.array([1, 0]), np.array([2, 2]), np.array([2, 2]),
                    np.array([1, 1]), np.array([8.0, 8.0]))
    a = 2 * 1 / 2 * 4e8 / 1e9  # a ring across two nodes, 400 MB
    assert p.comm_s.tolist() == pytest.approx([a, 0.0], abs=1e-12)
    assert p.compute_s.tolist() == pytest.approx([0.25, 0.5])  # 8/32 for the big job; the floor for the small
    assert p.log_sd[0] < p.log_sd[1]  # the small job's noise is 30×


# ---- one placement ----

def test_throughput_on_one_type_overlaps_compute_with_communication():
    est = Estimator(FAB, TYPES)
    j = job(f=0.2, eta=2.0, rho=0.5)
    comm = 2 * 2.0 * 3 / 4 * M / 1e9  # η · ring across 2 nodes of 2
    gamma = float(gamma_of(0.5))
    c = 0.2 + 0.8 * (64 / 4) / 32
    want = 1 / (c**gamma + comm**gamma) ** (1 / gamma)
    assert est.throughput(j, Placement.on((2, 2)), 64.0) == pytest.approx(want)


def test_throughput_on_mixed_types_balances_the_batch_or_waits_for_the_slowest():
    j = job(f=0.2, eta=1.0, rho=0.0)
    mixed = Placement((1, 1), ("V100", "K80"))
    comm = 2 * 1 / 2 * M / 1e9  # ring across two nodes of 1
    # balanced: 64 samples split 4:1 → 51.2 on the V100 (0.2 + 0.8 · 1.6 = 1.48 s), 12.8 on the K80
    # ((0.2 + 0.8 · 0.4) / 0.25 = 2.08 s: its fixed share runs at a quarter speed too); the slower sets the pace
    c = max(0.2 + 0.8 * 51.2 / 32, (0.2 + 0.8 * 12.8 / 32) / 0.25)
    assert c == pytest.approx(2.08)
    assert Estimator(FAB, TYPES).throughput(j, mixed, 64.0) == pytest.approx(1 / (c + comm))
    # unbalanced: 32 each, the K80 at a quarter speed sets the pace
    assert Estimator(FAB, TYPES, balance=False).throughput(j, mixed, 64.0) == pytest.approx(1 / (1.0 / 0.25 + comm))
    # the same type everywhere: no balancing to do, the local batch is the global one split evenly
    assert Estimator(FAB, TYPES).throughput(j, Placement.on((1, 1), "K80"), 64.0) == pytest.approx(1 / (4.0 + comm))


# ---- curves ----

def test_a_curve_needs_exactly_one_batch():
    est = Estimator(FAB)
    with pytest.raises(ValueError, match="^curve: give exactly one of global_batch and local_batch$"):
        est.curve(job(), 4, 4)
    with pytest.raises(ValueError, match="^curve: give exactly one of global_batch and local_batch$"):
        est.curve(job(), 4, 4, global_batch=64.0, local_batch=16.0)


def test_a_curve_is_consolidated_starts_at_zero_and_is_read_only():
    est = Estimator(FAB)
    j = job(f=0.2, eta=1.0, rho=0.0)
    strong = est.curve(j, 6, 4, global_batch=96.0)
    assert strong[0] == 0.0 and len(strong) == 7
    want = est.rates(j, np.arange(1, 7), np.array([1, 1, 1, 1, 2, 2]), np.array([1, 2, 3, 4, 4, 4]),
                     96.0 / np.arange(1, 7), uncertainty=False).steps_per_s
    assert strong[1:] == pytest.approx(want)
    assert strong[1] == pytest.approx(1 / (0.2 + 0.8 * 3))
    with pytest.raises(ValueError):
        strong[1] = 0.0
    weak = est.curve(j, 6, 4, local_batch=32.0, speed=2.0)
    want = est.rates(j, np.arange(1, 7), np.array([1, 1, 1, 1, 2, 2]), np.array([1, 2, 3, 4, 4, 4]),
                     np.full(6, 32.0), speed=2.0, uncertainty=False).steps_per_s
    assert weak[1:] == pytest.approx(want) and weak[1] == pytest.approx(2.0)


def test_throughput_prices_the_all_reduce_with_the_placement_s_largest_node():
    """Under a tree the intra-node part depends on the GPUs per node: 4 + 2 on two nodes reduces
    inside nodes of up to 4 (2·3/4 · M at 10 GB/s) and crosses the NIC once (M at 1 GB/s)."""
    tree = Fabric(10.0, 1.0, 0.0, 0.0, "tree")
    j = job(f=0.2, eta=1.0, rho=0.0)
    comm = 2 * 3 / 4 * M / 10e9 + M / 1e9
    c = 0.2 + 0.8 * (96 / 6) / 32
    assert Estimator(tree).throughput(j, Placement.on((2, 4)), 96.0) == pytest.approx(1 / (c + comm))


def test_the_interval_stays_within_the_lower_bounds_too():
    """A large batch (128 = 4·32): a larger f speeds the step, so the slower end moves f down —
    0.05 − 1.645·0.5, clipped at 0 — and the faster end up to 0.87."""
    j = job(f=0.05, prior=Prior(noise=0.01), cov=np.diag([0.25, 1e-12, 1e-12]))
    p = Estimator(FAB).rates(j, [1], [1], [1], [128.0])

    def log_t(f):
        return math.log(f + (1 - f) * 4)
    mid, up, down = log_t(0.05), log_t(0.0), log_t(0.05 + Z90 * 0.5)
    assert p.low[0] == pytest.approx(math.exp(-mid - math.hypot(up - mid, Z90 * 0.01)))
    assert p.high[0] == pytest.approx(math.exp(-mid + math.hypot(mid - down, Z90 * 0.01)))


def test_the_floor_holds_in_the_estimate_and_at_both_ends_of_its_interval():
    """8 samples at t_ref 1 s for 32, f = 0.2: the line is 0.4 s, the floor 0.6 s sets C. Only η is
    uncertain (σ 0.5) and γ = 1, so the ends are C + e^{±1.645·0.5}·S with C at the floor."""
    prior = Prior(noise=0.02)
    j = job(f=0.2, eta=1.0, rho=0.0, prior=prior, t_floor=0.6, cov=np.diag([1e-12, 0.25, 1e-12]))
    est = Estimator(FAB)
    a = 2 * 1 / 2 * M / 1e9  # ring across two nodes of one GPU: 0.1 s
    plain = est.rates(j, [2], [2], [1], [8.0], uncertainty=False).steps_per_s[0]
    assert plain == pytest.approx(1 / (0.6 + a))
    p = est.rates(j, [2], [2], [1], [8.0])
    mid = math.log(0.6 + a)
    up, down = math.log(0.6 + a * math.exp(Z90 * 0.5)), math.log(0.6 + a * math.exp(-Z90 * 0.5))
    assert p.low[0] == pytest.approx(math.exp(-mid - math.hypot(up - mid, Z90 * 0.02)), rel=1e-6)
    assert p.high[0] == pytest.approx(math.exp(-mid + math.hypot(mid - down, Z90 * 0.02)), rel=1e-6)
    assert p.compute_s[0] == pytest.approx(0.6) and p.comm_s[0] == pytest.approx(a)


def test_a_curve_prices_each_count_on_its_nodes_and_gpus_per_node():
    """Hierarchical, two-node factor 1.5: 5 GPUs in nodes of 4 are 4 + 1, reduced inside nodes of up to 4
    (2·3/4 · M at 10 GB/s) and between 2 nodes (2·1/2 · M at 1 GB/s), × 1.5 for exactly two nodes."""
    fab = Fabric(10.0, 1.0, 0.0, 0.0, "hierarchical", two_node_factor=1.5)
    j = job(f=0.2, eta=1.0, rho=0.0)
    curve = Estimator(fab).curve(j, 5, 4, global_batch=96.0)
    comm = 1.5 * (2 * 3 / 4 * M / 10e9 + 2 * 1 / 2 * M / 1e9)
    assert curve[5] == pytest.approx(1 / (0.2 + 0.8 * (96 / 5) / 32 + comm))
    # 3 GPUs on one node of 4: only the intra-node reduction over 3
    assert curve[3] == pytest.approx(1 / (0.2 + 0.8 * (96 / 3) / 32 + 2 * 2 / 3 * M / 10e9))
