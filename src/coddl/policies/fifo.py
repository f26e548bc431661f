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
        # The order is (first scheduled, arrival): jobs that ever ran come first and, as FIFO never
        # preempts, they are exactly the running ones and keep their GPUs. Only the queue is sorted,
        # and not even that when the cluster is full (most events under a backlog).
        running = j.share > 0
        free = ctx.capacity - int(j.requested[running].sum())
        queued = np.flatnonzero(~running)
        if free <= 0 or queued.size == 0:
            return np.where(running, j.requested, 0)
        order = queued[lexorder(j.arrival[queued], j.uid[queued])]  # same second: submission order
        admitted = greedy_fit(order, j.requested, free, self.params.backfill)
        return np.where(running | admitted, j.requested, 0)
