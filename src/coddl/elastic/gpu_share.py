"""A sharing job's limits on its GPU, set in each of its workers before the job's code runs.

The server packs jobs that ask for part of a GPU (``gpu_fraction`` < 1, or ``shareable``) several to
one GPU (``coddl.placement.sharing``). Each worker of such a job finds its share in its environment
(``CODDL_GPU_FRACTION``, ``CODDL_GPU_SHAREABLE``, ``CODDL_GPU_MEMORY_GB``, which the job's own code or
a command job's program may read too) and ``apply`` limits it as far as the platform allows:

* compute, where an MPS control daemon is reachable from the worker (``CUDA_MPS_PIPE_DIRECTORY``,
  by default ``/tmp/nvidia-mps``, exists): ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = ⌈100 × fraction⌉,
  for a job that declared a fraction. The CUDA driver reads it when the process first initialises
  CUDA, so it is set before anything in the worker touches CUDA. Without MPS the GPU time-slices
  between the tenants' contexts, and there is nothing to set. (A confined worker has a /tmp of its
  own: an operator who runs MPS for isolated jobs points ``CUDA_MPS_PIPE_DIRECTORY`` at a directory
  outside /tmp, which the server's environment passes on to its workers.)
* memory: PyTorch's caching allocator in the worker will not hold more than a fraction of the
  device (``torch.cuda.set_per_process_memory_fraction``) — ``gpu_memory_gb`` over the device's
  total, or else the share the packer counted the job as (its fraction; half for a shareable job).
  It is queued to run when the process initialises CUDA (``torch.cuda._lazy_call``, as torch's own
  seeding is), because the device's total is known only then and because a worker that never
  touches CUDA should not create a context for it. It limits this process's PyTorch allocator, not
  the device: what other libraries or a command job's program allocate is not limited.
* without CUDA a slot is CPU cores, which its tenants share by being pinned to the same ones (the
  executor's pinning, ``coddl.runtime.executors.driver.local_pin``): nothing to do here.

A whole-GPU job carries none of these variables, and ``apply`` does nothing for it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Mapping

FRACTION_ENV = "CODDL_GPU_FRACTION"
SHAREABLE_ENV = "CODDL_GPU_SHAREABLE"
MEMORY_ENV = "CODDL_GPU_MEMORY_GB"
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
MPS_DEFAULT_PIPE = "/tmp/nvidia-mps"
GIB = 1 << 30


@dataclass(frozen=True)
class GpuShare:
    """What a job asked for of its GPU (the job file's fields of the same names)."""

    fraction: float = 1.0
    shareable: bool = False
    memory_gb: float | None = None

    @property
    def shares(self) -> bool:
        return self.fraction < 1.0 or self.shareable

    @property
    def packed(self) -> float:
        """The part of its GPU the packer counts the job as (``JobSpec.packing_fraction``)."""
        if self.fraction < 1.0:
            return self.fraction
        return 0.5 if self.shareable else 1.0

    def to_environ(self) -> dict[str, str]:
        """The worker environment that carries the share (nothing for a whole-GPU job)."""
        if not self.shares:
            return {}
        env = {FRACTION_ENV: repr(float(self.fraction)), SHAREABLE_ENV: "1" if self.shareable else "0"}
        if self.memory_gb is not None:
            env[MEMORY_ENV] = repr(float(self.memory_gb))
        return env

    @staticmethod
    def from_environ(environ: Mapping[str, str]) -> GpuShare | None:
        """The share a worker was given, or None (a whole-GPU job, or values that are not a share:
        the server writes these variables itself, so that is a bug to ignore rather than a reason
        to fail the job)."""
        raw = environ.get(FRACTION_ENV)
        if raw is None:
            return None
        try:
            fraction = float(raw)
            memory = environ.get(MEMORY_ENV)
            memory_gb = float(memory) if memory is not None else None
        except ValueError:
            return None
        if not 0.0 < fraction <= 1.0 or (memory_gb is not None and not 0.0 < memory_gb < math.inf):
            return None
        share = GpuShare(fraction, environ.get(SHAREABLE_ENV) == "1", memory_gb)
        return share if share.shares else None

    def memory_fraction(self, total_bytes: int) -> float:
        """The share of a device of ``total_bytes`` the job's allocator may hold, in (0, 1]."""
        if self.memory_gb is not None and total_bytes > 0:
            return max(1e-6, min(1.0, self.memory_gb * GIB / total_bytes))
        return self.packed


def mps_reachable(environ: Mapping[str, str], isdir: Callable[[str], bool] = os.path.isdir) -> bool:
    """An MPS control daemon's pipe directory is visible from here (where the CUDA driver looks)."""
    return isdir(environ.get(MPS_PIPE_ENV) or MPS_DEFAULT_PIPE)


@dataclass(frozen=True)
class Limits:
    """What ``apply`` does for one worker: ``env`` to set before CUDA initialises, and the allocator
    limit to set when it does (None: none)."""

    share: GpuShare | None
    env: dict[str, str] = field(default_factory=dict)
    memory_limit: bool = False
    mps: bool = False

    def describe(self, cuda: bool) -> str:
        if self.share is None:
            return ""
        s = self.share
        what = f"gpu_fraction {s.fraction:g}" if s.fraction < 1.0 else "shareable (packed as half a GPU)"
        if not cuda:
            return f"coddl: {what}: no CUDA here; this slot's CPU cores are shared with its co-tenants"
        compute = (f"MPS, {MPS_THREADS_ENV}={self.env[MPS_THREADS_ENV]}" if MPS_THREADS_ENV in self.env
                   else "MPS" if self.mps else "time-slicing (no MPS control daemon reachable)")
        memory = (f"{s.memory_gb:g} GiB" if s.memory_gb is not None else f"{s.packed:g} of the device")
        memory = (f"PyTorch's allocator limited to {memory}" if self.memory_limit else
                  f"its program's memory is its own to limit (its share: {memory}, in {FRACTION_ENV}/{MEMORY_ENV})")
        return f"coddl: {what}: compute shared by {compute}; {memory}"


def limits(environ: Mapping[str, str], in_process: bool = True,
           isdir: Callable[[str], bool] = os.path.isdir) -> Limits:
    """The limits of a worker whose environment is ``environ`` (the decision, without touching CUDA).
    ``in_process``: the job's code runs in this process (an elastic job), so its PyTorch allocator can
    be limited; a command job's program is another process, which gets only the environment."""
    share = GpuShare.from_environ(environ)
    if share is None:
        return Limits(None)
    mps = mps_reachable(environ, isdir)
    env: dict[str, str] = {}
    if mps and share.fraction < 1.0:
        threads = min(100, max(1, math.ceil(100.0 * share.fraction - 1e-9)))
        own = environ.get(MPS_THREADS_ENV, "")
        if own.isdigit() and 0 < int(own) < threads:  # the job asked for less itself: that stands
            threads = int(own)
        env[MPS_THREADS_ENV] = str(threads)
    return Limits(share, env, memory_limit=in_process, mps=mps)


def apply(environ: os._Environ | dict[str, str] | None = None, in_process: bool = True,
          announce: Callable[[str], None] = print) -> Limits:
    """Put this worker's limits in place: call it after the worker's environment is set and before
    anything touches CUDA (``coddl.elastic.worker.run_worker``). A no-op for a whole-GPU job."""
    environ = os.environ if environ is None else environ
    decided = limits(environ, in_process)
    share = decided.share
    if share is None:
        return decided
    environ.update(decided.env)
    import torch

    cuda = torch.version.cuda is not None or torch.version.hip is not None
    if cuda and decided.memory_limit:
        def limit_memory() -> None:
            device = torch.cuda.current_device()
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(share.memory_fraction(total), device)

        lazy = getattr(torch.cuda, "_lazy_call", None)
        if lazy is not None:
            lazy(limit_memory)
        else:  # (a torch without it: pay the context now rather than run unlimited)
            try:
                if torch.cuda.is_available():
                    limit_memory()
            except RuntimeError as e:
                announce(f"coddl: could not limit GPU memory: {e}")
    announce(decided.describe(cuda and _has_device(environ)))
    return decided


def _has_device(environ: Mapping[str, str]) -> bool:
    """Whether a CUDA device is to be used, judged without initialising CUDA: the executor names the
    slot's GPU in CUDA_VISIBLE_DEVICES only where CUDA exists (an empty or -1 value hides them all)."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    return visible is not None and visible.strip() not in ("", "-1")
