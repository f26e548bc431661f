"""Models named by other traces, made replayable with coddl's curves.

Traces from other schedulers name models coddl has no measured curve for: Tiresias (``vgg19``),
Gavel (``ResNet-50 (batch size 64)``) and Pollux (``cifar10`` at a global batch). Rather than
refusing them, coddl
* maps Tiresias and Gavel model names to the closest CoDDL-measured model by architecture family
  (``FAMILY``), and converts Gavel's step counts to a duration with Gavel's own V100 throughputs;
* builds a curve per (Pollux app, global batch) with the analytic estimator on Pollux's T4
  testbed: the fabric calibrated on all six apps (``POLLUX_FABRIC``, also in
  examples/clusters/pollux-t4.yaml), each app's parameters fitted to all its measured rows, and
  takes the steps to converge from the app's ``validation-<batch>.csv`` — the work Pollux's
  own simulator replays.
"""

from __future__ import annotations

import csv
from functools import lru_cache

import numpy as np

from coddl.perf.curves import CurveTable, data_path
from coddl.perf.fabric import Fabric

# architecture family (lower-case substring) → CoDDL-measured model; first match wins
FAMILY: tuple[tuple[str, str], ...] = (
    ("vgg", "VggnetModel256"), ("alexnet", "VggnetModel256"), ("googlenet", "GooglenetModel128"),
    ("inception", "Inception4Model256"), ("resnet", "Resnet50Model128"), ("deepspeech", "DeepspeechModel64"),
    ("transformer", "TransformerModel256"), ("bert", "TransformerModel256"), ("gan", "DcganModel256"),
    ("lm", "ChatbotModel256"), ("lstm", "ChatbotModel256"), ("a3c", "ChatbotModel256"),
    ("recommendation", "AutoencoderModel51200"), ("ncf", "AutoencoderModel51200"),
    ("video", "VideopredictionModel64"),
)

POLLUX_APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
# Pollux's testbed as `coddl estimate calibrate` fits it on all six apps (pollux-t4.csv)
POLLUX_FABRIC = Fabric(intra_gbps=2.54, inter_gbps=0.661, intra_latency_us=324.0, inter_latency_us=324.0,
                       algorithm="ring", two_node_factor=1.52)
POLLUX_GPUS_PER_NODE = 4
POLLUX_KMAX = 64


def family_model(name: str) -> str | None:
    low = name.lower()
    for key, model in FAMILY:
        if key in low:
            return model
    return None


def pollux_model_name(app: str, batch: int) -> str:
    return f"pollux-{app}@{batch}"


def parse_pollux_model(name: str) -> tuple[str, int] | None:
    """(app, batch) of a name made by ``pollux_model_name`` (as exported traces carry it)."""
    if name.startswith("pollux-") and "@" in name:
        app, _, batch = name[len("pollux-"):].partition("@")
        if app in POLLUX_APPS and batch.isdigit():
            return app, int(batch)
    return None


@lru_cache(maxsize=None)
def pollux_steps(app: str, batch: int) -> float:
    """Steps to converge at global batch ``batch``: the last row of the nearest measured
    ``validation-<batch>.csv`` (scaled by samples when the batch was not measured)."""
    root = data_path(f"profiles/pollux/{app}")
    sizes = sorted(int(p.stem.split("-")[1]) for p in root.glob("validation-*.csv"))
    near = min(sizes, key=lambda b: abs(np.log(b / batch)))
    with open(root / f"validation-{near}.csv", newline="") as f:
        last = list(csv.DictReader(f))[-1]
    return float(last["iteration"]) * near / batch


@lru_cache(maxsize=None)
def pollux_job(app: str):
    """The app as the estimator knows it on Pollux's testbed: its one-GPU profile, corrected with
    every multi-GPU row Pollux measured."""
    from coddl.perf.calibrate import default_prior, job_steps, one_gpu_model
    from coddl.perf.table import read_profiles

    rows = read_profiles(data_path("profiles/pollux-t4.csv")).where(model=app)
    return one_gpu_model(rows, default_prior()).updated(job_steps(rows.take(rows.gpus > 1), POLLUX_FABRIC))


@lru_cache(maxsize=None)
def pollux_curve(app: str, batch: int) -> dict[int, float]:
    """Steps/s on k consolidated T4 GPUs at global batch ``batch`` (k = 1 … 64), from the
    estimator; the curve stops where adding GPUs stops helping."""
    from coddl.perf.estimator import Estimator

    rate = Estimator(POLLUX_FABRIC).curve(pollux_job(app), POLLUX_KMAX, POLLUX_GPUS_PER_NODE, global_batch=batch)
    useful = int(np.argmax(rate))  # beyond the fastest k, more GPUs only slow it down
    return {k: float(rate[k]) for k in range(1, max(useful, 1) + 1)}


@lru_cache(maxsize=None)
def gavel_seconds_per_step(job_type: str, gpus: int) -> float | None:
    """Gavel's measured V100 time per step of ``job_type`` on ``gpus`` GPUs (nearest measured k)."""
    from coddl.perf.profiles import load_gavel_throughputs

    table = load_gavel_throughputs().steps
    ks = sorted(k for (t, j, k) in table if t == "V100" and j == job_type)
    if not ks:
        return None
    k = min(ks, key=lambda x: abs(x - gpus))
    return 1.0 / table[("V100", job_type, k)]


def with_trace_models(curves: CurveTable, models: set[tuple[str, int]]) -> CurveTable:
    """``curves`` plus a curve for every (Pollux app, batch) a trace uses."""
    extra = {pollux_model_name(a, b): pollux_curve(a, b) for a, b in sorted(models)
             if pollux_model_name(a, b) not in curves.index}
    if not extra:
        return curves
    base = {n: {k: float(curves.rate[i, k]) for k in range(1, int(curves.max_gpus[i]) + 1)}
            for i, n in enumerate(curves.names)}
    return CurveTable.from_points(base | extra)
