"""``coddl experiment``: reproductions of published comparisons."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from coddl.cli.console import stdout_console
from coddl.cli.errors import fail, user_errors
from coddl.policies.registry import make_policy, split_policy_list
from coddl.runtime.executors.ray_connect import DEFAULT_CONNECT_TIMEOUT_S

app = typer.Typer(no_args_is_help=True)
console = stdout_console()


def _policies_and_seeds(policies: str | None, default: list[str], seeds: str,
                        sharing: bool = False) -> tuple[list[str], list[int]]:
    """Validate both before any simulation starts (a bad one is a one-line error, exit 2). With
    ``sharing`` a policy may carry a sharing rule: ``fifo@aware``."""
    from coddl.placement.sharing import SharingRule

    pols = split_policy_list(policies) if policies is not None else default
    if not pols:
        raise fail("--policies: name at least one policy (see `coddl policies`)")
    for p in pols:
        name, at, rule = p.partition("@")
        if at and not sharing:
            raise fail(f"--policies: {p!r}: this experiment takes no sharing rule after '@'")
        make_policy(name)
        if at:
            SharingRule.parse(rule)
    try:
        seed_list = [int(s) for s in seeds.split(",") if s]
    except ValueError:
        seed_list = [-1]
    if any(s < 0 for s in seed_list):  # numpy's generators take non-negative seeds
        raise fail(f"--seeds: expected comma-separated non-negative integers, got {seeds!r}")
    if not seed_list:
        raise fail("--seeds: name at least one seed")
    return pols, seed_list


RayAddressOpt = typer.Option(None, "--ray-address", help="HOST:PORT of a Ray cluster to run the grid on, one task per "
                                                        "run (its nodes need coddl, same version); default: "
                                                        "this machine's cores")
RayTimeoutOpt = typer.Option(DEFAULT_CONNECT_TIMEOUT_S, "--ray-connect-timeout-s",
                             help="give up on an unreachable Ray address after this long")


def _run_with_progress(run_all, groups: list[str], seeds: list[int], pols: list[str], jobs: int | None,
                       workers: int | None, label, **kw) -> list:
    """``run_all`` under a progress bar. A Ray address that cannot be joined, or a run that failed on
    every try there, is one line and exit 2 (both are ConfigError or RunFailed, with their reason)."""
    from coddl.experiments.ray_grid import RunFailed
    from coddl.errors import ConfigError

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as bar:
        task = bar.add_task("simulations", total=len(groups) * len(seeds) * len(pols))
        try:
            return run_all(groups, seeds, pols, jobs, workers,
                           on_done=lambda r: bar.update(task, advance=1, description=label(r)), **kw)
        except (ConfigError, RunFailed) as e:
            raise fail(str(e)) from None


def _groups(option: str, given: str | None, valid: list[str], default: list[str], what: str) -> list[str]:
    """The comma-separated ``given`` (or ``default``), each one of ``valid``; a mistake is one line."""
    chosen = [g for g in given.split(",") if g] if given is not None else default
    if not chosen:
        raise fail(f"{option}: name at least one {what}: {', '.join(valid)}")
    for g in chosen:
        if g not in valid:
            raise fail(f"{option}: unknown {what} {g!r}; valid: {', '.join(valid)}")
    return chosen


def _show(title: str, columns: tuple[str, ...], left: int, cells: list[tuple[str, ...]], files: list[Path]) -> None:
    """The experiment's table (its first ``left`` columns are names, the rest figures) and what it wrote."""
    t = Table(title=title)
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i < left else "right", overflow="fold")
    for row in cells:
        t.add_row(*row)
    console.print(t)
    console.print(f"wrote {', '.join(str(f) for f in files)}")


