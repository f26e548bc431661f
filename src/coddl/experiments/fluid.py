"""Hyperparameter-tuning studies under each allocation (Fluid, MLSys'21): one GPU per trial in FIFO
order, Fluid's even split of the cluster between trials, and coddl's policies, on the same studies.

The setting (``coddl.sim.hpo`` says what a study is and what is assumed about pruning):

* Cluster: 4 nodes × 8 GPUs; in-place reconfiguration costs (trials are resized often).
* Trials: a model drawn (seeded) from CoDDL's nine; a trial run to the end takes one hour on one GPU;
  successive halving with η = 3 stops the losers.
* Scenarios: ``few`` — one study of 8 trials (fewer trials than GPUs: elasticity can speed each
  up); ``many`` — one study of 81 trials (more trials than GPUs); ``stream`` — 12 studies of 27
  trials, one every 10 minutes (studies compete for the cluster).
* Fluid's allocation gives every trial an equal share of the GPUs up to what its model can use, which
  is the ``max-min`` policy (ALGORITHMS.md §4); FIFO over one-GPU trials is ``fifo`` (every trial asks
  for one GPU, and FIFO is rigid). Several trials on one GPU when trials outnumber GPUs (Fluid's other
  half) is a policy with a sharing rule, ``POLICY@pack`` or ``POLICY@aware`` (``placement/sharing.py``):
  each trial is then a shareable one-GPU job (it no longer grows) and pays its co-tenant's measured
  slowdown; ``fifo@aware`` is one trial per GPU, two where the pair keeps half its speed each.

Measured per study: makespan, the time until its best trial ends, and the GPU-hours its trials had
used by then (GPUs held, whether or not they sped the trial up).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from coddl.experiments.grid import grouped_bars, registered, run_grid, write_results
from coddl.runtime.executors.ray_connect import DEFAULT_CONNECT_TIMEOUT_S

DEFAULT_POLICIES = ("fifo", "fifo@aware", "max-min", "afs-p", "afs-l", "optimus", "tiresias-l")
LABELS = {"fifo": "fifo (one GPU per trial)", "max-min": "max-min (Fluid's even split)"}
# name → (trials per study, studies, seconds between studies)
SCENARIOS: dict[str, tuple[int, int, float]] = {"few": (8, 1, 0.0), "many": (81, 1, 0.0), "stream": (27, 12, 300.0)}
NODES, GPUS_PER_NODE, TRIAL_S, ETA = 4, 8, 3600.0, 3


@dataclass(frozen=True)
class Run:
    scenario: str
    seed: int
    policy: str
    studies: int
    makespan_h: float
    best_h: float
    gpu_hours_to_best: float
    gpu_hours: float
    wall_s: float


def workload(scenario: str, seed: int):
    from coddl.perf.curves import CODDL_POOL, load_coddl_curves
    from coddl.sim.hpo import study_workload

    trials, studies, interval = SCENARIOS[scenario]
    curves = load_coddl_curves()
    return curves, study_workload([trials] * studies, curves, list(CODDL_POOL), trial_s=TRIAL_S, eta=ETA,
                                  interval_s=interval, seed=seed)


def _one(scenario: str, seed: int, policy: str, _jobs: int | None) -> Run:
    import time

    from coddl.core.cluster import Cluster
    from coddl.policies.registry import make_policy
    from coddl.scheduler import Scheduler
    from coddl.sim.engine import simulate
    from coddl.sim.hpo import study_outcomes
    from coddl.sim.reconfig import ReconfigCost

    from coddl.perf.interference import ColocationTable
    from coddl.placement.sharing import SharingRule

    t0 = time.perf_counter()
    curves, w = workload(scenario, seed)
    name, _, rule = policy.partition("@")
    cluster = Cluster.homogeneous(NODES, GPUS_PER_NODE)
    jobs = list(w.jobs)
    table = None
    if rule:
        jobs = [replace(j, shareable=True, max_gpus=1) for j in jobs]
        table = ColocationTable.build(cluster.type_names, curves.names)
    sched = Scheduler(cluster, make_policy(name), curves, seed=seed, sharing=SharingRule.parse(rule) if rule else None,
                      retained=table, clash=table.clashes if table is not None else None)
    res = simulate(jobs, sched, ReconfigCost("in-place"), seed=seed)
    out = study_outcomes(res, w)
    return Run(scenario, seed, policy, len(out), *(float(np.mean([getattr(o, f) for o in out]))
                                                    for f in ("makespan_h", "best_h", "gpu_hours_to_best", "gpu_hours")),
               time.perf_counter() - t0)


def default_policies() -> list[str]:
    return [p for p in DEFAULT_POLICIES if registered([p.partition("@")[0]])]


def run_all(scenarios: list[str], seeds: list[int], policies: list[str], jobs: int | None = None,
            workers: int | None = None, on_done: Callable[[Run], None] | None = None, ray_address: str | None = None,
            ray_connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> list[Run]:
    return run_grid(_one, scenarios, seeds, policies, jobs, workers, on_done, ray_address, ray_connect_timeout_s)


@dataclass(frozen=True)
class Row:
    scenario: str
    policy: str
    makespan_h: float
    best_h: float
    gpu_hours_to_best: float
    best_vs_fifo: float  # time to the best trial ÷ FIFO's (< 1: found sooner)
    gpu_hours_vs_fifo: float  # GPU-hours to the best trial ÷ FIFO's (> 1: more GPUs spent)


def table(runs: list[Run], reference: str = "fifo") -> list[Row]:
    """Means over seeds per (scenario, policy), with each policy's ratios to ``reference``'s."""
    by: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        by.setdefault((r.scenario, r.policy), []).append(r)

    def mean(key: tuple[str, str], f: str) -> float:
        return float(np.mean([getattr(r, f) for r in by[key]]))

    rows = []
    for (sc, pol) in by:
        ref = (sc, reference) if (sc, reference) in by else None
        rows.append(Row(sc, pol, mean((sc, pol), "makespan_h"), mean((sc, pol), "best_h"),
                        mean((sc, pol), "gpu_hours_to_best"),
                        mean((sc, pol), "best_h") / mean(ref, "best_h") if ref else float("nan"),
                        mean((sc, pol), "gpu_hours_to_best") / mean(ref, "gpu_hours_to_best") if ref else float("nan")))
    return rows


def write(out: Path, runs: list[Run], rows: list[Row]) -> list[Path]:
    return write_results(out, runs, rows, "fluid.png", plot)


def plot(path: Path, rows: list[Row]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = list(dict.fromkeys(r.scenario for r in rows))
    pols = list(dict.fromkeys(r.policy for r in rows))
    val = {(r.scenario, r.policy): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    for ax, (attr, label) in zip(axes, (("best_h", "hours to the best trial"),
                                        ("gpu_hours_to_best", "GPU-hours to the best trial"))):
        grouped_bars(ax, scenarios, pols, lambda s, p: getattr(val[(s, p)], attr) if (s, p) in val else np.nan,
                     lambda p: LABELS.get(p, p))
        ax.set_xticks(np.arange(len(scenarios)),
                      [f"{s} ({SCENARIOS[s][1]}×{SCENARIOS[s][0]} trials)" for s in scenarios], fontsize=8)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Hyperparameter studies on {NODES * GPUS_PER_NODE} GPUs: successive halving (η={ETA}), "
                 "1-hour trials (mean per study)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
