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


def test_state_hash_covers_the_optimizer_state_and_every_parameter() -> None:
    model, opt = trained(0)
    base = state.state_hash(model, opt)
    assert state.state_hash(model, opt) == base  # a pure function of the tensors
    opt.state_dict()  # reading changes nothing
    first = next(iter(opt.state.values()))
    saved = first["exp_avg"].clone()
    first["exp_avg"].add_(1e-3)  # same weights, different optimizer moments: replicas would diverge
    assert state.state_hash(model, opt) != base
    first["exp_avg"].copy_(saved)
    assert state.state_hash(model, opt) == base
    model2, opt2 = trained(0)
    assert state.state_hash(model2, opt2) == state.state_hash(model, opt)
    with torch.no_grad():
        model2[2].bias.add_(1.0)  # the last parameter counts as much as the first
    assert state.state_hash(model2, opt2) != state.state_hash(model, opt)


_WRITER = """
import resource, signal, sys, torch
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it by default; the kernel's default kills
from coddl.elastic import state
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
state.save_checkpoint(Path(sys.argv[1]), {"step": 2, "w": torch.ones(4 * limit // 4, dtype=torch.float32)})
print("finished")
"""


def test_a_process_killed_while_writing_a_checkpoint_leaves_the_previous_one_intact(tmp_path: Path) -> None:
    """The writer is killed by the kernel (SIGXFSZ) the moment a file it writes grows past 1 MB,
    half-way through a 4 MB checkpoint: deterministic, whatever the machine's load."""
    import signal
    import subprocess
    import sys

    old = {"step": 1, "w": torch.arange(1000, dtype=torch.float32)}
    state.save_checkpoint(tmp_path, old)
    before = (tmp_path / state.CHECKPOINT_NAME).read_bytes()
    limit = 1 << 20
    proc = subprocess.run([sys.executable, "-c", _WRITER, str(tmp_path), str(limit)], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGXFSZ, (proc.returncode, proc.stdout, proc.stderr)
    assert (tmp_path / state.CHECKPOINT_NAME).read_bytes() == before
    back = state.load_checkpoint(tmp_path)
    assert back["step"] == 1 and torch.equal(back["w"], old["w"])


def _rank(rank: int, port: int, dsts: list[int], out) -> None:  # noqa: ANN001 - a multiprocessing queue
    """One rank of a 3-rank gloo world: rank 0 sends its trained state to ``dsts``, the others receive
    it into a fresh replica and report its hash, counters and next random draws."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 3, rank == 0, timeout=__import__("datetime").timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=3)
    try:
        torch.manual_seed(rank)  # every rank starts different: only the copy can make them equal
        model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        if rank == 0:
            for _ in range(3):
                model(torch.randn(4, 7)).sum().backward()
                opt.step()
                opt.zero_grad()
            state.send(state.capture(model, opt, state.Counters(step=3, samples=12)), dsts, torch.device("cpu"))
            out.put((rank, state.state_hash(model, opt), 3, 12, torch.rand(2).tolist()))
        else:
            counters = state.restore(state.recv(0, torch.device("cpu")), model, opt)
            out.put((rank, state.state_hash(model, opt), counters.step, counters.samples, torch.rand(2).tolist()))
    finally:
        dist.destroy_process_group()


def test_a_survivor_sends_its_whole_state_to_joining_ranks_at_once() -> None:
    """Real processes over gloo: rank 0 sends to ranks 1 and 2 in one call; both end bit-identical to it
    (parameters, optimizer moments, counters, the RNG's next draws)."""
    import multiprocessing as mp
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, [1, 2], out)) for r in range(3)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in procs:
            rank, *rest = out.get(timeout=90)
            got[rank] = rest
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert got[1] == got[0] and got[2] == got[0], got


def test_a_checkpoint_goes_to_a_job_directory_not_made_yet(tmp_path: Path) -> None:
    model, opt = trained(0)
    where = state.save_checkpoint(tmp_path / "jobs" / "7", state.capture(model, opt, state.Counters(step=5)))
    assert where == tmp_path / "jobs" / "7" / state.CHECKPOINT_NAME
    assert state.load_checkpoint(tmp_path / "jobs" / "7")["step"] == 5


