"""Themis (NSDI'20), simplified: finish-time fairness (ALGORITHMS.md §4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, greedy_fit, keyed_order
from coddl.policies.marginal import greedy_ladder
from coddl.policies.registry import register


@register
class Themis(Policy):
    """Repeatedly give one GPU to the job with the worst finish-time fairness ρ = T_shared / T_ideal.

    T_ideal is the job's whole running time alone on its fair share, 1/N of the cluster: ⌊G/N⌋ GPUs
    within the job's [min, max] — a job that cannot run on fewer than min_j GPUs gets its minimum
    for a G/N ÷ min_j fraction of the time (so with one-GPU minimums and more jobs than GPUs, a
    G/N fraction of one GPU's time). T_shared with k GPUs is the time it has already spent in the system (``elapsed``) plus
    its remaining time on k GPUs, T(k). At 0 GPUs ρ = ∞, so every job gets its minimum before any
    gets more; first GPUs, and ties, go to the job whose ρ at its minimum is worst, then by
    arrival. Elastic: jobs grow up to their maximum. Uses the true remaining work (oracle).
    Simplified from the paper: one round of "auctions" per event, no leases and no hidden
    payments.
    """

    name = "themis"
    elastic = True
    summary = "Themis (simplified): +1 GPU at a time to the job with the worst finish-time fairness"

    @dataclass
    class Params:
        elapsed: bool = True  # T_shared counts the time already spent since arrival

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        n = len(j)
        lo, hi = j.min_gpus, j.max_gpus
        fair = ctx.capacity / n
        # the fair share as a feasible allocation: ⌊G/N⌋ GPUs within [min_j, max_j], or, when that
        # is below the job's minimum, its minimum for a G/N ÷ min_j fraction of the time
        k_fair = np.clip(np.floor(fair), lo, np.maximum(hi, lo)).astype(np.int64)
        p_fair = ctx.throughput(k_fair) * np.minimum(1.0, fair / k_fair)
        ideal = j.total_work / p_fair
        spent = (ctx.now - j.arrival) if self.params.elapsed else np.zeros(n)
        at_min = (spent + ctx.remaining_time(lo)) / ideal
        order = keyed_order(j, -at_min)
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n)
        first = greedy_fit(order, lo, ctx.capacity)  # ρ = ∞ at 0 GPUs: first GPUs in rank order
        share = np.where(first, lo, 0)
        budget = ctx.capacity - int(share.sum())
        grow = np.flatnonzero((share > 0) & (share < hi))
        if budget <= 0 or grow.size == 0:
            return share
        width = int(min(hi[grow].max(), share[grow].max() + budget))
        rows = np.repeat(grow, width)
        k = np.tile(np.arange(width), grow.size)
        rho = ((spent[rows] + ctx.remaining_time(k, rows)) / ideal[rows]).reshape(grow.size, width)
        share[grow] = greedy_ladder(rho, share[grow], hi[grow], budget, rank[grow])
        return share
