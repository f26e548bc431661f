"""Gavel (OSDI'20): heterogeneity-aware max-min fairness, solved as a linear program and realised
in rounds (ALGORITHMS.md §4).

The allocation is a matrix X[j, t]: the fraction of time job j runs on its d_j GPUs of type t
(Σ_t X[j, t] ≤ 1; Σ_j d_j·X[j, t] ≤ capacity_t). Gavel maximises the smallest *normalised*
throughput,

    max_X min_j  Σ_t X[j, t]·throughput[j, t]  /  throughput of j on an equal share,

so a job that gains 10× from a V100 and one that gains 1.2× are not treated alike: the first gets
the V100s. Two documented choices where the paper leaves room:

* the equal share is 1/n of the cluster: every job receives the same GPU-time (water-filled, capped
  at its demand), spread over the types it fits on in proportion to their capacity;
* among the allocations that achieve the max-min optimum, a second LP picks the one with the
  largest total normalised throughput (``efficiency``), so the LP leaves no capacity idle that
  could serve anyone.

The curve P_m(d_j) cancels from the ratio, so only ``ctx.type_speed`` enters: the LP depends on
jobs only through (model, demand). Jobs are grouped into those classes (identical jobs get
identical rows in an optimal solution, by symmetry and convexity), which keeps the LP at a few
hundred variables however many jobs are active; it is re-solved only at a round boundary after
the job set changed, as Gavel does. On a single GPU type the optimum is the equal share itself and
no LP is solved.

Rounds (default 360 s, Gavel's): at each boundary every type's GPUs go to the jobs with the highest
priority X[j, t] / (share of time received on t) — Gavel's priority, kept as time entitled under X
÷ time received, with one round of prior at exactly the target rate so new jobs start at priority 1
and nothing divides by zero. Types are filled fastest first; ties keep a job where it is. Leftover
GPUs go to jobs the LP gave no time on that type, oldest first, so the policy is work-conserving.
Between boundaries running jobs keep their GPUs and only freed GPUs are handed out the same way.
Gavel is rigid: a job runs on exactly its requested GPUs, all of one type; a job larger than every
type never runs (the simulator reports such a job instead of running it on fewer GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.policies.base import Context, Policy, Shares, greedy_fit, lexorder
from coddl.policies.registry import register


@dataclass(frozen=True, slots=True)
class Classes:
    """Active jobs grouped by (model, demand): ``of_row[j]`` is job j's class, ``count[c]`` its size."""

    of_row: np.ndarray
    count: np.ndarray
    demand: np.ndarray
    norm_speed: np.ndarray  # [c, t]: normalised throughput per unit of X (0 where the type cannot host it)


def equal_share_fraction(demand: np.ndarray, capacity: int) -> np.ndarray:
    """Fraction of time each job would run on an equal share of ``capacity`` GPUs: GPU-time is
    water-filled (every job gets min(d_j, L) GPUs' worth, Σ = capacity), so s_j = min(1, L / d_j)."""
    d = np.asarray(demand, dtype=float)
    if d.sum() <= capacity:
        return np.ones_like(d)
    ds = np.sort(d)
    below = np.concatenate([[0.0], np.cumsum(ds)[:-1]])  # GPUs of the jobs smaller than ds[i]
    rest = d.size - np.arange(d.size)
    level = (capacity - below) / rest  # the level if jobs i.. all sit at it
    i = int(np.argmax(level <= ds))  # first job whose demand reaches the level
    return np.minimum(1.0, level[i] / d)


def equal_share_speed(speed: np.ndarray, demand: np.ndarray, capacity_by_type: np.ndarray) -> np.ndarray:
    """Each job's throughput on an equal share, relative to its curve at d_j GPUs: it runs a
    fraction s_j of the time, spread over the types that can host its d_j GPUs in proportion to
    their capacity, i.e. s_j · Σ_t w_t·speed[j, t] (the LP's normaliser)."""
    cap = np.asarray(capacity_by_type)
    fits = demand[:, None] <= cap[None, :]
    weight = np.where(fits, cap[None, :], 0).astype(float)
    total = weight.sum(axis=1, keepdims=True)
    weight = np.divide(weight, total, out=np.zeros_like(weight), where=total > 0)
    return equal_share_fraction(demand, int(cap.sum())) * (weight * np.where(fits, speed, 0.0)).sum(axis=1)


