"""A simulation on the bundled mixed cluster (32 V100, 32 P100, 32 K80) in which Gavel's
heterogeneity-aware max-min beats heterogeneity-unaware policies on the metric it optimises: the
smallest normalised throughput, a job's throughput over its throughput on an equal share.

Every job arrives at once and is given the work it would finish in exactly H on an equal share
of the cluster, so its normalised throughput over its lifetime is H / JCT and the minimum over
jobs is H / (the longest JCT)."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.clusterspec import load_cluster
from coddl.core.job import JobSpec
from coddl.perf.curves import load_coddl_curves
from coddl.perf.heterogeneity import type_speed_matrix
from coddl.policies.gavel import equal_share_speed
from coddl.policies.registry import make_policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate
from coddl.sim.estimator_rate import EstimatorRate

H = 10 * 3600.0
MODELS = ("Resnet50Model128", "AutoencoderModel51200", "TransformerModel256", "DcganModel256",
          "ChatbotModel256", "VggnetModel256")


@pytest.fixture(scope="module")
def setup():
    cluster = load_cluster("examples/clusters/mixed.yaml")
    curves = load_coddl_curves().extended(cluster.total_gpus)
    speed = type_speed_matrix(cluster.type_names, cluster.gpu_types, curves.names)
    cap = np.array([cluster.capacity_by_type[t] for t in cluster.type_names])
    n = 48
    model = np.array([curves.model_index(MODELS[i % len(MODELS)]) for i in range(n)])
    demand = np.random.default_rng(0).choice([1, 2, 4], size=n)
    eq = equal_share_speed(speed[:, model].T, demand, cap)
    specs = [JobSpec(f"j{i}", 0.0, int(demand[i]), H * curves.rate[model[i], demand[i]] * eq[i],
                     curves.names[model[i]], max_gpus=int(demand[i])) for i in range(n)]
    return cluster, curves, speed, specs


def min_normalised_throughput(setup, policy: str, rate: str) -> float:
    cluster, curves, speed, specs = setup
    sched = Scheduler(cluster, make_policy(policy), curves, type_speed=speed)
    rate_model = EstimatorRate(cluster, curves, speed) if rate == "estimator" else None
    res = simulate(specs, sched, rate_model=rate_model, check=True)
    return H / max(r.jct for r in res.records)


@pytest.mark.parametrize("rate", ["curves", "estimator"])
def test_gavel_beats_heterogeneity_unaware_policies_on_min_normalised_throughput(setup, rate):
    aware = min_normalised_throughput(setup, "gavel", rate)
    agnostic = min_normalised_throughput(setup, "gavel:aware=false", rate)
    maxmin = min_normalised_throughput(setup, "max-min", rate)
    assert aware >= 1.0  # no job does worse than on an equal share
    assert aware > 1.5 * agnostic
    assert aware > 1.5 * maxmin
