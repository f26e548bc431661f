"""How a rank changes membership: joining a generation (or leaving it), a planned resize at a clean
step boundary, recovering from a lost collective, and making every rank's state identical afterwards.
See ``coddl.elastic.protocol`` for how membership changes reach the ranks."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from coddl.elastic import group, state
from coddl.elastic.balance import Balancer, RankInfo
from coddl.elastic.protocol import (
    FINISHED_KEY,
    GENERATION_KEY,
    REASON_FAILURE,
    REASON_RESTART,
    Membership,
    WorkerEnv,
    complete_key,
    hash_key,
    membership_key,
    ready_key,
)
from coddl.elastic.reporting import Reporting, Window
from coddl.waiting import WaitTimeout, wait_until


class Departed(SystemExit):
    """Raised on a rank that is not in the new membership; as a SystemExit(0) it ends the worker cleanly."""

    def __init__(self) -> None:
        super().__init__(0)


class Regrouping(Reporting):
    """Membership changes; a planned one reports and (when nobody survives) checkpoints first, and
    every join starts a fresh report window."""

    def __init__(self, env: WorkerEnv) -> None:
        super().__init__(env)
        self._seen_failure: dict[int, bool] = {}

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
        self._window = Window(time.perf_counter())
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
