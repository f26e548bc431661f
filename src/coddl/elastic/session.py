"""The training-script side: ``with session() as s`` joins the job, ``s.wrap`` syncs the replicas,
``s.batches`` hands out this rank's slice of every global batch and ``s.step`` applies one update.

Every rank runs the same loop; the step boundary (inside ``step()``, after the optimizer update) is
the only place where the world size changes, so user code never sees a half-applied resize. See
``coddl.elastic.protocol`` for how membership changes reach the ranks.

Job inspection (CODDL_INSPECT=1, set by the controller for a job it has no profile of): after
``INSPECT_WARMUP`` steps (the first steps of a fresh process run slow: allocations, caches, the
other ranks still starting), each rank hands its local batch out as 1, 2 or 4 micro-batches in
turn for ``INSPECT_ROUNDS`` rounds, and the script's forward and backward pass over each is timed
(from the batch handed out to ``step()``). ``step()`` on a micro-batch that is not the step's last keeps its gradient, weighted by
its share of the global batch, and applies nothing; the step's last one adds them up, all-reduces
and updates once. Every sample is trained on exactly once and the update is the one the whole local
batch gives (equal up to floating-point rounding of the sum), so inspection costs the user nothing
but the micro-batches' lower efficiency during those steps. What rank 0 measured — gradient bytes,
compute seconds per local batch, the step's own overhead — goes to the store once (``Inspection``).
A model whose forward pass depends on the batch as a whole (batch normalisation) sees micro-batches
there, as it sees smaller local batches when the job runs on more GPUs.

Gradients are averaged by our own all-reduce instead of DistributedDataParallel: DDP binds itself to
one process group and would have to be rebuilt on every regroup, and owning the all-reduce lets a
three-number control message (loss, loss weight, newest generation) ride along in the same step.
"""

from __future__ import annotations

import datetime
import hashlib
import random
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch.utils._pytree import tree_map
from torch.utils.data import default_collate

from coddl.elastic import group, state
from coddl.elastic.balance import Balancer, RankInfo, type_key
from coddl.elastic.coordinator import Coordinator
from coddl.elastic.data import BatchRule, Samples, SampleOrder, local_range
from coddl.elastic.failure import ScriptMistake
from coddl.elastic.kvstore import KVClient
from coddl.elastic.protocol import (
    FINISHED_KEY,
    GENERATION_KEY,
    INSPECTION_KEY,
    PROGRESS_KEY,
    REASON_FAILURE,
    REASON_RESTART,
    REASON_START,
    Inspection,
    Membership,
    Progress,
    WorkerEnv,
    arrived_key,
    complete_key,
    hash_key,
    membership_key,
    ready_key,
    split_addr,
)
from coddl.waiting import WaitTimeout, wait_until


REPLICA_CHECK_STEPS = 10  # every this many steps the ranks compare a digest of their parameters
INSPECT_SPLITS = (1, 2, 4)  # micro-batches per step while inspecting, in turn: local batches b, b/2, b/4
INSPECT_ROUNDS = 3  # each split this many times (the median counts)
INSPECT_WARMUP = 10  # whole steps before the timed ones
INSPECT_STEPS = INSPECT_WARMUP + len(INSPECT_SPLITS) * INSPECT_ROUNDS  # the job's inspected steps end here

_opened = False  # whether this process ever entered a session (a job's script must)
_current: Session | None = None


def session_opened() -> bool:
    return _opened


def current_generation() -> int | None:
    """The membership generation of this process's open session, if any (for failure reports)."""
    return _current.generation if _current is not None else None


class Departed(SystemExit):
    """Raised on a rank that is not in the new membership; as a SystemExit(0) it ends the worker cleanly."""

    def __init__(self) -> None:
        super().__init__(0)


@dataclass
class _Pending:
    """The (micro-)batch handed to the user and not yet stepped on; ``whole`` is this rank's whole
    slice of the step, and ``final`` whether stepping on this batch completes the step."""

    samples: Samples
    global_size: int
    whole: Samples
    final: bool = True
    handed_at: float = 0.0


