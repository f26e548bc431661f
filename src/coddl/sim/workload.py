"""Turn a trace into job specs, following the CoDDL paper's methodology (ALGORITHMS.md §1).

Each job gets a model drawn (seeded) from the pool of models whose maximum GPUs ≥ the job's
request; its work is ``duration × P_m(r_j)`` steps, so that on its requested GPUs it would run
exactly its recorded duration. Jobs that already carry a model and a step count (native
traces written by ``coddl trace export``) are replayed exactly as written; model names of other
schedulers' traces are resolved by ``coddl.perf.foreign``.

Two ways to draw the models (``SimConfig.model_draw``):

* ``"seeded"`` (:func:`build_workload`): a numpy ``Generator`` seeded with the run's seed, one
  draw per job; a job larger than every pool model gets the most scalable one, and a duration
  under one second counts as one second, so every trace job becomes a job.
* ``"coddl-authors"`` (:func:`build_workload_coddl_authors`): the CoDDL authors' simulator, rule
  by rule — the legacy global generator seeded with 0 for each trace (``np.random.seed(0)``), jobs
  visited in submit order (same-second ties in trace order), a job for which no pool model
  scales to its request is skipped *before* the draw (it consumes no random number), the model
  is ``pool[randint(0, len(pool))]`` over the eligible pool in pool order, and a job whose work
  comes to less than one step is skipped *after* its draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from coddl.core.job import JobSpec
from coddl.perf.curves import CODDL_POOL, CurveTable
from coddl.perf.foreign import POLLUX_APPS, family_model, gavel_seconds_per_step, pollux_steps, \
    parse_pollux_model, pollux_model_name, with_trace_models
from coddl.traces.model import Trace, TraceError, TraceJob


def curves_for(trace: Trace, curves: CurveTable) -> CurveTable:
    """The curves needed to replay ``trace``: ``curves`` plus estimator curves for Pollux apps."""
    pollux = {(tj.model, int(tj.batch_size)) for tj in trace.jobs
              if tj.model in POLLUX_APPS and tj.batch_size and tj.steps is None}
    pollux |= {p for tj in trace.jobs if tj.model and (p := parse_pollux_model(tj.model))}
    return with_trace_models(curves, pollux)


def _model_and_work(tj: TraceJob, trace: Trace, curves: CurveTable, drawn: int) -> tuple[str, float]:
    """The job's model and work; ``drawn`` is the pool model drawn for it (``_draw``) when the
    trace names none."""
    if tj.model is not None and tj.model in curves.index and tj.steps is not None:
        return tj.model, float(tj.steps)  # written by coddl: replay exactly
    duration = tj.duration
    if tj.model is not None and tj.model in POLLUX_APPS and tj.batch_size:
        name = pollux_model_name(tj.model, int(tj.batch_size))
        if name not in curves.index:
            raise TraceError(f"{trace.name}: job {tj.job_id}: model: unknown model {name!r}; build the "
                             "curves with coddl.sim.workload.curves_for(trace, curves)")
        return name, pollux_steps(tj.model, int(tj.batch_size))
    if tj.model is not None and tj.model in curves.index:
        m = curves.index[tj.model]
    elif tj.model is not None and family_model(tj.model) in curves.index:
        m = curves.index[family_model(tj.model)]
        if duration is None and tj.steps is not None:  # Gavel: steps × its measured V100 step time
            step = gavel_seconds_per_step(tj.model, tj.num_gpus)
            duration = tj.steps * step if step else None
    elif tj.model is not None:
        raise TraceError(f"{trace.name}: job {tj.job_id}: model: unknown model {tj.model!r}; known: "
                         f"{', '.join(curves.names)} (or a Tiresias/Gavel/Pollux model name)")
    else:
        m = drawn
    if tj.steps is not None and duration is None:
        return curves.names[m], float(tj.steps)
    if duration is None:
        raise TraceError(f"{trace.name}: job {tj.job_id}: duration: the job has neither a duration nor a "
                         "step count")
    work = max(duration, 1.0) * curves.throughput(m, tj.num_gpus)
    if not math.isfinite(work):  # a duration near the float's limit times a rate: the job could never end
        raise TraceError(f"{trace.name}: job {tj.job_id}: duration: {duration:g} s is more work than a "
                         "simulation can hold")
    return curves.names[m], work


def _draw(jobs: list[TraceJob], rng: np.random.Generator, pool_idx: np.ndarray, pool_max: np.ndarray) -> list[int]:
    """A pool model for each job that names none (-1 for the others): uniform over the models
    whose maximum GPUs ≥ the job's request (the most scalable ones when none is), one
    ``rng.integers(pool size)`` per such job in trace order. Drawn in one call, which yields the
    very numbers of one call per job (``tests/sim/test_workload.py`` pins it) at a fraction of
    the cost."""
    unnamed = [i for i, tj in enumerate(jobs) if tj.model is None]
    out = [-1] * len(jobs)
    if not unnamed:
        return out
    eligible: dict[int, np.ndarray] = {}
    for g in {jobs[i].num_gpus for i in unnamed}:
        e = pool_idx[pool_max >= g]
        eligible[g] = e if e.size else pool_idx[pool_max == pool_max.max()]  # larger than every model
    gpus = [jobs[i].num_gpus for i in unnamed]
    picks = rng.integers(0, np.array([eligible[g].size for g in gpus], dtype=np.int64)).tolist()
    for i, g, k in zip(unnamed, gpus, picks):
        out[i] = int(eligible[g][k])
    return out


@dataclass(frozen=True, slots=True)
class Skipped:
    """A trace job that is not simulated, and why (reported to the user, written to skipped.csv)."""

    job_id: str
    gpus: int
    reason: str


def _pool(curves: CurveTable, pool: tuple[str, ...] | None) -> tuple[np.ndarray, np.ndarray]:
    names = [n for n in (pool or CODDL_POOL) if n in curves.index] or list(curves.names)
    pool_idx = np.array([curves.index[n] for n in names])
    return pool_idx, curves.max_gpus[pool_idx]


def _spec(tj: TraceJob, model: str, work: float, curves: CurveTable) -> JobSpec:
    max_gpus = tj.max_gpus if tj.max_gpus is not None else int(curves.max_gpus[curves.index[model]])
    max_gpus = max(max_gpus, tj.min_gpus or 1)
    return JobSpec(job_id=tj.job_id, arrival=float(tj.arrival), requested_gpus=int(tj.num_gpus), total_work=work,
                   model=model, min_gpus=tj.min_gpus or 1, max_gpus=max_gpus, min_cpus=tj.cpus,
                   max_cpus=tj.cpus, user=tj.user or "default", account=tj.group,
                   duration=tj.duration)


def build_workload(trace: Trace, curves: CurveTable, *, seed: int = 0,
                   pool: tuple[str, ...] | None = None) -> list[JobSpec]:
    """Job specs for ``trace``; ``curves`` must contain every model it names (see ``curves_for``)."""
    drawn = _draw(trace.jobs, np.random.default_rng(seed), *_pool(curves, pool))
    return [_spec(tj, *_model_and_work(tj, trace, curves, m), curves) for tj, m in zip(trace.jobs, drawn)]


def build_workload_coddl_authors(trace: Trace, curves: CurveTable, *,
                                 pool: tuple[str, ...] | None = None) -> tuple[list[JobSpec], list[Skipped]]:
    """Job specs drawn as the CoDDL authors' simulator drew them (module docstring), and the jobs
    it leaves out. Jobs that name a model are built as :func:`build_workload` builds them."""
    legacy = np.random.RandomState(0)  # the stream np.random.seed(0) starts; randint is its randint
    pool_idx, pool_max = _pool(curves, pool)
    specs: list[JobSpec] = []
    skipped: list[Skipped] = []
    for tj in trace.jobs:
        if tj.model is not None:
            specs.append(_spec(tj, *_model_and_work(tj, trace, curves, -1), curves))
            continue
        eligible = pool_idx[pool_max >= tj.num_gpus]
        if eligible.size == 0:
            skipped.append(Skipped(tj.job_id, tj.num_gpus, f"no pool model scales to {tj.num_gpus} GPUs"))
            continue
        m = int(eligible[legacy.randint(0, eligible.size)])
        work = tj.duration * curves.throughput(m, tj.num_gpus) if tj.duration is not None else tj.steps
        if work is None:
            raise TraceError(f"{trace.name}: job {tj.job_id}: duration: the job has neither a duration nor a "
                             "step count")
        if work < 1:
            skipped.append(Skipped(tj.job_id, tj.num_gpus, "under one step"))
            continue
        specs.append(_spec(tj, curves.names[m], work, curves))
    return specs, skipped
