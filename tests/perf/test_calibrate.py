"""Calibration on a synthetic testbed with known ground truth: the fitted fabric and the jobs'
parameters are the ones the measurements were generated from."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.clusterspec import parse_yaml_spec
from coddl.perf.calibrate import Calibration, calibrate, fit_fabric, learn_prior
from coddl.perf.estimator import Estimator
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import JobModel, Prior
from coddl.perf.table import ProfileError, ProfileTable

TRUTH = Fabric(intra_gbps=20.0, inter_gbps=2.0, intra_latency_us=10.0, inter_latency_us=80.0, algorithm="ring",
               two_node_factor=1.3)
JOBS = {  # name: (param bytes, t_ref at batch 32, θ = (f, log η, ρ))
    "big": (400e6, 0.40, (0.15, math.log(1.4), 0.6)),
    "small": (20e6, 0.05, (0.40, math.log(0.7), 0.2)),
    "mid": (100e6, 0.20, (0.25, 0.0, 0.4)),
}
SHAPES = [(1,), (2,), (4,), (1, 1), (2, 2), (4, 4), (2, 1), (4, 4, 4), (2, 2, 2, 2), (4, 4, 4, 4, 4, 4), (3, 3, 2)]
BATCHES = (8.0, 32.0, 128.0)


def synthetic(noise: float = 0.01, seed: int = 0, collective: bool = False, fabric: Fabric = TRUTH) -> ProfileTable:
    rng = np.random.default_rng(seed)
    est = Estimator(fabric)
    rows = []
    for name, (nbytes, t_ref, theta) in JOBS.items():
        job = JobModel(name, nbytes, t_ref, 32.0, np.array(theta), np.eye(3), Prior())
        for shape in SHAPES:
            for b in BATCHES:
                rate = est.rates(job, [sum(shape)], [len(shape)], [shape[0]], [b], uncertainty=False).steps_per_s
                rows.append({"cluster": "synthetic", "model": name, "param_bytes": nbytes, "gpu_type": "V100",
                             "gpus": sum(shape), "placement": shape, "local_batch": b,
                             "steps_per_s": float(rate[0]) * math.exp(rng.normal(0, noise))})
    if collective:
        for shape in SHAPES[1:]:
            for mb in (1, 16, 256):
                t = float(fabric.allreduce_seconds(mb * 1e6, sum(shape), len(shape), shape[0])[0])
                rows.append({"cluster": "synthetic", "model": f"ar{mb}", "param_bytes": mb * 1e6, "gpu_type": "V100",
                             "gpus": sum(shape), "placement": shape, "steps_per_s": 1 / t, "kind": "collective"})
    return ProfileTable.build(rows)


def test_calibration_recovers_the_links_and_every_job_s_parameters():
    """Links and efficiencies are known only up to a common scale (the jobs' efficiencies average
    1), so what is checked is what the data determine: the bandwidth each job effectively sees,
    efficiencies relative to each other, the two-node factor, fixed shares and overlaps."""
    fit = fit_fabric(synthetic(), algorithm="ring")
    f, jobs = fit.fabric, fit.jobs
    eta = {n: math.exp(j.theta[1]) for n, j in jobs.items()}
    true_eta = {n: math.exp(t[2][1]) for n, t in JOBS.items()}
    assert f.inter_gbps / eta["big"] == pytest.approx(TRUTH.inter_gbps / true_eta["big"], rel=0.05)
    assert eta["big"] / eta["mid"] == pytest.approx(true_eta["big"] / true_eta["mid"], rel=0.05)
    # inside a node the all-reduce is short and partly hidden under compute: less sharply determined
    assert f.intra_gbps / f.inter_gbps == pytest.approx(TRUTH.intra_gbps / TRUTH.inter_gbps, rel=0.2)
    assert f.two_node_factor == pytest.approx(1.3, rel=0.03)
    for name, (_, _, theta) in JOBS.items():
        assert jobs[name].theta[0] == pytest.approx(theta[0], abs=0.03)
        assert jobs[name].theta[2] == pytest.approx(theta[2], abs=0.08)
    assert fit.rms < 0.02


def test_collective_micro_benchmarks_alone_give_the_links_themselves():
    table = synthetic(collective=True)
    fit = fit_fabric(table, jobs=[], algorithm="ring")
    f = fit.fabric
    assert (f.intra_gbps, f.inter_gbps, f.two_node_factor) == pytest.approx((20.0, 2.0, 1.3), rel=0.02)
    assert (f.intra_latency_us, f.inter_latency_us) == pytest.approx((10.0, 80.0), rel=0.1)


def test_the_algorithm_that_generated_the_data_fits_best():
    tree = Fabric(20.0, 2.0, 10.0, 80.0, "tree", two_node_factor=1.0)
    table = synthetic(collective=True, fabric=tree)
    fits = {a: fit_fabric(table, jobs=[], algorithm=a).rms for a in ("ring", "hierarchical", "tree")}
    assert min(fits, key=fits.get) == "tree"
    assert fit_fabric(table, jobs=[]).rms == pytest.approx(min(fits.values()), abs=1e-6)


def test_a_learned_prior_is_centred_on_the_jobs_and_a_calibration_round_trips(tmp_path):
    table = synthetic(noise=0.02)
    prior = learn_prior(table, algorithm="ring")
    assert prior.mean[0] == pytest.approx(np.mean([t[2][0] for t in JOBS.values()]), abs=0.03)
    assert prior.noise < 0.1
    cluster = parse_yaml_spec("gpu_types: {V100: {speed: 1.0}}\nnodes: [{count: 6, gpu_type: V100, gpus: 4}]")
    cal = calibrate(table, cluster, algorithm="ring", prior=prior)
    assert cal.calibrated_on == tuple(JOBS)
    path = tmp_path / "c.json"
    path.write_text(cal.to_json())
    back = Calibration.load(path)
    assert back == cal
    path.write_text("{}")
    with pytest.raises(ProfileError, match="c.json: not a calibration written by `coddl estimate calibrate`"):
        Calibration.load(path)


def test_calibration_refuses_what_it_cannot_use():
    table = synthetic()
    with pytest.raises(ProfileError, match="no one-GPU rows"):
        fit_fabric(table.take(table.gpus > 1), algorithm="ring")
    with pytest.raises(ProfileError, match="model 'nope' is not in the table"):
        calibrate(table, jobs=["nope"])
    with pytest.raises(ProfileError, match="no multi-GPU rows"):
        fit_fabric(table.take(table.gpus == 1), algorithm="ring")
