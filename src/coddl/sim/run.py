"""Run a SimConfig: build the cluster and workload once, replay it through each policy."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from coddl.core.cluster import Cluster
from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable, load_coddl_curves
from coddl.perf.heterogeneity import type_speed_matrix
from coddl.perf.interference import ColocationTable
from coddl.placement.sharing import SharingRule
from coddl.policies.registry import make_policy
from coddl.queues.config import load_queues
from coddl.queues.model import QueueError, QueueSet
from coddl.queues.policy import QueuedPolicy
from coddl.scheduler import Scheduler
from coddl.sim.config import SimConfig
from coddl.sim.engine import SimResult, simulate
from coddl.sim.estimator_rate import EstimatorRate
from coddl.sim.fit import fit_to_cluster
from coddl.sim.reconfig import ReconfigCost
from coddl.sim.workload import Skipped, build_workload, build_workload_coddl_authors, curves_for
from coddl.traces import Trace, load_trace


@dataclass
class Prepared:
    cluster: Cluster
    curves: CurveTable
    specs: list[JobSpec]
    type_speed: np.ndarray  # [t, m]: model m on the cluster's type t vs. its curve (perf/heterogeneity.py)
    # placement-dependent rates: charged with --rate estimator, and the placer's scorer on mixed clusters
    estimator: EstimatorRate | None = None
    # trace jobs left out (the model draw's rules, jobs larger than the cluster), with the reason
    skipped: list[Skipped] = field(default_factory=list)
    queues: QueueSet | None = None  # teams and quotas (SimConfig.queues)
    colocation: ColocationTable | None = None  # what a co-tenant costs (SimConfig.sharing)


def build_cluster(cfg: SimConfig) -> Cluster:
    if cfg.cluster:
        from coddl.clusterspec import load_cluster

        return load_cluster(cfg.cluster)
    return Cluster.for_gpus(cfg.gpus, cfg.gpus_per_node)


def prepare(cfg: SimConfig, trace: Trace | None = None, curves: CurveTable | None = None) -> Prepared:
    """The cluster and the workload every policy of ``cfg`` replays; ``trace`` (and ``curves``)
    given instead of loaded by name when the jobs come from elsewhere (a cluster's own history).
    Jobs larger than the cluster are found here, before any simulation, and handled by
    ``cfg.oversized``."""
    rate = cfg.rate_model
    cluster = build_cluster(cfg)
    trace = trace if trace is not None else load_trace(cfg.trace, vc=cfg.vc, limit=cfg.jobs)
    curves = curves_for(trace, curves if curves is not None else load_coddl_curves(cfg.curves))
    skipped: list[Skipped] = []
    if cfg.model_draw == "coddl-authors":
        specs, skipped = build_workload_coddl_authors(trace, curves)
    else:
        specs = build_workload(trace, curves, seed=cfg.seed)
    specs, too_big = fit_to_cluster(specs, cluster, cfg.oversized)
    if cfg.shared_jobs == "one-gpu":
        specs = [one_gpu_shareable(s) for s in specs]
    queues = None
    if cfg.queues:
        queues, specs, outside = fit_to_queues(cfg.queues, specs, cluster)
        too_big += outside
    type_speed = type_speed_matrix(cluster.type_names, cluster.gpu_types, curves.names)
    estimator = None
    if rate == "estimator" or len(cluster.type_names) > 1:
        estimator = EstimatorRate(cluster, curves.extended(cluster.total_gpus), type_speed, cfg.allow_mixing)
    colocation = None
    if SharingRule.parse(cfg.sharing).shares:
        colocation = ColocationTable.build(cluster.type_names, curves.names)
    return Prepared(cluster, curves, specs, type_speed, estimator, skipped + too_big, queues, colocation)


def one_gpu_shareable(spec: JobSpec) -> JobSpec:
    """``shared_jobs=one-gpu``: a trace job asking for one GPU becomes a shareable one-GPU job (as
    Gavel space-shares and Gandiva packs single-GPU jobs); it then never grows beyond its GPU."""
    if spec.requested_gpus != 1 or spec.shares_gpu:
        return spec
    return replace(spec, shareable=True, min_gpus=1, max_gpus=1)


def run_policy(prep: Prepared, policy: str, cfg: SimConfig, *, check: bool = False,
               progress: Callable[[int], None] | None = None, queued: bool = False) -> SimResult:
    """Replay the workload through ``policy`` (over ``prep.queues`` when ``queued``)."""
    pol = QueuedPolicy(prep.queues, lambda: make_policy(policy)) if queued and prep.queues else make_policy(policy)
    sched = Scheduler(prep.cluster, pol, prep.curves, seed=cfg.seed, type_speed=prep.type_speed,
                      validate=check, sharing=SharingRule.parse(cfg.sharing), retained=prep.colocation,
                      clash=prep.colocation.clashes if prep.colocation is not None else None)
    sched.placer.allow_mixing = cfg.allow_mixing
    est = prep.estimator
    if est is not None and len(prep.cluster.type_names) > 1:
        table = sched.table
        sched.placer.scorer = lambda job, per_node, types: est.shape_rate(int(table.model[table.row[job]]),
                                                                          per_node, types)
    rate_model = est if cfg.rate_model == "estimator" else None
    res = simulate(prep.specs, sched, ReconfigCost(cfg.reconfig), rate_model=rate_model, check=check,
                   progress=progress, charge_restarts=cfg.charge_restarts)
    res.policy = queued_label(policy) if queued else policy
    return res


def queued_label(policy: str) -> str:
    """How a run of ``policy`` over queues is labelled beside the run without them."""
    return f"{policy}+queues"


def fit_to_queues(path: str, specs: list[JobSpec], cluster: Cluster) -> tuple[QueueSet, list[JobSpec], list[Skipped]]:
    """The queue file's queues, the jobs their queues can ever hold, and the others (left out of
    every run, with and without queues, so that runs compare on the same jobs)."""
    queues = load_queues(path)
    try:
        quotas = queues.quotas(cluster.total_gpus, cluster.total_cpus)
    except QueueError as e:  # the file's quotas do not fit this cluster: say which file
        raise QueueError(f"{path}: {e}") from None
    big = queues.too_large(specs, quotas)
    out = {s.job_id for s, _, _ in big}
    skipped = [Skipped(s.job_id, s.requested_gpus, f"needs {max(s.requested_gpus, s.min_gpus)} GPUs, queue {q} "
                       f"can hold {cap}") for s, q, cap in big]
    return queues, [s for s in specs if s.job_id not in out], skipped
