"""Tiresias-G: two-dimensional Gittins index (NSDI'19; ALGORITHMS.md §4)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from coddl.perf.curves import data_path
from coddl.policies.base import Context, Policy, greedy_fit, keyed_order
from coddl.policies.registry import PolicySpecError, register


@lru_cache(maxsize=None)
def bootstrap_samples(name: str) -> np.ndarray:
    """Job GPU-time samples (GPU-seconds) from a bundled Tiresias YARN file, e.g. yarn-gput1000.csv."""
    path = data_path(f"traces/tiresias/{name}")
    if not path.is_file():
        known = sorted(p.name for p in path.parent.glob("yarn-gput*.csv"))
        raise PolicySpecError(f"tiresias-g: bootstrap: no bundled file {name!r}; bundled: {', '.join(known) or 'none'}")
    with open(path, newline="") as f:
        return np.array([float(row["duration"]) for row in csv.DictReader(f)])


class ServiceDistribution:
    """The empirical distribution of total service S, and its Gittins index with quantum Δ:
    G(a) = P(S − a ≤ Δ | S > a) / E[min(S − a, Δ) | S > a]: the chance of finishing within the next
    Δ GPU-seconds per GPU-second spent trying. Vectorised with prefix sums of the sorted samples."""

    def __init__(self, samples: np.ndarray, delta: float) -> None:
        self.s = np.sort(np.asarray(samples, dtype=float))
        self.csum = np.concatenate([[0.0], np.cumsum(self.s)])
        self.delta = delta

    def index(self, attained: np.ndarray) -> np.ndarray:
        """G(a) per job; 0 where a exceeds every sample (nothing learned says it will end)."""
        s, c, d = self.s, self.csum, self.delta
        n = s.size
        lo = np.searchsorted(s, attained, side="right")  # first sample > a
        hi = np.searchsorted(s, attained + d, side="right")  # first sample > a + Δ
        alive = n - lo
        ending = hi - lo
        spent = (c[hi] - c[lo]) - attained * ending + d * (n - hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(alive > 0, ending / spent, 0.0)


@register
class TiresiasG(Policy):
    """Priority = Gittins index of the job's attained service (GPU-seconds) under the service
    distribution of finished jobs; the higher index runs first (ties by arrival), rigid and gang-
    scheduled with greedy backfilling, preemptive. The distribution starts from the Tiresias YARN
    samples (``bootstrap``) and learns from every finished job's attained service (``learn``),
    re-sorted every ``relearn_every`` finished jobs. Indices change as service accrues, so while
    jobs wait the policy re-plans every ``replan_s`` seconds (the Tiresias simulator's periodic
    re-evaluation); without any samples every index is equal and the order is FIFO.
    """

    name = "tiresias-g"
    elastic = False
    summary = "Tiresias-G (2D-Gittins): Gittins index of attained GPU-seconds, learned from finished jobs"

    @dataclass
    class Params:
        delta: float = 3250.0  # Gittins quantum Δ, GPU-seconds
        bootstrap: str | None = "yarn-gput1000.csv"  # bundled samples to start from (None: none)
        learn: bool = True  # add finished jobs' attained service to the distribution
        relearn_every: int = 100  # re-sort the distribution after this many new finished jobs
        replan_s: float | None = 3250.0  # re-plan period while jobs wait (None: only on events)
        backfill: bool = True

    def __init__(self, params: "TiresiasG.Params | None" = None) -> None:
        super().__init__(params)
        self._base = bootstrap_samples(self.params.bootstrap) if self.params.bootstrap else np.zeros(0)
        self._dist: ServiceDistribution | None = None
        self._learned = -1  # finished jobs in the current distribution
        self._wake: float | None = None

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        dist = self._distribution(ctx.finished_service)
        index = dist.index(j.attained) if dist is not None else np.zeros(len(j))
        order = keyed_order(j, -index)
        admitted = greedy_fit(order, j.requested, ctx.capacity, self.params.backfill)
        waiting = not admitted.all()
        self._wake = ctx.now + self.params.replan_s if waiting and self.params.replan_s else None
        return np.where(admitted, j.requested, 0)

    def wakeup(self, ctx: Context) -> float | None:
        return self._wake if self._wake is not None and self._wake > ctx.now else None

    def _distribution(self, finished: np.ndarray) -> ServiceDistribution | None:
        n = finished.size if self.params.learn else 0
        if self._dist is None or n >= self._learned + max(1, self.params.relearn_every):
            samples = np.concatenate([self._base, finished[:n]])
            self._dist = ServiceDistribution(samples, self.params.delta) if samples.size else None
            self._learned = n
        return self._dist
