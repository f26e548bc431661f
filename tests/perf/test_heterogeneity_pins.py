"""The per-type speed matrix (perf/heterogeneity.py) pinned on a hand-made Gavel table: how a curve
model's name picks a Gavel job type (family, then the batch nearest in log), and which factor each
(type, model) entry takes (Gavel's ratio, else GpuType.speed, relative to the curve's own type)."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.cluster import GpuType
from coddl.perf.heterogeneity import _base_and_batch, gavel_job_type, reference_type, type_speed_matrix
from coddl.perf.profiles import GavelThroughputs

STEPS = {
    ("V100", "ResNet-50 (batch size 32)", 1): 10.0, ("K80", "ResNet-50 (batch size 32)", 1): 2.0,
    ("P100", "ResNet-50 (batch size 32)", 1): 5.0,
    ("V100", "ResNet-50 (batch size 128)", 1): 4.0, ("K80", "ResNet-50 (batch size 128)", 1): 1.0,
    ("V100", "ResNet-50-wide (batch size 64)", 1): 1.0, ("K80", "ResNet-50-wide (batch size 64)", 1): 1.0,
    ("V100", "LM", 1): 2.0, ("V100", "LM (batch size 40)", 1): 8.0, ("K80", "LM (batch size 40)", 1): 6.0,
    ("V100", "LM (batch size 80)", 1): 16.0, ("K80", "LM (batch size 80)", 1): 4.0,
    ("V100", "CycleGAN", 1): 3.0, ("K80", "CycleGAN", 1): 3.0,
    ("V100", "Recommendation (batch size 512)", 1): 20.0, ("K80", "Recommendation (batch size 512)", 1): 30.0,
}
GAVEL = GavelThroughputs(STEPS)
TYPES = {"V100": GpuType("V100", speed=1.0), "K80": GpuType("K80", speed=0.25), "A100": GpuType("A100", speed=2.2),
         "T4": GpuType("T4", speed=0.4)}


def test_names_split_into_base_and_batch():
    assert _base_and_batch("VggnetModel256") == ("VggnetModel", 256)
    assert _base_and_batch("Inception4Model256") == ("Inception4Model", 256)
    assert _base_and_batch("pollux-cifar10@128") == ("pollux-cifar10", 128)
    assert _base_and_batch("pollux-cifar10@big") == ("pollux-cifar10", None)
    assert _base_and_batch("Resnet50Model") == ("Resnet50Model", None)
    assert _base_and_batch("something") == ("something", None)


def test_reference_types():
    assert reference_type("pollux-bert@32") == "T4"
    assert reference_type("VggnetModel256") == "V100" and reference_type("xpollux-bert@32") == "V100"


@pytest.mark.parametrize("model, job_type", [
    ("Resnet50Model128", "ResNet-50 (batch size 128)"),
    ("Resnet50Model32", "ResNet-50 (batch size 32)"),
    ("Resnet50Model60", "ResNet-50 (batch size 32)"),  # log: 60/32 = 1.9 < 128/60 = 2.1 (the decoy family is not one)
    ("Resnet50Model70", "ResNet-50 (batch size 128)"),
    ("Resnet50Model", "ResNet-50 (batch size 128)"),  # no batch: the family's first job type
    ("DeepspeechModel58", "LM (batch size 80)"),  # log-nearest: 80/58 = 1.38 < 58/40 = 1.45 (linear: 40)
    ("ChatbotModel52", "LM (batch size 40)"),
    ("ChatbotModel", "LM"),  # no batch: the family's first
    ("DcganModel256", "CycleGAN"),  # a family of one job type
    ("AutoencoderModel51200", "Recommendation (batch size 512)"),
    ("pollux-imagenet@100", "ResNet-50 (batch size 128)"),
    ("pollux-cifar10@128", None),  # ResNet-18: not in this table
    ("VideopredictionModel64", None),
    ("Unknown", None),
])
def test_curve_models_pick_the_job_type(model, job_type):
    assert gavel_job_type(model, GAVEL) == job_type


def test_each_type_speed_is_gavels_ratio_else_the_types_speed():
    m = type_speed_matrix(("V100", "K80", "A100", "p100", "Nova"), TYPES,
                          ["Resnet50Model32", "VideopredictionModel64"], GAVEL)
    assert m.shape == (5, 2)
    assert m[:, 0].tolist() == pytest.approx([1.0, 0.2, 2.2, 0.5, 1.0])  # Gavel's ratios; p100 by upper case
    assert m[:, 1].tolist() == pytest.approx([1.0, 0.25, 2.2, 1.0, 1.0])  # unmapped: GpuType.speed, 1 if unknown
    rec = type_speed_matrix(("V100", "K80"), TYPES, ["AutoencoderModel51200"], GAVEL)
    assert rec.tolist() == [[1.0], [1.5]]  # the recommender is faster on the K80, as measured


def test_a_curve_measured_on_a_t4_is_relative_to_the_t4():
    m = type_speed_matrix(["T4", "V100", "K80", "A100"], TYPES, ["pollux-imagenet@128", "pollux-yolov3@8"], GAVEL)
    # imagenet → ResNet-50 (batch size 128): V100 1, K80 0.25 by Gavel; T4 0.4 by its speed
    assert m[:, 0].tolist() == pytest.approx([1.0, 2.5, 0.625, 5.5])
    assert m[:, 1].tolist() == pytest.approx([1.0, 2.5, 0.625, 5.5])
    k80_ref = type_speed_matrix(["V100", "K80"], TYPES, ["LmLike"], GAVEL)
    assert k80_ref.tolist() == [[1.0], [0.25]]


def test_the_bundled_gavel_table_is_the_default():
    m = type_speed_matrix(["V100", "K80"], TYPES, ["Resnet50Model128", "VideopredictionModel64"])
    assert m[0].tolist() == [1.0, 1.0] and m[1, 1] == 0.25
    assert 0.0 < m[1, 0] < 1.0 and m[1, 0] != 0.25
    assert isinstance(m, np.ndarray) and m.dtype == float


def test_a_mapped_models_reference_is_gavels_v100_whatever_speed_the_cluster_gives_v100():
    """Gavel's ratios are relative to its V100: a cluster that calls its V100 2× (speed=2.0) changes
    the unmapped models' factors, not the mapped ones' (a V100 is 1.0 in Gavel's own ratios)."""
    types = {"V100": GpuType("V100", speed=2.0), "K80": GpuType("K80", speed=0.5)}
    m = type_speed_matrix(("V100", "K80"), types, ["Resnet50Model32", "VideopredictionModel64"], GAVEL)
    assert m[:, 0].tolist() == pytest.approx([1.0, 0.2])
    assert m[:, 1].tolist() == pytest.approx([1.0, 0.25])


def test_the_batch_follows_the_first_at_sign():
    assert _base_and_batch("pollux-a@b@128") == ("pollux-a", None)
