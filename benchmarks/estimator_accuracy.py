"""Held-out accuracy of the throughput estimator on every bundled testbed (and any given tables).

Built only on the public API (``coddl.perf``), with the protocol of ``coddl.perf.accuracy``:
leave-one-testbed-out (each testbed's prior learned from the others), the fabric calibrated on the
testbed's collective micro-benchmarks or its other jobs (the recommended choice) and on each
single job in turn (to show the best and the worst choice), each held-out job predicted from its
one-GPU rows (before) and after ONE measured multi-GPU row (after; the mean over up to --points
measured rows spread over its placements and batches), against linear scaling and Amdahl's law
fitted to the same row, and with two measured sizes against Amdahl fitted to both.

Goals: ≤ 20% MAPE for every app before correction, ≤ 10% after one correction, better than the
Amdahl fit after correction on most apps. Prints JSON (or Markdown tables with --markdown).

    python benchmarks/estimator_accuracy.py [--markdown] [--plot docs/estimator-accuracy.png]
        [--points 40] [--write-prior] [extra tables...]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from coddl.perf import read_many
from coddl.perf.accuracy import AppAccuracy, every_choice, leave_one_testbed_out, plot_predicted_vs_measured, recommended
from coddl.perf.calibrate import population, write_prior
from coddl.perf.curves import data_path

GOAL_BEFORE, GOAL_AFTER = 20.0, 10.0
BUNDLED = ("pollux-t4.csv", "gavel.csv", "cpu-gloo.csv")


def tables(extra: list[str]):
    paths = [data_path(f"profiles/{name}") for name in BUNDLED if data_path(f"profiles/{name}").exists()]
    return read_many(paths + [Path(p) for p in extra])


def summarise(results: dict[str, list[AppAccuracy]], table) -> dict:
    out = {}
    for cluster, rows in results.items():
        rec = recommended(table.where(cluster=cluster))
        main = [r for r in rows if r.calibration == rec]
        choices = {}
        for choice in dict.fromkeys(r.calibration for r in rows):
            rs = [r for r in rows if r.calibration == choice]
            choices[choice] = {"worst_before": max(r.before for r in rs), "worst_after": max(r.after for r in rs),
                               "mean_before": float(np.mean([r.before for r in rs])),
                               "mean_after": float(np.mean([r.after for r in rs]))}
        singles = {c: v for c, v in choices.items() if c != rec}
        # judged by the worst app before correction: what a calibration choice alone decides
        worst = max(singles, key=lambda c: (singles[c]["worst_before"], singles[c]["worst_after"])) if singles else None
        best = min(singles, key=lambda c: (singles[c]["worst_before"], singles[c]["worst_after"])) if singles else None
        out[cluster] = {
            "recommended_calibration": rec,
            "apps": [r.as_dict() | {"meets_before": r.before <= GOAL_BEFORE, "meets_after": r.after <= GOAL_AFTER,
                                    "beats_amdahl_after": r.after < r.amdahl,
                                    "beats_amdahl_after_two": (not math.isnan(r.after_two)) and r.after_two < r.amdahl_two}
                     for r in main],
            "calibration_choices": {c: {k: round(v, 1) for k, v in s.items()} for c, s in choices.items()},
            "best_single_job": best, "worst_single_job": worst,
        }
    return out


def markdown(summary: dict) -> str:
    lines = []
    for cluster, s in summary.items():
        lines += [f"**{cluster}** — calibrated on {s['recommended_calibration']}; MAPE of throughput (%), "
                  "held out:", "",
                  "| app | rows | before | after 1 | linear | Amdahl 1 | after 2 | Amdahl 2 | worse near | in 90% interval |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for a in s["apps"]:
            def cell(v: float, bold: bool = False) -> str:
                return "–" if isinstance(v, float) and math.isnan(v) else (f"**{v:.1f}**" if bold else f"{v:.1f}")
            lines.append(f"| {a['app']} | {a['rows']:,} | {cell(a['before'], a['before'] > GOAL_BEFORE)} | "
                         f"{cell(a['after'], a['after'] > GOAL_AFTER)} | {cell(a['linear'])} | {cell(a['amdahl'])} | "
                         f"{cell(a['after_two'])} | {cell(a['amdahl_two'])} | {100 * a['worse_near']:.0f}% | "
                         f"{100 * a['coverage']:.0f}% |")
        ch = s["calibration_choices"]
        if len(ch) > 1:
            lines += ["", "| calibrated on | worst app before | worst app after | mean before | mean after |",
                      "|---|---:|---:|---:|---:|"]
            for c, v in ch.items():
                tag = " (recommended)" if c == s["recommended_calibration"] else (
                    " (best single job)" if c == s["best_single_job"] else (
                        " (worst single job)" if c == s["worst_single_job"] else ""))
                lines.append(f"| {c}{tag} | {v['worst_before']:.1f} | {v['worst_after']:.1f} | "
                             f"{v['mean_before']:.1f} | {v['mean_after']:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("extra", nargs="*", help="more profile tables (each cluster becomes a testbed)")
    parser.add_argument("--points", type=int, default=40, help="measured rows tried per job")
    parser.add_argument("--recommended-only", action="store_true", help="skip the single-job calibrations")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--plot", type=Path, help="predicted-vs-measured plot (PNG)")
    parser.add_argument("--write-prior", action="store_true",
                        help="refit the bundled prior (data/profiles/prior.json) from every testbed")
    args = parser.parse_args()
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    table = tables(args.extra)
    if args.write_prior:
        pops = [population(table.where(cluster=c)) for c in table.clusters]
        prior = write_prior(pops, data_path("profiles/prior.json"))
        print(json.dumps({"prior": {"mean": prior.mean, "sd": prior.sd, "noise": prior.noise,
                                    "comm_noise": prior.comm_noise}}, indent=2), file=sys.stderr)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("accuracy")
        results = leave_one_testbed_out(table, None if args.recommended_only else every_choice, args.points,
                                        progress=lambda s: progress.update(task, description=s))
    summary = summarise(results, table)
    if args.plot:
        plot_predicted_vs_measured(results, args.plot)
    if args.markdown:
        print(markdown(summary))
    else:
        print(json.dumps({"goals_pct": {"before": GOAL_BEFORE, "after": GOAL_AFTER}, "testbeds": summary}, indent=1))


if __name__ == "__main__":
    main()
