"""Synthetic Poisson traces hit their offered load; trace statistics match DATA.md."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.traces import TraceError, load_trace, poisson_trace, trace_stats


@pytest.mark.parametrize("load, gpus", [(0.5, 64), (1.0, 64), (1.5, 256)])
def test_offered_load_within_10_percent(load, gpus):
    t = poisson_trace(5000, load, gpus, seed=7)
    assert len(t.jobs) == 5000
    assert trace_stats(t, gpus).offered_load == pytest.approx(load, rel=0.10)


def test_deterministic_for_a_seed_and_drawn_from_philly_sizes():
    a, b = poisson_trace(500, 0.8, 64, seed=1), poisson_trace(500, 0.8, 64, seed=1)
    assert a.jobs == b.jobs
    assert a.jobs != poisson_trace(500, 0.8, 64, seed=2).jobs
    assert {j.num_gpus for j in a.jobs} <= {1, 2, 4, 8}
    assert min(j.duration for j in a.jobs) >= 3600  # Gavel's distribution starts at one hour
    arrivals = np.array([j.arrival for j in a.jobs])
    assert arrivals[0] == 0.0 and np.all(np.diff(arrivals) >= 0)


def test_digest_demand_draws_whole_pairs_of_the_bundled_digest():
    digest = {(j.duration, j.num_gpus) for j in load_trace("philly").jobs}
    t = poisson_trace(3000, 0.8, 16_384, seed=4, demand="philly-digest")
    pairs = {(j.duration, j.num_gpus) for j in t.jobs}
    assert pairs <= digest
    assert len({g for _, g in pairs}) > 4  # the digest's sizes, not Gavel's 1/2/4/8
    assert min(d for d, _ in pairs) < 3600  # the digest has jobs under an hour; Gavel's has none
    assert trace_stats(t, 16_384).offered_load == pytest.approx(0.8, rel=1e-9)


def test_gaps_look_exponential():
    t = poisson_trace(5000, 1.0, 64, seed=3)
    gaps = np.diff([j.arrival for j in t.jobs])
    cv = gaps.std() / gaps.mean()  # 1 for an exponential distribution
    assert 0.9 < cv < 1.1


def test_jobs_wider_than_the_cluster_are_not_drawn():
    t = poisson_trace(2000, 1.0, 4, seed=5)
    assert max(j.num_gpus for j in t.jobs) <= 4


@pytest.mark.parametrize("kwargs, message", [
    ({"num_jobs": 0}, "num_jobs: expected a positive integer, got 0"),
    ({"load": 0.0}, "load: expected a positive number, got 0.0"),
    ({"cluster_gpus": 0}, "cluster_gpus: expected a positive integer, got 0"),
    ({"demand": "zipf"}, "demand: unknown 'zipf'; known: philly, philly-digest"),
])
def test_bad_arguments(kwargs, message):
    args = {"num_jobs": 10, "load": 1.0, "cluster_gpus": 64, "seed": 0} | kwargs
    with pytest.raises(TraceError, match=message):
        poisson_trace(**args)


def test_philly_stats_match_data_md(philly):
    s = trace_stats(philly, cluster_gpus=374)
    assert s.jobs == 82_247 and s.jobs_with_duration == 82_247
    assert s.duration_percentiles[50] == 1144.0
    assert round(s.mean_duration) == 13_136
    # "the whole log averages about 374 busy GPUs"
    assert s.offered_load == pytest.approx(1.0, abs=0.01)
    assert s.gpu_histogram[1] == 76_627 and list(s.gpu_histogram) == sorted(s.gpu_histogram)


def test_stats_without_durations():
    s = trace_stats(load_trace("pollux-1"), 64)
    assert s.jobs == 160 and s.jobs_with_duration == 0
    assert s.offered_load is None and s.mean_duration is None and s.duration_percentiles == {}
