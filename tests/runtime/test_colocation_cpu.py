"""The co-location benchmark (benchmarks/colocation_cpu.py) measures what it says: two single-threaded
CPU-bound trainings pinned to one core time-slice it, so each keeps roughly half its solo rate, while
on separate cores each keeps more. A bug in the pinning (affinity not applied, both jobs on different
cores in 'shared', the jobs not overlapping in time, a wrong ratio) breaks one of these bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# real processes for ~16 s; it measures the machine, so nothing may run beside it
pytestmark = [pytest.mark.slow, pytest.mark.alone]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "colocation_cpu.py"


def test_sharing_one_core_halves_each_job_and_apart_does_not() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPU cores for the 'apart' configuration")
    out = subprocess.run([sys.executable, str(BENCH), "--seconds", "2", "--repeats", "1", "--warmup", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    jobs = result["jobs"]
    assert set(jobs) == {"mlp", "cnn"}
    for name, job in jobs.items():
        assert job["alone_steps_per_s"] > 0, name
        assert job["retained_shared"] < 0.8, (name, job)  # one core between two: each loses a large share
        assert job["retained_apart"] > job["retained_shared"], (name, job)
    assert 0.6 < result["shared_normalised_combined_throughput"] < 1.3, result
