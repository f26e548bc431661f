"""EstimatorRate on mixed types: consolidated placements reproduce curve × type speed exactly; a
job mixing types runs at its slowest GPU's pace unless mixing is allowed (balanced batches), which
is never slower; the per-model profile explains the measured curve before it is asked anything."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.cluster import Cluster, GpuType, LinkSpec, Node
from coddl.perf.curves import load_coddl_curves
from coddl.perf.estimator import Estimator
from coddl.sim.estimator_rate import EstimatorRate, curve_profile, model_params

CLUSTER = Cluster(nodes=(Node("v0", 4, "V100"), Node("v1", 4, "V100"), Node("k0", 4, "K80")),
                  gpu_types={"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)},
                  links=LinkSpec(intra_node_gbps=50.0, inter_node_gbps=5.0))
CURVES = load_coddl_curves().extended(CLUSTER.total_gpus)
RESNET = CURVES.model_index("Resnet50Model128")
SPEED = np.ones((2, len(CURVES.names)))
SPEED[1] = 0.25  # K80


def test_consolidated_placements_reproduce_the_curve_times_the_type_speed():
    rate = EstimatorRate(CLUSTER, CURVES, SPEED)
    for k in (1, 2, 4):
        assert rate.rate(RESNET, tuple(range(k)), 0) == pytest.approx(CURVES.rate[RESNET, k])
        assert rate.rate(RESNET, tuple(range(8, 8 + k)), 0) == pytest.approx(0.25 * CURVES.rate[RESNET, k])
    # eight GPUs on two full V100 nodes is as consolidated as eight GPUs can be here
    assert rate.rate(RESNET, tuple(range(8)), 0) == pytest.approx(CURVES.rate[RESNET, 8])


def test_mixing_types_runs_at_the_slowest_pace_unless_batches_are_balanced():
    mixed = (0, 1, 8, 9)  # 2 V100 + 2 K80
    unbalanced = EstimatorRate(CLUSTER, CURVES, SPEED).rate(RESNET, mixed, 0)
    balanced = EstimatorRate(CLUSTER, CURVES, SPEED, allow_mixing=True).rate(RESNET, mixed, 0)
    on_four_k80 = EstimatorRate(CLUSTER, CURVES, SPEED).rate(RESNET, (8, 9, 10, 11), 0)
    assert unbalanced < on_four_k80  # four K80-paced GPUs, and across nodes
    assert unbalanced < balanced
    # balanced: 2 V100 + 2 K80 is worth at most 2.5 V100s of compute
    assert balanced < EstimatorRate(CLUSTER, CURVES, SPEED).rate(RESNET, (0, 1, 2), 0)


def test_the_profile_explains_the_measured_curve_on_the_cluster_s_links():
    model = Estimator.for_cluster(CLUSTER)
    for name in ("Resnet50Model128", "VggnetModel256", "ChatbotModel256"):
        m = CURVES.model_index(name)
        kmax = int(CURVES.max_gpus[m])
        profile = curve_profile(name, CURVES.rate[m], kmax, model, 4)
        k = np.arange(1, kmax + 1)
        est = model.rates(profile, k, -(-k // 4), np.minimum(k, 4), 1.0 / k, uncertainty=False).steps_per_s
        assert est[0] == pytest.approx(CURVES.rate[m, 1])  # one GPU: exact by construction
        assert np.mean(np.abs(est / CURVES.rate[m, 1:kmax + 1] - 1.0)) < 0.25


def test_parameter_sizes():
    assert model_params("Resnet50Model128") == 25.6e6
    assert model_params("pollux-bert@384") == 110e6
    assert model_params("Unknown7") == 25.6e6
