"""AITurbo (HPDC'21): unified CPU–GPU allocation, a predictor for predictable jobs, least attained
service for the rest, and a Borda-count multi-level feedback queue combining the two.

Only the abstract is a primary source (ALGORITHMS.md §5); the mechanism is a reconstruction and
every constant is a parameter. What our reconstruction does at each step:

1. Unified service. A job's attained service is GPU-seconds × ``cores_per_gpu_service`` plus
   core-seconds, so CPU-heavy jobs pay for the cores they hold (unit: core-seconds). The service
   an allocation holds is U = GPUs × cores_per_gpu_service + cores.
2. LAS rank: 1 for the least attained unified service (ties: earlier arrival).
3. Predictable jobs (``perf/predictor.py``: the online model predicted the job's last samples
   well) get benefits. Moves are ±1 GPU (keeping cores per GPU) and ±1 CPU group (``cpu_group``
   more or fewer cores on every GPU). A move's benefit is the change in remaining_time × service,
   T(a)·U(a) − T(a′)·U(a′): the unified resource-time the job still needs, saved by the move.
   From the default allocation (requested GPUs, ``base_cores_per_gpu``) the job's moves with
   positive benefit are taken, best first, until none is left; the summed benefit is the job's
   benefit, and benefit rank 1 = the largest, among predictable jobs.
4. Borda score, in rank points: LAS rank + benefit rank for predictable jobs, 2 × LAS rank for
   unpredictable ones (they have no benefit rank, so their LAS rank counts twice).
5. Three-level MLFQ on the score: queue 0 holds scores below ``thresholds[0]`` (30 rank points),
   queue 1 below ``thresholds[1]`` (180), queue 2 the rest. A job is demoted once its score
   reaches a queue's limit — as its attained service grows and as newer jobs overtake it in rank —
   and stays demoted (the feedback of an MLFQ: a later dip in score does not promote it). Inside a
   queue, lower score first, then earlier arrival. Because the score is a rank sum, a threshold
   of 30 points means roughly "among the 15 most deserving jobs by both criteria"; with fewer
   active jobs than that, every job stays in queue 0 and the order is the Borda order.
6. Admission in queue order while GPUs and CPU cores last, skipping a job that does not fit.
   A predictable job asks for its requested GPUs with the cores per GPU its CPU moves chose, if
   fewer than the default (cores it does not use are shed; cores that would feed a starved GPU
   are left to step 8, so that no job waits for cores another job merely profits from); an
   unpredictable job asks for its requested GPUs and ``base_cores_per_gpu``. While an
   unpredictable job runs, each periodic re-plan moves its cores per GPU to the next ``probe``
   offset, at most ``probe_rounds`` times through the list and then back to the default (a
   waiting job asks for the default), so the predictor sees several core counts (a real job
   measures itself the same way) without re-coring a job that stays unpredictable forever.
7. The decrease queue: for a job left waiting, admitted predictable jobs give up GPUs, the −1
   GPU move with the largest positive benefit first, until it fits or no such move is left.
8. The increase queue: GPUs and cores left over go, one move at a time, to the admitted
   predictable job whose remaining time falls most per unit of unified service the move adds
   (idle resources cost nothing, so time saved is what counts here), only moves that make the job
   faster; +1 GPU moves first, +1 CPU group moves with the cores still left, so that cores spent
   feeding one GPU never leave another GPU idle; a +1 GPU move short of cores trades cores per
   GPU for the GPU. Before that, when ``spread_idle``, idle GPUs go one at a time, round-robin in
   queue order, to running unpredictable jobs (up to their maximum, with their cores per GPU):
   the description of AITurbo does not say what happens to idle GPUs, and leaving them idle
   would only handicap it against the elastic baselines.
9. Re-plan every ``replan_s`` seconds and as soon as a job becomes predictable.

With ``unified=false`` the policy decides only GPUs: every job gets the GPU-proportional cores
of its nodes (the placer's default), there is no CPU move and no probing.

Cores are never given beyond the cluster total; a job's cores per GPU stay within
[``min_cores_per_gpu``, ``max_cores_per_gpu``], so a request stays within what a node can give
per GPU, and the placer (which never over-commits a node) gives fewer when a node is short.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from coddl.perf.predictor import JobPredictor, PredictorParams
from coddl.policies.base import Context, Policy, Shares, lexorder
from coddl.policies.registry import register


@dataclass
class _Plan:
    """A predictable job's predicted speed on its grid of allocations (GPUs w × cores per GPU x),
    for one model version. Independent of the remaining steps R, which only scales times
    (T = R / speed), so it is recomputed only when the model changes."""

    version: int
    w: np.ndarray  # GPU counts of the grid (rows), min_gpus … max_gpus
    x: np.ndarray  # cores per GPU of the grid (columns)
    speed: np.ndarray  # predicted steps/s
    service: np.ndarray  # unified service U held, cores
    cost: np.ndarray  # U / speed = T·U ÷ R, core-seconds per step
    x_at_request: int  # cores per GPU its CPU moves choose at the requested GPUs
    gain: float  # Σ benefit of its positive moves from the default, ÷ R

    def cell(self, gpus: int, per_gpu: int) -> tuple[int, int]:
        return int(gpus - self.w[0]), int(np.searchsorted(self.x, per_gpu))


@dataclass
class _JobState:
    predictor: JobPredictor
    seen: float = -math.inf  # time of the last sample ingested
    probe: int = 0  # probes taken so far while unpredictable and running
    was_predictable: bool = False
    plan: _Plan | None = None


@register
class AITurbo(Policy):
    name = "aiturbo"
    elastic = True
    summary = ("AITurbo: unified CPU–GPU allocation; LAS for unpredictable jobs, benefit of ±1 GPU/CPU for "
               "predictable ones, Borda-count 3-level MLFQ")

    @dataclass
    class Params:
        unified: bool = True  # decide CPU cores per job; false: GPU-proportional cores, GPUs only
        cores_per_gpu_service: float = 10.0  # unified service: one GPU counts as this many cores
        thresholds: tuple[float, ...] = (30.0, 180.0)  # MLFQ limits on the Borda score (rank points)
        replan_s: float = 240.0  # periodic re-plan interval (s)
        base_cores_per_gpu: int = 0  # default cores per GPU; 0: the cluster average, rounded down
        min_cores_per_gpu: int = 1
        max_cores_per_gpu: int = 0  # 0: twice the default
        cpu_group: int = 1  # cores per GPU moved by one CPU-group move
        probe: tuple[int, ...] = (2, -1, 4, 1)  # cores-per-GPU offsets an unpredictable job tries
        probe_rounds: int = 3  # times it goes through them before it stays at the default
        gpus_per_node: int = 8  # how many GPUs share a node, to predict the nodes a job spans
        threshold: float = 0.10  # largest mean relative prediction error that counts as predicted
        window: int = 3  # over that many latest samples
        min_samples: int = 3  # measured samples before a job can be predictable
        min_cpu_configs: int = 3  # distinct cores per GPU measured before (unified only)
        reference_cores_per_gpu: float = 3.0  # cores per GPU at which the GPU curves hold (prior)
        prior_weight: float = 0.3  # weight of each prior curve point against one measured sample
        spread_idle: bool = True  # idle GPUs go round-robin to running unpredictable jobs

    def __init__(self, params: "AITurbo.Params | None" = None) -> None:
        super().__init__(params)
        self._jobs: dict[str, _JobState] = {}
        self._next_replan = -math.inf
        self._level: dict[str, int] = {}
        p = self.params
        self._predictor_params = PredictorParams(
            threshold=p.threshold, window=p.window, min_samples=p.min_samples,
            min_cpu_configs=p.min_cpu_configs if p.unified else 1, reference=p.reference_cores_per_gpu,
            prior_weight=p.prior_weight)

    def core_range(self, ctx: Context) -> tuple[int, int, int]:
        """(min, default, max) cores per GPU."""
        p = self.params
        base = p.base_cores_per_gpu or max(1, ctx.cpu_capacity // max(ctx.capacity, 1))
        top = p.max_cores_per_gpu or 2 * base
        return min(p.min_cores_per_gpu, base), base, max(top, base)

    # ------------------------------------------------------------------ predictor state
    def _state(self, ctx: Context, r: int) -> _JobState:
        """A new job's predictor, seeded with the scheduler's curve (the throughput estimator's
        prediction at the reference cores per GPU) as weighted prior points."""
        hi = int(ctx.jobs.max_gpus[r])
        w = np.unique(np.r_[[k for k in (1, 2, 4, 8, 16, 32, 64) if k <= hi], hi]).astype(np.int64)
        rate = ctx.throughput(w, r)
        keep = rate > 0
        prior = (w[keep].astype(float), np.ceil(w[keep] / self.params.gpus_per_node),
                 np.full(int(keep.sum()), self.params.reference_cores_per_gpu), rate[keep])
        st = _JobState(JobPredictor(self._predictor_params, prior if keep.any() else None))
        self._jobs[ctx.jobs.ids[r]] = st
        return st

    def _ingest(self, ctx: Context) -> bool:
        """Feed new throughput samples to the predictors; True if a job just became predictable."""
        if not ctx.samples:
            return False
        row = {jid: r for r, jid in enumerate(ctx.jobs.ids)}
        became = False
        for jid, samples in ctx.samples.items():
            r = row.get(jid)
            known = self._jobs.get(jid)
            if r is None or not samples or (known is not None and samples[-1].time <= known.seen):
                continue
            st = known or self._state(ctx, r)
            for s in samples:
                if s.time > st.seen:
                    st.predictor.observe(s.gpus, s.nodes, s.cpus, s.rate, s.progress, s.loss)
                    st.seen = s.time
            if st.predictor.predictable and not st.was_predictable:
                became = True
            st.was_predictable = st.predictor.predictable
        return became

    # ------------------------------------------------------------------ benefit
    def _plan(self, ctx: Context, r: int, st: _JobState, xs: tuple[int, int, int]) -> _Plan:
        if st.plan is not None and st.plan.version == st.predictor.version:
            return st.plan
        p = self.params
        lo_w, hi_w = int(ctx.jobs.min_gpus[r]), int(ctx.jobs.max_gpus[r])
        lo_x, base_x, hi_x = xs if p.unified else (xs[1], xs[1], xs[1])
        w = np.arange(lo_w, hi_w + 1)
        group = max(p.cpu_group, 1)
        x = np.arange(base_x - (base_x - lo_x) // group * group, hi_x + 1, group)  # through the default
        ww, xx = np.meshgrid(w, x, indexing="ij")
        speed = st.predictor.speed(ww, np.ceil(ww / p.gpus_per_node), xx)
        speed[ww * xx > ctx.cpu_capacity] = 0.0  # more cores than the cluster has: never chosen
        service = ww * (p.cores_per_gpu_service + xx)
        with np.errstate(divide="ignore"):
            cost = np.where(speed > 0, service / np.where(speed > 0, speed, 1.0), np.inf)
        start = (int(np.clip(ctx.jobs.requested[r], lo_w, hi_w)) - lo_w, int(np.argmin(np.abs(x - base_x))))
        best = descend(cost, start, gpu_moves=True)
        cpu_only = descend(cost, start, gpu_moves=False)
        gain = float(cost[start] - cost[best]) if np.isfinite(cost[start]) else 0.0
        st.plan = _Plan(st.predictor.version, w, x, speed, service, cost, int(x[cpu_only[1]]), gain)
        return st.plan

    # ------------------------------------------------------------------ the step
    def allocate(self, ctx: Context) -> Shares:
        p = self.params
        jobs = ctx.jobs
        n = len(jobs)
        self._ingest(ctx)
        periodic = ctx.now >= self._next_replan
        if periodic:
            self._next_replan = ctx.now + p.replan_s
        xs = self.core_range(ctx)
        lo_x, base_x, hi_x = xs

        want_w = np.clip(jobs.requested, jobs.min_gpus, jobs.max_gpus).astype(np.int64)
        per_gpu = np.full(n, base_x, dtype=np.int64)
        predictable = np.zeros(n, dtype=bool)
        gain = np.zeros(n)
        remaining = np.zeros(n)
        plans: dict[int, _Plan] = {}
        for r in range(n):
            st = self._jobs.get(jobs.ids[r])
            if st is None or not st.predictor.predictable:
                probes = len(p.probe) * p.probe_rounds
                if st is not None and p.unified and jobs.share[r] > 0 and st.probe <= probes:
                    st.probe += periodic
                    if 0 < st.probe <= probes:
                        top = max(ctx.cpu_capacity // int(want_w[r]), lo_x)
                        offset = p.probe[(st.probe - 1) % len(p.probe)]
                        per_gpu[r] = np.clip(base_x + offset, lo_x, min(hi_x, top))
                continue
            predictable[r] = True
            plan = plans[r] = self._plan(ctx, r, st, xs)
            per_gpu[r] = min(plan.x_at_request, base_x)  # more than the default comes from step 8
            remaining[r] = st.predictor.remaining_steps(float(jobs.remaining[r]))
            gain[r] = remaining[r] * plan.gain

        service = jobs.attained * p.cores_per_gpu_service + jobs.cpu_attained
        score = borda_score(service, gain, predictable, jobs.uid)  # uid: arrival, then submission order
        level = mlfq_level(score, p.thresholds)
        for r, jid in enumerate(jobs.ids):
            level[r] = self._level[jid] = max(self._level.get(jid, 0), int(level[r]))
        if len(self._level) > 2 * n + 64:  # forget finished jobs now and then
            self._level = {j: self._level[j] for j in jobs.ids}
            self._jobs = {j: st for j, st in self._jobs.items() if j in self._level}
        order = lexorder(level, score, jobs.arrival, jobs.uid)
        order = order[jobs.min_gpus[order] <= ctx.capacity]  # a job larger than the cluster never runs

        # jobs whose cores the user fixed (min/max cpus) keep them and are left out of CPU moves
        fixed = (jobs.max_cpus > 0) | (jobs.min_cpus > 0)
        fixed_cores = np.clip(want_w * per_gpu, jobs.min_cpus, np.where(jobs.max_cpus > 0, jobs.max_cpus, np.inf))
        pool = _Pool(np.zeros(n, dtype=np.int64), per_gpu, fixed, fixed_cores.astype(np.int64), ctx.capacity,
                     ctx.cpu_capacity if p.unified else math.inf)
        waiting = [r for r in order.tolist() if not pool.admit(r, int(want_w[r]))]
        movable = {r: plan for r, plan in plans.items() if not fixed[r]}
        if waiting and movable:
            _shed(pool, waiting, want_w, {r: pl for r, pl in movable.items() if pool.gpus[r] > 0}, remaining)
        if p.spread_idle and pool.free_g > 0:
            spread = order[(pool.gpus[order] > 0) & ~predictable[order] & ~fixed[order]]
            _round_robin(pool, spread, jobs.max_gpus)
        growing = {r: plan for r, plan in movable.items() if pool.gpus[r] > 0}
        if growing:  # GPUs first: a core spent feeding a GPU must not leave another GPU idle
            _grow(pool, growing, remaining, gpu_moves=True)
            _grow(pool, growing, remaining, gpu_moves=False)
        return Shares(gpus=pool.gpus, cpus=pool.cores() if p.unified else None)

    def assigns_cores(self) -> bool:
        return self.params.unified

    def wakeup(self, ctx: Context) -> float | None:
        if self._ingest(ctx):
            return math.nextafter(ctx.now, math.inf)  # re-plan at once: a job became predictable
        if not (ctx.jobs.share > 0).any():
            return None  # nothing runs, so nothing a re-plan looks at can change
        return self._next_replan if self._next_replan > ctx.now else ctx.now + self.params.replan_s


@dataclass
class _Pool:
    """The allocation being built: GPUs and cores per GPU per row, and what is still free."""

    gpus: np.ndarray
    per_gpu: np.ndarray
    fixed: np.ndarray  # rows whose core total is fixed by the user
    fixed_cores: np.ndarray
    free_g: int
    free_c: float

    def held(self, r: int, gpus: int | None = None, per_gpu: int | None = None) -> int:
        g = int(self.gpus[r]) if gpus is None else gpus
        if self.fixed[r]:
            return int(self.fixed_cores[r]) if g else 0
        return g * int(self.per_gpu[r] if per_gpu is None else per_gpu)

    def fits(self, r: int, gpus: int, per_gpu: int | None = None) -> bool:
        return (gpus - int(self.gpus[r]) <= self.free_g
                and self.held(r, gpus, per_gpu) - self.held(r) <= self.free_c)

    def set(self, r: int, gpus: int, per_gpu: int | None = None) -> None:
        self.free_g -= gpus - int(self.gpus[r])
        self.free_c -= self.held(r, gpus, per_gpu) - self.held(r)
        self.gpus[r] = gpus
        if per_gpu is not None:
            self.per_gpu[r] = per_gpu

    def admit(self, r: int, gpus: int) -> bool:
        if not self.fits(r, gpus):
            return False
        self.set(r, gpus)
        return True

    def cores(self) -> np.ndarray:
        return np.where(self.gpus > 0, np.where(self.fixed, self.fixed_cores, self.gpus * self.per_gpu), 0)


def descend(cost: np.ndarray, start: tuple[int, int], gpu_moves: bool) -> tuple[int, int]:
    """From ``start``, take the ±1 move (GPU row, CPU-group column) that lowers T·U the most until
    none does: the job's positive-benefit moves, best first."""
    i, j = start
    while True:
        steps = ((i - 1, j), (i + 1, j), (i, j - 1), (i, j + 1)) if gpu_moves else ((i, j - 1), (i, j + 1))
        moves = [(a, b) for a, b in steps if 0 <= a < cost.shape[0] and 0 <= b < cost.shape[1]]
        a, b = min(moves, key=lambda m: cost[m], default=(i, j))
        if not cost[a, b] < cost[i, j]:
            return i, j
        i, j = a, b


