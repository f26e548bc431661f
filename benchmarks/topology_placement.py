"""2 GPUs in one node or 3 across two: which is faster, and does the real system choose it? Prints JSON.

On the two-node testbed (``coddl testbed up``: two network namespaces of 2 worker slots each, a real
Ray cluster, the link between them limited by ``tc``), for each link rate:

1. ``coddl cluster inspect`` calibrates the links (the cluster spec the server plans with);
2. a server (``--executor ray --cluster SPEC``, AFS-P) runs a communication-heavy job — a dense
   gradient of ``--params`` floats all-reduced over gloo every step, a compute of ``--sample-s`` per
   sample (a sleep standing in for a GPU's kernels: this host has two cores, so 3 CPU-bound workers
   could never beat 2) at a global batch of ``--batch`` — pinned to 2 GPUs (one node) and then to 3
   (2 + 1 across the link); each run's throughput is measured from its progress reports;
3. the choice: a rigid 1-GPU job takes one slot of node 0, leaving 1 free there and 2 in node 1, and
   an elastic copy of the job (no maximum) arrives. It starts on the 3 GPUs the model-name curve
   offers; once its first steps have been inspected the scheduler plans it on its profile priced at
   the placements the placer would give it — 2 in node 1 or 3 across both — and resizes it (or not).
   The job's GPUs ``--settle-s`` seconds after its inspection are the placer's choice, compared
   with the faster of the two measured placements; the estimated rates printed beside them are the
   job's planned curve at that time (its belief already corrected by the steps it reported).

Everything the testbed and the servers started is removed at the end (also on failure or Ctrl-C).
Needs root (network namespaces) and Ray; takes about 4 minutes per rate.

    sudo .venv/bin/python benchmarks/topology_placement.py [--rates 100mbit,400mbit,1gbit] [--params 2000000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "runtime"))
from runtime_live import Server  # noqa: E402  (a real `coddl server start` with its accounts cleaned up)

from coddl.clusterspec import load_cluster  # noqa: E402
from coddl.runtime.testbed import cluster as tb  # noqa: E402
from coddl.runtime.testbed.netns import inside, unavailable_reason  # noqa: E402

JOB = REPO / "examples" / "synthetic_job.py"
console = Console(stderr=True)


def coddl(*args: str, ns: str | None = None, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    cmd = [sys.executable, "-m", "coddl.cli", *args]
    if ns:
        cmd = ["ip", "netns", "exec", ns, *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "COLUMNS": "200", **(env or {})})
    if r.returncode != 0:
        raise SystemExit(f"coddl {' '.join(args[:2])} failed: {r.stderr.strip()[-2000:]}")
    return r.stdout


def job_env(args: argparse.Namespace) -> dict[str, str]:
    return {"PARAMS": str(args.params), "SAMPLE_S": str(args.sample_s), "FIXED_S": str(args.fixed_s)}


def measure(srv: Server, args: argparse.Namespace, gpus: int) -> dict:
    """Throughput of the job pinned to ``gpus`` GPUs: steps over time between its progress reports,
    from ``--warmup-s`` after it first reported at that world size, for ``--measure-s`` seconds."""
    job_id = srv.submit({"name": f"on-{gpus}", "command": ["python", str(JOB)], "steps": 1_000_000,
                         "batch_size": args.batch, "min_gpus": gpus, "max_gpus": gpus, "env": job_env(args)})
    first = srv.wait_job(job_id, lambda j: any(s["world_size"] == gpus for s in j["samples"]), 600,
                         f"reports on {gpus} GPUs")
    t0 = min(s["at"] for s in first["samples"] if s["world_size"] == gpus)
    srv.wait_job(job_id, lambda j: max(s["at"] for s in j["samples"]) >= t0 + args.warmup_s + args.measure_s,
                 args.warmup_s + args.measure_s + 120, "enough reports")
    job = srv.job(job_id)
    srv.admin.delete(f"/jobs/{job_id}").raise_for_status()
    srv.wait_job(job_id, lambda j: j["terminal"], 120, "cancelled")
    window = [s for s in job["samples"] if s["world_size"] == gpus and s["at"] >= t0 + args.warmup_s]
    steps = window[-1]["step"] - window[0]["step"]
    seconds = window[-1]["at"] - window[0]["at"]
    return {"gpus_per_node": per_node(srv, job["gpus"]), "steps_per_s": steps / seconds,
            "median_report_steps_per_s": statistics.median(s["steps_per_s"] for s in window),
            "steps": steps, "seconds": round(seconds, 2)}


def srv_nodes(srv: Server) -> list[dict]:
    return srv.admin.get("/cluster").json()["nodes"]


def per_node(srv: Server, gpus: list[int]) -> list[int]:
    """GPUs per node (largest first, nodes holding none left out)."""
    counts = (sum(1 for g in n["gpus"] if g["gpu"] in gpus) for n in srv_nodes(srv))
    return sorted((c for c in counts if c), reverse=True)


def choose(srv: Server, args: argparse.Namespace) -> dict:
    """The real system's choice for the job with 1 GPU free in node 0 and 2 in node 1."""
    blocker = srv.submit({"name": "blocker", "command": ["python", str(JOB)], "steps": 1_000_000, "batch_size": 8,
                          "min_gpus": 1, "max_gpus": 1, "env": {"PARAMS": "1000", "SAMPLE_S": "0.01"}})
    srv.wait_job(blocker, lambda j: j["status"] == "running" and j["gpus"], 600, "the blocker running")
    job_id = srv.submit({"name": "elastic", "command": ["python", str(JOB)], "steps": 1_000_000,
                         "batch_size": args.batch, "env": job_env(args)})
    job = srv.wait_job(job_id, lambda j: "inspected" in [e["kind"] for e in j["events"]], 600, "its inspection")
    inspected_at = next(e["at"] for e in job["events"] if e["kind"] == "inspected")
    time.sleep(args.settle_s)
    job = srv.job(job_id)
    profile = srv.admin.get(f"/jobs/{job_id}/profile").json()
    planned = [(e["action"], per_node(srv, e["gpus_after"])) for e in job["events"] if e["kind"] == "planned"]
    for j in (job_id, blocker):
        srv.admin.delete(f"/jobs/{j}").raise_for_status()
    for j in (job_id, blocker):
        srv.wait_job(j, lambda v: v["terminal"], 120, "cancelled")
    return {"gpus_per_node": per_node(srv, job["gpus"]), "plans": planned,
            "planned_after_inspection": [(e["action"], per_node(srv, e["gpus_after"])) for e in job["events"]
                                         if e["kind"] == "planned" and e["at"] >= inspected_at],
            "estimated_steps_per_s": {"2 in one node": profile["curve"][1], "3 across two": profile["curve"][2]},
            "profile": {"gradient_mb": profile["profile"][0]["param_bytes"] / 1e6, "belief": profile["belief"]}}


