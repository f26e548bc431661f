"""Job inspection (CODDL_INSPECT=1, set by the controller for a job it has no profile of): after
``INSPECT_WARMUP`` steps (the first steps of a fresh process run slow: allocations, caches, the
other ranks still starting), each rank hands its local batch out as 1, 2, 4 or 16 micro-batches
in turn for ``INSPECT_ROUNDS`` rounds, and the script's forward and backward pass over each is timed
(from the batch handed out to ``step()``). ``step()`` on a micro-batch that is not the step's last keeps its gradient, weighted by
its share of the global batch, and applies nothing; the step's last one adds them up, all-reduces
and updates once. Every sample is trained on exactly once and the update is the one the whole local
batch gives (equal up to floating-point rounding of the sum), so inspection costs the user nothing
but the micro-batches' lower efficiency during those steps. What rank 0 measured — gradient bytes,
compute seconds per local batch, the step's own overhead — goes to the store once (``Inspection``).
A model whose forward pass depends on the batch as a whole (batch normalisation) sees micro-batches
there, as it sees smaller local batches when the job runs on more GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from coddl.elastic.protocol import INSPECTION_KEY, MAX_TIMINGS, Inspection, WorkerEnv
from coddl.elastic.rank import RankState
from coddl.elastic.replicas import gradient_buckets

# micro-batches per step while inspecting, in turn: local batches b, b/2, b/4 and b/16. The last one is
# what the job will run at on many GPUs, where a GPU's step stops shrinking with the batch (its
# floor: perf/jobmodel.py); b/4 alone would not see it, and a line through the larger ones would
# price 16 GPUs up to twice too fast.
INSPECT_SPLITS = (1, 2, 4, 16)
INSPECT_ROUNDS = 3  # each split this many times (the median counts)
INSPECT_WARMUP = 10  # whole steps before the timed ones
INSPECT_STEPS = INSPECT_WARMUP + len(INSPECT_SPLITS) * INSPECT_ROUNDS  # the job's inspected steps end here


@dataclass
class Carry:
    """Weighted gradients and loss of a step's micro-batches stepped on so far (inspection)."""

    flats: list[torch.Tensor]
    loss_sum: float
    loss_weight: float


@dataclass
class Probe:
    """Rank-local timings of the inspected steps."""

    timings: list[tuple[int, float]]
    overheads: list[float]

    @staticmethod
    def splits(step: int, local: int) -> int:
        if step < INSPECT_WARMUP:
            return 1
        return max(1, min(INSPECT_SPLITS[(step - INSPECT_WARMUP) % len(INSPECT_SPLITS)], local))


class Inspecting(RankState):
    def __init__(self, env: WorkerEnv) -> None:
        super().__init__(env)
        self._inspecting: Probe | None = None  # timings of the first steps (CODDL_INSPECT)
        self._carry: Carry | None = None

    def _keep(self, weight: float, loss_sum: float, loss_weight: float) -> None:
        """A micro-batch that does not end its step: keep its weighted gradient and loss for the
        step's last micro-batch, and clear the gradients for the next one."""
        flats = [flat for flat, _ in gradient_buckets(self._model, weight)]
        if self._carry is None:
            self._carry = Carry(flats, loss_sum, loss_weight)
        else:
            for kept, flat in zip(self._carry.flats, flats):
                kept.add_(flat)
            self._carry.loss_sum += loss_sum
            self._carry.loss_weight += loss_weight
        self._optimizer.zero_grad(set_to_none=True)

    def _inspected(self) -> None:
        """The inspected steps are over: rank 0 reports what it timed (if anything: a rank that joined
        after them has nothing), and every rank goes back to whole local batches."""
        probe, self._inspecting = self._inspecting, None
        if self._rank != 0 or probe is None or not probe.timings or self._rule is None:
            return
        param_bytes = sum(p.numel() * p.element_size() for p in self._model.parameters() if p.requires_grad)
        report = Inspection(int(param_bytes), tuple(probe.timings[-MAX_TIMINGS:]), float(np.median(probe.overheads)),
                            self._rule.global_batch, self._rule.local_batch)
        self._store.set(INSPECTION_KEY, report.dumps())
