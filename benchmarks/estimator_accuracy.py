"""Accuracy of the single-GPU throughput estimator on Pollux's measured T4 placements.

Protocol (CoDDL's three steps, ALGORITHMS.md §6):
1. calibrate the cluster's links once, on the multi-GPU rows of ONE app (default ncf: the cheapest job,
   and the one whose small, latency-bound all-reduces expose the links' per-message cost);
2. for every app, build its profile from its one-GPU rows only and predict the step time of all its
   multi-GPU rows in placements.csv and scalability.csv;
3. correct each app online with the measurements of ONE placement (default 2222: 4 nodes × 2 GPUs)
   at the batch sizes it was measured at, fed one by one to ``ModelCorrection``, and predict again.

MAPE is of throughput, over all multi-GPU rows except the measured placement's own (before and
after use the same rows). ``after_by_measured_placement`` shows how the result depends on which
placement was measured, ``by_calibration_app`` how it depends on the calibration job, and
``self_fit_mape_pct`` is the MAPE with the links fitted on the app itself (to its step and
all-reduce times, so not a lower bound on the step-time MAPE). Prints JSON, or a
Markdown table with ``--markdown``.

    python benchmarks/estimator_accuracy.py [--calibrate-on ncf] [--measured 2222] [--markdown]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

import numpy as np

from coddl.perf.calibrate import Calibration, RowArrays, calibrate_links, pollux_profile, throughput_mape
from coddl.perf.correction import ModelCorrection
from coddl.perf.estimator import JobProfile, ThroughputModel
from coddl.perf.profiles import POLLUX_APPS, PolluxApp, PolluxRow, load_pollux_app

GOAL_BEFORE, GOAL_AFTER = 20.0, 10.0
SENSITIVITY = ("2", "11", "22", "1111", "2222", "4444")


@dataclass(frozen=True)
class AppAccuracy:
    app: str
    model: str
    held_out: bool
    rows: int
    mape_before_pct: float
    mape_after_pct: float
    compute_factor: float  # the fitted correction
    comm_factor: float
    job_overlap: float
    after_by_measured_placement: dict[str, float]
    self_fit_mape_pct: float  # links fitted on this app itself (its step and all-reduce times)

    @property
    def meets_before(self) -> bool:
        return self.mape_before_pct <= GOAL_BEFORE

    @property
    def meets_after(self) -> bool:
        return self.mape_after_pct <= GOAL_AFTER


def _split(app: PolluxApp, digits: str) -> tuple[list[PolluxRow], list[PolluxRow]]:
    """(rows of the measured placement, every other multi-GPU row)."""
    shape = tuple(int(c) for c in digits)
    is_measured = lambda r: r.source == "placements" and r.gpus_per_node == shape  # noqa: E731
    measured = [r for r in app.multi_gpu if is_measured(r)]
    if not measured:
        raise SystemExit(f"{app.name}: placement {digits} was not measured")
    return measured, [r for r in app.multi_gpu if not is_measured(r)]


def accuracy(app: PolluxApp, model: ThroughputModel, digits: str) -> tuple[int, float, float, ModelCorrection]:
    """(rows evaluated, MAPE before, MAPE after, the fitted correction) when ``digits`` is the measured
    placement."""
    profile = pollux_profile(app)
    measured, rest = _split(app, digits)
    correction = ModelCorrection(model.overlap)
    sample = RowArrays.of(measured)
    for c, s, t, n in zip(*_parts(model, profile, sample), sample.step_time, sample.num_nodes):
        correction.observe(float(c), float(s), float(t), int(n))
    rows = RowArrays.of(rest)
    return (len(rest), throughput_mape(rows.predict(model, profile), rows.step_time),
            throughput_mape(correction.seconds(*_parts(model, profile, rows)), rows.step_time), correction)


def _parts(model: ThroughputModel, profile: JobProfile, rows: RowArrays) -> tuple[np.ndarray, np.ndarray]:
    """The estimator's compute and communication seconds of each row, before overlap."""
    return (profile.compute.seconds(rows.local_bsz),
            model.communication_seconds(profile, rows.num_gpus, rows.num_nodes, rows.max_per_node))