def ready(srv: Server, attempts: int = 4) -> None:
    """A loaded host can take minutes to start a server with a Ray executor: wait longer than tests do."""
    for attempt in range(attempts):
        try:
            srv.ready()
            return
        except AssertionError:
            if srv.proc.poll() is not None or attempt == attempts - 1:
                raise


def one_rate(rate: str, args: argparse.Namespace, work: Path) -> dict:
    name = f"cdtp{os.getpid() % 100000}"
    console.log(f"[bold]{rate}[/]: testbed up")
    coddl("testbed", "up", "--name", name, "--nodes", "2", "--bandwidth", rate, "--gpus-per-node", "2",
          "--cpus-per-node", "1")
    try:
        bed = tb.load(name)
        spec = work / f"cluster-{rate}.yaml"
        console.log(f"{rate}: cluster inspect")
        coddl("cluster", "inspect", "--executor", "ray", "--ray-address", bed.ray_address, "--out", str(spec),
              ns=bed.node_ns(0), env=bed.node_env())
        links = load_cluster(spec).links
        with inside(bed.node_ns(0)):  # the server, its HTTP port and its job stores live in node 0
            srv = Server(work / f"state-{rate}", gpus=None, policy="afs-p", env=bed.node_env(), wait=False,
                         extra=("--executor", "ray", "--ray-address", bed.ray_address, "--cluster", str(spec)))
            try:
                ready(srv)
                console.log(f"{rate}: 2 GPUs in one node")
                two = measure(srv, args, 2)
                console.log(f"{rate}: 3 GPUs across two nodes")
                three = measure(srv, args, 3)
                console.log(f"{rate}: the scheduler's choice")
                choice = choose(srv, args)
            except BaseException:
                console.log(f"{rate}: failed; the server's log ends:\n{srv.log_path.read_text()[-3000:]}")
                raise
            finally:
                srv.cleanup()
    finally:
        coddl("testbed", "down", "--name", name)
    faster = "3 across two" if three["steps_per_s"] > two["steps_per_s"] else "2 in one node"
    chosen = {2: "2 in one node", 3: "3 across two"}.get(sum(choice["gpus_per_node"]), str(choice["gpus_per_node"]))
    return {"rate": rate, "calibrated_inter_node_gbps": links.inter_node_gbps,
            "calibrated_intra_node_gbps": links.intra_node_gbps,
            "measured_steps_per_s": {"2 in one node": two, "3 across two": three},
            "faster_measured": faster, "chosen": chosen, "chose_the_faster": chosen == faster,
            "measured_ratio_3_over_2": three["steps_per_s"] / two["steps_per_s"], "choice": choice}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100mbit,400mbit,1gbit", help="inter-node link rates, comma-separated")
    ap.add_argument("--params", type=int, default=2_000_000, help="gradient floats all-reduced per step")
    ap.add_argument("--sample-s", type=float, default=0.01, help="compute (sleep) per sample")
    ap.add_argument("--fixed-s", type=float, default=0.0, help="compute (sleep) per step")
    ap.add_argument("--batch", type=int, default=96, help="global batch")
    ap.add_argument("--warmup-s", type=float, default=6.0)
    ap.add_argument("--measure-s", type=float, default=20.0)
    ap.add_argument("--settle-s", type=float, default=12.0, help="after the inspection, before reading the choice")
    args = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"error: {reason}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` or kill: tear down on the way out
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="coddl-topo-", dir="/var/tmp") as tmp:
        os.chmod(tmp, 0o755)
        rows = [one_rate(r, args, Path(tmp)) for r in args.rates.split(",")]
    print(json.dumps({
        "job": {"gradient_mb": 4 * args.params / 1e6, "sample_s": args.sample_s, "fixed_s": args.fixed_s,
                "global_batch": args.batch},
        "testbed": "2 nodes x 2 slots, Ray, gloo; tc tbf on each node's link", "policy": "afs-p",
        "chose_the_faster_in_every_case": all(r["chose_the_faster"] for r in rows), "rates": rows,
        "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]}, "host_cores": os.cpu_count(),
    }, indent=1))


if __name__ == "__main__":
    main()
