"""Dynamic load balancing in a job that spans device types (``coddl.elastic.balance``): the split is
hand-computed here, its invariants are properties, and a real job on an emulated fast and slow
device keeps its global batch and every sample exactly once while its slices follow the speeds."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.elastic.balance import WARMUP_STEPS, Balancer, RankInfo, apportion, type_key
from coddl.elastic.data import local_range

FAST, SLOW = type_key("fast"), type_key("slow")


def test_apportion_hand_computed() -> None:
    # 48 samples for speeds 3:1: one each, then 46 × (3/4, 1/4) = 34.5 / 11.5, the tie to rank 0
    assert apportion(48, [3.0, 1.0]) == [36, 12]
    assert apportion(10, [1.0, 1.0, 1.0]) == [4, 3, 3]  # 7 spare = 2.33 each: the remainder to rank 0
    assert apportion(5, [100.0, 1.0]) == [4, 1]  # never below one sample while there are enough
    assert apportion(2, [1.0, 1.0, 1.0]) == [1, 1, 0]  # fewer samples than ranks: the equal split's rule


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 5000), st.lists(st.floats(0.01, 100.0), min_size=1, max_size=16))
def test_apportion_partitions_and_follows_the_weights(total: int, weights: list[float]) -> None:
    counts = apportion(total, weights)
    assert sum(counts) == total and all(c >= 0 for c in counts)
    if total >= len(weights):
        assert min(counts) >= 1
        spare, s = total - len(weights), sum(weights)
        for c, w in zip(counts, weights):  # within one sample of its exact share of the spare ones
            assert abs((c - 1) - spare * w / s) < 1 + 1e-9


def test_one_type_splits_as_before() -> None:
    b = Balancer((RankInfo(FAST, 1.0), RankInfo(FAST, 1.0), RankInfo(FAST, 1.0)))
    assert not b.active
    assert [b.slice(50, r) for r in range(3)] == [local_range(50, 3, r) for r in range(3)]
    assert not b.observe([0.001, 0.009, 0.001], 50)  # not even measured
    assert [b.slice(50, r) for r in range(3)] == [local_range(50, 3, r) for r in range(3)]
    assert b.known(0) == 0.0


def test_two_types_start_from_prior_speeds_then_follow_measurements() -> None:
    b = Balancer((RankInfo(FAST, 2.0), RankInfo(SLOW, 1.0)))  # the spec says: twice as fast
    assert b.active
    assert [b.slice(32, r) for r in range(2)] == [(0, 21), (21, 32)]  # 1 + 20, 1 + 10
    # measured: 1 ms and 4 ms per sample. The first WARMUP_STEPS steps are not counted.
    for _ in range(WARMUP_STEPS):
        assert not b.observe([0.001, 0.004], 32)
    assert b.times == [0.0, 0.0]
    # now the split 21 / 11 predicts max(21 × 1, 11 × 4) = 44 ms; by speed, 1000 : 250 gives 1 + 24 and
    # 1 + 6, max(25 × 1, 7 × 4) = 28 ms: better by more than the tolerance, so the split moves
    assert b.observe([0.001, 0.004], 32)
    assert [b.slice(32, r) for r in range(2)] == [(0, 25), (25, 32)]
    assert b.known(1) == 0.004


def test_a_rank_that_timed_nothing_keeps_the_split() -> None:
    b = Balancer((RankInfo(FAST, 1.0), RankInfo(SLOW, 1.0)))
    for _ in range(WARMUP_STEPS + 3):
        assert not b.observe([0.001, 0.0], 40)  # the slow rank's batches were micro-batches (inspection)
    assert [b.slice(40, r) for r in range(2)] == [(0, 20), (20, 40)]


def test_small_differences_do_not_reshuffle() -> None:
    b = Balancer((RankInfo(FAST, 1.0, 0.00100), RankInfo(SLOW, 1.0, 0.00104)))
    before = [b.slice(48, r) for r in range(2)]
    for _ in range(WARMUP_STEPS + 5):
        assert not b.observe([0.00100, 0.00104], 48)  # 4% slower: under the 5% tolerance
    assert [b.slice(48, r) for r in range(2)] == before


def test_a_new_generation_carries_each_types_measurement_to_newcomers() -> None:
    # survivors: rank 0 (fast, 1 ms measured) and rank 1 (slow, 3 ms); a new slow rank measured nothing
    b = Balancer((RankInfo(FAST, 1.0, 0.001), RankInfo(SLOW, 1.0, 0.003), RankInfo(SLOW, 1.0, 0.0)))
    assert b.times == [0.001, 0.003, 0.003]
    # weights 3 : 1 : 1 from the start: 48 = 3 + 45 × (0.6, 0.2, 0.2) = 3 + (27, 9, 9)
    assert apportion(48, b.weights) == [28, 10, 10]
    # a type nobody measured yet: every rank starts from the prior speeds instead
    c = Balancer((RankInfo(FAST, 4.0, 0.001), RankInfo(SLOW, 1.0, 0.0)))
    assert c.times == [0.001, 0.0] and c.weights == [4.0, 1.0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([FAST, SLOW, 7]), st.floats(0.1, 10.0)), min_size=1, max_size=8),
       st.lists(st.lists(st.floats(0.0, 0.1), min_size=8, max_size=8), max_size=12), st.integers(1, 4096))
def test_any_measurements_keep_a_partition(ranks, steps, total) -> None:
    b = Balancer(tuple(RankInfo(k, s) for k, s in ranks))
    for timed in steps:
        b.observe(timed[: len(ranks)], total)
        slices = [b.slice(total, r) for r in range(len(ranks))]
        assert slices[0][0] == 0 and slices[-1][1] == total
        assert all(a[1] == c[0] for a, c in zip(slices, slices[1:]))
        assert all(math.isfinite(w) and w > 0 for w in b.weights)


def test_the_largest_remainder_gets_the_spare_sample() -> None:
    # 8 spare for 2 : 1 is 5.33 / 2.67: the one left over goes to rank 1 (remainder .67), not rank 0
    assert apportion(10, [2.0, 1.0]) == [6, 4]
    assert apportion(10, [1.0, 2.0]) == [4, 6]


def test_measurements_are_smoothed_hand_computed() -> None:
    b = Balancer((RankInfo(FAST, 1.0), RankInfo(SLOW, 1.0)), tolerance=10.0)  # never re-split: only the times
    for _ in range(WARMUP_STEPS):
        b.observe([0.5, 0.5], 48)
    b.observe([0.002, 0.004], 48)  # the first counted measurement is taken as it is
    assert b.times == [0.002, 0.004]
    b.observe([0.004, 0.0], 48)  # 0.7 × 0.002 + 0.3 × 0.004; rank 1 timed nothing
    assert math.isclose(b.times[0], 0.0026) and b.times[1] == 0.004
    b.observe([0.0, 0.001], 48)  # a rank that timed nothing does not stop the ranks after it
    assert math.isclose(b.times[0], 0.0026) and math.isclose(b.times[1], 0.7 * 0.004 + 0.3 * 0.001)


def test_each_rank_keeps_its_own_carried_time() -> None:
    # two slow ranks that measured differently (one sat on a busier host) keep their own times
    b = Balancer((RankInfo(FAST, 1.0, 0.001), RankInfo(SLOW, 1.0, 0.002), RankInfo(SLOW, 1.0, 0.004)))
    assert b.times == [0.001, 0.002, 0.004]
    assert apportion(48, b.weights) == apportion(48, [4.0, 2.0, 1.0]) == [27, 14, 7]


def test_unusable_prior_speeds_count_as_one() -> None:
    b = Balancer((RankInfo(FAST, 0.0), RankInfo(SLOW, -2.0), RankInfo(7, float("nan")), RankInfo(8, 3.0),
                  RankInfo(9, 0.5)))
    assert b.weights == [1.0, 1.0, 1.0, 3.0, 0.5]


def test_a_newcomer_takes_its_types_time_from_whichever_rank_measured_it() -> None:
    b = Balancer((RankInfo(SLOW, 1.0, 0.0), RankInfo(SLOW, 1.0, 0.003), RankInfo(FAST, 1.0, 0.001)))
    assert b.times == [0.003, 0.003, 0.001]


def test_an_impossibly_short_carried_time_is_clamped() -> None:
    b = Balancer((RankInfo(FAST, 1.0, 1e-300), RankInfo(SLOW, 1.0, 0.002)))
    assert b.times == [1e-9, 0.002] and all(math.isfinite(w) for w in b.weights)


def test_one_type_carries_nothing_forward() -> None:
    b = Balancer((RankInfo(FAST, 1.0, 0.002), RankInfo(FAST, 1.0, 0.003)))
    assert not b.active and b.known(0) == b.known(1) == 0.0


def test_rank_rows_round_trip_exactly_in_float64() -> None:
    for name in ("cpu", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB", ""):
        k = type_key(name)
        assert 0 <= k < 2**31 and float(k) == k
    assert len({type_key(n) for n in ("cpu", "a", "b", "NVIDIA H100 80GB HBM3")}) == 4
    info = RankInfo(type_key("NVIDIA H100 80GB HBM3"), 2.5, 0.00125)
    assert RankInfo.from_row(info.row()) == info
    assert Balancer.alone().ranks == (RankInfo(0, 1.0),) and not Balancer.alone().active
