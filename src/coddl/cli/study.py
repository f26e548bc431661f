"""``coddl study run``: a hyperparameter-tuning study as one command (``coddl.studies``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from coddl.cli.errors import err_console, fail
from coddl.cli.server import ServerOpt, StateOpt, TokenOpt

app = typer.Typer(no_args_is_help=True, help="hyperparameter-tuning studies: trials as jobs, Optuna's pruners")
console = Console(highlight=False)

_STYLE = {"finished": "green", "pruned": "yellow", "failed": "red", "stopped": "red", "running": "cyan"}


def _value(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def trials_table(records: list, best: int | None = None) -> Table:
    """One row per trial: its job, parameters, state, steps reached and value; the best one in bold."""
    t = Table(show_edge=False, pad_edge=False)
    for col in ("trial", "job", "parameters", "state", "steps", "GPU-h", "loss"):
        t.add_column(col, justify="left" if col in ("parameters", "state") else "right")
    for r in records:
        style = "bold" if r.number == best else ""
        t.add_row(str(r.number), str(r.job_id or "—"), escape(" ".join(f"{k}={_value(v)}" for k, v in r.params.items())),
                  f"[{_STYLE.get(r.state, '')}]{r.state}[/]", str(r.steps), f"{r.gpu_hours:.3f}",
                  "—" if r.value is None else f"{r.value:.4g}", style=style)
    return t


@app.command("run")
def run(study_file: Path = typer.Argument(..., metavar="STUDY", help="study YAML (search space, trials, job)"),
        storage: Optional[str] = typer.Option(None, "--storage",
                                              help="Optuna storage URL (e.g. sqlite:///study.db): a re-run continues "
                                                   "the study, running only the trials still missing"),
        out: Optional[Path] = typer.Option(None, "--out", help="also write every trial and the best one as JSON"),
        server: Optional[str] = ServerOpt, token: Optional[str] = TokenOpt, state_dir: Optional[Path] = StateOpt) -> None:
    """Run a study: each trial a job of yours on the server, pruned trials cancelled at once so that
    their GPUs go to the survivors; prints the trials and the best parameters."""
    from coddl.runtime.client import ClientError, resolve
    from coddl.runtime.spec import SpecError
    from coddl.studies import StudyError, load_study, run_study

    try:
        spec, job = load_study(study_file)
    except SpecError as e:
        raise fail(str(e)) from None
    if out is not None and not out.parent.is_dir():
        raise fail(f"--out: no such directory {out.parent}")
    endpoint = resolve(server, token, state_dir)
    records: list = []
    with Live(trials_table(records), console=console, refresh_per_second=2, transient=True) as live:
        def changed(rec) -> None:
            if rec not in records:
                records.append(rec)
            live.update(trials_table(records))

        try:
            result = run_study(spec, job, endpoint, storage=storage, on_change=changed)
        except StudyError as e:
            raise fail(str(e)) from None
        except ClientError as e:
            err_console.print(f"[red]error:[/red] {escape(str(e))}", soft_wrap=True)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            stopped = sum(r.state == "stopped" for r in records)
            err_console.print(f"interrupted: {stopped} trial(s) in flight cancelled"
                              + (" (the study continues with the same --storage)" if storage else ""))
            raise typer.Exit(130) from None
    best = result.best
    console.print(trials_table(result.trials, best.number if best else None))
    counts = {s: sum(r.state == s for r in result.trials) for s in ("finished", "pruned", "failed")}
    console.print(f"study {escape(spec.name)}: {len(result.trials)} trials in {result.wall_s:.0f} s "
                  f"({counts['finished']} finished, {counts['pruned']} pruned, {counts['failed']} failed), "
                  f"{sum(r.gpu_hours for r in result.trials):.3f} GPU-hours")
    if best is None:
        console.print("[red]no trial finished[/red]")
    else:
        params = " ".join(f"{k}={v!r}" for k, v in best.params.items())  # in full: to be copied
        console.print(f"best: trial {best.number} (job {best.job_id}) loss {best.value:.4g} with {escape(params)}")
    if out is not None:
        out.write_text(json.dumps({"study": spec.name, "direction": spec.direction, "wall_s": result.wall_s,
                                   "best": None if best is None else vars(best),
                                   "trials": [vars(r) for r in result.trials]}, indent=1))
    if best is None:
        raise typer.Exit(1)
