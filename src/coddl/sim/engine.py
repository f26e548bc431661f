"""Discrete-event engine: arrivals, completions and policy timers drive ``Scheduler.step``.

Events at the same instant are applied together and the policy runs once for them, and only if
something changed. Completion events carry a version so a re-timed job's stale completion is
skipped without searching the heap.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from coddl.core.job import JobId, JobSpec
from coddl.core.table import JobRecord
from coddl.policies.base import Policy
from coddl.scheduler import Scheduler
from coddl.sim.executor import RateModel, SimExecutor, WorkAudit
from coddl.sim.reconfig import ReconfigCost

_COMPLETE, _TIMER = 0, 1


class InvariantViolation(AssertionError):
    pass


@dataclass
class SimResult:
    policy: str
    records: list[JobRecord]
    capacity: int
    cpu_capacity: int
    # (time, GPUs in use) after every step that changed the allocation
    utilisation: list[tuple[float, int]] = field(default_factory=list)
    # (time, CPU cores held) at each change
    cores: list[tuple[float, int]] = field(default_factory=list)
    # (time, share of free GPUs stranded on partly used nodes) at each change
    fragmentation: list[tuple[float, float]] = field(default_factory=list)
    # (time, job, GPUs) for every action
    timeline: list[tuple[float, JobId, int]] = field(default_factory=list)
    events: int = 0
    steps: int = 0
    actions: int = 0
    wall_s: float = 0.0
    audit: WorkAudit | None = None


def simulate(specs: list[JobSpec], scheduler: Scheduler, reconfig: ReconfigCost | None = None, *,
             rate_model: RateModel | None = None, check: bool = False, record_timeline: bool = True,
             progress: Callable[[int], None] | None = None, sample_noise: float | None = None,
             seed: int = 0) -> SimResult:
    """Replay ``specs`` through ``scheduler`` until every job has finished.

    ``check`` verifies the invariants at every step (no GPU over-allocated or shared, every job
    finishes once and after its arrival, ∫ rate dt equals each job's work); it costs time, so the
    tests turn it on and the CLI does not. ``progress`` is called with the number of finished jobs.
    ``sample_noise`` (None: off) makes the executor report throughput samples for online predictors.
    """
    wall = time.perf_counter()
    audit = WorkAudit() if check else None
    ex = SimExecutor(scheduler, reconfig or ReconfigCost(), rate_model, audit, sample_noise, seed)
    arrivals = sorted(specs, key=lambda s: s.arrival)
    res = SimResult(policy=scheduler.policy.name, records=scheduler.records, capacity=scheduler.cluster.total_gpus,
                    cpu_capacity=scheduler.cluster.total_cpus, audit=audit)
    heap: list[tuple[float, int, int, JobId | None, int]] = []
    version: dict[JobId, int] = {}
    seq = 0
    timer_at: float | None = None
    wants_timer = type(scheduler.policy).wakeup is not Policy.wakeup
    i, n = 0, len(arrivals)
    done_before = 0
    while i < n or heap:
        now = min(arrivals[i].arrival if i < n else np.inf, heap[0][0] if heap else np.inf)
        while i < n and arrivals[i].arrival <= now:
            scheduler.submit(arrivals[i], now)
            res.events += 1
            i += 1
        while heap and heap[0][0] <= now:
            _, _, kind, job, v = heapq.heappop(heap)
            if kind == _COMPLETE:
                if version.get(job) != v:
                    continue
                del version[job]
                if audit is not None:
                    audit.close(job, now)
                scheduler.complete(job, now)
                res.events += 1
            elif timer_at is not None and v == -1 and now >= timer_at:
                timer_at = None
                scheduler.dirty = True
                res.events += 1
        if not scheduler.dirty:
            continue
        step = scheduler.step(now)
        res.steps += 1
        if step.plan.actions:
            res.actions += len(step.plan.actions)
            for a in step.plan.actions:  # every action invalidates the job's pending completion
                version[a.job_id] = version.get(a.job_id, 0) + 1
                if record_timeline:
                    res.timeline.append((now, a.job_id, len(a.new)))
            for job, finish in ex.apply(step.plan, now):
                seq += 1
                heapq.heappush(heap, (finish, seq, _COMPLETE, job, version[job]))
        used = scheduler.gpus_in_use
        if not res.utilisation or res.utilisation[-1][1] != used:
            res.utilisation.append((now, used))
        if step.plan.actions or not res.cores:
            cores = scheduler.cores_in_use
            if not res.cores or res.cores[-1][1] != cores:
                res.cores.append((now, cores))
        if step.plan.actions or not res.fragmentation:
            frag = scheduler.placer.fragmentation()
            if not res.fragmentation or res.fragmentation[-1][1] != frag:
                res.fragmentation.append((now, frag))
        if wants_timer and scheduler.table.n:
            w = scheduler.next_wakeup(now)
            if w is not None and w > now and (timer_at is None or w < timer_at or timer_at <= now):
                timer_at = w
                seq += 1
                heapq.heappush(heap, (w, seq, _TIMER, None, -1))
        if check:
            _check_invariants(scheduler, now)
        if progress is not None and len(scheduler.records) != done_before:
            done_before = len(scheduler.records)
            progress(done_before)
        if i >= n and not heap and scheduler.table.n:
            raise InvariantViolation(
                f"{scheduler.policy.name}: {scheduler.table.n} jobs can never run (no GPUs given at t={now:.0f}); "
                f"e.g. {scheduler.table.ids[0]} requests {scheduler.table.requested[0]} GPUs"
            )
    res.steps = scheduler.steps
    res.wall_s = time.perf_counter() - wall
    if check:
        _check_final(res, specs)
    return res


def _check_invariants(s: Scheduler, now: float) -> None:
    alloc = s.allocation.gpus
    total = sum(len(g) for g in alloc.values())
    if total > s.cluster.total_gpus:
        raise InvariantViolation(f"t={now}: {total} GPUs allocated > capacity {s.cluster.total_gpus}")
    seen: set[int] = set()
    for job, gpus in alloc.items():
        if seen.intersection(gpus):
            raise InvariantViolation(f"t={now}: job {job} shares a GPU with another job")
        seen.update(gpus)
    busy = np.flatnonzero(~s.placer.free)
    if set(busy.tolist()) != seen:
        raise InvariantViolation(f"t={now}: placer free-map disagrees with the allocation")
    cores: set[int] = set()
    for job, held in s.allocation.cores.items():
        if cores.intersection(held):
            raise InvariantViolation(f"t={now}: job {job} shares a CPU core with another job")
        cores.update(held)
    node_cores = np.bincount(s.cluster.node_of_core[list(cores)], minlength=len(s.cluster.nodes))
    if (node_cores > np.array([n.cpus for n in s.cluster.nodes])).any():
        raise InvariantViolation(f"t={now}: a node's CPU cores are over-committed")


def _check_final(res: SimResult, specs: list[JobSpec]) -> None:
    by_id = {s.job_id: s for s in specs}
    finished = [r.spec.job_id for r in res.records]
    if len(finished) != len(set(finished)) or set(finished) != set(by_id):
        raise InvariantViolation("not every job finished exactly once")
    for r in res.records:
        if r.finish < r.spec.arrival or r.first_start < r.spec.arrival:
            raise InvariantViolation(f"job {r.spec.job_id} ran before its arrival")
        done = res.audit.done.get(r.spec.job_id, 0.0) if res.audit else r.spec.total_work
        if abs(done - r.spec.total_work) > 1e-6 * max(1.0, r.spec.total_work):
            raise InvariantViolation(
                f"job {r.spec.job_id}: ∫ rate dt = {done:.6g} iterations, total work {r.spec.total_work:.6g}")
