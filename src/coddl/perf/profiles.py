"""Gavel's measured per-GPU-type throughputs as typed data (the per-model speed of each GPU type
that ``perf/heterogeneity.py`` builds ``type_speed`` from). The same measurements in the profile
format, for the estimator, come from ``perf/convert.py``."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

from coddl.perf.curves import data_path

GAVEL_SIMULATION = "profiles/gavel/simulation_throughputs.json"


@dataclass(frozen=True, slots=True)
class GavelThroughputs:
    """Steps/s of each Gavel job type running alone, by GPU type and GPU count.

    ``steps[(gpu_type, job_type, k)]``; GPU types upper-cased (``K80``, ``P100``, ``V100``); only
    consolidated placements (Gavel's ``*_unconsolidated`` tables are left out).
    """

    steps: dict[tuple[str, str, int], float]

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({t for t, _, _ in self.steps}))

    @property
    def job_types(self) -> tuple[str, ...]:
        return tuple(sorted({j for _, j, _ in self.steps}))

    def speed_by_type(self, job_type: str, reference: str = "V100") -> dict[str, float]:
        """One-GPU speed of each GPU type relative to ``reference`` for this job type: the
        per-model compute speed factor of ALGORITHMS.md §6."""
        ref = self.steps[(reference, job_type, 1)]
        return {t: self.steps[(t, job_type, 1)] / ref for t in self.gpu_types if (t, job_type, 1) in self.steps}


def load_gavel_throughputs(path: str | Path | None = None) -> GavelThroughputs:
    raw = json.loads(Path(path or data_path(GAVEL_SIMULATION)).read_text())
    steps: dict[tuple[str, str, int], float] = {}
    for gpu_type, table in raw.items():
        if gpu_type.endswith("_unconsolidated"):
            continue
        for key, runs in table.items():
            job_type, k = ast.literal_eval(key)
            steps[(gpu_type.upper(), job_type, int(k))] = float(runs["null"])
    return GavelThroughputs(steps)
