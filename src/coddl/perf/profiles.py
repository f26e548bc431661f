"""Measured throughput profiles as typed data: Pollux's placement/scalability tables and Gavel's
per-GPU-type throughputs.

These are ground truth for the estimator (calibration and accuracy checks), so they are loaded as
they were measured, with no interpolation or fitting here.
"""

from __future__ import annotations

import ast
import csv
import json
from dataclasses import dataclass
from pathlib import Path

from coddl.perf.curves import data_path

POLLUX_DIR = "profiles/pollux"
GAVEL_SIMULATION = "profiles/gavel/simulation_throughputs.json"


@dataclass(frozen=True, slots=True)
class PolluxModel:
    """Which network a Pollux app trains and how many parameters it all-reduces.

    Parameter counts are published model sizes (what a one-GPU inspection reads off the model):
    BERT-base 110M (fine-tuned on SQuAD), ResNet-18 for CIFAR-10 11.2M, DeepSpeech2 38M (approximate:
    the profile does not record its configuration; deepspeech.pytorch's two convolutions and five
    bidirectional GRU layers of 800 units come to 38–41M), ResNet-50 25.6M,
    NeuMF on MovieLens-1M with 32 factors and 3 MLP layers 1.6M (6,040 users + 3,706 items × 160
    embedding columns + 43k MLP weights), YOLOv3 61.9M. Gradients are fp32 (4 bytes each).
    """

    architecture: str
    params: float

    @property
    def param_bytes(self) -> float:
        return 4.0 * self.params


POLLUX_MODELS: dict[str, PolluxModel] = {
    "bert": PolluxModel("BERT-base", 110e6),
    "cifar10": PolluxModel("ResNet-18", 11.2e6),
    "deepspeech2": PolluxModel("DeepSpeech2", 38e6),
    "imagenet": PolluxModel("ResNet-50", 25.6e6),
    "ncf": PolluxModel("NeuMF", 1.6e6),
    "yolov3": PolluxModel("YOLOv3", 61.9e6),
}
POLLUX_APPS = tuple(POLLUX_MODELS)
POLLUX_GPU = "T4"
POLLUX_GPUS_PER_NODE = 4


@dataclass(frozen=True, slots=True)
class PolluxRow:
    """One measured configuration. ``gpus_per_node`` is exact for placements.csv; scalability.csv
    gives only node and replica counts, so its replicas are spread as evenly as possible."""

    gpus_per_node: tuple[int, ...]
    local_bsz: int
    step_time: float
    sync_time: float
    source: str  # "placements" or "scalability"

    @property
    def num_gpus(self) -> int:
        return sum(self.gpus_per_node)

    @property
    def num_nodes(self) -> int:
        return len(self.gpus_per_node)

    @property
    def samples_per_s(self) -> float:
        return self.num_gpus * self.local_bsz / self.step_time


@dataclass(frozen=True, slots=True)
class PolluxApp:
    name: str
    model: PolluxModel
    rows: tuple[PolluxRow, ...]

    @property
    def single_gpu(self) -> tuple[PolluxRow, ...]:
        """What the one-GPU inspection of a new job sees."""
        return tuple(r for r in self.rows if r.num_gpus == 1)

    @property
    def multi_gpu(self) -> tuple[PolluxRow, ...]:
        return tuple(r for r in self.rows if r.num_gpus > 1)


def even_spread(num_nodes: int, num_replicas: int) -> tuple[int, ...]:
    base, extra = divmod(num_replicas, num_nodes)
    return tuple(base + (i < extra) for i in range(num_nodes))


def load_pollux_app(name: str, root: str | Path | None = None) -> PolluxApp:
    """``name`` is one of POLLUX_APPS; ``root`` a directory holding ``<name>/placements.csv`` and
    ``<name>/scalability.csv`` (default: the bundled copy)."""
    if name not in POLLUX_MODELS:
        raise KeyError(f"unknown Pollux app {name!r}; known apps: {', '.join(POLLUX_APPS)}")
    base = Path(root) if root else data_path(POLLUX_DIR)
    rows: list[PolluxRow] = []
    with open(base / name / "placements.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows.append(PolluxRow(tuple(int(c) for c in r["placement"]), int(r["local_bsz"]),
                                  float(r["step_time"]), float(r["sync_time"]), "placements"))
    with open(base / name / "scalability.csv", newline="") as f:
        for r in csv.DictReader(f):
            rows.append(PolluxRow(even_spread(int(r["num_nodes"]), int(r["num_replicas"])),
                                  int(r["local_bsz"]), float(r["step_time"]), float(r["sync_time"]),
                                  "scalability"))
    return PolluxApp(name, POLLUX_MODELS[name], tuple(rows))


@dataclass(frozen=True, slots=True)
class GavelThroughputs:
    """Steps/s of each Gavel job type running alone, by GPU type and GPU count.

    ``steps[(gpu_type, job_type, k)]``; GPU types upper-cased (``K80``, ``P100``, ``V100``); only
    consolidated placements (Gavel's ``*_unconsolidated`` tables are left out).
    """

    steps: dict[tuple[str, str, int], float]

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({t for t, _, _ in self.steps}))

    @property
    def job_types(self) -> tuple[str, ...]:
        return tuple(sorted({j for _, j, _ in self.steps}))

    def speed_by_type(self, job_type: str, reference: str = "V100") -> dict[str, float]:
        """One-GPU speed of each GPU type relative to ``reference`` for this job type: the
        per-model compute speed factor of ALGORITHMS.md §6."""
        ref = self.steps[(reference, job_type, 1)]
        return {t: self.steps[(t, job_type, 1)] / ref for t in self.gpu_types if (t, job_type, 1) in self.steps}


def load_gavel_throughputs(path: str | Path | None = None) -> GavelThroughputs:
    raw = json.loads(Path(path or data_path(GAVEL_SIMULATION)).read_text())
    steps: dict[tuple[str, str, int], float] = {}
    for gpu_type, table in raw.items():
        if gpu_type.endswith("_unconsolidated"):
            continue
        for key, runs in table.items():
            job_type, k = ast.literal_eval(key)
            steps[(gpu_type.upper(), job_type, int(k))] = float(runs["null"])
    return GavelThroughputs(steps)
