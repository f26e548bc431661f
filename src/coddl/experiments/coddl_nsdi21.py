"""The CoDDL paper's comparison (NSDI'21, ALGORITHMS.md §1): every Philly virtual cluster with at
least 300 jobs replayed on 64 GPUs (8 × 8) per policy and seed, zero reconfiguration cost.

``exact`` follows the CoDDL authors' simulator rule by rule (ALGORITHMS.md §4, "How the CoDDL
authors' simulator ran these baselines"), so that whole-VC figures compare directly with theirs:

* workload: their model draw (``sim/workload.py``: legacy ``np.random.seed(0)`` per VC,
  ``randint`` over the eligible pool per job in submit order; jobs no pool model scales to are
  skipped before the draw, jobs under one step after it);
* policies: AFS-L visiting candidates in arrival order, AFS-P with a fresh coin per contest and
  slices under light load too, Tiresias-L clearing a demotion when the job gets GPUs again
  (``preset=coddl`` of each); FIFO, SRTF, SRSF, max-min and Optimus as they are (their defaults are
  the authors' rules, same-second ties in submission order);
* the seed then varies only AFS-P's coin.

Differences that remain, documented rather than copied: their event times are rounded up to whole
seconds (a completion is seen up to 1 s late), coddl's are exact; Themis is not in their simulator.

Runs are independent, so they go to a process pool (one per core) or a Ray cluster; each returns
only its summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from functools import partial
from typing import Callable

import numpy as np

from coddl.experiments.grid import grouped_bars, registered, run_grid, write_results
from coddl.runtime.executors.ray_connect import DEFAULT_CONNECT_TIMEOUT_S

DEFAULT_POLICIES = ("afs-l", "afs-p", "fifo", "srtf", "srsf", "tiresias-l:preset=coddl", "optimus",
                    "max-min", "themis")
EXACT_POLICIES = ("afs-l:preset=coddl", "afs-p:preset=coddl", "fifo", "srtf", "srsf", "tiresias-l:preset=coddl",
                  "optimus", "max-min", "themis")
MIN_JOBS = 300


@dataclass(frozen=True)
class Run:
    vc: str
    seed: int
    policy: str
    jobs: int
    avg_jct: float
    makespan: float
    wall_s: float
    skipped: int = 0  # trace jobs not simulated (the model draw's rules, larger than the cluster)


def eligible_vcs(min_jobs: int = MIN_JOBS) -> list[str]:
    from collections import Counter

    from coddl.traces import load_trace

    counts = Counter(j.group for j in load_trace("philly").jobs)
    return [vc for vc, n in counts.most_common() if n >= min_jobs]


def default_policies(exact: bool = False) -> list[str]:
    return registered(EXACT_POLICIES if exact else DEFAULT_POLICIES)


def config(vc: str, seed: int, policy: str, jobs: int | None, exact: bool = False):
    """The SimConfig of one run of the grid."""
    from coddl.sim.config import SimConfig

    return SimConfig(trace="philly", vc=vc, jobs=jobs, gpus=64, gpus_per_node=8, policies=[policy], seed=seed,
                     model_draw="coddl-authors" if exact else "seeded")


def one(vc: str, seed: int, policy: str, jobs: int | None, exact: bool = False) -> Run:
    from coddl.sim.metrics import summarise
    from coddl.sim.run import prepare, run_policy

    cfg = config(vc, seed, policy, jobs, exact)
    prep = prepare(cfg)
    res = run_policy(prep, policy, cfg)
    s = summarise(res)
    return Run(vc, seed, policy, s.jobs, s.avg_jct, s.makespan, s.wall_s, len(prep.skipped))


def run_all(vcs: list[str], seeds: list[int], policies: list[str], jobs: int | None,
            workers: int | None = None, on_done: Callable[[Run], None] | None = None, *,
            exact: bool = False, ray_address: str | None = None,
            ray_connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> list[Run]:
    """The grid's runs in grid order, on this machine's cores or on the Ray cluster at ``ray_address``."""
    return run_grid(partial(one, exact=exact), vcs, seeds, policies, jobs, workers, on_done, ray_address,
                    ray_connect_timeout_s)


@dataclass(frozen=True)
class Row:
    vc: str
    policy: str
    avg_jct_h: float
    makespan_h: float
    vs_afs_l: float  # this policy's avg JCT ÷ AFS-L's (> 1: AFS-L is better)
    vs_afs_p: float


def table(runs: list[Run]) -> list[Row]:
    """Mean over seeds per (VC, policy), and each policy's avg-JCT ratio to AFS-L and AFS-P."""
    by: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        by.setdefault((r.vc, r.policy), []).append(r)
    rows = []
    for (vc, pol), rs in by.items():
        jct = float(np.mean([r.avg_jct for r in rs]))
        mk = float(np.mean([r.makespan for r in rs]))
        ref_l = _reference(by, vc, "afs-l")
        ref_p = _reference(by, vc, "afs-p")
        rows.append(Row(vc, pol, jct / 3600, mk / 3600,
                        jct / float(np.mean([r.avg_jct for r in ref_l])) if ref_l else float("nan"),
                        jct / float(np.mean([r.avg_jct for r in ref_p])) if ref_p else float("nan")))
    return rows


def _reference(by: dict[tuple[str, str], list[Run]], vc: str, name: str) -> list[Run] | None:
    """The runs of the first policy spec named ``name`` (``afs-l`` or ``afs-l:preset=coddl``)."""
    return next((rs for (v, pol), rs in by.items() if v == vc and pol.split(":")[0] == name), None)


def write(out: Path, runs: list[Run], rows: list[Row]) -> list[Path]:
    return write_results(out, runs, rows, "avg_jct_by_vc.png", plot)


def plot(path: Path, rows: list[Row]) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vcs = list(dict.fromkeys(r.vc for r in rows))
    pols = list(dict.fromkeys(r.policy for r in rows))
    ref = next((p for p in pols if p.split(":")[0] == "afs-l"), pols[0])
    val = {(r.vc, r.policy): r.avg_jct_h for r in rows}
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(vcs) + 3), 4.8))
    grouped_bars(ax, vcs, pols, lambda vc, p: val.get((vc, p), np.nan) / val.get((vc, ref), np.nan))
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(vcs)), vcs)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_yticks([1, 1.5, 2, 3, 5, 8])
    ax.set_ylabel(f"avg JCT ÷ {ref}'s (log)")
    ax.set_xlabel("Philly virtual cluster (64 GPUs)")
    ax.set_title("CoDDL NSDI'21 methodology: average JCT relative to AFS-L")
    ax.legend(ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
