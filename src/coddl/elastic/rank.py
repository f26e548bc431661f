"""What every part of a rank's session shares: the job's environment, this process's device and
backend, the job's store, the model and optimizer, the current membership and this rank's place in
it, the training counters and how the global batch is cut. The parts (``regroup``, ``reporting``,
``inspection``, ``replicas``) build on it and ``coddl.elastic.session.Session`` combines them."""

from __future__ import annotations

import torch
import torch.distributed as dist

from coddl.elastic import group, state
from coddl.elastic.balance import Balancer, type_key
from coddl.elastic.coordinator import Coordinator
from coddl.elastic.data import BatchRule
from coddl.elastic.protocol import Membership, WorkerEnv


class RankState:
    """The state itself; each part adds its own in its ``__init__``."""

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
        self._global_batch = 0
        self._regroup_s: float | None = None
        self._rule: BatchRule | None = None
        self._balance = Balancer.alone()  # how the global batch is cut between the ranks (see _sync)
        self._device_key = type_key(env.device_type or group.device_name(self.device))

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return len(self._membership.members)

    @property
    def generation(self) -> int:
        return self._membership.generation
