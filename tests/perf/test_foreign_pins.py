"""Models named by other schedulers' traces (perf/foreign.py): the architecture family a name maps
to, Pollux model names read back, and the curves a trace's Pollux models add to a table."""

from __future__ import annotations

import pytest

from coddl.perf import foreign
from coddl.perf.curves import CurveTable
from coddl.perf.foreign import family_model, parse_pollux_model, pollux_model_name, with_trace_models


@pytest.mark.parametrize("name, model", [
    ("vgg19", "VggnetModel256"), ("AlexNet", "VggnetModel256"), ("GoogLeNet", "GooglenetModel128"),
    ("inception3", "Inception4Model256"), ("ResNet-50 (batch size 64)", "Resnet50Model128"),
    ("DeepSpeech", "DeepspeechModel64"), ("Transformer (batch size 32)", "TransformerModel256"),
    ("bert-large", "TransformerModel256"), ("CycleGAN", "DcganModel256"), ("LM (batch size 20)", "ChatbotModel256"),
    ("lstm", "ChatbotModel256"), ("A3C", "ChatbotModel256"), ("Recommendation (batch size 512)", "AutoencoderModel51200"),
    ("ncf", "AutoencoderModel51200"), ("video", "VideopredictionModel64"),
    ("resnet-lstm", "Resnet50Model128"),  # the first family in the list wins
    ("yolov3", None), ("", None),
])
def test_family_model(name, model):
    assert family_model(name) == model


def test_pollux_names_round_trip_and_others_are_not_pollux():
    assert pollux_model_name("cifar10", 128) == "pollux-cifar10@128"
    assert parse_pollux_model("pollux-cifar10@128") == ("cifar10", 128)
    assert parse_pollux_model("pollux-yolov3@8") == ("yolov3", 8)
    for name in ("pollux-resnet@128", "pollux-cifar10@12a", "pollux-cifar10@", "pollux-cifar10", "cifar10@128",
                 "Pollux-cifar10@128", "xpollux-cifar10@128"):
        assert parse_pollux_model(name) is None, name


def test_trace_models_add_their_curves_once(monkeypatch):
    made = []

    def curve(app, batch):
        made.append((app, batch))
        return {1: float(batch), 3: 2.0 * batch}

    monkeypatch.setattr(foreign, "pollux_curve", curve)
    base = CurveTable.from_points({"a": {1: 1.5, 2: 2.0}}, kmax=4)
    assert with_trace_models(base, set()) is base
    out = with_trace_models(base, {("ncf", 4), ("bert", 2)})
    assert made == [("bert", 2), ("ncf", 4)]
    assert out.names == ["a", "pollux-bert@2", "pollux-ncf@4"]
    # the base curve keeps its measured points (to k = 2) and the table ends at the largest measured k
    assert out.rate.tolist() == [[0, 1.5, 2, 2], [0, 2, 3, 4], [0, 4, 6, 8]]
    assert out.max_gpus.tolist() == [2, 3, 3]
    again = with_trace_models(out, {("ncf", 4)})
    assert again is out and len(made) == 2
