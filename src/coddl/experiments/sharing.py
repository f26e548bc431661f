"""Many jobs per GPU against exclusive GPUs, on the bundled traces (issue: multi-scale sharing).

Each trace is replayed three times per policy on the same jobs, which differ only in the sharing
rule (``placement/sharing.py``): ``exclusive`` (every job its own GPUs), ``pack`` (Gandiva's
packing: fractions and memory fit) and ``aware`` (Gavel's space sharing: also, every job on a GPU
keeps at least half its solo speed by the co-location model built from Gavel's measured pairs).
Which jobs may share: every job asking for one GPU (``shared_jobs=one-gpu``) — in all three runs
they stay on one GPU, so the comparison isolates sharing from elasticity. A shared job is charged
the measured (or modelled) slowdown of its co-tenants for as long as they are there.

Measured per run: average JCT, makespan, GPU utilisation (GPUs held, a shared GPU once) and the
share of jobs that co-tenants made more than 1.5× slower while they ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from coddl.experiments.grid import grouped_bars, registered, run_grid, write_results
from coddl.runtime.executors.ray_connect import DEFAULT_CONNECT_TIMEOUT_S

RULES = ("exclusive", "pack", "aware")
DEFAULT_POLICIES = ("fifo", "srtf", "tiresias-l", "max-min")
# name → (bundled trace, jobs kept, GPUs): sized so that the cluster is busy and a run takes seconds
TRACES: dict[str, tuple[str, int | None, int]] = {
    "philly": ("philly", 2000, 64),
    "itp-1": ("itp-1", 2000, 64),
    "gavel-6c71a0": ("gavel-philly-6c71a0", None, 64),
}


@dataclass(frozen=True)
class Run:
    trace: str
    seed: int
    policy: str
    sharing: str
    jobs: int
    avg_jct_h: float
    makespan_h: float
    gpu_utilisation: float
    share_slowed: float  # jobs slowed more than 1.5× by their co-tenants
    wall_s: float


def _one(trace: str, seed: int, task: str, jobs: int | None) -> Run:
    """``task`` is ``policy@rule``."""
    import time

    from coddl.sim.config import SimConfig
    from coddl.sim.metrics import summarise
    from coddl.sim.run import prepare, run_policy

    policy, _, rule = task.partition("@")
    name, keep, gpus = TRACES[trace]
    cfg = SimConfig.build(trace=name, jobs=jobs or keep, gpus=gpus, policies=[policy], seed=seed,
                          sharing=rule, shared_jobs="one-gpu")
    t0 = time.perf_counter()
    s = summarise(run_policy(prepare(cfg), policy, cfg))
    slowed = 0.0 if s.share_slowed_by_sharing != s.share_slowed_by_sharing else s.share_slowed_by_sharing
    return Run(trace, seed, policy, rule, s.jobs, s.avg_jct / 3600, s.makespan / 3600, s.gpu_utilisation, slowed,
               time.perf_counter() - t0)


def default_policies() -> list[str]:
    return registered(DEFAULT_POLICIES)


def tasks(policies: list[str], rules: tuple[str, ...] = RULES) -> list[str]:
    """Every policy under every sharing rule, as ``policy@rule``."""
    return [f"{p}@{r}" for p in policies for r in rules]


def run_all(traces: list[str], seeds: list[int], runs: list[str], jobs: int | None = None,
            workers: int | None = None, on_done: Callable[[Run], None] | None = None, ray_address: str | None = None,
            ray_connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> list[Run]:
    """Each ``policy@rule`` of ``runs`` (see ``tasks``) on each trace and seed."""
    return run_grid(_one, traces, seeds, runs, jobs, workers, on_done, ray_address, ray_connect_timeout_s)


@dataclass(frozen=True)
class Row:
    trace: str
    policy: str
    sharing: str
    avg_jct_h: float
    makespan_h: float
    gpu_utilisation: float
    share_slowed: float
    jct_vs_exclusive: float  # avg JCT ÷ the same policy's with exclusive GPUs (< 1: sharing helped)
    makespan_vs_exclusive: float


def table(runs: list[Run]) -> list[Row]:
    """Means over seeds per (trace, policy, rule), with ratios to the same policy's exclusive run."""
    by: dict[tuple[str, str, str], list[Run]] = {}
    for r in runs:
        by.setdefault((r.trace, r.policy, r.sharing), []).append(r)

    def mean(key: tuple[str, str, str], f: str) -> float:
        return float(np.mean([getattr(r, f) for r in by[key]]))

    rows = []
    for key in by:
        ref = (key[0], key[1], "exclusive")
        base = ref in by
        rows.append(Row(*key, mean(key, "avg_jct_h"), mean(key, "makespan_h"), mean(key, "gpu_utilisation"),
                        mean(key, "share_slowed"),
                        mean(key, "avg_jct_h") / mean(ref, "avg_jct_h") if base else float("nan"),
                        mean(key, "makespan_h") / mean(ref, "makespan_h") if base else float("nan")))
    return rows


def write(out: Path, runs: list[Run], rows: list[Row]) -> list[Path]:
    return write_results(out, runs, rows, "sharing.png", plot)


def plot(path: Path, rows: list[Row]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    traces = list(dict.fromkeys(r.trace for r in rows))
    pols = list(dict.fromkeys(r.policy for r in rows))
    rules = list(dict.fromkeys(r.sharing for r in rows))
    val = {(r.trace, r.policy, r.sharing): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    series = [f"{p}@{r}" for p in pols for r in rules]
    for ax, (attr, label) in zip(axes, (("jct_vs_exclusive", "avg JCT ÷ exclusive GPUs"),
                                        ("share_slowed", "share of jobs slowed > 1.5× by co-tenants"))):
        grouped_bars(ax, traces, series,
                     lambda t, s: getattr(val[(t, *s.split("@"))], attr) if (t, *s.split("@")) in val else np.nan,
                     lambda s: s)
        ax.set_xticks(np.arange(len(traces)), traces, fontsize=8)
        ax.set_ylabel(label)
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[0].legend(fontsize=6, ncol=len(rules))
    fig.suptitle("GPU sharing vs exclusive GPUs (one-GPU jobs may share; mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
