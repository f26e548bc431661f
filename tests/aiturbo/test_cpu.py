"""Synergy's CPU sensitivity and the CPU-aware rate model."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.cluster import Cluster, Node
from coddl.core.job import JobSpec
from coddl.perf.cpu import PROPORTIONAL_CORES_PER_GPU
from coddl.policies import make_policy
from coddl.scheduler import Scheduler
from coddl.sim.cpu_rate import CpuAwareRate
from coddl.sim.engine import simulate
from coddl.sim.reconfig import ReconfigCost


def test_every_model_is_normalised_at_the_proportional_share(synergy):
    assert len(synergy.models) == 12
    for m in synergy.models:
        assert synergy.factor(m, PROPORTIONAL_CORES_PER_GPU) == pytest.approx(1.0)


def test_factor_interpolates_between_measurements_and_holds_outside(synergy):
    # res18 at the 62.5 GB column: 1.0 at 3 cores, 1.3 at 4, 2.4 from 9 on; 0.37 at 1
    assert synergy.factor("res18", 3.5) == pytest.approx(1.15)
    assert synergy.factor("res18", 9) == pytest.approx(2.4)
    assert synergy.factor("res18", 48) == pytest.approx(2.4)
    assert synergy.factor("res18", 0.5) == pytest.approx(0.37)
    assert synergy.factor("bert", 1) == 1.0  # CPU-insensitive
    assert synergy.factor("not-a-synergy-model", 1) == 1.0


def _workload(curves, n=40, seed=3) -> list[JobSpec]:
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(n):
        m = curves.names[int(rng.integers(len(curves.names)))]
        g = int(rng.choice([1, 1, 2, 4, 8]))
        specs.append(JobSpec(f"j{i}", float(rng.uniform(0, 20000)), g,
                             float(rng.lognormal(7, 1)) * curves.throughput(m, g), m, max_gpus=16))
    return specs


def _records(cluster, curves, specs, policy, cpu_aware: bool, synergy):
    s = Scheduler(cluster, make_policy(policy), curves)
    rate = CpuAwareRate(s, synergy) if cpu_aware else None
    res = simulate(specs, s, ReconfigCost("in-place"), rate_model=rate, check=True)
    return sorted((r.spec.job_id, r.finish, r.first_start, r.resizes) for r in res.records)


@pytest.mark.parametrize("policy", ["fifo", "max-min", "srtf"])
def test_existing_policies_are_unchanged_at_the_proportional_share(policy, synergy_curves, synergy):
    """3 cores per GPU on every node → factor 1.0 → exactly CurveRate's records."""
    cluster = Cluster.homogeneous(4, 8, cpus_per_node=24)
    specs = _workload(synergy_curves)
    assert (_records(cluster, synergy_curves, specs, policy, True, synergy)
            == _records(cluster, synergy_curves, specs, policy, False, synergy))


def test_cpu_rich_nodes_speed_up_cpu_hungry_models(synergy_curves, synergy):
    """6 cores per GPU: a res18 job runs 1.75× faster, a bert job not at all."""
    cluster = Cluster(nodes=(Node("n0", 8, cpus=48),))
    s = Scheduler(cluster, make_policy("fifo"), synergy_curves)
    rate = CpuAwareRate(s, synergy)
    res18, bert = synergy_curves.model_index("res18"), synergy_curves.model_index("bert")
    assert rate.rate(res18, (0, 1), 12) == pytest.approx(1.75 * synergy_curves.throughput(res18, 2))
    assert rate.rate(bert, (0, 1), 12) == pytest.approx(synergy_curves.throughput(bert, 2))
    assert rate.rate(res18, (), 0) == 0.0
