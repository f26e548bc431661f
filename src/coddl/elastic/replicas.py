"""What keeps the ranks' replicas one model: every rank adds the same flat, pre-weighted gradient
buckets to the all-reduce, the optimizer is applied only inside ``s.step()``, and every
``REPLICA_CHECK_STEPS`` steps the ranks compare a digest of their parameters, which catches a script
that changes them on its own."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any

import torch

from coddl.elastic.failure import ScriptMistake
from coddl.elastic.protocol import WorkerEnv
from coddl.elastic.rank import RankState

REPLICA_CHECK_STEPS = 10  # every this many steps the ranks compare a digest of their parameters


def gradient_buckets(model: torch.nn.Module, weight: float) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """One flat, pre-weighted gradient buffer per dtype (missing gradients count as zeros)."""
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = defaultdict(list)
    for p in model.parameters():
        if p.requires_grad:
            by_dtype[p.dtype].append(p)
    buckets = []
    for params in by_dtype.values():
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        buckets.append((torch._utils._flatten_dense_tensors(grads).mul_(weight), params))
    return buckets


class Replicas(RankState):
    def __init__(self, env: WorkerEnv) -> None:
        super().__init__(env)
        self._stepping = False  # inside our own optimizer.step()
        self._points: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # see _replica_digest

    def _outside_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._stepping:
            raise ScriptMistake("the script called optimizer.step() itself: s.step(loss) averages the gradients "
                                "over the ranks and applies the update, so the script must not")

    def _replica_digest(self) -> int:
        """20 bits of a hash of a few elements of every parameter. The ranks' parameters are bit for
        bit the same after every step (one all-reduced gradient, one deterministic update), so all
        digests agree unless the script changed the parameters on its own; the ranks compare them
        through the step's control all-reduce (sum and sum of squares: equal iff all are equal)."""
        if self._points is None:
            self._points = [(p, torch.linspace(0, p.numel() - 1, min(4, p.numel()), device=p.device).long())
                           for p in self._model.parameters() if p.numel()]
        if not self._points:
            return 0
        values = torch.cat([p.detach().reshape(-1).index_select(0, i).double() for p, i in self._points])
        raw = hashlib.blake2b(values.cpu().numpy().tobytes(), digest_size=4).digest()
        return int.from_bytes(raw, "big") >> 12

    def _check_replicas(self, digests: float, squares: float) -> None:
        """The digests all-reduced as a sum and a sum of squares are equal iff every rank's is."""
        if self.world_size * int(squares) != int(digests) ** 2:
            raise ScriptMistake(
                f"the replicas' parameters differ at step {self._counters.step}: the script changes them outside "
                "s.step() (it calls optimizer.step() itself, or updates parameters by hand), so the ranks no "
                "longer train one model")
