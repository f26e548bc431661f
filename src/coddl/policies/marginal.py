"""Greedy +1-GPU allocation by a per-step value, decided by one selection instead of G rounds.

Optimus and Themis hand GPUs out one at a time to the job whose next GPU is worth the most (the
largest decrease in remaining time; the worst finish-time-fairness ratio), ties to the job first
in their tie order. Each job's steps form a ladder of values v_j(s), s = start_j … hi_j − 1.

Why one selection suffices: replace v by its running minimum along the ladder,
m_j(s) = min(v_j(start_j … s)). A step worth more than some earlier step of the same job is taken
right after that earlier one (it is then the best on offer), so the rounds take steps in the order
of the key (−m, tie rank, s), and ``budget`` rounds take the ``budget`` smallest keys. This is
exact, ties included; ``tests/policies/test_marginal.py`` checks it against the rounds.
"""

from __future__ import annotations

import numpy as np


def greedy_ladder(values: np.ndarray, start: np.ndarray, hi: np.ndarray, budget: int,
                  rank: np.ndarray) -> np.ndarray:
    """Shares after ``budget`` rounds of "+1 GPU to the row with the largest current value".

    ``values[j, s]`` is row j's value of the step s → s+1 (columns below ``start[j]`` or from
    ``hi[j]`` on are ignored); ``rank`` orders equal values (smaller first, unique per row).
    """
    n, width = values.shape
    share = start.astype(np.int64).copy()
    if budget <= 0 or n == 0:
        return share
    level = np.arange(width)
    valid = (level >= start[:, None]) & (level < np.minimum(hi, width)[:, None])
    # A step without a value (NaN: Optimus's ∞ − ∞ for a job that makes no progress either way) is
    # never the largest on offer, so its row stops there; the other rows still share the budget.
    valid &= ~np.logical_or.accumulate(valid & np.isnan(values), axis=1)
    if int(valid.sum()) <= budget:
        return share + valid.sum(axis=1)
    run = np.minimum.accumulate(np.where(valid, values, np.inf), axis=1)
    rows, cols = np.nonzero(valid)
    m = run[rows, cols]
    cut = np.partition(m, m.size - budget)[m.size - budget]  # the budget-th largest running minimum
    take = m > cut
    tied = np.flatnonzero(m == cut)
    need = budget - int(take.sum())
    if need:
        tied = tied[np.lexsort((cols[tied], rank[rows[tied]]))][:need]
        take[tied] = True
    share += np.bincount(rows[take], minlength=n)
    return share
