"""Unified CPU–GPU allocation in the real system: a job's workers run pinned to exactly the CPU
cores the placer gave it (GPU-proportional here: the host's cores split evenly over its GPU slots)."""

from __future__ import annotations

import os

import psutil
import pytest
from runtime_live import Server, tiny_job

pytestmark = pytest.mark.slow


def test_each_job_runs_with_affinity_to_exactly_its_cores(tmp_path):
    cores_per_gpu = (os.cpu_count() or 1) // 2
    if cores_per_gpu < 1:
        pytest.skip("needs at least 2 CPU cores")
    srv = Server(tmp_path / "state", gpus=2, policy="max-min")
    try:
        jobs = [srv.submit(tiny_job(f"pinned{i}", steps=400, min_gpus=1, max_gpus=1, step_s=0.05)) for i in range(2)]
        seen: dict[int, set[int]] = {}
        for j in jobs:
            view = srv.wait_job(j, lambda v: v["status"] == "running" and v["workers"] and v["gpus"], 120,
                                "running with a worker")
            (gpu,) = view["gpus"]
            expected = set(range(gpu * cores_per_gpu, (gpu + 1) * cores_per_gpu))
            for w in view["workers"]:  # the worker and what runs the job's code in it (a confined child)
                family = [psutil.Process(w["pid"]), *psutil.Process(w["pid"]).children(recursive=True)]
                assert len(family) >= 2 and {frozenset(p.cpu_affinity()) for p in family} == {frozenset(expected)}
            seen[j] = expected
        assert not seen[jobs[0]] & seen[jobs[1]]
    finally:
        srv.cleanup()
