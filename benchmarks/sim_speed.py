"""Simulator speed: the Philly digest on 512 GPUs (64 × 8) with CoDDL curves, per built-in policy.

Prints JSON: the CPU seconds to read the whole digest (best of three; goal: well under one second),
then per policy and trace size (10k, 20k, 40k, all 82,247 jobs) the wall seconds, CPU
seconds, simulated events per second, microseconds per event and peak RSS; plus 5,000 jobs on
128 GPUs, the size at which the Tiresias simulator needs about 15 CPU-seconds. Each run is a fresh
process so peak RSS is its own.

``--e2e`` measures what a user waits for: ``coddl simulate --trace philly --gpus 512 --policies P
--out DIR`` as a fresh process — start-up, trace, workload, simulation, table, per-job CSV and the
three plots — wall and CPU seconds (median of ``--repeat``), against issue 10's goals: ≤ 10 s for
FIFO, SRTF, SRSF, max-min, AFS-L and AFS-P, ≤ 30 s for the others. The simulation's own share is
read from the run's summary.csv (``wall_s``).

``--scale`` instead measures how the cost per event grows with the trace: Poisson traces of 10k to
1M jobs drawn from the digest's (duration, GPUs) pairs at offered load 0.8 on 16,384 GPUs (2,048
nodes × 8), µs per event and peak RSS per size (goal: flat).

    python benchmarks/sim_speed.py [--policies fifo,afs-l] [--sizes 10000,20000,40000,0] [--repeat 1]
    python benchmarks/sim_speed.py --scale [--policies fifo,max-min] [--sizes 10000,100000,1000000]
    python benchmarks/sim_speed.py --e2e [--policies fifo,srtf] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def one(policy: str, size: int, gpus: int) -> dict:
    from coddl.core import Cluster
    from coddl.perf.curves import load_coddl_curves
    from coddl.policies import make_policy
    from coddl.scheduler import Scheduler
    from coddl.sim.engine import simulate
    from coddl.sim.metrics import summarise
    from coddl.sim.workload import build_workload
    from coddl.traces import load_trace

    curves = load_coddl_curves()
    specs = build_workload(load_trace("philly", limit=size or None), curves, seed=1)
    sched = Scheduler(Cluster.for_gpus(gpus, 8), make_policy(policy), curves, seed=1, validate=False)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    res = simulate(specs, sched, record_timeline=False)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    s = summarise(res)
    return {
        "policy": policy, "jobs": len(specs), "gpus": gpus, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
        "events": res.events, "steps": res.steps, "events_per_s": round(res.events / wall),
        "us_per_event": round(1e6 * wall / res.events, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "avg_jct_h": round(s.avg_jct / 3600, 3), "makespan_h": round(s.makespan / 3600, 2),
    }


DEFAULT_SIZES = "10000,20000,40000,0"
SCALE_GPUS = 16_384
SCALE_LOAD = 0.8


def one_scaled(policy: str, size: int) -> dict:
    """``size`` jobs drawn from the digest, Poisson arrivals at load 0.8 on 16,384 GPUs."""
    from coddl.core import Cluster
    from coddl.perf.curves import load_coddl_curves
    from coddl.policies import make_policy
    from coddl.scheduler import Scheduler
    from coddl.sim.engine import simulate
    from coddl.sim.workload import build_workload
    from coddl.traces import poisson_trace

    curves = load_coddl_curves()
    cpu0 = time.process_time()
    specs = build_workload(poisson_trace(size, SCALE_LOAD, SCALE_GPUS, 1, demand="philly-digest"), curves, seed=1)
    build = time.process_time() - cpu0
    sched = Scheduler(Cluster.for_gpus(SCALE_GPUS, 8), make_policy(policy), curves, seed=1, validate=False)
    cpu0 = time.process_time()
    res = simulate(specs, sched, record_timeline=False)
    cpu = time.process_time() - cpu0
    return {
        "policy": policy, "jobs": len(specs), "gpus": SCALE_GPUS, "load": SCALE_LOAD,
        "build_cpu_s": round(build, 2), "cpu_s": round(cpu, 2), "events": res.events, "steps": res.steps,
        "us_per_event": round(1e6 * cpu / res.events, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def scale(policies: list[str], sizes: list[int]) -> None:
    from rich.progress import Progress

    runs = []
    with Progress(transient=True) as bar:
        task = bar.add_task("scaling", total=len(policies) * len(sizes))
        for p in policies:
            for size in sizes:
                out = subprocess.run([sys.executable, __file__, "--one-scaled", p, str(size)],
                                     capture_output=True, text=True, check=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
                bar.console.print(json.dumps(runs[-1]))
                bar.advance(task)
    growth = {}
    for p in policies:
        pts = sorted((r["jobs"], r["us_per_event"]) for r in runs if r["policy"] == p)
        growth[p] = round(pts[-1][1] / pts[0][1], 2)
    print(json.dumps({
        "benchmark": "sim_speed --scale", "demand": "philly digest (duration, GPUs) pairs",
        "cluster": f"{SCALE_GPUS // 8} nodes x 8 GPUs", "load": SCALE_LOAD, "goal": "flat cost per event",
        "us_per_event_growth_largest_vs_smallest": growth, "runs": runs,
    }, indent=2))


def trace_load_cpu_s() -> float:
    """CPU seconds to read and validate the bundled Philly digest, best of three."""
    from coddl.traces import load_trace

    best = float("inf")
    for _ in range(3):
        t = time.process_time()
        load_trace("philly")
        best = min(best, time.process_time() - t)
    return round(best, 3)


FAST_GOAL_S = {"fifo": 10.0, "srtf": 10.0, "srsf": 10.0, "max-min": 10.0, "afs-l": 10.0, "afs-p": 10.0}
OTHER_GOAL_S = 30.0


def e2e_once(policy: str) -> dict:
    """One ``coddl simulate`` of the whole digest as a user types it; CPU from the child's rusage."""
    import csv
    import shutil
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="coddl-e2e-"))
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall0 = time.perf_counter()
        subprocess.run([str(Path(sys.executable).with_name("coddl")), "simulate", "--trace", "philly", "--gpus",
                        "512", "--policies", policy, "--out", str(out)], check=True, capture_output=True)
        wall = time.perf_counter() - wall0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(out / "summary.csv") as f:
            sim = float(next(csv.DictReader(f))["wall_s"])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "sim_wall_s": sim}