def test_a_model_whose_int64_buffer_sits_after_an_odd_number_of_floats_round_trips() -> None:
    """Linear(4, 3) + BatchNorm1d(3) holds 27 float32s before the int64 ``num_batches_tracked``: its bytes
    start at offset 108 of the packed buffer, not a multiple of 8 (this used to fail on unpack)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    skeleton, flat = state.pack(state.capture(model, opt, state.Counters(step=1)), torch.device("cpu"))
    torch.manual_seed(1)
    replica = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    replica_opt = torch.optim.SGD(replica.parameters(), lr=0.1, momentum=0.9)
    state.restore(state.unpack(skeleton, flat), replica, replica_opt)
    assert state.state_hash(replica, replica_opt) == state.state_hash(model, opt)
    assert replica[1].num_batches_tracked.item() == 1


def test_a_payload_without_tensors_packs_to_an_empty_byte_buffer_on_the_device_asked_for() -> None:
    payload = {"step": 4, "note": "counters only", "rng": (1, 2)}
    for device in (torch.device("cpu"), torch.device("meta")):  # meta: a device other than the CPU, without data
        skeleton, flat = state.pack(payload, device)
        assert (flat.dtype, tuple(flat.shape), flat.device) == (torch.uint8, (0,), device)
    assert state.unpack(*state.pack(payload, torch.device("cpu"))) == payload


def test_the_buffer_goes_to_the_device_asked_for_and_each_tensor_comes_back_to_its_own() -> None:
    """On a GPU the buffer travels on the GPU while the RNG states belong on the CPU. Here the meta device
    stands in for the other device: it records device, dtype and shape but holds no bytes."""
    payload = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([1, -1], dtype=torch.int16)}
    _, flat = state.pack(payload, torch.device("meta"))
    assert flat.device.type == "meta" and (flat.dtype, flat.numel()) == (torch.uint8, 6 * 4 + 2 * 2)
    on_meta = {k: v.to("meta") for k, v in payload.items()}
    skeleton, meta_flat = state.pack(on_meta, torch.device("meta"))  # tensors that live on the other device
    cpu_flat = state.pack(payload, torch.device("cpu"))[1]  # the same bytes, arrived on the CPU
    assert meta_flat.numel() == cpu_flat.numel()
    back = state.unpack(skeleton, cpu_flat)
    for k, want in payload.items():
        assert (back[k].device.type, back[k].dtype, back[k].shape) == ("meta", want.dtype, want.shape)


def test_the_gpus_rng_states_are_captured_and_restored_only_where_both_sides_have_them(monkeypatch) -> None:  # noqa: ANN001
    """CUDA faked (this machine has none; tests/gpu covers a real one): capture records every GPU's
    generator state, restore hands the same states back on the CPU, and neither touches CUDA when the
    payload or the process has no GPU."""
    model, opt = trained(0)
    gpu_states = [torch.arange(16, dtype=torch.uint8), torch.arange(16, 32, dtype=torch.uint8)]
    set_calls: list = []
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", set_calls.append)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in gpu_states])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    without_gpu = state.unpack(*state.pack(state.capture(model, opt, state.Counters()), torch.device("cpu")))
    assert "cuda" not in without_gpu["rng"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with_gpu = state.unpack(*state.pack(state.capture(model, opt, state.Counters()), torch.device("cpu")))
    assert [torch.equal(a, b) for a, b in zip(with_gpu["rng"]["cuda"], gpu_states, strict=True)] == [True, True]
    state.restore(without_gpu, model, opt)  # a checkpoint written on a CPU, restored where there is a GPU
    assert set_calls == []
    state.restore(with_gpu, model, opt)
    assert len(set_calls) == 1
    assert [(s.device.type, torch.equal(s, want)) for s, want in zip(set_calls[0], gpu_states, strict=True)] == [
        ("cpu", True), ("cpu", True)]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    state.restore(with_gpu, model, opt)  # a GPU checkpoint restored where there is none
    assert len(set_calls) == 1


def test_a_checkpoint_written_on_a_gpu_loads_where_there_is_none(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Every storage tagged cuda:0 as a GPU rank's torch.save writes it; loading must map it to the CPU,
    not fail for want of CUDA."""
    import torch.serialization

    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
    state.save_checkpoint(tmp_path, {"step": 3, "w": torch.arange(4.0)})
    monkeypatch.undo()
    assert b"cuda:0" in (tmp_path / state.CHECKPOINT_NAME).read_bytes()
    back = state.load_checkpoint(tmp_path)
    assert back["step"] == 3 and back["w"].device.type == "cpu" and torch.equal(back["w"], torch.arange(4.0))
