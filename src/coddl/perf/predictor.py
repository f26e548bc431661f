"""AITurbo's performance predictor (ALGORITHMS.md §5): how fast a job will train on any GPU and
CPU allocation, and how many steps it still needs, learnt online from the samples it reports.

Speed. Optimus's model (``perf/nnls.py``) is written for parameter servers; a data-parallel
all-reduce job has no servers, so its Optimus-style step time keeps the terms that still exist —
compute of the global batch split over w GPUs, a fixed per-step overhead, synchronisation that
grows with the workers and a cost per extra node — and multiplies them by the CPU term:

    t(w, n, x) = (θ0/w + θ1 + θ2·(w − 1) + θ3·(n − 1)) · eff(x),   eff(x) = a·e^(−b·x) + d

with x the CPU cores per GPU. ``eff`` is what ALGORITHMS.md calls the CPU efficiency; as a factor
on the step time it falls with more cores (input pipelines stop starving the GPU) to the floor d.
It is normalised to 1 at the reference share x_ref, so θ is the step time at that share. All
coefficients are costs and non-negative. For a fixed b the model is bilinear — linear in θ for
fixed (a, d) and in (a, d) for fixed θ — so it is fitted by alternating NNLS, with b found by a
grid and a golden-section refinement around the best grid point.

Remaining steps. When samples carry the training loss, Optimus's loss curve l(k) = 1/(β0·k + β1)
+ β2 (fitted by NNLS in ``perf/nnls.py``) says when the loss has made ``1 − tolerance`` of its
total drop; otherwise the job's declared remaining steps are used as they are.

Predictability. A job is predictable once the model, fitted on the samples it had, predicted its
last ``window`` new samples within ``threshold`` on average (relative error) — a one-step-ahead
test, so a model that merely fits its own points does not count; the average, not the worst, so
that one noisy measurement does not flip a job back and forth — and, when CPU cores are a
decision, once it has been measured at ``min_cpu_configs`` distinct core counts per GPU (eff needs
three to be identified).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from coddl.perf.nnls import LossCurve

_B_GRID = np.geomspace(0.02, 5.0, 10)


@dataclass(frozen=True, slots=True)
class CpuEfficiency:
    """eff(x) = a·e^(−b·x) + d: the step-time factor with x cores per GPU."""

    a: float
    b: float
    d: float

    def __call__(self, x: np.ndarray | float) -> np.ndarray:
        return self.a * np.exp(-self.b * np.asarray(x, dtype=float)) + self.d


@dataclass(frozen=True, slots=True)
class SpeedModel:
    """Steps/s of a data-parallel job on w GPUs over n nodes with x cores per GPU."""

    theta: tuple[float, float, float, float]
    eff: CpuEfficiency

    @staticmethod
    def features(w: np.ndarray, n: np.ndarray) -> np.ndarray:
        w, n = np.asarray(w, dtype=float), np.asarray(n, dtype=float)
        return np.c_[1.0 / w, np.ones_like(w), w - 1.0, n - 1.0]

    def step_time(self, w: np.ndarray | float, n: np.ndarray | float, x: np.ndarray | float) -> np.ndarray:
        w, n, x = np.broadcast_arrays(np.atleast_1d(w), np.atleast_1d(n), np.atleast_1d(x))
        return (self.features(w.ravel(), n.ravel()) @ np.array(self.theta)).reshape(w.shape) * self.eff(x)

    def speed(self, w: np.ndarray | float, n: np.ndarray | float, x: np.ndarray | float) -> np.ndarray:
        t = self.step_time(w, n, x)
        return np.divide(1.0, t, out=np.zeros_like(t), where=t > 0)

    @staticmethod
    def fit(w: np.ndarray, n: np.ndarray, x: np.ndarray, rate: np.ndarray, weight: np.ndarray | None = None,
            reference: float = 3.0, start: "SpeedModel | None" = None) -> "SpeedModel":
        """Minimise Σ (weight · relative error of the step time)². With fewer than two distinct
        core counts eff cannot be told apart from θ and is held at 1.

        b is searched on a log grid, then by golden section between the best grid point's
        neighbours. An online refit passes the previous model as ``start``: one more sample moves
        b little, so only a golden section within a factor of 2 of the previous b is searched,
        from the previous (a, d) — several times cheaper, which matters at a refit per sample."""
        t = 1.0 / np.asarray(rate, dtype=float)
        if t.size == 0:
            raise ValueError("fitting a speed model needs at least one sample")
        from scipy.optimize import minimize_scalar, nnls  # here: importing scipy costs every simulation 0.3 s
        x = np.asarray(x, dtype=float)
        s = (np.ones_like(t) if weight is None else np.asarray(weight, dtype=float)) / t
        phi = SpeedModel.features(w, n) * s[:, None]
        target = t * s
        if np.unique(x).size < 2:
            theta, _ = nnls(phi, target)
            return SpeedModel(_tuple4(theta), CpuEfficiency(0.0, 1.0, 1.0))

        warm = [0.0, 1.0]  # (a, d) of the previous b: neighbouring b converge from there in a few steps
        best: list = [math.inf, 1.0, np.zeros(4), 0.0, 1.0]  # sse, b, θ, a, d

        def alternate(b: float) -> float:
            decay = np.exp(-b * x)
            a, d = warm
            theta = np.zeros(4)
            sse = math.inf
            for _ in range(30):  # each step cannot increase the error; stop when it stalls
                theta, _ = nnls(phi * (a * decay + d)[:, None], target)
                g = phi @ theta
                a, d = _nnls2(g * decay, g, target)
                resid = g * (a * decay + d) - target
                last, sse = sse, float(resid @ resid)
                if sse >= last * (1.0 - 1e-7):
                    break
            if a + d > 0.0:
                warm[:] = a, d
            if sse < best[0]:
                best[:] = sse, b, theta, a, d
            return sse

        if start is not None and start.eff.a > 0.0:
            warm[:] = start.eff.a, start.eff.d
            lo, hi = math.log(start.eff.b / 2.0), math.log(start.eff.b * 2.0)
            xatol = 3e-2
        else:
            sse = [alternate(b) for b in _B_GRID]
            i = int(np.argmin(sse))
            lo, hi = math.log(_B_GRID[max(i - 1, 0)]), math.log(_B_GRID[min(i + 1, _B_GRID.size - 1)])
            xatol = 1e-3
        minimize_scalar(lambda lb: alternate(math.exp(lb)), bounds=(lo, hi), method="bounded",
                        options={"xatol": xatol})
        _, b, theta, a, d = best
        scale = a * math.exp(-b * reference) + d  # normalise eff(x_ref) = 1
        if scale <= 0.0:
            return SpeedModel(_tuple4(theta), CpuEfficiency(0.0, b, 1.0))
        return SpeedModel(_tuple4(theta * scale), CpuEfficiency(a / scale, b, d / scale))


def _tuple4(v: np.ndarray) -> tuple[float, float, float, float]:
    return (float(v[0]), float(v[1]), float(v[2]), float(v[3]))


def _nnls2(c1: np.ndarray, c2: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Two-column NNLS in closed form (the inner step runs thousands of times per simulation)."""
    g11, g12, g22 = float(c1 @ c1), float(c1 @ c2), float(c2 @ c2)
    r1, r2 = float(c1 @ y), float(c2 @ y)
    det = g11 * g22 - g12 * g12
    if det > 1e-12 * g11 * g22:
        a, d = (r1 * g22 - r2 * g12) / det, (r2 * g11 - r1 * g12) / det
        if a >= 0.0 and d >= 0.0:
            return a, d
    # one coefficient at zero: the other's 1-D least squares; ‖a·c − y‖² = ‖y‖² − r²/g for a = r/g
    only_a = max(r1 / g11, 0.0) if g11 > 0 else 0.0
    only_d = max(r2 / g22, 0.0) if g22 > 0 else 0.0
    return (only_a, 0.0) if only_a * r1 > only_d * r2 else (0.0, only_d)