def e2e(policies: list[str], repeat: int) -> None:
    from rich.progress import Progress

    rows = []
    with Progress(transient=True) as bar:
        task = bar.add_task("coddl simulate, whole digest", total=len(policies) * repeat)
        for p in policies:
            runs = []
            for _ in range(repeat):
                runs.append(e2e_once(p))
                bar.advance(task)
            goal = FAST_GOAL_S.get(p, OTHER_GOAL_S)
            row = {"policy": p, **{k: round(statistics.median(r[k] for r in runs), 2) for k in runs[0]},
                   "runs": repeat, "goal_s": goal}
            row["goal_met_wall"] = row["wall_s"] <= goal
            rows.append(row)
            bar.console.print(json.dumps(row))
    print(json.dumps({
        "benchmark": "sim_speed --e2e", "command": "coddl simulate --trace philly --gpus 512 --policies P --out DIR",
        "jobs": 82247, "goals_s": {**FAST_GOAL_S, "others": OTHER_GOAL_S}, "runs": rows,
    }, indent=2))


def run_child(policy: str, size: int, gpus: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--one", policy, str(size), str(gpus)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="", help="comma-separated; default: every registered policy")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="jobs per run; 0 = the whole digest")
    ap.add_argument("--repeat", type=int, default=1, help="runs per point; the median is reported")
    ap.add_argument("--scale", action="store_true", help="cost per event from 10k to 1M jobs on 16,384 GPUs")
    ap.add_argument("--e2e", action="store_true", help="coddl simulate end to end on the whole digest")
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--one-scaled", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), int(a.one[2]))))
        return
    if a.one_scaled:
        print(json.dumps(one_scaled(a.one_scaled[0], int(a.one_scaled[1]))))
        return
    if a.e2e:
        e2e([p for p in a.policies.split(",") if p] or [*FAST_GOAL_S], a.repeat)
        return
    if a.scale:
        sizes = [int(x) for x in a.sizes.split(",")] if a.sizes != DEFAULT_SIZES else [10_000, 100_000, 1_000_000]
        scale([p for p in a.policies.split(",") if p] or ["fifo", "max-min"], sizes)
        return
    from coddl.policies import available

    load_cpu = trace_load_cpu_s()
    print(json.dumps({"trace_load_cpu_s": load_cpu}), file=sys.stderr)
    policies = [p for p in a.policies.split(",") if p] or [
        name for name, cls in available().items() if name not in ("gavel", "aiturbo")]
    sizes = [int(x) for x in a.sizes.split(",")]
    results = []
    for p in policies:
        points = [(s, 512) for s in sizes] + [(5000, 128)]
        for size, gpus in points:
            runs = [run_child(p, size, gpus) for _ in range(a.repeat)]
            med = dict(runs[0])
            for k in ("wall_s", "cpu_s", "events_per_s", "us_per_event", "peak_rss_mb"):
                med[k] = statistics.median(r[k] for r in runs)
            results.append(med)
            print(json.dumps(med), file=sys.stderr)
    full = {r["policy"]: r["wall_s"] for r in results if r["gpus"] == 512 and r["jobs"] >= 80000}
    growth = {}
    for p in policies:
        pts = sorted((r["jobs"], r["us_per_event"]) for r in results if r["policy"] == p and r["gpus"] == 512)
        if len(pts) >= 2:
            growth[p] = round(pts[-1][1] / pts[0][1], 2)
    tiresias = {r["policy"]: round(15.0 / r["cpu_s"], 1) for r in results if r["gpus"] == 128}
    print(json.dumps({
        "benchmark": "sim_speed", "trace": "philly digest", "cluster": "64 nodes x 8 GPUs",
        "goal": "the simulation alone; end to end (start-up, report, plots) see --e2e: <= 10 s for fifo, srtf, "
                "srsf, max-min, afs-l, afs-p and <= 30 s for the others; flat per-event cost",
        "trace_load_cpu_s": load_cpu,
        "whole_digest_wall_s": full,
        "us_per_event_growth_largest_vs_smallest": growth,
        "speedup_vs_tiresias_15cpu_s_at_5000_jobs_128_gpus": tiresias,
        "runs": results,
    }, indent=2))


if __name__ == "__main__":
    main()
