"""Online correction: the controller's one factor converges fast on a uniformly mis-modelled job and
stays put under noise; the estimator's own correction takes measured rows in the profile format."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.perf.correction import OnlineCorrection, correct
from coddl.perf.estimator import Estimator
from coddl.perf.fabric import Fabric
from coddl.perf.jobmodel import JobModel, Prior
from coddl.perf.table import ProfileTable


@pytest.mark.parametrize("truth", [0.7, 1.3])
def test_a_job_30_percent_off_the_model_is_within_3_percent_in_5_samples(truth):
    c = OnlineCorrection()
    predicted = 12.0
    for _ in range(5):
        c.observe(predicted, truth * predicted)
    assert c.corrected(predicted) == pytest.approx(truth * predicted, rel=0.03)


def test_plus_minus_5_percent_noise_does_not_make_it_diverge():
    rng = np.random.default_rng(7)
    c = OnlineCorrection()
    for i in range(500):
        predicted = rng.uniform(1.0, 100.0)
        c.observe(predicted, 0.7 * predicted * rng.uniform(0.95, 1.05))
        if i >= 4:
            assert abs(c.factor / 0.7 - 1.0) <= 0.05
    assert abs(c.factor / 0.7 - 1.0) <= 0.02


def test_one_stray_sample_moves_a_settled_factor_by_at_most_alpha_times_clip():
    c = OnlineCorrection()
    for _ in range(10):
        c.observe(1.0, 1.0)
    c.observe(1.0, 20.0)  # a stalled step or checkpoint measured as 20× speed
    assert c.factor == pytest.approx(math.exp(c.alpha * c.clip))


def test_meaningless_samples_are_ignored_and_bad_settings_rejected():
    c = OnlineCorrection()
    assert c.observe(0.0, 3.0) == 1.0 and c.observe(2.0, 0.0) == 1.0 and c.samples == 0
    with pytest.raises(ValueError):
        OnlineCorrection(alpha=0.0)


def test_correct_takes_rows_of_the_profile_format_and_counts_only_multi_gpu_ones():
    fabric = Fabric(10.0, 1.0, 5.0, 50.0)
    est = Estimator(fabric)
    prior = Prior(noise=0.05)
    job = JobModel.from_one_gpu("m", 1e8, np.array([16.0, 64.0]), np.array([0.1, 0.25]), prior, "V100")
    predicted = est.rates(job, [8], [2], [4], [32.0], uncertainty=False).steps_per_s[0]
    rows = ProfileTable.build([
        {"model": "m", "param_bytes": 1e8, "gpu_type": "V100", "gpus": 8, "placement": "4+4", "local_batch": 32,
         "steps_per_s": predicted / 2},
        {"model": "m", "param_bytes": 1e8, "gpu_type": "V100", "gpus": 1, "local_batch": 32,
         "steps_per_s": 1 / job.compute_seconds(32.0)},
    ])
    fixed = correct(job, est, rows)
    assert fixed.measured == 1
    after = est.rates(fixed, [8], [2], [4], [32.0], uncertainty=False).steps_per_s[0]
    assert predicted / 2 < after < predicted
    assert correct(job, est, rows.take(np.zeros(2, dtype=bool))) is job

