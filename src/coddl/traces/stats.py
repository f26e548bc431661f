"""Summary figures of a trace, to judge it before simulating it (``coddl trace info``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from coddl.traces.model import Trace

PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class TraceStats:
    """``offered_load`` is Σ gpus×duration / (span × cluster_gpus): above 1 the cluster cannot
    keep up even when perfectly packed. Duration figures cover only jobs that have a duration
    (Pollux and Gavel traces give work instead), and are None when none has."""

    name: str
    jobs: int
    span: float
    gpu_histogram: dict[int, int]
    jobs_with_duration: int
    duration_percentiles: dict[int, float]
    mean_duration: float | None
    total_gpu_time: float
    cluster_gpus: int
    offered_load: float | None


def trace_stats(trace: Trace, cluster_gpus: int) -> TraceStats:
    timed = [j for j in trace.jobs if j.duration is not None]
    durations = np.array([j.duration for j in timed], dtype=float)
    gpu_time = float(np.dot(durations, [j.num_gpus for j in timed])) if timed else 0.0
    span = trace.span
    return TraceStats(
        name=trace.name,
        jobs=len(trace.jobs),
        span=span,
        gpu_histogram=dict(sorted(Counter(j.num_gpus for j in trace.jobs).items())),
        jobs_with_duration=len(timed),
        duration_percentiles=(dict(zip(PERCENTILES, np.percentile(durations, PERCENTILES).tolist()))
                              if timed else {}),
        mean_duration=float(durations.mean()) if timed else None,
        total_gpu_time=gpu_time,
        cluster_gpus=cluster_gpus,
        offered_load=gpu_time / (span * cluster_gpus) if timed and span > 0 and cluster_gpus > 0 else None,
    )
