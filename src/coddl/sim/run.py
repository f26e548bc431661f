"""Run a SimConfig: build the cluster and workload once, replay it through each policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from coddl.core.cluster import Cluster
from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable, load_coddl_curves
from coddl.policies.registry import make_policy
from coddl.scheduler import Scheduler
from coddl.sim.config import ConfigError, SimConfig
from coddl.sim.engine import SimResult, simulate
from coddl.sim.reconfig import RECONFIG_MODELS, ReconfigCost
from coddl.sim.workload import build_workload, curves_for
from coddl.traces import load_trace


@dataclass
class Prepared:
    cluster: Cluster
    curves: CurveTable
    specs: list[JobSpec]


def build_cluster(cfg: SimConfig) -> Cluster:
    if cfg.cluster:
        from coddl.core.clusterspec import load_cluster

        return load_cluster(cfg.cluster)
    if cfg.gpus < 1 or cfg.gpus_per_node < 1:
        raise ConfigError(f"gpus: expected a positive number of GPUs, got {cfg.gpus}")
    return Cluster.for_gpus(cfg.gpus, cfg.gpus_per_node)


def prepare(cfg: SimConfig) -> Prepared:
    if cfg.reconfig not in RECONFIG_MODELS:
        raise ConfigError(f"reconfig: unknown model {cfg.reconfig!r}; valid: {', '.join(RECONFIG_MODELS)}")
    trace = load_trace(cfg.trace, vc=cfg.vc, limit=cfg.jobs)
    curves = curves_for(trace, load_coddl_curves(cfg.curves))
    specs = build_workload(trace, curves, seed=cfg.seed)
    return Prepared(build_cluster(cfg), curves, specs)


def run_policy(prep: Prepared, policy: str, cfg: SimConfig, *, check: bool = False,
               progress: Callable[[int], None] | None = None) -> SimResult:
    sched = Scheduler(prep.cluster, make_policy(policy), prep.curves, seed=cfg.seed)
    res = simulate(prep.specs, sched, ReconfigCost(cfg.reconfig), check=check, progress=progress)
    res.policy = policy
    return res
