"""Hyperparameter-tuning studies for the simulator: trial groups whose losers are pruned by successive
halving, and what a study's owner measures (makespan, time and GPU-hours to its best trial).

A study is ``n`` trials of one model, all submitted together (Fluid's trial group), each a one-GPU
job that elastic policies may grow. A trial run to the end does ``R`` steps, ``trial_s``
seconds on one GPU. Successive halving with reduction factor η (Jamieson & Talwalkar; the rule of
Optuna's and Ray Tune's ASHA/SHA pruners) checks trials at rungs R/η^K, …, R/η, R, K = ⌊log_η n⌋, and
keeps the best ⌊n/η^k⌋ (at least one) past rung k.

What is assumed, and why: a trial's quality is its rank in a seeded random order, the same at every
rung (learning curves that do not cross — the case successive halving is designed for). Then which
trials stop where is known from the workload alone, so a trial is a job whose work ends at its last
rung, and the comparison between allocation policies is not blurred by pruning decisions that depend
on who happened to reach a rung first. The pruned trial's GPUs are free the moment it stops, as in the
real system (``coddl study run`` cancels it at once).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable
from coddl.sim.recorder import SimResult


@dataclass(frozen=True, slots=True)
class Study:
    """One study of the workload: its trials are the jobs ``first_job … first_job + trials − 1``,
    ``best`` the id of the trial that is best (it runs to the last rung)."""

    name: str
    model: str
    arrival: float
    trials: int
    first_job: int
    best: int
    rungs: tuple[float, ...]  # steps at each rung, the last one R


def rungs(trials: int, full: float, eta: int) -> tuple[float, ...]:
    """The steps at which successive halving checks ``trials`` trials of ``full`` steps."""
    if trials < 1 or eta < 2 or not full > 0:
        raise ValueError(f"rungs: need trials >= 1, eta >= 2 and full > 0, got {trials}, {eta}, {full}")
    k = int(math.floor(math.log(trials, eta) + 1e-9))
    return tuple(full / eta ** (k - i) for i in range(k + 1))


def survivors(trials: int, eta: int, rung: int) -> int:
    """How many trials go past rung ``rung`` (0-based): the best ⌊n/η^(rung+1)⌋, at least one; all of
    them pass the last rung (they have finished)."""
    return max(trials // eta ** (rung + 1), 1)


def stop_rung(rank: int, trials: int, eta: int, n_rungs: int) -> int:
    """The rung at which the trial of quality rank ``rank`` (0: best) stops."""
    for r in range(n_rungs - 1):
        if rank >= survivors(trials, eta, r):
            return r
    return n_rungs - 1


@dataclass(frozen=True, slots=True)
class StudyWorkload:
    studies: tuple[Study, ...]
    jobs: tuple[JobSpec, ...]


def study_workload(counts: list[int], curves: CurveTable, pool: list[str], *, trial_s: float, eta: int = 3,
                   interval_s: float = 0.0, seed: int = 0) -> StudyWorkload:
    """Studies of ``counts[i]`` trials arriving ``interval_s`` apart, each of a model drawn (seeded)
    from ``pool``; a trial run to the end takes ``trial_s`` seconds on one GPU."""
    rng = np.random.default_rng(seed)
    studies: list[Study] = []
    jobs: list[JobSpec] = []
    for i, n in enumerate(counts):
        model = pool[int(rng.integers(len(pool)))]
        full = trial_s * curves.throughput(curves.index[model], 1)
        rs = rungs(n, full, eta)
        rank = rng.permutation(n)  # rank[t]: trial t's place in the quality order
        arrival = i * interval_s
        first = len(jobs)
        for t in range(n):
            jobs.append(JobSpec(job_id=first + t, arrival=arrival, requested_gpus=1,
                                total_work=rs[stop_rung(int(rank[t]), n, eta, len(rs))], model=model,
                                user=f"study-{i}", extra={"study": i, "trial": t}))
        studies.append(Study(f"study-{i}", model, arrival, n, first, first + int(np.argmin(rank)), rs))
    return StudyWorkload(tuple(studies), tuple(jobs))


def gpu_seconds_until(res: SimResult, until: dict[int, float]) -> dict[int, float]:
    """GPU-seconds each job in ``until`` held up to its time there (its allocation as the timeline
    recorded it: GPUs after every action, none after the job's finish)."""
    finish = {int(r.spec.job_id): r.finish for r in res.records}
    held: dict[int, float] = {j: 0.0 for j in until}
    last: dict[int, tuple[float, int]] = {}
    for at, job, gpus in res.timeline:
        j = int(job)
        if j not in until:
            continue
        if j in last:
            t0, g = last[j]
            held[j] += g * max(0.0, min(at, until[j], finish.get(j, math.inf)) - t0)
        last[j] = (at, gpus)
    for j, (t0, g) in last.items():
        held[j] += g * max(0.0, min(until[j], finish.get(j, math.inf)) - t0)
    return held


@dataclass(frozen=True, slots=True)
class StudyOutcome:
    """What a study's owner sees: hours from submission to the last trial's end (makespan) and to the
    best trial's end, and the GPU-hours all its trials had used by then."""

    study: str
    makespan_h: float
    best_h: float
    gpu_hours_to_best: float
    gpu_hours: float


def study_outcomes(res: SimResult, workload: StudyWorkload) -> list[StudyOutcome]:
    if not res.timeline and res.records:
        raise ValueError("study_outcomes needs the run's timeline (simulate(..., record_timeline=True))")
    rec = {int(r.spec.job_id): r for r in res.records}
    out = []
    for s in workload.studies:
        ids = range(s.first_job, s.first_job + s.trials)
        best_end = rec[s.best].finish
        to_best = gpu_seconds_until(res, {j: best_end for j in ids})
        total = gpu_seconds_until(res, {j: math.inf for j in ids})
        out.append(StudyOutcome(s.name, (max(rec[j].finish for j in ids) - s.arrival) / 3600,
                                (best_end - s.arrival) / 3600, sum(to_best.values()) / 3600,
                                sum(total.values()) / 3600))
    return out
