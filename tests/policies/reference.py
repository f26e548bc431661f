"""Slow, obviously-correct transcriptions of ALGORITHMS.md §3–§4, one decision at a time, in plain
Python over plain lists — the policies in ``coddl.policies`` must decide exactly the same.

Each reference reads the same context a policy gets and keeps its own bookkeeping (queues, slices)
between decisions, so ``test_reference_equivalence`` can run a reference in lockstep with the
policy through a whole simulation: arrivals mid-run, partial progress, preemption, slice ends.
Ties everywhere go by arrival, then submission order (uid), as §4 says.
"""

from __future__ import annotations

import math

import numpy as np

from coddl.policies.base import Context


class Jobs:
    """The context's jobs as Python lists, with P_j(k) and T_j(k)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        j = ctx.jobs
        self.n = len(j)
        self.uid = j.uid.tolist()
        self.arrival = j.arrival.tolist()
        self.req = j.requested.tolist()
        self.lo, self.hi = j.min_gpus.tolist(), j.max_gpus.tolist()
        self.share = j.share.tolist()
        self.first_start = [math.inf if math.isnan(x) else x for x in j.first_start.tolist()]
        self.remaining = j.remaining.tolist()
        self.attained = j.attained.tolist()
        self.since_start = j.service_since_start.tolist()

    def p(self, r: int, k: int) -> float:
        return float(self.ctx.throughput(np.array([k]), np.array([r]))[0])

    def t(self, r: int, k: int) -> float:
        p = self.p(r, k)
        return self.remaining[r] / p if p > 0 else math.inf


def walk(order: list[int], demand: list[int], free: int, backfill: bool = True) -> list[bool]:
    """Give each job in ``order`` its full demand if it fits; otherwise skip it (backfill) or stop."""
    got = [False] * len(demand)
    for r in order:
        if demand[r] <= free:
            got[r] = True
            free -= demand[r]
        elif not backfill:
            break
    return got


def rigid(jobs: Jobs, got: list[bool]) -> list[int]:
    return [jobs.req[r] if got[r] else 0 for r in range(jobs.n)]


def fifo(ctx: Context, backfill: bool = True) -> list[int]:
    """§4 FIFO as the CoDDL simulator ran it: order by (first scheduled, arrival); running jobs
    keep their GPUs (never preempted)."""
    jb = Jobs(ctx)
    order = sorted(range(jb.n), key=lambda r: (jb.first_start[r], jb.arrival[r], jb.uid[r]))
    running = [r for r in order if jb.share[r] > 0]
    free = ctx.capacity - sum(jb.req[r] for r in running)
    got = walk([r for r in order if jb.share[r] == 0], jb.req, free, backfill)
    for r in running:
        got[r] = True
    return rigid(jb, got)


def srtf(ctx: Context, backfill: bool = True) -> list[int]:
    """§4 SRTF: shortest remaining time on the requested GPUs first, preemptive."""
    jb = Jobs(ctx)
    order = sorted(range(jb.n), key=lambda r: (jb.t(r, jb.req[r]), jb.arrival[r], jb.uid[r]))
    return rigid(jb, walk(order, jb.req, ctx.capacity, backfill))


def srsf(ctx: Context, backfill: bool = True) -> list[int]:
    """§4 SRSF: shortest remaining service, requested GPUs × remaining time, first."""
    jb = Jobs(ctx)
    order = sorted(range(jb.n), key=lambda r: (jb.req[r] * jb.t(r, jb.req[r]), jb.arrival[r], jb.uid[r]))
    return rigid(jb, walk(order, jb.req, ctx.capacity, backfill))


def max_min(ctx: Context) -> list[int]:
    """§4 max-min (water-filling): jobs in (first scheduled, arrival) order get their minimum while it
    fits; then each further GPU goes to the admitted job holding the FEWEST (ties in that order),
    up to each job's maximum — equal GPUs per job where the bounds allow."""
    jb = Jobs(ctx)
    order = sorted(range(jb.n), key=lambda r: (jb.first_start[r], jb.arrival[r], jb.uid[r]))
    got = walk(order, jb.lo, ctx.capacity)
    s = [jb.lo[r] if got[r] else 0 for r in range(jb.n)]
    free = ctx.capacity - sum(s)
    while free > 0:
        cands = [r for r in order if got[r] and s[r] < jb.hi[r]]
        if not cands:
            break
        r = min(cands, key=lambda r: s[r])  # min() keeps the first of equals: the order decides ties
        s[r] += 1
        free -= 1
    return s


def optimus(ctx: Context, start: str = "zero") -> list[int]:
    """§4 Optimus as the CoDDL simulator ran it: from 0 GPUs, one GPU at a time to the job with the
    largest T(k) − T(k+1). T(0) = ∞, so every job gets its first GPUs (its minimum), in
    (first scheduled, arrival) order while they fit, before any job gets one more; then the rest
    go one at a time by that decrease, ties to the first in that order, until GPUs run out.
    ``start="request"``: §4's other start — every job at its request r_j, brought into its elastic
    range [min_j, max_j], admitted in the same order while it fits; then the same rounds."""
    jb = Jobs(ctx)
    order = sorted(range(jb.n), key=lambda r: (jb.first_start[r], jb.arrival[r], jb.uid[r]))
    if start == "request":
        first = [min(max(jb.req[r], jb.lo[r]), max(jb.hi[r], jb.lo[r])) for r in range(jb.n)]
    else:
        first = jb.lo
    got = walk(order, first, ctx.capacity)
    s = [first[r] if got[r] else 0 for r in range(jb.n)]
    free = ctx.capacity - sum(s)
    while free > 0:
        best, gain = None, -math.inf
        for r in order:
            if got[r] and s[r] < jb.hi[r]:
                g = jb.t(r, s[r]) - jb.t(r, s[r] + 1)
                if g > gain:
                    best, gain = r, g
        if best is None:
            break
        s[best] += 1
        free -= 1
    return s


