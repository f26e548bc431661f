"""What sharing one GPU costs two training jobs, measured on a real CUDA GPU: alone, time-sliced, under MPS.

Why: the packer of GPU-sharing jobs (``--sharing pack``/``aware``) counts how much of its solo speed
each job keeps beside a co-tenant; the interference model behind ``aware`` is fitted to Gavel's pairs
measured on K80, P100 and V100. This measures the same quantity on the GPU at hand, for jobs of
different intensity, with the two ways coddl's workers share a GPU: plain time-slicing (no MPS daemon)
and MPS — by default with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` unset (each client may use every
SM), or with ``--mps-threads P`` set to P for every client, as coddl sets it for a job asking for
P % of a GPU (``gpu_fraction``).

How: four synthetic trainings (forward, backward, optimiser step on cuda:0, fp32 with TF32 matmuls):
``tiny`` (a 16→64→1 MLP, batch 48: launch-bound, the GPU mostly idle), ``mlp`` (six 4096-wide
layers, batch 1024: dense matrix work), ``cnn`` (four 3×3 convolutions on 128×128 images, batch 64)
and ``transformer`` (six encoder layers, d=768, 12 heads, batch 16 × 512 tokens). Each job is a
spawned process that lives for a phase and serves runs: it trains until an agreed start time on the
system-wide monotonic clock (its warm-up), then counts synchronised steps for ``--seconds``; the jobs
of a pair measure over the same window. Per pair and mode, each job's ``retained`` = its steps/s in
the pair ÷ its steps/s alone, and ``combined`` = the sum of the two (Gavel's normalised combined
throughput: 1.0 means sharing neither gains nor loses in total; above 1, the jobs left the GPU
partly idle alone). The MPS phase starts a control daemon in a temporary directory, starts fresh
job processes under it (the alone rates are re-measured there) and stops it afterwards.

    python benchmarks/colocation_gpu.py [--seconds 4] [--warmup 1.5] [--no-mps | --mps-threads 50]

Prints one JSON object on stdout, progress on stderr. Exits 2 without CUDA.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing import get_context
from multiprocessing.connection import Connection
from typing import Callable

JOBS = ("tiny", "mlp", "cnn", "transformer")
PAIRS = (("tiny", "tiny"), ("tiny", "mlp"), ("mlp", "mlp"), ("cnn", "transformer"), ("mlp", "transformer"),
         ("cnn", "cnn"))


def _trainer(job: str) -> Callable[[], None]:
    """One training step of ``job`` on cuda:0 (synchronised, so that a counted step is a finished one)."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    if job == "tiny":
        model, x = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)), torch.randn(48, 16)
    elif job == "mlp":
        model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(4096, 4096), nn.ReLU())], nn.Linear(4096, 1))
        x = torch.randn(1024, 4096)
    elif job == "cnn":
        chans = (3, 64, 128, 128, 256)
        model = nn.Sequential(*[m for a, b in zip(chans, chans[1:]) for m in (nn.Conv2d(a, b, 3, padding=1), nn.ReLU())],
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1))
        x = torch.randn(64, 3, 128, 128)
    else:
        layer = nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
        model = nn.Sequential(nn.TransformerEncoder(layer, 6, enable_nested_tensor=False))
        x = torch.randn(16, 512, 768)
    model, x = model.to(dev), x.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).float().square().mean().backward()
        opt.step()
        torch.cuda.synchronize(dev)

    return step


def _worker(job: str, conn: Connection) -> None:
    """Serve runs: (start_at, seconds) -> steps/s over [start_at, start_at + seconds]; None ends it."""
    step = _trainer(job)
    step()
    conn.send("ready")
    while (msg := conn.recv()) is not None:
        start_at, seconds = msg
        while time.monotonic() < start_at:
            step()
        t0, n = time.monotonic(), 0
        while (t := time.monotonic()) < t0 + seconds:
            step()
            n += 1
        conn.send(n / (t - t0))


