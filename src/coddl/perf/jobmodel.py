"""The per-job half of the estimator: what one job's data-parallel step costs, with how sure we are.

One step of job j at local batch b on a placement of k GPUs costs

    compute        C = max(t_ref · (f + (1 − f) · b / b_ref), t_floor) / speed
    communication  S = η · A(bytes, placement)                  (A: the cluster's fabric)
    step           T = (C^γ + S^γ)^(1/γ)                        (γ ≥ 1: overlap)

``t_ref`` is the one-GPU step time at the profiled batch ``b_ref``; it is fixed by the job's
one-GPU profile and never corrected, so no estimate is ever faster than linear scaling of what the
job measured on one GPU: T ≥ C, and C shrinks at most in proportion to the local batch (f ≥ 0).

``t_floor`` is the device's floor for this job: below some local batch a GPU's step stops getting
faster, because the kernels no longer fill the device (launches and synchronisation set the pace).
On an H100 a ResNet-18 step takes 12–13 ms at every local batch from 1 to 32 and grows linearly
only above 64 (``benchmarks/gpu_compute_curve.py``); a line through the steps at 256, 128 and 64
would put 16 samples at 6 ms, half the measured time, and so price 16 GPUs twice too fast. The
floor is measured, never guessed: it is set only where the job's one-GPU steps at the smallest
batches are slower than the line through at least three larger ones by more than three times the
one-GPU measurement noise (``compute_floor``), and is 0 otherwise — on a CPU, whose step shrinks with the
batch, no floor is seen and the affine term stands alone.
The uncertain parameters θ = (f, log η, ρ) are

* f, the fixed share of a step that does not shrink with the local batch (kernel launches,
  optimizer step): the one-GPU profile pins it down when it spans two or more batch sizes;
  otherwise it comes from the prior, so a job profiled at one batch still gains from more GPUs
  under strong scaling;
* η, the job's communication efficiency on this cluster relative to the fabric's collective
  (bucket layout, framework overheads, gradient compression): links fitted to single jobs differ
  by more than an order of magnitude between jobs, so this factor is per job;
* ρ, the overlap of communication with backward compute: how much of the smaller part hides when
  both are equal, ρ = 2 − 2^(1/γ) ∈ [0, 1) for Pollux's overlap form (ρ = 0: none, T = C + S;
  ρ → 1: full, T = max(C, S)).

A fourth per-job parameter — a slowdown of compute when the job runs distributed (workers sharing
a host's memory bandwidth and cores) — was tried and left out: across the testbeds it helped as
often as it hurt, and it trades off against the intra-node links in calibration. Where workers
do share a device, the profile says so (``compute_share``).

f and ρ enter the step time almost linearly, so a Gaussian belief over them (with their bounds
[0, 0.99]) is a fair description; logit or log scales would stretch the irrelevant region near 0
— f = 0.002 vs 0.03, γ = 1.003 vs 1.05 — into large distances.

Each job carries a Gaussian belief over θ: the population prior (``Prior``), updated by its
one-GPU rows and by whatever multi-GPU steps it has been measured at (regularised, i.e. Bayesian,
least squares in log time; the posterior covariance is the Laplace approximation). A prediction's
spread is the parameters' uncertainty pushed through the model plus the measurement noise, which
is what lets a policy prefer measured facts to guesses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from coddl.perf.lsq import levenberg_marquardt

PARAMS = ("fixed_share", "comm_efficiency", "overlap")
NP = len(PARAMS)
THETA_LOWER = np.array([0.0, -12.0, 0.0])
THETA_UPPER = np.array([0.99, 12.0, 0.99])
LN2 = math.log(2.0)
# How far (in one-GPU measurement noise) a small batch's step must sit above the line through the
# larger ones to count as the device's floor: three standard deviations, so noise alone rarely does.
FLOOR_SIGMAS = 3.0


def gamma_of(rho: np.ndarray | float) -> np.ndarray:
    """Pollux's overlap exponent γ from the hidden share ρ = 2 − 2^(1/γ)."""
    return LN2 / np.log(2.0 - np.asarray(rho, dtype=float))


def theta_of(f: float = 0.25, eta: float = 1.0, rho: float = 0.4966) -> np.ndarray:
    """θ from the physical parameters (fixed share, communication efficiency, overlap)."""
    return np.array([f, math.log(eta), rho])


