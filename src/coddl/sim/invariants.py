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
    shared = s.sharing.gpu_of if s.sharing is not None else {}
    total = sum(len(g) for j, g in alloc.items() if j not in shared) + (s.sharing.gpus_used if s.sharing else 0)
    if total > s.cluster.total_gpus:
        raise InvariantViolation(f"t={now}: {total} GPUs allocated > capacity {s.cluster.total_gpus}")
    seen: set[int] = set()
    for job, gpus in alloc.items():
        if job in shared:
            if gpus != (shared[job],):
                raise InvariantViolation(f"t={now}: sharing job {job} holds {gpus}, its packing says {shared[job]}")
            continue
        if seen.intersection(gpus):
            raise InvariantViolation(f"t={now}: job {job} shares a GPU with another job")
        seen.update(gpus)
    if s.sharing is not None:
        _check_shared(s, now, seen)
        seen.update(s.sharing.on)
    if s.sharing is not None and len(seen) != s.gpus_in_use:
        raise InvariantViolation(f"t={now}: {len(seen)} GPUs held, {s.gpus_in_use} counted")
    busy = np.flatnonzero(~s.placer.free)
    if set(busy.tolist()) != seen:
        raise InvariantViolation(f"t={now}: placer free-map disagrees with the allocation")
    cores: set[int] = set()
    for job, held in s.allocation.cores.items():
        if job in shared:
            continue  # a shared GPU's cores are its tenants' together
        if cores.intersection(held):
            raise InvariantViolation(f"t={now}: job {job} shares a CPU core with another job")
        cores.update(held)
    node_cores = np.bincount(s.cluster.node_of_core[list(cores)], minlength=len(s.cluster.nodes))
    if (node_cores > np.array([n.cpus for n in s.cluster.nodes])).any():
        raise InvariantViolation(f"t={now}: a node's CPU cores are over-committed")


def _check_shared(s: Scheduler, now: float, whole: set[int]) -> None:
    """Shared GPUs: none also held by a whole-GPU job, fractions and memory within the GPU's, every
    tenant's allocation on it, and only sharing jobs there."""
    sharing = s.sharing
    assert sharing is not None
    for g, group in sharing.on.items():
        if g in whole:
            raise InvariantViolation(f"t={now}: GPU {g} is shared and also held whole")
        if sum(t.fraction for t in group) > 1.0 + 1e-9:
            raise InvariantViolation(f"t={now}: GPU {g} over-committed: fractions {[t.fraction for t in group]}")
        gpu_type = int(s.cluster.node_type_index[s.cluster.node_of_gpu[g]])
        memory = s.cluster.gpu_type_of(s.cluster.type_names[gpu_type]).memory_gb
        if sum(sharing.memory_of(t, gpu_type) for t in group) > memory + 1e-9:
            raise InvariantViolation(f"t={now}: GPU {g}'s memory over-committed")
        for t in group:
            if sharing.gpu_of.get(t.job_id) != g or s.allocation.gpus.get(t.job_id) != (g,):
                raise InvariantViolation(f"t={now}: {t.job_id} is listed on GPU {g} but not placed there")


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
                f"job {r.spec.job_id}: ∫ rate dt = {done:.6g} steps, total work {r.spec.total_work:.6g}")
