"""Pins of ``fit_fabric`` (``coddl.perf.calibrate``) on small hand-built profile tables: which rows
anchor the links (collective rows on more than one GPU, each job's own multi-GPU rows), the
candidate algorithms of ``auto`` and the bucket size the terms are priced with, the bounds (an
intra-node latency no larger than the inter-node one, a two-node factor in [0.5, 4] and fixed at 1
unless both two-node and larger rows are measured), the measured exposed communication (``comm_s``)
and a job's one-GPU floor, what each fitted job keeps of its one-GPU model, and the error for a
table with nothing to calibrate from.

The tables are generated noise-free from a known fabric and θ = the fit's weak prior mean
(f = 0.25, log η = 0, ρ = 0.4): every residual, the prior's included, is then 0 at the truth, so a
correct fit recovers the truth and explains every row (rms ≈ 0, up to the solver's tolerance).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from coddl.perf.calibrate import FIT_ALGORITHMS, WEAK, fit_fabric
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import step_model
from coddl.perf.table import ProfileError, ProfileTable

TH = np.array(WEAK.mean)  # (0.25, 0.0, 0.4): the prior residuals vanish at the truth
RING = Fabric(intra_gbps=20.0, inter_gbps=2.0, intra_latency_us=10.0, inter_latency_us=80.0, algorithm="ring")
HIER = Fabric(intra_gbps=20.0, inter_gbps=2.0, intra_latency_us=10.0, inter_latency_us=80.0,
              algorithm="hierarchical")
ONE_NODE_AND_TWO = [(2,), (4,), (1, 1), (2, 2), (4, 4)]
JOB_SHAPES = [(2,), (4,), (1, 1), (2, 2), (4, 4)]
BATCHES = (8.0, 32.0, 128.0)


def row(model: str = "m", gpus: int = 1, placement: tuple[int, ...] = (1,), steps_per_s: float = 1.0,
        local_batch: float = 32.0, param_bytes: float = 1e8, gpu_type: str = "V100", cluster: str = "c",
        compute_share: float | None = None, kind: str = "job", comm_s: float | None = None) -> dict:
    return {"cluster": cluster, "model": model, "param_bytes": param_bytes, "gpu_type": gpu_type, "gpus": gpus,
            "placement": placement, "local_batch": local_batch, "steps_per_s": steps_per_s,
            "compute_share": compute_share, "kind": kind, "comm_s": comm_s}


def collectives(truth: Fabric, shapes, mbs=(1, 16, 256), share: float | None = None, model: str | None = None):
    """Pure all-reduces of 1, 16 and 256 MB on each shape, timed exactly as ``truth`` prices them."""
    rows = []
    for shape in shapes:
        for mb in mbs:
            t = float(truth.allreduce_seconds(mb * 1e6, sum(shape), len(shape), shape[0], share or 1.0)[0])
            rows.append(row(model or f"ar{mb}", sum(shape), shape, 1.0 / t, 0.0, mb * 1e6, kind="collective",
                            compute_share=share))
    return rows


def one_gpu(model: str = "m", t_ref: float = 0.2, b_ref: float = 32.0, nbytes: float = 1e8, gpu_type: str = "V100",
            batches=(16.0, 64.0)):
    """One-GPU steps on the line t_ref·(0.25 + 0.75·b/b_ref): at 16 and 64 (geometric mean 32 = b_ref)
    the affine fit gives back t_ref at b_ref exactly."""
    return [row(model, 1, (1,), 1.0 / (t_ref * (0.25 + 0.75 * b / b_ref)), b, nbytes, gpu_type)
            for b in batches]


def multi_gpu(truth: Fabric, model: str = "m", t_ref: float = 0.2, b_ref: float = 32.0, nbytes: float = 1e8,
              shapes=JOB_SHAPES, batches=BATCHES, share: float = 1.0, timed: bool = False, floor: float = 0.0,
              gpu_type: str = "V100"):
    """The job's multi-GPU steps as the step model prices them on ``truth`` with θ = TH (and, when
    ``timed``, the exposed communication T − C each step waited for)."""
    rows = []
    for shape in shapes:
        for b in batches:
            a = truth.allreduce_seconds(nbytes, sum(shape), len(shape), shape[0], share)
            _, _, c, _, t, _ = step_model(t_ref, b_ref, b, share, a, TH, grad=True, floor=floor)
            t, c = float(np.ravel(t)[0]), float(np.ravel(c)[0])
            rows.append(row(model, sum(shape), shape, 1.0 / t, b, nbytes, gpu_type, compute_share=share,
                            comm_s=t - c if timed else None))
    return rows


def links(f: Fabric) -> tuple[float, ...]:
    return (f.intra_gbps, f.inter_gbps, f.intra_latency_us, f.inter_latency_us)


# ---- which collective rows anchor the links ----

def test_collective_rows_alone_give_back_their_links_and_are_all_explained():
    # 5 shapes × 3 sizes = 15 noise-free all-reduces: the ring's links come back and every row is
    # explained (rms of log(fitted/measured) over the 15 collective rows ≈ 0)
    fit = fit_fabric(ProfileTable.build(collectives(RING, ONE_NODE_AND_TWO)), jobs=[], algorithm="ring")
    assert links(fit.fabric) == pytest.approx((20.0, 2.0, 10.0, 80.0), rel=1e-3)
    assert fit.rows == 15
    assert fit.rms < 1e-3
    assert fit.jobs == {}


def test_a_single_collective_row_is_enough_to_anchor_a_fit():
    # one 16 MB all-reduce on two GPUs of one node: a micro-benchmark anchors the fit by itself
    # (len(collective rows) > 0), and the fit explains that one row
    fit = fit_fabric(ProfileTable.build(collectives(RING, [(2,)], mbs=(16,))), jobs=[], algorithm="ring")
    assert fit.rows == 1
    assert fit.rms < 1e-3


def test_two_gpu_collective_rows_count():
    # only two-GPU all-reduces, on one node (2,) and on two (1, 1): "more than one GPU" includes 2
    fit = fit_fabric(ProfileTable.build(collectives(RING, [(2,), (1, 1)])), jobs=[], algorithm="ring")
    assert fit.rows == 6
    assert fit.rms < 1e-3
    # the ring of 2 over one node moves 2·1/2·M bytes at 1/20 GB/s and 2 steps at 10 µs per bucket;
    # over two nodes the same at 2 GB/s and 80 µs: both links are pinned down
    assert links(fit.fabric) == pytest.approx((20.0, 2.0, 10.0, 80.0), rel=1e-3)


def test_a_one_gpu_collective_row_is_left_out():
    # a "collective" on one GPU all-reduces nothing (0 s under any links): it is not a measurement of
    # the links, so it is neither fitted nor counted — the 15 real rows are, and all explained
    rows = collectives(RING, ONE_NODE_AND_TWO) + [row("ar1", 1, (1,), 1000.0, 0.0, 1e6, kind="collective")]
    fit = fit_fabric(ProfileTable.build(rows), jobs=[], algorithm="ring")
    assert fit.rows == 15
    assert math.isfinite(fit.rms) and fit.rms < 1e-3
    assert links(fit.fabric) == pytest.approx((20.0, 2.0, 10.0, 80.0), rel=1e-3)


def test_collective_rows_all_slower_by_a_common_factor_give_links_that_much_slower():
    # every all-reduce's time is linear in (1/B_intra, 1/B_inter, L_intra, L_inter): rows all 10%
    # slower are explained exactly by bandwidths / 1.1 and latencies × 1.1 (rms of log time 0)
    rows = collectives(RING, ONE_NODE_AND_TWO)
    for r in rows:
        r["steps_per_s"] /= 1.1
    fit = fit_fabric(ProfileTable.build(rows), jobs=[], algorithm="ring")
    assert links(fit.fabric) == pytest.approx((20.0 / 1.1, 2.0 / 1.1, 11.0, 88.0), rel=1e-3)
    assert fit.rms < 1e-3


def test_without_intra_node_rows_the_intra_node_link_keeps_the_default_ratios():
    # one GPU per node on 2, 3 and 4 nodes: every ring crosses the NIC, nothing measures the links
    # inside a node, so the fit leaves them where it started — the default fabric's ratios to the
    # inter-node link (100/12.5 = 8× the bandwidth, 5/20 = ¼ of the latency) — and fits the rest
    fit = fit_fabric(ProfileTable.build(collectives(RING, [(1, 1), (1, 1, 1), (1, 1, 1, 1)])), jobs=[],
                     algorithm="ring")
    f = fit.fabric
    assert (f.inter_gbps, f.inter_latency_us, f.two_node_factor) == pytest.approx((2.0, 80.0, 1.0), rel=1e-3)
    assert f.intra_gbps == pytest.approx(8.0 * f.inter_gbps, rel=1e-12)
    assert f.intra_latency_us == pytest.approx(0.25 * f.inter_latency_us, rel=1e-12)


def test_collective_rows_with_a_share_of_a_device_are_priced_with_it():
    # every worker on half a device: the intra-node terms grow by 1/0.5 = 2 (``Fabric.terms``); data
    # generated that way fit the true links only if the fit prices each row with its share
    fit = fit_fabric(ProfileTable.build(collectives(RING, ONE_NODE_AND_TWO, share=0.5)), jobs=[], algorithm="ring")
    assert links(fit.fabric) == pytest.approx((20.0, 2.0, 10.0, 80.0), rel=1e-3)
    assert fit.rms < 1e-3


# ---- the candidate algorithms and the bucket size ----

def test_auto_picks_each_row_s_algorithm_under_the_fitted_links():
    # intra 3 GB/s, inter 2 GB/s: on (2, 2) and (4, 4) a 16 or 256 MB ring (1.5·M and 1.75·M over the
    # NIC) beats the hierarchical all-reduce (its extra intra-node M·(g−1)/g·2 at 3 GB/s), while on
    # the default fabric (100 / 12.5 GB/s) the hierarchical one is cheaper: the choice must be made
    # under the links being fitted, not the default ones, for the 21 rows to be explained
    truth = Fabric(3.0, 2.0, 10.0, 80.0, "auto")
    rows = collectives(truth, [(2,), (4,), (1, 1), (2, 2), (4, 4), (2, 2, 2), (4, 4, 4, 4)])
    fit = fit_fabric(ProfileTable.build(rows), jobs=[], algorithm="auto")
    assert fit.fabric.algorithm == "auto"
    assert links(fit.fabric) == pytest.approx((3.0, 2.0, 10.0, 80.0), rel=1e-3)
    assert fit.rms < 1e-5


def test_the_bucket_size_prices_the_latency_of_every_row():
    # 1 MB buckets: a 16 MB all-reduce pays 16 latencies per step, a 256 MB one 256 (with the default
    # 25 MB buckets: 1 and 11); data timed with 1 MB buckets fit only when priced with them
    truth = Fabric(20.0, 2.0, 10.0, 80.0, "ring", bucket_mb=1.0)
    fit = fit_fabric(ProfileTable.build(collectives(truth, ONE_NODE_AND_TWO)), jobs=[], algorithm="ring",
                     bucket_mb=1.0)
    assert fit.fabric.bucket_mb == 1.0
    assert links(fit.fabric) == pytest.approx((20.0, 2.0, 10.0, 80.0), rel=1e-3)
    assert fit.rms < 1e-3


# ---- bounds ----

def test_the_intra_node_latency_is_never_above_the_inter_node_one():
    # timed with 40 µs inside a node and 20 µs between nodes: the fit keeps intra/inter latency in
    # [0, 1], so it ends at the bound, the two latencies equal
    truth = Fabric(20.0, 2.0, 40.0, 20.0, "ring")
    fit = fit_fabric(ProfileTable.build(collectives(truth, ONE_NODE_AND_TWO)), jobs=[], algorithm="ring")
    assert fit.fabric.intra_latency_us == pytest.approx(fit.fabric.inter_latency_us, rel=1e-9)
    assert fit.rms > 1e-3  # the one-node rows' 40 µs cannot be matched


TWO_AND_MORE = [(2,), (4,), (1, 1), (2, 2), (4, 4), (2, 2, 2), (4, 4, 4, 4)]


@pytest.mark.parametrize("shapes", [TWO_AND_MORE, [(2,), (4,), (2, 2), (2, 2, 2)], [(2,), (4,), (2, 2), (4, 4, 4, 4)]],
                         ids=["2,3,4 nodes", "2 and 3 nodes", "2 and 4 nodes"])
def test_a_two_node_factor_is_fitted_where_two_node_and_larger_rows_are_measured(shapes):
    # two-node rows × 1.3, and rows on 3 or 4 nodes that are not: the factor is told from the links
    truth = Fabric(20.0, 2.0, 10.0, 80.0, "ring", two_node_factor=1.3)
    fit = fit_fabric(ProfileTable.build(collectives(truth, shapes)), jobs=[], algorithm="ring")
    assert fit.fabric.two_node_factor == pytest.approx(1.3, rel=1e-3)
    assert links(fit.fabric) == pytest.approx((20.0, 2.0, 10.0, 80.0), rel=1e-3)


def test_a_two_node_factor_is_at_most_4():
    # two-node rows × 4.5: the factor stops at its bound 4, the inter-node link takes the rest
    truth = Fabric(20.0, 2.0, 10.0, 80.0, "ring", two_node_factor=4.5)
    fit = fit_fabric(ProfileTable.build(collectives(truth, TWO_AND_MORE)), jobs=[], algorithm="ring")
    assert fit.fabric.two_node_factor == pytest.approx(4.0, rel=1e-9)
    assert fit.rms > 1e-3


def test_without_rows_on_more_than_two_nodes_the_two_node_factor_stays_1():
    # hierarchical, two-node rows timed × 0.7 but no rows on 3 or more nodes: the factor cannot be
    # told from the links and stays exactly 1 (the data cannot be matched: the two-node rows' intra
    # part is fixed by the one-node rows)
    truth = Fabric(20.0, 2.0, 10.0, 80.0, "hierarchical", two_node_factor=0.7)
    fit = fit_fabric(ProfileTable.build(collectives(truth, ONE_NODE_AND_TWO)), jobs=[], algorithm="hierarchical")
    assert fit.fabric.two_node_factor == 1.0
    assert fit.rows == 15


def test_without_rows_on_more_than_two_nodes_a_job_s_fit_keeps_the_factor_at_1():
    # as above, with one job's rows instead of micro-benchmarks (one-node and two-node rows only)
    truth = Fabric(20.0, 2.0, 10.0, 80.0, "hierarchical", two_node_factor=0.7)
    fit = fit_fabric(ProfileTable.build(one_gpu() + multi_gpu(truth)), algorithm="hierarchical")
    assert fit.fabric.two_node_factor == 1.0
    assert fit.rows == 15


# ---- jobs ----

def test_a_job_s_rows_give_back_its_links_and_theta():
    # one job, 15 multi-GPU steps (5 shapes × 3 batches) and their exposed communication: with
    # comm_s measured, θ = (0.25, 0, 0.4) comes back (one job: its own η is 1) and every step is
    # explained. Inside a node g = 2 and 4 move 2(g−1)/g·M bytes in 2(g−1) steps per bucket, which
    # tells the intra bandwidth from the latency; between nodes every row is on 2 nodes with the
    # same M, so only the inter-node time of that message is determined: 1e8 B / 2 GB/s + 2 steps ×
    # 4 buckets × 80 µs = 0.05064 s
    fit = fit_fabric(ProfileTable.build(one_gpu() + multi_gpu(HIER, timed=True)), algorithm="hierarchical")
    assert fit.rows == 15  # log-time residuals of the 15 multi-GPU rows (the one-GPU ones only set t_ref)
    assert fit.rms < 1e-3
    f = fit.fabric
    assert (f.intra_gbps, f.intra_latency_us) == pytest.approx((20.0, 10.0), rel=0.02)
    assert f.allreduce_seconds(1e8, 2, 2, 1)[0] == pytest.approx(0.05064, rel=1e-3)
    assert fit.jobs["m"].theta == pytest.approx(TH, abs=0.02)



def _objective(fabric: Fabric, theta: np.ndarray, table: ProfileTable) -> float:
    """What the fit minimises for one job (t_ref 0.2 s at b_ref 32), by the module's rules: each
    step's log time off by noise 0.08, each measured wait (T − C vs comm_s) off by 0.05 of the step,
    θ off the weak prior by its sd."""
    m = table.take(table.gpus > 1)
    a = fabric.allreduce_seconds(m.param_bytes, m.gpus, m.nodes, m.max_per_node, m.compute_share)
    log_t, _, c, _, t, _ = step_model(0.2, 32.0, m.local_batch, m.compute_share, a, theta, grad=True)
    r = np.concatenate([(log_t - np.log(m.step_s)) / WEAK.noise, (t - c - m.comm_s) / (m.step_s * WEAK.comm_noise),
                        (theta - TH) / np.array(WEAK.sd)])
    return float(r @ r)


def test_measured_waits_weigh_against_step_times_by_the_comm_noise():
    # the waits are recorded 50% longer than the steps imply: at the truth every step time is
    # explained and each wait is off by 0.5·(T − C), i.e. 10× (T − C)/T in units of 0.05 of the step.
    # A wait weighs 1/(T·0.05), so the fit gives up step-time accuracy (rms of log time well above
    # 0) to explain them, and ends far below the truth's objective (20.1 → about 4)
    rows = one_gpu() + multi_gpu(HIER, timed=True)
    for r in rows:
        if r["comm_s"] is not None:
            r["comm_s"] *= 1.5
    table = ProfileTable.build(rows)
    fit = fit_fabric(table, algorithm="hierarchical")
    at_truth = _objective(HIER, TH, table)
    assert at_truth > 10.0  # the waits alone: 15 rows each off by 10·(T − C)/T
    assert _objective(fit.fabric, fit.jobs["m"].theta, table) < 0.5 * at_truth
    assert fit.rms > 0.01

def test_a_fitted_job_keeps_its_one_gpu_model_but_for_theta():
    # name, bytes, t_ref at b_ref (0.2 s at 32: the line through 16 and 64), its device type and the
    # weak prior it was fitted under are those of its one-GPU model
    rows = one_gpu("m", t_ref=0.2, gpu_type="K80") + multi_gpu(HIER, "m", t_ref=0.2, gpu_type="K80")
    job = fit_fabric(ProfileTable.build(rows), algorithm="hierarchical").jobs["m"]
    assert job.name == "m"
    assert job.param_bytes == 1e8
    assert (job.t_ref, job.b_ref) == pytest.approx((0.2, 32.0), rel=1e-9)
    assert job.gpu_type == "K80"
    assert job.prior == WEAK
    assert job.t_floor == 0.0


FLOOR_ONE_GPU = [(1.0, 0.005), (2.0, 0.005), (4.0, None), (8.0, None), (16.0, None)]


def _floored_job(timed: bool = False):
    # one-GPU steps on the line 0.008·(0.25 + 0.75·b/8) at b = 4, 8, 16 (0.005, 0.008, 0.014 s) and a
    # floor of 0.005 s at b = 1 and 2, far above the line there (0.00275, 0.0035 s; > 3 × 0.03 in
    # log): the device's floor is 0.005 s, t_ref 0.008 s at b_ref = 8 (geometric mean of 4, 8, 16)
    one = [row("m", 1, (1,), 1.0 / (t if t is not None else 0.008 * (0.25 + 0.75 * b / 8.0)), b)
           for b, t in FLOOR_ONE_GPU]
    return one + multi_gpu(HIER, t_ref=0.008, b_ref=8.0, batches=(1.0, 2.0, 16.0), floor=0.005, timed=timed)


def test_a_job_s_one_gpu_floor_prices_its_multi_gpu_steps():
    # multi-GPU steps at b = 1 and 2 compute for the floor's 0.005 s, not the line's 0.00275/0.0035 s
    fit = fit_fabric(ProfileTable.build(_floored_job(timed=True)), algorithm="hierarchical")
    assert fit.jobs["m"].t_floor == pytest.approx(0.005, rel=1e-12)
    assert (fit.jobs["m"].t_ref, fit.jobs["m"].b_ref) == pytest.approx((0.008, 8.0), rel=1e-9)
    assert fit.rms < 1e-3


def test_a_job_s_rows_with_a_share_of_a_device_are_priced_with_it():
    # multi-GPU steps with every worker on half a device (intra-node terms × 2, compute × 2)
    rows = one_gpu() + multi_gpu(HIER, share=0.5, timed=True)
    fit = fit_fabric(ProfileTable.build(rows), algorithm="hierarchical")
    assert fit.rms < 1e-3


def test_a_job_without_multi_gpu_rows_does_not_stop_the_next_one_from_being_fitted():
    # "a" ran on one GPU only, "b" on 15 placements: b's rows calibrate the links; a keeps the prior θ
    rows = one_gpu("a") + one_gpu("b") + multi_gpu(HIER, "b", timed=True)
    fit = fit_fabric(ProfileTable.build(rows), algorithm="hierarchical")
    assert list(fit.jobs) == ["a", "b"]
    assert fit.rows == 15
    assert fit.rms < 1e-3
    # a's f and ρ meet nothing but the prior: its mean; the efficiencies' scale is fixed by their
    # geometric mean being 1 (mean log η = 0), so a's log η is minus b's
    a, b = fit.jobs["a"].theta, fit.jobs["b"].theta
    assert (a[0], a[2]) == pytest.approx((0.25, 0.4), abs=1e-9)
    assert a[1] == pytest.approx(-b[1], abs=1e-9)
    assert b == pytest.approx(TH, abs=0.02)


def test_a_collective_row_named_like_a_job_is_not_one_of_the_job_s_steps():
    # 15 job steps of "m" and 15 micro-benchmarks also labelled "m": the micro-benchmarks anchor
    # the links, the job's fit uses its own 15 steps only — 30 rows explained, not 45
    rows = one_gpu() + multi_gpu(RING, timed=True) + collectives(RING, ONE_NODE_AND_TWO, model="m")
    fit = fit_fabric(ProfileTable.build(rows), algorithm="ring")
    assert fit.rows == 30
    assert fit.rms < 1e-3


# ---- nothing to calibrate from ----

def test_a_table_without_multi_gpu_rows_names_its_cluster():
    # one job on one GPU only, in a table read from no file: "profiles", then the cluster "c"
    with pytest.raises(ProfileError) as e:
        fit_fabric(ProfileTable.build(one_gpu()), algorithm="ring")
    assert str(e.value) == "profiles: c: no multi-GPU rows to calibrate the links from"


def test_a_file_without_multi_gpu_rows_names_the_file_and_its_cluster():
    table = ProfileTable.build([row(cluster="dgx")], source="runs.csv")
    with pytest.raises(ProfileError) as e:
        fit_fabric(table, algorithm="ring")
    assert str(e.value) == "runs.csv: dgx: no multi-GPU rows to calibrate the links from"


def test_an_empty_table_has_no_cluster_to_name():
    with pytest.raises(ProfileError) as e:
        fit_fabric(ProfileTable.build([]), algorithm="ring")
    assert str(e.value) == "profiles: cluster: no multi-GPU rows to calibrate the links from"


# ---- the search's bounds and what it is handed ----

def test_a_table_of_two_clusters_is_refused_with_both_names():
    # links belong to one cluster: two clusters' rows in one fit are refused, named in table order
    rows = collectives(RING, [(2,)], mbs=(16,)) + [dict(r, cluster="d") for r in collectives(RING, [(2,)], mbs=(16,))]
    with pytest.raises(ValueError) as e:
        fit_fabric(ProfileTable.build(rows), jobs=[], algorithm="ring")
    assert str(e.value) == "fit_fabric: one cluster at a time, got c, d"


def test_the_inter_node_link_is_never_faster_than_the_intra_node_one():
    # timed with 2 GB/s inside a node and 20 GB/s between nodes: the fit keeps the intra-node
    # seconds per byte at most the inter-node ones (log ratio ≤ 0), so it ends at the bound, the
    # two bandwidths equal
    truth = Fabric(2.0, 20.0, 10.0, 80.0, "ring")
    fit = fit_fabric(ProfileTable.build(collectives(truth, ONE_NODE_AND_TWO)), jobs=[], algorithm="ring")
    assert fit.fabric.intra_gbps == pytest.approx(fit.fabric.inter_gbps, rel=1e-9)
    assert fit.rms > 1e-3


def test_the_inter_node_link_is_never_slower_than_100_kb_per_s():
    # a 10 kB/s link between nodes: the fit's inter-node seconds per byte stop at 1e-5 (100 kB/s =
    # 1e-4 GB/s), where a link that slow says the measurement, not the link, is wrong
    truth = Fabric(20.0, 1e-5, 10.0, 80.0, "ring")
    fit = fit_fabric(ProfileTable.build(collectives(truth, ONE_NODE_AND_TWO)), jobs=[], algorithm="ring")
    assert fit.fabric.inter_gbps == pytest.approx(1e-4, rel=1e-9)


def test_the_inter_node_latency_is_never_above_one_second():
    # 1.5 s per step between nodes: the fit's inter-node latency stops at its bound, 1 s
    truth = Fabric(20.0, 2.0, 10.0, 1.5e6, "ring")
    fit = fit_fabric(ProfileTable.build(collectives(truth, ONE_NODE_AND_TWO)), jobs=[], algorithm="ring")
    assert fit.fabric.inter_latency_us == pytest.approx(1e6, rel=1e-9)


def test_a_job_with_a_single_multi_gpu_row_is_fitted_to_it():
    # no micro-benchmarks and one job measured once across two nodes: that one row is what the links
    # are fitted to, and the fit explains it (the default fabric's 12.5 GB/s would price the 1e8-byte
    # all-reduce ~6× under the truth's 2 GB/s)
    rows = one_gpu() + multi_gpu(RING, shapes=[(1, 1)], batches=(32.0,))
    fit = fit_fabric(ProfileTable.build(rows), algorithm="ring")
    assert fit.rows == 1
    assert fit.rms < 1e-3


def test_auto_hands_the_noise_to_every_algorithm_it_tries():
    # steps 20% slower on two nodes than the truth prices them, so data and prior disagree and the
    # noise levels weigh them: with the algorithm left open, the best of the algorithms' fits under
    # the same noise comes back (and that noise does change the fit, so dropping it would show)
    rows = one_gpu() + multi_gpu(RING)
    for r in rows:
        if len(r["placement"]) > 1:
            r["steps_per_s"] /= 1.2
    table = ProfileTable.build(rows)
    loud = replace(WEAK, noise=0.5)
    best = min((fit_fabric(table, algorithm=a, noise=loud) for a in FIT_ALGORITHMS), key=lambda f: f.rms)
    fit = fit_fabric(table, noise=loud)
    assert fit.rms == best.rms
    assert links(fit.fabric) == links(best.fabric)
    assert fit.jobs["m"].theta == pytest.approx(best.jobs["m"].theta, rel=0, abs=0)
    weak = fit_fabric(table, algorithm=fit.fabric.algorithm)
    assert weak.rms != fit.rms
