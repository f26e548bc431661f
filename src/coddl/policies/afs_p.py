"""AFS-P: the length-agnostic AFS that CoDDL deploys (ALGORITHMS.md §3, reconstructed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, greedy_fit, lexorder
from coddl.policies.book import JobBook
from coddl.policies.registry import PolicySpecError, register
from coddl.policies.tournament import tournament

COINS = ("per-job", "per-decision", "per-contest")
SLICES = ("heavy", "always")


@register
class AfsP(Policy):
    """Needs throughput curves only, never job lengths.

    Light load (Σ min_j < GPUs): every job gets its minimum (one GPU), and the remaining GPUs go
    one at a time to the winner of a tournament in which m beats the current winner c only if m
    wins in both role assignments, loss(m) ≥ gain(c). When neither dominates the winner is decided
    by a seeded coin flip (``coin``):

    * ``"per-job"`` (default): a random priority drawn once per job — the higher priority wins and
      candidates are visited in priority order, so each flip is fair, the same two jobs get the
      same answer for life and shares do not flip between decisions (``tournament`` decides it in
      bulk, exactly);
    * ``"per-decision"``: the priorities are drawn afresh at every decision (on the Philly digest
      about 6× the resizes, and the placement work that goes with them);
    * ``"per-contest"``: a fresh fair coin in every comparison — the CoDDL authors' simulator
      (``random.choice`` per contest). Candidates are visited in its job list's order, which its
      time-slice code sorts in place by (slices, first start, arrival) at every light-load
      decision, so that is the order here too.

    Heavy load (Σ min_j ≥ GPUs): single-GPU time slices of ``slice_s`` in least-often-scheduled-first
    order (ties by first start time, then arrival); a job keeps its GPUs until its slice expires,
    and the policy asks to be re-run (``wakeup``) when the next slice ends. ``slices``:

    * ``"heavy"`` (default): slices exist under heavy load only; a slice is counted when granted,
      and a job that held more than its minimum when the load turned heavy keeps its minimum;
    * ``"always"``: every allocation lasts a slice, as in the CoDDL authors' simulator — under light
      load the allocation is re-decided when the slice expires (nothing else need happen), a job
      keeps its whole share until its slice expires when the load turns heavy, and a slice is
      counted when it expires at a heavy-load decision.
    """

    name = "afs-p"
    elastic = True
    summary = "AFS-P: length-agnostic AFS; dominance tournament with coin flips, time slices under heavy load"
    presets = {"coddl": {"coin": "per-contest", "slices": "always"}}

    @dataclass
    class Params:
        slice_s: float = 7200.0  # time-slice length under heavy load (2 h)
        seed: int = 0  # mixed into the scheduler's seeded RNG for the coin flips
        coin: str = "per-job"  # "per-job" | "per-decision" | "per-contest" (CoDDL authors)
        slices: str = "heavy"  # "heavy" | "always" (CoDDL authors)

    def __init__(self, params: "AfsP.Params | None" = None) -> None:
        super().__init__(params)
        p = self.params
        for name, valid in (("coin", COINS), ("slices", SLICES)):
            if getattr(p, name) not in valid:
                raise PolicySpecError(f"afs-p: {name} must be one of {', '.join(valid)}, got {getattr(p, name)!r}")
        if not p.slice_s > 0:
            raise PolicySpecError(f"afs-p: slice_s must be positive, got {p.slice_s}")
        self._rng: np.random.Generator | None = None
        # slices counted so far, end of the slice held, lifetime priority (coin="per-job")
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
        shares = self._light(ctx, book)
        if self.params.slices == "always":
            book["slice_end"] = np.where(shares > 0, ctx.now + self.params.slice_s, book["slice_end"])
            self._wake = ctx.now + self.params.slice_s
        else:
            self._wake = None
        self._book.store(j.uid, **book)
        return shares

    def wakeup(self, ctx: Context) -> float | None:
        return self._wake if self._wake is not None and self._wake > ctx.now else None

    # ------------------------------------------------------------------ helpers
    def _coin_rng(self, ctx: Context) -> np.random.Generator:
        if self._rng is None:
            self._rng = np.random.default_rng([int(ctx.rng.integers(2**63)), self.params.seed])
        return self._rng

    def _light(self, ctx: Context, book: dict[str, np.ndarray]) -> np.ndarray:
        """Everyone at its minimum, the rest by the dominance tournament and the coin."""
        j = ctx.jobs
        lo = j.min_gpus
        budget = ctx.capacity - int(lo.sum())
        if self.params.coin == "per-contest":
            n = len(j)
            tie = np.empty(n, dtype=np.int64)
            tie[lexorder(book["slices"], j.first_start, j.arrival, j.uid)] = np.arange(n)
            seed = int(self._coin_rng(ctx).integers(2**31))
            return tournament(ctx, lo, lo, j.max_gpus, budget, tie, fixed=np.zeros(n), rule="coin", seed=seed)
        prio = self._priorities(ctx, book)
        tie = np.argsort(np.argsort(prio, kind="stable"), kind="stable")
        return tournament(ctx, lo, lo, j.max_gpus, budget, tie, fixed=prio)

    def _priorities(self, ctx: Context, book: dict[str, np.ndarray]) -> np.ndarray:
        """Each job's coin-flip priority (higher wins); the tournament visits ascending keys, so
        the key is −priority. Drawn afresh per decision, or once per job (``coin="per-job"``)."""
        rng = self._coin_rng(ctx)
        n = len(ctx.jobs)
        if self.params.coin == "per-decision":
            return -rng.random(n)
        prio = book["priority"]
        new = np.isnan(prio)
        prio[new] = rng.random(int(new.sum()))
        return -prio

    def _time_slices(self, ctx: Context, book: dict[str, np.ndarray]) -> np.ndarray:
        """Heavy load: holders of an unexpired slice keep their GPUs; free GPUs start new slices
        for the least-often-scheduled jobs (then first start, arrival). Updates ``book``."""
        j = ctx.jobs
        always = self.params.slices == "always"
        slices, end = book["slices"], book["slice_end"]
        running = j.share > 0
        holding = (end > ctx.now) & running
        if always:
            slices[running & ~holding] += 1  # a slice served to its end
        keep = np.where(holding, j.share if always else j.min_gpus, 0)
        free = ctx.capacity - int(keep.sum())
        waiting = np.flatnonzero(~holding)
        order = waiting[lexorder(slices[waiting], j.first_start[waiting], j.arrival[waiting], j.uid[waiting])]
        got = greedy_fit(order, j.min_gpus, free)
        if not always:
            slices[got] += 1
        end[got] = ctx.now + self.params.slice_s
        run = holding | got
        self._wake = float(end[run].min()) if run.any() else None
        return np.where(got, j.min_gpus, keep)
