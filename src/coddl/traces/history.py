"""A cluster's own past: the jobs it ran, when each was submitted, started and ended, and on how many
GPUs — what ``coddl replay`` compares every policy against.

A history is both a trace (the jobs to replay: arrival, GPUs, work) and a record of what really
happened (start and end times, GPUs in use over time), read from Slurm's accounting (``sacct``) or
from coddl's own store. Times are Unix seconds here; :meth:`History.trace` makes arrivals relative
to the first submission, as every trace's are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from coddl.traces.model import Trace, TraceError, TraceJob


@dataclass(frozen=True, slots=True)
class RecordedJob:
    """One job as the cluster ran it. ``job`` is what to replay (its arrival in Unix seconds);
    ``account`` is the team it was charged to (Slurm account; the owner for coddl's own jobs);
    ``gpu_seconds`` what it held (GPUs × time)."""

    job: TraceJob
    account: str
    partition: str
    state: str
    submit: float
    start: float
    end: float
    gpu_seconds: float


@dataclass
class History:
    name: str
    source: str
    jobs: list[RecordedJob]
    # (Unix time, GPUs in use) at each change, as the cluster really ran
    usage: list[tuple[float, int]]
    # rows read but not replayable, by reason ("never started": 12, ...)
    skipped: dict[str, int] = field(default_factory=dict)
    rows: int = 0

    @property
    def origin(self) -> float:
        return min(j.submit for j in self.jobs)

    @property
    def peak_gpus(self) -> int:
        """The most GPUs the recorded jobs held at once: a lower bound on the cluster's size."""
        return max((u for _, u in self.usage), default=0)

    def trace(self) -> Trace:
        """The jobs to replay, by submission, arrivals in seconds from the first one."""
        t0 = self.origin
        jobs = sorted(self.jobs, key=lambda r: (r.submit, r.job.job_id))
        return Trace(self.name, [_shift(r.job, t0) for r in jobs], source=self.source,
                     meta={"format": "history", "arrival_origin": t0})

    def only(self, partitions: list[str]) -> History:
        """The jobs of some partitions (a partition is usually one pool of hardware: replay one at a time)."""
        known = sorted({j.partition for j in self.jobs})
        unknown = [p for p in partitions if p not in known]
        if unknown:
            raise TraceError(f"{self.name}: partition: no replayable job ran in {unknown[0]!r}; "
                             f"partitions: {', '.join(known) or 'none'}")
        keep = [j for j in self.jobs if j.partition in partitions]
        return History(self.name, self.source, keep, usage_of(keep), dict(self.skipped), self.rows)


def _shift(job: TraceJob, t0: float) -> TraceJob:
    return TraceJob(job.job_id, job.arrival - t0, job.num_gpus, job.duration, job.steps, job.model,
                    job.min_gpus, job.max_gpus, job.cpus, job.user, job.batch_size, job.group)


def usage_of(jobs: list[RecordedJob]) -> list[tuple[float, int]]:
    """GPUs in use over time when each job held its GPUs from start to end."""
    return step_series([(j.start, j.job.num_gpus) for j in jobs] + [(j.end, -j.job.num_gpus) for j in jobs])


def step_series(changes: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """(time, level) after each instant, from (time, change) pairs in any order."""
    if not changes:
        return []
    t = np.array([c[0] for c in changes], dtype=float)
    d = np.array([c[1] for c in changes], dtype=np.int64)
    order = np.argsort(t, kind="stable")
    t, level = t[order], np.cumsum(d[order])
    last = np.r_[t[1:] != t[:-1], True]  # one point per instant: the level after all its changes
    return list(zip(t[last].tolist(), level[last].tolist()))
