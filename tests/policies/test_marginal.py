"""Optimus and Themis decide exactly what their one-GPU-at-a-time rounds decide (``marginal``)."""

from __future__ import annotations

import math

import numpy as np

from cases import random_context
from naive import Curves
from coddl.policies import make_policy
from coddl.policies.base import lexorder
from coddl.policies.marginal import greedy_ladder


def rounds(values: np.ndarray, start: np.ndarray, hi: np.ndarray, budget: int, rank: np.ndarray) -> list[int]:
    """+1 GPU per round to the row with the largest current value, ties to the smallest rank; a
    NaN value (no value) is never the largest, so its row takes no step there."""
    s = start.tolist()
    for _ in range(budget):
        cands = [r for r in range(len(s)) if s[r] < hi[r] and not math.isnan(values[r, s[r]])]
        if not cands:
            break
        best = max(cands, key=lambda r: (values[r, s[r]], -rank[r]))
        s[best] += 1
    return s


def test_greedy_ladder_matches_rounds_with_ties_and_bumps() -> None:
    rng = np.random.default_rng(7)
    for _ in range(600):
        n, width = int(rng.integers(1, 7)), int(rng.integers(1, 9))
        values = rng.integers(0, 5, (n, width)).astype(float)  # few distinct values: many ties
        if rng.random() < 0.5:
            values = -np.sort(-values, axis=1)  # the usual case: decreasing marginal value
        if rng.random() < 0.25:
            values[rng.random(values.shape) < 0.15] = np.nan  # no value: ∞ − ∞
        start = rng.integers(0, width, n)
        hi = np.minimum(width, start + rng.integers(0, width + 1, n))
        rank = rng.permutation(n)
        budget = int(rng.integers(0, n * width + 2))
        got = greedy_ladder(values, start.astype(np.int32), hi, budget, rank)
        assert got.dtype == np.int64  # GPU counts, whatever integer type the start came in
        assert got.tolist() == rounds(values, start, hi, budget, rank)


def test_a_row_without_values_does_not_keep_the_others_from_the_budget() -> None:
    # Row 0 has no value on any step (NaN); rows 1 and 2 take the 3 GPUs by value: 5, 4, 3.
    values = np.array([[np.nan, np.nan, np.nan], [5.0, 3.0, 1.0], [4.0, 2.0, 1.0]])
    start, hi, rank = np.array([1, 1, 1]), np.array([3, 3, 3]), np.array([0, 1, 2])
    assert greedy_ladder(values, np.array([0, 0, 0]), hi, 3, rank).tolist() == [0, 2, 1]
    assert greedy_ladder(values, np.array([0, 0, 0]), hi, 9, rank).tolist() == [0, 3, 3]
    assert greedy_ladder(values, start, hi, 2, rank).tolist() == [1, 2, 2]


def naive_optimus(ctx) -> list[int]:
    """Every job from 0; each round +1 step to the largest T(k) − T(k'), T(0) = ∞, list order on ties."""
    c = Curves(ctx)
    j = ctx.jobs
    rank = {r: i for i, r in enumerate(lexorder(j.first_start, j.arrival, j.uid).tolist())}
    s = [0] * len(j)
    budget = ctx.capacity
    while True:
        cands = [r for r in range(len(s)) if s[r] < c.hi[r] and c.nxt(r, s[r]) - s[r] <= budget]
        if not cands:
            return s
        best = max(cands, key=lambda r: (c.t(r, s[r]) - c.t(r, c.nxt(r, s[r])), -rank[r]))
        budget -= c.nxt(best, s[best]) - s[best]
        s[best] = c.nxt(best, s[best])


def naive_themis(ctx) -> list[int]:
    """Every job from 0; each round +1 step to the worst ρ(k) = (spent + T(k)) / T_ideal, ρ(0) = ∞."""
    c = Curves(ctx)
    j = ctx.jobs
    n = len(j)
    fair = ctx.capacity / n
    ideal = []
    for r in range(n):
        # the fair share within [min, max]: a job below its minimum runs at it part of the time
        k = int(min(max(math.floor(fair), c.lo[r]), max(c.hi[r], c.lo[r])))
        ideal.append(float(j.total_work[r]) / (c.p(r, k) * min(1.0, fair / k)))
    spent = [ctx.now - a for a in j.arrival.tolist()]

    def rho(r: int, k: int) -> float:
        return (spent[r] + c.t(r, k)) / ideal[r]

    order = lexorder(-np.array([rho(r, c.lo[r]) for r in range(n)]), j.arrival, j.uid).tolist()
    rank = {r: i for i, r in enumerate(order)}
    s = [0] * n
    budget = ctx.capacity
    while True:
        cands = [r for r in range(n) if s[r] < c.hi[r] and c.nxt(r, s[r]) - s[r] <= budget]
        if not cands:
            return s
        best = max(cands, key=lambda r: (rho(r, s[r]) if s[r] else math.inf, -rank[r]))
        budget -= c.nxt(best, s[best]) - s[best]
        s[best] = c.nxt(best, s[best])


def test_optimus_matches_its_rounds() -> None:
    for seed in range(300):
        pol = make_policy("optimus")
        ctx = random_context(seed, pol)
        assert pol.allocate(ctx).tolist() == naive_optimus(ctx), f"seed {seed}"


def test_themis_matches_its_rounds() -> None:
    for seed in range(300):
        pol = make_policy("themis")
        ctx = random_context(seed, pol)
        assert pol.allocate(ctx).tolist() == naive_themis(ctx), f"seed {seed}"
