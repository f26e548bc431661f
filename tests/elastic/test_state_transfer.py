"""``state.send`` / ``state.recv`` over real gloo, with one rank being the pytest process itself.

The other ranks are forked processes; the rank under test runs in this process so that the calls are
seen by a tracer (mutmut's, for one) as well as by the assertions. Every rank starts from a different
seed, so only a correct copy can make a receiver's model, optimizer, counters and RNGs equal the
sender's.
"""

from __future__ import annotations

import datetime
import multiprocessing as mp
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from coddl.elastic import state
from coddl.elastic.data import Position

CPU = torch.device("cpu")
TIMEOUT = datetime.timedelta(seconds=20)

# The first optimizer a process builds imports torch._dynamo (seconds of CPU). Built once here, when the
# module is imported: every rank forked later inherits it instead of paying for it at once, all together.
torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])


def _join(store_path: Path, rank: int, world: int) -> None:
    dist.init_process_group("gloo", store=dist.FileStore(str(store_path), world), rank=rank, world_size=world,
                            timeout=TIMEOUT)


def _replica(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 3))
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def _train(seed: int, steps: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model, opt = _replica(seed)
    for _ in range(steps):
        model(torch.randn(4, 7)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _draws() -> tuple[list[float], float, float]:
    return torch.rand(2).tolist(), random.random(), float(np.random.rand())


def _report(model: torch.nn.Module, opt: torch.optim.Optimizer, counters: state.Counters) -> tuple:
    return (state.state_hash(model, opt), counters.step, counters.samples, counters.position.epoch,
            counters.position.offset, _draws())


def _in_child(store_path: Path, rank: int, world: int, role: Callable[[int], Any], out) -> None:  # noqa: ANN001
    torch.set_num_threads(1)
    try:
        _join(store_path, rank, world)
        try:
            out.put((rank, role(rank)))
            dist.barrier()  # no rank leaves while another still talks to it
        finally:
            dist.destroy_process_group()
    except BaseException as e:  # the test reads this instead of waiting for a report that never comes
        out.put((rank, f"failed: {e!r}"))
        raise


def _world(tmp_path: Path, world: int, me: int, role: Callable[[int], Any], mine: Callable[[], Any]) -> tuple[Any, dict]:
    """Run ``mine`` as rank ``me`` in this process and ``role(rank)`` in a forked process per other
    rank; returns what ``mine`` returned and every other rank's result."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    store_path = tmp_path / "store"
    procs = [ctx.Process(target=_in_child, args=(store_path, r, world, role, out), daemon=True)
             for r in range(world) if r != me]
    for p in procs:  # forked before this process joins the group: a child must not inherit gloo state
        p.start()
    finished = False
    try:
        _join(store_path, me, world)
        try:
            result = mine()
            others = dict(out.get(timeout=TIMEOUT.total_seconds()) for _ in procs)
            dist.barrier()
            finished = True
        finally:
            dist.destroy_process_group()
    finally:
        for p in procs:
            if finished:
                p.join(timeout=TIMEOUT.total_seconds())
            if p.is_alive():  # this rank failed: the others would wait for it until the group's timeout
                p.kill()
    return result, others


def _receive_and_restore(rank: int) -> tuple:
    model, opt = _replica(100 + rank)
    _seed_all(100 + rank)
    counters = state.restore(state.recv(0, CPU), model, opt)
    return _report(model, opt, counters)


def test_this_process_sends_its_whole_state_to_two_joining_ranks_at_once(tmp_path: Path) -> None:
    counters = state.Counters(step=3, samples=12, position=Position(1, 5))

    def send() -> tuple:
        model, opt = _train(0, 3)
        _seed_all(7)
        state.send(state.capture(model, opt, counters), [1, 2], CPU)
        return _report(model, opt, counters)

    sent, got = _world(tmp_path, 3, 0, _receive_and_restore, send)
    assert got == {1: sent, 2: sent}


def test_only_the_ranks_named_receive_and_the_others_are_left_alone(tmp_path: Path) -> None:
    def role(rank: int) -> Any:
        if rank == 2:
            return _receive_and_restore(rank)
        return "idle"  # rank 1 is sent nothing: the send must complete without it

    def send() -> tuple:
        model, opt = _train(0, 2)
        _seed_all(8)
        counters = state.Counters(step=2, samples=8, position=Position(0, 8))
        state.send(state.capture(model, opt, counters), [2], CPU)
        return _report(model, opt, counters)

    sent, got = _world(tmp_path, 3, 0, role, send)
    assert got == {1: "idle", 2: sent}


_FROM_1 = {"step": 11, "note": "no tensors at all"}


def _two_senders(rank: int) -> Any:
    if rank == 0:
        time.sleep(0.5)  # rank 1's message is there first: a receiver that ignored the source would take it
        model, opt = _train(0, 2)
        _seed_all(9)
        counters = state.Counters(step=2, samples=8, position=Position(3, 1))
        state.send(state.capture(model, opt, counters), [2], CPU)
        return _report(model, opt, counters)
    state.send(dict(_FROM_1), [2], CPU)
    return "sent"


def test_this_process_receives_from_the_rank_it_names_whatever_arrives_first(tmp_path: Path) -> None:
    def receive() -> tuple[tuple, dict]:
        model, opt = _replica(3)
        _seed_all(3)
        from_0 = state.recv(0, CPU)
        counters = state.restore(from_0, model, opt)
        report = _report(model, opt, counters)
        return report, state.recv(1, CPU)

    (report, from_1), senders = _world(tmp_path, 3, 2, _two_senders, receive)
    assert from_1 == _FROM_1 and senders[1] == "sent"  # a payload without tensors travels too (an empty buffer)
    assert report == senders[0] and report[1:5] == (2, 8, 3, 1)


def test_tensors_arrive_with_their_dtype_shape_and_bytes(tmp_path: Path) -> None:
    payload = {"i64": torch.arange(-3, 3, dtype=torch.int64).reshape(2, 3), "bf16": torch.randn(4, 1).bfloat16(),
               "flags": torch.tensor([True, False, True]), "scalar": torch.tensor(2.5, dtype=torch.float64),
               "nested": [(torch.ones(2, dtype=torch.int8) * -7,), {"u8": torch.arange(5, dtype=torch.uint8)}],
               "empty": torch.empty(0, 4)}

    def role(rank: int) -> str:
        state.send(payload, [1], CPU)
        return "sent"

    back, senders = _world(tmp_path, 2, 1, role, lambda: state.recv(0, CPU))
    assert senders == {0: "sent"}
    assert isinstance(back["nested"][0], tuple) and isinstance(back["nested"], list)
    pairs = [(back[k], payload[k]) for k in ("i64", "bf16", "flags", "scalar", "empty")]
    pairs += [(back["nested"][0][0], payload["nested"][0][0]), (back["nested"][1]["u8"], payload["nested"][1]["u8"])]
    for got, want in pairs:
        assert (got.dtype, got.shape, got.device) == (want.dtype, want.shape, want.device)
        assert torch.equal(got, want)
