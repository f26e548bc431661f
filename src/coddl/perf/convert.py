"""Converters from published measurement sets into coddl's profile format (``perf/table.py``).

The bundled ``data/profiles/pollux-t4.csv`` and ``data/profiles/gavel.csv`` are written by
``write_bundled()`` from the original files next to them; the conversion is documented here so
anyone can check it.

Pollux (Qiao et al., OSDI'21; ``pollux/<app>/placements.csv`` and ``scalability.csv``): T4 GPUs,
4 per node (AWS g4dn.12xlarge). ``placement`` digits are GPUs per node (``1112``: 4 nodes); the
scalability runs give only node and replica counts, so their replicas are taken to be spread
evenly. A row's ``step_time`` is one step at ``local_bsz`` per GPU; its ``sync_time`` is the
time the step spent in the gradient all-reduce (``comm_s``).

Gavel (Narayanan et al., OSDI'20; ``gavel/simulation_throughputs.json``): steps/s of 4 job
families at several batch sizes on K80, P100 and V100, on k ∈ {1, 2, 4, 8} GPUs, "consolidated"
(read as: all k on one server) and "unconsolidated" (one GPU per server). For k > 1 the published
figure counts the steps of all workers (it is ~k× the one-GPU figure for jobs that scale), so one
step of the job is k of Gavel's: the job's steps/s = the published figure ÷ k, with the stated batch per GPU. Each GPU
type is its own testbed (``gavel-k80``, ``gavel-p100``, ``gavel-v100``); the one-GPU rows of the
unconsolidated table repeat the consolidated ones and are not duplicated; zero entries (runs that
did not fit) are dropped; the families that were only measured on one GPU are kept as one-GPU rows.

Gradient bytes are 4 × published parameter counts (fp32 gradients). Pollux: BERT-base 110M
(fine-tuned on SQuAD), ResNet-18 for CIFAR-10 11.2M, DeepSpeech2 38M (approximate: the profile does
not record its configuration; deepspeech.pytorch's two convolutions and five bidirectional GRU
layers of 800 units come to 38–41M), ResNet-50 25.6M, NeuMF on MovieLens-1M with 32 factors and 3
MLP layers 1.6M, YOLOv3 61.9M. Gavel: ResNet-18 (CIFAR-10) 11.2M, ResNet-50 25.6M; approximate
where the configuration is not recorded: its Transformer (Multi30k translation, 6+6 layers of 512)
~50M, its LM (PyTorch's word-level LSTM example on Wikitext-2, 2 × 200 units, 33k-word vocabulary)
~14M; the one-GPU-only families (Recommendation, A3C, CycleGAN) are rough.
"""

from __future__ import annotations

import ast
import csv
import json
import re
from pathlib import Path

from coddl.perf.curves import data_path
from coddl.perf.table import ProfileTable, even_spread, write_profiles

POLLUX_PARAMS = {  # parameters per app (see above)
    "bert": 110e6, "cifar10": 11.2e6, "deepspeech2": 38e6, "imagenet": 25.6e6, "ncf": 1.6e6, "yolov3": 61.9e6,
}
POLLUX_CLUSTER = "pollux-t4"
GAVEL_PARAMS = {"ResNet-18": 11.2e6, "ResNet-50": 25.6e6, "Transformer": 50e6, "LM": 14e6,
                "Recommendation": 20e6, "A3C": 1e6, "CycleGAN": 28e6}
_GAVEL_TYPE = re.compile(r"^(?P<family>.+?)(?: \(batch size (?P<batch>\d+)\))?$")


def pollux_table(root: str | Path | None = None) -> ProfileTable:
    """Every app's placements.csv and scalability.csv rows (``root``: default the bundled copy)."""
    base = Path(root) if root else data_path("profiles/pollux")
    rows = []
    for app, params in POLLUX_PARAMS.items():
        common = {"cluster": POLLUX_CLUSTER, "model": app, "param_bytes": 4.0 * params, "gpu_type": "T4"}
        with open(base / app / "placements.csv", newline="") as f:
            for r in csv.DictReader(f):
                shape = tuple(int(c) for c in r["placement"])
                rows.append(common | {"gpus": sum(shape), "placement": shape, "local_batch": float(r["local_bsz"]),
                                      "steps_per_s": 1.0 / float(r["step_time"]),
                                      "comm_s": float(r["sync_time"])})
        with open(base / app / "scalability.csv", newline="") as f:
            for r in csv.DictReader(f):
                k = int(r["num_replicas"])
                rows.append(common | {"gpus": k, "placement": even_spread(k, int(r["num_nodes"])),
                                      "local_batch": float(r["local_bsz"]),
                                      "steps_per_s": 1.0 / float(r["step_time"]),
                                      "comm_s": float(r["sync_time"])})
    return ProfileTable.build(rows, "pollux")


def gavel_table(path: str | Path | None = None) -> ProfileTable:
    raw = json.loads(Path(path or data_path("profiles/gavel/simulation_throughputs.json")).read_text())
    rows = []
    for table_name, table in raw.items():
        gpu_type, _, spread = table_name.partition("_")
        for key, runs in table.items():
            job_type, k = ast.literal_eval(key)
            k = int(k)
            steps = float(runs["null"])
            if steps <= 0.0 or (spread and k == 1):
                continue
            m = _GAVEL_TYPE.match(job_type)
            family, batch = m["family"], int(m["batch"] or 1)
            shape = (1,) * k if spread else (k,)
            rows.append({"cluster": f"gavel-{gpu_type.lower()}", "model": family,
                         "param_bytes": 4.0 * GAVEL_PARAMS[family], "gpu_type": gpu_type.upper(), "gpus": k,
                         "placement": shape, "local_batch": float(batch), "steps_per_s": steps / k})
    rows.sort(key=lambda r: (r["cluster"], r["model"], r["gpus"], len(r["placement"]), r["local_batch"]))
    return ProfileTable.build(rows, "gavel")


def write_bundled(out_dir: str | Path | None = None) -> dict[str, int]:
    """(Re)write the bundled converted tables; returns rows written per file."""
    out = Path(out_dir) if out_dir else data_path("profiles")
    return {"pollux-t4.csv": write_profiles(pollux_table(), out / "pollux-t4.csv"),
            "gavel.csv": write_profiles(gavel_table(), out / "gavel.csv")}
