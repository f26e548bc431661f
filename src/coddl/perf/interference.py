"""Co-location interference: how much of its solo speed a job keeps when it shares a GPU with another.

Gavel's bundled throughput tables (``profiles/gavel/simulation_throughputs.json``, MIT) measured, for
26 job types on K80, P100 and V100, each job's steps/s alone and beside every other job type on the
same GPU. The retained fraction ``f(a|b) = steps/s of a beside b ÷ steps/s of a alone`` ranges from
about 0.1 (two bandwidth-bound jobs) to 1.0 (a small job beside an idle-heavy one); 0 marks pairs
that cannot share a GPU at all (together they do not fit its memory).

A measured pair is used as measured. For a pair nobody measured, the model is the one physical
picture the tables support: job ``a`` has a *sensitivity* to contention and job ``b`` exerts a
*pressure*, one number each per GPU type, and

    f(a|b) = 1 / (1 + exp(c + s_a + p_b))

— the log-odds of the slowdown are additive (fitted by ridge-regularised least squares on the
measured pairs, so a job type with few measurements stays near the average). A job type never
measured at all gets s = p = 0: the average job on that GPU type. ``leave_one_out`` measures all
three: a held-out pair (the model), a held-out job type (the fallback) and, as the baseline, the
median of the measured pairs.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from coddl.perf.curves import data_path
from coddl.perf.profiles import GAVEL_SIMULATION

CAP = 0.99  # fractions are read within [1 - CAP, CAP] ("no measurable slowdown" / "almost stopped"): finite log-odds
Source = Literal["measured", "model", "fallback"]


@dataclass(frozen=True)
class PairMeasurements:
    """``retained[a, b]`` = f(a|b) on one GPU type; NaN where the pair was not measured, 0 where the
    two jobs cannot share a GPU."""

    gpu_type: str
    job_types: tuple[str, ...]
    retained: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.job_types)
        if self.retained.shape != (n, n):
            raise ValueError(f"retained must be {n}×{n}, got {self.retained.shape}")
        r = self.retained[~np.isnan(self.retained)]
        if ((r < 0) | (r > 1.0 + 1e-9)).any():
            raise ValueError("a retained fraction must lie in [0, 1]")

    @property
    def shareable(self) -> np.ndarray:
        """Pairs measured running together (excludes unmeasured and memory-infeasible pairs)."""
        return ~np.isnan(self.retained) & (self.retained > 0)


@dataclass(frozen=True)
class Retained:
    fraction: float  # of the job's solo speed, in [0, 1]
    source: Source


@dataclass(frozen=True)
class InterferenceModel:
    measured: PairMeasurements
    sensitivity: np.ndarray  # s_a, one per job type
    pressure: np.ndarray  # p_b, one per job type
    offset: float  # c: the log-odds of the average pair

    @classmethod
    def fit(cls, measured: PairMeasurements, ridge: float = 1e-2) -> "InterferenceModel":
        """Least squares on log((1 - f)/f) = c + s_a + p_b over the shareable pairs; ``ridge``
        pulls s and p (not c) towards 0, which makes them identifiable and keeps a job type seen
        in few pairs close to the average."""
        n = len(measured.job_types)
        a, b = np.nonzero(measured.shareable)
        if a.size == 0:
            return cls(measured, np.zeros(n), np.zeros(n), _logodds(np.array([CAP]))[0])
        y = _logodds(np.clip(measured.retained[a, b], 1.0 - CAP, CAP))
        x = np.zeros((a.size, 2 * n + 1))
        x[np.arange(a.size), a] = 1.0
        x[np.arange(a.size), n + b] = 1.0
        x[:, -1] = 1.0
        reg = ridge * np.eye(2 * n + 1)
        reg[-1, -1] = 0.0
        w = np.linalg.solve(x.T @ x + reg, x.T @ y)
        return cls(measured, w[:n], w[n:2 * n], float(w[-1]))

    def _index(self, job_type: str) -> int | None:
        try:
            return self.measured.job_types.index(job_type)
        except ValueError:
            return None

    def retained(self, job: str, beside: str) -> Retained:
        """The fraction of ``job``'s solo speed it keeps beside ``beside`` on this GPU type."""
        i, j = self._index(job), self._index(beside)
        if i is not None and j is not None and not np.isnan(self.measured.retained[i, j]):
            return Retained(float(self.measured.retained[i, j]), "measured")
        s = self.sensitivity[i] if i is not None else 0.0
        p = self.pressure[j] if j is not None else 0.0
        source: Source = "model" if i is not None and j is not None else "fallback"
        return Retained(float(1.0 / (1.0 + np.exp(self.offset + s + p))), source)

    def predict(self, job: int, beside: int) -> float:
        """The model's value for a pair of known job types, measured or not (for validation)."""
        return float(1.0 / (1.0 + np.exp(self.offset + self.sensitivity[job] + self.pressure[beside])))