def _shed(pool: _Pool, waiting: list[int], want_w: np.ndarray, plans: dict[int, _Plan],
          remaining: np.ndarray) -> None:
    """The decrease queue: to fit waiting jobs (in queue order), admitted predictable jobs give
    up one GPU at a time, the largest positive benefit R·(cost(w) − cost(w − 1)) first."""

    def benefit(r: int) -> float:
        pl = plans[r]
        i, j = pl.cell(int(pool.gpus[r]), int(pool.per_gpu[r]))
        return remaining[r] * float(pl.cost[i, j] - pl.cost[i - 1, j]) if i > 0 else 0.0

    heap = [(-b, r) for r in plans if (b := benefit(r)) > 0]
    heapq.heapify(heap)
    for r in waiting:
        while not pool.fits(r, int(want_w[r])) and heap:
            _, s = heapq.heappop(heap)
            pool.set(s, int(pool.gpus[s]) - 1)
            if (b := benefit(s)) > 0:
                heapq.heappush(heap, (-b, s))
        if not pool.admit(r, int(want_w[r])):
            return  # nothing left to shed


def _round_robin(pool: _Pool, rows: np.ndarray, top: np.ndarray) -> None:
    """One more GPU (with its cores) to each of ``rows`` in turn, up to ``top``, while both last."""
    while pool.free_g > 0 and rows.size:
        rows = rows[pool.gpus[rows] < top[rows]]
        grown = False
        for r in rows.tolist():
            if pool.free_g == 0:
                break
            if pool.fits(r, int(pool.gpus[r]) + 1):
                pool.set(r, int(pool.gpus[r]) + 1)
                grown = True
        if not grown:
            break


