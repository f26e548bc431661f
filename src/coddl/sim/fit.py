"""Jobs larger than the cluster: found before any simulation, and handled by a documented rule.

A job whose request (or minimum) exceeds the GPUs the cluster has — of its GPU type, if it names
one — can never run under a rigid policy, and a comparison of policies is only fair on the same
jobs. So the simulator names such jobs before it starts and applies one rule to every policy
(``SimConfig.oversized`` / ``--oversized``):

* ``skip`` (default): leave them out and report them (the CoDDL authors' simulator drops them);
* ``cap``: run them with their request and minimum cut to the cluster's size;
* ``fail``: stop with one error line naming them.
"""

from __future__ import annotations

import dataclasses

from coddl.core.cluster import Cluster
from coddl.core.job import JobSpec
from coddl.errors import ConfigError
from coddl.sim.workload import Skipped


def capacity_for(spec: JobSpec, cluster: Cluster) -> int:
    """GPUs the cluster has for ``spec``: of its GPU type when it names one the cluster has."""
    return cluster.capacity_by_type.get(spec.gpu_type, cluster.total_gpus) if spec.gpu_type else cluster.total_gpus


def oversized(specs: list[JobSpec], cluster: Cluster) -> list[JobSpec]:
    """Jobs whose request or minimum exceeds the GPUs the cluster has for them."""
    return [s for s in specs if max(s.requested_gpus, s.min_gpus) > capacity_for(s, cluster)]


def fit_to_cluster(specs: list[JobSpec], cluster: Cluster, rule: str) -> tuple[list[JobSpec], list[Skipped]]:
    """The jobs to simulate under ``rule``, and those it leaves out (with the reason)."""
    big = oversized(specs, cluster)
    if not big:
        return specs, []
    if rule == "fail":
        raise ConfigError(f"oversized: {describe(big, cluster)}; use --oversized skip or cap")
    if rule == "cap":
        capped = {s.job_id: _capped(s, capacity_for(s, cluster)) for s in big}
        return [capped.get(s.job_id, s) for s in specs], []
    ids = {s.job_id for s in big}
    skipped = [Skipped(s.job_id, s.requested_gpus, f"needs {max(s.requested_gpus, s.min_gpus)} GPUs, the cluster "
                       f"has {capacity_for(s, cluster)}") for s in big]
    return [s for s in specs if s.job_id not in ids], skipped


def _capped(spec: JobSpec, cap: int) -> JobSpec:
    lo = min(spec.min_gpus, cap)
    hi = None if spec.max_gpus is None else max(lo, min(spec.max_gpus, cap))
    return dataclasses.replace(spec, requested_gpus=min(spec.requested_gpus, cap), min_gpus=lo, max_gpus=hi)


def describe(big: list[JobSpec], cluster: Cluster, show: int = 10) -> str:
    """``3 jobs need more GPUs than the cluster has (64): philly-1 (128), …``"""
    names = ", ".join(f"{s.job_id} ({max(s.requested_gpus, s.min_gpus)})" for s in big[:show])
    more = f", … and {len(big) - show} more" if len(big) > show else ""
    return (f"{len(big)} job{'s' if len(big) != 1 else ''} need{'s' if len(big) == 1 else ''} more GPUs than "
            f"the cluster has ({cluster.total_gpus}): {names}{more}")
