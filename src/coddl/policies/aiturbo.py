"""AITurbo (HPDC'21): unified CPU–GPU allocation, a predictor for predictable jobs, least attained
service for the rest, and a Borda-count multi-level feedback queue combining the two.

Only the abstract is a primary source (ALGORITHMS.md §5); the mechanism is a reconstruction and
every constant below is a parameter. What our reconstruction does at each step:

1. Unified service. A job's attained service is GPU-seconds × ``cores_per_gpu_service`` plus
   core-seconds, so CPU-heavy jobs pay for the cores they hold (unit: core-seconds).
2. LAS rank: 1 for the least attained unified service (ties: earlier arrival).
3. Predictable jobs (``perf/predictor.py``: the online model predicted the job's last samples
   well) get a benefit. Moves are ±1 GPU (keeping cores per GPU) and ±1 CPU group
   (``cpu_group`` cores per GPU on every GPU). A move's benefit is the change in
   remaining_time × service, T(a)·U(a) − T(a′)·U(a′) with U = GPUs × cores_per_gpu_service +
   cores: the unified resource-time the job still needs, saved by the move. From its default
   allocation the job takes, one at a time, the move with the largest positive benefit (the
   "decrease" queue sheds GPUs that scale poorly and cores it does not use, the "increase" queue
   adds cores that feed a starved GPU) until none is positive; that local optimum is the allocation
   it is admitted with, and the summed benefit of the moves is the job's benefit. Benefit rank 1
   = the largest benefit, among predictable jobs.
4. Borda score, in rank points: LAS rank + benefit rank for predictable jobs, 2 × LAS rank for
   unpredictable ones (they have no benefit rank, so their LAS rank counts twice).
5. Three-level MLFQ on the score: queue 0 holds scores below ``thresholds[0]`` (30 rank points),
   queue 1 below ``thresholds[1]`` (180), queue 2 the rest. A job is demoted as other jobs
   overtake it in rank (mostly: as its attained service grows). Inside a queue jobs are served
   first come, first served, as in Tiresias; this is what makes the thresholds matter.
6. Admission in queue order while GPUs and CPU cores last, skipping a job that does not fit.
   Unpredictable jobs get their requested GPUs and ``base_cores_per_gpu``; while one runs and is
   unpredictable, each periodic re-plan moves its cores per GPU to the next ``probe`` offset, so
   the predictor sees several core counts (a real job measures itself the same way).
7. GPUs and cores left over go, one move at a time, to admitted predictable jobs along their
   "increase" queue: largest benefit first, only moves that make the job faster.
8. Re-plan every ``replan_s`` seconds and as soon as a job becomes predictable.

With ``unified=false`` the policy decides only GPUs: every job gets the GPU-proportional cores
of its nodes (the placer's default), there is no CPU move and no probing.

Cores are never given beyond the cluster total; a job's cores are capped at GPUs ×
``max_cores_per_gpu`` so a request stays within what a node can give per GPU, and the placer
(which never over-commits a node) gives fewer when a node is short.
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
    """What a predictable job's predictor says, for one model version; independent of the
    remaining steps R, which only scales benefits (T·U = R · U/speed)."""

    version: int
    best: tuple[int, int]  # (GPUs, cores per GPU) after the benefit moves from the default
    gain: float  # Σ benefit of those moves ÷ R, in core-seconds per step
    growth: list[tuple[int, int, float]]  # increase moves from best: (GPUs, cores per GPU, benefit ÷ R)


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
        gpus_per_node: int = 8  # how many GPUs share a node, to predict the nodes a job spans
        threshold: float = 0.10  # largest relative prediction error that counts as predicted
        window: int = 2  # that many latest samples must be predicted
        min_samples: int = 3  # measured samples before a job can be predictable
        min_cpu_configs: int = 3  # distinct cores per GPU measured before (unified only)
        reference_cores_per_gpu: float = 3.0  # cores per GPU at which the GPU curves hold (prior)
        prior_weight: float = 0.3  # weight of each prior curve point against one measured sample

    def __init__(self, params: "AITurbo.Params | None" = None) -> None:
        super().__init__(params)
        self._jobs: dict[str, _JobState] = {}
        self._next_replan = -math.inf
        p = self.params
        self._predictor_params = PredictorParams(
            threshold=p.threshold, window=p.window, min_samples=p.min_samples,
            min_cpu_configs=p.min_cpu_configs if p.unified else 1, reference=p.reference_cores_per_gpu,
            prior_weight=p.prior_weight)

    # ------------------------------------------------------------------ cores per GPU
    def _core_range(self, ctx: Context) -> tuple[int, int, int]:
        """(min, default, max) cores per GPU."""
        p = self.params
        base = p.base_cores_per_gpu or max(1, ctx.cpu_capacity // max(ctx.capacity, 1))
        top = p.max_cores_per_gpu or 2 * base
        low = min(p.min_cores_per_gpu, base)
        return low, base, max(top, base)

    # ------------------------------------------------------------------ predictor state
    def _state(self, ctx: Context, r: int) -> _JobState:
        jid = ctx.jobs.ids[r]
        st = self._jobs.get(jid)
        if st is None:
            hi = int(ctx.jobs.max_gpus[r])
            w = np.unique(np.r_[[k for k in (1, 2, 4, 8, 16, 32, 64) if k <= hi], hi]).astype(float)
            rate = ctx.throughput(w.astype(np.int64), r)
            keep = rate > 0
            prior = (w[keep], np.ceil(w[keep] / self.params.gpus_per_node),
                     np.full(int(keep.sum()), self.params.reference_cores_per_gpu), rate[keep])
            st = self._jobs[jid] = _JobState(JobPredictor(self._predictor_params, prior if keep.any() else None))
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
        if len(self._jobs) > 2 * len(ctx.jobs) + 64:  # forget finished jobs now and then
            self._jobs = {j: s for j, s in self._jobs.items() if j in row}
        return became

    # ------------------------------------------------------------------ benefit
    def _plan(self, ctx: Context, r: int, st: _JobState, xs: tuple[int, int, int]) -> _Plan:
        """Benefit moves on the grid of (GPUs, cores per GPU) the job may have; cached per model."""
        if st.plan is not None and st.plan.version == st.predictor.version:
            return st.plan
        p = self.params
        lo_w, hi_w = int(ctx.jobs.min_gpus[r]), int(ctx.jobs.max_gpus[r])
        lo_x, base_x, hi_x = xs if p.unified else (xs[1], xs[1], xs[1])
        w = np.arange(lo_w, hi_w + 1)
        x = np.arange(lo_x, hi_x + 1, max(p.cpu_group, 1))
        ww, xx = np.meshgrid(w, x, indexing="ij")
        speed = st.predictor.speed(ww, np.ceil(ww / p.gpus_per_node), xx)
        service = ww * (p.cores_per_gpu_service + xx)
        with np.errstate(divide="ignore"):
            cost = np.where(speed > 0, service / np.where(speed > 0, speed, 1.0), np.inf)  # U/speed = T·U ÷ R
        start = (int(np.clip(ctx.jobs.requested[r], lo_w, hi_w)) - lo_w, int(np.argmin(np.abs(x - base_x))))
        i, j = start
        while True:  # steepest descent of T·U over ±1 GPU and ±1 CPU group
            moves = [(a, b) for a, b in ((i - 1, j), (i + 1, j), (i, j - 1), (i, j + 1))
                     if 0 <= a < w.size and 0 <= b < x.size]
            a, b = min(moves, key=lambda m: cost[m], default=(i, j))
            if not cost[a, b] < cost[i, j]:
                break
            i, j = a, b
        gain = float(cost[start] - cost[i, j]) if np.isfinite(cost[start]) else 0.0
        growth: list[tuple[int, int, float]] = []
        gi, gj = i, j
        while True:  # the increase queue: moves that speed the job up, least costly first
            ups = [(a, b) for a, b in ((gi + 1, gj), (gi, gj + 1))
                   if a < w.size and b < x.size and speed[a, b] > speed[gi, gj]]
            if not ups:
                break
            a, b = min(ups, key=lambda m: cost[m])
            growth.append((int(w[a]), int(x[b]), float(cost[gi, gj] - cost[a, b])))
            gi, gj = a, b
        st.plan = _Plan(st.predictor.version, (int(w[i]), int(x[j])), gain, growth)
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
        xs = self._core_range(ctx)
        lo_x, base_x, hi_x = xs

        service = jobs.attained * p.cores_per_gpu_service + jobs.cpu_attained
        las = np.empty(n, dtype=np.int64)
        las[lexorder(service, jobs.arrival)] = np.arange(1, n + 1)

        want_w = np.clip(jobs.requested, jobs.min_gpus, jobs.max_gpus).astype(np.int64)
        want_x = np.full(n, base_x, dtype=np.int64)
        predictable = np.zeros(n, dtype=bool)
        gain = np.zeros(n)
        remaining = np.zeros(n)
        plans: dict[int, _Plan] = {}
        for r in range(n):
            st = self._jobs.get(jobs.ids[r])
            if st is None or not st.predictor.predictable:
                if st is not None and p.unified and p.probe:
                    if periodic and jobs.share[r] > 0:
                        st.probe += 1
                    if st.probe:
                        want_x[r] = np.clip(base_x + p.probe[(st.probe - 1) % len(p.probe)], lo_x, hi_x)
                continue
            predictable[r] = True
            plan = plans[r] = self._plan(ctx, r, st, xs)
            want_w[r], want_x[r] = plan.best
            remaining[r] = st.predictor.remaining_steps(float(jobs.remaining[r]))
            gain[r] = remaining[r] * plan.gain

        score = 2 * las
        if predictable.any():
            rows = np.flatnonzero(predictable)
            benefit_rank = np.empty(rows.size, dtype=np.int64)
            benefit_rank[lexorder(-gain[rows], jobs.arrival[rows])] = np.arange(1, rows.size + 1)
            score[rows] = las[rows] + benefit_rank
        level = mlfq_level(score, p.thresholds)
        order = lexorder(level, jobs.arrival)

        cores = want_w * want_x
        capped = jobs.max_cpus > 0
        cores = np.where(capped, np.minimum(cores, jobs.max_cpus), cores)
        cores = np.maximum(cores, jobs.min_cpus)
        gpus = np.zeros(n, dtype=np.int64)
        free_g, free_c = ctx.capacity, ctx.cpu_capacity if p.unified else math.inf
        for r in order.tolist():
            if want_w[r] <= free_g and cores[r] <= free_c:
                gpus[r] = want_w[r]
                free_g -= int(want_w[r])
                free_c -= int(cores[r])
            if free_g == 0:
                break
        cpus = np.where(gpus > 0, cores, 0)
        if plans and (free_g > 0 or free_c > 0):
            self._grow(plans, remaining, gpus, cpus, free_g, free_c, capped | (jobs.min_cpus > 0))
        return Shares(gpus=gpus, cpus=cpus if p.unified else None)

    def _grow(self, plans: dict[int, _Plan], remaining: np.ndarray, gpus: np.ndarray, cpus: np.ndarray,
              free_g: int, free_c: float, fixed_cores: np.ndarray) -> None:
        """Leftover GPUs and cores, one increase move at a time, largest benefit first. A job whose
        next move does not fit stops growing (its moves are a chain)."""
        heap = [(-remaining[r] * plan.growth[0][2], r, 0) for r, plan in plans.items()
                if gpus[r] > 0 and plan.growth and not fixed_cores[r]]
        heapq.heapify(heap)
        while heap:
            _, r, k = heapq.heappop(heap)
            w, x, _ = plans[r].growth[k]
            dg, dc = w - int(gpus[r]), w * x - int(cpus[r])
            if dg > free_g or dc > free_c:
                continue
            gpus[r], cpus[r] = w, w * x
            free_g -= dg
            free_c -= dc
            if k + 1 < len(plans[r].growth):
                heapq.heappush(heap, (-remaining[r] * plans[r].growth[k + 1][2], r, k + 1))

    def wakeup(self, ctx: Context) -> float | None:
        if self._ingest(ctx):
            return math.nextafter(ctx.now, math.inf)  # re-plan at once: a job became predictable
        return self._next_replan if self._next_replan > ctx.now else ctx.now + self.params.replan_s



def mlfq_level(score: np.ndarray, thresholds: tuple[float, ...]) -> np.ndarray:
    """Queue index per job: 0 below thresholds[0], 1 below thresholds[1], …, len(thresholds) for
    the rest (the last queue is unbounded)."""
    return np.searchsorted(np.asarray(thresholds, dtype=float), score, side="right")
