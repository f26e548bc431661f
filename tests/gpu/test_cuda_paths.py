"""The CUDA paths on a real GPU: what the CPU suite cannot reach.

Every test here skips without a CUDA device (CI has none). On a GPU host, ``make test-gpu`` runs
them: a job's rank forms an NCCL group on its slot's GPU and keeps its model, its batches and its
random state there, a stop and a restart resume from a checkpoint taken on the GPU, two sharing jobs
train on one GPU at once with PyTorch's allocator held to each one's share (and, where an MPS
control daemon runs, their compute through MPS), the job inspection times its first steps on the
device, the local executor and cluster inspection count the host's GPUs, and a server on the GPU runs
a whole-GPU job and a half-GPU one through it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from coddl.elastic import state
from coddl.elastic.gpu_share import MPS_PIPE_ENV, GpuShare
from coddl.elastic.job import ElasticJob, JobConfig, JobPhase
from coddl.elastic.pool import WorkerPool

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here (run on a GPU host)")

TRAINER = str(Path(__file__).with_name("gpu_trainer.py"))
GLOBAL_BATCH = 48
SAMPLES = 480
PARAMETERS = 16 * 64 + 64 + 64 + 1  # the trainer's MLP


@pytest.fixture(scope="module")
def pool() -> WorkerPool:
    pool = WorkerPool()
    pool.warm()
    return pool


def config(job_dir: Path, steps: int, env: dict[str, str] | None = None, **overrides) -> JobConfig:
    base = {"STEPS": str(steps), "GLOBAL_BATCH": str(GLOBAL_BATCH), "SAMPLES": str(SAMPLES), "STEP_SLEEP": "0.01"}
    defaults = dict(job_id=job_dir.name, entry=TRAINER, job_dir=job_dir, env={**base, **(env or {})}, report_s=0.02,
                    verify=True, pg_timeout_s=30.0, checkpoint_s=0.0, start_timeout_s=120.0)
    return JobConfig(**{**defaults, **overrides})


def wait_for_step(job: ElasticJob, step: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while (p := job.poll().progress) is None or p.step < step:
        assert time.monotonic() < deadline and not job.poll().phase.settled, f"no step {step}: {job.poll()}"
        time.sleep(0.01)


def seen(job_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(job_dir.glob("seen-*.json"))]


def logged_steps(job_dir: Path) -> list[int]:
    return sorted(json.loads(line)["step"] for p in job_dir.glob("steps-*.jsonl") for line in p.read_text().splitlines())


def worker_logs(job_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted((job_dir / "logs").iterdir()))


def test_a_rank_trains_in_an_nccl_group_on_its_gpu_and_resumes_on_it_after_a_stop(tmp_path: Path, pool) -> None:
    job_dir = tmp_path / "one-gpu"
    with ElasticJob(config(job_dir, 80), pool) as job:
        job.start([0])
        wait_for_step(job, 20)
        job.stop()
        stopped_at = job.poll().progress.step
        assert job.poll().phase is JobPhase.STOPPED
        checkpoint = state.load_checkpoint(job_dir)
        assert checkpoint["step"] == stopped_at and len(checkpoint["rng"]["cuda"]) == 1  # the GPU's generator too
        job.start([0])
        report = job.wait(120)
    assert report.phase is JobPhase.FINISHED and report.failures == 0 and report.progress.step == 80
    assert logged_steps(job_dir) == list(range(1, 81))  # every step applied once across the restart
    runs = seen(job_dir)
    assert sorted(r["start"] for r in runs) == [0, stopped_at]
    for r in runs:
        assert r["backend"] == "nccl" and r["visible"] == "0"
        assert r["parameters_on"] == r["batches_on"][0] == "cuda:0"
        assert r["device"] == torch.cuda.get_device_name(0)
    losses = [json.loads(line)["loss"] for p in job_dir.glob("steps-*.jsonl") for line in p.read_text().splitlines()]
    assert all(map(torch.isfinite, torch.tensor(losses)))


def test_two_sharing_jobs_train_on_one_gpu_at_once_each_held_to_its_memory(tmp_path: Path, pool) -> None:
    share = GpuShare(0.5, memory_gb=4.0).to_environ()
    over = config(tmp_path / "over", 60, {**share, "ALLOC_GB": "6", "STEP_SLEEP": "0.03"})
    under = config(tmp_path / "under", 60, {**share, "ALLOC_GB": "2", "STEP_SLEEP": "0.03"})
    with ElasticJob(over, pool) as a, ElasticJob(under, pool) as b:
        a.start([0])
        b.start([0])
        wait_for_step(a, 5)
        wait_for_step(b, 5)
        assert a.poll().phase is b.poll().phase is JobPhase.RUNNING  # both on GPU 0 at once
        ra, rb = a.wait(120), b.wait(120)
    assert ra.phase is rb.phase is JobPhase.FINISHED
    assert [r["alloc"] for r in seen(over.job_dir)] == ["refused"]  # 6 GiB over a 4 GiB share
    assert [r["alloc"] for r in seen(under.job_dir)] == ["allocated"]
    for cfg in (over, under):
        assert "PyTorch's allocator limited to 4 GiB" in worker_logs(cfg.job_dir)
        assert seen(cfg.job_dir)[0]["backend"] == "nccl"


def test_the_job_inspection_times_its_first_steps_on_the_gpu(tmp_path: Path, pool) -> None:
    cfg = config(tmp_path / "inspected", 40, {"CODDL_INSPECT": "1", "STEP_SLEEP": "0"}, verify=False)
    with ElasticJob(cfg, pool) as job:
        job.start([0])
        report = job.wait(120)
    assert report.phase is JobPhase.FINISHED and logged_steps(cfg.job_dir) == list(range(1, 41))
    inspection = report.inspection
    assert inspection is not None and inspection.param_bytes == 4 * PARAMETERS
    batches = {b for b, _ in inspection.timings}
    assert len(batches) >= 2 and all(s > 0 for _, s in inspection.timings), inspection.timings
    assert inspection.step_overhead_s >= 0 and inspection.global_batch == GLOBAL_BATCH


def test_the_local_executor_counts_this_hosts_gpus_and_their_memory() -> None:
    from coddl.errors import ConfigError
    from coddl.runtime.executors.local import local_cluster

    count = torch.cuda.device_count()
    cluster = local_cluster(count)
    total = min(torch.cuda.get_device_properties(i).total_memory for i in range(count)) / 2**30
    assert cluster.gpu_types["local"].memory_gb == pytest.approx(total, rel=0.02)
    with pytest.raises(ConfigError, match=f"--gpus {count + 1}: this host has {count} GPUs"):
        local_cluster(count + 1)


def test_cluster_inspection_measures_nccl_where_a_node_has_two_gpus_and_refuses_with_one_line_else(tmp_path) -> None:
    out = tmp_path / "cluster.yaml"
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "cluster", "inspect", "--out", str(out), "--gpus", "2",
                        "--sizes-kib", "4,1024", "--reps", "2"], capture_output=True, text=True, timeout=300)
    if torch.cuda.device_count() < 2:
        assert r.returncode == 2, r.stdout + r.stderr
        assert "--gpus 2: this host has 1 GPUs" in r.stderr and "Traceback" not in r.stderr
        return
    assert r.returncode == 0, r.stderr[-3000:]
    from coddl.clusterspec import load_cluster

    cluster = load_cluster(out)
    assert cluster.nodes[0].gpu_type == torch.cuda.get_device_name(0) and cluster.links.intra_node_gbps > 0


def test_a_server_on_this_gpu_runs_a_whole_gpu_job_with_nccl_and_a_half_gpu_job_within_its_memory(tmp_path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
    from runtime_live import Server

    srv = Server(tmp_path / "state", gpus=1, policy="fifo", extra=("--sharing", "pack"))
    try:
        job = {"command": ["python", TRAINER], "steps": 40, "batch_size": GLOBAL_BATCH, "min_gpus": 1, "max_gpus": 1,
               "model": "tiny"}
        whole = srv.submit({**job, "name": "whole", "env": {"STEP_SLEEP": "0.01"}})
        half = srv.submit({**job, "name": "half", "gpu_fraction": 0.5, "gpu_memory_gb": 4.0,
                           "env": {"STEP_SLEEP": "0.01", "ALLOC_GB": "6"}})
        for job_id in (whole, half):
            srv.wait_job(job_id, lambda j: j["status"] == "finished", 240, "finished")
        saw = {}
        for job_id in (whole, half):
            log = srv.admin.get(f"/jobs/{job_id}/logs").text
            saw[job_id] = json.loads(log.split("gpu_trainer saw ", 1)[1].splitlines()[0])
            assert saw[job_id]["backend"] == "nccl" and saw[job_id]["parameters_on"] == "cuda:0", log[-2000:]
        assert saw[half]["alloc"] == "refused" and "PyTorch's allocator limited to 4 GiB" in srv.admin.get(
            f"/jobs/{half}/logs").text
        node = srv.admin.get("/cluster").json()["nodes"][0]
        assert node["gpus"] and len(node["gpus"]) == 1
    finally:
        srv.cleanup()


@pytest.mark.skipif(shutil.which("nvidia-cuda-mps-control") is None, reason="no MPS control daemon on this host")
def test_a_fractional_job_computes_through_mps_where_a_daemon_runs(tmp_path: Path, pool) -> None:
    pipe, logs = tmp_path / "mps-pipe", tmp_path / "mps-log"
    pipe.mkdir()
    logs.mkdir()
    env = {**os.environ, MPS_PIPE_ENV: str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
    subprocess.run(["nvidia-cuda-mps-control", "-d"], env=env, check=True, timeout=30)
    try:
        cfg = config(tmp_path / "mps", 30, {**GpuShare(0.25).to_environ(), MPS_PIPE_ENV: str(pipe)})
        with ElasticJob(cfg, pool) as job:
            job.start([0])
            wait_for_step(job, 5)
            servers = subprocess.run(["nvidia-cuda-mps-control"], input="get_server_list\n", env=env,
                                     capture_output=True, text=True, timeout=30).stdout.split()
            report = job.wait(120)
        assert report.phase is JobPhase.FINISHED, (report, (logs / "control.log").read_text()[-2000:])
        assert servers, "no MPS server started for the job's client"
        assert "compute shared by MPS, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in worker_logs(cfg.job_dir)
    finally:
        subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=env, text=True, timeout=30)
