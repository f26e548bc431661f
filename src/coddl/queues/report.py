"""What each queue got in a run: its jobs' JCT and queueing, the GPU-hours it used and borrowed, and
its quota attainment — how much of the quota it was owed it received.

A queue is owed, at each instant, ``min(demand, nominal)``: its quota, as far as its jobs could use it
(their maximum GPUs under an elastic policy, their request under a rigid one). Attainment is
∫ min(used, nominal) dt ÷ ∫ min(demand, nominal) dt over the run: 1.0 means the queue had its quota
whenever it wanted it. The same measure applies to a run without quotas (how far a policy that
knows nothing of teams is from honouring them) and with them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coddl.core.job import JobSpec
from coddl.queues.model import QueueSet, Quotas
from coddl.sim.engine import SimResult


@dataclass(frozen=True)
class QueueStats:
    queue: str
    nominal_gpus: int
    jobs: int
    avg_jct: float  # seconds; NaN without jobs
    avg_queueing: float
    gpu_hours: float  # used
    borrowed_gpu_hours: float  # used beyond the nominal quota
    owed_gpu_hours: float  # ∫ min(demand, nominal)
    attainment: float  # received ÷ owed of the quota (NaN when it was never owed anything)

    def row(self) -> dict[str, float | int | str]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def demand_of(spec: JobSpec, elastic: bool, capacity: int) -> int:
    """GPUs a job could use: its maximum under an elastic policy, its request under a rigid one."""
    if not elastic:
        return spec.requested_gpus
    return min(capacity, max(spec.min_gpus, spec.max_gpus if spec.max_gpus is not None else spec.requested_gpus))


def queue_stats(res: SimResult, queues: QueueSet, quotas: Quotas, elastic: bool) -> list[QueueStats]:
    """Per-queue figures of a simulated run (``res.timeline`` must have been recorded)."""
    names = queues.names
    qof: dict[str, int] = {}
    jcts: list[list[float]] = [[] for _ in names]
    waits: list[list[float]] = [[] for _ in names]
    t, q, use, dem = [], [], [], []
    for r in res.records:
        i = qof[r.spec.job_id] = queues.queue_of(r.spec.user, r.spec.account)
        jcts[i].append(r.jct)
        waits[i].append(r.queueing_delay)
        d = demand_of(r.spec, elastic, res.capacity)
        t += [r.spec.arrival, r.finish]
        q += [i, i]
        use += [0, 0]
        dem += [d, -d]
    held: dict[str, int] = {}
    for when, job, gpus in res.timeline:
        i = qof.get(job)
        if i is None:
            continue
        t.append(when)
        q.append(i)
        use.append(gpus - held.get(job, 0))
        dem.append(0)
        held[job] = gpus
    for r in res.records:  # a job's GPUs are released when it ends
        if held.get(r.spec.job_id):
            t.append(r.finish)
            q.append(qof[r.spec.job_id])
            use.append(-held[r.spec.job_id])
            dem.append(0)
    ta, qa, ua, da = np.array(t, dtype=float), np.array(q, dtype=np.int64), np.array(use, float), np.array(dem, float)
    end = float(ta.max()) if ta.size else 0.0
    out = []
    for i, name in enumerate(names):
        m = np.flatnonzero(qa == i)
        order = m[np.argsort(ta[m], kind="stable")]
        times = np.r_[ta[order], end]
        dt = np.diff(times)
        used = np.cumsum(ua[order])
        wanted = np.cumsum(da[order])
        nom = float(quotas.nominal[0, i])
        owed = float((np.minimum(wanted, nom) * dt).sum())
        got = float((np.minimum(used, nom) * dt).sum())
        out.append(QueueStats(
            queue=name, nominal_gpus=int(nom), jobs=len(jcts[i]),
            avg_jct=float(np.mean(jcts[i])) if jcts[i] else float("nan"),
            avg_queueing=float(np.mean(waits[i])) if waits[i] else float("nan"),
            gpu_hours=float((used * dt).sum()) / 3600, borrowed_gpu_hours=float((np.maximum(0.0, used - nom) * dt).sum()) / 3600,
            owed_gpu_hours=owed / 3600, attainment=got / owed if owed > 0 else float("nan")))
    return out