def _pairs() -> list[tuple[int, int]]:
    return [(i, j) for i in range(NP) for j in range(i + 1, NP)]


@dataclass(frozen=True)
class Prior:
    """Population belief over θ = (f, log η, ρ) for a job nothing is known about, and the noise of
    one measurement around the model (log time: measurement noise plus what the model cannot
    explain). Learned from measured testbeds (``calibrate.prior_from``). ``corr`` holds the
    correlations of the parameter pairs (f, η), (f, ρ), (η, ρ): jobs that hide more communication
    show higher efficiencies when fitted, so η and ρ vary together."""

    mean: tuple[float, ...] = (0.25, 0.0, 0.4966)  # ρ of γ = 1.7, the overlap Pollux fits
    sd: tuple[float, ...] = (0.3, 0.5, 0.35)
    noise: float = 0.08
    comm_noise: float = 0.05  # of a measured exposed-communication share of the step
    # of a one-GPU step around the affine compute model: far smaller than ``noise``, which mostly
    # measures what the communication model cannot explain, so a multi-GPU step barely moves f
    one_gpu_noise: float = 0.03
    corr: tuple[float, ...] = (0.0,) * (NP * (NP - 1) // 2)

    def __post_init__(self) -> None:
        if len(self.mean) != NP or len(self.sd) != NP or len(self.corr) != NP * (NP - 1) // 2:
            raise ValueError(f"a prior has {NP} means and standard deviations and {NP * (NP - 1) // 2} correlations")
        if not all(math.isfinite(m) for m in self.mean) or not all(s > 0 and math.isfinite(s) for s in self.sd):
            raise ValueError(f"prior: means must be finite and standard deviations positive, got {self}")
        if not (self.noise > 0 and self.comm_noise > 0 and self.one_gpu_noise > 0):
            raise ValueError("prior: noise levels must be positive")
        # on the correlation matrix (unit diagonal) with a margin for rounding: a singular one's smallest
        # eigenvalue can round to +1e-18, and the first update then fails to invert the covariance
        sd = np.asarray(self.sd, dtype=float)
        if not all(abs(c) < 1 for c in self.corr) or np.linalg.eigvalsh(self.cov / np.outer(sd, sd)).min() <= 1e-12:
            raise ValueError(f"prior: correlations must make a positive-definite covariance, got {self.corr}")

    @property
    def cov(self) -> np.ndarray:
        r = np.eye(NP)
        for (i, j), c in zip(_pairs(), self.corr):
            r[i, j] = r[j, i] = c
        sd = np.asarray(self.sd, dtype=float)
        return r * np.outer(sd, sd)

    @staticmethod
    def correlations(corr: np.ndarray) -> tuple[float, ...]:
        """The ``corr`` tuple of a correlation matrix."""
        return tuple(float(corr[i, j]) for i, j in _pairs())


@dataclass(frozen=True)
class Steps:
    """Measured steps of one job as columns (the rows of a profile table that belong to it).

    ``comm_base`` is the fabric's all-reduce time for each row's placement (0 on one GPU), computed
    once by the caller; ``comm_s`` the exposed communication, NaN where not measured; ``speed``
    the compute speed relative to the profiled device (GPU type, share of a device);
    ``distributed`` whether the step ran on more than one GPU (default: where comm_base > 0)."""

    local_batch: np.ndarray
    comm_base: np.ndarray
    seconds: np.ndarray
    comm_s: np.ndarray
    speed: np.ndarray | float = 1.0
    distributed: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "speed", np.broadcast_to(np.asarray(self.speed, dtype=float), self.seconds.shape))
        if self.distributed is None:
            object.__setattr__(self, "distributed", np.asarray(self.comm_base) > 0)

    def __len__(self) -> int:
        return len(self.seconds)

    def take(self, rows: np.ndarray) -> "Steps":
        return Steps(self.local_batch[rows], self.comm_base[rows], self.seconds[rows], self.comm_s[rows],
                     self.speed[rows], self.distributed[rows])


