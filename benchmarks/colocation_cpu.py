"""What sharing one slot costs two jobs, measured on this machine's CPU slots.

Why: the simulator's co-location model (two jobs packed on one GPU, each keeping a fraction of its
solo throughput) comes from Gavel's GPU measurements. In coddl's real system without CUDA a GPU
"slot" is a CPU worker pinned to the slot's cores (``runtime/executors/driver.py: local_pin``, cores
from ``placement/placer.py: _block_cores``); two jobs sharing a slot have their workers pinned to the
same cores. This is the measured counterpart of that model for such slots.

How: two real small trainings — the MLP of ``examples/train_mlp.py`` (batch 128, Adam) and the CNN of
``examples/train_cnn.py`` (batch 64, SGD), models and synthetic data imported from those scripts,
plain optimiser loop, no server — each in its own spawned process with ``torch.set_num_threads(1)``.
Each job's steps/s is measured in three configurations:

- ``alone``: the job by itself, pinned to core c0 (the first core this process may use);
- ``apart``: both jobs at once, A on c0 and B on c1 (two slots);
- ``shared``: both jobs at once, both pinned to c0 (one slot's cores shared).

Every run warms up (``--warmup`` s, on its new pinning, both jobs at once) and then counts steps for
``--seconds``; the concurrent jobs measure over the same window. The configurations alternate within
each of ``--repeats`` rounds so that drift in the machine's load falls on all of them; medians over
the rounds are reported. The two processes live for the whole benchmark (re-pinned per run), so
torch's start-up is paid once.

    .venv/bin/python benchmarks/colocation_cpu.py [--seconds 10] [--repeats 3] [--warmup 2]

Prints one JSON object on stdout (progress on stderr). Per job: ``alone``/``apart``/``shared`` steps/s
and ``retained_apart``/``retained_shared`` = that configuration's median steps/s ÷ the alone median.
``shared_normalised_combined_throughput`` is the sum of the two ``retained_shared`` — Gavel's
normalised combined throughput: 1.0 means sharing neither gains nor loses in total (time-slicing,
expected for two single-threaded CPU-bound jobs on one core: each keeps ≈ 0.5), below 1 means the
sharing itself costs (cache, switching), above 1 that the jobs left the core partly idle alone.
``apart`` retention below 1 is interference between separate cores (shared cache, memory bandwidth,
frequency). Exits 2 if fewer than two cores are available.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from multiprocessing import get_context
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# job -> (example script, model builder in it, batch size)
JOBS: dict[str, tuple[str, str, int]] = {"mlp": ("train_mlp", "mlp", 128), "cnn": ("train_cnn", "cnn", 64)}


def _example(name: str) -> Any:
    """Import an example script by path (examples/ is not a package); it needs no server to import."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trainer(job: str) -> Callable[[int], None]:
    """The job's training step (forward, backward, optimiser step) on consecutive synthetic batches."""
    import torch
    from torch import nn

    torch.set_num_threads(1)  # one worker per slot's core, as in the real system
    torch.manual_seed(0)
    script, builder, batch = JOBS[job]
    example = _example(script)
    model = getattr(example, builder)()
    x, y = example.synthetic(2048).tensors
    opt = (torch.optim.Adam(model.parameters(), lr=1e-3) if job == "mlp"
           else torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))

    def step(i: int) -> None:
        lo = (i * batch) % (len(x) - batch)
        opt.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x[lo:lo + batch]), y[lo:lo + batch]).backward()
        opt.step()

    return step


def _worker(job: str, conn: Connection) -> None:
    """Serve runs: ("run", core, start_at, seconds) -> steps/s measured over [start_at, start_at+seconds]
    on the monotonic clock (system-wide on Linux, so concurrent jobs measure the same window); the
    steps before start_at, on the new pinning, are the warm-up. None ends the worker."""
    step = _trainer(job)
    conn.send("ready")
    i = 0
    while (msg := conn.recv()) is not None:
        _, core, start_at, seconds = msg
        os.sched_setaffinity(0, {core})
        while time.monotonic() < start_at:
            step(i)
            i += 1
        t0, n = time.monotonic(), 0
        while (t := time.monotonic()) < t0 + seconds:
            step(i)
            i, n = i + 1, n + 1
        conn.send(n / (t - t0))


def measure(seconds: float, repeats: int, warmup: float, c0: int, c1: int) -> dict[str, dict[str, list[float]]]:
    """steps/s per job and configuration, one value per round."""
    ctx = get_context("spawn")
    conns: dict[str, Connection] = {}
    procs = []
    for job in JOBS:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(job, child), daemon=True)
        proc.start()
        conns[job], procs = parent, [*procs, proc]
    for conn in conns.values():
        assert conn.recv() == "ready"
    a, b = JOBS
    configs: dict[str, dict[str, int]] = {f"alone_{a}": {a: c0}, f"alone_{b}": {b: c0},
                                          "apart": {a: c0, b: c1}, "shared": {a: c0, b: c0}}
    rates: dict[str, dict[str, list[float]]] = {job: {"alone": [], "apart": [], "shared": []} for job in JOBS}
    try:
        for r in range(repeats):
            for config, pins in configs.items():
                start_at = time.monotonic() + warmup
                for job, core in pins.items():
                    conns[job].send(("run", core, start_at, seconds))
                got = {job: conns[job].recv() for job in pins}
                for job, rate in got.items():
                    rates[job][config.split("_")[0]].append(rate)
                print(f"round {r + 1}/{repeats} {config}: "
                      + ", ".join(f"{j} {v:.2f} steps/s" for j, v in got.items()), file=sys.stderr, flush=True)
    finally:
        for conn in conns.values():
            conn.send(None)
        for proc in procs:
            proc.join(10)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the configurations")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up seconds before each run")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print(f"colocation_cpu: needs 2 CPU cores for the 'apart' case, this process may use {cores}",
              file=sys.stderr)
        sys.exit(2)
    c0, c1 = cores[:2]
    rates = measure(args.seconds, args.repeats, args.warmup, c0, c1)
    jobs: dict[str, dict[str, float]] = {}
    for job, by_config in rates.items():
        med = {config: statistics.median(v) for config, v in by_config.items()}
        jobs[job] = {**{f"{c}_steps_per_s": round(v, 3) for c, v in med.items()},
                     "retained_apart": round(med["apart"] / med["alone"], 4),
                     "retained_shared": round(med["shared"] / med["alone"], 4)}
    print(json.dumps({
        "jobs": jobs,
        "shared_normalised_combined_throughput": round(sum(j["retained_shared"] for j in jobs.values()), 4),
        "apart_normalised_combined_throughput": round(sum(j["retained_apart"] for j in jobs.values()), 4),
        "cpu_count": os.cpu_count(),
        "cpus_available": len(cores),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "config": {"seconds": args.seconds, "repeats": args.repeats, "warmup_s": args.warmup, "cores": [c0, c1],
                   "torch_threads": 1, "batch": {job: spec[2] for job, spec in JOBS.items()},
                   "per_run_steps_per_s": {j: {c: [round(v, 3) for v in vs] for c, vs in by.items()}
                                                for j, by in rates.items()}},
    }, indent=2))


if __name__ == "__main__":
    main()
