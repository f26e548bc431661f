"""AFS-P: the length-agnostic AFS that CoDDL deploys (ALGORITHMS.md §3, reconstructed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, greedy_fit, lexorder
from coddl.policies.book import JobBook
from coddl.policies.registry import register
from coddl.policies.tournament import tournament


@register
class AfsP(Policy):
    """Needs throughput curves only, never job lengths.

    Light load (Σ min_j < GPUs): every job gets its minimum (one GPU), and the remaining GPUs go
    one at a time to the winner of a tournament in which m beats the current winner c only if m
    wins in both role assignments, loss(m) ≥ gain(c). When neither dominates the winner is decided
    by a seeded coin flip, realised as a random priority per job: the higher priority wins, and
    candidates are visited in priority order (so each flip is fair and the same two jobs get the
    same answer within one decision; ``tournament`` decides it in bulk, exactly). By default a job
    keeps its priority for life (``reshuffle``).

    Heavy load (Σ min_j ≥ GPUs): single-GPU time slices of ``slice_s`` in least-often-scheduled-first
    order (ties by first start time, then arrival); a job keeps its GPU until its slice expires,
    and the policy asks to be re-run (``wakeup``) when the next slice ends.
    """

    name = "afs-p"
    elastic = True
    summary = "AFS-P: length-agnostic AFS; dominance tournament with coin flips, time slices under heavy load"

    @dataclass
    class Params:
        slice_s: float = 7200.0  # time-slice length under heavy load (2 h)
        seed: int = 0  # mixed into the scheduler's seeded RNG for the coin flips
        # False: each job draws its coin-flip priority once, so shares of jobs neither of which
        # dominates do not flip between decisions; True: fresh flips at every decision (on the
        # Philly digest about 6× the resizes, and the placement work that goes with them)
        reshuffle: bool = False

    def __init__(self, params: "AfsP.Params | None" = None) -> None:
        super().__init__(params)
        self._rng: np.random.Generator | None = None
        # time slices granted so far, end of the slice held, lifetime priority (reshuffle off)
        self._book = JobBook(slices=0.0, slice_end=-np.inf, priority=np.nan)
        self._wake: float | None = None

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        lo = j.min_gpus
        book = self._book.lookup(j.uid)
        if int(lo.sum()) >= ctx.capacity:
            shares = self._time_slices(ctx, book)
            self._book.store(j.uid, **book)
            return shares
        self._wake = None
        prio = self._priorities(ctx, book)
        self._book.store(j.uid, **book)
        tie = np.argsort(np.argsort(prio, kind="stable"), kind="stable")
        return tournament(ctx, lo, lo, j.max_gpus, ctx.capacity - int(lo.sum()), tie, fixed=prio)

    def wakeup(self, ctx: Context) -> float | None:
        return self._wake if self._wake is not None and self._wake > ctx.now else None

    # ------------------------------------------------------------------ helpers
    def _coin_rng(self, ctx: Context) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.default_rng([int(ctx.rng.integers(2**63)), self.params.seed])
        return self._rng

    def _priorities(self, ctx: Context, book: dict[str, np.ndarray]) -> np.ndarray:
        """Each job's coin-flip priority (higher wins); the tournament visits ascending keys, so
        the key is −priority. Drawn afresh per decision, or once per job (``reshuffle`` off)."""
        rng = self._coin_rng(ctx)
        n = len(ctx.jobs)
        if self.params.reshuffle:
            return -rng.random(n)
        prio = book["priority"]
        new = np.isnan(prio)
        prio[new] = rng.random(int(new.sum()))
        return -prio

    def _time_slices(self, ctx: Context, book: dict[str, np.ndarray]) -> np.ndarray:
        """Heavy load: holders of an unexpired slice keep their GPUs; free GPUs start new slices
        for the least-often-scheduled jobs (then first start, arrival). Updates ``book``."""
        j = ctx.jobs
        slices, end = book["slices"], book["slice_end"]
        holding = (end > ctx.now) & (j.share > 0)
        free = ctx.capacity - int(j.min_gpus[holding].sum())
        waiting = np.flatnonzero(~holding)
        order = waiting[lexorder(slices[waiting], j.first_start[waiting], j.arrival[waiting], j.uid[waiting])]
        got = greedy_fit(order, j.min_gpus, free)
        slices[got] += 1
        end[got] = ctx.now + self.params.slice_s
        run = holding | got
        self._wake = float(end[run].min()) if run.any() else None
        return np.where(run, j.min_gpus, 0)