@dataclass(frozen=True)
class PredictorParams:
    """``threshold``: largest mean relative one-step-ahead error that still counts as predicted;
    ``window``: over how many latest samples the error is averaged; ``min_samples``: measured
    samples needed at all; ``min_cpu_configs``: distinct core counts per GPU needed (1 when cores
    are not a decision); ``reference``: cores per GPU at which eff = 1 (the prior curve's share);
    ``prior_weight``: weight of each prior point relative to a measured sample; ``loss_tolerance``:
    the job counts as converged once its loss has made ``1 − loss_tolerance`` of its total drop;
    ``settled``: a sample the model already predicts within this relative error is recorded (and
    scored) without a refit — it would barely move the fit, and refitting at every sample of a job
    that keeps being preempted, resumed and probed is most of the policy's cost; ``history``: how
    many latest samples are kept and fitted (as many as the scheduler keeps per job)."""

    threshold: float = 0.10
    window: int = 3
    min_samples: int = 3
    min_cpu_configs: int = 3
    reference: float = 3.0
    prior_weight: float = 0.3
    loss_tolerance: float = 0.05
    settled: float = 0.10
    history: int = 64


@dataclass
class Observation:
    gpus: int
    nodes: int
    cores_per_gpu: float
    rate: float
    progress: float
    loss: float | None