@dataclass(frozen=True)
class JobModel:
    """One job's compute reference and belief over θ; immutable (corrections return a new one)."""

    name: str
    param_bytes: float
    t_ref: float
    b_ref: float
    theta: np.ndarray
    cov: np.ndarray
    prior: Prior = field(default_factory=Prior)
    gpu_type: str = ""
    measured: int = 0  # multi-GPU steps folded in so far
    t_floor: float = 0.0  # one-GPU seconds no step goes below, however small its batch (0: none seen)

    def __post_init__(self) -> None:
        if not (self.t_ref > 0 and math.isfinite(self.t_ref)) or not (self.b_ref > 0 and math.isfinite(self.b_ref)):
            raise ValueError(f"{self.name}: one-GPU step time and batch must be positive, got "
                             f"{self.t_ref} s at batch {self.b_ref}")
        if not (self.t_floor >= 0 and math.isfinite(self.t_floor)):
            raise ValueError(f"{self.name}: the compute floor must be a non-negative time, got {self.t_floor}")
        if self.param_bytes < 0 or not math.isfinite(self.param_bytes):
            raise ValueError(f"{self.name}: param_bytes must be non-negative, got {self.param_bytes}")
        if np.shape(self.theta) != (NP,) or np.shape(self.cov) != (NP, NP):
            raise ValueError(f"{self.name}: θ has {NP} parameters ({', '.join(PARAMS)})")

    @property
    def fixed_share(self) -> float:
        return float(self.theta[0])

    @property
    def comm_efficiency(self) -> float:
        return float(np.exp(self.theta[1]))

    @property
    def overlap(self) -> float:
        return float(gamma_of(self.theta[2]))

    def compute_seconds(self, local_batch: np.ndarray | float) -> np.ndarray:
        f = self.fixed_share
        return np.maximum(self.t_ref * (f + (1.0 - f) * np.asarray(local_batch, dtype=float) / self.b_ref),
                          self.t_floor)

    @staticmethod
    def from_one_gpu(name: str, param_bytes: float, local_batch: np.ndarray, seconds: np.ndarray,
                     prior: Prior | None = None, gpu_type: str = "") -> "JobModel":
        """The job as its one-GPU inspection leaves it: the device's floor where its smallest batches
        show one (``compute_floor``), ``t_ref`` at the geometric-mean batch of the others from an
        affine fit, f from their batch dependence (or the prior), η and ρ from the prior."""
        prior = prior or Prior()
        b = np.asarray(local_batch, dtype=float)
        t = np.asarray(seconds, dtype=float)
        if b.size == 0 or not (np.all(b > 0) and np.all(np.isfinite(t)) and np.all(t > 0)):
            raise ValueError(f"{name}: a job model needs at least one one-GPU step with a positive batch and time")
        knee, t_floor = compute_floor(b, t, prior.one_gpu_noise)
        above = b > knee
        b_line, t_line = b[above], t[above]
        b_ref = float(np.exp(np.mean(np.log(b_line))))
        if np.unique(b_line).size >= 2:
            alpha, beta = affine_fit(b_line, t_line)
            t_ref = alpha + beta * b_ref
        else:
            t_ref = float(np.exp(np.mean(np.log(t_line))))
        job = JobModel(name, float(param_bytes), float(t_ref), b_ref, np.array(prior.mean, dtype=float),
                       prior.cov.copy(), prior, gpu_type, t_floor=t_floor)
        return job.updated(Steps(b, np.zeros_like(b), t, np.full_like(b, np.nan)), count=False)

    def updated(self, steps: Steps, count: bool = True) -> "JobModel":
        """The posterior after measuring ``steps`` (regularised least squares from the current
        belief; one-GPU steps inform only f)."""
        if len(steps) == 0:
            return self
        theta, cov = map_fit(self, steps)
        return replace(self, theta=theta, cov=cov,
                       measured=self.measured + (int(np.count_nonzero(steps.distributed)) if count else 0))


