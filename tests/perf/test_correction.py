"""Online correction: converges fast on a uniformly mis-modelled job, stays put under noise; the
two-part correction recovers how far compute and communication are each off from one placement."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.perf.correction import ModelCorrection, OnlineCorrection
from coddl.perf.estimator import overlapped


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


def _truth_and_model():
    """The estimator's parts for a job on 8 GPUs over 4 nodes at five batch sizes, and the job's
    truth: compute 30% slower, all-reduce 2× slower and overlapping less (γ 1.3 vs the cluster's 1.7)."""
    compute = np.array([0.05, 0.08, 0.12, 0.2, 0.3])
    comm = np.full(5, 0.1)
    truth = overlapped(1.3 * compute, 2.0 * comm, 1.3)
    return compute, comm, truth


def test_model_correction_recovers_compute_communication_and_overlap_from_one_placement():
    compute, comm, truth = _truth_and_model()
    c = ModelCorrection(overlap=1.7)
    for ci, si, ti in zip(compute, comm, truth):
        c.observe(ci, si, ti, nodes=4)
    assert c.compute_factor == pytest.approx(1.3, rel=0.02)
    assert c.comm_factor == pytest.approx(2.0, rel=0.02)
    assert c.job_overlap == pytest.approx(1.3, rel=0.02)
    # another placement: a bigger all-reduce, which one scale factor would get wrong
    other = overlapped(1.3 * 0.1, 2.0 * 0.25, 1.3)
    assert float(c.seconds(0.1, 0.25)) == pytest.approx(other, rel=0.01)
    scalar = OnlineCorrection()
    for ci, si, ti in zip(compute, comm, truth):
        scalar.observe(1.0 / overlapped(ci, si, 1.7), 1.0 / ti)
    assert abs(1.0 / scalar.corrected(1.0 / overlapped(0.1, 0.25, 1.7)) / other - 1.0) > 0.05


@pytest.mark.parametrize("nodes, batches", [(1, 5), (4, 2)])
def test_model_correction_falls_back_to_one_factor(nodes, batches):
    """Samples from one node, or at too few batch sizes, cannot separate the parts: one factor."""
    compute, comm, truth = _truth_and_model()
    c = ModelCorrection(overlap=1.7)
    for ci, si, ti in list(zip(compute, comm, truth))[:batches]:
        c.observe(ci, si, ti, nodes=nodes)
    assert c.compute_factor == c.comm_factor and c.job_overlap == 1.7
    f = math.exp(np.mean(np.log(truth[:batches] / overlapped(compute[:batches], comm[:batches], 1.7))))
    assert c.compute_factor == pytest.approx(f)
    assert float(c.seconds(compute[0], comm[0])) == pytest.approx(f * overlapped(compute[0], comm[0], 1.7))