@dataclass
class _Carry:
    """Weighted gradients and loss of a step's micro-batches stepped on so far (inspection)."""

    flats: list[torch.Tensor]
    loss_sum: float
    loss_weight: float


@dataclass
class _Probe:
    """Rank-local timings of the inspected steps."""

    timings: list[tuple[int, float]]
    overheads: list[float]

    @staticmethod
    def splits(step: int, local: int) -> int:
        if step < INSPECT_WARMUP:
            return 1
        return max(1, min(INSPECT_SPLITS[(step - INSPECT_WARMUP) % len(INSPECT_SPLITS)], local))


@dataclass
class _Window:
    """What happened since rank 0's last progress report."""

    start: float
    steps: int = 0
    samples: int = 0
    loss_sum: float = 0.0
    loss_weight: float = 0.0


class Session:
    """One worker's membership in an elastic data-parallel job. Create it with ``session()``."""

    def __init__(self, env: WorkerEnv) -> None:
        self._env = env
        self._backend, self.device = group.select_backend()
        self._coordinator: Coordinator | None = None
        self._store: dist.Store | None = None
        self._model: torch.nn.Module | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._membership = Membership(0, (), "none")
        self._rank = 0
        self._counters = state.Counters()
        self._has_state = False  # holds trained or restored state (a fresh process does not)
        self._clean = True  # last step completed everywhere (False after an abandoned collective)
        self._departing = False
        self._pending: _Pending | None = None
        self._last_samples: Samples | None = None
        self._global_batch = 0
        self._dataset_len = 0
        self._window = _Window(time.perf_counter())
        self._last_checkpoint = time.monotonic()
        self._seen_failure: dict[int, bool] = {}
        self._regroup_s: float | None = None
        self._stepping = False  # inside our own optimizer.step()
        self._probe: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # see _replica_digest
        self._inspecting: _Probe | None = None  # timings of the first steps (CODDL_INSPECT)
        self._carry: _Carry | None = None
        self._rule: BatchRule | None = None
        self._hook: Any = None
        self._balance = Balancer.alone()  # how the global batch is cut between the ranks (see _sync)
        self._device_key = type_key(env.device_type or group.device_name(self.device))

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
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return len(self._membership.members)

    @property
    def generation(self) -> int:
        return self._membership.generation

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
            self._inspecting = _Probe([], [])
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
            parts = 1 if self._inspecting is None else _Probe.splits(self._counters.step, len(mine))
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
        buckets = self._gradient_buckets(weight)
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
        if check and self.world_size * int(squares) != int(digests) ** 2:  # equal iff every rank's digest is
            raise ScriptMistake(
                f"the replicas' parameters differ at step {self._counters.step}: the script changes them outside "
                "s.step() (it calls optimizer.step() itself, or updates parameters by hand), so the ranks no "
                "longer train one model")
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

    # ---- membership ------------------------------------------------------------------------------

    def _enter(self, generation: int) -> None:
        """Join ``generation`` (or leave, if not a member); on a failure during the join, wait for the
        coordinator's next membership and join that one instead."""
        carried = self._balance.known(self._rank) if self._rank < len(self._balance.ranks) else 0.0
        while True:
            self._membership = Membership.loads(self._store.get(membership_key(generation)))
            if self._env.worker_id not in self._membership.members:
                self._departing = True
                return
            self._rank = self._membership.members.index(self._env.worker_id)
            try:
                group.form(self._store, generation, self._rank, self.world_size, self._backend,
                           self._env.pg_timeout_s)
                self._sync(carried)
            except (group.CollectiveFailed, dist.DistError):
                group.dissolve(pending=[])
                self._clean = False
                generation = self._await_generation(generation + 1)
                continue
            self._announce_ready()
            return

    def _transition(self, generation: int) -> None:
        """A planned membership change at a clean step boundary."""
        nxt = Membership.loads(self._store.get(membership_key(generation)))
        survivors = set(self._membership.members) & set(nxt.members)
        if self._rank == 0:
            self._report()
            if not survivors:  # a stop (or a move to all-new workers): keep the progress on disk
                self._checkpoint()
        start = time.perf_counter()
        group.dissolve()
        self._enter(generation)
        self._regrouped(start)

    def _recover(self, works: list[dist.Work]) -> None:
        """After a lost collective: drop the group, wait for the coordinator's failure membership, rejoin."""
        start = time.perf_counter()
        group.dissolve(pending=works)
        self._clean = False
        self._enter(self._await_generation(self.generation + 1))
        self._regrouped(start)

    def _regrouped(self, start: float) -> None:
        self._regroup_s = time.perf_counter() - start
        self._joined()

    def _joined(self) -> None:
        """Start a fresh report window (its rates must belong to the new world size alone) and, with
        CODDL_VERIFY, publish the state hash; both happen after the regroup's measured pause."""
        self._window = _Window(time.perf_counter())
        if self._env.verify and not self._departing:
            self._store.set(hash_key(self.generation, self._rank), state.state_hash(self._model, self._optimizer))

    def _await_generation(self, at_least: int, poll_s: float = 0.01) -> int:
        """The newest announced generation, once it is ``at_least``. If training ends meanwhile (a grow
        requested just before the last step), there is nothing left to join: leave."""
        newest = 0

        def announced() -> bool:
            nonlocal newest
            if (newest := self._store.add(GENERATION_KEY, 0)) >= at_least:
                return True
            if self._store.check([FINISHED_KEY]):
                raise Departed()
            return False

        try:
            wait_until(announced, 2 * self._env.pg_timeout_s,
                       f"the coordinator announced no generation >= {at_least}", interval=poll_s)
        except WaitTimeout as e:
            raise RuntimeError(str(e)) from None
        return newest

    def _failure_announced(self) -> bool:
        """Whether the coordinator has posted a failure membership newer than ours (cached per generation)."""
        newest = self._store.add(GENERATION_KEY, 0)
        if newest <= self.generation:
            return False
        if newest not in self._seen_failure:
            m = Membership.loads(self._store.get(membership_key(newest)))
            self._seen_failure[newest] = m.reason in (REASON_FAILURE, REASON_RESTART)
        return self._seen_failure[newest]

    def _sync(self, carried_s_per_sample: float) -> None:
        """Make every rank's state identical, copying only to the ranks that need it, and agree on how
        the global batch is cut (``coddl.elastic.balance``: each rank's device type and what it
        measured before, ``carried_s_per_sample``, travel in the same all-gather).

        All ranks share (has state, clean, step). Clean holders at one step (the survivors of a planned
        resize) are consistent: each newcomer gets the state from one of them, several copies running in
        parallel, and the survivors themselves receive nothing (after a shrink nothing moves at all).
        Otherwise (a failure left survivors at different steps) the holder with the most progress sends
        to everyone else; if nobody holds state, rank 0 loads the checkpoint (or keeps the seeded
        initial model) and sends that.
        """
        brings = RankInfo(self._device_key, self._env.device_speed, carried_s_per_sample)
        mine = torch.tensor([int(self._has_state), int(self._clean), self._counters.step, *brings.row()],
                            dtype=torch.float64, device=self.device)
        rows = [torch.zeros_like(mine) for _ in range(self.world_size)]
        dist.all_gather(rows, mine)
        table = [[int(x) for x in r[:3].tolist()] for r in rows]
        self._balance = Balancer(tuple(RankInfo.from_row(r[3:].tolist()) for r in rows))
        holders = [r for r, (has, _, _) in enumerate(table) if has]
        consistent = all(table[r][1] for r in holders) and len({table[r][2] for r in holders}) == 1
        if not holders:
            holders = [0]
            if self._rank == 0 and self._env.job_dir is not None:
                saved = state.load_checkpoint(self._env.job_dir)
                if saved is not None:
                    self._counters = state.restore(saved, self._model, self._optimizer)
        elif not consistent:
            holders = [max(holders, key=lambda r: (table[r][2], -r))]
        receivers = [r for r in range(self.world_size) if r not in holders]
        source = {r: holders[i % len(holders)] for i, r in enumerate(receivers)}
        if self._rank in source:
            self._counters = state.restore(state.recv(source[self._rank], self.device), self._model, self._optimizer)
        else:
            mine_to = [r for r, src in source.items() if src == self._rank]
            if mine_to:
                state.send(state.capture(self._model, self._optimizer, self._counters), mine_to, self.device)
        self._has_state = self._clean = True

    def _announce_ready(self) -> None:
        g = self.generation
        if self._store.add(ready_key(g), 1) == self.world_size:
            self._store.set(complete_key(g), str(time.time()))

    # ---- the script's mistakes --------------------------------------------------------------------

    def _outside_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if not self._stepping:
            raise ScriptMistake("the script called optimizer.step() itself: s.step(loss) averages the gradients "
                                "over the ranks and applies the update, so the script must not")

    def _replica_digest(self) -> int:
        """20 bits of a hash of a few elements of every parameter. The ranks' parameters are bit for
        bit the same after every step (one all-reduced gradient, one deterministic update), so all
        digests agree unless the script changed the parameters on its own; the ranks compare them
        through the step's control all-reduce (sum and sum of squares: equal iff all are equal)."""
        if self._probe is None:
            self._probe = [(p, torch.linspace(0, p.numel() - 1, min(4, p.numel()), device=p.device).long())
                           for p in self._model.parameters() if p.numel()]
        if not self._probe:
            return 0
        values = torch.cat([p.detach().reshape(-1).index_select(0, i).double() for p, i in self._probe])
        raw = hashlib.blake2b(values.cpu().numpy().tobytes(), digest_size=4).digest()
        return int.from_bytes(raw, "big") >> 12

    # ---- per-step bookkeeping --------------------------------------------------------------------

    def _gradient_buckets(self, weight: float) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
        """One flat, pre-weighted gradient buffer per dtype (missing gradients count as zeros)."""
        by_dtype: dict[torch.dtype, list[torch.Tensor]] = defaultdict(list)
        for p in self._model.parameters():
            if p.requires_grad:
                by_dtype[p.dtype].append(p)
        buckets = []
        for params in by_dtype.values():
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            buckets.append((torch._utils._flatten_dense_tensors(grads).mul_(weight), params))
        return buckets

    def _keep(self, weight: float, loss_sum: float, loss_weight: float) -> None:
        """A micro-batch that does not end its step: keep its weighted gradient and loss for the
        step's last micro-batch, and clear the gradients for the next one."""
        flats = [flat for flat, _ in self._gradient_buckets(weight)]
        if self._carry is None:
            self._carry = _Carry(flats, loss_sum, loss_weight)
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
        report = Inspection(int(param_bytes), tuple(probe.timings[-64:]), float(np.median(probe.overheads)),
                            self._rule.global_batch, self._rule.local_batch)
        self._store.set(INSPECTION_KEY, report.dumps())

    def _account(self, samples: int, loss_sum: float, loss_weight: float) -> None:
        w = self._window
        w.steps += 1
        w.samples += samples
        w.loss_sum += loss_sum
        w.loss_weight += loss_weight
        if self._rank != 0:
            return
        if time.perf_counter() - w.start >= self._env.report_s:
            self._report()
            self._window = _Window(time.perf_counter())
        if self._env.checkpoint_s > 0 and time.monotonic() - self._last_checkpoint >= self._env.checkpoint_s:
            self._checkpoint()

    def _report(self) -> None:
        """Publish the window (if it has steps: an empty one would only overwrite the last rates)."""
        w = self._window
        if w.steps == 0:
            return
        elapsed = max(time.perf_counter() - w.start, 1e-9)
        progress = Progress(
            generation=self.generation,
            world_size=self.world_size,
            step=self._counters.step,
            epoch=self._counters.position.epoch,
            samples=self._counters.samples,
            samples_per_s=w.samples / elapsed,
            steps_per_s=w.steps / elapsed,
            loss=w.loss_sum / w.loss_weight if w.loss_weight > 0 else None,
            global_batch=self._global_batch,
            regroup_s=self._regroup_s,
            time=time.time(),
        )
        self._store.set(PROGRESS_KEY, progress.dumps())

    def _checkpoint(self) -> None:
        if self._env.job_dir is not None:
            state.save_checkpoint(self._env.job_dir, state.capture(self._model, self._optimizer, self._counters))
        self._last_checkpoint = time.monotonic()

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
