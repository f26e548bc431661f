"""What-if replay of a cluster's own history: the jobs it really ran, under every policy, beside what
really happened — overall, and for each team.

The history's jobs become a workload exactly as any trace's do (``sim.workload``): each keeps its
arrival, its GPUs and the run time it had on them, with a model drawn (seeded) from the measured
curves so that elastic policies know how it would scale. Each policy then replays it through the
same simulator as ``coddl simulate``, on one process per core, and the recorded run itself becomes a
result of the same shape (its start and end times, its GPUs in use over time), so every table and
plot compares like with like.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from coddl.core.table import JobRecord
from coddl.sim.config import SimConfig
from coddl.sim.engine import SimResult
from coddl.sim.metrics import Summary, jain_index, summarise
from coddl.policies.registry import make_policy
from coddl.queues.report import QueueStats, queue_stats
from coddl.sim.run import Prepared, prepare, queued_label, run_policy
from coddl.traces.history import History
from coddl.traces.model import TraceError

RECORDED = "as recorded"
SAME = 0.05  # a team whose average JCT moves by less than this fraction is "about the same"


@dataclass(frozen=True)
class TeamStats:
    jobs: int
    gpu_hours: float  # as recorded
    avg_jct: float
    median_jct: float
    avg_queueing: float
    mean_slowdown: float  # JCT ÷ the job's recorded run time, averaged over the team's jobs


@dataclass(frozen=True)
class Fairness:
    """How a policy treats the teams against the recorded run."""

    run: str
    better: int  # teams whose average JCT drops by more than SAME
    worse: int  # teams whose average JCT rises by more than SAME
    worst_team: str
    worst_change: float  # the worst-off team's relative change of average JCT
    jain: float  # Jain's index of the teams' mean slowdowns: 1 when every team is slowed alike


@dataclass
class ReplayResult:
    history: History
    prepared: Prepared
    config: SimConfig
    results: dict[str, SimResult]  # RECORDED first, then each policy in the order asked
    summaries: list[Summary]
    teams: dict[str, dict[str, TeamStats]]  # team → run → stats, teams by recorded GPU-hours
    fairness: list[Fairness]  # one per policy
    queues: dict[str, list[QueueStats]] = field(default_factory=dict)  # run → per queue (with --quotas)


def cluster_gpus(history: History, gpus: int | None, gpus_per_node: int) -> int:
    """The replay cluster: ``gpus`` if given, else the history's peak rounded up to whole nodes."""
    if gpus is not None:
        return gpus
    return -(-max(1, history.peak_gpus) // gpus_per_node) * gpus_per_node


def replay(history: History, config: SimConfig, *, workers: int | None = None,
           on_done: Callable[[str], None] | None = None) -> ReplayResult:
    """Replay ``history`` under ``config.policies`` (``config.trace`` is only a label here)."""
    from coddl.runtime.models import runtime_curves  # coddl's own jobs name the runtime's curves

    prep = prepare(config, history.trace(), runtime_curves())
    if prep.skipped:  # a replay keeps every job: one the cluster cannot hold is a --gpus mistake
        s = prep.skipped[0]
        fix = "--quotas" if "queue" in s.reason else "--gpus or --cluster"
        raise TraceError(f"{history.name}: job {s.job_id}: {s.reason.replace('the cluster', 'the replay cluster')} "
                         f"({fix})")
    results = {RECORDED: recorded_result(history, prep)}
    results.update(_run_policies(prep, config, workers, on_done))
    summaries = [summarise(r) for r in results.values()]
    teams = team_stats(history, results)
    queues = {}
    if prep.queues is not None:
        quotas = prep.queues.quotas(prep.cluster.total_gpus, prep.cluster.total_cpus)
        elastic = {p: make_policy(p).elastic for p in config.policies}
        queues = {run: queue_stats(res, prep.queues, quotas, elastic.get(run.removesuffix(queued_label("")), False))
                  for run, res in results.items()}
    return ReplayResult(history, prep, config, results, summaries, teams, fairness(teams, list(results)[1:]), queues)


def recorded_result(history: History, prep: Prepared) -> SimResult:
    """The run as it happened, as a SimResult on the replay's clock (seconds from the first submission)."""
    t0 = history.origin
    by_id = {s.job_id: s for s in prep.specs}
    records = [JobRecord(spec=by_id[r.job.job_id], status=r.state.lower(), finish=r.end - t0,
                         first_start=r.start - t0, attained_service=r.gpu_seconds, resizes=0)
               for r in history.jobs]
    res = SimResult(policy=RECORDED, records=records, capacity=prep.cluster.total_gpus,
                    cpu_capacity=prep.cluster.total_cpus)
    res.utilisation = [(t - t0, used) for t, used in history.usage]
    res.timeline = sorted((r.start - t0, r.job.job_id, r.job.num_gpus) for r in history.jobs)
    return res


def _run_one(prep: Prepared, policy: str, config: SimConfig, queued: bool) -> SimResult:
    return run_policy(prep, policy, config, queued=queued)


def runs_of(prep: Prepared, config: SimConfig) -> list[tuple[str, bool]]:
    """(policy, over queues?) of every run: each policy, then each over the quotas if there are any."""
    return [(p, False) for p in config.policies] + ([(p, True) for p in config.policies] if prep.queues else [])


def _run_policies(prep: Prepared, config: SimConfig, workers: int | None,
                  on_done: Callable[[str], None] | None) -> dict[str, SimResult]:
    """One run per process (the workload is sent along); results in the order asked."""
    runs = runs_of(prep, config)
    label = {run: queued_label(run[0]) if run[1] else run[0] for run in runs}
    n = min(len(runs), workers or os.cpu_count() or 1)
    out: dict[tuple[str, bool], SimResult] = {}
    if n <= 1:
        for run in runs:
            out[run] = _run_one(prep, run[0], config, run[1])
            if on_done:
                on_done(label[run])
    else:
        with ProcessPoolExecutor(max_workers=n) as pool:
            futures = {pool.submit(_run_one, prep, run[0], config, run[1]): run for run in runs}
            for f in as_completed(futures):
                out[futures[f]] = f.result()
                if on_done:
                    on_done(label[futures[f]])
    for run in runs:
        out[run].policy = label[run]
    return {label[run]: out[run] for run in runs}


def team_stats(history: History, results: dict[str, SimResult]) -> dict[str, dict[str, TeamStats]]:
    account = {r.job.job_id: r.account for r in history.jobs}
    ran = {r.job.job_id: max(1.0, r.end - r.start) for r in history.jobs}
    hours: dict[str, float] = {}
    for r in history.jobs:
        hours[r.account] = hours.get(r.account, 0.0) + r.gpu_seconds / 3600
    out: dict[str, dict[str, TeamStats]] = {t: {} for t in sorted(hours, key=lambda t: (-hours[t], t))}
    for run, res in results.items():
        by_team: dict[str, list[JobRecord]] = {}
        for rec in res.records:
            by_team.setdefault(account[rec.spec.job_id], []).append(rec)
        for team, recs in by_team.items():
            jct = np.array([r.jct for r in recs])
            out[team][run] = TeamStats(
                jobs=len(recs), gpu_hours=hours[team], avg_jct=float(jct.mean()), median_jct=float(np.median(jct)),
                avg_queueing=float(np.mean([r.queueing_delay for r in recs])),
                mean_slowdown=float(np.mean([r.jct / ran[r.spec.job_id] for r in recs])))
    return out


def fairness(teams: dict[str, dict[str, TeamStats]], runs: list[str]) -> list[Fairness]:
    out = []
    for run in runs:
        change = {t: s[run].avg_jct / s[RECORDED].avg_jct - 1.0 for t, s in teams.items()}
        worst = max(change, key=lambda t: (change[t], t))
        jain = jain_index([s[run].mean_slowdown for s in teams.values()])
        out.append(Fairness(run, sum(c < -SAME for c in change.values()), sum(c > SAME for c in change.values()),
                            worst, change[worst], jain))
    return out


def best_for_team(stats: dict[str, TeamStats]) -> str:
    """The policy that gives a team its lowest average JCT (the recorded run excluded)."""
    return min((r for r in stats if r != RECORDED), key=lambda r: (stats[r].avg_jct, r))
