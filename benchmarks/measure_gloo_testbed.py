"""Measure real data-parallel training on this machine: a two-"node" gloo testbed in the profile format.

Two network namespaces play two nodes joined by a veth pair whose both directions go through
``tc netem`` (added latency and a rate limit): traffic between ranks of one namespace stays on the
host's loopback path, traffic between namespaces crosses the emulated link. Each namespace is
pinned to one CPU core (``taskset``), so a node's workers share that core exactly as a node's
jobs would share a CPU slot; every row records each worker's ``compute_share`` (1 ÷ workers on
its core). Workers are real PyTorch processes training with DistributedDataParallel over gloo on
synthetic data (no downloads), ``torch.set_num_threads(1)``.

Jobs of different communication intensity (gradient bytes per second of compute):

    mlp      4 dense layers, 3.7M parameters (14.7 MB of gradients), little compute per sample
    convnet  a small CNN on 3×32×32 images, 0.36M parameters, much compute per sample
    embed    a recommender: two 200k×16 embedding tables + an MLP, 6.4M parameters whose dense
             gradients (25.6 MB) dwarf its compute

Each job runs at several local batches on placements 1, 2, 3, 4 (one node) and 1+1, 2+1, 2+2,
3+3, 4+4 (two nodes), at most 8 processes; collective micro-benchmarks (all-reduce of 1, 4 and
16 MB) run on the multi-GPU placements and are recorded as ``kind=collective`` rows. Everything
is measured ``--passes`` times (default 2: once forward through the list, once backward) and each
row is the median over passes, so a burst of load from other tenants cannot decide a row alone.

    sudo python benchmarks/measure_gloo_testbed.py --out src/coddl/data/profiles/cpu-gloo.csv

It needs root (network namespaces) and creates only ``cdl<pid>a``/``cdl<pid>b`` namespaces and
their veth pair, addresses in 10.77.0.0/24 inside them, and removes them when it ends (also on
Ctrl-C). The machine is shared: workers run at niceness -10 so that other tenants' processes take a
small, steady share of the cores, and the JSON summary printed at the end records the load.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CLUSTER = "cpu-gloo"
MODELS = ("mlp", "convnet", "embed")
PLACEMENTS = ((1,), (2,), (3,), (4,), (1, 1), (2, 1), (2, 2), (3, 3), (4, 4))
BATCHES = {"mlp": (16, 64, 256), "convnet": (8, 32, 64), "embed": (64, 256, 1024)}
COLLECTIVE_MB = (1, 4, 16)
SUBNET = "10.77.0"


# ------------------------------------------------------------------------------------ worker

def build(model: str):
    import torch
    from torch import nn

    torch.manual_seed(0)
    if model == "mlp":
        net = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 1024), nn.ReLU(),
                            nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))

        def batch(b: int):
            return torch.randn(b, 512), torch.randint(0, 10, (b,))
    elif model == "convnet":
        net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                            nn.Flatten(), nn.Linear(2048, 128), nn.ReLU(), nn.Linear(128, 10))

        def batch(b: int):
            return torch.randn(b, 3, 32, 32), torch.randint(0, 10, (b,))
    elif model == "embed":
        class Rec(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.users = nn.Embedding(200_000, 16)
                self.items = nn.Embedding(200_000, 16)
                self.mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))

            def forward(self, x):
                return self.mlp(torch.cat([self.users(x[:, 0]), self.items(x[:, 1])], dim=1))

        net = Rec()

        def batch(b: int):
            return torch.randint(0, 200_000, (b, 2)), torch.randint(0, 2, (b,))
    else:
        raise SystemExit(f"unknown model {model!r}")
    return net, batch


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = []
    if args.model == "collective":
        for mb in COLLECTIVE_MB:
            t = torch.ones(int(mb * 1e6 // 4))
            for _ in range(2):
                dist.all_reduce(t)
            times = _timed(lambda: dist.all_reduce(t), args.seconds, args.min_steps, world)
            results.append({"mb": mb, "seconds": times})
    else:
        net, make = build(args.model)
        model = DDP(net) if world > 1 else net
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        loss_fn = torch.nn.CrossEntropyLoss()
        params = sum(p.numel() for p in net.parameters())
        for b in args.batches:
            x, y = make(b)

            def step() -> None:
                opt.zero_grad(set_to_none=True)
                loss_fn(model(x), y).backward()
                opt.step()

            for _ in range(2):
                step()
            if world > 1:
                dist.barrier()
            results.append({"batch": b, "params": params, "seconds": _timed(step, args.seconds, args.min_steps, world)})
    if rank == 0:
        Path(args.result).write_text(json.dumps(results))
    dist.destroy_process_group()


def _timed(fn, seconds: float, min_steps: int, world: int) -> list[float]:
    """Per-step wall times of ``fn``: two probe steps, then as many as fill ``seconds`` (at least
    ``min_steps``, at most 200). Rank 0 decides the count and every rank runs exactly that many:
    ranks deciding on their own clocks would disagree by a step and deadlock in a collective."""
    import torch
    import torch.distributed as dist

    out: list[float] = []
    for _ in range(2):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    count = torch.tensor([max(min_steps, min(200, int(seconds / max(min(out), 1e-6))))])
    if world > 1:
        dist.broadcast(count, src=0)
    for _ in range(int(count.item())):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out[2:]


# ------------------------------------------------------------------------------------ testbed

@dataclass
class Testbed:
    """Two namespaces joined by a shaped veth pair; removed by ``close``."""

    rate_mbit: float
    delay_ms: float
    tag: str = f"cdl{os.getpid() % 100000}"
    shaping: str = ""

    @property
    def namespaces(self) -> tuple[str, str]:
        return f"{self.tag}a", f"{self.tag}b"

    @property
    def links(self) -> tuple[str, str]:
        return f"{self.tag}x", f"{self.tag}y"

    def up(self) -> None:
        (na, nb), (la, lb) = self.namespaces, self.links
        for ns in (na, nb):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", la, "netns", na, "type", "veth", "peer", "name", lb, "netns", nb)
        for ns, link, host in ((na, la, 1), (nb, lb, 2)):
            _ip("-n", ns, "addr", "add", f"{SUBNET}.{host}/24", "dev", link)
            _ip("-n", ns, "link", "set", link, "up")
            self.shaping = self._shape(ns, link)

    def _shape(self, ns: str, link: str) -> str:
        """netem (rate and added latency) where the kernel has it, else tbf (rate only)."""
        tc = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", link, "root"]
        netem = ["netem", "delay", f"{self.delay_ms}ms", "rate", f"{self.rate_mbit}mbit", "limit", "100000"]
        if self.delay_ms > 0 and subprocess.run(tc + netem, capture_output=True).returncode == 0:
            return f"netem: {self.rate_mbit:g} Mbit/s, +{self.delay_ms:g} ms each way"
        _run(tc + ["tbf", "rate", f"{self.rate_mbit}mbit", "burst", "512kb", "latency", "100ms"])
        return f"tbf: {self.rate_mbit:g} Mbit/s (this kernel has no netem: no added latency)"

    def close(self) -> None:
        for ns in self.namespaces:  # deleting a namespace removes its end of the veth pair, and so the pair
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)

    def launch(self, placement: tuple[int, ...], argv: list[str], port: int, timeout: float, args_nice: int) -> None:
        """Run one job: ``placement[i]`` workers in namespace i, pinned to core i, at niceness
        ``args_nice`` (negative: ahead of other tenants' processes on a shared machine)."""
        world = sum(placement)
        procs = []
        rank = 0
        cores = os.cpu_count() or 1
        for node, count in enumerate(placement):
            ns, link = self.namespaces[node], self.links[node]
            for _ in range(count):
                env = os.environ | {"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": f"{SUBNET}.1",
                                    "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": link,
                                    "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
                cmd = ["ip", "netns", "exec", ns, "nice", "-n", str(args_nice), "taskset", "-c", str(node % cores),
                       sys.executable, __file__, "--worker", *argv]
                procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                rank += 1
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                rc = p.wait(timeout=max(1.0, deadline - time.monotonic()))
                if rc != 0:
                    raise RuntimeError(f"worker failed ({rc}): {p.stderr.read().decode()[-2000:]}")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def _ip(*args: str) -> None:
    _run(["ip", *args])


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])


