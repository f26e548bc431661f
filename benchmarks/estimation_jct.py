"""AFS-P on real jobs, planned with the estimator (job inspection) vs with curves by model name.

Two runs of the same small workload on the local executor, one per mode, each on a fresh server:

- ``estimator``: every elastic job times its first steps and is planned on its own profile
  (``coddl server start``, the default);
- ``names``: ``--no-job-inspection``: the jobs' names have no bundled curve, so each is planned on
  the default curve scaled by one online correction factor (what the real system did before).

The jobs are ``examples/synthetic_job.py`` with three kinds of scaling: compute that halves with
the local batch (linear), a fixed per-step cost (little gain from a second GPU) and a slow
interconnect (a multi-GPU step waits 0.15 s more). Their compute is sleeps, so a loaded host slows
them little; the rest (start-up, resizes, the policy's period) is real. Prints JSON: each mode's
average JCT and per-job JCTs, the ratio, and the host's load average.

    .venv/bin/python benchmarks/estimation_jct.py [--gpus 4] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "examples" / "synthetic_job.py"

# (name, env, steps, arrival s): 1-GPU runs of roughly 15-25 s each
WORKLOAD = [
    ("linear-a", {"SAMPLE_S": "0.004"}, 70, 0),
    ("fixed-a", {"FIXED_S": "0.15", "SAMPLE_S": "0.0005"}, 90, 3),
    ("slowlink-a", {"SAMPLE_S": "0.003", "SYNC_S": "0.15"}, 90, 6),
    ("linear-b", {"SAMPLE_S": "0.004"}, 70, 9),
    ("fixed-b", {"FIXED_S": "0.15", "SAMPLE_S": "0.0005"}, 90, 12),
    ("slowlink-b", {"SAMPLE_S": "0.003", "SYNC_S": "0.15"}, 90, 15),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(mode: str, gpus: int, base: Path) -> dict:
    state = base / mode / "state"
    state.mkdir(parents=True)
    port = free_port()
    cmd = [sys.executable, "-m", "coddl.cli", "server", "start", "--gpus", str(gpus), "--port", str(port),
           "--state-dir", str(state), "--policy", "afs-p", "--period-s", "2",
           *(["--no-job-inspection"] if mode == "names" else [])]
    log = open(base / f"{mode}.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while not (state / "client.json").is_file() or not _up(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{mode}: the server did not start (log: {base / f'{mode}.log'})")
            time.sleep(0.5)
        token = json.loads((state / "client.json").read_text())["token"]
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as c:
            start = time.monotonic()
            ids = {}
            for name, env, steps, at in WORKLOAD:
                time.sleep(max(0.0, start + at - time.monotonic()))
                r = c.post("/jobs", json={"name": name, "command": ["python", str(JOB)], "steps": steps,
                                          "batch_size": 32, "env": env})
                r.raise_for_status()
                ids[name] = r.json()["id"]
            while True:
                jobs = {n: c.get(f"/jobs/{i}").json() for n, i in ids.items()}
                if all(j["terminal"] for j in jobs.values()):
                    break
                if time.monotonic() - start > 1800:
                    raise SystemExit(f"{mode}: jobs still running after 30 min")
                time.sleep(1.0)
        bad = [n for n, j in jobs.items() if j["status"] != "finished"]
        if bad:
            raise SystemExit(f"{mode}: jobs {bad} did not finish: {[jobs[n]['message'] for n in bad]}")
        jct = {n: j["finished_at"] - j["submitted_at"] for n, j in jobs.items()}
        return {"avg_jct_s": sum(jct.values()) / len(jct), "jct_s": jct,
                "makespan_s": max(j["finished_at"] for j in jobs.values()) - min(j["submitted_at"] for j in jobs.values()),
                "resizes": sum(j["resizes"] for j in jobs.values())}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/cluster", timeout=2).status_code == 401
    except httpx.TransportError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=1, help="alternating runs of each mode")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="coddl-est-jct-") as tmp:
        runs: dict[str, list[dict]] = {"estimator": [], "names": []}
        for _ in range(args.repeats):
            for mode in runs:
                runs[mode].append(run(mode, args.gpus, Path(tmp) / f"r{len(runs[mode])}"))
    avg = {m: sorted(r["avg_jct_s"] for r in rs) for m, rs in runs.items()}
    med = {m: v[len(v) // 2] for m, v in avg.items()}
    print(json.dumps({
        "gpus": args.gpus, "policy": "afs-p", "jobs": len(WORKLOAD), "repeats": args.repeats,
        "avg_jct_s": avg, "median_avg_jct_s": med, "ratio_estimator_to_names": med["estimator"] / med["names"],
        "runs": runs, "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]},
        "host_cores": os.cpu_count(),
    }, indent=1))


if __name__ == "__main__":
    main()
