"""Summary metrics of a simulated (or real) run: JCT statistics, makespan, queueing, utilisation,
and fairness: Themis's finish-time fairness ρ per job and Jain's index over users (or groups).

Finish-time fairness, as ``coddl.policies.themis`` defines it (ALGORITHMS.md §4, Mahajan et al.,
NSDI'20): ρ_j = T_shared / T_ideal, T_shared the job's JCT (finish − arrival) and T_ideal its whole
run time alone on its fair share of the cluster, G/N GPUs. The policy takes N, the jobs in the
system, at each decision; after the run that number has changed many times over a job's life, so
here N is its time-average over the job's lifetime, N̄_j = ∫_{a_j}^{f_j} n(t) dt ÷ (f_j − a_j), n(t) the
jobs arrived and not finished at t (the job itself included, so N̄_j ≥ 1). The fair share G/N̄_j is
then made a feasible allocation exactly as the policy does: k = ⌊G/N̄_j⌋ GPUs clipped to the job's
[min, max] (max: its own, else its model's largest useful count, at most G), and when G/N̄_j < k
(a share below the job's minimum) the job runs at k for a G/N̄_j ÷ k fraction of the time:
T_ideal = W_j / (P_j(k) · min(1, G/N̄_j ÷ k)), P_j the model's throughput curve (at the curve's
reference speed: no GPU-type factor). It depends on the run only through n(t), so ρ > 1 means the
job finished later than it would have on its equal share of the cluster as contended as it was.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from coddl.perf.curves import CurveTable
from coddl.sim.engine import SimResult


@dataclass(frozen=True)
class Summary:
    policy: str
    jobs: int
    avg_jct: float
    median_jct: float
    p95_jct: float
    makespan: float
    avg_queueing_delay: float
    gpu_utilisation: float  # busy GPU-time / (capacity × makespan)
    cpu_utilisation: float  # held core-time / (cores × makespan)
    reconfigurations: int  # grow + shrink + migrate + suspend + resume
    fragmentation: float  # time-averaged share of free GPUs stranded on partly used nodes
    wall_s: float
    events: int
    # finish-time fairness ρ (module docstring): nan when summarised without throughput curves
    mean_rho: float = float("nan")
    max_rho: float = float("nan")
    share_rho_over_1: float = float("nan")  # jobs that missed their fair finish time
    share_rho_over_1_5: float = float("nan")  # jobs slowed more than 1.5× their fair time
    jain_users: float = float("nan")  # Jain's index of the mean ρ of each user (or group)
    fairness_groups: str = ""  # "user", or "group" (the trace's group / VC) when it names no users
    # jobs that co-tenants on their GPU made more than 1.5× slower while they ran (nan: no sharing)
    share_slowed_by_sharing: float = float("nan")

    def row(self) -> dict[str, float | int | str]:
        return asdict(self)


def time_integral(series: list[tuple[float, float]], end: float) -> float:
    """∫ value dt of a step series of (time, value) change points, up to ``end``."""
    if not series:
        return 0.0
    t = np.array([s[0] for s in series] + [max(end, series[-1][0])])
    v = np.array([s[1] for s in series], dtype=float)
    return float((np.diff(t) * v).sum())


def jain_index(x) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²) of non-negative values: 1 when all are equal, down to
    1/n when one value holds everything; nan for no values, 1 when all are zero."""
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return float("nan")
    sq = float((x ** 2).sum())
    return float(x.sum() ** 2 / (x.size * sq)) if sq > 0 else 1.0


