"""Which samples each rank trains on, as a pure function of (seed, position, world size, rank).

The samples form one stream: epoch 0's permutation, then epoch 1's, and so on; every step takes the
next ``global batch`` samples of that stream and splits them into contiguous per-rank slices. Because
the only state is the position in the stream (epoch, offset) and it advances by exactly the samples
trained on, changing the world size between two steps can neither skip nor repeat a sample within an
epoch. A batch may straddle an epoch boundary, which keeps the global batch truly constant; only when
training stops at an epoch limit is the last batch shorter.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Position:
    """How far training has got: ``offset`` samples of epoch ``epoch``'s permutation are done."""

    epoch: int = 0
    offset: int = 0

    def advanced(self, count: int, dataset_len: int) -> Position:
        epoch, offset = divmod(self.offset + count, dataset_len)
        return Position(self.epoch + epoch, offset)


@dataclass(frozen=True)
class BatchRule:
    """How the batch follows the world size: fixed global batch, or fixed local batch (linear scaling)."""

    global_batch: int | None = None
    local_batch: int | None = None

    def __post_init__(self) -> None:
        if (self.global_batch is None) == (self.local_batch is None):
            raise ValueError("give exactly one of global_batch (fixed global batch) or local_batch (linear scaling)")
        if (self.global_batch or self.local_batch or 0) < 1:
            raise ValueError("the batch size must be >= 1")

    def global_size(self, world_size: int) -> int:
        if self.global_batch is None:
            return self.local_batch * world_size
        if self.global_batch < world_size:
            raise ValueError(f"global batch {self.global_batch} is smaller than the world size {world_size}")
        return self.global_batch


@dataclass(frozen=True)
class Samples:
    """Samples as parallel lists: ``indices[i]`` of epoch ``epochs[i]``'s permutation order."""

    epochs: list[int]
    indices: list[int]

    def __len__(self) -> int:
        return len(self.indices)

    def slice(self, start: int, stop: int) -> Samples:
        return Samples(self.epochs[start:stop], self.indices[start:stop])


class SampleOrder:
    """The seeded per-epoch permutations of a dataset of ``dataset_len`` samples."""

    def __init__(self, dataset_len: int, seed: int) -> None:
        if dataset_len < 1:
            raise ValueError("the dataset is empty")
        self.dataset_len = dataset_len
        self.seed = seed
        self._cached: tuple[int, list[int]] | None = None

    def permutation(self, epoch: int) -> list[int]:
        if self._cached is None or self._cached[0] != epoch:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._cached = (epoch, torch.randperm(self.dataset_len, generator=gen).tolist())
        return self._cached[1]

    def take(self, position: Position, count: int, epoch_limit: int | None = None) -> Samples:
        """The next ``count`` samples of the stream from ``position``, never past ``epoch_limit``."""
        epochs: list[int] = []
        indices: list[int] = []
        epoch, offset = position.epoch, position.offset
        while len(indices) < count and (epoch_limit is None or epoch < epoch_limit):
            chunk = self.permutation(epoch)[offset : offset + count - len(indices)]
            indices.extend(chunk)
            epochs.extend([epoch] * len(chunk))
            epoch, offset = epoch + 1, 0
        return Samples(epochs, indices)


def local_range(global_size: int, world_size: int, rank: int) -> tuple[int, int]:
    """Rank ``rank``'s contiguous share [start, stop) of a global batch; the remainder goes to low ranks."""
    base, extra = divmod(global_size, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)
