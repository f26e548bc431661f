"""Elastic max-min fairness: GPUs dealt round-robin, one at a time, up to each job's maximum."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, greedy_fit, lexorder
from coddl.policies.registry import register


def water_fill(order: np.ndarray, lo: np.ndarray, hi: np.ndarray, capacity: int) -> np.ndarray:
    """Round-robin dealing in ``order``: admit jobs at their minimum ``lo`` while it fits, then raise
    every admitted job one GPU per round up to ``hi``. Closed form: the level L with
    Σ min(hi, max(lo, L)) ≤ capacity, then leftovers one each in order."""
    n = lo.shape[0]
    give = np.zeros(n, dtype=np.int64)
    admitted = greedy_fit(order, lo, capacity, backfill=True)
    if not admitted.any():
        return give
    rows = order[admitted[order]]
    lo_a, hi_a = lo[rows], hi[rows]

    def used(level: int) -> int:
        return int(np.minimum(hi_a, np.maximum(lo_a, level)).sum())

    lvl_lo, lvl_hi = 0, int(hi_a.max())
    while lvl_lo < lvl_hi:  # largest level whose fill fits
        mid = (lvl_lo + lvl_hi + 1) // 2
        if used(mid) <= capacity:
            lvl_lo = mid
        else:
            lvl_hi = mid - 1
    level = lvl_lo
    alloc = np.minimum(hi_a, np.maximum(lo_a, level))
    left = capacity - int(alloc.sum())
    if left > 0:
        # the next round, in order, until GPUs run out: only jobs at the water level (one held above
        # it by its minimum is already ahead)
        grow = np.flatnonzero((alloc < hi_a) & (alloc == level))[:left]
        alloc[grow] += 1
    give[rows] = alloc
    return give


@register
class MaxMin(Policy):
    name = "max-min"
    elastic = True
    summary = "elastic max-min fairness: equal GPUs per job (round-robin) up to each job's maximum"

    @dataclass
    class Params:
        pass

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        order = lexorder(j.first_start, j.arrival, j.uid)
        return water_fill(order, j.min_gpus, j.max_gpus, ctx.capacity)
