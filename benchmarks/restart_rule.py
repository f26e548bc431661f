"""Average JCT under checkpoint-restart resizes (``reconfig: restart``), with and without the rule
that a job is grown only when the time saved exceeds its restart cost (``charge_restarts``).

Prints one JSON object: per trace and elastic policy, avg JCT (h) and resizes without and with
the rule and their ratio (with ÷ without; below 1 the rule helps), then the median, best and
worst ratio over all runs. Every run is an independent workload (no parameter is fitted to any).

    python benchmarks/restart_rule.py [--traces pollux-1,...] [--policies afs-l,...] [--gpus 64]
"""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

from coddl.sim.config import SimConfig
from coddl.sim.run import prepare, run_policy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default=",".join(f"pollux-{i}" for i in range(1, 9)))
    ap.add_argument("--policies", default="afs-l,afs-p,max-min,optimus")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=None)
    a = ap.parse_args()
    runs = []
    for trace in a.traces.split(","):
        out = {}
        for charge in (False, True):
            cfg = SimConfig.build(trace=trace, gpus=a.gpus, jobs=a.jobs, policies=a.policies.split(","),
                                  reconfig="restart", charge_restarts=charge)
            prep = prepare(cfg)
            for p in cfg.policies:
                r = run_policy(prep, p, cfg)
                out[p, charge] = (float(np.mean([x.finish - x.spec.arrival for x in r.records])) / 3600,
                                  sum(x.resizes for x in r.records))
        for p in a.policies.split(","):
            (j0, n0), (j1, n1) = out[p, False], out[p, True]
            runs.append({"trace": trace, "policy": p, "avg_jct_h": [round(j0, 4), round(j1, 4)],
                         "resizes": [n0, n1], "ratio": round(j1 / j0, 4)})
    ratios = [r["ratio"] for r in runs]
    print(json.dumps({"gpus": a.gpus, "runs": runs, "median_ratio": statistics.median(ratios),
                      "best_ratio": min(ratios), "worst_ratio": max(ratios)}, indent=1))


if __name__ == "__main__":
    main()
