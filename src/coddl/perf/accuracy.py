"""How accurate the estimator is on measurements it did not learn from — the protocol behind
``coddl estimate accuracy`` and ``benchmarks/estimator_accuracy.py``.

For every testbed (a cluster in the profile table):

1. the **prior** a new job starts from is learned from the OTHER testbeds only
   (leave-one-testbed-out);
2. the testbed's **fabric** is calibrated from its collective micro-benchmarks if it has any,
   otherwise from its other jobs (leave-one-job-out), or — to show how much the choice matters —
   from each single job in turn; the calibration jobs also say how far this testbed's
   measurements scatter around the model (the noise the prior carries);
3. each held-out job is predicted on all its multi-GPU rows from its one-GPU rows alone
   (**before**);
4. it is then corrected with ONE measured multi-GPU row and predicted on the rest (**after**),
   for up to ``points`` different measured rows spread over its placements and batches — the
   figure is the mean over them, never one hand-picked placement; the same measured row feeds the
   baselines: **linear** scaling of the one-GPU speed, and **Amdahl**'s law with its one parameter
   fitted to that row; and with TWO measured rows of different GPU counts (**after two** against
   Amdahl fitted to both).

``worse_near`` is the share of single corrections that made the estimate worse on the measured
row's neighbours (same node count, between half and twice its GPUs), and ``coverage`` the share of
rows inside the 90% interval before correction. MAPE is of throughput, in percent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from coddl.perf.calibrate import (Population, fit_fabric, job_steps, one_gpu_model, population, prior_from,
                                  with_cluster_noise)
from coddl.perf.estimator import Estimator
from coddl.perf.fabric import Algorithm, Fabric
from coddl.perf.jobmodel import JobModel, Prior, Steps
from coddl.perf.table import ProfileTable

OTHERS = "others"  # calibration choice: the testbed's other jobs
COLLECTIVE = "collective"  # calibration choice: the testbed's collective micro-benchmarks


@dataclass(frozen=True)
class AppAccuracy:
    cluster: str
    app: str
    calibration: str
    rows: int
    before: float
    after: float
    after_worst: float
    linear: float
    amdahl: float
    after_two: float
    amdahl_two: float
    worse_near: float
    coverage: float
    # (measured, predicted before, predicted after the median single correction) steps/s,
    # for predicted-vs-measured plots; not part of the summary
    points: tuple[np.ndarray, np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict:
        out = {}
        for f in fields(self):
            if f.name != "points":
                v = getattr(self, f.name)
                out[f.name] = round(v, 2) if isinstance(v, float) else v
        return out


def mape(predicted_rate: np.ndarray, measured_rate: np.ndarray) -> float:
    return float(100.0 * np.mean(np.abs(np.asarray(predicted_rate) / np.asarray(measured_rate) - 1.0)))


# ------------------------------------------------------------------------------ one job

def _amdahl_rate(compute_s: np.ndarray, k: np.ndarray, p: np.ndarray | float) -> np.ndarray:
    """Amdahl's law in weak-scaling form: k GPUs process k local batches in C·((1 − p)k + p)."""
    return 1.0 / (compute_s * ((1.0 - p) * k + p))


_P_GRID = np.linspace(0.0, 1.0, 2001)


def _fit_amdahl(compute_s: np.ndarray, k: np.ndarray, measured_rate: np.ndarray) -> float:
    """The parallel fraction p ∈ [0, 1] that best explains the measured rows (log error)."""
    err = np.log(_amdahl_rate(compute_s[None, :], k[None, :], _P_GRID[:, None]) / measured_rate[None, :])
    return float(_P_GRID[np.argmin(np.sum(err**2, axis=1))])


def _spread(n: int, count: int) -> np.ndarray:
    if n <= count:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, count)).astype(np.int64))