@app.command("coddl-nsdi21")
def coddl_nsdi21(
    out: Path = typer.Option(Path("results/coddl-nsdi21"), help="output directory"),
    vcs: Optional[str] = typer.Option(None, help="comma-separated VCs; default: every VC with ≥ 300 jobs"),
    seeds: Optional[str] = typer.Option(None, help="comma-separated seeds; default 1,2,3 (1 with --exact, where "
                                                   "only AFS-P's coin depends on it)"),
    jobs: Optional[int] = typer.Option(None, min=1, help="first N jobs of each VC (quick runs)"),
    policies: Optional[str] = typer.Option(None, help="policies to compare; default: AFS-L, AFS-P and the baselines"),
    workers: Optional[int] = typer.Option(None, min=1, help="parallel processes; default: one per core"),
    exact: bool = typer.Option(False, help="follow the CoDDL authors' simulator rule by rule: their model draw "
                                           "(seed 0 per VC) and their policy variants (README)"),
    ray_address: Optional[str] = RayAddressOpt,
    ray_connect_timeout_s: float = RayTimeoutOpt,
) -> None:
    """The CoDDL paper's comparison: Philly VCs on 64 GPUs, zero reconfiguration cost."""
    from coddl.experiments import coddl_nsdi21 as exp

    with user_errors():
        pols, seed_list = _policies_and_seeds(policies, exp.default_policies(exact), seeds or ("1" if exact else "1,2,3"))
        vc_list = _groups("--vcs", vcs, exp.eligible_vcs(1), exp.eligible_vcs(), "virtual cluster")
        runs = _run_with_progress(exp.run_all, vc_list, seed_list, pols, jobs, workers,
                                  lambda r: f"{r.vc} {r.policy}", exact=exact, ray_address=ray_address,
                                  ray_connect_timeout_s=ray_connect_timeout_s)
        skipped = {r.vc: r.skipped for r in runs if r.skipped}
        if skipped:
            console.print("jobs not simulated (larger than 64 GPUs, or the model draw's rules; "
                          "`coddl simulate` lists them): " + ", ".join(f"{vc} {n}" for vc, n in skipped.items()))
        rows = exp.table(runs)
        _show("avg JCT (h) per VC; ratio = policy ÷ AFS-L (and ÷ AFS-P)",
              ("VC", "policy", "avg JCT (h)", "makespan (h)", "÷ AFS-L", "÷ AFS-P"), 2,
              [(r.vc, r.policy, f"{r.avg_jct_h:.2f}", f"{r.makespan_h:.1f}", f"{r.vs_afs_l:.2f}", f"{r.vs_afs_p:.2f}")
               for r in rows], exp.write(out, runs, rows))


@app.command("aiturbo")
def aiturbo(
    out: Path = typer.Option(Path("results/aiturbo"), help="output directory"),
    traces: Optional[str] = typer.Option(None, help="comma-separated traces; default: philly-6c71a0, itp-cluster02, "
                                                   "pollux-1"),
    seeds: str = typer.Option("1", help="comma-separated seeds (model draw and sample noise)"),
    jobs: Optional[int] = typer.Option(1000, min=1, help="first N jobs of each trace (Pollux's has 160)"),
    policies: Optional[str] = typer.Option(None, help="policies to compare; default: AITurbo (unified and "
                                                     "GPU-proportional cores) and the registered baselines"),
    workers: Optional[int] = typer.Option(None, min=1, help="parallel processes; default: one per core"),
    ray_address: Optional[str] = RayAddressOpt,
    ray_connect_timeout_s: float = RayTimeoutOpt,
) -> None:
    """AITurbo's comparison: three production traces on 64 GPUs whose nodes have 24 or 48 cores,
    with CPU-sensitive throughput (Synergy)."""
    from coddl.experiments import aiturbo as exp

    with user_errors():
        pols, seed_list = _policies_and_seeds(policies, exp.default_policies(), seeds)
        trace_list = _groups("--traces", traces, list(exp.TRACES), list(exp.TRACES), "trace")
        reference = next((p for p in pols if p.split(":")[0] == "aiturbo"), pols[0])
        runs = _run_with_progress(exp.run_all, trace_list, seed_list, pols, jobs, workers,
                                  lambda r: f"{r.trace} {r.policy}", ray_address=ray_address,
                                  ray_connect_timeout_s=ray_connect_timeout_s)
        rows = exp.table(runs, reference)
        _show(f"avg JCT per trace; ratio = policy ÷ {reference}",
              ("trace", "policy", "avg JCT (h)", "makespan (h)", "GPU util", "CPU util", "÷ AITurbo"), 2,
              [(r.trace, r.policy, f"{r.avg_jct_h:.2f}", f"{r.makespan_h:.1f}", f"{r.gpu_utilisation:.2f}",
                f"{r.cpu_utilisation:.2f}", f"{r.vs_aiturbo:.2f}") for r in rows], exp.write(out, runs, rows))