class TiresiasL:
    """§4 Tiresias-L: K queues split by thresholds on service; FIFO inside a queue; a job is demoted
    when its service crosses its queue's threshold; with the knob, a demoted job that has waited
    ≥ knob × the time it ran (GPU-seconds ÷ its GPUs, since its last promotion) goes back to the top
    queue — the wait counted since it last stopped running (``waits="current"``) or, as the Tiresias
    simulator's ``last_pending_time``, every wait since the last promotion once it has run since
    then (``"accumulated"``); a running job preempted while its earlier waits already meet the
    knob is promoted in the same decision. ``service="attained"``: all service since the last promotion;
    ``"since-start"``: service since the job was last (re)scheduled; ``clear=True`` — the CoDDL
    simulator's rule — the demotion is cleared whenever the job is given GPUs again."""

    def __init__(self, thresholds: tuple[float, ...], knob: float | None, service: str = "attained",
                 queue_order: str = "arrival", waits: str = "accumulated", clear: bool = False,
                 backfill: bool = True) -> None:
        self.thr = sorted(thresholds)
        self.knob = knob
        self.service = service
        self.queue_order = queue_order
        self.waits = waits
        self.clear = clear
        self.backfill = backfill
        self.state: dict[int, tuple[int, float, float, float]] = {}  # uid → queue, base, waiting since, waited

    def decide(self, ctx: Context) -> list[int]:
        jb = Jobs(ctx)
        now = ctx.now
        queue, base, since, waited = [], [], [], []
        for r in range(jb.n):
            q, b, w, acc = self.state.get(jb.uid[r], (0, 0.0, jb.arrival[r], 0.0))
            running = jb.share[r] > 0
            if self.knob is not None and not running and q > 0:
                ran = (jb.attained[r] - b) / jb.req[r]
                wait = now - w if self.waits == "current" else acc + (now - w if ran > 0 else 0.0)
                if ran > 0 and wait >= self.knob * ran:
                    q, b, acc = 0, jb.attained[r], 0.0
            served = jb.since_start[r] if self.service == "since-start" else jb.attained[r] - b
            crossed = sum(1 for x in self.thr if served >= x * (1 - 1e-9) - 1e-6)
            q = max(q, crossed)
            queue.append(q)
            base.append(b)
            since.append(w)
            waited.append(acc)
        within = jb.first_start if self.queue_order == "first-start" else jb.arrival
        while True:
            order = sorted(range(jb.n), key=lambda r: (queue[r], within[r], jb.arrival[r], jb.uid[r]))
            got = walk(order, jb.req, ctx.capacity, self.backfill)
            # a running job preempted now whose earlier waits already meet the knob is promoted now
            bounced = [r for r in range(jb.n) if self.knob is not None and jb.share[r] > 0 and not got[r]
                       and queue[r] > 0 and jb.attained[r] > base[r]
                       and (0.0 if self.waits == "current" else waited[r]) >= self.knob * (jb.attained[r] - base[r]) / jb.req[r]]
            if not bounced:
                break
            for r in bounced:
                queue[r], base[r], waited[r] = 0, jb.attained[r], 0.0
        for r in range(jb.n):
            q = queue[r]
            resumed = got[r] and jb.share[r] == 0
            if self.clear and resumed:
                q = 0  # given GPUs again: the demotion is cleared
            acc = waited[r]
            if resumed and jb.attained[r] - base[r] > 0:
                acc += now - since[r]  # a wait since the last promotion has ended
            w = now if (jb.share[r] > 0 and not got[r]) else since[r]
            self.state[jb.uid[r]] = (q, base[r], w, acc)
        return rigid(jb, got)


class AfsPSlices:
    """§3 AFS-P under heavy load (Σ min ≥ GPUs): single-GPU (minimum-size) time slices of
    ``slice_s``; a job keeps its share until its slice expires; free GPUs go in least-often-
    scheduled-first order, ties by first start time, then arrival. ``wake`` is the FIRST moment a
    slice held now ends (when the policy must run again)."""

    def __init__(self, slice_s: float) -> None:
        self.slice_s = slice_s
        self.slices: dict[int, int] = {}
        self.end: dict[int, float] = {}
        self.wake: float | None = None

    def decide(self, ctx: Context) -> list[int]:
        jb = Jobs(ctx)
        now = ctx.now
        holding = [jb.share[r] > 0 and self.end.get(jb.uid[r], -math.inf) > now for r in range(jb.n)]
        free = ctx.capacity - sum(jb.lo[r] for r in range(jb.n) if holding[r])
        waiting = [r for r in range(jb.n) if not holding[r]]
        waiting.sort(key=lambda r: (self.slices.get(jb.uid[r], 0), jb.first_start[r], jb.arrival[r], jb.uid[r]))
        got = walk(waiting, jb.lo, free)
        for r in range(jb.n):
            if got[r]:
                self.slices[jb.uid[r]] = self.slices.get(jb.uid[r], 0) + 1
                self.end[jb.uid[r]] = now + self.slice_s
        run = [holding[r] or got[r] for r in range(jb.n)]
        ends = [self.end[jb.uid[r]] for r in range(jb.n) if run[r]]
        self.wake = min(ends) if ends else None
        return [jb.lo[r] if run[r] else 0 for r in range(jb.n)]
