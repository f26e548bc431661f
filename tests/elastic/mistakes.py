"""Training scripts with the mistakes the session must name (``test_failures.py``); MISTAKE selects one:

- ``no-session``: trains without ever opening ``elastic.session()``;
- ``own-step``: calls ``optimizer.step()`` itself before ``s.step(loss)``;
- ``drift``: rank 1 nudges a parameter by hand at step 3, so the replicas drift apart;
- ``raise``: raises the same exception at the same line every time it runs;
- ``once``: raises the first time only (a transient failure), then trains to the end.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

import coddl.elastic as elastic

MISTAKE = os.environ["MISTAKE"]
STEPS = int(os.environ.get("STEPS", "30"))


def data() -> torch.utils.data.TensorDataset:
    x = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
    return torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True))


def main() -> None:
    torch.set_num_threads(1)
    if MISTAKE == "no-session":
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in torch.utils.data.DataLoader(data(), batch_size=32):
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        return
    with elastic.session() as s:
        model = nn.Linear(4, 1)
        model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=0.05))
        marker = Path(os.environ["CODDL_JOB_DIR"]) / "failed-once"
        if MISTAKE == "raise" or (MISTAKE == "once" and not marker.exists()):
            marker.touch()
            raise RuntimeError("this script fails here")
        for x, y in s.batches(data(), global_batch=32, steps=STEPS):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            if MISTAKE == "own-step":
                opt.step()
            if MISTAKE == "drift" and s.rank == 1 and s.steps_done == 3:
                with torch.no_grad():
                    model.bias.add_(1e-3)
            s.step(loss)


if __name__ == "__main__":
    main()
