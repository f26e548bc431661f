"""Gavel (OSDI'20): its per-virtual-cluster Philly replays and its Philly job-size distribution.

The ``.trace`` files are tab-separated without a header — ``job_type, command, num_steps_arg,
needs_data_dir, total_steps, arrival_time_s, scale_factor`` — and describe work in steps of a
named model, so they replay exactly (model + steps). ``philly_job_distribution.csv`` is not a
trace: it is 33,192 (duration, GPUs) pairs drawn from Philly, which :class:`JobSizeDistribution`
resamples for the synthetic generators.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from coddl.perf.curves import data_path
from coddl.traces._table import Parsed, Table, fail, read_csv, read_text

MSR_FIELDS = ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps",
              "arrival_time_s", "scale_factor")
PHILLY_DISTRIBUTION = "traces/gavel/philly_job_distribution.csv.gz"
_BATCH = re.compile(r"\(batch size (\d+)\)")


def parse_msr(path: Path) -> Parsed:
    """Jobs ``<file stem>-<line>``, grouped by the file's virtual cluster (its stem)."""
    lines, rows = [], []
    for line, raw in enumerate(read_text(path).splitlines(), start=1):
        if raw.strip():
            lines.append(line)
            rows.append(raw.split("\t"))
    if not rows:
        fail(path.name, 1, "rows", "no jobs: the file is empty")
    table = Table(path.name, list(MSR_FIELDS), lines, rows, header_line=None)
    models = table.column("job_type").texts()
    vc = path.name.split(".")[0]
    batches = [_BATCH.search(m) for m in models]
    return Parsed([f"{vc}-{line}" for line in lines], table.column("arrival_time_s").nonneg_floats(),
                  table.column("scale_factor").positive_ints(),
                  {"steps": table.column("total_steps").positive_floats(), "model": models,
                   "batch_size": [int(b.group(1)) if b else None for b in batches],
                   "group": [vc] * len(lines)})


@dataclass(frozen=True)
class JobSizeDistribution:
    """An empirical joint distribution of (duration in s, GPUs): sampling whole pairs keeps the
    correlation between job size and length that separate marginals would lose."""

    durations: np.ndarray
    gpus: np.ndarray

    def fitting(self, max_gpus: int) -> "JobSizeDistribution":
        """The pairs that fit on ``max_gpus`` GPUs (a job larger than the cluster could never run)."""
        keep = self.gpus <= max_gpus
        return JobSizeDistribution(self.durations[keep], self.gpus[keep])

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.integers(0, len(self.durations), size=n)
        return self.durations[idx], self.gpus[idx]


@lru_cache(maxsize=4)
def philly_job_sizes(path: str | None = None) -> JobSizeDistribution:
    """Gavel's Philly (duration, GPUs) pairs, validated like any trace file."""
    table = read_csv(Path(path) if path else data_path(PHILLY_DISTRIBUTION))
    return JobSizeDistribution(table.column("duration_s").positive_floats(),
                               table.column("num_gpus").positive_ints())
