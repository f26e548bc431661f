"""The training script of the CUDA tests: an MLP trained through ``coddl.elastic`` on the rank's device.

It writes what its worker saw — the process group's backend, where the model's parameters and each
batch live, the device's name — to ``$CODDL_JOB_DIR/seen-<worker>.json``, and every applied step's
samples to ``steps-<worker>.jsonl``; it prints the first to its log too. ``ALLOC_GB`` makes it try once to allocate that many GiB on its
GPU and record whether PyTorch's allocator refused (a sharing job's memory limit). STEP_SLEEP slows
steps down so that a test can act mid-training.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

import coddl.elastic as elastic


def try_allocate(gib: float) -> str:
    try:
        block = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        return "refused"
    del block
    torch.cuda.empty_cache()
    return "allocated"


def main() -> None:
    torch.set_num_threads(1)
    steps = int(os.environ["STEPS"])
    global_batch = int(os.environ["GLOBAL_BATCH"])
    sleep = float(os.environ.get("STEP_SLEEP", "0"))
    job_dir = Path(os.environ["CODDL_JOB_DIR"])
    worker = os.environ["CODDL_WORKER_ID"]
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(int(os.environ.get("SAMPLES", "480")), 16, generator=gen)
    dataset = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))

    with elastic.session() as s, open(job_dir / f"steps-{worker}.jsonl", "a") as log:
        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
        model, opt = s.wrap(model, torch.optim.Adam(model.parameters(), lr=1e-2))
        seen = {"start": s.steps_done, "backend": dist.get_backend() if dist.is_initialized() else None,
                "parameters_on": str(next(model.parameters()).device),
                "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "batches_on": []}
        if "ALLOC_GB" in os.environ:
            seen["alloc"] = try_allocate(float(os.environ["ALLOC_GB"]))
        for xb, yb in s.batches(dataset, global_batch=global_batch, steps=steps):
            if len(seen["batches_on"]) < 1:
                seen["batches_on"].append(str(xb.device))
                (job_dir / f"seen-{worker}.json").write_text(json.dumps(seen))
                print(f"gpu_trainer saw {json.dumps(seen)}", flush=True)  # for the job's log on a server
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            time.sleep(sleep)
            if s.step(loss):
                log.write(json.dumps({"step": s.steps_done, "global_batch": s.global_batch,
                                      "samples": s.last_samples, "loss": float(loss)}) + "\n")
                log.flush()


if __name__ == "__main__":
    main()
