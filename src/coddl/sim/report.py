"""Files and plots of a simulation run: summary.csv, per-job CSVs, config.json and PNG figures."""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from coddl.perf.curves import CurveTable  # noqa: E402
from coddl.sim.engine import SimResult  # noqa: E402
from coddl.sim.metrics import Summary, finish_time_fairness  # noqa: E402

# rho: the job's finish-time fairness (sim.metrics), empty when the run was written without curves
JOB_COLUMNS = ("job_id", "user", "model", "arrival", "requested_gpus", "duration", "total_work",
               "first_start", "finish", "jct", "queueing_delay", "attained_gpu_s", "resizes", "status", "rho")


def safe_name(policy: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in policy)


def write_summary(path: Path, summaries: list[Summary]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(summaries[0].row()))
        w.writeheader()
        for s in summaries:
            w.writerow(s.row())


def write_jobs(path: Path, res: SimResult, curves: CurveTable | None = None) -> None:
    rho = dict(zip((r.spec.job_id for r in res.records), finish_time_fairness(res, curves))) \
        if curves is not None and res.records else {}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(JOB_COLUMNS)
        for r in sorted(res.records, key=lambda r: (r.spec.arrival, r.spec.job_id)):
            s = r.spec
            w.writerow([s.job_id, s.user, s.model, f"{s.arrival:.3f}", s.requested_gpus,
                        "" if s.duration is None else f"{s.duration:.3f}", f"{s.total_work:.6g}",
                        f"{r.first_start:.3f}", f"{r.finish:.3f}", f"{r.jct:.3f}", f"{r.queueing_delay:.3f}",
                        f"{r.attained_service:.3f}", r.resizes, r.status,
                        f"{rho[s.job_id]:.4f}" if s.job_id in rho else ""])


def write_skipped(out: Path, skipped: list) -> Path:
    """``skipped.csv``: the trace jobs that were not simulated (``sim.workload.Skipped``), and why."""
    path = out / "skipped.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("job_id", "gpus", "reason"))
        w.writerows((s.job_id, s.gpus, s.reason) for s in skipped)
    return path


def _colours(ax: plt.Axes, lines: int) -> None:
    """Past ten lines the default colours repeat, and two policies would look like one."""
    if lines > 10:
        ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)


CDF_POINTS = 2000


def plot_jct_cdf(path: Path, results: dict[str, SimResult]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    _colours(ax, len(results))
    for name, res in results.items():
        jct = np.sort(np.fromiter((r.jct for r in res.records), dtype=float, count=len(res.records))) / 3600.0
        if jct.size:
            # a step per job is tens of thousands of segments on a long trace; at most CDF_POINTS
            # evenly spaced ranks (and the last) draw the same curve at this size
            at = np.unique(np.r_[np.linspace(0, jct.size - 1, min(jct.size, CDF_POINTS)).astype(np.int64), jct.size - 1])
            ax.step(jct[at], (at + 1) / jct.size, where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF per policy")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def binned_utilisation(series: list[tuple[float, int]], capacity: int, bins: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Time-weighted mean utilisation in equal time bins: the raw step series of a long trace is too
    dense to read."""
    t = np.array([u[0] for u in series], dtype=float)
    used = np.array([u[1] for u in series], dtype=float)
    edges = np.linspace(t[0], t[-1], bins + 1) if t[-1] > t[0] else np.array([t[0], t[0] + 1.0])
    # cumulative busy GPU-seconds at each change point, interpolated at the bin edges
    busy = np.concatenate([[0.0], np.cumsum(np.diff(t) * used[:-1])])
    at_edges = np.interp(edges, t, busy)
    mean = np.diff(at_edges) / np.diff(edges) / capacity
    return edges[:-1], mean


def plot_utilisation(path: Path, results: dict[str, SimResult]) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    _colours(ax, len(results))
    for name, res in results.items():
        if len(res.utilisation) > 1:
            t, util = binned_utilisation(res.utilisation, res.capacity)
            ax.step(t / 3600.0, util, where="post", label=name, lw=1.0)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("GPUs in use / capacity (binned mean)")
    ax.set_ylim(0, 1.05)
    ax.set_title("cluster utilisation over time")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_allocations(path: Path, results: dict[str, SimResult], max_jobs: int = 60) -> None:
    """GPUs held by each job over time (first ``max_jobs`` jobs by arrival), one panel per policy:
    a bar per job, its shade the number of GPUs — where elastic policies grow and shrink jobs."""
    n = len(results)
    fig, axes = plt.subplots(n, 1, figsize=(9, 2.2 + 2.4 * n), squeeze=False, sharex=True)
    cmap = plt.get_cmap("viridis")
    firsts = {name: {r.spec.job_id for r in sorted(res.records, key=lambda r: (r.spec.arrival, r.spec.job_id))[:max_jobs]}
              for name, res in results.items()}
    top = max((g for name, res in results.items() for _, j, g in res.timeline if j in firsts[name]), default=1)
    for ax, (name, res) in zip(axes[:, 0], results.items()):
        order = sorted(res.records, key=lambda r: (r.spec.arrival, r.spec.job_id))[:max_jobs]
        lane = {r.spec.job_id: i for i, r in enumerate(order)}
        finish = {r.spec.job_id: r.finish for r in order}
        segments: dict[str, list[tuple[float, int]]] = {}
        for t, job, g in res.timeline:
            if job in lane:
                segments.setdefault(job, []).append((t, g))
        for job, seg in segments.items():  # one collection per lane: an elastic job has thousands of spans
            seg.append((finish[job], 0))
            spans = [((t0 / 3600, (t1 - t0) / 3600), g) for (t0, g), (t1, _) in zip(seg, seg[1:]) if g > 0 and t1 > t0]
            if spans:
                ax.broken_barh([x for x, _ in spans], (lane[job] - 0.4, 0.8),
                               color=cmap(np.array([g for _, g in spans]) / top))
        ax.set_ylabel(f"{name}\njob (by arrival)")
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel("time (hours)")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, top))
    fig.colorbar(sm, ax=axes[:, 0].tolist(), label="GPUs held")
    fig.suptitle(f"GPUs allocated per job over time (first {max_jobs} jobs)")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, summaries: list[Summary], results: dict[str, SimResult],
                 curves: CurveTable | None = None) -> list[Path]:
    """Every file of a run; with the workload's throughput ``curves``, each job's ρ too."""
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "summary.csv"]
    write_summary(files[0], summaries)
    for name, res in results.items():
        p = out / f"jobs-{safe_name(name)}.csv"
        write_jobs(p, res, curves)
        files.append(p)
    for fn, plot in (("jct_cdf.png", plot_jct_cdf), ("utilisation.png", plot_utilisation),
                     ("allocations.png", plot_allocations)):
        plot(out / fn, results)
        files.append(out / fn)
    return files
