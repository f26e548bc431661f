"""Training state as one payload: what a joining rank receives and what a checkpoint holds.

The same payload serves both purposes, so a rank restored from a survivor and a rank restored from a
checkpoint end up in the same state: model and optimizer state dicts, progress counters, data
position and every RNG a training script is likely to draw from. To copy it to another rank all
tensors are packed into ONE byte buffer (one message instead of hundreds) and the rest travels as a
small pickled skeleton.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from coddl.elastic.data import Position

CHECKPOINT_NAME = "checkpoint.pt"


@dataclass
class Counters:
    """Progress that travels with the model: global steps, samples trained on, stream position."""

    step: int = 0
    samples: int = 0
    position: Position = Position()


def capture(model: torch.nn.Module, optimizer: torch.optim.Optimizer, counters: Counters) -> dict[str, Any]:
    rng: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "step": counters.step,
        "samples": counters.samples,
        "epoch": counters.position.epoch,
        "offset": counters.position.offset,
        "rng": rng,
    }


def restore(payload: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Counters:
    model.load_state_dict(payload["model"])
    optimizer.load_state_dict(payload["optimizer"])
    rng = payload["rng"]
    torch.set_rng_state(rng["torch"].cpu())
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
    return Counters(payload["step"], payload["samples"], Position(payload["epoch"], payload["offset"]))


@dataclass(frozen=True)
class _TensorSlot:
    """Where a tensor's bytes sit in the packed buffer, and how to rebuild it."""

    offset: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    device: str


class _Packing:
    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self.nbytes = 0

    def split(self, obj: Any) -> Any:
        """``obj`` with every tensor replaced by a slot into the buffer being packed."""
        if isinstance(obj, torch.Tensor):
            t = obj.detach()
            slot = _TensorSlot(self.nbytes, t.numel() * t.element_size(), t.dtype, tuple(t.shape), str(t.device))
            self.tensors.append(t)
            self.nbytes += slot.nbytes
            return slot
        if isinstance(obj, dict):
            return {k: self.split(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self.split(v) for v in obj)
        return obj


def _fill(skeleton: Any, flat: torch.Tensor) -> Any:
    if isinstance(skeleton, _TensorSlot):
        # a copy of its own (storage offset 0) before the dtype view: a tensor's bytes need not sit at a
        # multiple of its element size in the buffer (an int64 after an odd number of float32s)
        raw = flat[skeleton.offset : skeleton.offset + skeleton.nbytes].clone()
        return raw.view(skeleton.dtype).reshape(skeleton.shape).to(skeleton.device)
    if isinstance(skeleton, dict):
        return {k: _fill(v, flat) for k, v in skeleton.items()}
    if isinstance(skeleton, (list, tuple)):
        return type(skeleton)(_fill(v, flat) for v in skeleton)
    return skeleton


def pack(payload: dict[str, Any], device: torch.device) -> tuple[bytes, torch.Tensor]:
    """(pickled skeleton, one uint8 buffer on ``device`` holding every tensor's bytes in order)."""
    packing = _Packing()
    skeleton = packing.split(payload)
    parts = [t.reshape(-1).view(torch.uint8).to(device) for t in packing.tensors]
    flat = torch.cat(parts) if parts else torch.empty(0, dtype=torch.uint8, device=device)
    return pickle.dumps(skeleton), flat


def unpack(skeleton: bytes, flat: torch.Tensor) -> dict[str, Any]:
    return _fill(pickle.loads(skeleton), flat)


def send(payload: dict[str, Any], dsts: list[int], device: torch.device) -> None:
    """Send the payload to every rank in ``dsts`` at once: a size header, the pickled skeleton, then the
    one buffer with all tensor bytes.

    The waits are plain blocking ones: a gloo send or receive that times out closes its connection, so
    unlike a collective it cannot be waited on in slices; a worker dying mid-copy therefore costs the
    process-group timeout. A copy takes well under a second, so that is rare.
    """
    skeleton, flat = pack(payload, device)
    header = torch.tensor([len(skeleton), flat.numel()], dtype=torch.int64, device=device)
    skeleton_bytes = torch.frombuffer(bytearray(skeleton), dtype=torch.uint8).to(device)
    works = [dist.isend(t, dst) for dst in dsts for t in (header, skeleton_bytes, flat)]
    for work in works:
        work.wait()


def recv(src: int, device: torch.device) -> dict[str, Any]:
    header = torch.empty(2, dtype=torch.int64, device=device)
    dist.recv(header, src)
    skeleton_len, flat_len = header.tolist()
    skeleton = torch.empty(skeleton_len, dtype=torch.uint8, device=device)
    dist.recv(skeleton, src)
    flat = torch.empty(flat_len, dtype=torch.uint8, device=device)
    dist.recv(flat, src)
    return unpack(skeleton.cpu().numpy().tobytes(), flat)


def state_hash(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> str:
    """sha256 of the model's and the optimizer's tensors: equal hashes mean bit-identical replicas."""
    _, flat = pack({"model": model.state_dict(), "optimizer": optimizer.state_dict()["state"]}, torch.device("cpu"))
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()


def save_checkpoint(job_dir: Path, payload: dict[str, Any]) -> Path:
    """Write atomically (temp file, fsync, rename): a crash mid-write leaves the previous checkpoint."""
    job_dir.mkdir(parents=True, exist_ok=True)
    path = job_dir / CHECKPOINT_NAME
    tmp = job_dir / f".{CHECKPOINT_NAME}.{os.getpid()}.tmp"
    buf = io.BytesIO()
    torch.save(payload, buf)
    with open(tmp, "wb") as f:
        f.write(buf.getbuffer())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(job_dir: Path) -> dict[str, Any] | None:
    path = job_dir / CHECKPOINT_NAME
    if not path.exists():
        return None
    # weights_only=False: the payload holds RNG states (tuples, numpy arrays) and this job wrote it.
    return torch.load(path, map_location="cpu", weights_only=False)
