"""Forming, dissolving and waiting on a generation's process group, on the job's long-lived store.

A new group costs 4-40 ms on the job's existing store (a fresh tcp:// rendezvous costs 0.5-0.7 s), so every
membership gets its own key prefix in the same store rather than its own store.
"""

from __future__ import annotations

import datetime
import time
from typing import Callable

import torch
import torch.distributed as dist

from coddl.elastic.protocol import pg_prefix


class CollectiveFailed(Exception):
    """A collective errored or was abandoned because the coordinator announced a failure."""


# Process groups and works given up on after a failure. Dropping the last reference to a gloo group
# runs its destructor, which joins its worker threads and so blocks until the stuck collective hits
# the timeout; keeping them alive lets the rank move on at once. One entry per failure survived.
_abandoned: list[object] = []


def select_backend() -> tuple[str, torch.device]:
    """NCCL on the slot's GPU when CUDA exists (the executor exposes one GPU per worker), else gloo."""
    if torch.cuda.is_available():
        torch.cuda.set_device(0)
        return "nccl", torch.device("cuda", 0)
    return "gloo", torch.device("cpu")


def device_name(device: torch.device) -> str:
    """The device's model as the estimator names GPU types (``NVIDIA A100-SXM4-80GB``), or ``cpu``."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def form(store: dist.Store, generation: int, rank: int, world_size: int, backend: str, timeout_s: float) -> None:
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(pg_prefix(generation), store),
        rank=rank,
        world_size=world_size,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def dissolve(pending: list[dist.Work] | None = None) -> None:
    """Destroy the default group; with ``pending`` (a failure), keep it and its works referenced."""
    if not dist.is_initialized():
        return
    if pending is not None:
        _abandoned.append((dist.group.WORLD, pending))
    dist.destroy_process_group()


def wait(work: dist.Work, abandon: Callable[[], bool], slice_s: float = 0.1) -> None:
    """Wait for ``work``; every ``slice_s`` without completion ask ``abandon`` whether to give up.

    A blocking ``wait()`` would sit out the whole process-group timeout on ranks that are not the dead
    worker's neighbours; slicing the wait lets them see the coordinator's failure notice instead.
    A gloo collective's ``wait(timeout)`` leaves the operation running when it times out, so it slices
    the wait without a busy loop. NCCL may treat a timed-out wait as fatal for the communicator, so
    there the slices poll ``is_completed()`` instead (untested here: no GPU on the dev machines).
    """
    if dist.get_backend() == "nccl":
        _poll(work, abandon, slice_s)
        return
    timeout = datetime.timedelta(seconds=slice_s)
    while True:
        try:
            work.wait(timeout)
            return
        except RuntimeError:
            if work.is_completed():
                # is_completed() is True after success and failure alike, and the collective may have
                # finished just after the slice timed out: only a plain wait() tells which. Calling
                # a success a failure would send this rank to wait for a failure membership that
                # never comes (the job stalls until the generation wait times out).
                try:
                    work.wait()
                except RuntimeError as failed:
                    raise CollectiveFailed(str(failed).splitlines()[0]) from failed
                return
        if abandon():
            raise CollectiveFailed("abandoned: the coordinator announced a failure")


def _poll(work: dist.Work, abandon: Callable[[], bool], slice_s: float) -> None:
    deadline = time.monotonic() + slice_s
    while not work.is_completed():
        if time.monotonic() >= deadline:
            if abandon():
                raise CollectiveFailed("abandoned: the coordinator announced a failure")
            deadline = time.monotonic() + slice_s
        time.sleep(0.0005)
    work.wait()  # orders the current CUDA stream after the collective
