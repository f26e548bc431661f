"""Fairness figures of a run (``coddl.sim.metrics``): Themis's finish-time fairness ρ per job, worked
out by hand on a tiny trace, and Jain's index over users or groups."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coddl.core import Cluster, JobSpec
from coddl.policies import make_policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate
from coddl.sim.metrics import (fair_times, fairness_groups, finish_time_fairness, jain_index, mean_active_jobs,
                               summarise)

# 2 GPUs, P(k) = k.  a: t=0, 2 GPUs, 20 it (alice) · b: t=5, 1 GPU, 10 it (bob); both at most 2 GPUs.
SPECS = [
    JobSpec("a", 0.0, 2, 20.0, "lin", max_gpus=2, user="alice"),
    JobSpec("b", 5.0, 1, 10.0, "lin", max_gpus=2, user="bob"),
]
# FIFO: a runs 0–10 on 2 GPUs (JCT 10); b waits for it and runs 10–20 on 1 GPU (JCT 15).
# Jobs in the system: 1 on [0, 5), 2 on [5, 10), 1 on [10, 20).
#   a: N̄ = (5·1 + 5·2) / 10 = 1.5, share 2/1.5 = 1.33 → 1 GPU, T_ideal = 20 / 1 = 20, ρ = 10/20 = 0.5
#   b: N̄ = (5·2 + 10·1) / 15 = 4/3, share 1.5 → 1 GPU, T_ideal = 10 / 1 = 10, ρ = 15/10 = 1.5


def fifo_run(linear_curves):
    sched = Scheduler(Cluster.for_gpus(2, 2), make_policy("fifo"), linear_curves)
    res = simulate(SPECS, sched, check=True)
    res.records.sort(key=lambda r: r.spec.job_id)
    return res


def test_rho_matches_hand_computation(linear_curves):
    res = fifo_run(linear_curves)
    assert [r.jct for r in res.records] == pytest.approx([10.0, 15.0])
    arrival = np.array([0.0, 5.0])
    finish = np.array([10.0, 20.0])
    assert mean_active_jobs(arrival, finish) == pytest.approx([1.5, 4 / 3])
    assert fair_times(res, linear_curves) == pytest.approx([20.0, 10.0])
    assert finish_time_fairness(res, linear_curves) == pytest.approx([0.5, 1.5])
    s = summarise(res, linear_curves)
    assert (s.mean_rho, s.max_rho, s.share_rho_over_1, s.share_rho_over_1_5) == pytest.approx((1.0, 1.5, 0.5, 0.0))
    assert s.fairness_groups == "user"
    assert s.jain_users == pytest.approx(0.8)  # (0.5 + 1.5)² / (2 · (0.25 + 2.25))


def test_a_job_alone_on_its_whole_share_has_rho_one(linear_curves):
    res = simulate([JobSpec("x", 3.0, 2, 8.0, "lin", max_gpus=2)],
                   Scheduler(Cluster.for_gpus(2, 2), make_policy("max-min"), linear_curves), check=True)
    assert finish_time_fairness(res, linear_curves) == pytest.approx([1.0])


def test_a_share_below_one_gpu_is_a_fraction_of_its_time(linear_curves):
    # three one-GPU jobs of 6 it on 2 GPUs under FIFO: x, y 0–6, z 6–12; N̄ = 3 for x and y
    # (share 2/3: 1 GPU for 2/3 of the time, T_ideal = 9, ρ = 6/9), N̄ = (6·3 + 6·1)/12 = 2 for z
    # (share 1 GPU, T_ideal = 6, ρ = 12/6 = 2)
    specs = [JobSpec(j, 0.0, 1, 6.0, "lin", max_gpus=1) for j in "xyz"]
    res = simulate(specs, Scheduler(Cluster.for_gpus(2, 2), make_policy("fifo"), linear_curves), check=True)
    res.records.sort(key=lambda r: r.spec.job_id)
    assert [r.jct for r in res.records] == pytest.approx([6.0, 6.0, 12.0])
    assert fair_times(res, linear_curves) == pytest.approx([9.0, 9.0, 6.0])
    s = summarise(res, linear_curves)
    assert (s.share_rho_over_1, s.share_rho_over_1_5) == pytest.approx((1 / 3, 1 / 3))


def test_without_users_jain_is_over_groups(linear_curves):
    specs = [JobSpec("a", 0.0, 2, 20.0, "lin", max_gpus=2, account="vc1"),
             JobSpec("b", 5.0, 1, 10.0, "lin", max_gpus=2, account="vc2")]
    res = simulate(specs, Scheduler(Cluster.for_gpus(2, 2), make_policy("fifo"), linear_curves), check=True)
    assert fairness_groups(res)[0] == "group"
    s = summarise(res, linear_curves)
    assert (s.fairness_groups, s.jain_users) == ("group", pytest.approx(0.8))


def test_without_curves_the_fairness_figures_are_absent(linear_curves):
    s = summarise(fifo_run(linear_curves))
    assert math.isnan(s.mean_rho) and math.isnan(s.jain_users) and s.fairness_groups == ""


@pytest.mark.parametrize("x, want", [([1, 1], 1.0), ([1, 3], 16 / 20), ([2, 0, 0, 0], 0.25), ([5], 1.0)])
def test_jain_hand_computed(x, want):
    assert jain_index(x) == pytest.approx(want)


@given(st.lists(st.floats(min_value=1e-3, max_value=1e3), min_size=1, max_size=30))
def test_jain_is_between_one_over_n_and_one_and_one_only_when_all_equal(x):
    j = jain_index(x)
    n = len(x)
    assert 1 / n - 1e-9 <= j <= 1 + 1e-9
    if len(set(x)) == 1:
        assert j == pytest.approx(1.0)
    elif max(x) - min(x) > 1e-6 * max(x):
        assert j < 1.0
