"""SRSF: shortest remaining service (requested GPUs × remaining time) first; rigid, preemptive."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, greedy_fit, keyed_order
from coddl.policies.registry import register


@register
class Srsf(Policy):
    """Orders jobs by r_j × T_j(r_j), the GPU-seconds they still need on their request (oracle
    lengths, as in the papers), ties by arrival; walks the order giving each job its full request
    if it fits (skipping, with ``backfill``, those that do not), so a job with less service left
    preempts one with more (ALGORITHMS.md §4)."""

    name = "srsf"
    elastic = False
    summary = "shortest remaining service (GPUs × remaining time) first; rigid, preemptive (oracle lengths)"

    @dataclass
    class Params:
        backfill: bool = True  # skip a job that does not fit and let smaller later jobs run

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        order = j.memo("srsf", lambda: keyed_order(j, j.requested * ctx.remaining_time(j.requested)))
        admitted = greedy_fit(order, j.requested, ctx.capacity, self.params.backfill)
        return np.where(admitted, j.requested, 0)
