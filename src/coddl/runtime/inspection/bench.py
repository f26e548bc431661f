"""What one inspection rank does: describe its node, then time gloo all-reduces in the groups it belongs to.

Every rank joins one world (gloo, on a TCPStore the inspecting process holds) and creates every
measured group, since ``new_group`` is collective over the world; the groups then run one after the
other, with a world barrier between them, so no two measurements share a link. Each group times each
message size ``reps`` times after one warm-up and reports the fastest: on a shared, loaded machine the
slow repetitions measure the other work (a rank not scheduled in time), not the link; the slowest
member's time is the group's (an all-reduce ends when its last rank has the result).
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class NodeFacts:
    """What a rank sees of its node: device type (a CUDA device's name, or "cpu"), cores, memory."""

    host: str
    device: str
    device_memory_gb: float | None
    cores: int
    memory_gb: float


def node_facts() -> NodeFacts:
    import psutil
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        device, dev_mem = props.name, round(props.total_memory / 2**30, 1)
    else:
        device, dev_mem = "cpu", None
    return NodeFacts(host=socket.gethostname(), device=device, device_memory_gb=dev_mem,
                     cores=len(os.sched_getaffinity(0)), memory_gb=round(psutil.virtual_memory().total / 2**30, 1))


def run_rank(rank: int, world: int, host: str, port: int, groups: list[list[int]], sizes: list[int],
             reps: int, timeout_s: float = 60.0) -> dict:
    """Join the world, run every group this rank is in; return its node's facts and its fastest times
    ``{group index: {size: seconds}}`` (under ``medians``, the fastest of ``reps``)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore(host, port, world, is_master=False, timeout=datetime.timedelta(seconds=timeout_s))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        handles = [dist.new_group(members) for members in groups]
        medians: dict[int, dict[int, float]] = {}
        for gi, (members, group) in enumerate(zip(groups, handles)):
            if rank in members:
                medians[gi] = {}
                for size in sizes:
                    t = torch.ones(max(1, size // 4), dtype=torch.float32, device=device)
                    dist.all_reduce(t, group=group)  # warm-up: connections, buffers
                    times = []
                    for _ in range(reps):
                        dist.barrier(group=group)
                        if backend == "nccl":
                            torch.cuda.synchronize()
                        start = time.perf_counter()
                        dist.all_reduce(t, group=group)
                        if backend == "nccl":
                            torch.cuda.synchronize()
                        times.append(time.perf_counter() - start)
                    medians[gi][size] = min(times)
            dist.barrier()
    finally:
        dist.destroy_process_group()
    return {"rank": rank, "facts": asdict(node_facts()), "medians": medians}


class InspectionRank:
    """A Ray actor hosting one rank on the node it is pinned to."""

    def run(self, *args) -> dict:  # noqa: ANN002 - run_rank's arguments
        return run_rank(*args)
