"""The per-type speed matrix: Gavel's measured ratios where a curve model maps to a Gavel job type,
GpuType.speed otherwise, relative to the type each curve was measured on."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.clusterspec import load_cluster
from coddl.core.cluster import GpuType
from coddl.perf.curves import load_coddl_curves
from coddl.perf.heterogeneity import GAVEL_MATCH, gavel_job_type, reference_type, type_speed_matrix
from coddl.perf.profiles import load_gavel_throughputs

GAVEL = load_gavel_throughputs()
TYPES = {"V100": GpuType("V100", speed=1.0), "P100": GpuType("P100", speed=0.81),
         "K80": GpuType("K80", speed=0.25), "A100": GpuType("A100", speed=2.2), "T4": GpuType("T4", speed=0.4)}


def matrix(types, models):
    return type_speed_matrix(types, TYPES, models, GAVEL)


@pytest.mark.parametrize("model, job_type", [
    ("Resnet50Model128", "ResNet-50 (batch size 128)"),
    ("TransformerModel256", "Transformer (batch size 256)"),
    ("TransformerModel4096", "Transformer (batch size 256)"),  # the largest measured batch
    ("DeepspeechModel64", "LM (batch size 80)"),  # nearest in log: 64 is closer to 80 than to 40
    ("DcganModel256", "CycleGAN"),  # a family with one job type
    ("AutoencoderModel51200", "Recommendation (batch size 8192)"),
    ("pollux-cifar10@128", "ResNet-18 (batch size 128)"),
    ("pollux-imagenet@200", "ResNet-50 (batch size 128)"),
    ("VideopredictionModel64", None),
    ("pollux-yolov3@64", None),
    ("SomethingElse", None),
])
def test_curve_models_map_to_gavel_job_types(model, job_type):
    assert gavel_job_type(model, GAVEL) == job_type


def test_every_mapped_family_exists_in_gavel_s_tables():
    families = {j.split(" (batch size")[0] for j in GAVEL.job_types}
    assert {m.family for m in GAVEL_MATCH.values()} <= families


def test_gavel_ratios_are_used_where_a_model_maps():
    m = matrix(("V100", "P100", "K80"), ["Resnet50Model128", "AutoencoderModel51200"])
    ratios = GAVEL.speed_by_type("ResNet-50 (batch size 128)")
    assert m[:, 0] == pytest.approx([1.0, ratios["P100"], ratios["K80"]])
    # the recommender runs FASTER on a P100 than on a V100 in Gavel's measurements: kept as measured
    assert m[1, 1] > 1.0


def test_gpu_type_speed_is_the_fallback_for_unmapped_models_and_unmeasured_types():
    m = matrix(("V100", "K80", "A100"), ["VideopredictionModel64", "Resnet50Model128"])
    assert m[:, 0] == pytest.approx([1.0, 0.25, 2.2])
    assert m[2, 1] == pytest.approx(2.2)  # Gavel never measured an A100


def test_pollux_curves_are_relative_to_the_t4_they_were_measured_on():
    assert reference_type("pollux-cifar10@128") == "T4" and reference_type("VggnetModel256") == "V100"
    m = matrix(("T4", "V100", "A100"), ["pollux-yolov3@64"])
    assert m[:, 0] == pytest.approx([1.0, 1.0 / 0.4, 2.2 / 0.4])


def test_the_bundled_mixed_cluster_gets_per_model_speeds():
    cluster = load_cluster("examples/clusters/mixed.yaml")
    curves = load_coddl_curves()
    m = type_speed_matrix(cluster.type_names, cluster.gpu_types, curves.names)
    assert m.shape == (3, len(curves.names))
    assert np.all(m[cluster.type_names.index("V100")] == 1.0)
    k80 = m[cluster.type_names.index("K80")]
    assert len(set(np.round(k80, 3))) > 3  # per model, not one factor for the type
