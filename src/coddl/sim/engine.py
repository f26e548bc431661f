"""Discrete-event engine: arrivals, exits and policy timers drive ``Scheduler.step``.

Only the loop lives here. Events at the same instant are applied together and the policy runs
once for them, and only if something changed; the executor (``sim/executor.py``) carries plans out
in virtual time and reports exits, the recorder (``sim/recorder.py``) keeps what the metrics need,
and ``sim/invariants.py`` checks the run when asked.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from coddl.core.job import JobSpec
from coddl.policies.base import Policy
from coddl.scheduler import Scheduler
from coddl.sim.executor import RateModel, SimExecutor, WorkAudit
from coddl.sim.invariants import InvariantViolation, check_final, check_step
from coddl.sim.reconfig import ReconfigCost
from coddl.sim.recorder import Recorder, SimResult

# the checks under their earlier names, which tests import from here
_check_invariants, _check_final = check_step, check_final
__all__ = ["InvariantViolation", "SimResult", "simulate"]


def simulate(specs: list[JobSpec], scheduler: Scheduler, reconfig: ReconfigCost | None = None, *,
             rate_model: RateModel | None = None, check: bool = False, record_timeline: bool = True,
             progress: Callable[[int], None] | None = None, sample_noise: float | None = None,
             seed: int = 0, charge_restarts: bool = False) -> SimResult:
    """Replay ``specs`` through ``scheduler`` until every job has finished.

    ``check`` verifies the invariants at every step (no GPU over-allocated or shared, every job
    finishes once and after its arrival, ∫ rate dt equals each job's work); it costs time, so the
    tests turn it on and the CLI does not. ``progress`` is called with the number of finished jobs,
    about every half per cent of them. ``sample_noise`` (None: off) makes the executor report
    throughput samples for online predictors. ``charge_restarts`` tells the scheduler each job's
    resize cost under ``reconfig`` (non-zero only for ``restart``), so that a job is grown only
    when the growth saves more than its restart costs (``coddl.policies.restarts``); off, every
    policy resizes as if it were free, as the reproductions assume.
    """
    wall = time.perf_counter()
    audit = WorkAudit() if check else None
    ex = SimExecutor(scheduler, reconfig or ReconfigCost(), rate_model, audit, sample_noise, seed)
    res = SimResult(policy=scheduler.policy.name, records=scheduler.records, capacity=scheduler.cluster.total_gpus,
                    cpu_capacity=scheduler.cluster.total_cpus, audit=audit)
    recorder = Recorder(scheduler, res, record_timeline)
    arrivals = sorted(specs, key=lambda s: s.arrival)
    times = [s.arrival for s in arrivals]
    wants_timer = type(scheduler.policy).wakeup is not Policy.wakeup
    timer_at = np.inf  # the policy's next wake-up; a later request never replaces an earlier one
    records = scheduler.records
    tick = max(1, len(specs) // 200)  # progress granularity
    reported = 0
    i, n = 0, len(arrivals)
    events = 0
    while True:
        now = min(times[i] if i < n else np.inf, ex.next_time(), timer_at)
        if now == np.inf:
            break
        while i < n and times[i] <= now:
            scheduler.submit(arrivals[i], now)
            if charge_restarts and (cost := ex.reconfig.resize_cost(arrivals[i].model)):
                scheduler.set_resize_cost(arrivals[i].job_id, cost)
            events += 1
            i += 1
        ex.now = now
        for ev in ex.events():
            if audit is not None:
                audit.close(ev.job_id, now)
            scheduler.complete(ev.job_id, now)
            events += 1
        if timer_at <= now:
            timer_at = np.inf
            scheduler.dirty = True
            events += 1
        if not scheduler.dirty:
            continue
        step = scheduler.step(now)
        plan = step.plan
        if plan.actions:
            ex.apply(plan)
        recorder.step(now, plan)
        if wants_timer and scheduler.table.n:
            w = scheduler.next_wakeup(now)
            if w is not None and now < w < timer_at:
                timer_at = w
        if check:
            check_step(scheduler, now)
        if progress is not None and len(records) - reported >= tick:
            reported = len(records)
            progress(reported)
        if i >= n and timer_at == np.inf and ex.next_time() == np.inf and scheduler.table.n:
            raise InvariantViolation(
                f"{scheduler.policy.name}: {scheduler.table.n} jobs can never run (no GPUs given at t={now:.0f}); "
                f"e.g. {scheduler.table.ids[0]} requests {scheduler.table.requested[0]} GPUs"
            )
    if progress is not None:
        progress(len(records))
    res.events = events
    if scheduler.sharing is not None:
        res.colocation = ex.colocation
    res.steps = scheduler.steps
    res.wall_s = time.perf_counter() - wall
    if check:
        check_final(res, specs)
    return res
