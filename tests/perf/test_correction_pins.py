"""Hand-computed pins of the corrections (``coddl.perf.correction``): the controller's one factor
sample by sample, its settings' bounds, and the estimator's correction on rows of another GPU type."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.core.cluster import GpuType
from coddl.perf.correction import OnlineCorrection, correct
from coddl.perf.estimator import Estimator
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import JobModel, Prior
from coddl.perf.table import ProfileTable


def test_the_warm_up_averages_plainly_and_the_first_sample_is_taken_whole():
    c = OnlineCorrection(warmup=3, alpha=0.5, clip=math.log(1.5))
    assert (c.factor, c.samples) == (1.0, 0)
    assert c.observe(10.0, 40.0) == pytest.approx(4.0)  # 4× off: no clip on the first sample
    # the second and third: plain mean of the log ratios while within the clip
    assert c.observe(10.0, 48.0) == pytest.approx(math.exp((math.log(4) + math.log(4.8)) / 2))
    assert c.observe(10.0, 40.0) == pytest.approx(math.exp((2 * math.log(4) + math.log(4.8)) / 3))
    assert c.samples == 3
    # after the warm-up: an exponentially weighted mean with weight alpha
    before = c.log_factor
    c.observe(1.0, 4.0)
    assert c.log_factor == pytest.approx(before + 0.5 * (math.log(4.0) - before))
    assert c.corrected(2.0) == pytest.approx(2.0 * c.factor)


def test_after_the_first_sample_each_deviation_is_clipped_both_ways():
    c = OnlineCorrection(warmup=2, alpha=0.25, clip=0.1)
    c.observe(1.0, 1.0)
    c.observe(1.0, 100.0)  # the warm-up's second sample: clipped to +0.1, then averaged (1/2)
    assert c.log_factor == pytest.approx(0.05)
    c.observe(1.0, 0.001)  # settled: clipped to −0.1, weight 0.25
    assert c.log_factor == pytest.approx(0.05 - 0.025)
    c.observe(1.0, math.exp(0.025 + 0.08))  # inside the clip: the deviation itself
    assert c.log_factor == pytest.approx(0.025 + 0.25 * 0.08)


def test_negative_samples_carry_nothing():
    c = OnlineCorrection()
    c.observe(2.0, 3.0)
    assert c.observe(-1.0, 3.0) == pytest.approx(1.5) and c.observe(2.0, -3.0) == pytest.approx(1.5)
    assert c.samples == 1


@pytest.mark.parametrize("kwargs", [dict(warmup=0), dict(alpha=0.0), dict(alpha=1.01), dict(alpha=-0.5),
                                    dict(clip=0.0), dict(clip=-1.0)])
def test_settings_outside_their_bounds_are_refused(kwargs):
    with pytest.raises(ValueError, match=r"^correction needs warmup ≥ 1, 0 < alpha ≤ 1 and clip > 0$"):
        OnlineCorrection(**kwargs)


def test_settings_at_their_bounds_are_accepted():
    c = OnlineCorrection(warmup=1, alpha=1.0, clip=1e-9)
    c.observe(1.0, 2.0)
    c.observe(1.0, 3.0)  # alpha 1: the settled factor jumps by the whole clipped deviation
    assert c.log_factor == pytest.approx(math.log(2.0) + 1e-9)
    defaults = OnlineCorrection()
    assert (defaults.warmup, defaults.alpha, defaults.clip) == (5, 0.2, pytest.approx(math.log(1.5)))


def test_a_row_measured_on_another_gpu_type_is_read_at_that_type_s_speed():
    """A V100-profiled job measured on K80s (a quarter of the speed) exactly as fast as the estimator
    predicts there: nothing to correct. Read as if on V100s, the same row is 4× slow and moves θ."""
    types = {"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)}
    est = Estimator(Fabric(10.0, 1.0, 5.0, 50.0), types)
    job = JobModel.from_one_gpu("m", 1e8, np.array([16.0, 64.0]), np.array([0.1, 0.25]), Prior(noise=0.05), "V100")
    on_k80 = est.rates(job, [8], [2], [4], [32.0], speed=0.25, uncertainty=False).steps_per_s[0]
    rows = ProfileTable.build([{"model": "m", "param_bytes": 1e8, "gpu_type": "K80", "gpus": 8, "placement": "4+4",
                                "local_batch": 32, "steps_per_s": on_k80}])
    fixed = correct(job, est, rows)
    assert fixed.measured == 1
    assert fixed.theta == pytest.approx(job.theta, abs=1e-4)
    assert est.rates(fixed, [8], [2], [4], [32.0], speed=0.25, uncertainty=False).steps_per_s[0] == \
        pytest.approx(on_k80, rel=1e-4)
