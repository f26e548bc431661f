"""What the inspection does on a node: describe it, then time gloo all-reduces in the groups its ranks belong to.

A node's ranks come from one process that imports torch once: the first rank runs in it, the others
in processes forked from it (``run_node``), as the executors fork workers from a warm pool; forked or
not, each rank is a process of its own with its own gloo connections. Every rank joins one world
(gloo, meeting at the inspecting process's ``rendezvous.StoreServer``) and creates every measured
group, since ``new_group`` is collective over the world; the groups then run one after the other, with
a world barrier between them, so no two measurements share a link. Each group times each message size
``reps`` times after one warm-up and reports the fastest: on a shared, loaded machine the slow
repetitions measure the other work (a rank not scheduled in time), not the link; the slowest member's
time is the group's (an all-reduce ends when its last rank has the result).
"""

from __future__ import annotations

import datetime
import os
import pickle
import signal
import socket
import time
import traceback
from dataclasses import asdict, dataclass

from coddl.runtime.inspection import rendezvous


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


def ready() -> int:
    """Import what a rank needs: most of a rank's start-up (torch, 1.7 s of CPU on the testbed's machine).
    Returns the node's CUDA device count, read through NVML (``torch.cuda.device_count``) so that this
    process, which forks the node's other ranks, does not initialise CUDA before it forks them."""
    import torch
    import torch.distributed  # noqa: F401

    return torch.cuda.device_count()


def rank_device(local: int, devices: int) -> int:
    """The CUDA device of a node's ``local``-th rank: one each (NCCL refuses two ranks of a communicator
    on one device), round-robin if a node has more ranks than devices."""
    return local % max(devices, 1)


def run_rank(rank: int, world: int, store: tuple[str, int, bytes], groups: list[list[int]], sizes: list[int],
             reps: int, timeout_s: float = 60.0, local: int = 0) -> dict:
    """Join the world, run every group this rank is in; return its node's facts, its fastest times
    ``{group index: {size: seconds}}`` (under ``medians``, the fastest of ``reps``) and how long it took to
    meet the others and to measure (under ``seconds``). ``local`` is the rank's place on its node, which
    picks its GPU."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    started = time.monotonic()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank_device(local, torch.cuda.device_count()))
        torch.cuda.set_device(device)
    meeting = rendezvous.connect(*store, timeout_s)  # held here: torch keeps no Python reference to it
    dist.init_process_group(backend, store=meeting, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))
    try:
        handles = [dist.new_group(members) for members in groups]
        met = time.monotonic()
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
        measured = time.monotonic()
    finally:
        dist.destroy_process_group()
    return {"rank": rank, "facts": asdict(node_facts()), "medians": medians,
            "seconds": {"rendezvous": met - started, "measured": measured - met}}


def _fork_rank(rank: int, args: tuple, local: int) -> tuple[int, int]:
    """Rank ``rank`` in a child process; its pid, and the pipe it writes its pickled outcome to."""
    from coddl.elastic.sandbox import set_parent_death_signal

    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: run the rank, report, and leave without the parent's exit handlers
        code = 1
        try:
            os.close(read)
            set_parent_death_signal()  # no rank outlives its node's actor (killed if the inspection stops)
            if os.getppid() == parent:  # else the parent ended before the signal was set
                try:
                    outcome, code = ("ok", run_rank(rank, *args, local=local)), 0
                except BaseException:  # noqa: BLE001 - reported to the parent
                    outcome = ("error", traceback.format_exc(limit=3))
                with os.fdopen(write, "wb") as out:
                    pickle.dump(outcome, out)
        finally:
            os._exit(code)
    os.close(write)
    return pid, read


def _join_rank(rank: int, pid: int, read: int) -> dict:
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"inspection rank {rank} ended without a result (wait status {status})")
    kind, value = pickle.loads(data)
    if kind != "ok":
        raise RuntimeError(f"inspection rank {rank} failed:\n{value}")
    return value


def run_node(ranks: list[int], *args) -> list[dict]:  # noqa: ANN002 - run_rank's arguments after the rank
    """This node's ranks: the first in this process, the others forked from it once torch is imported."""
    ready()
    pending = {r: _fork_rank(r, args, local) for local, r in enumerate(ranks) if local > 0}
    try:
        results = [run_rank(ranks[0], *args, local=0)]
        for r in ranks[1:]:
            results.append(_join_rank(r, *pending.pop(r)))
        return results
    finally:
        for pid, read in pending.values():  # children not joined: this node has failed
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read)


class InspectionNode:
    """A Ray actor on one node: ``ready`` once its process has imported torch, then ``run`` its ranks."""

    def ready(self) -> None:
        ready()

    def run(self, *args) -> list[dict]:  # noqa: ANN002 - run_node's arguments
        return run_node(*args)
