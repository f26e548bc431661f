"""AFS-L: Apathetic Future Share, length-aware (ALGORITHMS.md §2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy
from coddl.policies.registry import register
from coddl.policies.tournament import tournament


@register
class AfsL(Policy):
    """Every GPU goes, one at a time, to the winner of §2's pairwise tournament.

    The tournament visits candidates shortest first — by T_j(s_j), jobs still at 0 GPUs last by
    T_j(min_j), then by uid — which is the order in which §2's rule reads as "a longer job takes the
    GPU only if it loses more than the shorter one gains" (see ``tournament``). Every job starts
    from 0 GPUs, as in the CoDDL authors' simulator; so jobs get their minimum in order of T(min)
    while GPUs last, and when jobs outnumber GPUs the ones with the smallest T(1) run. It uses the
    true remaining work (oracle lengths), like SRTF.
    """

    name = "afs-l"
    elastic = True
    summary = "AFS-L: GPU-by-GPU pairwise tournament on sum of JCTs, shortest job first (oracle lengths)"

    @dataclass
    class Params:
        pass

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        n = len(j)
        lo, hi = j.min_gpus, j.max_gpus
        tie = np.empty(n, dtype=np.int64)
        tie[np.lexsort((j.uid, ctx.remaining_time(lo)))] = np.arange(n)
        return tournament(ctx, np.zeros(n, dtype=np.int64), lo, hi, ctx.capacity, tie, work=j.remaining)