def _logodds(f: np.ndarray) -> np.ndarray:
    return np.log((1.0 - f) / f)


def load_gavel_pairs(gpu_type: str, path: str | Path | None = None) -> PairMeasurements:
    """One GPU type's one-GPU co-location table from Gavel's throughputs (``k80``, ``p100``,
    ``v100``; case-insensitive)."""
    raw = json.loads(Path(path or data_path(GAVEL_SIMULATION)).read_text())
    key = gpu_type.lower()
    if key not in raw or key.endswith("_unconsolidated"):
        valid = ", ".join(k for k in raw if not k.endswith("_unconsolidated"))
        raise ValueError(f"no co-location measurements for GPU type {gpu_type!r}; measured: {valid}")
    table = raw[key]
    one_gpu = {}
    for k, runs in table.items():
        job_type, gpus = ast.literal_eval(k)
        if int(gpus) == 1:
            one_gpu[job_type] = runs
    types = tuple(sorted(one_gpu))
    index = {t: i for i, t in enumerate(types)}
    f = np.full((len(types), len(types)), np.nan)
    for job_type, runs in one_gpu.items():
        alone = float(runs["null"])
        for other, pair in runs.items():
            if other == "null":
                continue
            other_type, other_gpus = ast.literal_eval(other)
            if int(other_gpus) != 1 or other_type not in index:
                continue
            together = float(pair[0])
            f[index[job_type], index[other_type]] = 0.0 if together <= 0 or alone <= 0 else min(together / alone, 1.0)
    return PairMeasurements(gpu_type.upper(), types, f)


@dataclass(frozen=True)
class Accuracy:
    """Absolute percentage errors of the retained fraction, held out."""

    gpu_type: str
    pairs: int  # measured shareable ordered pairs
    pair_mape: float  # each unordered pair held out (both directions), predicted by the model
    pair_p90: float
    pair_worst: float
    job_mape: float  # each job type held out entirely, predicted by the fallback (s = p = 0)
    job_worst: float
    baseline_mape: float  # the median of the other measured pairs, per held-out pair

    def as_dict(self) -> dict[str, float | int | str]:
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def leave_one_out(measured: PairMeasurements, ridge: float = 1e-2) -> Accuracy:
    ok = measured.shareable
    f = measured.retained
    n = len(measured.job_types)
    pair_err, base_err, job_err = [], [], []
    for a in range(n):
        for b in range(a, n):
            if not (ok[a, b] or ok[b, a]):
                continue
            keep = ok.copy()
            keep[a, b] = keep[b, a] = False
            model = InterferenceModel.fit(_masked(measured, keep), ridge)
            median = float(np.median(f[keep]))
            for x, y in {(a, b), (b, a)}:
                if ok[x, y]:
                    pair_err.append(abs(model.predict(x, y) - f[x, y]) / f[x, y])
                    base_err.append(abs(median - f[x, y]) / f[x, y])
    for a in range(n):
        keep = ok.copy()
        keep[a, :] = keep[:, a] = False
        model = InterferenceModel.fit(_masked(measured, keep), ridge)
        for x, y in {(a, b) for b in range(n)} | {(b, a) for b in range(n)}:
            if ok[x, y]:
                s = 0.0 if x == a else model.sensitivity[x]
                p = 0.0 if y == a else model.pressure[y]
                guess = 1.0 / (1.0 + np.exp(model.offset + s + p))
                job_err.append(abs(guess - f[x, y]) / f[x, y])
    pe, be, je = (100 * np.asarray(e) for e in (pair_err, base_err, job_err))
    return Accuracy(measured.gpu_type, int(ok.sum()), float(pe.mean()), float(np.percentile(pe, 90)),
                    float(pe.max()), float(je.mean()), float(je.max()), float(be.mean()))


