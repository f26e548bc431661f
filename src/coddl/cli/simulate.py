"""``coddl simulate``: replay a trace through policies, print a comparison, write files and plots."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from coddl.cli.console import stdout_console
from coddl.cli.errors import user_errors
from coddl.policies.registry import split_policy_list
from coddl.sim.config import SimConfig
from coddl.sim.metrics import Summary, fairness_groups, summarise
from coddl.sim.report import write_report, write_skipped
from coddl.sim.run import Prepared, prepare, queued_label, run_policy

console = stdout_console()


def hours(s: float) -> str:
    return f"{s / 3600:.2f}"


def summary_table(summaries: list[Summary], title: str) -> Table:
    """The comparison; its fairness columns (mean ρ, share of jobs with ρ > 1.5, Jain's index over
    users or groups) only when the summaries have them (``summarise`` given the curves)."""
    t = Table(title=title)
    fair = next((s.fairness_groups for s in summaries if s.fairness_groups), "")
    cols = ["policy", "jobs", "avg JCT (h)", "median JCT (h)", "p95 JCT (h)", "makespan (h)",
            "avg queueing (h)", "GPU util", "CPU util", "reconfigs", "fragmentation"]
    if fair:
        cols += ["mean ρ", "ρ > 1.5", f"Jain ({fair}s)"]
    shared = any(s.share_slowed_by_sharing == s.share_slowed_by_sharing for s in summaries)
    if shared:
        cols += ["slowed > 1.5× by sharing"]
    for col in [*cols, "sim wall (s)"]:
        t.add_column(col, justify="left" if col == "policy" else "right", overflow="fold")
    best = min(s.avg_jct for s in summaries)
    for s in summaries:
        style = "bold green" if s.avg_jct == best else None
        cells = [s.policy, str(s.jobs), hours(s.avg_jct), hours(s.median_jct), hours(s.p95_jct),
                 hours(s.makespan), hours(s.avg_queueing_delay), f"{s.gpu_utilisation:.1%}",
                 f"{s.cpu_utilisation:.1%}", str(s.reconfigurations), f"{s.fragmentation:.1%}"]
        if fair:
            cells += [f"{s.mean_rho:.2f}", f"{s.share_rho_over_1_5:.1%}", f"{s.jain_users:.3f}"]
        if shared:
            cells.append(f"{s.share_slowed_by_sharing:.1%}")
        t.add_row(*cells, f"{s.wall_s:.1f}", style=style)
    return t


def fairness_line(results: dict) -> str:
    """What the fairness columns measure, and over which users or groups Jain's index is taken."""
    kind, groups = fairness_groups(next(iter(results.values())))
    n = len(set(groups))
    over = (f"{n} user{'s' if n != 1 else ''}" if kind == "user" else
            f"{n} group{'s' if n != 1 else ''} (the trace names no users: its groups / VCs)")
    return (f"ρ = JCT ÷ the job's time alone on its equal share of the cluster (Themis); "
            f"Jain's index of mean ρ over {over}")


