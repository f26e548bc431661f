"""The coordinator half of the protocol (see ``coddl.elastic.protocol``): hosts the job's TCPStore,
posts memberships and reads what the workers report. It starts no processes, so the same object serves
the local ``ElasticJob`` and a multi-node executor whose workers live elsewhere.
"""

from __future__ import annotations

import datetime
import threading
import time
from typing import Sequence

import torch.distributed as dist

from coddl.elastic.protocol import (
    FINISHED_KEY,
    GENERATION_KEY,
    PROGRESS_KEY,
    Membership,
    Progress,
    arrived_key,
    complete_key,
    hash_key,
    membership_key,
)


class Coordinator:
    """Owner of one job's long-lived TCPStore; ``address`` is what workers put in CODDL_STORE_ADDR.

    The server listens on every interface; ``host`` is the name workers use to reach it.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 30.0) -> None:
        self.store = dist.TCPStore(
            host, port, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=timeout_s)
        )
        self.address = f"{host}:{self.store.port}"
        self._lock = threading.Lock()  # the store client is shared by the caller and a monitor thread
        self._membership = Membership(0, (), "none")
        self.store.add(GENERATION_KEY, 0)

    @property
    def membership(self) -> Membership:
        return self._membership

    def post(self, members: Sequence[str], reason: str, announce: bool = True) -> Membership:
        """Write the next membership's record; announce it to running ranks now or (``announce=False``,
        to let new workers start up first) later with ``announce``."""
        with self._lock:
            m = Membership(self._membership.generation + 1, tuple(members), reason)
            self.store.set(membership_key(m.generation), m.dumps())
            self._written()
            self._membership = m
        if announce:
            self.announce(m)
        return m

    def announce(self, membership: Membership) -> None:
        """Running ranks switch to ``membership`` at their next step boundary."""
        with self._lock:
            self.store.set(GENERATION_KEY, str(membership.generation))
            self._written()

    def _written(self) -> None:
        """Return only once the store has applied our writes. A TCPStore ``set`` sends without waiting
        for a reply, and the server serves each connection in turn, so a worker asking just after
        ``post`` returned could otherwise still read the old generation. Any request that answers on
        this connection comes after the writes before it."""
        self.store.check([GENERATION_KEY])

    def arrived(self, generation: int) -> int:
        """How many workers started for ``generation`` are ready to join it."""
        with self._lock:
            return self.store.add(arrived_key(generation), 0)

    def is_complete(self, generation: int) -> bool:
        with self._lock:
            return self.store.check([complete_key(generation)])

    def wait_complete(self, generation: int, timeout_s: float, poll_s: float = 0.001) -> bool:
        """Poll (a blocking store wait logs a warning on every timeout) until ``generation`` trains."""
        deadline = time.monotonic() + timeout_s
        while not self.is_complete(generation):
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)
        return True

    def progress(self) -> Progress | None:
        with self._lock:
            if not self.store.check([PROGRESS_KEY]):
                return None
            return Progress.loads(self.store.get(PROGRESS_KEY))

    def finished(self) -> bool:
        with self._lock:
            return self.store.check([FINISHED_KEY])

    def state_hashes(self, generation: int, world_size: int) -> list[str]:
        """The state hashes the ranks of ``generation`` report when run with CODDL_VERIFY=1."""
        with self._lock:
            return [self.store.get(hash_key(generation, r)).decode() for r in range(world_size)]