def job_classes(model: np.ndarray, demand: np.ndarray, speed: np.ndarray, capacity_by_type: np.ndarray) -> Classes:
    """Group jobs by (model, demand) and give each class its normalised throughput per unit of
    time on each type: speed[j, t] ÷ the equal-share speed (0 where the type cannot host it)."""
    key = model.astype(np.int64) * (int(demand.max()) + 1) + demand
    _, first, of_row, count = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
    d = demand[first]
    base = equal_share_speed(speed, demand, capacity_by_type)[first]
    sp = np.where(d[:, None] <= np.asarray(capacity_by_type)[None, :], speed[first], 0.0)
    norm = np.divide(sp, base[:, None], out=np.zeros_like(sp), where=base[:, None] > 0)
    return Classes(of_row.reshape(-1), count, d, norm)


def max_min_lp(classes: Classes, capacity_by_type: np.ndarray, efficiency: bool = True) -> np.ndarray:
    """X[c, t] (per job of class c) maximising the smallest normalised throughput with HiGHS;
    then, if ``efficiency``, the largest total normalised throughput at that minimum."""
    import highspy  # here, with scipy: every policy module is imported for every simulation (0.3 s)
    from scipy.sparse import coo_matrix

    a, n, d = classes.norm_speed, classes.count.astype(float), classes.demand.astype(float)
    C, T = a.shape
    nx = C * T
    z = nx  # column index of the min variable
    live = np.flatnonzero(a.max(axis=1) > 0)  # classes that fit some type
    L = live.size
    cells = np.arange(nx)
    rows = np.concatenate([np.arange(L), np.repeat(np.arange(L), T),  # (i) z − Σ_t a[c,t]·X[c,t] ≤ 0
                           L + cells // T,  # (ii) Σ_t X[c,t] ≤ 1
                           L + C + cells % T])  # (iii) Σ_c n_c·d_c·X[c,t] ≤ capacity_t
    cols = np.concatenate([np.full(L, z), (live[:, None] * T + np.arange(T)).reshape(-1), cells, cells])
    vals = np.concatenate([np.ones(L), -a[live].reshape(-1), np.ones(nx), np.repeat(n * d, T)])
    m = L + C + T
    A = coo_matrix((vals, (rows, cols)), shape=(m, nx + 1)).tocsc()
    upper = np.r_[np.zeros(L), np.ones(C), capacity_by_type.astype(float)]

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = nx + 1, m
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.r_[np.zeros(nx), 1.0]
    lp.col_lower_ = np.zeros(nx + 1)
    lp.col_upper_ = np.r_[np.where(a.reshape(-1) > 0, 1.0, 0.0), np.inf if L else 0.0]
    lp.row_lower_ = np.full(m, -np.inf)
    lp.row_upper_ = upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = A.indptr
    lp.a_matrix_.index_ = A.indices
    lp.a_matrix_.value_ = A.data
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise RuntimeError(f"gavel: the max-min LP did not solve ({h.modelStatusToString(h.getModelStatus())})")
    x = np.asarray(h.getSolution().col_value[:nx])
    if efficiency and L:
        best = h.getSolution().col_value[z]
        h.changeColBounds(z, best * (1.0 - 1e-6), np.inf)
        h.changeColsCost(nx + 1, np.arange(nx + 1, dtype=np.int32), np.r_[(n[:, None] * a).reshape(-1), 0.0])
        h.run()
        if h.getModelStatus() == highspy.HighsModelStatus.kOptimal:  # else keep the max-min solution
            x = np.asarray(h.getSolution().col_value[:nx])
    return np.clip(x.reshape(C, T), 0.0, 1.0)


