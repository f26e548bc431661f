"""A synthetic elastic job with a chosen scaling, whose speed does not depend on how busy this host is
(the estimation tests and benchmarks/estimation_jct.py run it).

Its gradient is PARAMS floats (a dense block besides a small regression, all-reduced over gloo every
step); its forward and backward pass sleeps FIXED_S plus SAMPLE_S per sample, standing in for GPU
compute with a fixed part and a part that grows with the local batch; and every step it applies on
more than one worker waits SYNC_S more, standing in for an interconnect slower than the one the
scheduler assumes. Reads STEPS and GLOBAL_BATCH like the other examples.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn

import coddl.elastic as elastic


def main() -> None:
    torch.set_num_threads(1)
    steps = int(os.environ.get("STEPS", "100"))
    batch = int(os.environ.get("GLOBAL_BATCH", "32"))
    per_sample = float(os.environ.get("SAMPLE_S", "0.005"))
    fixed = float(os.environ.get("FIXED_S", "0"))
    sync = float(os.environ.get("SYNC_S", "0"))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 16, generator=gen)
    data = torch.utils.data.TensorDataset(x, x @ torch.randn(16, 1, generator=gen))
    with elastic.session() as s:
        model = nn.Linear(16, 1)
        model.block = nn.Parameter(torch.zeros(int(os.environ.get("PARAMS", "100000"))))
        model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.05))
        for xb, yb in s.batches(data, global_batch=batch, steps=steps):
            loss = nn.functional.mse_loss(model(xb), yb) + 0.0 * model.block.sum()
            loss.backward()
            time.sleep(fixed + per_sample * len(xb))
            if s.step(loss) and s.world_size > 1:
                time.sleep(sync)


if __name__ == "__main__":
    main()
