"""The policy contract: ``Policy.allocate(ctx) -> Shares``.

A policy is a pure function of the context (plus its own bookkeeping keyed by job uid): it never
sees a clock, an executor or whether time is simulated. The context hands it the active jobs as
read-only numpy columns aligned by row, so a policy over thousands of jobs is a few array
operations; the answer is the number of GPUs (and optionally the GPU type and CPU cores) per row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import numpy as np

from coddl.core.job import JobId, JobSpec
from coddl.core.table import JobTable


class JobsView:
    """Active jobs (arrived, unfinished), one row each, as read-only numpy columns.

    ``remaining`` is in iterations, ``attained`` in GPU-seconds, ``share`` the GPUs held now,
    ``first_start``/``last_start`` NaN when never scheduled, ``service_since_start`` the GPU-seconds
    received since the job was last (re)scheduled, ``max_gpus`` the elastic maximum (already capped
    by the model's maximum useful GPUs) and ``speed`` a per-job correction of the model curve.
    Columns that need arithmetic (remaining work, attained service) are computed on first use, so
    a policy pays only for what it reads.
    """

    _PLAIN = ("uid", "arrival", "requested", "min_gpus", "max_gpus", "model", "total_work", "share",
              "first_start", "last_start", "speed", "gpu_type", "cpus", "min_cpus", "max_cpus")

    def __init__(self, table: JobTable, now: float) -> None:
        n = table.n
        self._table = table
        self._now = now
        self.ids: list[JobId] = table.ids
        self.specs: list[JobSpec] = table.specs  # who submitted each job (a queue layer's membership)
        for name in self._PLAIN:
            setattr(self, name, getattr(table, name)[:n])

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def remaining(self) -> np.ndarray:
        return self.total_work - self._table.work_done(self._now)

    @cached_property
    def attained(self) -> np.ndarray:
        return self._table.attained_service(self._now)

    @cached_property
    def service_since_start(self) -> np.ndarray:
        return self.attained - self._table.service_at_last_start[: len(self.ids)]

    @cached_property
    def cpu_attained(self) -> np.ndarray:
        return self._table.cpu_service(self._now)


@dataclass(frozen=True)
class Context:
    """Everything a policy may look at. ``curves[m, k]`` is iterations/s of model m on k GPUs (on
    the cluster's reference GPU type, consolidated placement); ``type_speed[t, m]`` scales it for
    GPU type t. ``capacity`` is the total GPUs, ``capacity_by_type`` per type index."""

    now: float
    capacity: int
    capacity_by_type: np.ndarray
    type_names: tuple[str, ...]
    cpu_capacity: int
    jobs: JobsView
    curves: np.ndarray
    type_speed: np.ndarray
    rng: np.random.Generator
    finished_service: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # measured throughput per job id, oldest first (real runs: from workers; simulated: from the
    # executor's rate model, optionally noisy) — what online predictors fit
    samples: dict[JobId, list[ThroughputSample]] = field(default_factory=dict)

    def throughput(self, k: np.ndarray | int, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """P_j(k) for the given rows (k broadcast), iterations/s."""
        kk = np.minimum(np.asarray(k), self.curves.shape[1] - 1)
        return self.curves[self.jobs.model[rows], kk] * self.jobs.speed[rows]

    def remaining_time(self, k: np.ndarray | int, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        """T_j(k) = W_j / P_j(k); infinite where P_j(k) = 0 (k = 0)."""
        p = self.throughput(k, rows)
        with np.errstate(divide="ignore"):
            return np.where(p > 0, self.jobs.remaining[rows] / np.where(p > 0, p, 1.0), np.inf)


@dataclass(frozen=True, slots=True)
class ThroughputSample:
    """One measurement: a job ran at ``rate`` iterations/s on ``gpus`` GPUs over ``nodes`` nodes with
    ``cpus`` cores, at time ``time``, having done ``progress`` iterations."""

    time: float
    gpus: int
    nodes: int
    cpus: int
    rate: float
    progress: float
    loss: float | None = None


@dataclass
class Shares:
    """GPUs per context row; ``gpu_type`` (index into ctx.type_names, -1 = any) and ``cpus``
    (cores per job, None = GPU-proportional default) are optional."""

    gpus: np.ndarray
    gpu_type: np.ndarray | None = None
    cpus: np.ndarray | None = None


class Policy:
    """Base class. Subclasses set ``name``, ``elastic``, a ``Params`` dataclass and implement
    ``allocate``. ``wakeup`` lets a policy ask to be re-run at a time (slices, periodic re-plans)."""

    name: ClassVar[str] = ""
    elastic: ClassVar[bool] = False
    summary: ClassVar[str] = ""
    presets: ClassVar[dict[str, dict[str, Any]]] = {}

    @dataclass
    class Params:
        pass

    def __init__(self, params: "Policy.Params | None" = None) -> None:
        self.params = params if params is not None else self.Params()

    def allocate(self, ctx: Context) -> Shares | np.ndarray:  # pragma: no cover - contract
        raise NotImplementedError

    def wakeup(self, ctx: Context) -> float | None:
        """Next time this policy wants to run although nothing else happened (None: never)."""
        return None

    def describe(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in dataclasses.asdict(self.params).items())})"


# ------------------------------------------------------------------------- helpers shared by policies

def greedy_fit(order: np.ndarray, demand: np.ndarray, free: int, backfill: bool = True) -> np.ndarray:
    """Walk ``order`` (row indices) and give each row its ``demand`` if it still fits.

    With ``backfill`` a row that does not fit is skipped and later, smaller rows may still run
    (the CoDDL simulator's rigid baselines); without it the walk stops at the first misfit.
    Vectorised: each round admits the longest prefix that fits, so the loop runs once per skip.
    Returns a boolean mask over rows (indexed like ``demand``).
    """
    admitted = np.zeros(demand.shape[0], dtype=bool)
    queue = np.asarray(order)
    while free > 0 and queue.size:
        if backfill:
            queue = queue[demand[queue] <= free]
            if not queue.size:
                break
        cum = np.cumsum(demand[queue])
        fit = int(np.searchsorted(cum, free, side="right"))
        admitted[queue[:fit]] = True
        if fit:
            free -= int(cum[fit - 1])
        if not backfill or fit == queue.size:
            break
        queue = queue[fit + 1 :]
    return admitted


def lexorder(*keys: np.ndarray) -> np.ndarray:
    """Rows sorted by the first key, then the second, … (NaN sorts last); stable."""
    return np.lexsort(tuple(np.where(np.isnan(k), np.inf, k) if k.dtype.kind == "f" else k for k in reversed(keys)))
