"""FIFO: arrival order, rigid (r_j GPUs, gang-scheduled), running jobs keep their GPUs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, greedy_fit, lexorder
from coddl.policies.registry import register


@register
class Fifo(Policy):
    name = "fifo"
    elastic = False
    summary = "first in, first out; rigid gang scheduling, non-preemptive, optional backfilling"

    @dataclass
    class Params:
        backfill: bool = True  # skip a job that does not fit and let smaller later jobs run

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        # Ordering by (first scheduled, arrival) puts running jobs first, so they keep their GPUs.
        order = lexorder(j.first_start, j.arrival)
        admitted = greedy_fit(order, j.requested, ctx.capacity, self.params.backfill)
        return np.where(admitted, j.requested, 0)