def compute_floor(b: np.ndarray, t: np.ndarray, noise: float) -> tuple[float, float]:
    """(the largest batch on the device's floor, the floor's seconds) from one-GPU steps, or (0, 0).

    The batches split into the smaller ones, on the floor, and the larger ones, on a rising affine
    line (at least three batches: a line through two has no noise to judge by, and extrapolated far
    below them, their measurement noise alone looks like a floor); of the splits where every
    smaller batch's median step is slower than the line by more than ``FLOOR_SIGMAS × noise`` in
    log time (``noise``: the one-GPU
    measurement noise) and no larger batch ran faster than any of them (a floor is the least a step
    takes: steps that shrink as the batch grows are a job still warming up, not a device's floor),
    the one with the most batches on the floor counts. The floor is the median of their steps.
    Steps that stay on one line — a CPU's, or a GPU's at batches that fill it — give none."""
    batches = np.unique(b)
    median = np.array([np.median(t[b == x]) for x in batches])
    for on in range(batches.size - 3, 0, -1):  # batches[:on] on the floor, batches[on:] on the line
        alpha, beta = affine_fit(batches[on:], median[on:])
        if beta <= 0 or median[:on].max() > median[on:].min():
            continue
        if np.all(np.log(median[:on] / (alpha + beta * batches[:on])) > FLOOR_SIGMAS * noise):
            return float(batches[on - 1]), float(np.median(median[:on]))
    return 0.0, 0.0


