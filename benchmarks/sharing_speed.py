"""What GPU sharing costs the scheduler: the two speed goals of many jobs per GPU.

1. The whole Philly digest (82,247 jobs) on 512 GPUs (64 × 8) per policy, every one-GPU job allowed
   to share (``shared_jobs=one-gpu``: most of the digest), under ``pack`` and ``aware`` — wall
   seconds beside the same policy on exclusive GPUs, measured in the same run (goal: ≤ 60 s).
2. One decision (``Scheduler.step``) with 2,000 active jobs, half of them asking for a fraction of
   a GPU (0.25 or 0.5), on 4,096 GPUs: each timed step follows one arrival or one exit, as in a
   running cluster; median and p99 in milliseconds (goal: p99 ≤ 50 ms).

Prints one JSON object.

    python benchmarks/sharing_speed.py [--digest fifo,max-min] [--decision fifo] [--jobs 0] [--decisions 300]

The digest is run for the policies that meet the 60 s goal on exclusive GPUs (``sim_speed.py``:
fifo, srtf, srsf, max-min, afs-l, afs-p); the others already take longer without sharing.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def digest(policy: str, rule: str, jobs: int | None) -> dict:
    from coddl.sim.config import SimConfig
    from coddl.sim.metrics import summarise
    from coddl.sim.run import prepare, run_policy

    cfg = SimConfig.build(trace="philly", jobs=jobs, gpus=512, policies=[policy], sharing=rule,
                          shared_jobs="one-gpu")
    prep = prepare(cfg)
    t0 = time.perf_counter()
    res = run_policy(prep, policy, cfg)
    wall = time.perf_counter() - t0
    s = summarise(res)
    return {"policy": policy, "sharing": rule, "jobs": s.jobs, "wall_s": round(wall, 2),
            "avg_jct_h": round(s.avg_jct / 3600, 2), "share_slowed": None if s.share_slowed_by_sharing != s.share_slowed_by_sharing
            else round(s.share_slowed_by_sharing, 3)}


def decisions(policy: str, rule: str, count: int) -> dict:
    from coddl.core.cluster import Cluster
    from coddl.core.job import JobSpec
    from coddl.perf.curves import CODDL_POOL, load_coddl_curves
    from coddl.perf.interference import ColocationTable
    from coddl.placement.sharing import SharingRule
    from coddl.policies.registry import make_policy
    from coddl.scheduler import Scheduler

    curves = load_coddl_curves()
    cluster = Cluster.for_gpus(4096, 8)
    table = ColocationTable.build(cluster.type_names, curves.names)
    s = Scheduler(cluster, make_policy(policy), curves, sharing=SharingRule.parse(rule), retained=table,
                  clash=table.clashes, validate=False)
    rng = np.random.default_rng(1)
    pool = list(CODDL_POOL)
    serial = 0

    def arrival(now: float) -> None:
        nonlocal serial
        serial += 1
        model = pool[int(rng.integers(len(pool)))]
        if serial % 2:
            spec = JobSpec(f"f{serial}", now, 1, 1e6, model, max_gpus=1, gpu_fraction=float(rng.choice([0.25, 0.5])))
        else:
            k = int(rng.choice([1, 2, 4, 8, 16]))
            spec = JobSpec(f"w{serial}", now, k, 1e6, model)
        s.submit(spec, now)

    for _ in range(2000):
        arrival(0.0)
    s.step(0.0)
    times = []
    now = 0.0
    for i in range(count):
        now += 10.0
        if i % 2:
            arrival(now)
        else:
            s.complete(s.table.ids[int(rng.integers(s.table.n))], now)
        t0 = time.perf_counter()
        s.step(now)
        times.append(1e3 * (time.perf_counter() - t0))
    return {"policy": policy, "sharing": rule, "active_jobs": s.table.n, "gpus": 4096,
            "shared_gpus": s.sharing.gpus_used if s.sharing else 0, "decisions": count,
            "median_ms": round(float(np.median(times)), 2), "p99_ms": round(float(np.percentile(times, 99)), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--digest", default="fifo,srtf,srsf,max-min,afs-l,afs-p", help="policies run on the digest ('': none)")
    ap.add_argument("--decision", default="fifo,srtf,max-min,afs-l,tiresias-l,optimus",
                    help="policies timed per decision ('': none)")
    ap.add_argument("--jobs", type=int, default=0, help="first N jobs of the digest (0: all)")
    ap.add_argument("--decisions", type=int, default=300)
    args = ap.parse_args()
    out: dict = {"digest_512_gpus": [], "decision_2000_jobs_4096_gpus": []}
    for p in filter(None, args.digest.split(",")):
        runs = {rule: digest(p, rule, args.jobs or None) for rule in ("exclusive", "pack", "aware")}
        for rule, r in runs.items():
            r["vs_exclusive"] = round(r["wall_s"] / max(runs["exclusive"]["wall_s"], 1e-9), 2)
            out["digest_512_gpus"].append(r)
    for p in filter(None, args.decision.split(",")):
        for rule in ("exclusive", "pack", "aware"):
            out["decision_2000_jobs_4096_gpus"].append(decisions(p, rule, args.decisions))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
