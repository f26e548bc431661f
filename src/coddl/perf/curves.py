"""Throughput curves P_m(k): steps/s of model m on k GPUs at its fixed global batch.

Stored as one dense array ``rate[m, k]`` (k = 0 … kmax, P(0) = 0, flat past the model's largest
measured k) so that the simulator and the policies evaluate thousands of jobs in one numpy gather.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

CODDL_CURVES = "profiles/coddl-curves.csv"

# The CoDDL simulator's model pool, in the order of DATA.md (its first nine form the pool).
CODDL_MODEL_ORDER = (
    "VggnetModel256", "GooglenetModel128", "Inception4Model256", "Resnet50Model128", "DeepspeechModel64",
    "TransformerModel256", "DcganModel256", "ChatbotModel256", "VideopredictionModel64",
    "AutoencoderModel51200", "TransformerModel4096",
)
CODDL_POOL = CODDL_MODEL_ORDER[:9]


@dataclass
class CurveTable:
    """Dense per-model throughput curves.

    ``rate[m, k]`` steps/s on k GPUs; ``max_gpus[m]`` the model's largest measured (useful) k.
    """

    names: list[str]
    rate: np.ndarray
    max_gpus: np.ndarray
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {n: i for i, n in enumerate(self.names)}

    @property
    def kmax(self) -> int:
        return self.rate.shape[1] - 1

    def model_index(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise KeyError(f"unknown model {name!r}; known models: {', '.join(self.names)}") from None

    def throughput(self, model: str | int, k: int) -> float:
        m = model if isinstance(model, int) else self.model_index(model)
        return float(self.rate[m, min(k, self.kmax)])

    def extended(self, kmax: int) -> "CurveTable":
        """The same curves padded flat to ``kmax`` GPUs (a cluster larger than any profile)."""
        if kmax <= self.kmax:
            return self
        pad = np.repeat(self.rate[:, -1:], kmax - self.kmax, axis=1)
        return CurveTable(list(self.names), np.hstack([self.rate, pad]), self.max_gpus.copy())

    def add_model(self, name: str, points: dict[int, float]) -> int:
        """Append one model's curve from {k: steps/s} (interpolated as in ``from_points``) and
        return its index. The real system uses it for models no profile covers. Add models before
        building a Scheduler on this table: the scheduler sizes its per-model arrays once."""
        if name in self.index:
            raise ValueError(f"model {name!r} already has a curve")
        kmax = max(self.kmax, max(points))
        rate = self.rate if kmax == self.kmax else np.hstack(
            [self.rate, np.repeat(self.rate[:, -1:], kmax - self.kmax, axis=1)])
        ks = np.array(sorted(points))
        row = np.interp(np.arange(kmax + 1), np.r_[0, ks], np.r_[0.0, [points[k] for k in ks]])
        self.rate = np.vstack([rate, row])
        self.max_gpus = np.r_[self.max_gpus, ks[-1]].astype(np.int64)
        self.names.append(name)
        self.index[name] = len(self.names) - 1
        return self.index[name]

    @staticmethod
    def from_points(points: dict[str, dict[int, float]], kmax: int | None = None) -> "CurveTable":
        """Build from {model: {k: steps/s}}; missing k between measured points are linearly
        interpolated, beyond the largest the curve is flat."""
        names = list(points)
        top = max(max(p) for p in points.values())
        kmax = max(kmax or 0, top)
        rate = np.zeros((len(names), kmax + 1))
        maxg = np.zeros(len(names), dtype=np.int64)
        for i, n in enumerate(names):
            ks = np.array(sorted(points[n]))
            vs = np.array([points[n][k] for k in ks])
            rate[i] = np.interp(np.arange(kmax + 1), np.r_[0, ks], np.r_[0.0, vs])
            maxg[i] = ks[-1]
        return CurveTable(names, rate, maxg)


def data_path(rel: str) -> Path:
    return Path(str(resources.files("coddl") / "data" / rel))


def load_coddl_curves(path: str | Path | None = None) -> CurveTable:
    """The 11 models measured by the CoDDL authors (``profiles/coddl-curves.csv``)."""
    p = Path(path) if path else data_path(CODDL_CURVES)
    points: dict[str, dict[int, float]] = {}
    with open(p, newline="") as f:
        for row in csv.DictReader(f):
            points.setdefault(row["model"], {})[int(row["num_gpus"])] = 1.0 / float(row["time_per_iter_s"])
    ordered = {n: points[n] for n in CODDL_MODEL_ORDER if n in points}
    ordered.update({n: v for n, v in points.items() if n not in ordered})
    return CurveTable.from_points(ordered)
