"""CoDDL's offline inspection: fit a cluster's fabric once, and learn what jobs look like.

``fit_fabric`` fits the per-cluster parameters — bandwidth and latency of each link level and the
collective algorithm — from whatever multi-GPU measurements the cluster has: collective
micro-benchmarks (rows of kind ``collective``: pure all-reduces, the cleanest inspection), one
calibration job, or several jobs. Each job in the fit also gets its own θ (fixed share,
communication efficiency, overlap; see ``jobmodel.py``): a job's efficiency and overlap are not the
cluster's, and fitting links to one job alone is what made them differ ~70× between jobs. With
several jobs and no micro-benchmark the scale between links and efficiencies is fixed by making
the jobs' efficiencies average 1 (geometric mean); with one job, its own efficiency is 1.

The fit explains step times and, where the runs recorded it, the time each step waited for the
all-reduce (Pollux's ``sync_time``, our ``comm_s``): step times alone cannot tell slow links that
overlap little from fast links that overlap much.

``learn_prior`` turns measured testbeds into the population ``Prior`` a new job starts from: the
spread of fitted θ over jobs and how far single measurements scatter around the model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from coddl.core.cluster import Cluster, GpuType
from coddl.perf.estimator import Estimator
from coddl.perf.fabric import Algorithm, Fabric
from coddl.perf.jobmodel import NP, THETA_LOWER, THETA_UPPER, JobModel, Prior, Steps, affine_fit, step_model
from coddl.perf.lsq import levenberg_marquardt
from coddl.perf.table import ProfileError, ProfileTable

WEAK = Prior(mean=(0.25, 0.0, 0.4), sd=(1.0, 4.0, 1.0))  # for fitting θ alongside the fabric
FIT_ALGORITHMS: tuple[Algorithm, ...] = ("ring", "hierarchical", "tree", "auto")


def job_steps(rows: ProfileTable, fabric: Fabric, speed: np.ndarray | float = 1.0) -> Steps:
    """One job's rows as ``Steps`` against ``fabric``."""
    base = fabric.allreduce_seconds(rows.param_bytes, rows.gpus, rows.nodes, rows.max_per_node, rows.compute_share)
    return Steps(rows.local_batch, base, rows.step_s, rows.comm_s, rows.compute_share * speed, rows.gpus > 1)


def one_gpu_model(rows: ProfileTable, prior: Prior | None = None) -> JobModel:
    """A job as its one-GPU inspection leaves it (``rows``: the job's rows; only k = 1 are used)."""
    one = rows.gpus == 1
    if not one.any():
        raise ProfileError(f"{rows.source or 'profiles'}: {rows.model[0]} on {rows.cluster[0]}: no one-GPU rows; "
                           "the estimator needs the job's one-GPU profile")
    # a one-GPU step measured with a share of a device is that much faster on a whole one
    return JobModel.from_one_gpu(rows.model[0], float(rows.param_bytes[0]), rows.local_batch[one],
                                 rows.step_s[one] * rows.compute_share[one], prior, rows.gpu_type[0])


@dataclass(frozen=True)
class FabricFit:
    fabric: Fabric
    jobs: dict[str, JobModel]
    rms: float  # root mean square of log-time residuals over the rows it explains
    rows: int


NF = 5  # fabric parameters in a fit: see _weights


