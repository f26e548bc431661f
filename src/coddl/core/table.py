"""The active-job table: one numpy column per attribute, one row per arrived, unfinished job.

Why columns and not a list of Job objects: the scheduler and every policy look at all active jobs
at every event. Keeping their state in arrays lets a policy evaluate remaining times, attained
service or throughput curves for thousands of jobs in a handful of numpy calls, and lets the
simulator replay 80,000-job traces in seconds. Progress and service are kept in closed form —
value at ``t0`` plus a rate — so nothing has to be touched for jobs whose allocation did not change.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.core.job import JobId, JobSpec

_FLOAT_COLS = (
    "arrival", "total_work", "work0", "service0", "cpu_service0", "t0", "rate", "speed",
    "first_start", "last_start", "service_at_last_start", "paused_until",
)
_INT_COLS = (
    "uid", "requested", "min_gpus", "max_gpus", "model", "share", "gpu_type", "cpus", "min_cpus",
    "max_cpus", "resizes",
)


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job that left the table (finished, failed or cancelled), for metrics and reports."""

    spec: JobSpec
    status: str
    finish: float
    first_start: float
    attained_service: float
    resizes: int

    @property
    def jct(self) -> float:
        return self.finish - self.spec.arrival

    @property
    def queueing_delay(self) -> float:
        return (self.first_start - self.spec.arrival) if self.first_start == self.first_start else self.jct


_FINAL_COLS = ("first_start", "service0", "cpu_service0", "resizes", "work0")


class JobTable:
    """Struct-of-arrays over active jobs; rows are compacted by swap-remove on exit."""

    def __init__(self, capacity: int = 1024) -> None:
        self.n = 0
        self._cap = capacity
        for c in _FLOAT_COLS:
            setattr(self, c, np.zeros(capacity))
        for c in _INT_COLS:
            setattr(self, c, np.zeros(capacity, dtype=np.int64))
        self.ids: list[JobId] = []
        self.specs: list[JobSpec] = []
        self.row: dict[JobId, int] = {}

    # ------------------------------------------------------------------ rows
    def _grow(self) -> None:
        self._cap *= 2
        for c in _FLOAT_COLS + _INT_COLS:
            old = getattr(self, c)
            new = np.zeros(self._cap, dtype=old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, c, new)

    def add(self, spec: JobSpec, uid: int, model: int, max_gpus: int, now: float, gpu_type: int = -1,
            min_cpus: int = 0, max_cpus: int = 0) -> int:
        if spec.job_id in self.row:
            raise ValueError(f"duplicate job id {spec.job_id!r}")
        if self.n == self._cap:
            self._grow()
        r = self.n
        self.n += 1
        self.ids.append(spec.job_id)
        self.specs.append(spec)
        self.row[spec.job_id] = r
        for c in _FLOAT_COLS:
            getattr(self, c)[r] = 0.0
        for c in _INT_COLS:
            getattr(self, c)[r] = 0
        self.uid[r] = uid
        self.arrival[r] = spec.arrival
        self.total_work[r] = spec.total_work
        self.requested[r] = spec.requested_gpus
        self.min_gpus[r] = spec.min_gpus
        self.max_gpus[r] = max_gpus
        self.model[r] = model
        self.gpu_type[r] = gpu_type
        self.min_cpus[r] = min_cpus
        self.max_cpus[r] = max_cpus
        self.t0[r] = now
        self.speed[r] = 1.0
        self.first_start[r] = np.nan
        self.last_start[r] = np.nan
        return r

    def remove(self, job_id: JobId) -> tuple[JobSpec, dict[str, float]]:
        """Drop a job's row (swap with the last row) and return its spec and final column values."""
        r = self.row.pop(job_id)
        last = self.n - 1
        final = {c: getattr(self, c)[r].item() for c in _FINAL_COLS}
        spec = self.specs[r]
        if r != last:
            for c in _FLOAT_COLS + _INT_COLS:
                col = getattr(self, c)
                col[r] = col[last]
            self.ids[r] = self.ids[last]
            self.specs[r] = self.specs[last]
            self.row[self.ids[r]] = r
        self.ids.pop()
        self.specs.pop()
        self.n -= 1
        return spec, final

    # ------------------------------------------------------------- progress
    def advance(self, rows: np.ndarray | int, now: float) -> None:
        """Fold progress and service accrued since ``t0`` into ``work0``/``service0`` for ``rows``
        (done before a row's rate or share changes, so the closed form stays exact)."""
        dt = now - self.t0[rows]
        effective = np.maximum(0.0, now - np.maximum(self.t0[rows], self.paused_until[rows]))
        self.work0[rows] = np.minimum(self.total_work[rows], self.work0[rows] + self.rate[rows] * effective)
        self.service0[rows] += self.share[rows] * dt
        self.cpu_service0[rows] += self.cpus[rows] * dt
        self.t0[rows] = now

    def work_done(self, now: float) -> np.ndarray:
        n = self.n
        effective = np.maximum(0.0, now - np.maximum(self.t0[:n], self.paused_until[:n]))
        return np.minimum(self.total_work[:n], self.work0[:n] + self.rate[:n] * effective)

    def attained_service(self, now: float) -> np.ndarray:
        n = self.n
        return self.service0[:n] + self.share[:n] * (now - self.t0[:n])

    def cpu_service(self, now: float) -> np.ndarray:
        n = self.n
        return self.cpu_service0[:n] + self.cpus[:n] * (now - self.t0[:n])