def simulate_cmd(
    trace: str = typer.Option("philly", help="bundled trace name (philly, itp, pollux-N, tiresias-60, …) or a file"),
    vc: Optional[str] = typer.Option(None, help="Philly virtual cluster (e.g. 6c71a0); all when omitted"),
    jobs: Optional[int] = typer.Option(None, min=1, help="keep the first N jobs of the trace"),
    gpus: int = typer.Option(64, min=1, help="cluster size when no --cluster spec is given"),
    gpus_per_node: int = typer.Option(8, min=1, help="GPUs per node when no --cluster spec is given"),
    cluster: Optional[Path] = typer.Option(None, help="cluster spec (YAML, or Tiresias CSV)"),
    policies: str = typer.Option("fifo,srtf,max-min", help="comma-separated; parameters as name:key=value"),
    seed: int = typer.Option(1, help="seed for model drawing and randomised policies"),
    reconfig: str = typer.Option("zero", help="reconfiguration cost model: zero, in-place or restart"),
    charge_restarts: bool = typer.Option(False, help="with --reconfig restart: grow a job only when the time it "
                                                      "saves exceeds its restart cost"),
    rate: Optional[str] = typer.Option(None, help="throughput charged: curves (by GPU count and type) or "
                                                   "estimator (also by placement); default: estimator with "
                                                   "--cluster, else curves"),
    allow_mixing: bool = typer.Option(False, help="let one job span GPU types (per-GPU batch balanced to speed)"),
    oversized: str = typer.Option("skip", help="jobs needing more GPUs than the cluster has: skip (and report "
                                              "them), cap (run them at the cluster's size) or fail"),
    model_draw: str = typer.Option("seeded", help="how models are drawn for trace jobs that name none: seeded "
                                                 "(--seed) or coddl-authors (the CoDDL authors' simulator)"),
    out: Optional[Path] = typer.Option(None, help="directory for summary.csv, per-job CSVs, config.json, plots"),
    config: Optional[Path] = typer.Option(None, help="a config.json of an earlier run: reproduce it exactly"),
    check: bool = typer.Option(False, help="verify the simulator's invariants at every step (slower)"),
    sharing: str = typer.Option("exclusive", help="many jobs per GPU: exclusive (none), pack (Gandiva: fractions "
                                "and memory fit) or aware[:min_retained=0.5] (also: each keeps that share of "
                                "its solo speed, by Gavel's measured pairs)"),
    shared_jobs: str = typer.Option("declared", help="which jobs may share a GPU: declared (gpu_fraction < 1 or "
                                    "shareable in the trace) or one-gpu (also every job asking for one GPU)"),
    queues: Optional[Path] = typer.Option(None, help="a queue file (teams, quotas, cohorts): every policy runs "
                                                     "without and with these queues; per-queue JCT and quota "
                                                     "attainment are printed and written to queues.csv"),
) -> None:
    """Replay a trace through each policy and compare them."""
    with user_errors():
        if config is not None:
            cfg = SimConfig.load(config)
        else:
            cfg = SimConfig.build(trace=trace, vc=vc, jobs=jobs, gpus=gpus, gpus_per_node=gpus_per_node,
                                  cluster=str(cluster) if cluster else None, policies=split_policy_list(policies),
                                  seed=seed, reconfig=reconfig, charge_restarts=charge_restarts, rate=rate, allow_mixing=allow_mixing,
                                  oversized=oversized, model_draw=model_draw, sharing=sharing,
                                  shared_jobs=shared_jobs, queues=str(queues) if queues else None)
        from coddl import __version__

        cfg.version = __version__
        cfg.rate = cfg.rate_model  # resolved, so config.json reproduces the run whatever the defaults
        prep = prepare(cfg)
        n = len(prep.specs)
        types = "/".join(f"{cap} {t}" for t, cap in prep.cluster.capacity_by_type.items())
        console.print(f"[bold]{cfg.trace}[/bold]{' vc ' + cfg.vc if cfg.vc else ''}: {n} jobs on "
                      f"{prep.cluster.total_gpus} GPUs ({len(prep.cluster.nodes)} nodes; {types}), "
                      f"reconfig={cfg.reconfig}, rate={cfg.rate}{', mixing' if cfg.allow_mixing else ''}, "
                      f"seed={cfg.seed}")
        if prep.skipped:
            console.print(skipped_line(prep.skipped, out), highlight=False, markup=False)
        results = {}
        runs = [(p, False) for p in cfg.policies] + ([(p, True) for p in cfg.policies] if prep.queues else [])
        with Progress(TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False) as bar:
            tasks = {run: bar.add_task(queued_label(run[0]) if run[1] else run[0], total=n) for run in runs}
            for p, queued in runs:
                task = tasks[(p, queued)]
                res = run_policy(prep, p, cfg, check=check, queued=queued,
                                 progress=lambda done, _t=task: bar.update(_t, completed=done))
                results[res.policy] = res
                bar.update(task, completed=n)
        summaries = [summarise(r, prep.curves) for r in results.values()]
        console.print(summary_table(summaries, f"{cfg.trace} on {prep.cluster.total_gpus} GPUs"))
        if any(r.records for r in results.values()):
            console.print(fairness_line(results), highlight=False, markup=False)
        per_queue = queue_results(prep, results) if prep.queues else {}
        if per_queue:
            console.print(queue_table(per_queue, f"per queue ({cfg.queues})"))
        if out is not None:
            files = write_report(out, summaries, results, prep.curves)
            if per_queue:
                files.append(write_queue_csv(out, per_queue))
            (out / "config.json").write_text(cfg.to_json() + "\n")
            if prep.skipped:
                files.append(write_skipped(out, prep.skipped))
            console.print(f"wrote {len(files) + 1} files to {out}/ (summary.csv, config.json, "
                          "jobs-*.csv, jct_cdf.png, allocations.png, utilisation.png"
                          f"{', queues.csv' if per_queue else ''}"
                          f"{', skipped.csv' if prep.skipped else ''})")


def queue_results(prep: Prepared, results: dict) -> dict[str, list]:
    """Each run's per-queue figures (coddl.queues.report)."""
    from coddl.policies.registry import make_policy
    from coddl.queues.report import queue_stats

    quotas = prep.queues.quotas(prep.cluster.total_gpus, prep.cluster.total_cpus)
    return {run: queue_stats(res, prep.queues, quotas, make_policy(run.removesuffix(queued_label(""))).elastic)
            for run, res in results.items()}


def queue_table(per_queue: dict[str, list], title: str) -> Table:
    t = Table(title=title)
    for col in ("run", "queue", "quota", "jobs", "avg JCT (h)", "avg queueing (h)", "GPU-h", "borrowed GPU-h",
                "quota attainment"):
        t.add_column(col, justify="left" if col in ("run", "queue") else "right", overflow="fold")
    for run, stats in per_queue.items():
        for i, s in enumerate(stats):
            if not s.jobs:
                continue
            t.add_row(run if i == 0 else "", s.queue, str(s.nominal_gpus), str(s.jobs), hours(s.avg_jct),
                      hours(s.avg_queueing), f"{s.gpu_hours:.0f}", f"{s.borrowed_gpu_hours:.0f}",
                      "-" if s.attainment != s.attainment else f"{s.attainment:.1%}",
                      end_section=i == len(stats) - 1)
    return t


def write_queue_csv(out: Path, per_queue: dict[str, list]) -> Path:
    import csv

    path = out / "queues.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        fields = ["run", *per_queue[next(iter(per_queue))][0].row()]
        w.writerow(fields)
        for run, stats in per_queue.items():
            for s in stats:
                w.writerow([run, *s.row().values()])
    return path


def skipped_line(skipped, out: Path | None, show: int = 10) -> str:
    """One line per reason: how many trace jobs are not simulated, and which."""
    by_reason: dict[str, list[str]] = {}
    for s in skipped:
        by_reason.setdefault(s.reason, []).append(s.job_id)
    lines = []
    for reason, ids in by_reason.items():
        more = f", … {len(ids) - show} more" + (f" in {out / 'skipped.csv'}" if out else "") if len(ids) > show else ""
        lines.append(f"skipped {len(ids)} job{'s' if len(ids) != 1 else ''} ({reason}): {', '.join(ids[:show])}{more}")
    return "\n".join(lines)
