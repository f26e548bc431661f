"""Elastic max-min fairness: GPUs dealt round-robin, one at a time, up to each job's maximum."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.jit import njit
from coddl.policies.base import Context, Policy, keyed_order
from coddl.policies.registry import register


def water_fill(order: np.ndarray, lo: np.ndarray, hi: np.ndarray, capacity: int) -> np.ndarray:
    """Round-robin dealing in ``order``: admit jobs at their minimum ``lo`` while it fits, then raise
    every admitted job one GPU per round up to ``hi``. Closed form: the level L with
    Σ min(hi, max(lo, L)) ≤ capacity, then leftovers one each in order (only to jobs at the water
    level: one held above it by its minimum is already ahead). Compiled: a few passes over the jobs."""
    return _water_fill(np.asarray(order, dtype=np.int64), np.asarray(lo, dtype=np.int64),
                       np.asarray(hi, dtype=np.int64), int(capacity))


@njit()
def _water_fill(order: np.ndarray, lo: np.ndarray, hi: np.ndarray, capacity: int) -> np.ndarray:
    give = np.zeros(lo.shape[0], dtype=np.int64)
    rows = np.empty(order.size, dtype=np.int64)
    k = 0
    free = capacity
    for r in order:  # admission at the minimum, with backfilling
        if free <= 0:
            break
        if lo[r] <= free:
            rows[k] = r
            k += 1
            free -= lo[r]
    if k == 0:
        return give
    rows = rows[:k]
    top = 0
    for r in rows:
        top = max(top, hi[r])
    lvl_lo, lvl_hi = 0, top
    while lvl_lo < lvl_hi:  # the largest level whose fill fits
        mid = (lvl_lo + lvl_hi + 1) // 2
        used = 0
        for r in rows:
            used += min(hi[r], max(lo[r], mid))
        if used <= capacity:
            lvl_lo = mid
        else:
            lvl_hi = mid - 1
    left = capacity
    for r in rows:
        give[r] = min(hi[r], max(lo[r], lvl_lo))
        left -= give[r]
    for r in rows:
        if left <= 0:
            break
        if give[r] < hi[r] and give[r] == lvl_lo:
            give[r] += 1
            left -= 1
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
        order = keyed_order(j, j.first_start)
        return water_fill(order, j.min_gpus, j.max_gpus, ctx.capacity)
