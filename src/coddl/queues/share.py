"""How a cluster's GPUs (or cores) are divided between queues: nominal quotas first, then the idle
part of each cohort's quotas by weighted fair share, within borrowing and lending limits.

One resource at a time, over arrays with one entry per queue. A queue is entitled to

    guaranteed = min(demand, nominal)                          its own quota, as far as it wants it
    borrowed   = its weighted fair share of the cohort's pool  within its borrowing limit and its
                                                               unmet demand

where the pool is what the cohort's members do not want of their nominal quotas, each lending at
most its lending limit. A queue without a cohort neither borrows nor lends. Because the guaranteed
part depends only on the queue's own demand, a queue that wants its quota back gets it in the
decision after its jobs arrive, whatever the others hold (Kueue's ``reclaimWithinCohort: Any``).

*Shrink before preempting.* Each borrowing queue also has a floor: the GPUs the jobs it runs now
need at their minimum size. When the pool covers every borrower's floor, floors are kept and
only the rest is shared by weight, so jobs that run on borrowed GPUs are shrunk but never stopped
to even out the shares (the share evens out as they finish: Kueue's ``borrowWithinCohort: Never``).
When the pool no longer covers the floors — an owner took its quota back — every borrower is cut
to at most its floor before any is cut below it, and the shortfall is shared by weight: elastic
jobs are at their minimum everywhere before a job anywhere loses its GPUs. A job stops whole (a
gang is never split), so a stop can free more GPUs than its queue had to give back; what is left
over stays the queue's, and its other jobs may grow into it (the stopped job could not run on it,
and nobody else is owed it): after a stop, a queue's jobs hold above their minimums fewer GPUs than
any job it stopped needs at its minimum, never as many — those would have kept that job running.

Weights are Kueue's fair-sharing weights: a queue with twice the weight gets twice the share of
the pool; weight 0 borrows only what no one else wants.
"""

from __future__ import annotations

import math

import numpy as np


def entitlements(nominal: np.ndarray, demand: np.ndarray, floor: np.ndarray, cohort: np.ndarray,
                 weight: np.ndarray, borrowing_limit: np.ndarray, lending_limit: np.ndarray) -> np.ndarray:
    """Each queue's entitlement (integers). ``cohort`` is a cohort index per queue (−1: none);
    limits are ≥ 0, ``inf`` for none; ``floor`` ≤ ``demand``. Plain Python over the queues: there
    are tens of them, and numpy's per-call cost would dominate."""
    nominal, demand, floor = (np.asarray(a, dtype=np.int64).tolist() for a in (nominal, demand, floor))
    weight, borrow, lend = (np.asarray(a, dtype=float).tolist() for a in (weight, borrowing_limit, lending_limit))
    guaranteed = [min(d, n) for d, n in zip(demand, nominal)]
    out = guaranteed[:]
    members: dict[int, list[int]] = {}
    for i, c in enumerate(np.asarray(cohort).tolist()):
        if c >= 0:
            members.setdefault(c, []).append(i)
    for m in members.values():
        pool = sum(int(min(nominal[i] - guaranteed[i], lend[i])) for i in m)
        cap = [int(min(demand[i] - guaranteed[i], borrow[i], pool)) for i in m]
        lo = [min(c, max(0, floor[i] - guaranteed[i])) for c, i in zip(cap, m)]
        w = [weight[i] for i in m]
        if pool >= sum(lo):
            got = waterfill(w, lo, cap, min(pool, sum(cap)))
        else:
            got = waterfill(w, [0] * len(m), lo, pool)
        for i, g in zip(m, got):
            out[i] += g
    return np.array(out, dtype=np.int64)


def waterfill(weight: list[float], lo: list[int], hi: list[int], total: int) -> list[int]:
    """Integers x with lo ≤ x ≤ hi and Σx = total (Σlo ≤ total ≤ Σhi), as close as integers can be
    to the weighted water level clamp(w·λ, lo, hi); queues of weight 0 get lo, and then what the
    others cannot take, evenly."""
    x = list(lo)
    left = total - sum(lo)
    if left <= 0:
        return x
    pos = [i for i, w in enumerate(weight) if w > 0]
    zero = [i for i, w in enumerate(weight) if w <= 0]
    for group, w in ((pos, [weight[i] for i in pos]), (zero, [1.0] * len(zero))):
        if left <= 0 or not group:
            continue
        base = sum(x[i] for i in group)
        want = min(left + base, sum(hi[i] for i in group))
        for i, v in zip(group, _level(w, [x[i] for i in group], [hi[i] for i in group], want)):
            x[i] = v
        left = total - sum(x)
    return x


def _level(w: list[float], lo: list[int], hi: list[int], total: int) -> list[int]:
    """clamp(w·λ, lo, hi) with Σ = total, rounded down, and the units rounding left over given one
    each to the largest remainders (ties: the earlier queue)."""
    if total <= sum(lo):
        return list(lo)
    if total >= sum(hi):
        return list(hi)

    def filled(lam: float) -> float:
        return sum(min(max(wi * lam, a), b) for wi, a, b in zip(w, lo, hi))

    points = sorted({a / wi for wi, a in zip(w, lo)} | {b / wi for wi, b in zip(w, hi)})
    k0, k1 = 0, len(points) - 1  # filled(points[k0]) <= total < filled(points[k1])
    while k1 - k0 > 1:
        mid = (k0 + k1) // 2
        if filled(points[mid]) <= total:
            k0 = mid
        else:
            k1 = mid
    lam = points[k0]
    rate = sum(wi for wi, a, b in zip(w, lo, hi) if a <= wi * lam < b)
    if rate > 0:
        lam += (total - filled(lam)) / rate
    exact = [min(max(wi * lam, a), b) for wi, a, b in zip(w, lo, hi)]
    x = [min(max(int(math.floor(e + 1e-9)), a), b) for e, a, b in zip(exact, lo, hi)]
    # remainders to 9 places: 4.5 and 1.5 computed as 4.4999… and 1.5000… are a tie, which the
    # earlier queue wins (the sorts below are stable), not whichever float came out larger
    frac = [round(e - v, 9) for e, v in zip(exact, x)]
    # Σx ≤ Σ(e + 1e-9) = total + n·1e-9 plus the level's float error, far below 1: never over total
    short = total - sum(x)
    for i in sorted((i for i in range(len(x)) if x[i] < hi[i]), key=lambda i: -frac[i])[:short]:
        x[i] += 1
    return x
