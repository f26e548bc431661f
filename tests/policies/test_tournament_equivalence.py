"""AFS-L and AFS-P decide exactly what the naive one-GPU-at-a-time tournament decides (§2, §3).

The naive versions live in ``naive.py``; the random cases (``cases.py``) mix concave, linear-then-
flat, falling and more-than-doubling curves, equal job lengths and equal gains/losses, minimums
above one GPU and maximums beyond the measured curve, so ties and the slow paths are exercised.
"""

from __future__ import annotations

import numpy as np
import pytest

from cases import random_context
from naive import naive_afs_l, naive_afs_l_arrival, naive_afs_p_light, naive_afs_p_per_contest, naive_tournament
from coddl.policies import make_policy
from coddl.policies.tournament import tournament


@pytest.mark.parametrize("block", range(6))
def test_afs_l_matches_naive(block: int) -> None:
    for seed in range(block * 100, block * 100 + 100):
        pol = make_policy("afs-l")
        ctx = random_context(seed, pol)
        assert pol.allocate(ctx).tolist() == naive_afs_l(ctx), f"seed {seed}"


@pytest.mark.parametrize("coin", ["per-job", "per-decision"])
@pytest.mark.parametrize("block", range(3))
def test_afs_p_matches_naive(block: int, coin: str) -> None:
    checked = 0
    for seed in range(block * 100, block * 100 + 100):
        pol, twin = (make_policy(f"afs-p:coin={coin}") for _ in range(2))
        ctx = random_context(seed, pol, gpus=(8, 60))
        if int(ctx.jobs.min_gpus.sum()) >= ctx.capacity:
            continue  # heavy load: time slices, tested separately
        tctx = random_context(seed, twin, gpus=(8, 60))
        priority = -twin._priorities(tctx, twin._book.lookup(tctx.jobs.uid))
        assert pol.allocate(ctx).tolist() == naive_afs_p_light(ctx, priority), f"seed {seed}"
        checked += 1
    assert checked >= 50


def test_tournament_from_arbitrary_start_matches_naive() -> None:
    """The bulk engine itself, from random starting shares and with random visiting keys."""
    for seed in range(400):
        pol = make_policy("afs-l")
        ctx = random_context(seed, pol)
        rng = np.random.default_rng(seed)
        j = ctx.jobs
        n = len(j)
        lo, hi = j.min_gpus, j.max_gpus
        start = np.where(rng.random(n) < 0.5, 0, np.minimum(hi, lo + rng.integers(0, 3, n)))
        budget = int(rng.integers(0, ctx.capacity + 1))
        prio = rng.integers(0, 3, n).astype(float)  # repeated keys: the tie rank decides
        tie = rng.permutation(n)
        if rng.random() < 0.5:
            def key(rows, levels, speed):
                return prio[rows]
            got = tournament(ctx, start, lo, hi, budget, tie, fixed=prio).tolist()
        else:
            def key(rows, levels, speed):
                return ctx.remaining_time(levels, rows)
            got = tournament(ctx, start, lo, hi, budget, tie, work=j.remaining).tolist()
        assert got == naive_tournament(ctx, start, lo, hi, budget, key, tie), f"seed {seed}"


def test_larger_cases_match_naive() -> None:
    for seed in range(40):
        pol = make_policy("afs-l")
        ctx = random_context(10_000 + seed, pol, jobs=(20, 40), gpus=(30, 120))
        assert pol.allocate(ctx).tolist() == naive_afs_l(ctx), f"seed {seed}"


@pytest.mark.parametrize("block", range(3))
def test_afs_l_arrival_order_matches_the_authors_rule(block: int) -> None:
    for seed in range(block * 100, block * 100 + 100):
        pol = make_policy("afs-l:order=arrival")
        ctx = random_context(seed, pol)
        assert pol.allocate(ctx).tolist() == naive_afs_l_arrival(ctx), f"seed {seed}"


def test_afs_p_per_contest_coin_matches_when_no_coin_is_needed_and_is_fair_otherwise() -> None:
    """Where no contest reaches the coin, the compiled rounds and the transcription agree
    exactly; where one does, the coin falls both ways over seeds, and the outcome is one the
    transcription can produce with some sequence of flips."""
    flipped = 0
    for seed in range(300):
        pol = make_policy("afs-p:coin=per-contest")
        ctx = random_context(seed, pol, gpus=(8, 60))
        if int(ctx.jobs.min_gpus.sum()) >= ctx.capacity:
            continue
        coins: list[bool] = []

        def never() -> bool:
            coins.append(False)
            return False
        reference = naive_afs_p_per_contest(ctx, never)
        got = pol.allocate(ctx).tolist()
        if not coins:
            assert got == reference, f"seed {seed}"
        else:
            flipped += 1
            assert sum(got) == sum(reference)
    assert flipped >= 20


def test_afs_l_minimums_first_shortcut_matches_naive() -> None:
    """With curves that never more than double per GPU, AFS-L hands out minimums by T(min) before
    running the tournament; the decisions must be the naive ones (cases where the shortcut applies)."""
    from coddl.policies.afs_l import _at_most_doubling

    used = 0
    for seed in range(400):
        pol = make_policy("afs-l")
        ctx = random_context(seed, pol, jobs=(2, 20), gpus=(2, 40))
        if not _at_most_doubling(ctx.curves):
            continue
        used += 1
        assert pol.allocate(ctx).tolist() == naive_afs_l(ctx), f"seed {seed}"
    assert used >= 40


def test_afs_l_doubling_check_includes_exact_doubling_and_ignores_a_stale_cache_entry() -> None:
    """The shortcut's condition is P(s+1) ≤ 2·P(s) (a gain of exactly 1 still loses to a job at 0
    GPUs, whose loss is 1): linear curves, which double from 1 to 2 GPUs, take it. The check is
    cached by the table's id; an entry left by another table that had the same id (freed, its id
    reused) must not answer for this one."""
    from coddl.policies import afs_l

    linear = np.array([[0.0, 1.0, 2.0, 3.0, 4.0]])
    faster = np.array([[0.0, 1.0, 2.5, 3.0, 4.0]])  # 1 → 2 GPUs more than doubles
    assert afs_l._at_most_doubling(linear) is True
    assert afs_l._at_most_doubling(faster) is False
    table = np.array([[0.0, 1.0, 1.5, 2.0]])
    afs_l._DOUBLING[id(table)] = (faster, False)  # as if `faster` had lived at this address
    try:
        assert afs_l._at_most_doubling(table) is True
        assert afs_l._at_most_doubling(table) is True  # and the fresh answer is what is kept
    finally:
        afs_l._DOUBLING.pop(id(table), None)
