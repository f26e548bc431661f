"""Per-GPU-type speed of every curve model: the ``type_speed[t, m]`` matrix policies and the
simulator multiply the measured curves by (ALGORITHMS.md §6, heterogeneity).

A curve P_m(k) was measured on one GPU type (the model's *reference*: V100 for CoDDL's curves, T4
for the Pollux-derived ``pollux-<app>@<batch>`` curves). On type t the model runs ``type_speed[t, m]``
× faster. Where the model is, or closely resembles, one of Gavel's 26 measured job types, that factor
is Gavel's one-GPU throughput ratio for the job type (Gavel measured K80, P100 and V100); otherwise it
is the ratio of the cluster's per-type ``GpuType.speed`` factors (V100 = 1.0), which is also how
types Gavel did not measure (T4, A100, …) are handled.

Mapping of curve models to Gavel job types (``GAVEL_MATCH``). Gavel's job types are families at
several batch sizes; a model takes the family's batch nearest (in log) to its own:

    CoDDL / Pollux model    Gavel family       basis
    Resnet50Model128        ResNet-50          same network → 'ResNet-50 (batch size 128)'
    TransformerModel256     Transformer        same network → 'Transformer (batch size 256)'
    TransformerModel4096    Transformer        same network; 4096 is beyond Gavel's batches → 256
    VggnetModel256          ResNet-50          proxy: an ImageNet convolutional network → 128
    GooglenetModel128       ResNet-50          proxy: an ImageNet convolutional network → 128
    Inception4Model256      ResNet-50          proxy: an ImageNet convolutional network → 128
    DeepspeechModel64       LM                 proxy: recurrent layers dominate → 'LM (batch size 80)'
    ChatbotModel256         LM                 proxy: a recurrent seq2seq network → 80
    DcganModel256           CycleGAN           proxy: a convolutional GAN
    AutoencoderModel51200   Recommendation     same kind: Gavel's job is an autoencoder recommender → 8192
    VideopredictionModel64  —                  GpuType.speed
    pollux-imagenet@B       ResNet-50          same network
    pollux-cifar10@B        ResNet-18          same network
    pollux-bert@B           Transformer        proxy: BERT is a Transformer encoder
    pollux-deepspeech2@B    LM                 proxy, as above
    pollux-ncf@B            Recommendation     proxy: a recommender
    pollux-yolov3@B         —                  GpuType.speed

Proxies are a judgement: a convolutional network gains far more from a V100's tensor cores than a
recurrent one, and a family's factor is closer to the truth than one cluster-wide number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from coddl.core.cluster import GpuType
from coddl.perf.profiles import GavelThroughputs, load_gavel_throughputs

GAVEL_REFERENCE = "V100"  # Gavel's ratios and GpuType.speed are both relative to a V100


@dataclass(frozen=True, slots=True)
class GavelMatch:
    family: str  # Gavel job-type family, e.g. "ResNet-50"
    basis: str  # "same network", "same kind" or "proxy" (see the module docstring)


GAVEL_MATCH: dict[str, GavelMatch] = {
    "Resnet50Model": GavelMatch("ResNet-50", "same network"),
    "TransformerModel": GavelMatch("Transformer", "same network"),
    "VggnetModel": GavelMatch("ResNet-50", "proxy"),
    "GooglenetModel": GavelMatch("ResNet-50", "proxy"),
    "Inception4Model": GavelMatch("ResNet-50", "proxy"),
    "DeepspeechModel": GavelMatch("LM", "proxy"),
    "ChatbotModel": GavelMatch("LM", "proxy"),
    "DcganModel": GavelMatch("CycleGAN", "proxy"),
    "AutoencoderModel": GavelMatch("Recommendation", "same kind"),
    "pollux-imagenet": GavelMatch("ResNet-50", "same network"),
    "pollux-cifar10": GavelMatch("ResNet-18", "same network"),
    "pollux-bert": GavelMatch("Transformer", "proxy"),
    "pollux-deepspeech2": GavelMatch("LM", "proxy"),
    "pollux-ncf": GavelMatch("Recommendation", "proxy"),
}

_CODDL_NAME = re.compile(r"^(?P<base>[A-Za-z0-9]*?Model)(?P<batch>\d+)$")


def reference_type(model: str) -> str:
    """The GPU type the model's curve was measured on."""
    return "T4" if model.startswith("pollux-") else GAVEL_REFERENCE


def _base_and_batch(model: str) -> tuple[str, int | None]:
    """``VggnetModel256`` → (``VggnetModel``, 256); ``pollux-cifar10@128`` → (``pollux-cifar10``, 128)."""
    if "@" in model:
        base, _, batch = model.partition("@")
        return base, int(batch) if batch.isdigit() else None
    m = _CODDL_NAME.match(model)
    return (m["base"], int(m["batch"])) if m else (model, None)


def gavel_job_type(model: str, gavel: GavelThroughputs) -> str | None:
    """The Gavel job type standing in for ``model`` (None: no match; use GpuType.speed)."""
    base, batch = _base_and_batch(model)
    match = GAVEL_MATCH.get(base)
    if match is None:
        return None
    family = [j for j in gavel.job_types if j == match.family or j.startswith(match.family + " (batch size ")]
    if not family:
        return None
    if batch is None or len(family) == 1:
        return family[0]

    def distance(job_type: str) -> float:
        b = re.search(r"batch size (\d+)", job_type)
        return abs(math.log(int(b[1]) / batch)) if b else math.inf

    return min(family, key=distance)


def type_speed_matrix(type_names: Sequence[str], gpu_types: Mapping[str, GpuType], models: Sequence[str],
                      gavel: GavelThroughputs | None = None) -> np.ndarray:
    """``type_speed[t, m]``: how many times faster model m runs on type t than on the type its
    curve was measured on (see the module docstring for where each factor comes from)."""
    gavel = gavel or load_gavel_throughputs()
    gavel_types = {t.upper(): t for t in gavel.gpu_types}

    def speed_vs_v100(gpu_type: str, ratios: dict[str, float]) -> float:
        if gpu_type.upper() in gavel_types and ratios:
            return ratios[gavel_types[gpu_type.upper()]]
        return gpu_types.get(gpu_type, GpuType(gpu_type)).speed

    out = np.ones((len(type_names), len(models)))
    for m, model in enumerate(models):
        job_type = gavel_job_type(model, gavel)
        ratios = gavel.speed_by_type(job_type, GAVEL_REFERENCE) if job_type else {}
        ref = speed_vs_v100(reference_type(model), ratios)
        for t, name in enumerate(type_names):
            out[t, m] = speed_vs_v100(name, ratios) / ref
    return out