def affine_fit(b: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """α, β ≥ 0 of t ≈ α + β·b by relative least squares (each step weighs the same)."""
    from scipy.optimize import nnls

    (alpha, beta), _ = nnls(np.c_[np.ones_like(b), b] / t[:, None], np.ones_like(t))
    if alpha + beta * b.min() <= 0:  # degenerate: fall back to a constant
        return float(np.exp(np.mean(np.log(t)))), 0.0
    return float(alpha), float(beta)


# ------------------------------------------------------------------------------ the step model

def overlapped(compute: np.ndarray | float, comm: np.ndarray | float, gamma: np.ndarray | float) -> np.ndarray:
    """(C^γ + S^γ)^(1/γ), as max · (1 + (min/max)^γ)^(1/γ) so a large γ cannot overflow."""
    c, s = np.asarray(compute, dtype=float), np.asarray(comm, dtype=float)
    hi, lo = np.maximum(c, s), np.minimum(c, s)
    ratio = np.divide(lo, hi, out=np.zeros(np.broadcast(hi, lo).shape), where=hi > 0)
    return hi * (1.0 + ratio**gamma) ** (1.0 / gamma)


def step_model(t_ref: np.ndarray | float, b_ref: np.ndarray | float, local_batch: np.ndarray | float,
               speed: np.ndarray | float, comm_base: np.ndarray | float, theta: np.ndarray,
               grad: bool = False, floor: np.ndarray | float = 0.0) -> tuple[np.ndarray, ...]:
    """log T (and, with ``grad``, ∂log T/∂θ of shape (N, NP), C, S, T and ∂log C/∂f) for N steps
    at once. ``theta`` is (NP,) or (N, NP); ``floor`` the job's ``t_floor`` (where it sets C, f
    does not move it). Computed as max · (1 + (min/max)^γ)^(1/γ) so a large γ cannot overflow;
    C > 0 for every positive local batch, so log T is finite."""
    th = np.asarray(theta, dtype=float)
    f, le, rho = (th[..., 0], th[..., 1], th[..., 2])
    gamma = gamma_of(rho)
    ratio_b = np.asarray(local_batch, dtype=float) / b_ref
    line = np.asarray(t_ref, dtype=float) * (f + (1.0 - f) * ratio_b) / speed
    floored = np.asarray(floor, dtype=float) / speed
    c = np.maximum(line, floored)
    s = np.exp(le) * np.asarray(comm_base, dtype=float)
    hi, lo = np.maximum(c, s), np.minimum(c, s)
    r = lo / hi
    rg = r**gamma
    log_t = np.log(hi) + np.log1p(rg) / gamma
    if not grad:
        return (log_t,)
    w_hi = 1.0 / (1.0 + rg)  # ∂log T/∂log(max part); the other part gets 1 − w_hi
    w_c = np.where(c >= s, w_hi, 1.0 - w_hi)
    w_s = 1.0 - w_c
    d_logc_df = np.where(line >= floored, (1.0 - ratio_b) / (f + (1.0 - f) * ratio_b), 0.0)
    log_c, log_s = np.log(c), np.log(np.maximum(s, 1e-300))
    d_dgamma = (w_c * log_c + np.where(s > 0, w_s * log_s, 0.0) - log_t) / gamma
    dgamma_drho = gamma / (np.log(2.0 - rho) * (2.0 - rho))  # = LN2 / ln²(2 − ρ) / (2 − ρ)
    g = np.stack(np.broadcast_arrays(w_c * d_logc_df, w_s, d_dgamma * dgamma_drho), axis=-1)
    return log_t, g, c, s, np.exp(log_t), d_logc_df


def map_fit(job: JobModel, steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    """Maximum a posteriori θ and its Laplace covariance given the job's current belief and new
    steps: Σ ((log T̂ − log t)/noise)² + Σ ((T̂ − C − comm)/(t · comm_noise))² + (θ − θ₀)ᵀ Σ₀⁻¹ (θ − θ₀).
    One-GPU steps inform only f (S = 0)."""
    prior_mean = job.theta
    root = np.linalg.cholesky(np.linalg.inv(job.cov)).T  # Σ₀⁻¹ = rootᵀ root
    noise = np.where(steps.distributed, job.prior.noise, job.prior.one_gpu_noise)
    comm_noise = job.prior.comm_noise
    y = np.log(steps.seconds)
    timed = np.isfinite(steps.comm_s) & steps.distributed
    scale = steps.seconds[timed] * comm_noise

    def residuals(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        log_t, g, c, _, t, dlogc_df = step_model(job.t_ref, job.b_ref, steps.local_batch, steps.speed,
                                                 steps.comm_base, theta, grad=True, floor=job.t_floor)
        res = [(log_t - y) / noise, root @ (theta - prior_mean)]
        jac = [g / noise[:, None], root]
        if timed.any():
            # exposed communication T − C: ∂(T − C)/∂θ = T ∂log T/∂θ − C ∂log C/∂θ (only f moves C)
            dlogc = np.zeros((int(timed.sum()), NP))
            dlogc[:, 0] = np.broadcast_to(dlogc_df, log_t.shape)[timed]
            d_exposed = t[timed, None] * g[timed] - c[timed, None] * dlogc
            res.insert(1, (t[timed] - c[timed] - steps.comm_s[timed]) / scale)
            jac.insert(1, d_exposed / scale[:, None])
        return np.concatenate(res), np.vstack(jac)

    theta, res, jac = levenberg_marquardt(residuals, prior_mean, THETA_LOWER, THETA_UPPER, iterations=40)
    start = _comm_start(job, steps, prior_mean)
    if start is not None:  # see _comm_start: keep whichever end is the better posterior
        other, res2, jac2 = levenberg_marquardt(residuals, start, THETA_LOWER, THETA_UPPER, iterations=40)
        if float(res2 @ res2) < float(res @ res):
            theta, jac = other, jac2
    hess = np.einsum("ni,nj->ij", jac, jac)
    cov = np.linalg.inv(hess)
    return theta, 0.5 * (cov + cov.T)


def _comm_start(job: JobModel, steps: Steps, theta: np.ndarray) -> np.ndarray | None:
    """A second starting point for the fit when the current belief leaves the distributed steps
    far slower than it predicts: log η at the median of what each such step needs (the S that
    makes (C^γ + S^γ)^(1/γ) its measured time, over the fabric's all-reduce time). Where the belief
    prices communication at nearly nothing, log T is flat in log η (∂log T/∂log η ≈ (S/C)^γ), and a
    local fit started there never reaches the η the measurements call for; None when the belief
    already explains them within twice the measurement noise."""
    dist = np.flatnonzero(steps.distributed & (steps.comm_base > 0))
    if dist.size == 0:
        return None
    d = steps.take(dist)
    log_t, = step_model(job.t_ref, job.b_ref, d.local_batch, d.speed, d.comm_base, theta, floor=job.t_floor)
    slower = np.log(d.seconds) - log_t
    if np.median(slower) <= 2.0 * job.prior.noise:
        return None
    gamma = gamma_of(theta[2])
    c = np.maximum(job.t_ref * (theta[0] + (1.0 - theta[0]) * d.local_batch / job.b_ref), job.t_floor) / d.speed
    hidden = np.minimum(c / d.seconds, 1.0 - 1e-9) ** gamma  # (C/T)^γ, < 1 where the step took longer than C
    need = d.seconds * np.maximum(1.0 - hidden, 1e-300) ** (1.0 / gamma)  # (T^γ − C^γ)^(1/γ), overflow-free
    start = theta.copy()
    start[1] = float(np.median(np.log(need / d.comm_base)))
    return np.clip(start, THETA_LOWER, THETA_UPPER)
