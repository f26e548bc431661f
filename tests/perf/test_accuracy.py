"""The held-out accuracy the benchmark reports (benchmarks/estimator_accuracy.py): links calibrated
on ncf (step and all-reduce times), every other app predicted from its one-GPU rows, corrected online
with the rows of placement 2222 (``ModelCorrection``). The goals are ≤ 20% MAPE before and ≤ 10% after
correction for every held-out app; measured: before 8.8–19.0%, after 4.4–7.9%.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "estimator_accuracy.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("estimator_accuracy", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def results(bench) -> dict:
    _, apps = bench.evaluate("ncf", "2222")
    return {a.app: a for a in apps}


@pytest.mark.parametrize("app", ["bert", "cifar10", "deepspeech2", "imagenet", "yolov3"])
def test_goals_met_before_and_after_correction(results, app):
    assert results[app].mape_before_pct <= 20.0
    assert results[app].mape_after_pct <= 10.0


def test_the_calibration_app_is_not_counted_as_held_out(results):
    assert not results["ncf"].held_out
    assert all(a.held_out for name, a in results.items() if name != "ncf")


def test_a_one_node_measurement_does_not_make_the_correction_worse_than_one_factor(bench, results):
    """From one node the inter-node behaviour is unknown: the correction is one factor, as before."""
    from coddl.perf.calibrate import calibrate_links
    from coddl.perf.profiles import load_pollux_app

    model = calibrate_links(load_pollux_app("ncf")).model()
    for name in ("bert", "imagenet"):
        correction = bench.accuracy(load_pollux_app(name), model, "2")[3]
        assert correction.compute_factor == correction.comm_factor