def phase(seconds: float, warmup: float, label: str) -> dict:
    """Alone rates of every job, then every pair's rates, with one process per (job, seat)."""
    ctx = get_context("spawn")
    seats = {(job, seat) for pair in PAIRS for seat, job in enumerate(pair)} | {(job, 0) for job in JOBS}
    conns: dict[tuple[str, int], Connection] = {}
    procs = []
    for key in sorted(seats):
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(key[0], child), daemon=True)
        proc.start()
        conns[key], procs = parent, [*procs, proc]
    for conn in conns.values():
        assert conn.recv() == "ready"

    def run(keys: list[tuple[str, int]]) -> list[float]:
        start_at = time.monotonic() + warmup
        for key in keys:
            conns[key].send((start_at, seconds))
        return [conns[key].recv() for key in keys]

    try:
        alone = {job: run([(job, 0)])[0] for job in JOBS}
        print(f"{label} alone: " + ", ".join(f"{j} {v:.1f}/s" for j, v in alone.items()), file=sys.stderr, flush=True)
        pairs = []
        for a, b in PAIRS:
            ra, rb = run([(a, 0), (b, 1)])
            kept = (ra / alone[a], rb / alone[b])
            pairs.append({"a": a, "b": b, "steps_per_s": [ra, rb], "retained": list(kept), "combined": sum(kept)})
            print(f"{label} {a}+{b}: retained {kept[0]:.2f} + {kept[1]:.2f} = {sum(kept):.2f}", file=sys.stderr,
                  flush=True)
    finally:
        for conn in conns.values():
            conn.send(None)
        for proc in procs:
            proc.join(20)
    return {"alone_steps_per_s": alone, "pairs": pairs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--warmup", type=float, default=1.5)
    ap.add_argument("--no-mps", action="store_true", help="skip the MPS phase")
    ap.add_argument("--mps-threads", type=int, default=None, metavar="P",
                    help="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of every client in the MPS phase (default: unset)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("colocation_gpu: no CUDA device here", file=sys.stderr)
        sys.exit(2)
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "seconds": args.seconds,
           "warmup": args.warmup, "mps_threads": args.mps_threads, "timeslice": phase(args.seconds, args.warmup, "time-sliced")}
    control = shutil.which("nvidia-cuda-mps-control")
    if args.no_mps or control is None:
        out["mps"] = None if args.no_mps else "no nvidia-cuda-mps-control on this host"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": f"{tmp}/pipe", "CUDA_MPS_LOG_DIRECTORY": f"{tmp}/log"}
            os.makedirs(env["CUDA_MPS_PIPE_DIRECTORY"])
            os.makedirs(env["CUDA_MPS_LOG_DIRECTORY"])
            started = subprocess.run([control, "-d"], env=env, capture_output=True, text=True, timeout=30)
            if started.returncode != 0:
                out["mps"] = f"the MPS control daemon did not start: {started.stderr.strip()}"
            else:
                os.environ["CUDA_MPS_PIPE_DIRECTORY"] = env["CUDA_MPS_PIPE_DIRECTORY"]  # the spawned jobs inherit it
                if args.mps_threads is not None:
                    os.environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(args.mps_threads)
                try:
                    out["mps"] = phase(args.seconds, args.warmup, f"MPS{'' if args.mps_threads is None else f' {args.mps_threads}%'}")
                except Exception as e:  # noqa: BLE001 - reported in the JSON with the daemon's log
                    log = os.path.join(env["CUDA_MPS_LOG_DIRECTORY"], "control.log")
                    tail = open(log).read()[-1500:] if os.path.exists(log) else ""
                    out["mps"] = f"failed under MPS: {e!r}; control.log: {tail}"
                finally:
                    del os.environ["CUDA_MPS_PIPE_DIRECTORY"]
                    os.environ.pop("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", None)
                    subprocess.run([control], input="quit\n", env=env, text=True, timeout=30)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