def mean_active_jobs(arrival: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """N̄_j: the time-average number of jobs in the system (arrived, not finished) over each job's
    lifetime [arrival_j, finish_j], the job itself included."""
    t = np.unique(np.concatenate([arrival, finish]))
    n = np.searchsorted(np.sort(arrival), t, "right") - np.searchsorted(np.sort(finish), t, "right")
    area = np.concatenate([[0.0], np.cumsum(np.diff(t) * n[:-1])])  # ∫_{t_0}^{t_i} n dt
    span = finish - arrival
    inside = area[np.searchsorted(t, finish)] - area[np.searchsorted(t, arrival)]
    return np.where(span > 0, inside / np.where(span > 0, span, 1.0), 1.0)


def fair_times(res: SimResult, curves: CurveTable) -> np.ndarray:
    """T_ideal of each of ``res.records`` (in order): its run time alone on its fair share G/N̄_j,
    as Themis computes it (module docstring)."""
    recs = res.records
    g = res.capacity
    curves = curves.extended(g)
    arrival = np.array([r.spec.arrival for r in recs], dtype=float)
    finish = np.array([r.finish for r in recs], dtype=float)
    model = np.array([curves.model_index(r.spec.model) for r in recs], dtype=np.int64)
    lo = np.array([r.spec.min_gpus for r in recs], dtype=np.int64)
    top = np.array([r.spec.max_gpus if r.spec.max_gpus is not None else -1 for r in recs], dtype=np.int64)
    hi = np.minimum(np.where(top >= 0, top, curves.max_gpus[model]), g)  # the scheduler's max_gpus
    hi = np.maximum(hi, np.minimum(lo, g))
    fair = g / mean_active_jobs(arrival, finish)
    k_fair = np.clip(np.floor(fair), lo, np.maximum(hi, lo)).astype(np.int64)
    p_fair = curves.rate[model, np.minimum(k_fair, curves.kmax)] * np.minimum(1.0, fair / k_fair)
    work = np.array([r.spec.total_work for r in recs], dtype=float)
    return work / p_fair


def finish_time_fairness(res: SimResult, curves: CurveTable) -> np.ndarray:
    """ρ_j = JCT_j / T_ideal_j of each of ``res.records`` (in order)."""
    jct = np.array([r.jct for r in res.records], dtype=float)
    return jct / fair_times(res, curves)


def fairness_groups(res: SimResult) -> tuple[str, list[str]]:
    """What Jain's index is taken over: ("user", each job's user) when the trace names users, else
    ("group", each job's group — its Philly virtual cluster, its Slurm account), in record order."""
    recs = res.records
    if any(r.spec.user != "default" for r in recs):
        return "user", [r.spec.user for r in recs]
    return "group", [r.spec.account or "default" for r in recs]


def group_jain(values: np.ndarray, groups: list[str]) -> float:
    """Jain's index of each group's mean of ``values``."""
    means: dict[str, list[float]] = {}
    for g, v in zip(groups, values):
        means.setdefault(g, []).append(float(v))
    return jain_index([np.mean(v) for v in means.values()])


def summarise(res: SimResult, curves: CurveTable | None = None) -> Summary:
    """``res``'s summary; with the throughput ``curves`` the workload ran on, also its fairness."""
    recs = res.records
    if not recs:
        return Summary(res.policy, 0, *([0.0] * 7), 0, 0.0, res.wall_s, res.events)
    fair = {}
    if curves is not None:
        rho = finish_time_fairness(res, curves)
        kind, groups = fairness_groups(res)
        fair = dict(mean_rho=float(rho.mean()), max_rho=float(rho.max()),
                    share_rho_over_1=float((rho > 1.0).mean()), share_rho_over_1_5=float((rho > 1.5).mean()),
                    jain_users=group_jain(rho, groups), fairness_groups=kind)
    jct = np.array([r.jct for r in recs])
    arrival = np.array([r.spec.arrival for r in recs])
    finish = np.array([r.finish for r in recs])
    start = arrival.min()
    end = finish.max()
    makespan = float(end - start)
    busy = time_integral(res.utilisation, end)
    frag_span = end - res.fragmentation[0][0] if res.fragmentation else 0.0
    starts = sum(1 for r in recs if r.first_start == r.first_start)
    if res.colocation is not None:
        fair["share_slowed_by_sharing"] = float(np.mean([res.colocation.slowdown(r.spec.job_id) > 1.5 for r in recs]))
    return Summary(
        policy=res.policy,
        jobs=len(recs),
        avg_jct=float(jct.mean()),
        median_jct=float(np.median(jct)),
        p95_jct=float(np.percentile(jct, 95)),
        makespan=makespan,
        avg_queueing_delay=float(np.mean([r.queueing_delay for r in recs])),
        gpu_utilisation=busy / (res.capacity * makespan) if makespan > 0 else 0.0,
        cpu_utilisation=time_integral(res.cores, end) / (res.cpu_capacity * makespan) if makespan > 0 else 0.0,
        reconfigurations=max(0, res.actions - starts),
        fragmentation=time_integral(res.fragmentation, end) / frag_span if frag_span > 0 else 0.0,
        wall_s=res.wall_s,
        events=res.events,
        **fair,
    )
