"""``coddl replay``: a cluster's own history (Slurm's ``sacct``, or coddl's store) under every policy,
written as one self-contained HTML report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from coddl.cli.errors import fail, user_errors

console = Console()


def replay_cmd(
    source: Optional[Path] = typer.Argument(None, help="a `sacct -P` export (see `coddl.traces.sacct` for the command "
                                                       "and fields); omit it to replay coddl's own store"),
    state_dir: Optional[Path] = typer.Option(None, "--state-dir", help="replay the coddl store in this state directory"),
    database: Optional[str] = typer.Option(None, "--database", help="replay the coddl store at this SQLAlchemy URL"),
    tz: str = typer.Option("UTC", "--tz", help="time zone of sacct's times without an offset (IANA name)"),
    partition: Optional[str] = typer.Option(None, "--partition", help="comma-separated Slurm partitions to keep"),
    policies: Optional[str] = typer.Option(None, "--policies", help="comma-separated policy specs; default: every policy"),
    gpus: Optional[int] = typer.Option(None, "--gpus", min=1, help="replay cluster size; default: the history's peak "
                                                                  "GPUs in use, rounded up to whole nodes"),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs per node of the replay cluster"),
    cluster: Optional[Path] = typer.Option(None, "--cluster", help="a cluster spec instead of --gpus"),
    seed: int = typer.Option(1, "--seed", min=0, help="seed of the model drawn for each job"),
    reconfig: str = typer.Option("in-place", "--reconfig", help="reconfiguration cost: zero, in-place or restart"),
    out: Path = typer.Option(Path("replay.html"), "--out", help="the HTML report to write"),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="parallel processes; default: one per core"),
    quotas: Optional[Path] = typer.Option(None, "--quotas", help="a queue file (teams as queues with quotas; Slurm "
                                                                 "accounts under 'accounts:'): each policy also runs "
                                                                 "over these queues"),
) -> None:
    """What if your cluster's history had run under each policy? Overall and per team, in one HTML file."""
    from coddl import __version__
    from coddl.cli.simulate import summary_table
    from coddl.policies.registry import available, make_policy, split_policy_list
    from coddl.sim.config import SimConfig
    from coddl.sim.replay import cluster_gpus, replay
    from coddl.sim.replay_report import write_html

    with user_errors():
        if (source is None) == (state_dir is None and database is None):
            raise fail("give a sacct export (SOURCE) or a coddl store (--state-dir or --database), one of them")
        if state_dir is not None and database is not None:
            raise fail("--state-dir and --database both name a store: give one")
        pols = split_policy_list(policies) if policies else list(available())
        for p in pols:
            make_policy(p)  # a bad policy fails before any work
        if not pols:
            raise fail("--policies: give at least one policy")
        history = _history(source, state_dir, database, tz)
        if partition:
            history = history.only([p.strip() for p in partition.split(",") if p.strip()])
        cfg = SimConfig(trace=history.name, gpus=cluster_gpus(history, gpus, gpus_per_node), gpus_per_node=gpus_per_node,
                        cluster=str(cluster) if cluster else None, policies=pols, seed=seed, reconfig=reconfig,
                        rate="curves", version=__version__, queues=str(quotas) if quotas else None)
        skipped = ", ".join(f"{n} {r}" for r, n in history.skipped.items())
        console.print(f"[bold]{history.name}[/bold]: {len(history.jobs)} jobs to replay"
                      f"{f' (skipped: {skipped})' if skipped else ''}; peak {history.peak_gpus} GPUs in use; "
                      f"replay cluster {cluster or f'{cfg.gpus} GPUs'}, reconfig={reconfig}, seed={seed}")
        with Progress(TextColumn("{task.description:<32}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as bar:
            task = bar.add_task("policies", total=len(pols) * (2 if quotas else 1))
            rr = replay(history, cfg, workers=workers,
                        on_done=lambda p: bar.update(task, advance=1, description=f"policies ({p} done)"))
        console.print(summary_table(rr.summaries, f"{history.name}: as recorded and under each policy"))
        write_html(out, rr, f"coddl {__version__} replay")
        console.print(f"wrote {out}")


def _history(source: Path | None, state_dir: Path | None, database: str | None, tz: str):  # noqa: ANN202
    if source is not None:
        from coddl.traces.sacct import read_sacct

        return read_sacct(source, tz)
    from coddl.runtime.models import runtime_curves
    from coddl.runtime.store import sqlite_url
    from coddl.traces.coddl_store import read_store
    from coddl.traces.model import TraceError

    if state_dir is not None and not (state_dir / "coddl.db").is_file():
        raise TraceError(f"{state_dir}: no coddl store here (coddl.db)")
    return read_store(database or sqlite_url(state_dir), runtime_curves())
