"""Each term of the estimator, computed by hand; its guarantees as properties (hypothesis): no
profile and no sequence of corrections yields a super-linear, negative or non-finite throughput."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.core.cluster import GpuType
from coddl.perf.estimator import Estimator, JobBatch, Placement
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import THETA_LOWER, THETA_UPPER, JobModel, Prior, Steps, gamma_of, step_model, theta_of

FAB = Fabric(intra_gbps=10.0, inter_gbps=1.0, intra_latency_us=5.0, inter_latency_us=20.0, two_node_factor=1.5)
M = 1e8  # 4 buckets of 25 MB


def ar(algorithm: str, k: int, n: int, g: int, fabric: Fabric = FAB) -> float:
    f = Fabric(fabric.intra_gbps, fabric.inter_gbps, fabric.intra_latency_us, fabric.inter_latency_us, algorithm,
               two_node_factor=fabric.two_node_factor)
    return float(f.allreduce_seconds(M, k, n, g)[0])


# ---- the fabric: each collective by hand ----

def test_ring_inside_a_node_and_across_nodes():
    assert ar("ring", 4, 1, 4) == pytest.approx(2 * 3 / 4 * M / 10e9 + 2 * 3 * 4 * 5e-6)
    # any ring that leaves a node runs at the inter-node link; exactly two nodes × 1.5
    assert ar("ring", 4, 2, 2) == pytest.approx(1.5 * (2 * 3 / 4 * M / 1e9 + 2 * 3 * 4 * 20e-6))
    assert ar("ring", 6, 3, 2) == pytest.approx(2 * 5 / 6 * M / 1e9 + 2 * 5 * 4 * 20e-6)


def test_hierarchical_and_tree():
    intra = 2 * 3 / 4 * M / 10e9 + 2 * 3 * 4 * 5e-6  # reduce-scatter + all-gather inside a node of 4
    assert ar("hierarchical", 16, 4, 4) == pytest.approx(intra + 2 * 3 / 4 * M / 1e9 + 2 * 3 * 4 * 20e-6)
    # tree between 4 nodes: the NIC carries ~M, depth ⌈log2 4⌉ = 2 steps up and down
    assert ar("tree", 16, 4, 4) == pytest.approx(intra + M / 1e9 + 2 * 2 * 4 * 20e-6)
    assert ar("hierarchical", 4, 1, 4) == pytest.approx(ar("ring", 4, 1, 4))


def test_auto_takes_the_cheapest_algorithm_per_placement_and_one_gpu_costs_nothing():
    for k, n, g in ((2, 2, 1), (8, 2, 4), (16, 8, 2), (4, 1, 4)):
        assert ar("auto", k, n, g) == pytest.approx(min(ar(a, k, n, g) for a in ("ring", "hierarchical", "tree")))
    assert FAB.allreduce_seconds(M, 1, 1, 1)[0] == 0.0


def test_the_terms_are_linear_in_inverse_bandwidths_and_latencies():
    k, n, g = np.array([2, 4, 8, 16]), np.array([1, 2, 2, 4]), np.array([2, 2, 4, 4])
    plain = Fabric(10.0, 1.0, 5.0, 20.0, "tree")
    assert np.allclose(plain.terms(M, k, n, g) @ plain.weights, plain.allreduce_seconds(M, k, n, g))


def test_a_tree_inside_one_node_never_touches_the_nic_and_buckets_count_latency_steps():
    for alg in ("tree", "hierarchical", "ring"):
        t = Fabric(10.0, 1.0, 5.0, 20.0, alg).terms(M, 4, 1, 4)[0]
        assert t.tolist() == pytest.approx([2 * 3 / 4 * M, 0.0, 2 * 3 * 4, 0.0])
    # 25 MB buckets: one byte over a bucket is a second bucket, i.e. twice the latency steps
    one, two = Fabric(10.0, 1.0, 5.0, 20.0, "ring").terms(np.array([25e6, 25e6 + 1]), 4, 1, 4)[:, 2]
    assert (one, two) == (6.0, 12.0)


@pytest.mark.parametrize("alg", ["ring", "tree", "auto"])
def test_workers_on_half_a_device_double_the_intra_node_terms_only(alg):
    fab = Fabric(10.0, 1.0, 5.0, 20.0, alg)
    k, n, g = np.array([4, 8]), np.array([1, 2]), np.array([4, 4])
    full, half = fab.terms(M, k, n, g), fab.terms(M, k, n, g, 0.5)
    assert half[:, [0, 2]] == pytest.approx(2 * full[:, [0, 2]])
    assert half[:, [1, 3]] == pytest.approx(full[:, [1, 3]])


def test_a_fabric_round_trips_through_the_cluster_spec_s_links_and_names_bad_fields():
    f = Fabric(12.0, 1.5, 3.0, 40.0, "tree", two_node_factor=1.4)
    back = Fabric.of(f.links(), "tree")
    assert (back.intra_gbps, back.inter_gbps, back.intra_latency_us, back.inter_latency_us, back.two_node_factor,
            back.bucket_mb) == (12.0, 1.5, 3.0, 40.0, 1.4, 25.0)
    assert Fabric.of(f.links(), "ring", bucket_mb=50.0).bucket_mb == 50.0
    with pytest.raises(ValueError, match="unknown all-reduce algorithm 'nccl'"):
        Fabric(1.0, 1.0, algorithm="nccl")
    with pytest.raises(ValueError, match="inter_gbps must be a positive number"):
        Fabric(1.0, 0.0)


# ---- the job: compute, communication, overlap by hand ----

def job(f: float = 0.2, eta: float = 1.0, rho: float = 0.0, t_ref: float = 1.0, b_ref: float = 32.0,
        nbytes: float = M, prior: Prior | None = None) -> JobModel:
    prior = prior or Prior()
    return JobModel("m", nbytes, t_ref, b_ref, theta_of(f, eta, rho), prior.cov, prior, "V100")


def test_compute_is_affine_in_the_local_batch_and_pivots_on_the_profiled_batch():
    j = job(f=0.2)
    assert j.compute_seconds(64) == pytest.approx(0.2 + 0.8 * 2)
    assert j.compute_seconds(32) == pytest.approx(1.0)
    assert j.compute_seconds(8) == pytest.approx(0.2 + 0.8 / 4)


def test_communication_scales_with_the_job_s_efficiency_and_overlap_with_rho():
    est = Estimator(FAB)
    a = ar("ring", 4, 2, 2)
    c = 1.0
    no_overlap = est.rates(job(eta=2.0, rho=0.0), [4], [2], [2], [32.0])
    assert no_overlap.steps_per_s[0] == pytest.approx(1 / (c + 2 * a))
    gamma = float(gamma_of(0.5))
    assert 2 - 2 ** (1 / gamma) == pytest.approx(0.5)  # ρ is the share hidden when both parts are equal
    half = est.rates(job(eta=2.0, rho=0.5), [4], [2], [2], [32.0])
    assert half.steps_per_s[0] == pytest.approx(1 / (c**gamma + (2 * a) ** gamma) ** (1 / gamma))
    full = est.rates(job(rho=0.99), [4], [2], [2], [32.0]).steps_per_s[0]
    assert full == pytest.approx(1 / max(c, a), rel=0.02)


def test_the_gradient_of_log_time_matches_finite_differences():
    b = np.array([8.0, 64.0, 32.0, 16.0])
    base = np.array([0.5, 0.05, 2.0, 0.0])
    theta = np.array([0.3, 0.2, 0.6])
    _, g, *_ = step_model(1.0, 32.0, b, 1.0, base, theta, grad=True)
    for i in range(3):
        d = np.zeros(3)
        d[i] = 1e-6
        hi, = step_model(1.0, 32.0, b, 1.0, base, theta + d)
        lo, = step_model(1.0, 32.0, b, 1.0, base, theta - d)
        assert np.allclose(g[:, i], (hi - lo) / 2e-6, atol=1e-5)


def test_a_worker_with_half_a_device_computes_half_as_fast():
    est = Estimator(FAB)
    j = job(f=0.2, nbytes=0.0)
    p = est.rates(j, [1, 4], [1, 1], [1, 4], [32.0, 32.0], share=np.array([1.0, 0.5])).steps_per_s
    assert p.tolist() == pytest.approx([1.0, 0.5], rel=1e-4)  # (no bytes: only the links’ latency)


def test_a_one_gpu_profile_at_several_batches_pins_the_fixed_share():
    b = np.array([8.0, 16.0, 32.0, 64.0])
    j = JobModel.from_one_gpu("m", M, b, 0.1 + 0.01 * b)
    assert j.b_ref == pytest.approx(math.sqrt(8 * 64))
    assert j.t_ref == pytest.approx(0.1 + 0.01 * j.b_ref)
    assert j.fixed_share == pytest.approx(0.1 / j.t_ref, abs=0.01)
    assert math.sqrt(j.cov[0, 0]) < 0.5 * j.prior.sd[0]


def test_a_job_profiled_at_one_batch_still_gains_from_more_gpus():
    """Strong scaling with one profiled batch: the fixed share comes from the prior (< 1), so
    splitting the batch shortens compute and, with cheap communication, more GPUs help."""
    j = JobModel.from_one_gpu("m", 1e6, np.array([256.0]), np.array([0.5]))
    assert j.fixed_share == pytest.approx(Prior().mean[0], abs=1e-6)
    curve = Estimator(Fabric(100.0, 12.5)).curve(j, 8, 8, global_batch=256.0)
    assert np.all(np.diff(curve[1:]) > 0) and curve[8] > 2.5 * curve[1]


def test_one_measurement_moves_the_estimate_part_of_the_way_and_sharpens_it():
    est = Estimator(FAB)
    j = job(f=0.2, eta=1.0, rho=0.3, prior=Prior(noise=0.1))
    before = est.rates(j, [8], [2], [4], [32.0])
    measured = 0.5 * before.steps_per_s[0]  # twice as slow as predicted
    steps = Steps(np.array([32.0]), FAB.allreduce_seconds(M, 8, 2, 4), np.array([1 / measured]), np.array([np.nan]))
    after = est.rates(j.updated(steps), [8], [2], [4], [32.0])
    assert measured < after.steps_per_s[0] < before.steps_per_s[0]
    assert after.log_sd[0] < before.log_sd[0]


def test_two_measured_sizes_recover_the_job_s_true_parameters():
    est = Estimator(FAB)
    truth = job(f=0.1, eta=3.0, rho=0.6)
    start = job(f=0.3, eta=1.0, rho=0.3, prior=Prior(noise=0.02))
    shapes = (([2, 8], [1, 2], [2, 4], [32.0, 32.0]),)
    k, n, g, b = (np.array(x) for x in shapes[0])
    t = 1 / est.rates(truth, k, n, g, b, uncertainty=False).steps_per_s
    steps = Steps(b, FAB.allreduce_seconds(M, k, n, g), t, np.full(2, np.nan))
    fitted = start.updated(steps)
    k2, n2, g2 = np.array([4, 16, 32]), np.array([4, 4, 8]), np.array([1, 4, 4])
    want = est.rates(truth, k2, n2, g2, np.full(3, 32.0), uncertainty=False).steps_per_s
    got = est.rates(fitted, k2, n2, g2, np.full(3, 32.0), uncertainty=False).steps_per_s
    assert got == pytest.approx(want, rel=0.05)


def test_where_the_prior_and_the_noise_are_right_one_correction_is_better_on_average():
    """The Bayesian promise the correction rests on: jobs drawn from the prior, each measured once
    with the prior's noise, are predicted better on average after the update than before, on the
    measured shape and on its neighbours: the squared log error falls to ~0.11 of the prior's
    (a sign error fails this, as does a measurement weighed as if its noise were 100%: 0.98)."""
    rng = np.random.default_rng(3)
    prior = Prior(mean=(0.2, 0.0, 0.4), sd=(0.1, 0.6, 0.2), noise=0.08)
    est = Estimator(FAB)
    k, n, g = np.array([4, 8, 8, 16, 32]), np.array([1, 2, 1, 4, 8]), np.array([4, 4, 8, 4, 4])
    b = np.full(5, 32.0)
    before, after = [], []
    for _ in range(80):
        theta = np.clip(rng.multivariate_normal(prior.mean, prior.cov), THETA_LOWER + 1e-3, THETA_UPPER - 1e-3)
        truth = JobModel("m", M, 1.0, 32.0, theta, prior.cov, prior)
        start = JobModel("m", M, 1.0, 32.0, np.array(prior.mean), prior.cov, prior)
        want = np.log(est.rates(truth, k, n, g, b, uncertainty=False).steps_per_s)
        measured = 1 / np.exp(want[1] + rng.normal(0, prior.noise))  # seconds of one step on 8 GPUs, 2 nodes
        steps = Steps(b[[1]], FAB.allreduce_seconds(M, 8, 2, 4), np.array([measured]), np.array([np.nan]))
        for model, out in ((start, before), (start.updated(steps), after)):
            out.append(np.mean((np.log(est.rates(model, k, n, g, b, uncertainty=False).steps_per_s) - want) ** 2))
    assert np.mean(after) < 0.3 * np.mean(before)


def test_vectorised_and_scalar_paths_agree_and_mixed_types_balance():
    types = {"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)}
    est = Estimator(FAB, types)
    j = job(f=0.0, rho=0.5, nbytes=0.0)  # no communication: compute only, C ∝ local batch
    one = est.throughput(j, Placement.on((2, 2)), 128.0)
    assert one == pytest.approx(est.rates(j, [4], [2], [2], [32.0]).steps_per_s[0])
    mixed = Placement((1, 1), ("V100", "K80"))
    # balanced: batch split 4:1, both finish together: 64·(4/5)/32 s on the V100
    assert est.throughput(j, mixed, 64.0) == pytest.approx(1 / (64 * 0.8 / 32))
    slow = Estimator(FAB, types, balance=False).throughput(j, mixed, 64.0)
    assert slow == pytest.approx(1 / ((32 / 32) / 0.25))


def test_placements_are_order_free_and_validated():
    assert Placement.on((1, 2)) == Placement.on((2, 1))
    assert Placement.consolidated(10, 4).gpus_per_node == (4, 4, 2)
    with pytest.raises(ValueError):
        Placement.on((2, 0))
    with pytest.raises(ValueError):
        Fabric(algorithm="star")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Fabric(inter_gbps=0.0)


# ---- properties ----

thetas = st.tuples(st.floats(float(THETA_LOWER[0]), float(THETA_UPPER[0])), st.floats(-5.0, 5.0),
                   st.floats(float(THETA_LOWER[2]), float(THETA_UPPER[2])))
fabrics = st.builds(Fabric, st.floats(0.01, 1000.0), st.floats(0.01, 1000.0), st.floats(0.0, 1e4), st.floats(0.0, 1e4),
                    st.sampled_from(["ring", "hierarchical", "tree", "auto"]), st.just(25.0), st.floats(0.5, 4.0))
shapes = st.lists(st.integers(1, 8), min_size=1, max_size=8)


def _guarantees(est: Estimator, j: JobModel, shape: list[int], b: float) -> None:
    k = sum(shape)
    p = est.rates(j, [k, 1, k], [len(shape), 1, len(shape)], [max(shape), 1, max(shape)], [b, b * k, b])
    rate = p.steps_per_s
    assert np.all(np.isfinite(rate)) and np.all(rate > 0)
    assert np.all(np.isfinite(p.low)) and np.all(p.low > 0) and np.all(np.isfinite(p.high))
    one = 1.0 / j.compute_seconds(b)
    assert rate[0] <= one * (1 + 1e-9)  # weak scaling: samples/s on k GPUs ≤ k × one GPU's


@settings(max_examples=200, deadline=None)
@given(theta=thetas, fabric=fabrics, shape=shapes, b=st.floats(0.5, 4096.0), t_ref=st.floats(1e-4, 100.0),
       b_ref=st.floats(0.5, 4096.0), nbytes=st.floats(0.0, 1e10),
       t_floor=st.one_of(st.just(0.0), st.floats(1e-5, 100.0)))
def test_no_profile_predicts_super_linear_negative_or_non_finite_throughput(theta, fabric, shape, b, t_ref, b_ref,
                                                                          nbytes, t_floor):
    prior = Prior()
    j = JobModel("m", nbytes, t_ref, b_ref, np.array(theta), prior.cov, prior, t_floor=t_floor)
    _guarantees(Estimator(fabric), j, shape, b)
    # strong scaling: the global batch b·k split over k GPUs is never more than k× one GPU's pace
    k = sum(shape)
    strong = Estimator(fabric).rates(j, [1, k], [1, len(shape)], [1, max(shape)], [b * k, b]).steps_per_s
    assert strong[1] <= k * strong[0] * (1 + 1e-9)


measurements = st.lists(st.tuples(shapes, st.floats(0.5, 1024.0), st.floats(-8.0, 8.0), st.booleans()),
                        min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(fabric=fabrics, profile=st.lists(st.tuples(st.floats(0.5, 1024.0), st.floats(1e-4, 50.0)), min_size=1,
                                        max_size=5), seq=measurements, nbytes=st.floats(0.0, 1e10),
       query=shapes, b=st.floats(0.5, 4096.0))
def test_no_sequence_of_corrections_breaks_the_guarantees(fabric, profile, seq, nbytes, query, b):
    """Measurements anywhere from 1/3000× to 3000× the prediction, with or without an exposed
    communication time, folded in one at a time."""
    bs, ts = (np.array(x) for x in zip(*profile))
    j = JobModel.from_one_gpu("m", nbytes, bs, ts)
    est = Estimator(fabric)
    for shape, lb, log_err, timed in seq:
        k = sum(shape)
        pred = est.rates(j, [k], [len(shape)], [max(shape)], [lb], uncertainty=False).steps_per_s[0]
        seconds = math.exp(log_err) / pred
        comm = np.array([0.5 * seconds if timed else np.nan])
        base = fabric.allreduce_seconds(nbytes, k, len(shape), max(shape))
        j = j.updated(Steps(np.array([lb]), base, np.array([seconds]), comm))
        assert np.all(np.isfinite(j.theta)) and np.all(np.isfinite(j.cov))
        assert np.all(j.theta >= THETA_LOWER) and np.all(j.theta <= THETA_UPPER)
        assert np.all(np.linalg.eigvalsh(j.cov) > 0)
    _guarantees(est, j, query, b)


def test_a_batch_query_over_many_jobs_matches_one_job_at_a_time():
    jobs = [job(f=f, eta=e, rho=r) for f, e, r in ((0.1, 1.0, 0.2), (0.5, 3.0, 0.8), (0.0, 0.3, 0.0))]
    batch = JobBatch.of(jobs)
    est = Estimator(FAB)
    idx = np.array([2, 0, 1, 1])
    k, n, g, b = np.array([4, 8, 2, 16]), np.array([1, 2, 2, 4]), np.array([4, 4, 1, 4]), np.array([8., 16., 32., 64.])
    many = est.predict(batch, idx, k, n, g, b)
    for i in range(4):
        one = est.rates(jobs[idx[i]], k[i:i + 1], n[i:i + 1], g[i:i + 1], b[i:i + 1])
        assert many.steps_per_s[i] == pytest.approx(one.steps_per_s[0])
        assert many.log_sd[i] == pytest.approx(one.log_sd[0])
