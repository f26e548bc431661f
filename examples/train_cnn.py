"""Train a small CNN on synthetic 32x32 images with coddl's elastic session.

Standalone:      python examples/train_cnn.py --steps 100
Under coddl:     the executor sets the CODDL_* environment and the same script joins the job.
Settings come from the flags, which default to the environment (STEPS, GLOBAL_BATCH, LR).
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

import coddl.elastic as elastic

CLASSES = 10


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 8 * 8, CLASSES),
    )


def synthetic(samples: int) -> torch.utils.data.TensorDataset:
    """Noisy images whose class is a fixed colour pattern, so the CNN has something to learn."""
    gen = torch.Generator().manual_seed(1234)
    labels = torch.randint(0, CLASSES, (samples,), generator=gen)
    patterns = torch.randn(CLASSES, 3, 32, 32, generator=gen)
    images = patterns[labels] + torch.randn(samples, 3, 32, 32, generator=gen)
    return torch.utils.data.TensorDataset(images, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", "100")))
    parser.add_argument("--global-batch", type=int, default=int(os.environ.get("GLOBAL_BATCH", "64")))
    parser.add_argument("--lr", type=float, default=float(os.environ.get("LR", "0.05")))
    parser.add_argument("--samples", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(1)

    dataset = synthetic(args.samples)
    with elastic.session() as s:
        model = cnn()
        model, opt = s.wrap(model, torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9))
        for images, labels in s.batches(dataset, global_batch=args.global_batch, steps=args.steps):
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            s.step(loss)
            if s.rank == 0 and (s.steps_done == 1 or s.steps_done % 20 == 0):
                print(f"step {s.steps_done} world {s.world_size} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
