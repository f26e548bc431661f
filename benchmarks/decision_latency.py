"""Decision latency: one ``Policy.allocate`` with 2,000 active jobs on 4,096 GPUs, per policy.

The jobs are Philly-like (CoDDL curves, the CoDDL model pool, requests of 1–8 GPUs, log-normal
lengths), submitted over the last hour; the policy itself has made one decision already, so
jobs hold shares, have attained service and first starts. Each timed call sees a context a
minute later than the one before. Prints JSON: per policy the p50, p99 and max over the calls,
in milliseconds, wall-clock and CPU. The goal is ≤ 50 ms p99 for every policy.

    python benchmarks/decision_latency.py [--policies afs-l,afs-p] [--jobs 2000] [--gpus 4096] [--calls 25]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def setup(policy: str, jobs: int, gpus: int, seed: int):
    from coddl.core import Cluster, JobSpec
    from coddl.perf.curves import CODDL_POOL, load_coddl_curves
    from coddl.policies import make_policy
    from coddl.scheduler import Scheduler

    curves = load_coddl_curves()
    rng = np.random.default_rng(seed)
    sched = Scheduler(Cluster.for_gpus(gpus, 8), make_policy(policy), curves, seed=seed)
    arrivals = np.sort(rng.uniform(0.0, 3600.0, jobs))
    for i, t in enumerate(arrivals.tolist()):
        model = CODDL_POOL[int(rng.integers(len(CODDL_POOL)))]
        m = curves.index[model]
        req = int(min(curves.max_gpus[m], rng.choice([1, 1, 1, 1, 2, 2, 4, 8])))
        duration = float(np.exp(rng.normal(8.0, 2.0)))
        sched.submit(JobSpec(f"j{i}", t, req, duration * curves.throughput(m, req), model), t)
    sched.step(3600.0)
    return sched


def measure(policy: str, jobs: int, gpus: int, calls: int, seed: int) -> dict:
    sched = setup(policy, jobs, gpus, seed)
    wall, cpu = [], []
    for c in range(calls):
        ctx = sched.context(3600.0 + 60.0 * (c + 1))
        w0, c0 = time.perf_counter(), time.process_time()
        sched.policy.allocate(ctx)
        wall.append(1e3 * (time.perf_counter() - w0))
        cpu.append(1e3 * (time.process_time() - c0))

    def stats(xs: list[float], tag: str) -> dict:
        return {f"p50_{tag}": round(float(np.percentile(xs, 50)), 3),
                f"p99_{tag}": round(float(np.percentile(xs, 99)), 3), f"max_{tag}": round(max(xs), 3)}

    return {"policy": policy, "jobs": jobs, "gpus": gpus, "calls": calls, **stats(wall, "ms"),
            **stats(cpu, "cpu_ms")}


def main() -> None:
    from coddl.policies import available

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="", help="comma-separated; default: every registered policy")
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--gpus", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=25)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    policies = [p for p in a.policies.split(",") if p] or list(available())
    results = [measure(p, a.jobs, a.gpus, max(20, a.calls), a.seed) for p in policies]
    print(json.dumps({"benchmark": "decision_latency", "load_average_1min": round(os.getloadavg()[0], 2),
                      "cpus": os.cpu_count(), "results": results}))


if __name__ == "__main__":
    main()
