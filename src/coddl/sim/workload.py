"""Turn a trace into job specs, following the CoDDL paper's methodology (ALGORITHMS.md §1).

Each job gets a model drawn (seeded) from the pool of models whose maximum GPUs ≥ the job's
request; its work is ``duration × P_m(r_j)`` iterations, so that on its requested GPUs it would run
exactly its recorded duration. Jobs that already carry a model and an iteration count (native
traces written by ``coddl trace export``) are replayed exactly as written.
"""

from __future__ import annotations

import numpy as np

from coddl.core.job import JobSpec
from coddl.perf.curves import CODDL_POOL, CurveTable
from coddl.traces.model import Trace, TraceError


def build_workload(trace: Trace, curves: CurveTable, *, seed: int = 0,
                   pool: tuple[str, ...] | None = None) -> list[JobSpec]:
    rng = np.random.default_rng(seed)
    names = [n for n in (pool or CODDL_POOL) if n in curves.index] or list(curves.names)
    pool_idx = np.array([curves.index[n] for n in names])
    pool_max = curves.max_gpus[pool_idx]
    specs: list[JobSpec] = []
    for tj in trace.jobs:
        if tj.model is not None and tj.model not in curves.index:
            raise TraceError(f"{trace.name}: job {tj.job_id}: model: unknown model {tj.model!r}; "
                             f"known: {', '.join(curves.names)}")
        if tj.model is not None and tj.iterations is not None:
            model, work = tj.model, float(tj.iterations)
        else:
            if tj.model is not None:
                m = curves.index[tj.model]
            else:
                eligible = pool_idx[pool_max >= tj.num_gpus]
                if eligible.size == 0:  # larger than every model's maximum: the most scalable
                    eligible = pool_idx[pool_max == pool_max.max()]
                m = int(eligible[rng.integers(eligible.size)])
            model = curves.names[m]
            if tj.iterations is not None:
                work = float(tj.iterations)
            elif tj.duration is not None:
                work = max(tj.duration, 1.0) * curves.throughput(m, tj.num_gpus)
            else:
                raise TraceError(f"{trace.name}: job {tj.job_id}: duration: the job has neither a "
                                 "duration nor an iteration count")
        max_gpus = tj.max_gpus if tj.max_gpus is not None else int(curves.max_gpus[curves.index[model]])
        max_gpus = max(max_gpus, tj.min_gpus or 1)
        specs.append(JobSpec(
            job_id=tj.job_id, arrival=float(tj.arrival), requested_gpus=int(tj.num_gpus), total_work=work,
            model=model, min_gpus=tj.min_gpus or 1, max_gpus=max_gpus, min_cpus=tj.cpus,
            max_cpus=tj.cpus, user=tj.user or "default", duration=tj.duration,
        ))
    return specs
