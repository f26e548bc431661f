"""A rate model in which a job's throughput depends on its CPU cores per GPU.

``rate = P_m(k) × type speed × cpu_factor_m(cores ÷ k)``: the GPU curve is what the job achieves
with the GPU-proportional core share Synergy normalised to (3 cores per GPU), and the measured CPU
factor scales it. On a cluster whose nodes have exactly 3 cores per GPU every job placed with its
proportional share runs at factor 1.0, so policies that never ask for cores see exactly the rates
of ``CurveRate``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coddl.perf.cpu import CpuSensitivity, load_synergy_cpu
from coddl.scheduler import Scheduler
from coddl.sim.executor import CurveRate


@dataclass
class CpuAwareRate:
    scheduler: Scheduler
    sensitivity: CpuSensitivity = field(default_factory=load_synergy_cpu)

    def __post_init__(self) -> None:
        self._gpu = CurveRate(self.scheduler)
        self._names = self.scheduler.curves.names

    def rate(self, model: int, gpus: tuple[int, ...], cpus: int) -> float:
        base = self._gpu.rate(model, gpus, cpus)
        if base == 0.0:
            return 0.0
        return base * self.sensitivity.factor(self._names[model], cpus / len(gpus))
