"""Turn a trace into job specs, following the CoDDL paper's methodology (ALGORITHMS.md §1).

Each job gets a model drawn (seeded) from the pool of models whose maximum GPUs ≥ the job's
request; its work is ``duration × P_m(r_j)`` iterations, so that on its requested GPUs it would run
exactly its recorded duration. Jobs that already carry a model and an iteration count (native
traces written by ``coddl trace export``) are replayed exactly as written; model names of other
schedulers' traces are resolved by ``coddl.perf.foreign``.
"""

from __future__ import annotations

import numpy as np

from coddl.core.job import JobSpec
from coddl.perf.curves import CODDL_POOL, CurveTable
from coddl.perf.foreign import POLLUX_APPS, family_model, gavel_seconds_per_step, pollux_iterations, \
    parse_pollux_model, pollux_model_name, with_trace_models
from coddl.traces.model import Trace, TraceError, TraceJob


def curves_for(trace: Trace, curves: CurveTable) -> CurveTable:
    """The curves needed to replay ``trace``: ``curves`` plus estimator curves for Pollux apps."""
    pollux = {(tj.model, int(tj.batch_size)) for tj in trace.jobs
              if tj.model in POLLUX_APPS and tj.batch_size and tj.iterations is None}
    pollux |= {p for tj in trace.jobs if tj.model and (p := parse_pollux_model(tj.model))}
    return with_trace_models(curves, pollux)


def _model_and_work(tj: TraceJob, trace: Trace, curves: CurveTable, rng: np.random.Generator,
                    pool_idx: np.ndarray, pool_max: np.ndarray) -> tuple[str, float]:
    if tj.model is not None and tj.model in curves.index and tj.iterations is not None:
        return tj.model, float(tj.iterations)  # written by coddl: replay exactly
    duration = tj.duration
    if tj.model is not None and tj.model in POLLUX_APPS and tj.batch_size:
        name = pollux_model_name(tj.model, int(tj.batch_size))
        if name not in curves.index:
            raise TraceError(f"{trace.name}: job {tj.job_id}: model: unknown model {name!r}; build the "
                             "curves with coddl.sim.workload.curves_for(trace, curves)")
        return name, pollux_iterations(tj.model, int(tj.batch_size))
    if tj.model is not None and tj.model in curves.index:
        m = curves.index[tj.model]
    elif tj.model is not None and family_model(tj.model) in curves.index:
        m = curves.index[family_model(tj.model)]
        if duration is None and tj.iterations is not None:  # Gavel: steps × its measured V100 step time
            step = gavel_seconds_per_step(tj.model, tj.num_gpus)
            duration = tj.iterations * step if step else None
    elif tj.model is not None:
        raise TraceError(f"{trace.name}: job {tj.job_id}: model: unknown model {tj.model!r}; known: "
                         f"{', '.join(curves.names)} (or a Tiresias/Gavel/Pollux model name)")
    else:
        eligible = pool_idx[pool_max >= tj.num_gpus]
        if eligible.size == 0:  # larger than every model's maximum: the most scalable
            eligible = pool_idx[pool_max == pool_max.max()]
        m = int(eligible[rng.integers(eligible.size)])
    if tj.iterations is not None and duration is None:
        return curves.names[m], float(tj.iterations)
    if duration is None:
        raise TraceError(f"{trace.name}: job {tj.job_id}: duration: the job has neither a duration nor an "
                         "iteration count")
    return curves.names[m], max(duration, 1.0) * curves.throughput(m, tj.num_gpus)


def build_workload(trace: Trace, curves: CurveTable, *, seed: int = 0,
                   pool: tuple[str, ...] | None = None) -> list[JobSpec]:
    """Job specs for ``trace``; ``curves`` must contain every model it names (see ``curves_for``)."""
    rng = np.random.default_rng(seed)
    names = [n for n in (pool or CODDL_POOL) if n in curves.index] or list(curves.names)
    pool_idx = np.array([curves.index[n] for n in names])
    pool_max = curves.max_gpus[pool_idx]
    specs: list[JobSpec] = []
    for tj in trace.jobs:
        model, work = _model_and_work(tj, trace, curves, rng, pool_idx, pool_max)
        max_gpus = tj.max_gpus if tj.max_gpus is not None else int(curves.max_gpus[curves.index[model]])
        max_gpus = max(max_gpus, tj.min_gpus or 1)
        specs.append(JobSpec(
            job_id=tj.job_id, arrival=float(tj.arrival), requested_gpus=int(tj.num_gpus), total_work=work,
            model=model, min_gpus=tj.min_gpus or 1, max_gpus=max_gpus, min_cpus=tj.cpus,
            max_cpus=tj.cpus, user=tj.user or "default", duration=tj.duration,
        ))
    return specs
