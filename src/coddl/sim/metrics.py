"""Summary metrics of a simulated (or real) run: JCT statistics, makespan, queueing, utilisation."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

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

    def row(self) -> dict[str, float | int | str]:
        return asdict(self)


def time_integral(series: list[tuple[float, float]], end: float) -> float:
    """∫ value dt of a step series of (time, value) change points, up to ``end``."""
    if not series:
        return 0.0
    t = np.array([s[0] for s in series] + [max(end, series[-1][0])])
    v = np.array([s[1] for s in series], dtype=float)
    return float((np.diff(t) * v).sum())


def summarise(res: SimResult) -> Summary:
    recs = res.records
    if not recs:
        return Summary(res.policy, 0, *([0.0] * 7), 0, 0.0, res.wall_s, res.events)
    jct = np.array([r.jct for r in recs])
    arrival = np.array([r.spec.arrival for r in recs])
    finish = np.array([r.finish for r in recs])
    start = arrival.min()
    end = finish.max()
    makespan = float(end - start)
    busy = time_integral(res.utilisation, end)
    frag_span = end - res.fragmentation[0][0] if res.fragmentation else 0.0
    starts = sum(1 for r in recs if r.first_start == r.first_start)
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
    )
