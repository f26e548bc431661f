"""Where a simulated event's time goes: the whole Philly digest on 512 GPUs under cProfile, per policy,
split into the parts of a scheduling step.

Parts (cumulative time of the functions named, so each includes what it calls):

* ``decision``: the policy's ``allocate`` (and the restart rule around it: ``Scheduler._decide``);
* ``placement``: ``ConsolidatingPlacer.place`` (which GPUs and cores each changed job gets);
* ``plan``: the rest of ``Scheduler.step`` (which jobs changed, the actions, the table's counters);
* ``executor``: ``SimExecutor.apply``/``events``/``next_time`` (new rates, predicted exits, the heap);
* ``arrivals, exits``: ``Scheduler.submit``/``complete`` (the job table's rows);
* ``recorder``: the utilisation, cores and fragmentation series;
* ``loop``: what is left of ``simulate`` (the event loop itself, progress).

A 200-job run first loads the compiled code, so its one-time cost (about 0.4 s) is not in the shares.

cProfile charges every Python call, so Python-heavy parts look larger than they are without it
(the run takes about 1.5–2× as long); the shares, not the seconds, are what to read. Prints JSON.

    python benchmarks/sim_profile.py [--policies fifo,max-min,afs-l] [--jobs 0]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import subprocess
import sys

PARTS = {
    "decision": [("scheduler.py", "_decide")],
    "placement": [("placer.py", "place")],
    "executor": [("executor.py", "apply"), ("executor.py", "events"), ("executor.py", "next_time")],
    "arrivals, exits": [("scheduler.py", "submit"), ("scheduler.py", "complete")],
    "recorder": [("recorder.py", "step")],
}


def one(policy: str, jobs: int) -> dict:
    from coddl.core import Cluster
    from coddl.perf.curves import load_coddl_curves
    from coddl.policies import make_policy
    from coddl.scheduler import Scheduler
    from coddl.sim.engine import simulate
    from coddl.sim.workload import build_workload
    from coddl.traces import load_trace

    curves = load_coddl_curves()
    specs = build_workload(load_trace("philly", limit=jobs or None), curves, seed=1)
    # compiled code is loaded (or compiled) at its first call: a small run first keeps that out
    simulate(specs[:200], Scheduler(Cluster.for_gpus(512, 8), make_policy(policy), curves, seed=1, validate=False))
    sched = Scheduler(Cluster.for_gpus(512, 8), make_policy(policy), curves, seed=1, validate=False)
    prof = cProfile.Profile()
    prof.enable()
    res = simulate(specs, sched, record_timeline=True)
    prof.disable()
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (cc, nc, tottime, cumtime, callers)

    def cum(file: str, name: str) -> float:
        return sum(v[3] for (f, _, n), v in stats.items() if f.endswith(file) and n == name)

    total = cum("engine.py", "simulate")
    parts = {part: sum(cum(f, n) for f, n in fns) for part, fns in PARTS.items()}
    parts["plan"] = cum("scheduler.py", "step") - parts["decision"] - parts["placement"]
    parts["loop"] = total - sum(parts.values())
    return {"policy": policy, "jobs": len(specs), "events": res.events, "steps": res.steps,
            "profiled_s": round(total, 2), "us_per_event_profiled": round(1e6 * total / res.events, 1),
            "share": {k: round(v / total, 3) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="fifo,srtf,srsf,max-min,afs-l,afs-p")
    ap.add_argument("--jobs", type=int, default=0, help="first N jobs of the digest (0: all 82,247)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.jobs)))
        return
    rows = []
    for p in a.policies.split(","):  # a fresh process each: no compiled code or caches carried over
        out = subprocess.run([sys.executable, __file__, "--one", p, "--jobs", str(a.jobs)],
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps({"benchmark": "sim_profile", "trace": "philly digest", "gpus": 512, "runs": rows}, indent=2))


if __name__ == "__main__":
    main()