def measure(args: argparse.Namespace) -> None:
    from rich.progress import Progress

    from coddl.perf.table import ProfileTable, write_profiles

    if os.geteuid() != 0:
        raise SystemExit("measure_gloo_testbed: needs root to create network namespaces")
    bed = Testbed(args.rate_mbit, args.delay_ms)
    rows: list[dict] = []
    placements = [tuple(int(g) for g in p.split("+")) for p in args.placements] if args.placements else PLACEMENTS
    once = [(m, p) for m in args.models for p in placements] + [("collective", p) for p in placements if sum(p) > 1]
    jobs = [j for n in range(args.passes) for j in (once if n % 2 == 0 else once[::-1])]
    measured: dict[tuple, list[float]] = {}
    loads = []

    def stop(*_: object) -> None:
        bed.close()
        raise SystemExit(130)

    signal.signal(signal.SIGTERM, stop)
    started = time.time()
    try:
        bed.up()
        with tempfile.TemporaryDirectory() as tmp, Progress() as progress:
            task = progress.add_task("measuring", total=len(jobs))
            for i, (model, placement) in enumerate(jobs):
                progress.update(task, description=f"{model} on {'+'.join(map(str, placement))}")
                result = Path(tmp) / f"r{i}.json"
                argv = ["--model", model, "--result", str(result), "--seconds", str(args.seconds),
                        "--min-steps", str(args.min_steps), "--batches", *map(str, BATCHES.get(model, (1,)))]
                loads.append(os.getloadavg()[0])
                bed.launch(placement, argv, 29500 + i % 400, args.timeout, args.nice)
                loads.append(os.getloadavg()[0])
                for r in json.loads(result.read_text()):
                    key = (model, placement, r.get("mb"), r.get("batch"), r.get("params"))
                    measured.setdefault(key, []).append(_median(r["seconds"]))
                progress.advance(task)
    finally:
        bed.close()
    spread = []
    for (model, placement, mb, batch, params), steps in measured.items():
        step = _median(steps)
        spread.append(max(steps) / min(steps))
        common = {"cluster": CLUSTER, "gpu_type": "cpu", "gpus": sum(placement), "placement": placement,
                  "steps_per_s": 1.0 / step, "compute_share": 1.0 / max(placement)}  # one core per node
        if model == "collective":
            rows.append(common | {"model": f"allreduce-{mb}MB", "param_bytes": mb * 1e6, "kind": "collective"})
        else:
            rows.append(common | {"model": model, "param_bytes": 4.0 * params, "local_batch": float(batch)})
    table = ProfileTable.build(rows, CLUSTER)
    write_profiles(table, args.out)
    print(json.dumps({"rows": len(table), "out": str(args.out), "minutes": round((time.time() - started) / 60, 1),
                      "link": bed.shaping,
                      "load_avg_1min": {"min": min(loads), "median": _median(loads), "max": max(loads)},
                      "passes": args.passes,
                      "max_over_min_between_passes": {"median": round(_median(spread), 3),
                                                      "max": round(max(spread), 3)},
                      "cores": os.cpu_count()}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--placements", nargs="*", help="e.g. 1 2 1+1 (default: all nine)")
    parser.add_argument("--out", type=Path, default=Path("cpu-gloo.csv"))
    parser.add_argument("--rate-mbit", type=float, default=400.0, help="inter-node link rate (tc netem)")
    parser.add_argument("--delay-ms", type=float, default=1.0, help="added one-way latency (tc netem)")
    parser.add_argument("--seconds", type=float, default=2.0, help="measure each configuration at least this long")
    parser.add_argument("--passes", type=int, default=2, help="measure everything this many times (median)")
    parser.add_argument("--min-steps", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before a job is given up")
    parser.add_argument("--nice", type=int, default=-10,
                        help="workers' niceness: on a shared machine a negative value keeps other tenants' "
                             "processes from distorting the measured compute shares (default -10)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        measure(args)


if __name__ == "__main__":
    main()
