"""Train a ~1.6 M-parameter MLP on synthetic data with coddl's elastic session.

Standalone:      python examples/train_mlp.py --steps 200
Under coddl:     the executor sets the CODDL_* environment and the same script joins the job.
Settings come from the flags, which default to the environment (STEPS, GLOBAL_BATCH, LR).
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

import coddl.elastic as elastic

FEATURES, HIDDEN, CLASSES = 512, 1024, 10


def mlp() -> nn.Module:
    """512 → 1024 → 1024 → 10: 1,585,162 parameters."""
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, CLASSES))


def synthetic(samples: int) -> torch.utils.data.TensorDataset:
    """Inputs labelled by a fixed random teacher network, so there is something to learn. Seeded
    independently of training, so every rank builds the identical dataset."""
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, FEATURES, generator=gen)
    teacher = torch.randn(FEATURES, CLASSES, generator=gen)
    return torch.utils.data.TensorDataset(x, (x @ teacher).argmax(dim=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "200")))
    parser.add_argument("--global-batch", type=int, default=int(os.environ.get("GLOBAL_BATCH", "128")))
    parser.add_argument("--lr", type=float, default=float(os.environ.get("LR", "1e-3")))
    parser.add_argument("--samples", type=int, default=8192)
    args = parser.parse_args()
    torch.set_num_threads(1)

    dataset = synthetic(args.samples)
    with elastic.session() as s:
        model = mlp()
        model, opt = s.wrap(model, torch.optim.Adam(model.parameters(), lr=args.lr))
        for x, y in s.batches(dataset, global_batch=args.global_batch, steps=args.steps):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            s.step(loss)
            if s.rank == 0 and (s.steps_done == 1 or s.steps_done % 50 == 0):
                print(f"step {s.steps_done} world {s.world_size} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
