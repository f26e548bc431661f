"""Training-state payloads: packing for the broadcast, checkpoints, and the replica hash."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch
from torch import nn

from coddl.elastic import state
from coddl.elastic.data import Position


def trained(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(16, 4)).pow(2).mean().backward()
    opt.step()
    return model, opt


def test_pack_unpack_round_trips_mixed_tensors() -> None:
    payload = {"a": torch.arange(5, dtype=torch.int64), "b": [torch.tensor(2.5), (torch.ones(2, 3, dtype=torch.bfloat16),)],
               "c": torch.tensor([True, False]), "d": "text", "e": 7}
    skeleton, flat = state.pack(payload, torch.device("cpu"))
    assert flat.dtype == torch.uint8 and flat.numel() == 5 * 8 + 4 + 6 * 2 + 2
    back = state.unpack(skeleton, flat)
    assert back["d"] == "text" and back["e"] == 7 and isinstance(back["b"][1], tuple)
    for got, want in [(back["a"], payload["a"]), (back["b"][0], payload["b"][0]),
                      (back["b"][1][0], payload["b"][1][0]), (back["c"], payload["c"])]:
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


def test_capture_restore_makes_replicas_bit_identical() -> None:
    source, source_opt = trained(0)
    replica, replica_opt = trained(1)
    assert state.state_hash(source, source_opt) != state.state_hash(replica, replica_opt)
    counters = state.Counters(step=9, samples=144, position=Position(2, 16))
    torch.manual_seed(42)
    random.seed(42)
    np.random.seed(42)
    skeleton, flat = state.pack(state.capture(source, source_opt, counters), torch.device("cpu"))
    expected_draws = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(0)
    restored = state.restore(state.unpack(skeleton, flat), replica, replica_opt)
    assert restored == counters
    assert state.state_hash(source, source_opt) == state.state_hash(replica, replica_opt)
    draws = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(draws[0], expected_draws[0]) and draws[1:] == expected_draws[1:]


def test_checkpoint_is_written_atomically_and_loads_back(tmp_path: Path) -> None:
    assert state.load_checkpoint(tmp_path) is None
    model, opt = trained(0)
    for step in (1, 2):
        state.save_checkpoint(tmp_path, state.capture(model, opt, state.Counters(step=step)))
    assert [p.name for p in tmp_path.iterdir()] == [state.CHECKPOINT_NAME]  # no temp file left behind
    other, other_opt = trained(1)
    counters = state.restore(state.load_checkpoint(tmp_path), other, other_opt)
    assert counters.step == 2
    assert state.state_hash(other, other_opt) == state.state_hash(model, opt)
