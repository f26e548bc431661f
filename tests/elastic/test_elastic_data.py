"""The sample stream: whatever the world size does between steps, every epoch is its permutation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.elastic.data import BatchRule, Position, SampleOrder, local_range


@settings(deadline=None)
@given(global_size=st.integers(0, 200), world=st.integers(1, 16))
def test_local_ranges_partition_the_global_batch(global_size: int, world: int) -> None:
    ranges = [local_range(global_size, world, r) for r in range(world)]
    assert ranges[0][0] == 0 and ranges[-1][1] == global_size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    sizes = [stop - start for start, stop in ranges]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 60), batch=st.integers(1, 25), seed=st.integers(0, 3),
       worlds=st.lists(st.integers(1, 8), min_size=1, max_size=40))
def test_resizing_between_steps_loses_and_repeats_nothing(n: int, batch: int, seed: int, worlds: list[int]) -> None:
    order = SampleOrder(n, seed)
    position = Position()
    stream: list[tuple[int, int]] = []
    for world in worlds:
        global_size = BatchRule(local_batch=batch).global_size(world)
        taken = order.take(position, global_size)
        assert len(taken) == global_size  # batches straddle epochs, so the global batch never shrinks
        for rank in range(world):
            part = taken.slice(*local_range(len(taken), world, rank))
            stream += zip(part.epochs, part.indices)
        position = position.advanced(len(taken), n)
    assert position == Position(*divmod(len(stream), n))
    for i, (epoch, index) in enumerate(stream):
        assert epoch == i // n and index == order.permutation(epoch)[i % n]


def test_epoch_limit_truncates_only_the_last_batch() -> None:
    order = SampleOrder(10, seed=0)
    assert len(order.take(Position(0, 4), 4, epoch_limit=1)) == 4
    last = order.take(Position(0, 8), 4, epoch_limit=1)
    assert last.epochs == [0, 0] and last.indices == order.permutation(0)[8:]
    assert len(order.take(Position(1, 0), 4, epoch_limit=1)) == 0


def test_permutations_are_seeded_and_differ_per_epoch() -> None:
    a, b = SampleOrder(100, seed=1), SampleOrder(100, seed=1)
    assert a.permutation(3) == b.permutation(3) and sorted(a.permutation(3)) == list(range(100))
    assert a.permutation(0) != a.permutation(1)
    assert SampleOrder(100, seed=2).permutation(0) != a.permutation(0)


def test_batch_rule() -> None:
    assert BatchRule(global_batch=64).global_size(3) == 64
    assert BatchRule(local_batch=16).global_size(3) == 48
    with pytest.raises(ValueError, match="exactly one"):
        BatchRule(global_batch=64, local_batch=16)
    with pytest.raises(ValueError, match="smaller than the world size"):
        BatchRule(global_batch=2).global_size(3)
