"""The device's compute floor (``jobmodel.compute_floor``): below some local batch a GPU's step stops
shrinking, and a job model built from one-GPU steps that show it prices small batches at that floor
instead of on the line through the larger ones. The measured case is an H100's
(``data/h100_one_gpu.csv``, from ``benchmarks/gpu_compute_curve.py``: six models, local batches 1 to
256, fp32 with TF32, PyTorch 2.11, one NVIDIA H100 80GB HBM3)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.perf.jobmodel import FLOOR_SIGMAS, JobModel, compute_floor, step_model
from coddl.perf.table import read_profiles

H100 = read_profiles(Path(__file__).with_name("data") / "h100_one_gpu.csv")
NOISE = 0.03
MS = 1e-3


def h100(model: str) -> dict[int, float]:
    """Local batch → measured one-GPU step seconds of ``model`` on the H100."""
    rows = H100.where(model=model)
    return {int(b): float(s) for b, s in zip(rows.local_batch, rows.step_s)}


def inspected(model: str, batch: int = 256) -> JobModel:
    """The job model a job inspected at its local batch, its half, quarter and sixteenth gets."""
    steps = h100(model)
    b = np.array([batch, batch // 2, batch // 4, batch // 16], dtype=float)
    return JobModel.from_one_gpu(model, 0.0, b, np.array([steps[int(x)] for x in b]))


def test_a_small_batch_far_above_the_line_through_the_larger_ones_is_the_floor():
    # ResNet-18 on the H100 as inspected: 12.0 ms at 16 samples where the line through 64, 128 and
    # 256 (15.4, 27.9, 52.8 ms) gives 3.0 + 0.195 × 16 = 6.1 ms
    b = np.array([16.0, 64.0, 128.0, 256.0])
    t = np.array([12.0, 15.4, 27.9, 52.8]) * MS
    assert compute_floor(b, t, NOISE) == (16.0, pytest.approx(12.0 * MS))


def test_steps_on_one_line_have_no_floor_whatever_the_noise_within_it():
    b = np.array([1.0, 4.0, 16.0, 64.0, 256.0])
    line = 2.0 + 0.2 * b
    assert compute_floor(b, line, NOISE) == (0.0, 0.0)
    wobble = np.exp(np.array([0.02, -0.02, 0.02, -0.02, 0.02]))  # within the noise
    assert compute_floor(b, line * wobble, NOISE) == (0.0, 0.0)


def test_the_floor_must_clear_three_times_the_noise():
    b = np.array([4.0, 16.0, 32.0, 64.0])
    line = 1.0 + 0.1 * b
    just_under, just_over = line.copy(), line.copy()
    just_under[0] *= np.exp(FLOOR_SIGMAS * NOISE * 0.95)
    just_over[0] *= np.exp(FLOOR_SIGMAS * NOISE * 1.05)
    assert compute_floor(b, just_under, NOISE) == (0.0, 0.0)
    assert compute_floor(b, just_over, NOISE) == (4.0, pytest.approx(just_over[0]))


def test_a_line_through_two_batches_cannot_tell_a_floor_from_noise():
    # three batches (an inspection without its sixteenth, a CPU testbed's rows): no floor, however far
    # the smallest sits above the line through the other two
    assert compute_floor(np.array([4.0, 16.0, 32.0]), np.array([5.0, 2.6, 4.2]), NOISE) == (0.0, 0.0)


def test_steps_that_shrink_as_the_batch_grows_are_a_warm_up_not_a_floor():
    # the first steps of a job, slower than its later whole-batch steps: a larger batch ran faster
    b = np.array([6.0, 12.0, 24.0, 24.0, 24.0])
    t = np.array([0.072, 0.084, 0.054, 0.054, 0.108])
    assert compute_floor(b, t, NOISE) == (0.0, 0.0)
    # a line that does not rise cannot have a floor under it
    assert compute_floor(np.array([2.0, 8.0, 16.0]), np.array([0.5, 0.2, 0.2]), NOISE) == (0.0, 0.0)


def test_the_split_with_the_most_batches_on_the_floor_counts():
    # the whole H100 ResNet-18 curve: flat at 12.0–13.1 ms from 1 to 32 samples, a line above
    steps = h100("resnet18")
    b = np.array(sorted(steps), dtype=float)
    knee, floor = compute_floor(b, np.array([steps[int(x)] for x in b]), NOISE)
    assert knee == 32.0
    assert floor == pytest.approx(np.median([steps[x] for x in (1, 2, 4, 8, 16, 32)]))


@pytest.mark.parametrize("model", ["resnet18", "resnet50", "vit_b_16", "lstm_lm"])
def test_an_h100_job_inspected_at_four_batches_is_priced_within_25_percent_at_every_local_batch(model):
    steps = h100(model)
    job = inspected(model)
    assert job.t_floor > 0
    errors = {b: float(job.compute_seconds(b)) / s - 1 for b, s in steps.items()}
    assert max(map(abs, errors.values())) < 0.25, errors
    # the line through the three larger batches alone, as before the floor: 30% or more off below them
    line = JobModel.from_one_gpu(model, 0.0, np.array([256.0, 128.0, 64.0]),
                                 np.array([steps[256], steps[128], steps[64]]))
    assert line.t_floor == 0 and min(float(line.compute_seconds(b)) / steps[b] - 1 for b in (1, 2, 4, 8)) < -0.2


def test_the_floor_sets_compute_where_it_binds_and_the_line_elsewhere():
    job = inspected("resnet18")
    assert job.compute_seconds(np.array([1.0, 8.0, 16.0])) == pytest.approx([job.t_floor] * 3)
    assert float(job.compute_seconds(256.0)) == pytest.approx(h100("resnet18")[256], rel=0.03)
    # on a GPU twice as fast the floor halves too, like the rest of the step
    log_t, = step_model(job.t_ref, job.b_ref, 4.0, 2.0, 0.0, job.theta, floor=job.t_floor)
    assert float(np.exp(log_t)) == pytest.approx(job.t_floor / 2)


def test_where_the_floor_binds_the_fixed_share_does_not_move_the_step_and_elsewhere_it_does():
    b = np.array([1.0, 8.0, 64.0, 256.0])
    theta = np.array([0.3, 0.0, 0.5])
    _, g, *_ = step_model(0.05, 128.0, b, 1.0, np.zeros(4), theta, grad=True, floor=0.02)
    d = np.array([1e-6, 0.0, 0.0])
    hi, = step_model(0.05, 128.0, b, 1.0, np.zeros(4), theta + d, floor=0.02)
    lo, = step_model(0.05, 128.0, b, 1.0, np.zeros(4), theta - d, floor=0.02)
    assert np.allclose(g[:, 0], (hi - lo) / 2e-6, atol=1e-5)
    assert g[0, 0] == g[1, 0] == 0.0 and g[2, 0] != 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 4096.0), st.floats(1e-4, 10.0)), min_size=1, max_size=8))
def test_a_floor_is_never_above_a_larger_batch_s_step_nor_negative(steps):
    b, t = (np.array(x) for x in zip(*steps))
    knee, floor = compute_floor(b, t, NOISE)
    assert floor >= 0 and (floor == 0) == (knee == 0)
    if floor:
        larger = b > knee
        assert len(np.unique(b[larger])) >= 3 and floor <= min(np.median(t[b == x]) for x in np.unique(b[larger]))


def test_a_job_model_refuses_a_floor_that_is_not_a_time():
    base = inspected("resnet18")
    for bad in (-1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="compute floor must be a non-negative time"):
            JobModel(base.name, 0.0, base.t_ref, base.b_ref, base.theta, base.cov, t_floor=bad)


def test_when_the_longest_floor_fails_a_shorter_one_is_still_found():
    # a line 2 + 0.5·b from 4 samples up, 3.5 below: 4 sits on the line, so the split with 1, 2 and 4
    # on the floor fails and the one with 1 and 2 counts
    b = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    t = np.array([3.5, 3.5, 4.0, 6.0, 10.0, 18.0])
    assert compute_floor(b, t, NOISE) == (2.0, pytest.approx(3.5))


def test_the_line_is_fitted_to_the_batches_above_the_floor_only():
    job = inspected("resnet18")
    steps = h100("resnet18")
    for b in (64, 128, 256):
        assert float(job.compute_seconds(float(b))) == pytest.approx(steps[b], rel=0.01)
    assert job.b_ref == pytest.approx((64 * 128 * 256) ** (1 / 3))


@pytest.mark.parametrize("b, t", [([0.0, 8.0], [0.1, 0.2]), ([4.0, 8.0], [0.0, 0.2]), ([4.0, 8.0], [np.nan, 0.2]),
                                  ([-4.0, 8.0], [0.1, 0.2]), ([], [])])
def test_a_job_model_needs_positive_batches_and_times(b, t):
    with pytest.raises(ValueError, match="at least one one-GPU step with a positive batch and time"):
        JobModel.from_one_gpu("m", 0.0, np.array(b, dtype=float), np.array(t, dtype=float))
