"""``LocalExecutor``: the embedded default — every job's workers are processes on this host.

A GPU is a slot: with CUDA a worker sees only its slot's GPU (``CUDA_VISIBLE_DEVICES``, set by
``ElasticJob``); without CUDA a slot is a CPU worker and the cluster is logical (``--gpus N``), which
is how the whole system runs and is tested on a laptop. Workers are forked from a pool that has
already imported torch, so starting or growing a job does not pay the 3-4 s torch import, and each
confines itself as the server's ``Isolation`` says before the job's code runs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Sequence

import psutil
import torch

from coddl.core.cluster import Cluster, GpuType, Node
from coddl.elastic.pool import WorkerPool
from coddl.errors import ConfigError
from coddl.runtime.executors.base import WorkerRecord
from coddl.runtime.executors.driver import ElasticExecutor, ExecutorSettings, local_pin
from coddl.runtime.isolation import ConfinedLauncher, Isolation


def local_cluster(gpus: int) -> Cluster:
    """This host as a one-node cluster of ``gpus`` slots with the host's CPU cores (and, with CUDA, the
    smallest of its first ``gpus`` GPUs' memory, which the packer of GPU-sharing jobs counts)."""
    if gpus < 1:
        raise ConfigError(f"--gpus must be >= 1, got {gpus}")
    memory = None
    if torch.cuda.is_available():
        if gpus > torch.cuda.device_count():
            raise ConfigError(f"--gpus {gpus}: this host has {torch.cuda.device_count()} GPUs")
        memory = gpu_memory_gib(gpus)
    node = Node(name=socket.gethostname() or "localhost", gpus=gpus, gpu_type="local", cpus=os.cpu_count() or 1)
    kind = GpuType("local") if memory is None else GpuType("local", memory_gb=memory)
    return Cluster(nodes=(node,), gpu_types={"local": kind})


def gpu_memory_gib(gpus: int, run=subprocess.run) -> float | None:  # noqa: ANN001 - subprocess.run-like
    """The smallest memory (GiB) of GPUs 0..gpus-1 as ``nvidia-smi`` reports it (in MiB), or None. Asked
    of nvidia-smi rather than torch: torch would create a CUDA context in the server for it."""
    try:
        out = run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                  capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    try:
        mib = [float(line) for line in out.stdout.split()][:gpus]
    except ValueError:
        return None
    return min(mib) / 1024.0 if len(mib) == gpus and min(mib) > 0 else None


class LocalExecutor(ElasticExecutor):
    kind = "local"

    def __init__(self, gpus: int, settings: ExecutorSettings = ExecutorSettings(),
                 isolation: Isolation = Isolation("none"), work_dir: Path | None = None) -> None:
        """``work_dir`` (the jobs directory) is where the start-up probe of the isolation runs."""
        cluster = local_cluster(gpus)
        launcher = ConfinedLauncher(WorkerPool(), isolation)
        # pay the forkserver's torch import now, not at the first job's start, and refuse to run jobs
        # at all if they cannot be confined as promised
        self.start_s = launcher.probe(work_dir) if work_dir is not None else launcher.pool.warm()
        super().__init__(cluster, launcher, host="127.0.0.1", settings=settings, isolation=isolation)

    def _pin(self, pids: dict[int, int], cores: tuple[int, ...]) -> None:
        local_pin(pids, cores)

    def _worker_record(self, slot: int, pid: int) -> WorkerRecord:
        try:
            started = psutil.Process(pid).create_time()
        except psutil.Error:
            started = None
        return WorkerRecord(slot, pid, started)

    def reap(self, workers: Sequence[WorkerRecord]) -> int:
        """SIGKILL the listed workers that still run: same pid AND same start time, so a recycled pid
        is never touched. Without this, workers of a killed controller could train on (and write a
        checkpoint) next to their own restarted job."""
        killed = 0
        for w in workers:
            try:
                p = psutil.Process(w.pid)
                if w.started is not None and p.create_time() == w.started:
                    os.kill(w.pid, signal.SIGKILL)
                    killed += 1
            except (psutil.Error, ProcessLookupError):
                continue
        return killed
