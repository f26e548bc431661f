"""CPU sensitivity: how a job's throughput depends on the CPU cores per GPU it is given.

Input pipelines (decoding, augmentation) run on CPU cores; with too few cores per GPU the GPU
waits for data, with more than it needs the extra cores are wasted. Synergy (OSDI'22) measured this
for twelve models on 1-GPU jobs with 1 … 24 cores (``profiles/synergy-cpu-sensitivity.csv``),
normalised so that 1.0 is the GPU-proportional share of their servers: 3 cores per GPU (24 cores,
8 GPUs) with 62.5 GB of memory. We read the memory column of that proportional share and treat
the measured factor as a function of cores per GPU for a data-parallel job of any width, because
every GPU worker runs its own input pipeline on its own cores.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coddl.perf.curves import data_path

SYNERGY_CPU = "profiles/synergy-cpu-sensitivity.csv"
PROPORTIONAL_CORES_PER_GPU = 3.0  # Synergy's normalisation point: factor 1.0
PROPORTIONAL_MEMORY_GB = 62.5


@dataclass(frozen=True, slots=True)
class CpuProfile:
    """One model's measured CPU sensitivity: ``factor[i]`` is the throughput with ``cores[i]``
    cores per GPU relative to the proportional share. ``batch`` and ``iter_time_s`` are Synergy's
    1-GPU batch size and step time at the proportional share."""

    model: str
    batch: int
    iter_time_s: float
    cores: tuple[float, ...]
    factor: tuple[float, ...]

    def at(self, cores_per_gpu: float | np.ndarray) -> float | np.ndarray:
        """Linear interpolation between measured core counts. Outside the measured range the
        nearest measurement holds: fewer than one core per GPU (a worker time-sharing a core) is
        charged the one-core factor, more than the largest measured count gains nothing more."""
        out = np.interp(cores_per_gpu, self.cores, self.factor)
        return float(out) if np.ndim(out) == 0 else out


@dataclass(frozen=True)
class CpuSensitivity:
    """Per-model CPU profiles; models without one are CPU-insensitive (factor 1.0 everywhere)."""

    profiles: dict[str, CpuProfile]

    def factor(self, model: str, cores_per_gpu: float) -> float:
        p = self.profiles.get(model)
        return 1.0 if p is None else float(p.at(cores_per_gpu))

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.profiles)


def load_synergy_cpu(path: str | Path | None = None, memory_gb: float = PROPORTIONAL_MEMORY_GB) -> CpuSensitivity:
    """Synergy's table at one memory column (default: the proportional 62.5 GB)."""
    p = Path(path) if path else data_path(SYNERGY_CPU)
    points: dict[str, dict[float, float]] = {}
    meta: dict[str, tuple[int, float]] = {}
    with open(p, newline="") as f:
        for row in csv.DictReader(f):
            if float(row["mem_gb"]) != memory_gb:
                continue
            points.setdefault(row["model"], {})[float(row["cpus"])] = float(row["normalized_throughput"])
            meta[row["model"]] = (int(row["batch"]), float(row["iter_time_s"]))
    if not points:
        raise ValueError(f"{p.name}: no rows with mem_gb = {memory_gb}")
    profiles = {}
    for model, pts in points.items():
        cores = tuple(sorted(pts))
        profiles[model] = CpuProfile(model, meta[model][0], meta[model][1], cores, tuple(pts[c] for c in cores))
    return CpuSensitivity(profiles)
