"""``coddl trace``: look at a trace before simulating it, convert it, export the workload built from it.

A bad trace or argument is a user mistake: its one-line TraceError is printed in red on stderr
and the command exits with code 2, never with a traceback.
"""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from coddl.cli.errors import user_errors
from coddl.traces import load_trace, trace_stats, write_native, write_specs
from coddl.traces.stats import TraceStats

app = typer.Typer(help="Inspect, convert and export job traces (bundled names or files).",
                  no_args_is_help=True)
_out = Console()

TRACE_HELP = "A bundled trace (philly, itp, itp-3, pollux-1, tiresias-60, gavel-philly-6c71a0, …) or a file."
VC_HELP = "Keep one virtual cluster (e.g. 6c71a0 for philly, cluster03 for itp)."


class PolicyKind(str, enum.Enum):
    """How the exported jobs may be sized: elastic keeps the workload's [min, max] GPU range;
    rigid pins min = max = the requested GPUs, i.e. the gang a rigid policy would run."""

    elastic = "elastic"
    rigid = "rigid"


@app.command()
def info(
    trace: str = typer.Argument(..., help=TRACE_HELP),
    vc: Optional[str] = typer.Option(None, "--vc", help=VC_HELP),
    gpus: int = typer.Option(64, "--gpus", min=1, help="Cluster size the offered load is computed for."),
) -> None:
    """Jobs, span, GPU demand, durations and the offered load on a cluster of --gpus GPUs."""
    with user_errors():
        t = load_trace(trace, vc=vc)
        _out.print(_summary(trace_stats(t, gpus), t.meta.get("format", "")))


@app.command()
def convert(
    src: str = typer.Argument(..., metavar="IN", help=TRACE_HELP),
    out: Path = typer.Argument(..., metavar="OUT", help="Output .csv, .csv.gz or .parquet (native format)."),
    vc: Optional[str] = typer.Option(None, "--vc", help=VC_HELP),
) -> None:
    """Convert any readable trace to the native format (CSV or Parquet, by OUT's extension)."""
    with user_errors():
        n = write_native(load_trace(src, vc=vc).jobs, out)
        _out.print(f"wrote {n:,} jobs to {out}", markup=False, highlight=False)


@app.command()
def export(
    out: Path = typer.Argument(..., metavar="OUT", help="Output .csv, .csv.gz or .parquet (native format)."),
    trace: str = typer.Option(..., "--trace", help=TRACE_HELP),
    vc: Optional[str] = typer.Option(None, "--vc", help=VC_HELP),
    seed: int = typer.Option(1, "--seed", min=0, help="Seed of the workload builder (model draws etc.)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Keep the first N jobs by arrival."),
    policy_kind: PolicyKind = typer.Option(PolicyKind.elastic, "--policy-kind", help=PolicyKind.__doc__),
    model_draw: str = typer.Option("seeded", "--model-draw", help="seeded (--seed) or coddl-authors (the CoDDL "
                                                                  "authors' simulator's draw, seed 0 per trace)"),
) -> None:
    """Write the workload the simulator would build from a trace, one job per row; reading the
    file back replays exactly the same jobs (model and steps are given)."""
    # The workload builder pulls in the simulator; info and convert do not need it.
    from coddl.perf.curves import load_coddl_curves
    from coddl.errors import ConfigError
    from coddl.sim.workload import build_workload, build_workload_coddl_authors, curves_for

    with user_errors():
        tr = load_trace(trace, vc=vc, limit=jobs)
        curves = curves_for(tr, load_coddl_curves())
        if model_draw == "coddl-authors":
            specs, _ = build_workload_coddl_authors(tr, curves)
        elif model_draw == "seeded":
            specs = build_workload(tr, curves, seed=seed)
        else:
            raise ConfigError(f"--model-draw: unknown value {model_draw!r}; valid: seeded, coddl-authors")
        if policy_kind is PolicyKind.rigid:
            specs = [dataclasses.replace(s, min_gpus=s.requested_gpus, max_gpus=s.requested_gpus)
                     for s in specs]
        n = write_specs(specs, out)
        _out.print(f"wrote {n:,} jobs to {out}", markup=False, highlight=False)


def _summary(s: TraceStats, fmt: str) -> Table:
    table = Table(title=f"{s.name} ({fmt})", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("jobs", f"{s.jobs:,}")
    table.add_row("span", f"{_human(s.span)} ({s.span:,.0f} s)")
    table.add_row("GPU demand", _histogram(s.gpu_histogram, s.jobs))
    if s.jobs_with_duration:
        pct = ", ".join(f"p{p} {_human(v)}" for p, v in s.duration_percentiles.items())
        table.add_row("duration", f"{pct}, mean {_human(s.mean_duration or 0.0)}")
        table.add_row("GPU-time", f"{s.total_gpu_time / 3600:,.0f} GPU-hours")
    else:
        table.add_row("duration", "none recorded (jobs are given as work, not time)")
    load = f"{s.offered_load:.2f}" if s.offered_load is not None else "n/a (needs durations and a span)"
    table.add_row(f"offered load on {s.cluster_gpus} GPUs", load)
    return table


def _histogram(hist: dict[int, int], jobs: int) -> Table:
    t = Table(box=None, show_header=True, pad_edge=False)
    t.add_column("GPUs", justify="right")
    t.add_column("jobs", justify="right")
    t.add_column("share", justify="right")
    t.add_column("")
    for g, n in hist.items():
        share = n / jobs
        t.add_row(str(g), f"{n:,}", f"{share:.1%}", "█" * max(1, round(share * 30)))
    return t


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
