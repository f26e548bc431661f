"""The training-script side: ``with session() as s`` joins the job, ``s.wrap`` syncs the replicas,
``s.batches`` hands out this rank's slice of every global batch and ``s.step`` applies one update.

Every rank runs the same loop; the step boundary (inside ``step()``, after the optimizer update) is
the only place where the world size changes, so user code never sees a half-applied resize. See
``coddl.elastic.protocol`` for how membership changes reach the ranks.

``Session`` is the public API and the step; its parts each have a module of their own, over the state
they share (``rank.py``): membership changes (``regroup.py``), progress reports and checkpoints
(``reporting.py``), job inspection (``inspection.py``) and keeping the replicas one model
(``replicas.py``).

Gradients are averaged by our own all-reduce instead of DistributedDataParallel: DDP binds itself to
one process group and would have to be rebuilt on every regroup, and owning the all-reduce lets a
three-number control message (loss, loss weight, newest generation) ride along in the same step.
"""

from __future__ import annotations

import datetime
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.utils._pytree import tree_map
from torch.utils.data import default_collate

from coddl.elastic import group
from coddl.elastic.coordinator import Coordinator
from coddl.elastic.data import BatchRule, Samples, SampleOrder, local_range
from coddl.elastic.inspection import INSPECT_STEPS, INSPECT_WARMUP, Inspecting, Probe
from coddl.elastic.kvstore import KVClient
from coddl.elastic.protocol import (
    FINISHED_KEY,
    GENERATION_KEY,
    REASON_START,
    WorkerEnv,
    arrived_key,
    split_addr,
)
from coddl.elastic.regroup import Departed, Regrouping
from coddl.elastic.replicas import REPLICA_CHECK_STEPS, Replicas, gradient_buckets

_opened = False  # whether this process ever entered a session (a job's script must)
_current: Session | None = None


def session_opened() -> bool:
    return _opened


def current_generation() -> int | None:
    """The membership generation of this process's open session, if any (for failure reports)."""
    return _current.generation if _current is not None else None


@dataclass
class _Pending:
    """The (micro-)batch handed to the user and not yet stepped on; ``whole`` is this rank's whole
    slice of the step, and ``final`` whether stepping on this batch completes the step."""

    samples: Samples
    global_size: int
    whole: Samples
    final: bool = True
    handed_at: float = 0.0


