"""SRTF: shortest remaining time (on the requested GPUs) first; rigid, preemptive, oracle lengths."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, greedy_fit, keyed_order
from coddl.policies.registry import register


@register
class Srtf(Policy):
    name = "srtf"
    elastic = False
    summary = "shortest remaining time first on the requested GPUs; rigid, preemptive (oracle lengths)"

    @dataclass
    class Params:
        backfill: bool = True

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        order = j.memo("srtf", lambda: keyed_order(j, ctx.remaining_time(j.requested)))
        admitted = greedy_fit(order, j.requested, ctx.capacity, self.params.backfill)
        return np.where(admitted, j.requested, 0)
