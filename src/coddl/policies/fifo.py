"""FIFO: arrival order, rigid (r_j GPUs, gang-scheduled), running jobs keep their GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.jit import njit
from coddl.policies.base import Context, Policy, arrival_order
from coddl.policies.registry import register


@register
class Fifo(Policy):
    name = "fifo"
    elastic = False
    holds_running = True
    summary = "first in, first out; rigid gang scheduling, non-preemptive, optional backfilling"

    @dataclass
    class Params:
        backfill: bool = True  # skip a job that does not fit and let smaller later jobs run

    def allocate(self, ctx: Context) -> np.ndarray:
        # The order is (first scheduled, arrival): jobs that ever ran come first and, as FIFO never
        # preempts, they are exactly the running ones and keep their GPUs; the queue follows in
        # (arrival, submission) order, which the job table keeps without sorting.
        j = ctx.jobs
        return _fifo(arrival_order(j), j.share, j.requested, ctx.capacity, self.params.backfill)


@njit()
def _fifo(order: np.ndarray, share: np.ndarray, requested: np.ndarray, capacity: int, backfill: bool) -> np.ndarray:
    out = np.zeros(share.size, dtype=np.int64)
    free = capacity
    for r in range(share.size):
        if share[r] > 0:
            out[r] = requested[r]
            free -= requested[r]
    for r in order:
        if free <= 0:
            break
        if share[r] > 0:
            continue
        if requested[r] <= free:
            out[r] = requested[r]
            free -= requested[r]
        elif not backfill:
            break
    return out