def _grow(pool: _Pool, plans: dict[int, _Plan], remaining: np.ndarray, gpu_moves: bool) -> None:
    """The increase queue (see the module docstring, step 8), for +1 GPU moves or for +1 CPU
    group moves. Values change as resources run out, so a popped move is re-evaluated and pushed
    back when another job's is now better."""

    def best_move(r: int) -> tuple[float, int, int] | None:
        pl = plans[r]
        i, j = pl.cell(int(pool.gpus[r]), int(pool.per_gpu[r]))
        cands = []
        if gpu_moves and i + 1 < pl.w.size:
            jj = j
            while jj >= 0 and not pool.fits(r, int(pl.w[i + 1]), int(pl.x[jj])):
                jj -= 1  # short of cores: fewer cores per GPU
            if jj >= 0:
                cands.append((i + 1, jj))
        if not gpu_moves and j + 1 < pl.x.size and pool.fits(r, int(pl.w[i]), int(pl.x[j + 1])):
            cands.append((i, j + 1))
        best = None
        for a, b in cands:
            if pl.speed[a, b] <= pl.speed[i, j]:
                continue
            added = pl.service[a, b] - pl.service[i, j]
            saved = remaining[r] * (1.0 / pl.speed[i, j] - 1.0 / pl.speed[a, b])
            value = saved / added if added > 0 else math.inf
            if best is None or value > best[0]:
                best = (value, a, b)
        return best

    heap = [(-m[0], r) for r in plans if (m := best_move(r)) is not None]
    heapq.heapify(heap)
    while heap:
        neg, r = heapq.heappop(heap)
        m = best_move(r)
        if m is None:
            continue
        if m[0] < -neg and heap and m[0] < -heap[0][0]:  # stale and overtaken: try again later
            heapq.heappush(heap, (-m[0], r))
            continue
        pool.set(r, int(plans[r].w[m[1]]), int(plans[r].x[m[2]]))
        if (nxt := best_move(r)) is not None:
            heapq.heappush(heap, (-nxt[0], r))