def evaluate_job(estimator: Estimator, rows: ProfileTable, prior: Prior, calibration: str,
                 points: int = 40) -> AppAccuracy | None:
    """The protocol above for one job (``rows``: all of the job's rows on one testbed)."""
    multi = rows.take(rows.gpus > 1)
    if len(multi) < 3 or not (rows.gpus == 1).any():
        return None
    order = np.lexsort((multi.local_batch, multi.max_per_node, multi.nodes, multi.gpus))
    multi = multi.take(order)
    job = one_gpu_model(rows, prior)
    k, n, g, b, share = multi.gpus, multi.nodes, multi.max_per_node, multi.local_batch, multi.compute_share
    rate = multi.steps_per_s
    steps = job_steps(multi, estimator.fabric)

    def predict(model: JobModel, uncertainty: bool = False):
        return estimator.rates(model, k, n, g, b, uncertainty=uncertainty, share=share)

    first = predict(job, uncertainty=True)
    before = mape(first.steps_per_s, rate)
    coverage = float(np.mean((rate >= first.low) & (rate <= first.high)))
    compute = job.compute_seconds(b) / share
    linear = mape(1.0 / compute, rate)
    chosen = _spread(len(multi), points)
    after, amdahl, worse, preds = [], [], [], []
    for m in chosen:
        rest = np.ones(len(multi), dtype=bool)
        rest[m] = False
        corrected = job.updated(_one(steps, [m]))
        pred = predict(corrected).steps_per_s
        after.append(mape(pred[rest], rate[rest]))
        preds.append(pred)
        p = _fit_amdahl(compute[[m]], k[[m]], rate[[m]])
        amdahl.append(mape(_amdahl_rate(compute[rest], k[rest], p), rate[rest]))
        near = rest & (b == b[m]) & ((n > 1) == (n[m] > 1)) & (k >= k[m] / 2) & (k <= 2 * k[m])
        if near.any():
            worse.append(mape(pred[near], rate[near]) > mape(first.steps_per_s[near], rate[near]) + 1e-9)
    after_two, amdahl_two = [], []
    half = max(1, len(chosen) // 2)
    for i, m1 in enumerate(chosen):
        m2 = chosen[(i + half) % len(chosen)]
        if k[m1] == k[m2]:
            continue
        rest = np.ones(len(multi), dtype=bool)
        rest[[m1, m2]] = False
        if not rest.any():
            continue
        pred = predict(job.updated(_one(steps, [m1, m2]))).steps_per_s
        after_two.append(mape(pred[rest], rate[rest]))
        p = _fit_amdahl(compute[[m1, m2]], k[[m1, m2]], rate[[m1, m2]])
        amdahl_two.append(mape(_amdahl_rate(compute[rest], k[rest], p), rate[rest]))
    nan = float("nan")
    median = int(np.argsort(after)[len(after) // 2])
    return AppAccuracy(rows.cluster[0], rows.model[0], calibration, len(multi), before, float(np.mean(after)),
                       float(np.max(after)), linear, float(np.mean(amdahl)),
                       float(np.mean(after_two)) if after_two else nan, float(np.mean(amdahl_two)) if amdahl_two else nan,
                       float(np.mean(worse)) if worse else 0.0, coverage,
                       (rate, first.steps_per_s, preds[median]))


def _one(steps: Steps, idx: list[int]) -> Steps:
    i = np.asarray(idx)
    return Steps(steps.local_batch[i], steps.comm_base[i], steps.seconds[i], steps.comm_s[i], steps.speed[i])


# ------------------------------------------------------------------------------ one testbed

def apps_of(table: ProfileTable) -> list[str]:
    """Jobs that can be evaluated: a one-GPU profile and at least three multi-GPU rows."""
    out = []
    for name in table.models():
        rows = table.where(model=name, kind="job")
        if (rows.gpus == 1).any() and int((rows.gpus > 1).sum()) >= 3:
            out.append(name)
    return out


def evaluate_testbed(table: ProfileTable, prior: Prior, calibration: str = OTHERS, points: int = 40,
                     algorithm: Algorithm | None = None, gpu_types: dict | None = None) -> list[AppAccuracy]:
    """Every app of one testbed under one calibration choice: ``OTHERS`` (each app's fabric from
    the testbed's other jobs), ``COLLECTIVE`` (from its micro-benchmarks), or a job's name."""
    apps = apps_of(table)
    out = []
    fixed: tuple[Fabric, Prior] | None = None
    if calibration == COLLECTIVE:
        fixed = fit_fabric(table, [], algorithm).fabric, prior
    elif calibration != OTHERS:
        fit = fit_fabric(table, [calibration], algorithm)
        fixed = fit.fabric, with_cluster_noise(prior, population(table, fit=fit))
    for app in apps:
        if app == calibration:
            continue
        if fixed is None:
            fit = fit_fabric(table, [a for a in apps if a != app], algorithm)
            fabric, job_prior = fit.fabric, with_cluster_noise(prior, population(table, fit=fit))
        else:
            fabric, job_prior = fixed
        est = Estimator(fabric, gpu_types or {})
        res = evaluate_job(est, table.where(model=app, kind="job"), job_prior, calibration, points)
        if res is not None:
            out.append(res)
    return out


def leave_one_testbed_out(table: ProfileTable, choices: Callable[[ProfileTable], Sequence[str]] | None = None,
                          points: int = 40, algorithm: Algorithm | None = None,
                          extra: Sequence[Population] = (),
                          progress: Callable[[str], None] | None = None) -> dict[str, list[AppAccuracy]]:
    """Every testbed of ``table`` with a prior learned from the others (and from ``extra``
    populations, e.g. the bundled testbeds', except any of the same name); ``choices(testbed)``
    lists the calibration choices to run (default: the recommended one only)."""
    clusters = table.clusters
    pops: dict[str, Population] = {}

    def population_of(c: str) -> Population:
        if c not in pops:
            if progress:
                progress(f"{c}: fitting its population")
            pops[c] = population(table.where(cluster=c), algorithm)
        return pops[c]

    out: dict[str, list[AppAccuracy]] = {}
    for c in clusters:
        others = [population_of(o) for o in clusters if o != c] + [p for p in extra if p.cluster not in clusters]
        others = [p for p in others if len(p.thetas)]
        if sum(len(p.thetas) for p in others) < 2:
            raise ValueError(f"{c}: no other testbed to learn a prior from; give at least two testbeds")
        prior = prior_from(others)
        sub = table.where(cluster=c)
        for choice in (choices(sub) if choices else [recommended(sub)]):
            if progress:
                progress(f"{c}: calibrated on {choice}")
            out.setdefault(c, []).extend(evaluate_testbed(sub, prior, choice, points, algorithm))
    return out


def recommended(table: ProfileTable) -> str:
    """Collective micro-benchmarks when the testbed has them, else its other jobs."""
    return COLLECTIVE if table.is_collective.any() else OTHERS


def every_choice(table: ProfileTable) -> list[str]:
    """The recommended calibration plus each single job in turn."""
    return [recommended(table)] + apps_of(table)


def predicted_vs_measured_figure(results: dict[str, list[AppAccuracy]]):
    """Predicted vs measured steps/s, before and after one correction (log-log): the figure, one
    panel each, a colour per testbed (by its place in ``results``), the identity line and a ±20%
    band; points come from the recommended calibrations (``OTHERS``, ``COLLECTIVE``) only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5), sharex=True, sharey=True)
    lo, hi = math.inf, 0.0
    for i, (cluster, rows) in enumerate(results.items()):
        pts = [r.points for r in rows if r.points is not None and r.calibration in (OTHERS, COLLECTIVE)]
        if not pts:
            continue
        meas = np.concatenate([p[0] for p in pts])
        for ax, col in zip(axes, (1, 2)):
            ax.scatter(meas, np.concatenate([p[col] for p in pts]), s=4, alpha=0.4, label=cluster, color=f"C{i}")
        lo, hi = min(lo, float(meas.min())), max(hi, float(meas.max()))
    for ax, title in zip(axes, ("before correction (one-GPU profile only)", "after one measured correction")):
        xs = np.array([lo, hi]) if hi > 0 else np.array([1e-2, 1e2])
        ax.plot(xs, xs, "k-", lw=0.8)
        for f in (0.8, 1.2):
            ax.plot(xs, f * xs, "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured steps/s")
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("predicted steps/s")
    axes[0].legend(markerscale=3, fontsize=8)
    fig.tight_layout()
    return fig


def plot_predicted_vs_measured(results: dict[str, list[AppAccuracy]], path: str | Path) -> None:
    """Predicted vs measured steps/s, before and after one correction (log-log), saved as a PNG."""
    fig = predicted_vs_measured_figure(results)  # selects the Agg backend before pyplot is imported
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
