"""The held-out accuracy protocol (``coddl.perf.accuracy``; ``benchmarks/estimator_accuracy.py``
runs it on every bundled testbed): leave-one-testbed-out priors, leave-one-job-out fabrics, one and
two measured corrections against linear scaling and Amdahl's law fitted to the same rows.

Goals (the issue's): ≤ 20% MAPE for every app before correction, ≤ 10% after one correction,
better than Amdahl after correction on most apps. Measured on Pollux's T4 testbed held out of its
own prior: before 6.9–23.2% (YOLOv3 misses), after one correction 7.0–15.8% (bert, ImageNet, YOLOv3
meet it; DeepSpeech2 10.7%, ResNet-18 12.1%, NCF 15.8% do not), better than Amdahl for every app.
The assertions below are the measured state, so a regression fails them."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.perf.accuracy import OTHERS, evaluate_job, evaluate_testbed, leave_one_testbed_out
from coddl.perf.calibrate import bundled_populations, fit_fabric, population, prior_from
from coddl.perf.curves import data_path
from coddl.perf.estimator import Estimator
from coddl.perf.table import read_profiles


@pytest.fixture(scope="module")
def gavel():
    return read_profiles(data_path("profiles/gavel.csv"))


def test_each_testbed_is_predicted_with_a_prior_learned_only_from_the_others(gavel):
    table = gavel.take(np.array([c in ("gavel-k80", "gavel-p100") for c in gavel.cluster]))
    out = leave_one_testbed_out(table, points=4, algorithm="ring")
    k80_prior = prior_from([population(table.where(cluster="gavel-k80"), "ring")])
    direct = evaluate_testbed(table.where(cluster="gavel-p100"), k80_prior, OTHERS, 4, "ring")
    assert [r.as_dict() for r in out["gavel-p100"]] == [r.as_dict() for r in direct]
    assert {r.app for r in out["gavel-p100"]} == {"LM", "ResNet-18", "ResNet-50", "Transformer"}


def test_the_baselines_and_corrections_see_the_same_measured_rows(gavel):
    p100 = gavel.where(cluster="gavel-p100")
    fabric = fit_fabric(p100, ["LM", "ResNet-18", "Transformer"], "ring").fabric
    prior = prior_from([p for p in bundled_populations() if p.cluster != "gavel-p100"])
    r = evaluate_job(Estimator(fabric), p100.where(model="ResNet-50"), prior, OTHERS, points=100)
    assert r.rows == 24  # k = 2, 4, 8, consolidated and one GPU per server, at 4 batch sizes
    measured, before, after = r.points
    assert len(measured) == len(before) == len(after) == r.rows
    assert r.before == pytest.approx(100 * np.mean(np.abs(before / measured - 1)))
    assert r.after < r.amdahl and r.after_two < r.amdahl_two
    assert 0.9 <= r.coverage <= 1.0


@pytest.mark.slow
def test_pollux_held_out_of_its_own_prior_meets_what_was_measured():
    """Every fourth multi-GPU row of each app (and all one-GPU rows), to keep the test to seconds;
    the benchmark runs all of them."""
    table = read_profiles(data_path("profiles/pollux-t4.csv"))
    table = table.take((table.gpus == 1) | (np.arange(len(table)) % 4 == 0))
    prior = prior_from([p for p in bundled_populations() if p.cluster != "pollux-t4"])
    results = {r.app: r for r in evaluate_testbed(table, prior, OTHERS, points=12, algorithm="ring")}
    assert set(results) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    for name, r in results.items():
        assert r.before <= 25.0, name
        assert r.after <= 17.0, name
        assert r.after < r.amdahl and r.after_two < r.amdahl_two, name  # better than Amdahl on the same rows
        assert r.coverage >= 0.9, name  # the 90% interval holds the measured rows
    assert np.mean([r.worse_near for r in results.values()]) <= 0.35
    for name in ("bert", "yolov3"):
        assert results[name].after <= 10.0, name
    assert results["yolov3"].after < results["yolov3"].before / 2  # a large prior error is corrected
