"""Training script the end-to-end tests run as their workers (a script-path entry).

A small MLP keeps steps cheap; STEP_SLEEP slows them down so that a test can act mid-training, and
START_SLEEP stretches a worker's start-up. DEVICE_S_PER_SAMPLE ("fast=0.001,slow=0.003") emulates
devices of different speeds: a worker whose CODDL_DEVICE_TYPE (or "slotN", its CODDL_SLOT) is listed
computes that long per sample of its local batch, as a slower GPU would (the balance test's
heterogeneous cluster). Every
applied step appends one JSON line to $CODDL_JOB_DIR/steps-<worker>.jsonl with the samples this rank
trained on, and every worker records the step it started from, so that the tests can check from the
outside that no sample was lost or repeated and that a restart resumed from the checkpoint.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from torch import nn

import coddl.elastic as elastic

SAMPLES = int(os.environ.get("SAMPLES", "480"))


def main() -> None:
    torch.set_num_threads(1)
    steps = int(os.environ["STEPS"])
    global_batch = int(os.environ["GLOBAL_BATCH"])
    sleep = float(os.environ.get("STEP_SLEEP", "0"))
    per_sample = dict((kv.split("=")[0], float(kv.split("=")[1]))
                      for kv in os.environ.get("DEVICE_S_PER_SAMPLE", "").split(",") if kv)
    device_s = per_sample.get(os.environ.get("CODDL_DEVICE_TYPE", ""),
                              per_sample.get(f"slot{os.environ.get('CODDL_SLOT', '')}", 0.0))
    job_dir = Path(os.environ["CODDL_JOB_DIR"])
    worker = os.environ["CODDL_WORKER_ID"]
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(SAMPLES, 16, generator=gen)
    dataset = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))

    with elastic.session() as s, open(job_dir / f"steps-{worker}.jsonl", "a") as log:
        time.sleep(float(os.environ.get("START_SLEEP", "0")))  # a slow start-up (dataset, CUDA init)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
        model, opt = s.wrap(model, torch.optim.Adam(model.parameters(), lr=1e-2))
        (job_dir / f"start-{worker}.json").write_text(json.dumps({"step": s.steps_done}))
        for xb, yb in s.batches(dataset, global_batch=global_batch, steps=steps):
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            time.sleep(sleep + device_s * len(xb))
            if s.step(loss):
                # Only what belongs to the step just applied: rank and world may already be the next
                # generation's, since a resize happens inside step().
                log.write(json.dumps({"step": s.steps_done, "global_batch": s.global_batch,
                                      "samples": s.last_samples}) + "\n")
                log.flush()


if __name__ == "__main__":
    main()