@app.command("sharing")
def sharing(
    out: Path = typer.Option(Path("results/sharing"), help="output directory"),
    traces: Optional[str] = typer.Option(None, help="comma-separated: philly, itp-1, gavel-6c71a0 "
                                                    "(default: all)"),
    seeds: str = typer.Option("1,2", help="comma-separated seeds (model draw, randomised policies)"),
    policies: Optional[str] = typer.Option(None, help="policies to compare; default: fifo, srtf, tiresias-l, max-min"),
    jobs: Optional[int] = typer.Option(None, min=1, help="keep the first N jobs of each trace (default: per trace)"),
    workers: Optional[int] = typer.Option(None, min=1, help="parallel processes; default: one per core"),
    ray_address: Optional[str] = RayAddressOpt,
    ray_connect_timeout_s: float = RayTimeoutOpt,
) -> None:
    """GPU sharing against exclusive GPUs on the bundled traces: every one-GPU job may share, under
    Gandiva's packing and Gavel's interference-aware rule; avg JCT, makespan, GPU utilisation and the
    share of jobs slowed more than 1.5× by co-tenants."""
    from coddl.experiments import sharing as exp

    with user_errors():
        pols, seed_list = _policies_and_seeds(policies, exp.default_policies(), seeds)
        chosen = _groups("--traces", traces, list(exp.TRACES), list(exp.TRACES), "trace")
        runs = _run_with_progress(exp.run_all, chosen, seed_list, exp.tasks(pols), jobs, workers,
                                  lambda r: f"{r.trace} {r.policy} {r.sharing}", ray_address=ray_address,
                                  ray_connect_timeout_s=ray_connect_timeout_s)
        rows = exp.table(runs)
        _show("mean over seeds; ratios ÷ the same policy with exclusive GPUs",
              ("trace", "policy", "sharing", "avg JCT (h)", "makespan (h)", "GPU util", "slowed > 1.5×",
               "JCT ÷", "makespan ÷"), 3,
              [(r.trace, r.policy, r.sharing, f"{r.avg_jct_h:.2f}", f"{r.makespan_h:.1f}", f"{r.gpu_utilisation:.2f}",
                f"{r.share_slowed:.1%}", f"{r.jct_vs_exclusive:.2f}", f"{r.makespan_vs_exclusive:.2f}") for r in rows],
              exp.write(out, runs, rows))


@app.command("fluid")
def fluid(
    out: Path = typer.Option(Path("results/fluid"), help="output directory"),
    scenarios: Optional[str] = typer.Option(None, help="comma-separated: few, many, stream (default: all)"),
    seeds: str = typer.Option("1,2,3", help="comma-separated seeds (models and trial quality order)"),
    policies: Optional[str] = typer.Option(None, help="policies to compare; default: FIFO (one GPU per trial), "
                                                     "max-min (Fluid's even split) and coddl's elastic policies"),
    workers: Optional[int] = typer.Option(None, min=1, help="parallel processes; default: one per core"),
    ray_address: Optional[str] = RayAddressOpt,
    ray_connect_timeout_s: float = RayTimeoutOpt,
) -> None:
    """Hyperparameter-tuning studies (successive halving) on 32 GPUs: how soon each allocation finds a
    study's best trial, and at what GPU-hours (Fluid, MLSys'21)."""
    from coddl.experiments import fluid as exp

    with user_errors():
        pols, seed_list = _policies_and_seeds(policies, exp.default_policies(), seeds, sharing=True)
        chosen = _groups("--scenarios", scenarios, list(exp.SCENARIOS), list(exp.SCENARIOS), "scenario")
        reference = "fifo" if "fifo" in pols else pols[0]
        runs = _run_with_progress(exp.run_all, chosen, seed_list, pols, None, workers,
                                  lambda r: f"{r.scenario} {r.policy}", ray_address=ray_address,
                                  ray_connect_timeout_s=ray_connect_timeout_s)
        rows = exp.table(runs, reference)
        _show(f"per study, mean over seeds; ratios ÷ {reference}",
              ("scenario", "policy", "makespan (h)", "to best (h)", "GPU-h to best", "to best ÷", "GPU-h ÷"), 2,
              [(r.scenario, exp.LABELS.get(r.policy, r.policy), f"{r.makespan_h:.2f}", f"{r.best_h:.2f}",
                f"{r.gpu_hours_to_best:.1f}", f"{r.best_vs_fifo:.2f}", f"{r.gpu_hours_vs_fifo:.2f}") for r in rows],
              exp.write(out, runs, rows))
