"""``coddl estimate``: calibrate a cluster's fabric from measurements, predict a job's throughput on
any placement, and measure how accurate that is on held-out data.

All three read profile tables in coddl's format (``coddl.perf.table``: CSV or Parquet, one row per
measured configuration). A bad row, flag or file is one red line naming file, line and field, and
exit status 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from coddl.cli.errors import fail, user_errors
from coddl.core.cluster import MAX_GPUS_PER_NODE

app = typer.Typer(help="Throughput estimation: calibrate, predict, accuracy (profile tables in coddl's format).",
                  no_args_is_help=True)
_out = Console()

PROFILES_HELP = "Profile tables (.csv, .csv.gz, .parquet) in coddl's format; bundled: pollux-t4, gavel, cpu-gloo."


def _read(paths: list[str]):
    from coddl.perf.curves import data_path
    from coddl.perf.table import read_many

    resolved = []
    for p in paths:
        bundled = data_path(f"profiles/{p}.csv")
        resolved.append(bundled if not Path(p).exists() and bundled.exists() else Path(p))
    return read_many(resolved)


@app.command()
def calibrate(
    profiles: list[str] = typer.Argument(..., help=PROFILES_HELP),
    cluster_spec: Path = typer.Option(..., "--cluster", help="The cluster's spec (YAML): nodes and GPU types."),
    on: Optional[str] = typer.Option(None, "--on", help="Which cluster of the tables (when they hold several)."),
    jobs: Optional[str] = typer.Option(None, "--jobs", help="Comma-separated jobs to calibrate on (default: the "
                                       "collective micro-benchmarks if any, else every job)."),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="ring, hierarchical, tree or auto "
                                            "(default: whichever fits best)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Where to write the calibration (default "
                                       "<cluster>.calibration.json)."),
) -> None:
    """Fit the cluster's links (bandwidth and latency inside and between nodes) and collective
    algorithm from its measurements; write them with the prior new jobs start from."""
    from coddl.clusterspec import load_cluster
    from coddl.perf.calibrate import calibrate as fit
    from coddl.perf.fabric import ALGORITHMS

    with user_errors():
        if algorithm is not None and algorithm not in ALGORITHMS:
            raise fail(f"--algorithm: expected one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
        cluster = load_cluster(cluster_spec)
        table = _one_cluster(_read(profiles), on)
        unknown = sorted(set(table.gpu_type) - set(cluster.gpu_types))
        if unknown:
            raise fail(f"{cluster_spec}: gpu_types: the profiles were measured on {', '.join(unknown)}, "
                       f"which the spec does not define ({', '.join(cluster.gpu_types)})")
        names = [j.strip() for j in jobs.split(",") if j.strip()] if jobs else None
        cal = fit(table, cluster, names, algorithm)  # type: ignore[arg-type]
        path = out or Path(f"{cal.cluster}.calibration.json")
        path.write_text(cal.to_json() + "\n")
    f = cal.fabric
    t = Table(title=f"{cal.cluster}: calibrated on {', '.join(cal.calibrated_on)} ({cal.rows:,} rows, "
                    f"fit error {100 * (math.exp(cal.fit_rms) - 1):.1f}%)")
    for col in ("level", "bandwidth GB/s", "latency µs/step"):
        t.add_column(col, justify="right" if col != "level" else "left")
    t.add_row("inside a node", f"{f.intra_gbps:.3g}", f"{f.intra_latency_us:.3g}")
    t.add_row("between nodes", f"{f.inter_gbps:.3g}", f"{f.inter_latency_us:.3g}")
    _out.print(t)
    _out.print(f"all-reduce: {f.algorithm}; two-node jobs ×{f.two_node_factor:.2f}; wrote {path}",
               markup=False, highlight=False)


def _one_cluster(table, on: Optional[str]):
    from coddl.perf.table import ProfileError

    if on is not None:
        if on not in table.clusters:
            raise ProfileError(f"--on: no cluster {on!r} in the tables; they hold {', '.join(table.clusters)}")
        return table.where(cluster=on)
    if len(table.clusters) > 1:
        raise ProfileError(f"--on: the tables hold several clusters ({', '.join(table.clusters)}); choose one")
    return table


def _placement(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(p) for p in text.split("+"))
    except ValueError:
        shape = ()
    if not shape or any(not 1 <= g <= MAX_GPUS_PER_NODE for g in shape):
        raise fail(f"--placement: expected GPUs per node (1 to {MAX_GPUS_PER_NODE}) joined by '+', e.g. 2+2, "
                   f"got {text!r}")
    return tuple(sorted(shape, reverse=True))


@app.command()
def predict(
    profiles: list[str] = typer.Argument(..., help=PROFILES_HELP + " The job's one-GPU rows are read from them."),
    calibration: Path = typer.Option(..., "--calibration", help="A file written by `coddl estimate calibrate`."),
    model: str = typer.Option(..., "--model", help="The job (a model name in the tables)."),
    placements: list[str] = typer.Option(..., "--placement", help="GPUs per node, e.g. 2+2; repeat for more."),
    local_batch: Optional[float] = typer.Option(None, "--local-batch", help="Samples per GPU (weak scaling)."),
    global_batch: Optional[float] = typer.Option(None, "--global-batch", help="Samples per step, split "
                                                 "over the GPUs (strong scaling)."),
    gpu_type: Optional[str] = typer.Option(None, "--gpu-type", help="GPU type of the placement (default: the "
                                           "one the job was profiled on)."),
    measured: Optional[Path] = typer.Option(None, "--measured", help="Rows of the job measured on multi-GPU "
                                            "placements (same format): the estimate is corrected with them."),
    on: Optional[str] = typer.Option(None, "--from", help="Which cluster's rows hold the job's profile."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Steps/s (and samples/s, with a 90% interval) of a job on each placement."""
    from coddl.perf.calibrate import Calibration, one_gpu_model
    from coddl.perf.correction import correct
    from coddl.perf.table import ProfileError, read_profiles

    with user_errors():
        if (local_batch is None) == (global_batch is None):
            raise fail("give exactly one of --local-batch and --global-batch")
        for name, v in (("--local-batch", local_batch), ("--global-batch", global_batch)):
            if v is not None and not (v > 0 and math.isfinite(v)):
                raise fail(f"{name}: expected a positive number, got {v:g}")
        cal = Calibration.load(calibration)
        table = _read(profiles)
        rows = table.where(model=model, kind="job")
        if len(rows) == 0:
            raise ProfileError(f"--model: no rows of {model!r} in the tables; jobs: {', '.join(table.models())}")
        if len(rows.clusters) > 1:
            rows = _one_cluster(rows, on or (cal.cluster if cal.cluster in rows.clusters else None))
        shapes = [_placement(p) for p in placements]
        est = cal.estimator()
        job = one_gpu_model(rows, cal.prior)
        if measured is not None:
            more = read_profiles(measured).where(model=model, kind="job")
            if len(more) == 0:
                raise ProfileError(f"{measured}: no rows of {model!r} to correct the estimate with")
            job = correct(job, est, more)
        kind = gpu_type or job.gpu_type
        if gpu_type is not None and cal.gpu_types and gpu_type not in cal.gpu_types:
            # an unknown type would be priced at the profiled type's speed, silently
            raise fail(f"--gpu-type: {gpu_type!r} is not a GPU type of {calibration.name}'s cluster "
                       f"({', '.join(sorted(cal.gpu_types))})")
        k = np.array([sum(s) for s in shapes])
        local = np.full(len(shapes), local_batch) if local_batch is not None else global_batch / k
        speed = est.speed(job, kind)
        p = est.rates(job, k, np.array([len(s) for s in shapes]), np.array([s[0] for s in shapes]), local, speed)
    results = [{"placement": "+".join(map(str, s)), "gpus": int(k[i]), "nodes": len(s), "local_batch": float(local[i]),
                "steps_per_s": float(p.steps_per_s[i]), "low": float(p.low[i]), "high": float(p.high[i]),
                "samples_per_s": float(p.steps_per_s[i] * local[i] * k[i]),
                "compute_s": float(p.compute_s[i]), "comm_s": float(p.comm_s[i])} for i, s in enumerate(shapes)]
    if json_out:
        _out.print_json(json.dumps({"model": model, "gpu_type": kind, "corrected_with": job.measured,
                                    "placements": results}))
        return
    t = Table(title=f"{model} on {cal.cluster} ({kind})" + (f", corrected with {job.measured} measured steps"
                                                            if job.measured else ""))
    for col in ("placement", "GPUs", "local batch", "steps/s", "90% interval", "samples/s",
                "compute s", "exposed comm s"):
        t.add_column(col, justify="right")
    for r in results:
        t.add_row(r["placement"], str(r["gpus"]), f"{r['local_batch']:g}", f"{r['steps_per_s']:.4g}",
                  f"{r['low']:.3g}–{r['high']:.3g}", f"{r['samples_per_s']:.4g}", f"{r['compute_s']:.3g}",
                  f"{r['comm_s']:.3g}")
    _out.print(t)


