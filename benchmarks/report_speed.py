"""What a user of ``coddl simulate --out`` waits for: the simulation, then the report (summary,
per-job CSV, three plots), in CPU seconds, for the Philly digest's first N jobs on 512 GPUs.

The allocation plot's baseline is the earlier drawing, one ``broken_barh`` call (one matplotlib
collection) per span of GPUs held: an elastic policy resizes the plotted jobs at nearly every
event, and that made the report cost minutes. It is timed in the same run, on the same result.

    python benchmarks/report_speed.py [--jobs 3000] [--policy max-min] [--repeat 3] [--baseline]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path


def old_plot_allocations(path: Path, results: dict, max_jobs: int = 60) -> None:
    """The allocation plot as drawn before: one collection per span."""
    import matplotlib.pyplot as plt

    n = len(results)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.2 + 2.4 * n), squeeze=False, sharex=True)
    cmap = plt.get_cmap("viridis")
    firsts = {name: {r.spec.job_id for r in sorted(res.records, key=lambda r: (r.spec.arrival, r.spec.job_id))[:max_jobs]}
              for name, res in results.items()}
    top = max((g for name, res in results.items() for _, j, g in res.timeline if j in firsts[name]), default=1)
    for ax, (name, res) in zip(axes[:, 0], results.items()):
        order = sorted(res.records, key=lambda r: (r.spec.arrival, r.spec.job_id))[:max_jobs]
        lane = {r.spec.job_id: i for i, r in enumerate(order)}
        finish = {r.spec.job_id: r.finish for r in order}
        segments: dict = {}
        for t, job, g in res.timeline:
            if job in lane:
                segments.setdefault(job, []).append((t, g))
        for job, seg in segments.items():
            seg.append((finish[job], 0))
            for (t0, g), (t1, _) in zip(seg, seg[1:]):
                if g > 0 and t1 > t0:
                    ax.broken_barh([(t0 / 3600, (t1 - t0) / 3600)], (lane[job] - 0.4, 0.8), color=cmap(g / top))
        ax.set_ylabel(f"{name}\njob (by arrival)")
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel("time (hours)")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, top))
    fig.colorbar(sm, ax=axes[:, 0].tolist(), label="GPUs held")
    fig.suptitle(f"GPUs allocated per job over time (first {max_jobs} jobs)")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=3000)
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--policy", default="max-min")
    ap.add_argument("--repeat", type=int, default=3, help="report runs; the median is reported")
    ap.add_argument("--baseline", action="store_true", help="also time the earlier allocation plot (slow)")
    a = ap.parse_args()

    from coddl.sim.config import SimConfig
    from coddl.sim.metrics import summarise
    from coddl.sim.report import plot_allocations, write_report
    from coddl.sim.run import prepare, run_policy

    cfg = SimConfig.build(trace="philly", jobs=a.jobs, gpus=a.gpus, policies=[a.policy])
    prep = prepare(cfg)
    c0 = time.process_time()
    res = run_policy(prep, a.policy, cfg)
    sim_cpu = time.process_time() - c0
    results = {a.policy: res}
    report, alloc, old = [], [], []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(a.repeat):
            c = time.process_time()
            write_report(Path(d), [summarise(res)], results)
            report.append(time.process_time() - c)
            c = time.process_time()
            plot_allocations(Path(d) / "a.png", results)
            alloc.append(time.process_time() - c)
        if a.baseline:
            c = time.process_time()
            old_plot_allocations(Path(d) / "old.png", results)
            old.append(time.process_time() - c)
    out = {
        "jobs": len(prep.specs), "gpus": a.gpus, "policy": a.policy, "timeline_actions": len(res.timeline),
        "simulate_cpu_s": round(sim_cpu, 2), "report_cpu_s_median": round(statistics.median(report), 2),
        "allocations_plot_cpu_s_median": round(statistics.median(alloc), 2),
        "load_1min": round(os.getloadavg()[0], 2),
    }
    if old:
        out["allocations_plot_baseline_cpu_s"] = round(old[0], 2)
        out["allocations_plot_speedup"] = round(old[0] / statistics.median(alloc), 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