@register
class Gavel(Policy):
    name = "gavel"
    elastic = False
    summary = "Gavel: heterogeneity-aware max-min fairness (LP over time per GPU type, HiGHS), in rounds"

    @dataclass
    class Params:
        round_s: float = 360.0  # Gavel's round length
        aware: bool = True  # False: every type counts as equally fast (heterogeneity-agnostic baseline)
        efficiency: bool = True  # second LP: most total normalised throughput at the max-min optimum

    def __init__(self, params: "Gavel.Params | None" = None) -> None:
        super().__init__(params)
        if self.params.round_s <= 0:
            raise ValueError(f"gavel: round_s must be positive, got {self.params.round_s}")
        self._next_round = -np.inf
        self._last = None  # time of the previous call
        self._signature: bytes | None = None
        self._class_x = np.zeros((0, 0))
        # per job uid (the scheduler's monotonically increasing row id) × GPU type
        self._x = np.zeros((0, 0))
        self._entitled = np.zeros((0, 0))
        self._received = np.zeros((0, 0))

    def _ensure(self, uids: np.ndarray, types: int) -> None:
        need = int(uids.max()) + 1 if uids.size else 0
        if self._x.shape[0] >= need and self._x.shape[1] == types:
            return
        size = max(need, 2 * self._x.shape[0], 64)
        for name in ("_x", "_entitled", "_received"):
            old = getattr(self, name)
            new = np.zeros((size, types))
            if old.shape[1] == types:
                new[: old.shape[0]] = old
            setattr(self, name, new)

    def _account(self, ctx: Context) -> None:
        """Fold the time since the previous call into entitled (under the X then in force) and
        received (the type each running job ran on)."""
        j = ctx.jobs
        dt = 0.0 if self._last is None else ctx.now - self._last
        self._last = ctx.now
        if dt <= 0 or not len(j):
            return
        uid = j.uid
        self._entitled[uid] += self._x[uid] * dt
        on = (j.share > 0) & (j.gpu_type >= 0)
        np.add.at(self._received, (uid[on], j.gpu_type[on]), dt)

    def _solve(self, ctx: Context, demand: np.ndarray) -> None:
        """X for every active job; the LP is re-solved only when the classes or their sizes changed
        (a job that replaces an identical one inherits the class's row)."""
        j = ctx.jobs
        cap = np.asarray(ctx.capacity_by_type)
        speed = ctx.type_speed[:, j.model].T if self.params.aware else np.ones((len(j), cap.size))
        classes = job_classes(j.model, demand, speed, cap)
        signature = np.concatenate([classes.count, classes.demand, classes.norm_speed.reshape(-1)]).tobytes()
        if signature != self._signature:
            self._signature = signature
            if cap.size == 1:  # one type: the max-min optimum is the equal share itself, X = s
                a = classes.norm_speed
                self._class_x = np.divide(1.0, a, out=np.zeros_like(a), where=a > 0)
            else:
                self._class_x = max_min_lp(classes, cap, self.params.efficiency)
        self._x[j.uid] = self._class_x[classes.of_row]

    def allocate(self, ctx: Context) -> Shares:
        j = ctx.jobs
        n, T = len(j), len(ctx.type_names)
        cap = np.asarray(ctx.capacity_by_type, dtype=np.int64)
        self._ensure(j.uid, T)
        self._account(ctx)
        demand = np.maximum(j.min_gpus, j.requested)
        gpus = np.zeros(n, dtype=np.int64)
        gtype = np.full(n, -1, dtype=np.int64)
        if n == 0:
            return Shares(gpus, gtype)
        boundary = ctx.now >= self._next_round - 1e-9
        if boundary:
            self._next_round = ctx.now + self.params.round_s
            self._solve(ctx, demand)
            free = cap.copy()
        else:  # mid-round: running jobs keep their GPUs
            keep = (j.share > 0) & (j.gpu_type >= 0)
            gpus[keep] = j.share[keep]
            gtype[keep] = j.gpu_type[keep]
            free = cap - np.bincount(gtype[keep], weights=gpus[keep], minlength=T).astype(np.int64)
        x = self._x[j.uid]
        prior = x * self.params.round_s
        with np.errstate(divide="ignore", invalid="ignore"):
            priority = np.where(x > 0, (self._entitled[j.uid] + prior) / (self._received[j.uid] + prior), 0.0)
        fast_first = np.argsort(-ctx.type_speed.mean(axis=1), kind="stable")
        here = j.share > 0
        for pass_ in ("lp", "fill"):
            for t in fast_first.tolist():
                if free[t] <= 0:
                    continue
                open_ = (gpus == 0) & (demand <= cap[t])
                if pass_ == "lp":
                    rows = np.flatnonzero(open_ & (x[:, t] > 0))
                    order = rows[lexorder(-priority[rows, t], -x[rows, t], ~(here[rows] & (j.gpu_type[rows] == t)),
                                          j.arrival[rows], j.uid[rows])]
                else:
                    rows = np.flatnonzero(open_)
                    order = rows[lexorder(j.arrival[rows], j.uid[rows])]
                if not order.size:
                    continue
                admitted = greedy_fit(order, demand, int(free[t]))
                gpus[admitted] = demand[admitted]
                gtype[admitted] = t
                free[t] -= int(demand[admitted].sum())
        return Shares(gpus, gtype)

    def wakeup(self, ctx: Context) -> float | None:
        return self._next_round if len(ctx.jobs) else None