class Session(Regrouping, Inspecting, Replicas):
    """One worker's membership in an elastic data-parallel job. Create it with ``session()``."""

    def __init__(self, env: WorkerEnv) -> None:
        super().__init__(env)
        self._pending: _Pending | None = None
        self._last_samples: Samples | None = None
        self._dataset_len = 0
        self._hook: Any = None

    # ---- context ---------------------------------------------------------------------------------

    def __enter__(self) -> Session:
        global _opened, _current
        _opened, _current = True, self
        env = self._env
        if env.store_addr is None:  # standalone: a private one-worker coordinator, in process
            self._coordinator = Coordinator(timeout_s=env.pg_timeout_s, serve=False)
            self._coordinator.post([env.worker_id], REASON_START)
            self._store = self._coordinator.store
        else:
            if env.store_key is None:
                raise RuntimeError("CODDL_STORE_ADDR is set but CODDL_STORE_KEY is not: the job's store "
                                   "serves only its own workers")
            host, port = split_addr(env.store_addr)
            self._store = KVClient(host, port, env.store_key, datetime.timedelta(seconds=env.pg_timeout_s))
        # Same seed everywhere, so models built after this line start identical even before the sync.
        torch.manual_seed(env.seed)
        random.seed(env.seed)
        np.random.seed(env.seed)
        return self

    def __exit__(self, *exc: object) -> None:
        global _current
        if self._hook is not None:
            self._hook.remove()
        if _current is self:
            _current = None
        group.dissolve()
        if isinstance(self._store, KVClient):
            self._store.close()
        self._store = None
        self._coordinator = None

    # ---- public API ------------------------------------------------------------------------------

    @property
    def steps_done(self) -> int:
        """Optimizer steps applied by the job so far (all ranks agree; survives resizes and restarts)."""
        return self._counters.step

    @property
    def epoch(self) -> int:
        return self._counters.position.epoch

    @property
    def global_batch(self) -> int:
        return self._global_batch

    @property
    def last_samples(self) -> list[tuple[int, int]]:
        """(epoch, dataset index) of each sample in the last batch this rank handed out; once
        ``step()`` has applied a step made of micro-batches (inspection), every sample of the step."""
        s = self._last_samples
        return list(zip(s.epochs, s.indices)) if s is not None else []

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        """Move the model to this rank's device and join the job: afterwards every rank holds the same
        parameters, optimizer state, data position and RNG state (from a survivor or the checkpoint)."""
        if self._store is None:
            raise RuntimeError("use the session inside `with session() as s:`")
        self._model = model.to(self.device)
        self._optimizer = optimizer
        self._hook = optimizer.register_step_pre_hook(self._outside_step)
        # A grow is announced once all its new workers are here; wait for that (the survivors are
        # still training). A failure may meanwhile supersede our generation: then join the newer one.
        self._store.add(arrived_key(self._env.generation), 1)
        self._enter(self._await_generation(self._env.generation, poll_s=0.002))
        if self._departing:
            raise Departed()
        self._joined()
        return model, optimizer

    def batches(self, dataset: Any, *, global_batch: int | None = None, local_batch: int | None = None,
                steps: int | None = None, epochs: int | None = None,
                collate_fn: Callable[[list[Any]], Any] = default_collate) -> Iterator[Any]:
        """Yield this rank's slice of each global batch of the map-style ``dataset`` until ``steps``
        optimizer steps or ``epochs`` epochs are done (counted for the whole job, across resizes).

        ``global_batch`` keeps the global batch fixed whatever the world size; ``local_batch`` instead
        keeps the per-rank batch fixed (linear scaling). Call ``step()`` exactly once per batch. Let the
        generator end the training: a worker that leaves the loop early looks like a failed worker.
        """
        if self._model is None:
            raise RuntimeError("call s.wrap(model, optimizer) before s.batches()")
        rule = self._rule = BatchRule(global_batch, local_batch)
        order = SampleOrder(len(dataset), self._env.seed)
        self._dataset_len = order.dataset_len
        if self._env.inspect and self._counters.step < INSPECT_STEPS:
            self._inspecting = Probe([], [])
        while True:
            if self._departing:
                raise Departed()
            if (steps is not None and self._counters.step >= steps) or (
                epochs is not None and self._counters.position.epoch >= epochs
            ):
                break
            self._global_batch = rule.global_size(self.world_size)
            batch = order.take(self._counters.position, self._global_batch, epochs)
            mine = batch.slice(*self._balance.slice(len(batch), self._rank))
            if len(mine) == 0:  # a final, truncated batch smaller than the world: contribute nothing
                self._pending = _Pending(mine, len(batch), mine)
                self._last_samples = mine
                self.step()
                continue
            parts = 1 if self._inspecting is None else Probe.splits(self._counters.step, len(mine))
            for i in range(parts):
                part = mine if parts == 1 else mine.slice(*local_range(len(mine), parts, i))
                self._pending = _Pending(part, len(batch), mine, final=i == parts - 1)
                self._last_samples = part
                data = tree_map(self._to_device, collate_fn(_fetch(dataset, part.indices)))
                self._pending.handed_at = time.perf_counter()
                yield data
                if self._pending is not None:
                    raise RuntimeError("call s.step() once for every batch from s.batches()")
        self._finish()

    def step(self, loss: torch.Tensor | float | None = None) -> bool:
        """Average the gradients over all ranks, apply the optimizer, zero the gradients and advance
        the data position; then, at this step boundary, carry out any new membership.

        Returns whether this call applied an update: False when the step was lost to a worker
        failure (the ranks have then been re-formed and re-synced from the survivor with the most
        progress, and training simply continues) and for a micro-batch that is not its step's last
        (job inspection: the update comes with the step's last micro-batch).
        """
        pending, self._pending = self._pending, None
        if pending is None:
            raise RuntimeError("s.step() needs a batch from s.batches() first")
        probe = self._inspecting if self._counters.step >= INSPECT_WARMUP else None
        timing = probe is not None or self._balance.active
        entered = self._finished_at() if timing else time.perf_counter()
        if probe is not None and len(pending.samples):
            probe.timings.append((len(pending.samples), entered - pending.handed_at))
        weight = len(pending.samples) / pending.global_size  # the mean-loss gradient of the global batch
        loss_sum = float(loss.detach() if isinstance(loss, torch.Tensor) else (loss or 0.0)) * weight
        loss_weight = weight if loss is not None else 0.0
        if not pending.final:
            self._keep(weight, loss_sum, loss_weight)
            return False
        carry, self._carry = self._carry, None
        if carry is not None:
            loss_sum += carry.loss_sum
            loss_weight += carry.loss_weight
        newest = self._store.add(GENERATION_KEY, 0) if self._rank == 0 else 0
        check = self._counters.step % REPLICA_CHECK_STEPS == 0
        digest = self._replica_digest() if check else 0
        timed = [0.0] * (self.world_size if self._balance.active else 0)  # this step's seconds per sample
        if timed and carry is None and len(pending.samples):  # a whole local batch (not micro-batches)
            timed[self._rank] = (entered - pending.handed_at) / len(pending.samples)
        control = torch.tensor([loss_sum, loss_weight, newest, digest, digest * digest, *timed],
                               dtype=torch.float64, device=self.device)
        buckets = gradient_buckets(self._model, weight)
        if carry is not None:
            for (flat, _), kept in zip(buckets, carry.flats):
                flat.add_(kept)
        works = [dist.all_reduce(control, async_op=True)]
        works += [dist.all_reduce(flat, async_op=True) for flat, _ in buckets]
        waiting = time.perf_counter()
        try:
            for work in works:
                group.wait(work, self._failure_announced)
        except group.CollectiveFailed:
            self._recover(works)
            return False
        waited = time.perf_counter() - waiting
        loss_sum, loss_weight, target, digests, squares, *timed = control.tolist()
        if check:
            self._check_replicas(digests, squares)
        for flat, params in buckets:
            for p, g in zip(params, torch._utils._unflatten_dense_tensors(flat, params)):
                p.grad = g
        self._stepping = True
        try:
            self._optimizer.step()
        finally:
            self._stepping = False
        self._optimizer.zero_grad(set_to_none=True)
        self._counters.step += 1
        self._counters.samples += pending.global_size
        self._counters.position = self._counters.position.advanced(pending.global_size, self._dataset_len)
        self._has_state = self._clean = True
        self._last_samples = pending.whole
        self._balance.observe(timed, pending.global_size)
        if probe is not None:
            probe.overheads.append(self._finished_at() - entered - waited)
        if self._inspecting is not None and self._counters.step >= INSPECT_STEPS:
            self._inspected()
        self._account(pending.global_size, loss_sum, loss_weight)
        if int(target) > self.generation:
            self._transition(int(target))
        return True

    def _finished_at(self) -> float:
        """The time once the device has done what was launched on it: CUDA runs kernels asynchronously,
        so without the wait a GPU step would be timed by its launches (job inspection and the batch
        balance would see a fast CPU, not the GPU). Only steps that are timed pay for it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def _finish(self) -> None:
        """End of training: rank 0 saves and reports; nobody exits before that is on record."""
        if self._inspecting is not None:  # training ended within the inspected steps
            self._inspected()
        if self._rank == 0:
            self._checkpoint()
            self._report()
            self._store.set(FINISHED_KEY, str(self._counters.step))
        self._store.wait([FINISHED_KEY])

    def _to_device(self, x: Any) -> Any:
        return x.to(self.device, non_blocking=True) if isinstance(x, torch.Tensor) else x


def _fetch(dataset: Any, indices: Sequence[int]) -> list[Any]:
    """Samples as a list, through the dataset's batched ``__getitems__`` when it has one."""
    if hasattr(dataset, "__getitems__"):
        return dataset.__getitems__(list(indices))
    return [dataset[i] for i in indices]


def session(env: WorkerEnv | None = None) -> Session:
    """The session of this worker, configured from the CODDL_* environment variables (see
    ``coddl.elastic.protocol``); without CODDL_STORE_ADDR it runs standalone with world size 1."""
    return Session(env if env is not None else WorkerEnv.from_environ())