def _masked(measured: PairMeasurements, keep: np.ndarray) -> PairMeasurements:
    return PairMeasurements(measured.gpu_type, measured.job_types, np.where(keep, measured.retained, np.nan))


MEASURED_GPUS = ("K80", "P100", "V100")  # the GPU types Gavel measured co-location on


@dataclass(frozen=True)
class ColocationTable:
    """``retained[t, a, b]``: f(a|b) for curve models a and b on the cluster's GPU type t, ready for
    the packer (``placement/sharing.py``). A cluster type Gavel did not measure uses the V100's
    table (its reference type); a model with no Gavel job type (``heterogeneity.GAVEL_MATCH``)
    gets the fallback (the average job on that GPU type); ``source`` says which for each entry.

    Gavel's 0 (the two jobs, in the configuration Gavel ran, did not fit one GPU's memory) is kept
    apart in ``clash``, and ``retained`` holds the model's value there: jobs that declared a
    fraction of a GPU have said they fit, and run at the model's speed; jobs that did not are
    not put together (``SharedGpus``)."""

    type_names: tuple[str, ...]
    models: tuple[str, ...]
    retained: np.ndarray
    clash: np.ndarray  # bool, same shape
    source: np.ndarray  # same shape, "measured" / "model" / "fallback"
    fallback: np.ndarray  # per type: what an unknown pair keeps (s = p = 0)

    def __call__(self, a: int, b: int, t: int) -> float:
        k = self.retained.shape[1]
        return float(self.retained[t, a, b]) if a < k and b < k else float(self.fallback[t])

    def clashes(self, a: int, b: int, t: int) -> bool:
        k = self.retained.shape[1]
        return bool(self.clash[t, a, b]) if a < k and b < k else False

    @staticmethod
    def build(type_names: tuple[str, ...] | list[str], models: tuple[str, ...] | list[str]) -> "ColocationTable":
        from coddl.perf.heterogeneity import gavel_job_type
        from coddl.perf.profiles import load_gavel_throughputs

        gavel = load_gavel_throughputs()
        kinds = [gavel_job_type(m, gavel) or "" for m in models]
        k, nt = len(models), len(type_names)
        out, clash = np.ones((nt, k, k)), np.zeros((nt, k, k), dtype=bool)
        src = np.full((nt, k, k), "fallback", dtype=object)
        fallback = np.ones(nt)
        fitted: dict[str, InterferenceModel] = {}
        for t, name in enumerate(type_names):
            key = name.upper() if name.upper() in MEASURED_GPUS else "V100"
            if key not in fitted:
                fitted[key] = InterferenceModel.fit(load_gavel_pairs(key))
            model = fitted[key]
            fallback[t] = model.retained("", "").fraction
            index = {j: i for i, j in enumerate(model.measured.job_types)}
            for a in range(k):
                for b in range(k):
                    r = model.retained(kinds[a], kinds[b])
                    out[t, a, b], src[t, a, b] = r.fraction, r.source
                    if r.source == "measured" and r.fraction == 0.0:
                        clash[t, a, b] = True
                        out[t, a, b] = model.predict(index[kinds[a]], index[kinds[b]])
        clash |= clash.transpose(0, 2, 1)
        return ColocationTable(tuple(type_names), tuple(models), out, clash, src, fallback)
