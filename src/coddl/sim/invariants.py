"""The simulator's invariants, checked at every step when asked (``simulate(check=True)``): no GPU
or CPU core over-allocated or held twice, the placer's free map equal to the allocation, and at the
end every job finished exactly once, after its arrival, with ∫ rate dt equal to its work."""

from __future__ import annotations

import numpy as np

from coddl.core.job import JobSpec
from coddl.scheduler import Scheduler
from coddl.sim.recorder import SimResult


class InvariantViolation(AssertionError):
    pass


def check_step(s: Scheduler, now: float) -> None:
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


def check_final(res: SimResult, specs: list[JobSpec]) -> None:
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
