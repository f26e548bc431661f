"""Gavel pinned with hand-computed values: the equal share and its speed, the job classes, the LP on
one type (no LP: X is the equal share) and on two, the rounds' priorities (time entitled ÷ time
received, with one round of prior), the fill of GPUs the LP left idle, mid-round arrivals and
departures, and the per-job accounting as the job ids grow."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.cluster import Cluster, GpuType, Node
from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies.gavel import Gavel, equal_share_fraction, equal_share_speed, job_classes, max_min_lp
from coddl.policies.registry import make_policy
from coddl.scheduler import Scheduler

CURVES = CurveTable.from_points({"a": {1: 1.0, 2: 2.0, 4: 4.0}, "b": {1: 1.0, 2: 2.0, 4: 4.0}})
# one V100 and one K80; model a runs 5× faster on the V100, model b 1.25×
TWO = Cluster(nodes=(Node("v0", 1, "V100"), Node("k0", 1, "K80")),
              gpu_types={"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)})
SPEED = np.array([[1.0, 1.0], [0.2, 0.8]])  # [type, model]


def held(s: Scheduler) -> dict[str, tuple[int, int]]:
    """(GPUs, type index) of every job that holds GPUs."""
    t = s.table
    return {t.ids[r]: (int(t.share[r]), int(t.gpu_type[r])) for r in range(t.n) if t.share[r] > 0}


# ------------------------------------------------------------------ equal share
def test_equal_share_fraction_by_hand() -> None:
    assert equal_share_fraction(np.array([16]), 8) == pytest.approx([0.5])  # larger than the cluster
    assert equal_share_fraction(np.array([3, 3, 3]), 6) == pytest.approx([2 / 3] * 3)  # level 2
    assert equal_share_fraction(np.array([2, 2]), 4) == pytest.approx([1.0, 1.0])  # exactly fits
    assert equal_share_fraction(np.array([2, 4]), 4) == pytest.approx([1.0, 0.5])  # level 2 = the small one
    # 5 GPUs, demands 4, 1, 1: the two small jobs sit below the level (5 − 2) / 1 = 3
    assert equal_share_fraction(np.array([4, 1, 1]), 5) == pytest.approx([0.75, 1.0, 1.0])
    assert equal_share_fraction([1, 2], 8).dtype == np.float64


def test_equal_share_speed_spreads_over_the_types_a_job_fits_by_capacity() -> None:
    # 3 GPUs (2 of type 0, 1 of type 1); demands 2, 1, 4 → level 1: fractions 1/2, 1, 1/4.
    # Job 0 fits type 0 only: 0.5 × 1. Job 1 fits both, weights 2/3 and 1/3: 2/3 + 1/3 × 0.5.
    # Job 2 fits no type: 0.
    speed = np.array([[1.0, 0.5], [1.0, 0.5], [2.0, 1.0]])
    got = equal_share_speed(speed, np.array([2, 1, 4]), np.array([2, 1]))
    assert got == pytest.approx([0.5, 5 / 6, 0.0])
    # two jobs on one V100 and one K80, each half the time on each: 0.5 + 0.5 × 0.25, and 1
    assert equal_share_speed(np.array([[1.0, 0.25], [1.0, 1.0]]), np.array([1, 1]), np.array([1, 1])) == \
        pytest.approx([0.625, 1.0])


def test_job_classes_group_by_model_and_demand() -> None:
    # models 1, 0, 1, 1 and demands 2, 1, 2, 1 on types of 2 and 1 GPUs: classes (0, 1), (1, 1),
    # (1, 2). Equal share of 3 GPUs among demands 2, 1, 2, 1: level 3/4, fractions 3/8 and 3/4.
    # A 1-GPU job: 3/4 × (2/3 × 1 + 1/3 × 0.5) = 0.625 → 1/0.625 = 1.6 and 0.5/0.625 = 0.8.
    # A 2-GPU job fits type 0 only: 3/8 × 1 → 8/3, and 0 on type 1.
    speed = np.tile([1.0, 0.5], (4, 1))
    c = job_classes(np.array([1, 0, 1, 1]), np.array([2, 1, 2, 1]), speed, np.array([2, 1]))
    assert c.of_row.tolist() == [2, 0, 2, 1]
    assert c.count.tolist() == [1, 1, 2] and c.demand.tolist() == [1, 1, 2]
    assert c.norm_speed == pytest.approx(np.array([[1.6, 0.8], [1.6, 0.8], [8 / 3, 0.0]]))
    # a job that fits no type has no normalised speed anywhere (and no division by zero)
    c = job_classes(np.array([0, 0]), np.array([1, 8]), np.ones((2, 2)), np.array([2, 1]))
    assert c.norm_speed[c.of_row[1]].tolist() == [0.0, 0.0]
    assert c.norm_speed[c.of_row[0]] == pytest.approx([1.0, 1.0])


def test_the_lp_gives_no_time_to_a_class_that_fits_nowhere() -> None:
    c = job_classes(np.array([0, 0]), np.array([1, 8]), np.ones((2, 2)), np.array([2, 1]))
    x = max_min_lp(c, np.array([2, 1]))
    assert x[c.of_row[1]].tolist() == [0.0, 0.0]
    assert (x[c.of_row[0]] * c.norm_speed[c.of_row[0]]).sum() == pytest.approx(1.0)
    nowhere = job_classes(np.array([0]), np.array([8]), np.ones((1, 2)), np.array([2, 1]))
    assert max_min_lp(nowhere, np.array([2, 1])).tolist() == [[0.0, 0.0]]


def test_two_jobs_on_two_types_share_both_equally() -> None:
    """a: normalised speeds 1/0.6 and 0.2/0.6 (its equal share is 0.5 × 1 + 0.5 × 0.2); b: 1/0.9 and
    0.8/0.9. a on the V100 a fraction p, b on it 1 − p: a = 1/3 + 4p/3, b = 10/9 − 2p/9, equal
    (both 1) at p = 1/2 — the max-min optimum; all V100 to a would leave b at 8/9."""
    c = job_classes(np.array([0, 1]), np.array([1, 1]), SPEED.T, np.array([1, 1]))
    assert c.norm_speed == pytest.approx(np.array([[1 / 0.6, 0.2 / 0.6], [1 / 0.9, 0.8 / 0.9]]))
    for efficiency in (True, False):
        x = max_min_lp(c, np.array([1, 1]), efficiency)
        assert x == pytest.approx(np.full((2, 2), 0.5), abs=1e-4)
        assert (x * c.norm_speed).sum(axis=1) == pytest.approx([1.0, 1.0], abs=1e-5)


@pytest.mark.parametrize("aware", [True, False])
def test_heterogeneity_awareness_is_what_reaches_the_optimum(aware: bool) -> None:
    s = Scheduler(TWO, make_policy(f"gavel:aware={str(aware).lower()}"), CURVES, type_speed=SPEED)
    s.submit(JobSpec("a0", 0.0, 1, 1e12, "a"), 0.0)
    s.submit(JobSpec("b0", 0.0, 1, 1e12, "b"), 0.0)
    s.step(0.0)
    x = s.policy._class_x
    true = job_classes(np.array([0, 1]), np.array([1, 1]), SPEED.T, np.array([1, 1])).norm_speed
    worst = (x * true).sum(axis=1).min()
    if aware:
        assert worst == pytest.approx(1.0, abs=1e-5)
    else:  # every type counts alike: any split is optimal to it, and HiGHS returns a vertex
        assert worst < 0.95
        assert x.sum(axis=1) == pytest.approx([1.0, 1.0])
    assert held(s) == {"a0": (1, 0), "b0": (1, 1)}  # a prefers the V100; b takes what is left


# ------------------------------------------------------------------ rounds on one type
def test_rounds_on_one_type_follow_entitled_over_received_time() -> None:
    """Four GPUs, three 2-GPU jobs of one model: equal share 4/6 of the time, so X = 2/3 and no LP.
    Round 0: priorities all 1 (one round of prior, 240 s entitled and received): j0, j1 by arrival.
    360: entitled 240 + 240 prior each; received j0, j1 360 + 240, j2 240: j2 2.0 first, then
         j0 and j1 at 0.8, tied; j0 arrived first.
    720: entitled 720; received j0 960, j1 600, j2 600: j1 and j2 1.2, j0 0.75 waits.
    1080: all three 1.0: the tie keeps the running jobs (j1, j2) where they are."""
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("gavel"), CURVES)
    for i in range(3):
        s.submit(JobSpec(f"j{i}", 0.0, 2, 1e12, "a"), 0.0)
    want = {0.0: {"j0", "j1"}, 360.0: {"j0", "j2"}, 720.0: {"j1", "j2"}, 1080.0: {"j1", "j2"}}
    for t, running in want.items():
        s.step(t)
        assert set(held(s)) == running, t
        assert all(v == (2, 0) for v in held(s).values())
        assert s.next_wakeup(t) == pytest.approx(t + 360.0)
    assert s.policy._class_x.tolist() == [[pytest.approx(2 / 3)]]
    uid = s.context(1080.0).jobs.uid
    assert s.policy._entitled[uid, 0] == pytest.approx([720.0, 720.0, 720.0])
    assert s.policy._received[uid, 0] == pytest.approx([720.0, 720.0, 720.0])


def test_mid_round_arrivals_get_free_gpus_oldest_first_and_the_round_is_kept() -> None:
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("gavel:round_s=1000"), CURVES)
    s.submit(JobSpec("x", 0.0, 2, 1e12, "a"), 0.0)
    s.step(0.0)
    assert held(s) == {"x": (2, 0)}
    # two arrivals at 10, the later-arriving one submitted first: the free 2 GPUs go to "early"
    s.submit(JobSpec("late", 10.0, 2, 1e12, "a"), 10.0)
    s.submit(JobSpec("early", 5.0, 2, 1e12, "a"), 10.0)
    s.step(10.0)
    assert held(s) == {"x": (2, 0), "early": (2, 0)}
    assert s.next_wakeup(10.0) == pytest.approx(1000.0)  # still the round that began at 0
    s.complete("x", 20.0)
    s.step(20.0)
    assert held(s) == {"early": (2, 0), "late": (2, 0)}


def test_a_job_larger_than_every_type_never_runs_and_demand_is_at_least_the_minimum() -> None:
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("gavel"), CURVES)
    s.submit(JobSpec("big", 0.0, 8, 1e12, "a", min_gpus=8, max_gpus=8), 0.0)
    s.submit(JobSpec("small", 0.0, 1, 1e12, "a", min_gpus=2, max_gpus=2), 0.0)
    s.step(0.0)
    assert held(s) == {"small": (2, 0)}  # it asked for 1 but needs at least 2


def test_without_jobs_the_policy_asks_for_no_wakeup() -> None:
    pol = Gavel()
    s = Scheduler(Cluster.for_gpus(4, 4), pol, CURVES)
    s.submit(JobSpec("x", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    assert pol.wakeup(s.context(0.0)) == pytest.approx(360.0)
    s.complete("x", 5.0)
    ctx = s.context(5.0)
    assert len(ctx.jobs) == 0 and pol.wakeup(ctx) is None
    out = pol.allocate(ctx)
    assert out.gpus.tolist() == [] and out.gpu_type.tolist() == []


def test_round_length_message() -> None:
    with pytest.raises(ValueError, match="^gavel: round_s must be positive, got -5.0$"):
        make_policy("gavel:round_s=-5")


def test_accounting_survives_the_growth_of_its_tables() -> None:
    """Job uids only grow; past 64 the per-uid tables are reallocated and must keep what they held:
    one 1-GPU job runs alone for a round (entitled and received 360 s), then 100 jobs arrive."""
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES)
    s.submit(JobSpec("first", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    for i in range(100):
        s.submit(JobSpec(f"j{i}", 360.0, 1, 1e12, "a"), 360.0)
    s.step(360.0)
    pol = s.policy
    assert pol._x.shape[0] >= 101
    assert pol._entitled[0, 0] == pytest.approx(360.0) and pol._received[0, 0] == pytest.approx(360.0)
    # at 360 the equal share is 1/101 of the time: "first" (priority (360 + 3.56) / (360 + 3.56) = 1)
    # and the newcomers (1) tie, and the running job stays
    assert held(s) == {"first": (1, 0)}
    assert pol._x[0, 0] == pytest.approx(1 / 101)
    s.step(720.0)  # now "first" is at 1/101 × 720 + prior over 720 + prior: far below 1
    assert "first" not in held(s)
    assert pol._received[0, 0] == pytest.approx(720.0)


def test_a_class_that_fits_nowhere_does_not_hold_the_minimum_at_zero() -> None:
    """The two jobs of test_two_jobs_on_two_types_share_both_equally plus an 8-GPU job that fits no
    type. The equal share of 2 GPUs among demands 1, 1, 8 is a level of 2/3 (fractions 2/3, 2/3,
    1/12), so a's normalised speeds are 1.5 × (1/0.6, 0.2/0.6) = (2.5, 0.5) and b's 1.5 × (1/0.9,
    0.8/0.9). The max-min optimum still splits both types evenly: 1.5 each. Were the big job's
    row (z ≤ 0) in the LP, every X would be max-min optimal and the second stage would give the
    V100 to a alone (total 2.5 + 4/3, minimum 4/3)."""
    c = job_classes(np.array([0, 1, 0]), np.array([1, 1, 8]), np.array([[1.0, 0.2], [1.0, 0.8], [1.0, 0.2]]),
                    np.array([1, 1]))
    assert c.norm_speed[c.of_row[0]] == pytest.approx([2.5, 0.5])
    x = max_min_lp(c, np.array([1, 1]))
    got = (x * c.norm_speed).sum(axis=1)[c.of_row]
    assert got[:2] == pytest.approx([1.5, 1.5], abs=1e-5)
    assert x[c.of_row[:2]] == pytest.approx(np.full((2, 2), 0.5), abs=1e-4)
    assert x[c.of_row[2]].tolist() == [0.0, 0.0]


def test_the_solver_writes_no_log(capfd) -> None:
    # HiGHS logs every solve to the process's stdout unless told not to (a line per solve per round)
    c = job_classes(np.array([0, 1]), np.array([1, 1]), SPEED.T, np.array([1, 1]))
    capfd.readouterr()
    max_min_lp(c, np.array([1, 1]))
    out, err = capfd.readouterr()
    assert "Model status" not in out + err and "Presolving" not in out + err


def test_the_second_stage_gives_spare_fast_time_to_the_job_that_gains_from_it() -> None:
    """Two types of 2 GPUs; jobs of 1, 1 and 2 GPUs that all fit both: every one runs all the time on
    an equal share (4 GPUs for 4), spread half and half. Job 0 runs at half speed on type 1 (normalised
    4/3 and 2/3), jobs 1 and 2 alike on both (1 and 1). No job 1 or 2 can pass 1, so the max-min
    optimum is 1; at it, the most total is job 0 all the time on type 0 (4/3) and jobs 1 and 2 at 1
    on what is left (which way they split it is the solver's choice)."""
    c = job_classes(np.array([0, 1, 2]), np.array([1, 1, 2]), np.array([[1.0, 0.5], [1.0, 1.0], [1.0, 1.0]]),
                    np.array([2, 2]))
    assert c.norm_speed == pytest.approx(np.array([[4 / 3, 2 / 3], [1.0, 1.0], [1.0, 1.0]]))
    x = max_min_lp(c, np.array([2, 2]))
    assert (x * c.norm_speed).sum(axis=1) == pytest.approx([4 / 3, 1.0, 1.0], abs=1e-5)
    assert x[0] == pytest.approx([1.0, 0.0], abs=1e-5)
    only = max_min_lp(c, np.array([2, 2]), efficiency=False)
    assert (only * c.norm_speed).sum(axis=1).min() == pytest.approx(1.0, abs=1e-6)


def test_the_tables_grow_when_a_job_id_reaches_their_size() -> None:
    # the first decision makes room for 64 job ids (0 … 63); job id 64 needs one more row
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES)
    s.submit(JobSpec("first", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    assert s.policy._x.shape == (64, 1)
    for i in range(64):
        s.submit(JobSpec(f"j{i}", 360.0, 1, 1e12, "a"), 360.0)
    s.step(360.0)
    assert s.policy._x.shape[0] >= 65 and s.policy._x[64, 0] == pytest.approx(1 / 65)


def test_more_than_64_jobs_at_the_first_decision() -> None:
    s = Scheduler(Cluster.for_gpus(2, 2), make_policy("gavel"), CURVES)
    for i in range(100):
        s.submit(JobSpec(f"j{i}", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    assert s.policy._x.shape[0] >= 100 and set(held(s)) == {"j0", "j1"}
    assert s.policy._x[:100, 0] == pytest.approx(np.full(100, 2 / 100))


def test_time_is_accounted_from_each_call_to_the_next_even_under_a_second() -> None:
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES)
    s.submit(JobSpec("x", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    s.submit(JobSpec("y", 0.5, 1, 1e12, "a"), 0.5)
    s.step(0.5)  # mid-round: x keeps its GPU; its half second is counted (X was 1 while alone)
    uid = s.context(0.5).jobs.uid
    assert s.policy._received[uid, 0] == pytest.approx([0.5, 0.0])
    assert s.policy._entitled[uid, 0] == pytest.approx([0.5, 0.0])
    assert held(s) == {"x": (1, 0)}


def test_a_fresh_policy_counts_no_time_before_its_first_call() -> None:
    """A policy that takes over running jobs (a controller restart) has seen no time pass: x, which
    holds the only GPU, and y, waiting, both start at priority 1, and the tie keeps x where it is."""
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES)
    s.submit(JobSpec("x", 0.0, 1, 1e12, "a"), 0.0)
    s.submit(JobSpec("y", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    assert held(s) == {"x": (1, 0)}
    fresh = Gavel()
    ctx = s.context(100.0)
    out = fresh.allocate(ctx)
    assert out.gpus.tolist() == [1, 0] and out.gpu_type.tolist() == [0, -1]
    assert fresh._received[ctx.jobs.uid, 0].tolist() == [0.0, 0.0]


def test_on_one_type_a_job_larger_than_the_cluster_gets_no_time() -> None:
    # 4 GPUs: "big" (8) fits nowhere; "small" (2) alone on the equal share runs all the time
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("gavel"), CURVES)
    s.submit(JobSpec("big", 0.0, 8, 1e12, "a", min_gpus=8, max_gpus=8), 0.0)
    s.submit(JobSpec("small", 0.0, 2, 1e12, "b"), 0.0)
    with np.errstate(all="raise"):
        s.step(0.0)
    uid = s.context(0.0).jobs.uid
    assert s.policy._x[uid, 0].tolist() == [0.0, pytest.approx(1.0)]
    assert held(s) == {"small": (2, 0)}


@pytest.mark.parametrize("efficiency", [True, False])
def test_the_policy_solves_with_its_efficiency_setting(efficiency: bool) -> None:
    # the instance of test_the_second_stage_gives_spare_fast_time_to_the_job_that_gains_from_it
    cluster = Cluster(nodes=(Node("f0", 2, "fast"), Node("s0", 2, "slow")),
                      gpu_types={"fast": GpuType("fast"), "slow": GpuType("slow")})
    curves = CurveTable.from_points({m: {1: 1.0, 2: 2.0} for m in ("m0", "m1", "m2")})
    speed = np.array([[1.0, 1.0, 1.0], [0.5, 1.0, 1.0]])  # [type, model]
    s = Scheduler(cluster, make_policy(f"gavel:efficiency={str(efficiency).lower()}"), curves, type_speed=speed)
    for i, (model, gpus) in enumerate([("m0", 1), ("m1", 1), ("m2", 2)]):
        s.submit(JobSpec(f"j{i}", 0.0, gpus, 1e12, model), 0.0)
    s.step(0.0)
    j = s.context(0.0).jobs
    c = job_classes(j.model, j.requested, speed[:, j.model].T, np.array([2, 2]))
    want = max_min_lp(c, np.array([2, 2]), efficiency)
    assert s.policy._class_x == pytest.approx(want, abs=1e-9)
    total = (s.policy._class_x * c.norm_speed).sum(axis=1)[c.of_row]
    if efficiency:
        assert total == pytest.approx([4 / 3, 1.0, 1.0], abs=1e-5)
    else:
        assert total.min() == pytest.approx(1.0, abs=1e-6)


def test_an_event_just_before_the_round_ends_is_still_mid_round() -> None:
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES)
    s.submit(JobSpec("x", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    s.submit(JobSpec("y", 359.5, 1, 1e12, "a"), 359.5)
    s.step(359.5)  # half a second before the boundary at 360: x keeps its GPU, the round stands
    assert held(s) == {"x": (1, 0)}
    assert s.next_wakeup(359.5) == pytest.approx(360.0)
    # the boundary: X = 1/2 each (prior 180 s); x was entitled to all 360 s it received: priority
    # (360 + 180) / (360 + 180) = 1, y (0 + 180) / (0 + 180) = 1: the tie keeps x
    s.step(360.0)
    assert held(s) == {"x": (1, 0)}
    assert s.next_wakeup(360.0) == pytest.approx(720.0)
    # 720: x entitled 360 + 180 of the 720 s it received: (540 + 180) / (720 + 180) = 0.8; y 2
    s.step(720.0)
    assert held(s) == {"y": (1, 0)}


def test_mid_round_a_one_gpu_job_keeps_its_gpu_and_nothing_warns() -> None:
    """One GPU, x and y (X = 1/2 each): x runs from 0. At 100, mid-round, z arrives: x keeps the
    GPU although y's priority ((50 + 180) / (0 + 180)) is now above x's ((50 + 180) / (100 + 180)).
    z has no X yet: its priority is 0/0, which must stay silent."""
    import warnings

    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES)
    s.submit(JobSpec("x", 0.0, 1, 1e12, "a"), 0.0)
    s.submit(JobSpec("y", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    assert held(s) == {"x": (1, 0)}
    s.submit(JobSpec("z", 100.0, 1, 1e12, "a"), 100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s.step(100.0)
    assert held(s) == {"x": (1, 0)}


def test_the_fastest_type_is_filled_first() -> None:
    # max-min alone (no second stage) splits both types exactly half and half: every tie is the
    # same, so the V100 pass, first, gives the V100 to the first job and the K80 to the other
    s = Scheduler(TWO, make_policy("gavel:efficiency=false"), CURVES, type_speed=SPEED)
    s.submit(JobSpec("a0", 0.0, 1, 1e12, "a"), 0.0)
    s.submit(JobSpec("b0", 0.0, 1, 1e12, "b"), 0.0)
    s.step(0.0)
    assert s.policy._class_x == pytest.approx(np.full((2, 2), 0.5), abs=1e-9)
    assert held(s) == {"a0": (1, 0), "b0": (1, 1)}


def test_at_a_tie_the_running_job_stays_though_the_other_arrived_first() -> None:
    """x runs alone from 10 (X = 1); y, which arrived at 5, is submitted at 20, mid-round. At the
    boundary (370) both are at priority 1 and X = 1/2: x, running, keeps the GPU."""
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES)
    s.submit(JobSpec("x", 10.0, 1, 1e12, "a"), 10.0)
    s.step(10.0)
    s.submit(JobSpec("y", 5.0, 1, 1e12, "a"), 20.0)
    s.step(20.0)
    s.step(370.0)
    assert held(s) == {"x": (1, 0)}


def test_a_full_fast_type_does_not_stop_the_slower_one_from_filling() -> None:
    # a0 alone gets the V100 (X = 1 there); b0 arrives mid-round: the V100 is full, the K80 is not
    s = Scheduler(TWO, make_policy("gavel"), CURVES, type_speed=SPEED)
    s.submit(JobSpec("a0", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    assert held(s) == {"a0": (1, 0)}
    s.submit(JobSpec("b0", 10.0, 1, 1e12, "b"), 10.0)
    s.step(10.0)
    assert held(s) == {"a0": (1, 0), "b0": (1, 1)}


def test_at_equal_priority_more_time_under_x_goes_first() -> None:
    # b0 submitted first; both at priority 1; the second stage gives a0 slightly more of the V100
    # (it gains more there), so a0 comes first on the V100 whatever the submission order
    s = Scheduler(TWO, make_policy("gavel"), CURVES, type_speed=SPEED)
    s.submit(JobSpec("b0", 0.0, 1, 1e12, "b"), 0.0)
    s.submit(JobSpec("a0", 0.0, 1, 1e12, "a"), 0.0)
    s.step(0.0)
    uid = s.context(0.0).jobs.uid
    assert s.policy._x[uid[1], 0] > s.policy._x[uid[0], 0]
    assert held(s) == {"a0": (1, 0), "b0": (1, 1)}


def test_at_equal_priority_the_earlier_arrival_goes_first() -> None:
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES)
    s.submit(JobSpec("late", 10.0, 1, 1e12, "a"), 10.0)
    s.submit(JobSpec("early", 5.0, 1, 1e12, "a"), 10.0)
    s.step(10.0)
    assert held(s) == {"early": (1, 0)}


def test_a_job_too_big_for_the_fast_type_runs_on_the_slow_one() -> None:
    cluster = Cluster(nodes=(Node("v0", 1, "V100"), Node("k0", 2, "K80")),
                      gpu_types={"V100": GpuType("V100"), "K80": GpuType("K80", speed=0.25)})
    s = Scheduler(cluster, make_policy("gavel"), CURVES, type_speed=SPEED)
    s.submit(JobSpec("two", 0.0, 2, 1e12, "a"), 0.0)
    s.step(0.0)
    assert held(s) == {"two": (2, 1)}


def test_a_round_under_a_second_is_allowed() -> None:
    assert make_policy("gavel:round_s=0.5").params.round_s == 0.5
    assert make_policy("gavel:round_s=1").params.round_s == 1.0