def borda_score(service: np.ndarray, gain: np.ndarray, predictable: np.ndarray, arrival: np.ndarray) -> np.ndarray:
    """Borda points per job (fewer = higher priority): LAS rank by unified ``service`` (1 = least)
    plus, for predictable jobs, the rank of their benefit ``gain`` among predictable jobs (1 =
    largest); unpredictable jobs count their LAS rank twice. Ties go to the smaller ``arrival`` key
    (the policy passes the submission sequence, i.e. arrival order with same-second ties in trace order)."""
    n = service.shape[0]
    las = np.empty(n, dtype=np.int64)
    las[lexorder(service, arrival)] = np.arange(1, n + 1)
    score = 2 * las
    rows = np.flatnonzero(predictable)
    if rows.size:
        rank = np.empty(rows.size, dtype=np.int64)
        rank[lexorder(-gain[rows], arrival[rows])] = np.arange(1, rows.size + 1)
        score[rows] = las[rows] + rank
    return score


def mlfq_level(score: np.ndarray, thresholds: tuple[float, ...]) -> np.ndarray:
    """Queue index per job: 0 below thresholds[0], 1 below thresholds[1], …, len(thresholds) for
    the rest (the last queue is unbounded)."""
    return np.searchsorted(np.asarray(thresholds, dtype=float), score, side="right")
