"""SimExecutor: carries out a plan in virtual time.

It never decides. For every action it asks the rate model how fast the job runs on its new GPUs,
charges the reconfiguration pause, tells the scheduler the new rate and returns when the job will
finish if nothing else changes. Only jobs named in the plan are touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from coddl.core.allocation import ActionKind, Plan
from coddl.core.job import JobId
from coddl.policies.base import ThroughputSample
from coddl.scheduler import Scheduler
from coddl.sim.reconfig import ReconfigCost


class RateModel(Protocol):
    def rate(self, model: int, gpus: tuple[int, ...], cpus: int) -> float:
        """Iterations/s of ``model`` on exactly these GPUs with ``cpus`` CPU cores."""


@dataclass
class CurveRate:
    """Throughput from the measured curves, by GPU count and type (placement-agnostic)."""

    scheduler: Scheduler

    def rate(self, model: int, gpus: tuple[int, ...], cpus: int) -> float:
        s = self.scheduler
        if not gpus:
            return 0.0
        node = s.cluster.node_of_gpu[gpus[0]]
        t = s.cluster.node_type_index[node]
        return float(s.curves.rate[model, len(gpus)] * s.type_speed[t, model])


@dataclass
class WorkAudit:
    """Independent bookkeeping of ∫ rate dt per job, to check the simulator never loses or invents
    work (used by the tests' invariants)."""

    rate: dict[JobId, float] = field(default_factory=dict)
    since: dict[JobId, float] = field(default_factory=dict)
    done: dict[JobId, float] = field(default_factory=dict)

    def change(self, job: JobId, now: float, rate: float, starts_at: float) -> None:
        self.close(job, now)
        self.rate[job] = rate
        self.since[job] = starts_at

    def close(self, job: JobId, now: float) -> float:
        r = self.rate.get(job, 0.0)
        if r:
            self.done[job] = self.done.get(job, 0.0) + r * max(0.0, now - self.since[job])
        self.rate[job] = 0.0
        self.since[job] = now
        return self.done.get(job, 0.0)


class SimExecutor:
    def __init__(self, scheduler: Scheduler, reconfig: ReconfigCost, rate_model: RateModel | None = None,
                 audit: WorkAudit | None = None, sample_noise: float | None = None, seed: int = 0) -> None:
        self.scheduler = scheduler
        self.reconfig = reconfig
        self.rate_model = rate_model or CurveRate(scheduler)
        self.audit = audit
        # None: report no samples (no policy needs them); otherwise each (re)configured job reports
        # its rate × (1 + N(0, sample_noise)), as a real job's first measured steps would
        self.sample_noise = sample_noise
        self._noise = np.random.default_rng(seed)

    def apply(self, plan: Plan, now: float) -> list[tuple[JobId, float]]:
        """Apply the plan; returns (job, predicted completion time) for jobs that now run."""
        s = self.scheduler
        t = s.table
        names = s.curves.names
        out: list[tuple[JobId, float]] = []
        for a in plan:
            r = t.row[a.job_id]
            m = int(t.model[r])
            rate = self.rate_model.rate(m, a.new, a.cpus)
            pause = self.reconfig.pause(a, names[m], 1.0 / rate if rate > 0 else 0.0)
            resume_at = max(now + pause, float(t.paused_until[r]) if a.kind is not ActionKind.SUSPEND else now)
            s.set_rate(a.job_id, rate, now, paused_until=resume_at)
            if self.audit is not None:
                self.audit.change(a.job_id, now, rate, resume_at)
            if rate > 0 and self.sample_noise is not None:
                nodes = len(set(s.cluster.node_of_gpu[list(a.new)].tolist()))
                noisy = rate * max(0.05, 1.0 + self._noise.normal(0.0, self.sample_noise)) if self.sample_noise else rate
                s.observe(a.job_id, ThroughputSample(now, len(a.new), nodes, a.cpus, noisy, float(t.work0[r])))
            if rate > 0:
                remaining = float(t.total_work[r] - t.work0[r])
                out.append((a.job_id, resume_at + remaining / rate))
        return out
