"""A small elastic training job for the runtime tests: linear regression on synthetic data through
``coddl.elastic``, with a fixed sleep per step (STEP_S) standing in for GPU compute, so that how long
it runs does not depend on how busy this machine's cores are. Reads STEPS, GLOBAL_BATCH and LR like the
examples; FAIL=1 makes every worker raise once it has joined (a job that can never succeed)."""

from __future__ import annotations

import os
import time

import torch
from torch import nn

import coddl.elastic as elastic


def main() -> None:
    steps = int(os.environ.get("STEPS", "100"))
    batch = int(os.environ.get("GLOBAL_BATCH", "32"))
    step_s = float(os.environ.get("STEP_S", "0.05"))
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 16, generator=gen)
    y = x @ torch.randn(16, 1, generator=gen)
    data = torch.utils.data.TensorDataset(x, y)
    with elastic.session() as s:
        model = nn.Linear(16, 1)
        model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=float(os.environ.get("LR", "0.05"))))
        if os.environ.get("FAIL") == "1":
            raise RuntimeError("tiny job told to fail")
        for xb, yb in s.batches(data, global_batch=batch, steps=steps):
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            time.sleep(step_s)
            s.step(loss)
            if s.rank == 0 and s.steps_done % 20 == 0:
                print(f"step {s.steps_done} world {s.world_size} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
