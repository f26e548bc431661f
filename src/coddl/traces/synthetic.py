"""Synthetic traces for load sweeps: Poisson arrivals at a chosen offered load.

Job sizes come from an empirical distribution (Gavel's Philly (duration, GPUs) pairs), sampled as
whole pairs. The arrival rate is not estimated from the distribution's mean — Philly's GPU-time is
so heavy-tailed that a few thousand jobs would miss the target by far. Instead the sizes are drawn
first and the Poisson process is conditioned on its span: given the last arrival, the arrivals of a
Poisson process are uniform order statistics, i.e. exponential gaps rescaled to that span. So the
trace is Poisson at rate (n - 1) / span and its offered load is the target exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np

from coddl.traces.gavel import JobSizeDistribution, philly_job_sizes
from coddl.traces.model import Trace, TraceError, TraceJob



@lru_cache(maxsize=1)
def philly_digest_sizes() -> JobSizeDistribution:
    """The (duration, GPUs) pairs of the bundled Philly digest's 82,247 jobs: scaling studies draw
    their jobs from the trace the simulator's figures are quoted on."""
    from coddl.traces.loader import load_trace

    jobs = load_trace("philly").jobs
    return JobSizeDistribution(np.array([j.duration for j in jobs], dtype=np.float64),
                               np.array([j.num_gpus for j in jobs], dtype=np.int64))


DEMANDS: dict[str, Callable[[], JobSizeDistribution]] = {"philly": philly_job_sizes,
                                                         "philly-digest": philly_digest_sizes}


def poisson_trace(num_jobs: int, load: float, cluster_gpus: int, seed: int,
                  demand: str = "philly") -> Trace:
    """``num_jobs`` jobs whose Σ gpus×duration / (span × cluster_gpus) equals ``load``.

    Deterministic for a seed. Jobs wider than the cluster are not drawn (they could never run).
    """
    if num_jobs < 1:
        raise TraceError(f"poisson: num_jobs: expected a positive integer, got {num_jobs}")
    if not load > 0:
        raise TraceError(f"poisson: load: expected a positive number, got {load}")
    if cluster_gpus < 1:
        raise TraceError(f"poisson: cluster_gpus: expected a positive integer, got {cluster_gpus}")
    if demand not in DEMANDS:
        raise TraceError(f"poisson: demand: unknown {demand!r}; known: {', '.join(DEMANDS)}")
    sizes = DEMANDS[demand]().fitting(cluster_gpus)
    if not len(sizes.gpus):
        raise TraceError(f"poisson: cluster_gpus: no {demand} job fits on {cluster_gpus} GPUs")
    rng = np.random.default_rng(seed)
    durations, gpus = sizes.sample(rng, num_jobs)
    span = float(np.dot(durations, gpus)) / (load * cluster_gpus)
    arrivals = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0, num_jobs - 1))))
    if num_jobs > 1:
        arrivals *= span / arrivals[-1]
    jobs = [TraceJob(f"poisson-{i}", float(a), int(g), duration=float(d))
            for i, (a, g, d) in enumerate(zip(arrivals, gpus, durations))]
    meta = {"format": "synthetic", "demand": demand, "load": load, "cluster_gpus": cluster_gpus,
            "seed": seed, "rate_per_s": (num_jobs - 1) / span if num_jobs > 1 else 0.0}
    return Trace(f"poisson-{demand}-load{load:g}-n{num_jobs}-s{seed}", jobs, source="synthetic", meta=meta)
