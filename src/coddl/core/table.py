"""The active-job table: one numpy column per attribute, one row per arrived, unfinished job.

Why columns and not a list of Job objects: the scheduler and every policy look at all active jobs
at every event. Keeping their state in arrays lets a policy evaluate remaining times, attained
service or throughput curves for thousands of jobs in a handful of numpy calls, and lets the
simulator replay 80,000-job traces in seconds. Progress and service are kept in closed form —
value at ``t0`` plus a rate — so nothing has to be touched for jobs whose allocation did not change.

Why two packed arrays (``F`` for the float columns, ``I`` for the integer ones): the per-event
bookkeeping (folding progress into ``work0``, moving a row) is a few scalars per job, where numpy's
per-call overhead would cost more than the arithmetic; compiled kernels over two arrays do it in a
couple of microseconds, and each column is still a plain numpy view (``table.share``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.core.job import JobId, JobSpec
from coddl.jit import njit

FLOAT_COLS = (
    "arrival", "total_work", "work0", "service0", "cpu_service0", "t0", "rate", "speed",
    "first_start", "last_start", "service_at_last_start", "paused_until", "resize_cost", "shared_fraction",
)
INT_COLS = (
    "uid", "requested", "min_gpus", "max_gpus", "model", "share", "gpu_type", "cpus", "min_cpus",
    "max_cpus", "resizes",
)
_F = {c: i for i, c in enumerate(FLOAT_COLS)}
_I = {c: i for i, c in enumerate(INT_COLS)}
# column indices the kernels use (numba sees them as compile-time constants)
_ARRIVAL, _TOTAL, _WORK0, _SERVICE0, _CPU0, _T0, _RATE = (_F[c] for c in (
    "arrival", "total_work", "work0", "service0", "cpu_service0", "t0", "rate"))
_PAUSED, _FIRST_START = _F["paused_until"], _F["first_start"]
_SHARE, _CPUS, _RESIZES = _I["share"], _I["cpus"], _I["resizes"]


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


class JobTable:
    """Struct-of-arrays over active jobs; rows are compacted by swap-remove on exit. Each name in
    ``FLOAT_COLS``/``INT_COLS`` is an attribute: a view of that column over the whole capacity
    (``table.share[:table.n]`` are the live rows)."""

    def __init__(self, capacity: int = 1024) -> None:
        self.n = 0
        self._cap = capacity
        self.F = np.zeros((len(FLOAT_COLS), capacity))
        self.I = np.zeros((len(INT_COLS), capacity), dtype=np.int64)
        self._bind()
        self.ids: list[JobId] = []
        self.specs: list[JobSpec] = []
        self.row: dict[JobId, int] = {}
        # rows in submission order (``order[:n]``) and each row's position in it, kept up to date
        # in O(n) compiled work per exit, so that arrival-ordered policies need no sort per event
        self.order = np.zeros(capacity, dtype=np.int64)
        self.pos = np.zeros(capacity, dtype=np.int64)
        # True while every job was submitted no earlier than the one before it (always in the
        # simulator): then submission order is (arrival, submission) order
        self.arrivals_in_order = True
        self._last_arrival = -np.inf

    def _bind(self) -> None:
        for c, i in _F.items():
            setattr(self, c, self.F[i])
        for c, i in _I.items():
            setattr(self, c, self.I[i])

    # ------------------------------------------------------------------ rows
    def _grow(self) -> None:
        self._cap *= 2
        for name in ("F", "I", "order", "pos"):
            old = getattr(self, name)
            new = np.zeros((*old.shape[:-1], self._cap), dtype=old.dtype)
            new[..., : self.n] = old[..., : self.n]
            setattr(self, name, new)
        self._bind()

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
        # arrival, total_work, work0, service0, cpu_service0, t0, rate, speed, first_start,
        # last_start, service_at_last_start, paused_until, resize_cost, shared_fraction (the scheduler's)
        self.F[:, r] = (spec.arrival, spec.total_work, 0.0, 0.0, 0.0, now, 0.0, 1.0, np.nan, np.nan, 0.0, 0.0, 0.0, 0.0)
        # uid, requested, min_gpus, max_gpus, model, share, gpu_type, cpus, min_cpus, max_cpus, resizes
        self.I[:, r] = (uid, spec.requested_gpus, spec.min_gpus, max_gpus, model, 0, gpu_type, 0, min_cpus,
                        max_cpus, 0)
        self.order[r] = r  # uids only grow: a new job is the last submitted
        self.pos[r] = r
        if spec.arrival < self._last_arrival:
            self.arrivals_in_order = False
        self._last_arrival = max(self._last_arrival, spec.arrival)
        return r

    def remove(self, job_id: JobId) -> tuple[JobSpec, float, float, int, float]:
        """Drop a job's row (swap with the last row); returns its spec and its final first start,
        attained service, resizes and work done."""
        r = self.row.pop(job_id)
        last = self.n - 1
        F, I = self.F, self.I
        final = (float(F[_FIRST_START, r]), float(F[_SERVICE0, r]), int(I[_RESIZES, r]), float(F[_WORK0, r]))
        spec = self.specs[r]
        _remove(F, I, self.order, self.pos, r, last)
        if r != last:
            self.ids[r] = self.ids[last]
            self.specs[r] = self.specs[last]
            self.row[self.ids[r]] = r
        self.ids.pop()
        self.specs.pop()
        self.n -= 1
        return (spec, *final)

    # ------------------------------------------------------------- progress
    def advance(self, rows: np.ndarray | int, now: float) -> None:
        """Fold progress and service accrued since ``t0`` into ``work0``/``service0`` for ``rows``
        (done before a row's rate or share changes, so the closed form stays exact)."""
        if isinstance(rows, (int, np.integer)):
            _advance_one(int(rows), float(now), self.F, self.I)
        else:
            _advance(np.asarray(rows, dtype=np.int64), float(now), self.F, self.I)

    def work_done(self, now: float) -> np.ndarray:
        return _work_done(self.n, float(now), self.F)

    def attained_service(self, now: float) -> np.ndarray:
        return _service(self.n, float(now), self.F, self.I, _SERVICE0, _SHARE)

    def cpu_service(self, now: float) -> np.ndarray:
        return _service(self.n, float(now), self.F, self.I, _CPU0, _CPUS)


@njit()
def _remove(F: np.ndarray, I: np.ndarray, order: np.ndarray, pos: np.ndarray, r: int, last: int) -> None:
    """Row ``r`` leaves: it is taken out of the submission order, and row ``last`` moves into it."""
    p = pos[r]
    for q in range(p, last):
        order[q] = order[q + 1]
        pos[order[q]] = q
    if r != last:
        order[pos[last]] = r
        pos[r] = pos[last]
        F[:, r] = F[:, last]
        I[:, r] = I[:, last]


@njit(inline="always")
def _advance_one(r: int, now: float, F: np.ndarray, I: np.ndarray) -> None:
    t0 = F[_T0, r]
    dt = now - t0
    effective = max(0.0, now - max(t0, F[_PAUSED, r]))
    F[_WORK0, r] = min(F[_TOTAL, r], F[_WORK0, r] + F[_RATE, r] * effective)
    F[_SERVICE0, r] += I[_SHARE, r] * dt
    F[_CPU0, r] += I[_CPUS, r] * dt
    F[_T0, r] = now


@njit()
def _advance(rows: np.ndarray, now: float, F: np.ndarray, I: np.ndarray) -> None:
    for r in rows:
        _advance_one(r, now, F, I)


@njit()
def _work_done(n: int, now: float, F: np.ndarray) -> np.ndarray:
    out = np.empty(n)
    for r in range(n):
        effective = max(0.0, now - max(F[_T0, r], F[_PAUSED, r]))
        out[r] = min(F[_TOTAL, r], F[_WORK0, r] + F[_RATE, r] * effective)
    return out


@njit()
def _service(n: int, now: float, F: np.ndarray, I: np.ndarray, base: int, per: int) -> np.ndarray:
    out = np.empty(n)
    for r in range(n):
        out[r] = F[base, r] + I[per, r] * (now - F[_T0, r])
    return out