def _weights(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x[:4] = (log s/byte inter, log intra/inter s/byte ≤ 0, log s/step inter, intra/inter
    latency ∈ [0, 1]) → the fabric's linear weights and ∂weights/∂x (4 × 4); x[4] is the log
    two-node factor."""
    w = np.array([np.exp(x[0] + x[1]), np.exp(x[0]), x[3] * np.exp(x[2]), np.exp(x[2])])
    dw = np.zeros((4, 4))
    dw[0, 0] = dw[0, 1] = w[0]
    dw[1, 0] = w[1]
    dw[2, 2], dw[2, 3] = w[2], np.exp(x[2])
    dw[3, 2] = w[3]
    return w, dw


def _fabric_of(x: np.ndarray, algorithm: Algorithm, bucket_mb: float) -> Fabric:
    w, _ = _weights(x)
    return Fabric(1e-9 / w[0], 1e-9 / w[1], 1e6 * w[2], 1e6 * w[3], algorithm, bucket_mb, float(np.exp(x[4])))


@dataclass(frozen=True)
class _Rows:
    """A job's (or the micro-benchmarks') multi-GPU rows, with what the fit reuses every step."""

    rows: ProfileTable
    options: np.ndarray  # (algorithms, N, 4) all-reduce terms under each candidate algorithm
    two: np.ndarray  # rows on exactly two nodes
    log_s: np.ndarray
    timed: np.ndarray


def _terms(options: np.ndarray, w: np.ndarray) -> np.ndarray:
    if len(options) == 1:
        return options[0]
    best = np.argmin(np.einsum("anf,f->an", options, w), axis=0)  # auto: the cheapest algorithm per row
    return np.take_along_axis(options, best[None, :, None], axis=0)[0]


def fit_fabric(table: ProfileTable, jobs: Sequence[str] | None = None, algorithm: Algorithm | None = None,
               bucket_mb: float = 25.0, noise: Prior = WEAK) -> FabricFit:
    """Fit the fabric of the cluster ``table`` belongs to from its collective rows and the rows of
    ``jobs`` (default: every job). ``algorithm`` None tries each and keeps the best fit.

    Every algorithm's all-reduce time is linear in (1/B_intra, 1/B_inter, L_intra, L_inter), so the
    Jacobian of the fit is analytic and a fit over thousands of rows takes a fraction of a second."""
    if len(set(table.cluster)) > 1:
        raise ValueError(f"fit_fabric: one cluster at a time, got {', '.join(table.clusters)}")
    if algorithm is None:
        fits = [fit_fabric(table, jobs, a, bucket_mb, noise) for a in FIT_ALGORITHMS]
        return min(fits, key=lambda f: f.rms)
    names = list(jobs) if jobs is not None else table.models()
    algs = ("ring", "hierarchical", "tree") if algorithm == "auto" else (algorithm,)

    def prepared(rows: ProfileTable) -> _Rows:
        shape = (rows.param_bytes, rows.gpus, rows.nodes, rows.max_per_node, rows.compute_share)
        opts = np.stack([Fabric(algorithm=a, bucket_mb=bucket_mb).terms(*shape) for a in algs])
        return _Rows(rows, opts, rows.nodes == 2, np.log(rows.step_s), np.isfinite(rows.comm_s))

    coll = table.where(kind="collective")
    coll = prepared(coll.take(coll.gpus > 1))
    parts = [table.where(model=n, kind="job") for n in names]
    models = [one_gpu_model(p, WEAK) for p in parts]
    multi = [prepared(p.take(p.gpus > 1)) for p in parts]
    anchored = len(coll.rows) > 0
    if not anchored and sum(len(m.rows) for m in multi) == 0:
        where = table.cluster[0] if len(table) else "cluster"
        raise ProfileError(f"{table.source or 'profiles'}: {where}: no multi-GPU rows to calibrate the links from")
    nj = len(models)
    width = NF + NP * nj
    mu, prec = np.array(WEAK.mean), 1.0 / np.array(WEAK.sd)
    pin = 1e3  # weight of the residual that fixes the η scale (an exact symmetry when nothing anchors it)

    def comm_base(r: _Rows, x: np.ndarray, w: np.ndarray, dw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All-reduce seconds of each row and ∂log A/∂x[:NF]."""
        xt = _terms(r.options, w)
        plain = np.einsum("nf,f->n", xt, w)
        factor = np.where(r.two, np.exp(x[4]), 1.0)
        dlog = np.empty((len(plain), NF))
        dlog[:, :4] = np.einsum("nf,fg->ng", xt, dw) / plain[:, None]
        dlog[:, 4] = r.two
        return plain * factor, dlog

    def both(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        thetas = [x[NF + NP * j: NF + NP + NP * j] for j in range(nj)]
        w, dw = _weights(x)
        res_blocks, jac_blocks = [], []
        if anchored:
            a, dlog = comm_base(coll, x, w, dw)
            res_blocks.append((np.log(a) - coll.log_s) / noise.noise)
            jb = np.zeros((len(a), width))
            jb[:, :NF] = dlog / noise.noise
            jac_blocks.append(jb)
        for j, (model, r, th) in enumerate(zip(models, multi, thetas)):
            col = slice(NF + NP * j, NF + NP + NP * j)
            jb = np.zeros((NP, width))
            jb[:, col] = np.diag(prec)
            res_blocks.append((th - mu) * prec)
            jac_blocks.append(jb)
            if len(r.rows) == 0:
                continue
            a, dlog = comm_base(r, x, w, dw)
            log_t, g, c, _, t, dlogc = step_model(model.t_ref, model.b_ref, r.rows.local_batch, r.rows.compute_share,
                                                  a, th, grad=True, floor=model.t_floor)
            dlogt_dx = g[:, 1:2] * dlog  # ∂log T/∂log S = ∂log T/∂log η
            jb = np.zeros((len(a), width))
            jb[:, :NF] = dlogt_dx / noise.noise
            jb[:, col] = g / noise.noise
            res_blocks.append((log_t - r.log_s) / noise.noise)
            jac_blocks.append(jb)
            tm = r.timed
            if tm.any():
                scale = r.rows.step_s[tm] * noise.comm_noise
                res_blocks.append((t[tm] - c[tm] - r.rows.comm_s[tm]) / scale)
                jb = np.zeros((int(tm.sum()), width))
                jb[:, :NF] = t[tm, None] * dlogt_dx[tm] / scale[:, None]
                d_exposed = t[tm, None] * g[tm]
                d_exposed[:, 0] -= c[tm] * np.broadcast_to(dlogc, log_t.shape)[tm]
                jb[:, col] = d_exposed / scale[:, None]
                jac_blocks.append(jb)
        if not anchored:
            res_blocks.append(np.array([pin * np.mean([th[1] for th in thetas])]))
            jb = np.zeros((1, width))
            jb[0, NF + 1::NP] = pin / nj
            jac_blocks.append(jb)
        return np.concatenate(res_blocks), np.vstack(jac_blocks)

    start = Fabric()
    x0 = np.array([np.log(1e-9 / start.inter_gbps), np.log(start.inter_gbps / start.intra_gbps),
                   np.log(start.inter_latency_us * 1e-6), start.intra_latency_us / start.inter_latency_us, 0.0])
    lower = np.r_[np.log(1e-13), np.log(1e-4), np.log(1e-7), 0.0, np.log(0.5), np.tile(THETA_LOWER, nj)]
    upper = np.r_[np.log(1e-5), 0.0, np.log(1.0), 1.0, np.log(4.0), np.tile(THETA_UPPER, nj)]
    nodes = np.concatenate([r.rows.nodes for r in [coll, *multi]])
    if not ((nodes == 2).any() and (nodes >= 3).any()):
        lower[4] = upper[4] = 0.0  # a two-node factor needs two-node AND larger rows to tell it from the links
    x, _, _ = levenberg_marquardt(both, np.r_[x0, np.tile(mu, nj)], lower, upper, iterations=100)
    fabric = _fabric_of(x, algorithm, bucket_mb)
    fitted: dict[str, JobModel] = {}
    errs = []
    for j, (model, r) in enumerate(zip(models, multi)):
        th = x[NF + NP * j: NF + NP + NP * j].copy()
        fitted[model.name] = JobModel(model.name, model.param_bytes, model.t_ref, model.b_ref, th, model.cov,
                                      model.prior, model.gpu_type, t_floor=model.t_floor)
        if len(r.rows):
            base = fabric.allreduce_seconds(r.rows.param_bytes, r.rows.gpus, r.rows.nodes, r.rows.max_per_node,
                                            r.rows.compute_share)
            log_t, = step_model(model.t_ref, model.b_ref, r.rows.local_batch, r.rows.compute_share, base, th,
                                floor=model.t_floor)
            errs.append(log_t - r.log_s)
    if anchored:
        c = coll.rows
        errs.append(np.log(fabric.allreduce_seconds(c.param_bytes, c.gpus, c.nodes, c.max_per_node, c.compute_share))
                    - coll.log_s)
    e = np.concatenate(errs) if errs else np.zeros(1)
    return FabricFit(fabric, fitted, float(np.sqrt(np.mean(e**2))), int(e.size))


@dataclass(frozen=True)
class Population:
    """What one testbed says about jobs in general: fitted θ of each job and residual levels."""

    cluster: str
    thetas: np.ndarray  # (J, NP)
    noise: np.ndarray  # per job: rms log-time residual around its own fit
    comm_noise: np.ndarray
    one_gpu_noise: np.ndarray  # per job: rms log-time residual of its one-GPU rows around the affine fit


def population(table: ProfileTable, algorithm: Algorithm | None = None, fit: FabricFit | None = None) -> Population:
    """The jobs of ``fit`` (default: the testbed's fabric fitted on all its jobs): each job's θ,
    and how far its measurements scatter around the model where it was NOT fitted — θ fitted to
    half of the job's placements, residuals taken on the other half (and vice versa). That
    held-out scatter, not the smaller in-sample one, is how far one measurement may be trusted to
    speak for the others."""
    fit = fit or fit_fabric(table, algorithm=algorithm)
    thetas, noise, comm_noise, one_noise = [], [], [], []
    for name, job in fit.jobs.items():
        rows = table.where(model=name, kind="job")
        multi = rows.take(rows.gpus > 1)
        if len(multi) == 0:
            continue
        thetas.append(job.theta)
        one = rows.take(rows.gpus == 1)
        if len(set(one.local_batch.tolist())) >= 3:  # two points fit an affine model exactly
            t = one.step_s * one.compute_share
            alpha, beta = affine_fit(one.local_batch, t)
            one_noise.append(float(np.sqrt(np.mean(np.log((alpha + beta * one.local_batch) / t) ** 2))))
        steps = job_steps(multi, fit.fabric)
        shape = np.unique(np.c_[multi.gpus, multi.nodes, multi.max_per_node], axis=0, return_inverse=True)[1]
        half = shape.ravel() % 2 == 0
        held, comm_held = [], []
        for part in (half, ~half):
            if not part.any() or part.all():
                continue
            fitted = one_gpu_model(rows, WEAK).updated(steps.take(part))
            out = ~part
            log_t, _, c, _, t, _ = step_model(job.t_ref, job.b_ref, steps.local_batch[out], steps.speed[out],
                                              steps.comm_base[out], fitted.theta, grad=True, floor=job.t_floor)
            held.append(log_t - np.log(steps.seconds[out]))
            timed = np.isfinite(steps.comm_s[out])
            if timed.any():
                comm_held.append(((t - c)[timed] - steps.comm_s[out][timed]) / steps.seconds[out][timed])
        if held:
            noise.append(float(np.sqrt(np.mean(np.concatenate(held) ** 2))))
        if comm_held:
            comm_noise.append(float(np.sqrt(np.mean(np.concatenate(comm_held) ** 2))))
    return Population(table.cluster[0], np.array(thetas).reshape(-1, NP), np.array(noise), np.array(comm_noise),
                      np.array(one_noise))


FLOOR = Prior(mean=(0.0,) * NP, sd=(0.05, 0.2, 0.1), noise=0.05, comm_noise=0.03, one_gpu_noise=0.01)


def prior_from(populations: Sequence[Population], floor: Prior = FLOOR, shrink: float = 0.3) -> Prior:
    """Pool testbeds: mean, spread and correlations of θ over all their jobs (spread at least
    ``floor.sd``; correlations shrunk by ``shrink`` towards 0, as a handful of jobs estimates them
    roughly; a testbed's η are relative to its own fabric, so their mean is 0 by construction),
    the median held-out residual as the noise."""
    th = np.vstack([p.thetas for p in populations])
    if len(th) < 2:
        raise ValueError("a prior needs at least two jobs with multi-GPU measurements")
    noise = np.concatenate([p.noise for p in populations])
    comm = np.concatenate([p.comm_noise for p in populations])
    one = np.concatenate([p.one_gpu_noise for p in populations])
    corr = np.nan_to_num(np.corrcoef(th.T)) * (1.0 - shrink) if len(th) > NP else np.zeros((NP, NP))
    return Prior(mean=tuple(float(v) for v in th.mean(axis=0)),
                 sd=tuple(float(max(s, f)) for s, f in zip(th.std(axis=0, ddof=1), floor.sd)),
                 noise=max(float(np.median(noise)), floor.noise),
                 comm_noise=max(float(np.median(comm)) if comm.size else floor.comm_noise, floor.comm_noise),
                 one_gpu_noise=max(float(np.median(one)) if one.size else floor.one_gpu_noise, floor.one_gpu_noise),
                 corr=Prior.correlations(corr))


def with_cluster_noise(prior: Prior, pop: Population) -> Prior:
    """``prior`` with the noise levels of this cluster's own calibration jobs where it has any:
    how far a measurement scatters around the model is a property of the cluster and its
    measurements (a busy shared host scatters far more than a dedicated GPU cluster)."""
    floor = FLOOR
    changes = {}
    if pop.noise.size:
        changes["noise"] = max(float(np.median(pop.noise)), floor.noise)
    if pop.comm_noise.size:
        changes["comm_noise"] = max(float(np.median(pop.comm_noise)), floor.comm_noise)
    if pop.one_gpu_noise.size:
        changes["one_gpu_noise"] = max(float(np.median(pop.one_gpu_noise)), floor.one_gpu_noise)
    return replace(prior, **changes)


def learn_prior(table: ProfileTable, algorithm: Algorithm | None = None) -> Prior:
    """The population prior from every testbed in ``table``."""
    return prior_from([population(table.where(cluster=c), algorithm) for c in table.clusters])


@dataclass(frozen=True)
class Calibration:
    """Everything the estimator knows about one cluster: its fabric, the prior a new job starts
    from, and what the fabric was calibrated on."""

    cluster: str
    fabric: Fabric
    prior: Prior
    calibrated_on: tuple[str, ...]
    rows: int
    fit_rms: float
    gpu_types: dict[str, float] = field(default_factory=dict)  # type → speed, from the cluster spec

    def estimator(self, balance: bool = True) -> Estimator:
        return Estimator(self.fabric, {t: GpuType(t, speed=s) for t, s in self.gpu_types.items()}, balance=balance)

    def to_json(self) -> str:
        return json.dumps({"cluster": self.cluster, "fabric": asdict(self.fabric), "prior": asdict(self.prior),
                           "calibrated_on": list(self.calibrated_on), "rows": self.rows,
                           "fit_rms": self.fit_rms, "gpu_types": self.gpu_types}, indent=2)

    @staticmethod
    def from_json(text: str, source: str = "calibration") -> "Calibration":
        try:
            d = json.loads(text)
            return Calibration(str(d["cluster"]), Fabric(**d["fabric"]), _prior(d["prior"]),
                               tuple(d["calibrated_on"]), int(d["rows"]), float(d["fit_rms"]),
                               {str(k): float(v) for k, v in d.get("gpu_types", {}).items()})
        except (ValueError, KeyError, TypeError) as e:
            raise ProfileError(f"{source}: not a calibration written by `coddl estimate calibrate` ({e})") from None

    @staticmethod
    def load(path: str | Path) -> "Calibration":
        p = Path(path)
        try:
            return Calibration.from_json(p.read_text(), p.name)
        except FileNotFoundError:
            raise ProfileError(f"{p}: no such file") from None


def calibrate(table: ProfileTable, cluster: Cluster | None = None, jobs: Sequence[str] | None = None,
              algorithm: Algorithm | None = None, prior: Prior | None = None) -> Calibration:
    """Calibrate one cluster's fabric from ``table`` (its collective micro-benchmarks, else the
    multi-GPU rows of ``jobs``, default all jobs). ``prior`` default: the bundled one, learned
    from every bundled testbed (``default_prior``)."""
    names = table.clusters
    if len(names) != 1:
        raise ProfileError(f"{table.source or 'profiles'}: calibrate one cluster at a time; the table holds "
                           f"{', '.join(names)} (select one with --on)")
    known = table.models()
    for j in jobs or ():
        if j not in known:
            raise ProfileError(f"{table.source or 'profiles'}: model {j!r} is not in the table; known: {', '.join(known)}")
    has_collective = bool(table.is_collective.any())
    use = list(jobs) if jobs is not None else ([] if has_collective else known)
    fit = fit_fabric(table, use, algorithm)
    types = {t.name: t.speed for t in (cluster.gpu_types.values() if cluster else ())}
    prior = with_cluster_noise(prior or default_prior(), population(table, fit=fit)) if use else (prior or default_prior())
    return Calibration(names[0], fit.fabric, prior, tuple(use) or ("collective",), fit.rows, fit.rms, types)


PRIOR_FILE = "profiles/prior.json"


def default_prior() -> Prior:
    """The prior learned from every bundled testbed (``data/profiles/prior.json``, written by
    ``benchmarks/estimator_accuracy.py --write-prior``; stored so that a new job costs no fitting)."""
    from coddl.perf.curves import data_path

    p = data_path(PRIOR_FILE)
    if not p.exists():
        return Prior()
    return _prior(json.loads(p.read_text())["prior"])


def _prior(d: dict) -> Prior:
    return Prior(tuple(d["mean"]), tuple(d["sd"]), float(d["noise"]), float(d["comm_noise"]), float(d["one_gpu_noise"]),
                 tuple(d["corr"]))


def bundled_populations() -> list[Population]:
    """The per-testbed populations the bundled prior was pooled from."""
    from coddl.perf.curves import data_path

    p = data_path(PRIOR_FILE)
    if not p.exists():
        return []
    return [Population(d["cluster"], np.array(d["thetas"]).reshape(-1, NP), np.array(d["noise"]),
                       np.array(d["comm_noise"]), np.array(d["one_gpu_noise"]))
            for d in json.loads(p.read_text())["populations"]]


def write_prior(populations: Sequence[Population], path: str | Path) -> Prior:
    prior = prior_from(populations)
    doc = {"prior": asdict(prior),
           "populations": [{"cluster": p.cluster, "thetas": np.round(p.thetas, 6).tolist(),
                            "noise": np.round(p.noise, 6).tolist(), "comm_noise": np.round(p.comm_noise, 6).tolist(),
                            "one_gpu_noise": np.round(p.one_gpu_noise, 6).tolist()}
                           for p in populations]}
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return prior
