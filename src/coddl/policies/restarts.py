"""Whether growing a job pays for the restart it costs: the rule every policy decides under.

A job resized in place (``coddl.elastic``) loses tens of milliseconds, so any extra GPU is worth
taking. A job resized by restart (a restartable command job; ``reconfig: restart`` in the
simulator) stands still for its resize cost c — stop, cold start, reload — and only then runs
faster. Growing it from s to k GPUs finishes it at ``c + W/P(k)`` instead of ``W/P(s)``, so the
growth pays only when the time it saves on the remaining work exceeds the cost:

    W/P(s) − W/P(k) > c

This is Pollux's re-allocation factor made exact for a known remaining time: Pollux discounts a
reallocated job's speed-up by (age − restarts·δ)/(age + δ) because it cannot know how long a job
has left (δ its restart delay), and AdaptDL discounts it by a flat 10 %; with W known (both the real
system and the simulator plan with each job's remaining steps) the
saving itself can be weighed against the cost. A job near its end therefore keeps its GPUs; a job
far from it grows. The scheduler re-runs the policy with a held job's maximum at its current share,
so the GPUs it does not take go to the other jobs in the same decision (``Scheduler._decide``).
Jobs with no resize cost are not looked at, and a decision without any is exactly the policy's.
"""

from __future__ import annotations

import numpy as np

from coddl.policies.base import Context


def hopeless(ctx: Context) -> np.ndarray:
    """Rows of running jobs with a resize cost that no growth within their maximum pays for: the
    fastest they could run on more GPUs (the best of P(s+1) … P(max)) saves no more than the cost."""
    j = ctx.jobs
    rows = np.flatnonzero((j.resize_cost > 0) & (j.share > 0) & (j.share < j.max_gpus))
    if rows.size == 0:
        return rows
    kmax = ctx.curves.shape[1] - 1
    curve = ctx.curves[j.model[rows]]
    cols = np.arange(curve.shape[1])
    within = (cols > np.minimum(j.share[rows], kmax)[:, None]) & (cols <= np.minimum(j.max_gpus[rows], kmax)[:, None])
    best = np.where(within, curve, 0.0).max(axis=1) * j.speed[rows]
    with np.errstate(divide="ignore"):
        t_best = np.where(best > 0, j.remaining[rows] / np.where(best > 0, best, 1.0), np.inf)
    with np.errstate(invalid="ignore"):  # ∞ − ∞: no speed on any count, nothing to gain
        saved = ctx.remaining_time(j.share[rows], rows) - t_best
    return rows[~(saved > j.resize_cost[rows])]


def unprofitable(ctx: Context, gpus: np.ndarray) -> np.ndarray:
    """Rows that ``gpus`` grows although the growth saves no more time than the job's resize cost."""
    j = ctx.jobs
    rows = np.flatnonzero((j.resize_cost > 0) & (j.share > 0) & (gpus > j.share))
    if rows.size == 0:
        return rows
    with np.errstate(invalid="ignore"):
        saved = ctx.remaining_time(j.share[rows], rows) - ctx.remaining_time(gpus[rows], rows)
    return rows[~(saved > j.resize_cost[rows])]
