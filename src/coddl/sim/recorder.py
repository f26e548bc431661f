"""What a simulated run leaves behind: the finished jobs and the step series the metrics and plots
are made of. The engine hands the recorder each step's outcome; nothing here changes the run."""

from __future__ import annotations

from dataclasses import dataclass, field

from coddl.core.allocation import Plan
from coddl.core.job import JobId
from coddl.core.table import JobRecord
from coddl.scheduler import Scheduler
from coddl.sim.executor import ColocationLog, WorkAudit


@dataclass
class SimResult:
    policy: str
    records: list[JobRecord]
    capacity: int
    cpu_capacity: int
    # (time, GPUs in use) after every step that changed the allocation
    utilisation: list[tuple[float, int]] = field(default_factory=list)
    # (time, CPU cores held) at each change
    cores: list[tuple[float, int]] = field(default_factory=list)
    # (time, share of free GPUs stranded on partly used nodes) at each change
    fragmentation: list[tuple[float, float]] = field(default_factory=list)
    # (time, job, GPUs) for every action
    timeline: list[tuple[float, JobId, int]] = field(default_factory=list)
    events: int = 0
    steps: int = 0
    actions: int = 0
    wall_s: float = 0.0
    audit: WorkAudit | None = None
    colocation: ColocationLog | None = None  # sharing jobs' time beside co-tenants (None: no sharing)


class Recorder:
    """Appends to a SimResult's series after each scheduling step, only when a value changed."""

    def __init__(self, scheduler: Scheduler, res: SimResult, timeline: bool = True) -> None:
        self.scheduler = scheduler
        self.res = res
        self.timeline = timeline
        self._gpus = self._cores = -1
        self._frag = -1.0

    def step(self, now: float, plan: Plan) -> None:
        s, res = self.scheduler, self.res
        used = s.gpus_in_use
        if used != self._gpus:
            res.utilisation.append((now, used))
            self._gpus = used
        if not plan.actions and self._frag >= 0:
            return
        res.actions += len(plan.actions)
        if self.timeline:
            res.timeline.extend((now, a.job_id, len(a.new)) for a in plan.actions)
        cores = s.cores_in_use
        if cores != self._cores:
            res.cores.append((now, cores))
            self._cores = cores
        frag = s.placer.fragmentation()
        if frag != self._frag:
            res.fragmentation.append((now, frag))
            self._frag = frag
