"""A sweep of the CoDDL comparison on the local process pool and on a Ray cluster: wall time of each,
and whether they wrote the same results. Prints JSON.

The same ``coddl experiment coddl-nsdi21`` grid (by default the first 10 VCs with ≥ 300 jobs × 3
seeds × the 9 default policies = 270 runs, the first ``--jobs`` jobs of each VC) runs twice, as a
user would run it: with ``--workers`` processes on this machine, then with ``--ray-address`` on a
two-node Ray cluster on loopback that this benchmark starts (``tests/runtime/ray_cluster.py``, 2
CPUs per node, so 4 tasks at a time) and stops. Each time includes the CLI's start-up and, for Ray,
joining the cluster (not starting it). Both run on the same machine, so Ray can only add its own
overhead here; the figure says how much, not what more nodes would gain.

    .venv/bin/python benchmarks/ray_sweep.py [--vcs 10] [--seeds 1,2,3] [--jobs 60] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "sim"))
from test_ray_sweep import ray_cluster, runs_without_timings  # noqa: E402  (the tests' cluster, shut down after)


def sweep(args: argparse.Namespace, vcs: list[str], out: Path, *where: str, env: dict[str, str] | None = None) -> float:
    """Seconds ``coddl experiment coddl-nsdi21`` took on this grid, run where ``where`` says."""
    cmd = [sys.executable, "-m", "coddl.cli", "experiment", "coddl-nsdi21", "--vcs", ",".join(vcs), "--seeds",
           args.seeds, "--jobs", str(args.jobs), "--out", str(out), *where]
    started = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=1800)
    took = time.monotonic() - started
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[3:])} failed: {r.stderr.strip()[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vcs", type=int, default=10, help="how many VCs (the largest first)")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--jobs", type=int, default=60, help="first N jobs of each VC")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="the local pool's processes")
    args = ap.parse_args()

    from coddl.experiments import coddl_nsdi21 as exp

    vcs = exp.eligible_vcs()[:args.vcs]
    runs = len(vcs) * len(args.seeds.split(",")) * len(exp.default_policies())
    with tempfile.TemporaryDirectory() as tmp:
        local_s = sweep(args, vcs, Path(tmp) / "local", "--workers", str(args.workers))
        with ray_cluster() as (address, env):
            ray_s = sweep(args, vcs, Path(tmp) / "ray", "--ray-address", address, env=env)
        local, ray = Path(tmp) / "local", Path(tmp) / "ray"
        same = (runs_without_timings(local / "runs.csv") == runs_without_timings(ray / "runs.csv")
                and (local / "table.csv").read_bytes() == (ray / "table.csv").read_bytes())
    print(json.dumps({
        "runs": runs, "vcs": len(vcs), "seeds": args.seeds, "policies": len(exp.default_policies()), "jobs": args.jobs,
        "cores": os.cpu_count(), "load_average_after": round(os.getloadavg()[0], 2),
        "local_pool": {"workers": args.workers, "seconds": round(local_s, 1)},
        "ray": {"nodes": 2, "cpus_per_node": 2, "seconds": round(ray_s, 1)},
        "ray_over_local": round(ray_s / local_s, 2),
        "same_results": same,
    }, indent=2))


if __name__ == "__main__":
    main()
