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

    A job starts in the top queue and is demoted once its service reaches its queue's threshold;
    the policy asks to be re-run (``wakeup``) at the exact moment a running job will cross it.
    Jobs are served queue by queue, FIFO inside a queue, rigid and gang-scheduled with greedy
    backfilling, so a job in a higher queue preempts lower ones.

    ``keep_demotion``: a demoted job stays demoted (the paper), or — False, as the CoDDL authors'
    simulator ran it — returns to the top queue whenever it is given GPUs again, so with
    ``service="since-start"`` a job is demoted only while it has run ``threshold`` GPU-seconds
    without a break, and a job preempted while demoted waits in the low queue.

    Starvation knob: a demoted job that has waited ≥ knob × the time it ran since it was last
    promoted goes back to the top queue. ``starvation_wait="accumulated"`` counts every wait since
    that promotion (the Tiresias simulator's ``last_pending_time``; waits before the job first ran
    after the promotion do not count); ``"current"`` only the wait in progress. A job that is
    preempted while its accumulated wait already meets the knob is promoted in the same decision
    (and so keeps running): waiting for the next unrelated event, as an event-driven loop that
    only schedules future promotions would, can leave a starved job waiting for a whole job length.

    ``service="attained"`` counts all GPU-seconds received (since the last promotion), as in the
    paper; ``"since-start"`` counts those received since the job was last (re)scheduled, as the
    CoDDL authors' simulator did. ``queue_order="arrival"`` is FIFO by arrival; ``"first-start"``
    orders by first start time, then arrival (the CoDDL simulator). Remaining ties keep
    submission order.
    """

    name = "tiresias-l"
    elastic = False
    summary = "Tiresias-L (2D-LAS): multi-level queues on attained GPU-seconds, rigid, preemptive"
    presets = {
        "paper": {"thresholds": (3600.0,), "knob": 8.0, "service": "attained", "queue_order": "arrival",
                  "starvation_wait": "accumulated", "keep_demotion": True},
        "tiresias-sim": {"thresholds": (3250.0, 7200.0), "knob": None, "service": "attained",
                         "queue_order": "arrival", "keep_demotion": True},
        "coddl": {"thresholds": (50 * 3600.0,), "knob": None, "service": "since-start",
                  "queue_order": "first-start", "keep_demotion": False},
    }

    @dataclass
    class Params:
        thresholds: tuple[float, ...] = (3600.0,)  # GPU-seconds; K−1 thresholds make K queues
        knob: float | None = 8.0  # starvation knob (None: off)
        service: str = "attained"  # "attained" | "since-start"
        queue_order: str = "arrival"  # "arrival" | "first-start"
        starvation_wait: str = "accumulated"  # "accumulated" (Tiresias simulator) | "current"
        keep_demotion: bool = True  # False: demotion cleared whenever the job is given GPUs again
        backfill: bool = True

    def __init__(self, params: "TiresiasL.Params | None" = None) -> None:
        super().__init__(params)
        p = self.params
        for name, valid in (("service", ("attained", "since-start")), ("queue_order", ("arrival", "first-start")),
                            ("starvation_wait", ("accumulated", "current"))):
            if getattr(p, name) not in valid:
                raise PolicySpecError(f"tiresias-l: {name} must be {' or '.join(map(repr, valid))}, "
                                      f"got {getattr(p, name)!r}")
        self._thr = np.asarray(sorted(p.thresholds), dtype=float)
        # queue reached (0 = top), attained service at the last promotion, when it last stopped
        # running, and the waits since the last promotion that have ended (accumulated mode)
        self._book = JobBook(queue=0.0, base=0.0, waiting_since=0.0, waited=0.0)
        self._wake: float | None = None

    def allocate(self, ctx: Context) -> np.ndarray:
        j = ctx.jobs
        now = ctx.now
        p = self.params
        book = self._book.lookup(j.uid, waiting_since=j.arrival)
        queue, base, since, waited = book["queue"].astype(np.int64), book["base"], book["waiting_since"], book["waited"]
        running = j.share > 0

        def promote(mask: np.ndarray) -> None:
            queue[mask] = 0
            base[mask] = j.attained[mask]
            waited[mask] = 0.0

        if p.knob is not None:  # promotion of starved jobs back to the top queue
            ran = (j.attained - base) / j.requested  # time run since the last promotion
            promote(~running & (queue > 0) & (ran > 0) & (self._waited(now, since, waited, ran) >= p.knob * ran))
        metric = self._metric(ctx, base)
        queue = np.maximum(queue, self._crossed(metric))
        within = j.first_start if p.queue_order == "first-start" else j.arrival
        admitted = greedy_fit(lexorder(queue, within, j.arrival, j.uid), j.requested, ctx.capacity, p.backfill)
        while p.knob is not None:  # a job preempted while already starved goes back to the top at once
            ran = (j.attained - base) / j.requested
            counted = 0.0 if p.starvation_wait == "current" else waited  # its current wait is 0
            bounced = running & ~admitted & (queue > 0) & (ran > 0) & (counted >= p.knob * ran)
            if not bounced.any():
                break
            promote(bounced)
            admitted = greedy_fit(lexorder(queue, within, j.arrival, j.uid), j.requested, ctx.capacity, p.backfill)
        if p.knob is not None and p.starvation_wait == "accumulated":
            resumed = admitted & ~running & ((j.attained - base) > 0)
            waited = np.where(resumed, waited + (now - since), waited)  # the wait that just ended
        since = np.where(running & ~admitted, now, since)
        stored = queue if p.keep_demotion else np.where(admitted, 0, queue)
        self._book.store(j.uid, queue=stored, base=base, waiting_since=since, waited=waited)
        self._wake = self._next_event(ctx, queue, base, since, waited, running, admitted, self._metric(ctx, base))
        return np.where(admitted, j.requested, 0)

    def wakeup(self, ctx: Context) -> float | None:
        return self._wake if self._wake is not None and self._wake > ctx.now else None

    def _waited(self, now: float, since: np.ndarray, waited: np.ndarray, ran: np.ndarray) -> np.ndarray:
        """How long each (waiting) job counts as having waited for the starvation knob."""
        current = now - since
        if self.params.starvation_wait == "current":
            return current
        return waited + np.where(ran > 0, current, 0.0)

    def _crossed(self, metric: np.ndarray) -> np.ndarray:
        """The queue each service reaches: how many thresholds it has crossed."""
        return np.searchsorted(self._thr, metric + np.maximum(_EPS_ABS, _EPS_REL * metric), side="right")

    def _metric(self, ctx: Context, base: np.ndarray) -> np.ndarray:
        if self.params.service == "since-start":
            return ctx.jobs.service_since_start
        return ctx.jobs.attained - base

    def _next_event(self, ctx: Context, queue: np.ndarray, base: np.ndarray, since: np.ndarray,
                    waited: np.ndarray, running: np.ndarray, admitted: np.ndarray,
                    metric: np.ndarray) -> float | None:
        """The next demotion of a job we run, or promotion of one we leave waiting."""
        j = ctx.jobs
        p = self.params
        times = []
        # a job (re)started now counts its service since start from 0 from this moment, and one
        # whose demotion is cleared starts again from the top queue, then crosses what its service
        # reaches (service since the last promotion is not reset by a restart)
        restart = ~running & (p.service == "since-start")
        m = np.where(restart, 0.0, metric)
        level = queue if p.keep_demotion else np.where(running, queue, self._crossed(m))
        demotable = admitted & (level < self._thr.size)
        if demotable.any():
            times.append(ctx.now + (self._thr[level[demotable]] - m[demotable]) / j.requested[demotable])
        if p.knob is not None:
            ran = (j.attained - base) / j.requested
            wait = ~admitted & (queue > 0) & (ran > 0)
            if wait.any():
                counted = 0.0 if p.starvation_wait == "current" else waited
                times.append((since + p.knob * ran - counted)[wait])
        if not times:
            return None
        t = np.concatenate(times)
        t = t[t > ctx.now]
        return float(t.min()) if t.size else None
