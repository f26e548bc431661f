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
from typing import Any, Callable, ClassVar

import numpy as np

from coddl.core.job import JobId, JobSpec
from coddl.core.table import FLOAT_COLS, INT_COLS, JobTable
from coddl.jit import njit


class JobsView:
    """Active jobs (arrived, unfinished), one row each, as read-only numpy columns.

    ``remaining`` is in steps, ``attained`` in GPU-seconds, ``share`` the GPUs held now,
    ``first_start``/``last_start`` NaN when never scheduled, ``service_since_start`` the GPU-seconds
    received since the job was last (re)scheduled, ``max_gpus`` the elastic maximum (already capped
    by the model's maximum useful GPUs), ``speed`` a per-job correction of the model curve and
    ``resize_cost`` the seconds a resize of the job makes it stand still (0: resized in place).
    Every column is made on first use — a plain column is a view of the table, one that needs
    arithmetic (remaining work, attained service) is computed then — so a policy pays only for
    what it reads.
    """

    _PLAIN = ("uid", "arrival", "requested", "min_gpus", "max_gpus", "model", "total_work", "share",
              "first_start", "last_start", "speed", "gpu_type", "cpus", "min_cpus", "max_cpus", "resize_cost")
    _WHERE = {c: ("F", FLOAT_COLS.index(c)) if c in FLOAT_COLS else ("I", INT_COLS.index(c)) for c in _PLAIN}

    def __init__(self, table: JobTable, now: float) -> None:
        self._table = table
        self._now = now
        self._n = table.n
        self.ids: list[JobId] = table.ids
        self.specs: list[JobSpec] = table.specs  # who submitted each job (a queue layer's membership)
        self._memo: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return self._n

    def __getattr__(self, name: str) -> np.ndarray:
        where = JobsView._WHERE.get(name)
        if where is None:
            raise AttributeError(name)
        col = getattr(self._table, where[0])[where[1], : self._n]
        setattr(self, name, col)  # later reads find it directly
        return col

    def memo(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """What a policy derives from these jobs and the curves alone — never from the capacity —
        computed once per view: under GPU sharing the scheduler asks a policy up to three times per
        step, with one view and different capacities (``Scheduler._with_sharing``). Read-only."""
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = compute()
        return got

    @cached_property
    def by_submission(self) -> np.ndarray:
        """Row indices in submission (uid) order; with ``arrivals_in_order`` that is (arrival,
        submission) order, so FIFO-like policies need not sort."""
        return self._table.order[: self._n]

    @property
    def arrivals_in_order(self) -> bool:
        return self._table.arrivals_in_order

    @cached_property
    def remaining(self) -> np.ndarray:
        return self.total_work - self._table.work_done(self._now)

    @cached_property
    def attained(self) -> np.ndarray:
        return self._table.attained_service(self._now)

    @cached_property
    def service_since_start(self) -> np.ndarray:
        return self.attained - self._table.service_at_last_start[: self._n]

    @cached_property
    def cpu_attained(self) -> np.ndarray:
        return self._table.cpu_service(self._now)


_ALL = slice(None)  # every row


@dataclass(slots=True)
class Context:
    """Everything a policy may look at (read-only by contract; not frozen, so that building one
    at every event costs little). ``curves[m, k]`` is steps/s of model m on k GPUs (on
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
        """P_j(k) for the given rows (k broadcast), steps/s."""
        kk = np.minimum(np.asarray(k), self.curves.shape[1] - 1)
        return self.curves[self.jobs.model[rows], kk] * self.jobs.speed[rows]

    def remaining_time(self, k: np.ndarray | int, rows: np.ndarray | slice = _ALL) -> np.ndarray:
        """T_j(k) = W_j / P_j(k); infinite where P_j(k) = 0 (k = 0). Over every row (what the
        policies ask at each decision) one compiled pass, float for float what the numpy
        expression gives, instead of a dozen numpy calls on a few hundred rows."""
        j = self.jobs
        if rows is _ALL and self.curves.dtype == np.float64:
            kk = np.broadcast_to(np.asarray(k, dtype=np.int64), (len(j),))
            return _remaining_time(self.curves, j.model, j.speed, kk, j.remaining)
        p = self.throughput(k, rows)
        with np.errstate(divide="ignore"):
            return np.where(p > 0, j.remaining[rows] / np.where(p > 0, p, 1.0), np.inf)


@njit()
def _remaining_time(curves: np.ndarray, model: np.ndarray, speed: np.ndarray, k: np.ndarray,
                    remaining: np.ndarray) -> np.ndarray:
    last = curves.shape[1] - 1
    out = np.empty(model.size)
    for r in range(model.size):
        p = curves[model[r], min(k[r], last)] * speed[r]
        out[r] = remaining[r] / p if p > 0 else np.inf
    return out


@dataclass(frozen=True, slots=True)
class ThroughputSample:
    """One measurement: a job ran at ``rate`` steps/s on ``gpus`` GPUs over ``nodes`` nodes with
    ``cpus`` cores, at time ``time``, having done ``progress`` steps."""

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
    # True: a running job keeps exactly its GPUs until it ends (no preemption, no resizing), so a
    # job arriving while no GPU is free changes nothing and the scheduler does not ask (FIFO)
    holds_running: ClassVar[bool] = False
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

    def assigns_cores(self) -> bool:
        """This policy decides each job's CPU cores (``Shares.cpus``) instead of leaving every GPU
        its block of its node's cores; GPU sharing cannot honour that (co-tenants run on their
        GPU's block), so the scheduler refuses the two together."""
        return False

    def describe(self) -> str:
        return f"{self.name}({', '.join(f'{k}={v}' for k, v in dataclasses.asdict(self.params).items())})"


# ------------------------------------------------------------------------- helpers shared by policies

def greedy_fit(order: np.ndarray, demand: np.ndarray, free: int, backfill: bool = True) -> np.ndarray:
    """Walk ``order`` (row indices) and give each row its ``demand`` if it still fits.

    With ``backfill`` a row that does not fit is skipped and later, smaller rows may still run
    (the CoDDL simulator's rigid baselines); without it the walk stops at the first misfit.
    Returns a boolean mask over rows (indexed like ``demand``). Compiled: the walk is a loop.
    """
    return _greedy_fit(np.asarray(order, dtype=np.int64), np.asarray(demand, dtype=np.int64), int(free), bool(backfill))


@njit()
def _greedy_fit(order: np.ndarray, demand: np.ndarray, free: int, backfill: bool) -> np.ndarray:
    admitted = np.zeros(demand.shape[0], dtype=np.bool_)
    for r in order:
        if free <= 0:
            break
        d = demand[r]
        if d <= free:
            admitted[r] = True
            free -= d
        elif not backfill:
            break
    return admitted


def arrival_order(jobs: JobsView, rows: np.ndarray | None = None) -> np.ndarray:
    """``rows`` (default: all) in (arrival, submission) order, without a sort when jobs were
    submitted in arrival order (``JobsView.arrivals_in_order``)."""
    if jobs.arrivals_in_order:
        order = jobs.by_submission
        if rows is None:
            return order
        keep = np.zeros(len(jobs), dtype=np.bool_)
        keep[rows] = True
        return order[keep[order]]
    rows = np.arange(len(jobs)) if rows is None else np.asarray(rows)
    return rows[lexorder(jobs.arrival[rows], jobs.uid[rows])]


def keyed_order(jobs: JobsView, key: np.ndarray) -> np.ndarray:
    """All rows sorted by ``key`` (NaN last), ties in (arrival, submission) order — what
    ``lexorder(key, arrival, uid)`` gives, with one stable sort instead of three keys."""
    base = arrival_order(jobs)
    return base[np.argsort(key[base], kind="stable")]


def lexorder(*keys: np.ndarray) -> np.ndarray:
    """Rows sorted by the first key, then the second, … (NaN sorts last); stable."""
    return np.lexsort(tuple(np.where(np.isnan(k), np.inf, k) if k.dtype.kind == "f" else k for k in reversed(keys)))
