"""Hand-computed pins of calibration's public surface (``coddl.perf.calibrate``): a job's rows as
``Steps`` (``job_steps``), a job's one-GPU model (``one_gpu_model``), a cluster's own noise levels
(``with_cluster_noise``), ``calibrate``'s choice of what it fits on and what it returns, and a
``Calibration``'s estimator and JSON file."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from coddl.clusterspec import parse_yaml_spec
from coddl.core.cluster import GpuType
from coddl.perf.calibrate import (FLOOR, Calibration, Population, calibrate, default_prior, job_steps,
                                  one_gpu_model, with_cluster_noise)
from coddl.perf.estimator import Estimator
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import JobModel, Prior
from coddl.perf.table import ProfileError, ProfileTable

# 10 GB/s inside a node, 1 GB/s between nodes: 1e-10 and 1e-9 s/byte; latencies 5 µs and 20 µs
HIER = Fabric(intra_gbps=10.0, inter_gbps=1.0, intra_latency_us=5.0, inter_latency_us=20.0, algorithm="hierarchical")
RING = Fabric(intra_gbps=20.0, inter_gbps=2.0, intra_latency_us=10.0, inter_latency_us=80.0, algorithm="ring")
TYPES_YAML = "gpu_types: {V100: {speed: 1.0}, K80: {speed: 0.25}}\nnodes: [{count: 4, gpu_type: V100, gpus: 4}]"


def row(model: str = "m", gpus: int = 1, placement: tuple[int, ...] = (1,), steps_per_s: float = 1.0,
        local_batch: float = 32.0, param_bytes: float = 1e8, gpu_type: str = "V100", cluster: str = "c",
        compute_share: float | None = None, kind: str = "job") -> dict:
    return {"cluster": cluster, "model": model, "param_bytes": param_bytes, "gpu_type": gpu_type, "gpus": gpus,
            "placement": placement, "local_batch": local_batch, "steps_per_s": steps_per_s,
            "compute_share": compute_share, "kind": kind}


# ---- job_steps ----

def _three_rows(param_bytes: float = 1e8) -> ProfileTable:
    # one GPU; two GPUs on one node; 2+2 GPUs on two nodes; every worker on half a device
    return ProfileTable.build([row(gpus=1, placement=(1,), steps_per_s=4.0, local_batch=16.0, compute_share=0.5,
                                   param_bytes=param_bytes),
                               row(gpus=2, placement=(2,), steps_per_s=2.0, compute_share=0.5, param_bytes=param_bytes),
                               row(gpus=4, placement=(2, 2), steps_per_s=1.0, local_batch=64.0, compute_share=0.5,
                                   param_bytes=param_bytes)])


def test_job_steps_prices_each_row_s_all_reduce_with_its_shape_and_share():
    steps = job_steps(_three_rows(), HIER)
    # hierarchical, M = 1e8 bytes in ceil(100 MB / 25 MB) = 4 buckets, g GPUs per node, n nodes;
    # the intra-node terms grow by 1/share = 2:
    #   (1,):   one GPU, no all-reduce                                               → 0
    #   (2,):   intra 2(g−1)/g·M·2 = 2e8 B · 1e-10 = 0.02; intra steps 2(g−1)·4·2 = 16 · 5e-6 = 8e-5
    #           → 0.02008
    #   (2, 2): as (2,) inside the nodes, 0.02008; between them 2(n−1)/n·M = 1e8 B · 1e-9 = 0.1 and
    #           2(n−1)·4 = 8 steps · 20e-6 = 1.6e-4 → 0.12024
    assert steps.comm_base == pytest.approx([0.0, 0.02008, 0.12024], rel=1e-12)
    assert steps.local_batch.tolist() == [16.0, 32.0, 64.0]
    assert steps.seconds == pytest.approx([0.25, 0.5, 1.0])  # 1 / steps_per_s
    assert np.isnan(steps.comm_s).all()  # not measured
    assert steps.speed.tolist() == [0.5, 0.5, 0.5]  # the share of a device, × the default speed 1
    assert steps.distributed.tolist() == [False, True, True]  # more than one GPU


def test_job_steps_scales_the_share_by_the_given_speed():
    # speed 2 (a device twice the profiled one) × share 0.5 → 1.0 on every row; per-row speeds multiply too
    assert job_steps(_three_rows(), HIER, 2.0).speed.tolist() == [1.0, 1.0, 1.0]
    assert job_steps(_three_rows(), HIER, np.array([1.0, 4.0, 0.5])).speed.tolist() == [0.5, 2.0, 0.25]


def test_a_multi_gpu_row_is_distributed_even_when_its_all_reduce_costs_nothing():
    # nothing to all-reduce on a fabric without latency: comm_base is 0 on every row, yet the 2- and
    # 4-GPU rows ran on more than one GPU (distributed = gpus > 1, not comm_base > 0)
    free = Fabric(intra_latency_us=0.0, inter_latency_us=0.0)
    steps = job_steps(_three_rows(param_bytes=0.0), free)
    assert steps.comm_base.tolist() == [0.0, 0.0, 0.0]
    assert steps.distributed.tolist() == [False, True, True]


# ---- one_gpu_model ----

def test_one_gpu_model_uses_only_the_one_gpu_rows_scaled_by_their_share():
    rows = ProfileTable.build([
        # on half a device a step takes twice as long: 0.6 s at batch 16 and 1.8 s at 64 are
        # 0.3 s and 0.9 s on a whole one
        row("m", 1, (1,), 1 / 0.6, 16.0, param_bytes=4e6, gpu_type="K80", compute_share=0.5),
        row("m", 1, (1,), 1 / 1.8, 64.0, param_bytes=4e6, gpu_type="K80", compute_share=0.5),
        row("m", 4, (4,), 100.0, 32.0, param_bytes=4e6, gpu_type="K80", compute_share=0.5),  # ignored
    ])
    prior = Prior(mean=(0.3, 0.1, 0.5), sd=(0.2, 0.4, 0.3), noise=0.07)
    job = one_gpu_model(rows, prior)
    # b_ref: the geometric mean batch of the one-GPU rows, √(16·64) = 32; the line through
    # (16, 0.3) and (64, 0.9) has slope 0.6/48 = 0.0125 and is 0.3 + 16·0.0125 = 0.5 s at 32
    assert job.name == "m" and job.param_bytes == 4e6
    assert job.b_ref == pytest.approx(32.0)
    assert job.t_ref == pytest.approx(0.5)
    assert job.gpu_type == "K80"  # the profiled type of the job
    assert job.prior == prior  # the prior it starts from is the one given
    assert job.measured == 0
    # the same job from the whole-device seconds directly
    same = JobModel.from_one_gpu("m", 4e6, np.array([16.0, 64.0]), np.array([0.3, 0.9]), prior, "K80")
    assert job.theta == pytest.approx(same.theta) and job.cov == pytest.approx(same.cov)


def test_one_gpu_model_without_a_prior_starts_from_the_default_one():
    rows = ProfileTable.build([row(steps_per_s=2.0), row(steps_per_s=1.0, local_batch=64.0)])
    job = one_gpu_model(rows)
    assert job.prior == Prior() and job.gpu_type == "V100"


def test_one_gpu_model_needs_one_gpu_rows_and_names_the_job_and_cluster():
    only_multi = ProfileTable.build([row("resnet", 2, (2,), cluster="lab")])
    with pytest.raises(ProfileError) as e:
        one_gpu_model(only_multi)
    # no source: the message says "profiles"
    assert str(e.value) == ("profiles: resnet on lab: no one-GPU rows; "
                            "the estimator needs the job's one-GPU profile")
    named = ProfileTable.build([row("resnet", 2, (2,), cluster="lab")], source="mine.csv")
    with pytest.raises(ProfileError) as e:
        one_gpu_model(named)
    assert str(e.value) == ("mine.csv: resnet on lab: no one-GPU rows; "
                            "the estimator needs the job's one-GPU profile")


# ---- with_cluster_noise ----

def _pop(noise=(), comm=(), one=()) -> Population:
    return Population("c", np.zeros((len(noise), 3)), np.array(noise, dtype=float), np.array(comm, dtype=float),
                      np.array(one, dtype=float))


def test_with_cluster_noise_takes_the_median_of_each_noise_level_the_cluster_measured():
    prior = Prior(mean=(0.3, 0.1, 0.5), noise=0.5, comm_noise=0.5, one_gpu_noise=0.5)
    got = with_cluster_noise(prior, _pop(noise=(0.2, 0.06, 0.1), comm=(0.02, 0.10, 0.06), one=(0.04, 0.02)))
    # medians: noise 0.1, comm 0.06, one-GPU (0.02 + 0.04)/2 = 0.03 — all above FLOOR (0.05, 0.03, 0.01)
    assert (got.noise, got.comm_noise, got.one_gpu_noise) == pytest.approx((0.1, 0.06, 0.03))
    assert got.mean == prior.mean and got.sd == prior.sd and got.corr == prior.corr


def test_with_cluster_noise_never_goes_below_the_floor():
    prior = Prior(noise=0.5, comm_noise=0.5, one_gpu_noise=0.5)
    got = with_cluster_noise(prior, _pop(noise=(0.001,), comm=(0.001, 0.002, 0.003), one=(0.001,)))
    assert (got.noise, got.comm_noise, got.one_gpu_noise) == (FLOOR.noise, FLOOR.comm_noise, FLOOR.one_gpu_noise)
    assert (FLOOR.noise, FLOOR.comm_noise, FLOOR.one_gpu_noise) == (0.05, 0.03, 0.01)


def test_with_cluster_noise_keeps_the_levels_the_cluster_did_not_measure():
    prior = Prior(noise=0.5, comm_noise=0.4, one_gpu_noise=0.3)
    assert with_cluster_noise(prior, _pop()) == prior
    got = with_cluster_noise(prior, _pop(comm=(0.2,)))  # only exposed communication was timed
    assert (got.noise, got.comm_noise, got.one_gpu_noise) == (0.5, 0.2, 0.3)


# ---- calibrate ----

def _collective_rows(fabric: Fabric = RING) -> list[dict]:
    # pure all-reduces of 1 MB and 64 MB on four multi-GPU shapes: 8 rows, priced exactly by ``fabric``
    out = []
    for shape in ((2,), (4,), (2, 2), (4, 4, 4)):
        for mb in (1, 64):
            t = float(fabric.allreduce_seconds(mb * 1e6, sum(shape), len(shape), shape[0])[0])
            out.append(row(f"ar{mb}", sum(shape), shape, 1 / t, 0.0, mb * 1e6, kind="collective"))
    return out


JOBS = {"a": (100e6, 0.2, (0.25, 0.0, 0.4)), "b": (20e6, 0.05, (0.4, math.log(0.7), 0.2))}


def _job_rows(names=("a", "b"), fabric: Fabric = RING, multi_only: tuple[str, ...] = ()) -> list[dict]:
    """Noise-free steps of the jobs in ``JOBS`` on ``fabric`` (a job in ``multi_only`` gets no one-GPU rows)."""
    est = Estimator(fabric)
    out = []
    for name in names:
        nbytes, t_ref, theta = JOBS[name]
        job = JobModel(name, nbytes, t_ref, 32.0, np.array(theta), np.eye(3), Prior())
        for shape in ((1,), (2,), (4,), (2, 2), (4, 4), (2, 2, 2)):
            if name in multi_only and sum(shape) == 1:
                continue
            for b in (16.0, 32.0, 64.0):
                rate = float(est.rates(job, [sum(shape)], [len(shape)], [shape[0]], [b], uncertainty=False)
                             .steps_per_s[0])
                out.append(row(name, sum(shape), shape, rate, b, nbytes))
    return out


def test_calibrate_refuses_a_table_of_several_clusters_naming_them():
    rows = [row(cluster="east"), row(cluster="west"), row(cluster="east", model="n")]
    with pytest.raises(ProfileError) as e:
        calibrate(ProfileTable.build(rows))
    assert str(e.value) == ("profiles: calibrate one cluster at a time; the table holds east, west "
                            "(select one with --on)")
    with pytest.raises(ProfileError) as e:
        calibrate(ProfileTable.build(rows, source="both.csv"))
    assert str(e.value).startswith("both.csv: calibrate one cluster at a time; ")


def test_calibrate_refuses_a_job_not_in_the_table_listing_the_known_ones():
    table = ProfileTable.build([row("a"), row("b"), *_collective_rows()[:1]])
    with pytest.raises(ProfileError) as e:
        calibrate(table, jobs=["a", "nope"])
    # the known models are the jobs, not the micro-benchmarks
    assert str(e.value) == "profiles: model 'nope' is not in the table; known: a, b"
    with pytest.raises(ProfileError) as e:
        calibrate(ProfileTable.build([row("a"), row("b")], source="t.csv"), jobs=["nope"])
    assert str(e.value) == "t.csv: model 'nope' is not in the table; known: a, b"


def test_with_micro_benchmarks_calibrate_fits_the_links_on_them_alone_by_default():
    # job "b" has no one-GPU rows: fitting it would fail, and by default it is not fitted at all
    table = ProfileTable.build(_collective_rows() + _job_rows(multi_only=("b",)))
    prior = Prior(mean=(0.3, 0.1, 0.5), noise=0.5)
    cal = calibrate(table, algorithm="ring", prior=prior)
    assert cal.cluster == "c"
    assert cal.calibrated_on == ("collective",)
    assert cal.rows == 8  # the 8 collective rows, no job's
    assert cal.fit_rms < 1e-6  # they were priced by a ring fabric
    assert (cal.fabric.intra_gbps, cal.fabric.inter_gbps) == pytest.approx((20.0, 2.0), rel=1e-4)
    assert cal.prior == prior  # no job fitted: no cluster noise levels, the prior as given
    assert cal.gpu_types == {}  # no cluster spec given
    assert calibrate(table, algorithm="ring").prior == default_prior()


def test_calibrate_fits_only_the_jobs_asked_for():
    # "b" has no one-GPU rows: fitting it (or every job) would raise; fitting "a" alone does not
    table = ProfileTable.build(_collective_rows() + _job_rows(multi_only=("b",)))
    cal = calibrate(table, jobs=["a"], algorithm="ring")
    assert cal.calibrated_on == ("a",)
    assert cal.rows == 8 + 15  # the collective rows and a's 5 multi-GPU shapes × 3 batches
    with pytest.raises(ProfileError, match="b on c: no one-GPU rows"):
        calibrate(table, jobs=["a", "b"], algorithm="ring")


def test_calibrate_keeps_the_algorithm_it_is_given():
    # data priced by a ring fabric, calibrated as a tree: a tree it is, however well a ring fits
    table = ProfileTable.build(_collective_rows())
    assert calibrate(table, algorithm="tree").fabric.algorithm == "tree"
    assert calibrate(table, algorithm="hierarchical").fabric.algorithm == "hierarchical"


def test_calibrate_takes_the_gpu_types_of_the_cluster_spec():
    cluster = parse_yaml_spec(TYPES_YAML)
    cal = calibrate(ProfileTable.build(_collective_rows()), cluster, algorithm="ring")
    assert cal.gpu_types == {"V100": 1.0, "K80": 0.25}


def test_calibrating_on_jobs_sets_the_cluster_s_noise_levels_on_the_given_prior():
    table = ProfileTable.build(_job_rows())
    prior = Prior(mean=(0.3, 0.1, 0.5), sd=(0.2, 0.4, 0.3), noise=0.5, comm_noise=0.4, one_gpu_noise=0.3)
    cal = calibrate(table, algorithm="ring", prior=prior)
    assert cal.calibrated_on == ("a", "b")  # no micro-benchmarks: every job
    assert cal.rows == 2 * 15
    # noise-free steps: the held-out scatter of multi-GPU steps and of one-GPU steps around their
    # line are ~0, below the floor, so the floors 0.05 and 0.01; nothing timed the exposed
    # communication, so comm_noise stays the prior's; the rest of the prior is the given one
    assert cal.prior == replace(prior, noise=FLOOR.noise, one_gpu_noise=FLOOR.one_gpu_noise)


# ---- Calibration: estimator and file ----

CAL = Calibration("lab", Fabric(intra_gbps=10.0, inter_gbps=1.0), Prior(), ("collective",), 8, 0.01,
                  {"V100": 1.0, "K80": 0.25})


def test_a_calibration_s_estimator_has_its_fabric_and_gpu_types_and_balances_by_default():
    want = Estimator(CAL.fabric, {"V100": GpuType("V100", speed=1.0), "K80": GpuType("K80", speed=0.25)}, balance=True)
    assert CAL.estimator() == want
    assert CAL.estimator(balance=False) == replace(want, balance=False)
    job = JobModel("m", 1e8, 1.0, 32.0, np.array(Prior().mean), Prior().cov, Prior(), "V100")
    assert CAL.estimator().speed(job, "K80") == 0.25  # 0.25 / 1.0


def test_to_json_writes_an_indented_document():
    cal = Calibration("lab", Fabric(), Prior(mean=(0.25, 0.0, 0.5), sd=(0.3, 0.5, 0.35), corr=(0.0, 0.0, 0.0)),
                      ("a", "b"), 30, 0.5, {"V100": 1.0})
    assert cal.to_json() == """{
  "cluster": "lab",
  "fabric": {
    "intra_gbps": 100.0,
    "inter_gbps": 12.5,
    "intra_latency_us": 5.0,
    "inter_latency_us": 20.0,
    "algorithm": "ring",
    "bucket_mb": 25.0,
    "two_node_factor": 1.0
  },
  "prior": {
    "mean": [
      0.25,
      0.0,
      0.5
    ],
    "sd": [
      0.3,
      0.5,
      0.35
    ],
    "noise": 0.08,
    "comm_noise": 0.05,
    "one_gpu_noise": 0.03,
    "corr": [
      0.0,
      0.0,
      0.0
    ]
  },
  "calibrated_on": [
    "a",
    "b"
  ],
  "rows": 30,
  "fit_rms": 0.5,
  "gpu_types": {
    "V100": 1.0
  }
}"""
    assert Calibration.from_json(cal.to_json()) == cal


def test_from_json_reads_a_file_written_before_gpu_types_were_recorded():
    d = json.loads(CAL.to_json())
    del d["gpu_types"]
    assert Calibration.from_json(json.dumps(d)) == replace(CAL, gpu_types={})


def test_from_json_names_its_source_when_the_text_is_no_calibration():
    with pytest.raises(ProfileError) as e:
        Calibration.from_json("{}")
    assert str(e.value) == "calibration: not a calibration written by `coddl estimate calibrate` ('cluster')"
    with pytest.raises(ProfileError) as e:
        Calibration.from_json("{}", "x.json")
    assert str(e.value).startswith("x.json: not a calibration")


def test_load_of_a_missing_file_says_so(tmp_path):
    p = tmp_path / "none.json"
    with pytest.raises(ProfileError) as e:
        Calibration.load(p)
    assert str(e.value) == f"{p}: no such file"
