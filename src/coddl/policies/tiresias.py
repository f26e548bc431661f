"""Tiresias-L: two-dimensional least attained service (NSDI'19; ALGORITHMS.md §4)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, greedy_fit, lexorder
from coddl.policies.book import JobBook
from coddl.policies.registry import PolicySpecError, register

# A job whose service is within this of a threshold has crossed it: the wakeup that demotes it
# is computed as now + (threshold − service) / GPUs, and floating point may land just short.
_EPS_ABS, _EPS_REL = 1e-6, 1e-9


@register
class TiresiasL(Policy):
    """Discretised 2D-LAS: K queues split by thresholds on service in GPU-seconds.

    A job starts in the top queue and is demoted once its service reaches its queue's threshold
    (and stays demoted); the policy asks to be re-run (``wakeup``) at the exact moment a running
    job will cross it. Jobs are served queue by queue, FIFO inside a queue, rigid and gang-
    scheduled with greedy backfilling, so a job in a higher queue preempts lower ones. Starvation
    knob: a demoted job that has waited ≥ knob × the time it ran (since it was last promoted) goes
    back to the top queue.

    ``service="attained"`` counts all GPU-seconds received (since the last promotion), as in the
    paper; ``"since-start"`` counts those received since the job was last (re)scheduled, as the
    CoDDL authors' simulator did. ``queue_order="arrival"`` is FIFO by arrival; ``"first-start"``
    orders by first start time, then arrival (the CoDDL simulator).
    """

    name = "tiresias-l"
    elastic = False
    summary = "Tiresias-L (2D-LAS): multi-level queues on attained GPU-seconds, rigid, preemptive"
    presets = {
        "paper": {"thresholds": (3600.0,), "knob": 8.0, "service": "attained", "queue_order": "arrival"},
        "tiresias-sim": {"thresholds": (3250.0, 7200.0), "knob": None, "service": "attained",
                         "queue_order": "arrival"},
        "coddl": {"thresholds": (50 * 3600.0,), "knob": None, "service": "since-start",
                  "queue_order": "first-start"},
    }

    @dataclass
    class Params:
        thresholds: tuple[float, ...] = (3600.0,)  # GPU-seconds; K−1 thresholds make K queues
        knob: float | None = 8.0  # starvation knob (None: off)
        service: str = "attained"  # "attained" | "since-start"
        queue_order: str = "arrival"  # "arrival" | "first-start"
        backfill: bool = True

    def __init__(self, params: "TiresiasL.Params | None" = None) -> None:
        super().__init__(params)
        p = self.params
        if p.service not in ("attained", "since-start"):
            raise PolicySpecError(f"tiresias-l: service must be 'attained' or 'since-start', got {p.service!r}")
        if p.queue_order not in ("arrival", "first-start"):
            raise PolicySpecError(f"tiresias-l: queue_order must be 'arrival' or 'first-start', got {p.queue_order!r}")
        self._thr = np.asarray(sorted(p.thresholds), dtype=float)
        # queue reached (0 = top), attained service at the last promotion, when it last stopped running
        self._book = JobBook(queue=0.0, base=0.0, waiting_since=0.0)
        self._wake: float | None = None

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        now = ctx.now
        book = self._book.lookup(j.uid, waiting_since=j.arrival)
        queue, base, since = book["queue"].astype(np.int64), book["base"], book["waiting_since"]
        running = j.share > 0
        if self.params.knob is not None:  # promotion of starved jobs back to the top queue
            ran = (j.attained - base) / j.requested
            starved = ~running & (queue > 0) & (ran > 0) & (now - since >= self.params.knob * ran)
            queue[starved] = 0
            base[starved] = j.attained[starved]
        metric = self._metric(ctx, base)
        crossed = np.searchsorted(self._thr, metric + np.maximum(_EPS_ABS, _EPS_REL * metric), side="right")
        queue = np.maximum(queue, crossed)
        within = j.first_start if self.params.queue_order == "first-start" else j.arrival
        order = lexorder(queue, within, j.arrival, j.uid)
        admitted = greedy_fit(order, j.requested, ctx.capacity, self.params.backfill)
        self._book.store(j.uid, queue=queue, base=base, waiting_since=np.where(running & ~admitted, now, since))
        self._wake = self._next_event(ctx, queue, base, since, running, admitted, metric)
        return np.where(admitted, j.requested, 0)

    def wakeup(self, ctx: Context) -> float | None:
        return self._wake if self._wake is not None and self._wake > ctx.now else None

    def _metric(self, ctx: Context, base: np.ndarray) -> np.ndarray:
        if self.params.service == "since-start":
            return ctx.jobs.service_since_start
        return ctx.jobs.attained - base

    def _next_event(self, ctx: Context, queue: np.ndarray, base: np.ndarray, since: np.ndarray,
                    running: np.ndarray, admitted: np.ndarray, metric: np.ndarray) -> float | None:
        """The next demotion of a job we run, or promotion of one we leave waiting."""
        j = ctx.jobs
        times = []
        demotable = admitted & (queue < self._thr.size)
        if demotable.any():
            # a job (re)started now counts its service since start from 0 from this moment
            m = np.where(~running & (self.params.service == "since-start"), 0.0, metric)[demotable]
            times.append(ctx.now + (self._thr[queue[demotable]] - m) / j.requested[demotable])
        if self.params.knob is not None:
            ran = (j.attained - base) / j.requested
            wait = ~admitted & (queue > 0) & (ran > 0)
            if wait.any():
                was_running = running & ~admitted
                start = np.where(was_running, ctx.now, since)
                times.append((start + self.params.knob * ran)[wait])
        if not times:
            return None
        t = np.concatenate(times)
        t = t[t > ctx.now]
        return float(t.min()) if t.size else None