def evaluate(calibrate_on: str = "ncf", measured: str = "2222") -> tuple[Calibration, list[AppAccuracy]]:
    calibration = calibrate_links(load_pollux_app(calibrate_on))
    model = calibration.model()
    out = []
    for name in POLLUX_APPS:
        app = load_pollux_app(name)
        rows, before, after, correction = accuracy(app, model, measured)
        by_placement = {d: round(accuracy(app, model, d)[2], 1) for d in SENSITIVITY}
        floor = calibration.mape if name == calibrate_on else calibrate_links(app).mape
        out.append(AppAccuracy(name, app.model.architecture, name != calibrate_on, rows, round(before, 1),
                               round(after, 1), round(correction.compute_factor, 3),
                               round(correction.comm_factor, 3), round(correction.job_overlap, 2),
                               by_placement, round(floor, 1)))
    return calibration, out


def by_calibration_app(measured: str) -> dict[str, dict[str, float]]:
    """Worst held-out MAPE before and after correction with each app as the calibration job."""
    out = {}
    for name in POLLUX_APPS:
        _, apps = evaluate(name, measured)
        held = [a for a in apps if a.held_out]
        out[name] = {"worst_before_pct": max(a.mape_before_pct for a in held),
                     "worst_after_pct": max(a.mape_after_pct for a in held)}
    return out


def report(calibration: Calibration, apps: list[AppAccuracy], measured: str) -> dict:
    links = calibration.links
    return {
        "by_calibration_app": by_calibration_app(measured),
        "calibration": {
            "app": calibration.app, "rows": calibration.rows, "fit_mape_pct": round(calibration.mape, 1),
            "algorithm": calibration.algorithm, "bucket_mb": calibration.bucket_mb,
            "overlap_gamma": round(calibration.overlap, 3),
            "inter_node_gbps": round(links.inter_node_gbps, 3), "intra_node_gbps": round(links.intra_node_gbps, 3),
            "inter_node_latency_us": round(links.inter_node_latency_us, 1),
            "intra_node_latency_us": round(links.intra_node_latency_us, 1),
            "two_node_factor": round(links.two_node_factor, 3),
        },
        "measured_placement": measured,
        "goals_pct": {"before": GOAL_BEFORE, "after": GOAL_AFTER},
        "apps": [asdict(a) | {"meets_before": a.meets_before, "meets_after": a.meets_after} for a in apps],
        "held_out_mean_pct": {
            "before": round(float(np.mean([a.mape_before_pct for a in apps if a.held_out])), 1),
            "after": round(float(np.mean([a.mape_after_pct for a in apps if a.held_out])), 1),
        },
    }


def markdown(calibration: Calibration, apps: list[AppAccuracy], measured: str) -> str:
    lines = [
        f"Links calibrated on {calibration.app} ({calibration.rows} multi-GPU rows, fit MAPE "
        f"{calibration.mape:.1f}%); other apps from their one-GPU rows only; corrected online with the "
        f"rows of placement {measured}.",
        "",
        f"| app | model | rows | MAPE before | MAPE after (measured {measured}) | links fitted on itself "
        f"| goals (≤{GOAL_BEFORE:g}% / ≤{GOAL_AFTER:g}%) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for a in apps:
        name = a.app if a.held_out else f"{a.app} (calibration)"
        goals = f"{'yes' if a.meets_before else 'no'} / {'yes' if a.meets_after else 'no'}"
        lines.append(f"| {name} | {a.model} | {a.rows} | {a.mape_before_pct:.1f}% | {a.mape_after_pct:.1f}% | "
                     f"{a.self_fit_mape_pct:.1f}% | {goals} |")
    lines += ["", f"With each app as the calibration job (worst held-out MAPE, measured {measured}):", "",
              "| calibration job | worst before | worst after |", "|---|---:|---:|"]
    for name, worst in by_calibration_app(measured).items():
        lines.append(f"| {name} | {worst['worst_before_pct']:.1f}% | {worst['worst_after_pct']:.1f}% |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrate-on", default="ncf", choices=POLLUX_APPS)
    parser.add_argument("--measured", default="2222", help="placement digits (GPUs per node) measured online")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table instead of JSON")
    args = parser.parse_args()
    calibration, apps = evaluate(args.calibrate_on, args.measured)
    if args.markdown:
        print(markdown(calibration, apps, args.measured))
    else:
        print(json.dumps(report(calibration, apps, args.measured), indent=2))


if __name__ == "__main__":
    main()
