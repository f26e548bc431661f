"""Gavel's rounds: over many rounds each job's time on each type approaches the LP's X; between
round boundaries running jobs keep their GPUs and freed GPUs are handed out at once."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.cluster import Cluster, GpuType, Node
from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies.gavel import job_classes, max_min_lp
from coddl.policies.registry import make_policy
from coddl.scheduler import Scheduler

CLUSTER = Cluster(nodes=(Node("v0", 4, "V100"), Node("k0", 4, "K80")),
                  gpu_types={"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)})
CURVES = CurveTable.from_points({"a": {1: 1.0, 2: 2.0, 4: 4.0}, "b": {1: 1.0, 2: 2.0, 4: 4.0}})
# model a gains 5× from a V100, model b only 1.25×
SPEED = np.array([[1.0, 1.0], [0.2, 0.8]])  # [type, model]; type order V100, K80


def scheduler(round_s: float = 360.0) -> Scheduler:
    return Scheduler(CLUSTER, make_policy(f"gavel:round_s={round_s}"), CURVES, type_speed=SPEED)


def submit(s: Scheduler, jobs: list[tuple[str, int]], now: float = 0.0) -> None:
    for i, (model, gpus) in enumerate(jobs):
        s.submit(JobSpec(f"{model}{i}@{now}", now, gpus, 1e12, model), now)


def test_time_on_each_type_converges_to_the_lp_allocation():
    s = scheduler()
    submit(s, [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("a", 1), ("b", 1), ("b", 2)])  # 10 GPUs on 8
    j = s.context(0.0).jobs
    cap = np.array([4, 4])
    classes = job_classes(j.model, j.requested, SPEED[:, j.model].T, cap)
    x = max_min_lp(classes, cap)[classes.of_row]
    on = np.zeros((len(j), 2))
    rounds = 400
    for r in range(rounds):
        s.step(r * 360.0)
        t = s.table
        running = t.share[: t.n] > 0
        on[np.flatnonzero(running), t.gpu_type[: t.n][running]] += 1
    assert np.abs(on / rounds - x).max() < 0.03
    # and the heterogeneity shows: model a's jobs get most of the V100 time
    a_jobs = j.model == CURVES.model_index("a")
    assert (on[a_jobs, 0].sum() / on[a_jobs].sum()) > (on[~a_jobs, 0].sum() / on[~a_jobs].sum())


def test_between_boundaries_running_jobs_stay_and_freed_gpus_go_out_at_once():
    s = scheduler(round_s=1000.0)
    submit(s, [("a", 4), ("b", 4), ("a", 4)])  # 12 GPUs wanted, 8 there: one job waits
    s.step(0.0)
    t = s.table
    held = {t.ids[r]: (int(t.share[r]), int(t.gpu_type[r])) for r in range(t.n)}
    waiting = [j for j, (g, _) in held.items() if g == 0]
    assert len(waiting) == 1
    submit(s, [("b", 1)], now=10.0)  # a mid-round arrival with no free GPU waits…
    s.step(10.0)
    running = {j: v for j, v in held.items() if v[0] > 0}
    assert all((int(t.share[t.row[j]]), int(t.gpu_type[t.row[j]])) == v for j, v in running.items())
    finished, stays = list(running)
    s.complete(finished, 20.0)  # …until a job leaves: its GPUs are handed out before the boundary
    s.step(20.0)
    assert (int(t.share[t.row[stays]]), int(t.gpu_type[t.row[stays]])) == running[stays]
    assert s.gpus_in_use > 4
    assert s.next_wakeup(20.0) == pytest.approx(1000.0)


def test_round_length_must_be_positive():
    with pytest.raises(ValueError):
        make_policy("gavel:round_s=0")