@dataclass
class JobPredictor:
    """One job's online predictor. ``prior`` holds (w, n, x, rate) points the scheduler already
    believes (e.g. the estimator's curve at the reference share); measured samples refine it."""

    params: PredictorParams = field(default_factory=PredictorParams)
    prior: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    observations: list[Observation] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)
    model: SpeedModel | None = None
    version: int = 0  # bumped at every refit: callers cache what they derive from the model

    def __post_init__(self) -> None:
        self._core_counts: set[float] = set()
        self._loss: tuple[float, LossCurve] | None = None  # (progress of the last loss sample, fit)
        if self.prior is not None and self.model is None:
            self._refit()

    def observe(self, gpus: int, nodes: int, cpus: int, rate: float, progress: float,
                loss: float | None = None) -> None:
        """Add a measured sample: score the current model on it first, then refit."""
        if gpus < 1 or rate <= 0.0:
            return
        x = cpus / gpus
        error = math.inf
        if self.model is not None:
            predicted = float(self.model.speed(gpus, nodes, x)[0])
            error = abs(predicted - rate) / rate
            self.errors.append(error)
        self.observations.append(Observation(gpus, nodes, x, rate, progress, loss))
        if len(self.observations) > self.params.history:
            del self.observations[0]
        if error > self.params.settled:
            self._refit()
        self._core_counts.add(round(x, 2))

    def _refit(self) -> None:
        obs = self.observations
        w = np.array([o.gpus for o in obs], dtype=float)
        n = np.array([o.nodes for o in obs], dtype=float)
        x = np.array([o.cores_per_gpu for o in obs], dtype=float)
        r = np.array([o.rate for o in obs], dtype=float)
        wt = np.ones(len(obs))
        if self.prior is not None:
            pw, pn, px, pr = self.prior
            w, n, x, r = np.r_[w, pw], np.r_[n, pn], np.r_[x, px], np.r_[r, pr]
            wt = np.r_[wt, np.full(len(pw), self.params.prior_weight)]
        if w.size == 0:
            return
        self.model = SpeedModel.fit(w, n, x, r, wt, self.params.reference, start=self.model)
        self.version += 1

    @property
    def cpu_configs(self) -> int:
        return len(self._core_counts)

    @property
    def predictable(self) -> bool:
        p = self.params
        return (len(self.observations) >= p.min_samples and len(self.errors) >= p.window
                and sum(self.errors[-p.window:]) < p.threshold * p.window
                and self.cpu_configs >= p.min_cpu_configs)

    def speed(self, w: np.ndarray | float, n: np.ndarray | float, x: np.ndarray | float) -> np.ndarray:
        if self.model is None:
            raise ValueError("no model yet: the predictor has neither a prior nor a sample")
        return self.model.speed(w, n, x)

    def remaining_steps(self, declared: float) -> float:
        """Steps still to run: the loss curve's convergence point when losses were reported
        (never more than declared), else the declared remaining steps."""
        with_loss = [o for o in self.observations if o.loss is not None and o.loss > 0.0]
        if len({o.progress for o in with_loss}) < 3:
            return declared
        done = with_loss[-1].progress
        if self._loss is None or self._loss[0] != done:  # refit only when a new loss arrived
            self._loss = (done, LossCurve.fit(np.array([o.progress for o in with_loss]),
                                              np.array([o.loss for o in with_loss])))
        return min(declared, max(0.0, converged_steps(self._loss[1], self.params.loss_tolerance) - done))


def converged_steps(curve: LossCurve, tolerance: float) -> float:
    """Steps k at which l(k) − β2 = tolerance · (l(0) − β2), i.e. 1 − tolerance of the drop is made:
    1/(β0·k + β1) = tolerance/β1  ⇒  k = β1·(1/tolerance − 1)/β0."""
    if curve.beta0 <= 0.0:
        return math.inf
    return curve.beta1 * (1.0 / tolerance - 1.0) / curve.beta0
