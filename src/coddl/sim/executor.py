"""SimExecutor: carries out a plan in virtual time, behind the same ``Executor`` protocol as the
real executors (``runtime/executors/base.py``).

It never decides. For every action it asks the rate model how fast the job runs on its new GPUs,
charges the reconfiguration pause, tells the scheduler the new rate and keeps the time the job
will finish if nothing else changes; when the engine's clock reaches it, ``events()`` reports the
job's exit, as a real executor reports a worker's. Only jobs named in the plan are touched. What
the real executors do in addition — launching processes, killing orphans — has nothing to do here.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import numpy as np

from coddl.core.allocation import ActionKind, Plan
from coddl.core.job import JobId
from coddl.policies.base import ThroughputSample
from coddl.runtime.executors.base import ExitEvent, LaunchSpec, WorkerRecord
from coddl.scheduler import Scheduler
from coddl.sim.reconfig import ReconfigCost

_SUSPEND = ActionKind.SUSPEND


class RateModel(Protocol):
    def rate(self, model: int, gpus: tuple[int, ...], cpus: int) -> float:
        """Steps/s of ``model`` on exactly these GPUs with ``cpus`` CPU cores."""


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


@dataclass
class ColocationLog:
    """Per sharing job, the seconds it ran and the seconds its co-tenants cost it: ∫ (1 − retained)
    dt over its running time, so ran ÷ (ran − lost) is how many times slower co-location made it."""

    ran: dict[JobId, float] = field(default_factory=dict)
    lost: dict[JobId, float] = field(default_factory=dict)
    _open: dict[JobId, tuple[float, float]] = field(default_factory=dict)  # job → (since, retained)

    def change(self, job: JobId, now: float, retained: float | None) -> None:
        """The job's co-location changed at ``now`` (None: it stopped running)."""
        since, kept = self._open.pop(job, (now, 1.0))
        if now > since:
            self.ran[job] = self.ran.get(job, 0.0) + (now - since)
            self.lost[job] = self.lost.get(job, 0.0) + (now - since) * (1.0 - kept)
        if retained is not None:
            self._open[job] = (now, retained)

    def running(self, job: JobId) -> bool:
        return job in self._open

    def slowdown(self, job: JobId) -> float:
        ran = self.ran.get(job, 0.0)
        return ran / (ran - self.lost.get(job, 0.0)) if ran > 0 else 1.0


class SimExecutor:
    """``now`` is the engine's virtual clock: ``apply`` acts at it and ``events`` reports the exits
    due at it."""

    kind = "sim"

    def __init__(self, scheduler: Scheduler, reconfig: ReconfigCost, rate_model: RateModel | None = None,
                 audit: WorkAudit | None = None, sample_noise: float | None = None, seed: int = 0) -> None:
        self.scheduler = scheduler
        self.cluster = scheduler.cluster
        self.notify: Callable[[], None] = lambda: None
        self.now = 0.0
        self.reconfig = reconfig
        self.rate_model = rate_model or CurveRate(scheduler)
        # the common case, by GPU count on one type with free reconfigurations, is a table lookup
        self._by_count = (isinstance(self.rate_model, CurveRate) and len(scheduler.cluster.type_names) == 1
                          and reconfig.name == "zero")
        self.audit = audit
        # None: report no samples (no policy needs them); otherwise each (re)configured job reports
        # its rate × (1 + N(0, sample_noise)), as a real job's first measured steps would
        self.sample_noise = sample_noise
        self._noise = np.random.default_rng(seed)
        # predicted exits: (time, sequence, job, version); a job's version moves with every action,
        # so a superseded prediction is recognised when it comes up instead of searched for
        self._heap: list[tuple[float, int, JobId, int]] = []
        self._version: dict[JobId, int] = {}
        self._seq = 0
        self.colocation = ColocationLog()  # filled only for sharing jobs

    # ------------------------------------------------------------------ the Executor protocol
    def register(self, launch: LaunchSpec) -> None:
        """Nothing to launch: a simulated job is its row in the scheduler's table."""

    def cancel(self, job_id: JobId) -> None:
        self._version.pop(job_id, None)

    def reap(self, workers: Sequence[WorkerRecord]) -> int:
        return 0

    def close(self) -> None:
        self._heap.clear()

    def abandon(self) -> None:
        """Nothing runs outside the simulation: forgetting the predicted exits is all there is."""
        self._heap.clear()

    def apply(self, plan: Plan) -> None:
        """Apply the plan at ``now``: new rates for the jobs it names, and their predicted exits."""
        s = self.scheduler
        t = s.table
        now = self.now
        version, heap = self._version, self._heap
        rate_col, model_col, row = t.rate, t.model, t.row
        curves, speed0 = s.curves.rate, s.type_speed[0]
        shared = s.sharing.gpu_of if s.sharing is not None else {}
        for a in plan.actions:
            job = a.job_id
            v = version.get(job, 0) + 1
            version[job] = v
            r = row[job]
            m = int(model_col[r])
            if self._by_count:  # CurveRate's answer on a one-type cluster; no pause to charge
                k = len(a.new)
                rate = float(curves[m, k] * speed0[m]) if k else 0.0
                resume_at = now if a.kind is _SUSPEND else max(now, float(t.paused_until[r]))
            else:
                rate = self.rate_model.rate(m, a.new, a.cpus)
                pause = self.reconfig.pause(a, s.curves.names[m], 1.0 / rate if rate > 0 else 0.0)
                resume_at = max(now + pause, float(t.paused_until[r]) if a.kind is not _SUSPEND else now)
            if job in shared or self.colocation.running(job):
                kept = s.sharing.retained(job) if job in shared else None
                if kept is not None:  # beside co-tenants: the co-location model's share of its solo speed
                    rate *= kept
                self.colocation.change(job, now, kept)
            if t.t0[r] != now:  # the step that produced this action has advanced the row already
                t.advance(r, now)
            rate_col[r] = rate
            t.paused_until[r] = resume_at
            if self.audit is not None:
                self.audit.change(job, now, rate, resume_at)
            if rate > 0 and self.sample_noise is not None:
                self._sample(a, r, rate)
            if rate > 0:
                self._seq += 1
                heapq.heappush(heap, (resume_at + float(t.total_work[r] - t.work0[r]) / rate, self._seq, job, v))

    def events(self) -> list[ExitEvent]:
        """The exits due at ``now`` (each job's latest prediction only)."""
        heap, version, now = self._heap, self._version, self.now
        out = []
        while heap and heap[0][0] <= now:
            _, _, job, v = heapq.heappop(heap)
            if version.get(job) == v:
                del version[job]
                if self.colocation.running(job):
                    self.colocation.change(job, now, None)
                out.append(ExitEvent(job, True, now))
        return out

    # ------------------------------------------------------------------ virtual time
    def next_time(self) -> float:
        """When the next predicted exit is due (∞: none); superseded predictions are dropped."""
        heap, version = self._heap, self._version
        while heap and version.get(heap[0][2]) != heap[0][3]:
            heapq.heappop(heap)
        return heap[0][0] if heap else np.inf

    def _sample(self, a, r: int, rate: float) -> None:
        s = self.scheduler
        nodes = len(set(s.cluster.node_of_gpu[list(a.new)].tolist()))
        noisy = rate * max(0.05, 1.0 + self._noise.normal(0.0, self.sample_noise)) if self.sample_noise else rate
        s.observe(a.job_id, ThroughputSample(self.now, len(a.new), nodes, a.cpus, noisy, float(s.table.work0[r])))
