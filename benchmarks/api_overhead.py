"""API overhead: submissions per second through the HTTP API, and request latency with 1,000 jobs queued.

A real server (``coddl server start`` in its own process: uvicorn on 127.0.0.1, SQLite in WAL mode in a
temporary state dir, the local executor with 1 GPU, AFS-P). One slow job holds the GPU — an elastic job
that sleeps through each step, so it costs no CPU — and every later submission stays queued; the
controller still admits each one into the scheduler and re-runs the policy, as on a busy cluster.
The run stops with the reason if that premise breaks (the blocking job ended, jobs ran): a server
busy starting and failing jobs measures something else. From this process, over one keep-alive connection:

1. ``--jobs`` submissions one after another: submissions/s, p50/p99 latency;
2. with them all queued, ``--requests`` of each of POST /jobs, GET /jobs/{id}, GET /jobs (every job),
   GET /cluster: p50/p99 latency.

Prints JSON (milliseconds). Beside each phase's wall-clock latencies it reports the server process's
CPU milliseconds per request (user + system, from /proc via psutil): on a shared machine wall times
move with everyone else's load, CPU time much less, so compare versions on ``server_cpu_ms``.

    python benchmarks/api_overhead.py [--jobs 1000] [--requests 200] [--policy afs-p]

To compare with another version in the same session, run this script with that version first on
``PYTHONPATH`` (``git worktree add --detach /tmp/base REV``; ``PYTHONPATH=/tmp/base/src python ...``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import psutil

try:
    from coddl.runtime.identity import remove_accounts
except ImportError:  # a version without per-owner job accounts (a comparison with an older tree)
    remove_accounts = None

BLOCKER = '''
import time
import torch
import coddl.elastic as elastic

with elastic.session() as s:
    model = torch.nn.Linear(1, 1)
    model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.1))
    data = torch.utils.data.TensorDataset(torch.zeros(64, 1), torch.zeros(64, 1))
    for x, y in s.batches(data, global_batch=8, steps=10**9):
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        time.sleep(1.0)
        s.step(loss)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentiles(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p99_ms": round(float(np.percentile(a, 99)), 2),
            "max_ms": round(float(a.max()), 2), "n": len(ms)}


def cpu_s(server: psutil.Process) -> float:
    t = server.cpu_times()
    return t.user + t.system


def timed(fn) -> float:  # noqa: ANN001 - a request
    t0 = time.perf_counter()
    r = fn()
    r.raise_for_status()
    return 1e3 * (time.perf_counter() - t0)


def start_server(state: Path, policy: str, log_path: Path,
                 account_prefix: str | None = None) -> tuple[subprocess.Popen, str, str]:
    port = free_port()
    log = open(log_path, "wb")
    accounts = ("--account-prefix", account_prefix) if account_prefix else ()
    proc = subprocess.Popen([sys.executable, "-m", "coddl.cli", "server", "start", "--gpus", "1", "--port", str(port),
                             "--state-dir", str(state), "--policy", policy, *accounts], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    while not (state / "server.json").is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start; see {log_path}")
        time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}", json.loads((state / "client.json").read_text())["token"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--policy", default="afs-p")
    args = ap.parse_args()

    # The scripts live beside the state directory, readable by all, and outside /tmp: a job runs as its
    # owner's account in a sandbox with a /tmp of its own, and sees nothing of the server's state.
    work = Path(tempfile.mkdtemp(prefix="coddl-api-bench-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    state, blocker, queued_script = work / "state", work / "blocker.py", work / "queued.py"
    blocker.write_text(BLOCKER)
    queued_script.write_text("print('never runs in this benchmark')\n")
    for script in (blocker, queued_script):
        os.chmod(script, 0o644)
    # as root, the server creates an account for the jobs' owner: under a prefix of this run's, removed at the end
    prefix = f"cb{os.urandom(3).hex()}-" if remove_accounts is not None else None
    proc, url, token = start_server(state, args.policy, work / "server.log", prefix)
    server = psutil.Process(proc.pid)
    cpu_ms: dict[str, float] = {}
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as c:
            blocker_id = c.post("/jobs", json={"name": "blocker", "command": ["python", str(blocker)],
                                  "steps": 10**9}).raise_for_status().json()["id"]
            deadline = time.monotonic() + 120
            while c.get("/cluster").json()["gpus_in_use"] < 1:
                if time.monotonic() > deadline:
                    raise SystemExit("the blocking job did not start")
                time.sleep(0.2)
            job = {"name": "queued", "command": ["python", str(queued_script)], "steps": 100, "max_gpus": 1}

            submit_ms = []
            t0, c0 = time.perf_counter(), cpu_s(server)
            for _ in range(args.jobs):
                submit_ms.append(timed(lambda: c.post("/jobs", json=job)))
            wall = time.perf_counter() - t0
            cpu_ms["submissions"] = round(1e3 * (cpu_s(server) - c0) / args.jobs, 3)
            ids = [j["id"] for j in c.get("/jobs", params={"limit": 10000}).json()]
            time.sleep(2.0)  # let the controller admit the queue before measuring under load

            rng = np.random.default_rng(0)
            requests = {
                "POST /jobs": lambda: c.post("/jobs", json=job),
                "GET /jobs/{id}": lambda: c.get(f"/jobs/{int(rng.choice(ids))}"),
                "GET /jobs": lambda: c.get("/jobs", params={"limit": 10000}),
                "GET /cluster": lambda: c.get("/cluster"),
            }
            loaded = {}
            for name, request in requests.items():
                c0 = cpu_s(server)
                loaded[name] = [timed(request) for _ in range(args.requests)]
                cpu_ms[name] = round(1e3 * (cpu_s(server) - c0) / args.requests, 3)
            queued = c.get("/cluster").json()["jobs"].get("queued", 0)
            held = c.get(f"/jobs/{blocker_id}").json()
            if held["status"] != "running" or queued < args.jobs + args.requests:
                raise SystemExit(f"the benchmark's premise broke: the blocking job is {held['status']} "
                                 f"({held['message']}) and {queued} jobs are queued")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(work, ignore_errors=True)
        if prefix is not None and os.geteuid() == 0:
            deadline = time.monotonic() + 30
            while remove_accounts(prefix)[1] and time.monotonic() < deadline:  # until its last worker is gone
                time.sleep(0.5)

    print(json.dumps({
        "benchmark": "api_overhead",
        "server": f"coddl server start --gpus 1 --policy {args.policy} (SQLite WAL, 127.0.0.1, separate process)",
        "cpus": os.cpu_count(),
        "submissions": {"jobs": args.jobs, "wall_s": round(wall, 2), "per_s": round(args.jobs / wall, 1),
                        **percentiles(submit_ms)},
        "with_queued_jobs": queued,
        "latency_under_load": {k: percentiles(v) for k, v in loaded.items()},
        "server_cpu_ms": cpu_ms,
        "load_average": os.getloadavg(),
    }, indent=2))


if __name__ == "__main__":
    main()