@app.command()
def accuracy(
    profiles: list[str] = typer.Argument(..., help=PROFILES_HELP),
    points: int = typer.Option(40, "--points", min=1, help="Measured rows tried per job for the corrections."),
    every_choice: bool = typer.Option(False, "--every-choice", help="Also calibrate on each single job in turn."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write a predicted-vs-measured plot (PNG)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Write every figure as JSON."),
    bundled_prior: bool = typer.Option(True, "--bundled-prior/--no-bundled-prior",
                                       help="Also learn the prior from the bundled testbeds not in the tables."),
) -> None:
    """Held-out accuracy: each testbed with a prior from the others (leave-one-testbed-out) and
    its fabric from its other jobs (leave-one-job-out); before and after one measured correction,
    against linear scaling and Amdahl's law fitted to the same measurement."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from coddl.perf.accuracy import every_choice as all_choices
    from coddl.perf.accuracy import leave_one_testbed_out, plot_predicted_vs_measured
    from coddl.perf.calibrate import bundled_populations

    with user_errors():
        table = _read(profiles)
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("estimator accuracy")
            try:
                results = leave_one_testbed_out(table, all_choices if every_choice else None, points,
                                                extra=bundled_populations() if bundled_prior else (),
                                                progress=lambda s: progress.update(task, description=s))
            except ValueError as e:
                raise fail(str(e)) from None
    for cluster, rows in results.items():
        _out.print(accuracy_table(cluster, rows))
    if json_path is not None:
        json_path.write_text(json.dumps({c: [r.as_dict() for r in rs] for c, rs in results.items()}, indent=1) + "\n")
    if plot is not None:
        plot_predicted_vs_measured(results, plot)
        _out.print(f"wrote {plot}", markup=False, highlight=False)


def accuracy_table(cluster: str, rows) -> Table:
    t = Table(title=f"{cluster}: MAPE of throughput, % (held out)")
    for col in ("calibrated on", "app", "rows", "before", "after 1", "linear", "Amdahl 1", "after 2", "Amdahl 2",
                "worse near", "in 90% interval"):
        t.add_column(col, justify="left" if col in ("calibrated on", "app") else "right")
    for r in rows:
        t.add_row(r.calibration, r.app, f"{r.rows:,}", f"{r.before:.1f}", f"{r.after:.1f}", f"{r.linear:.1f}",
                  f"{r.amdahl:.1f}", _pct(r.after_two), _pct(r.amdahl_two), f"{100 * r.worse_near:.0f}%",
                  f"{100 * r.coverage:.0f}%")
    return t


def _pct(v: float) -> str:
    return "–" if math.isnan(v) else f"{v:.1f}"
