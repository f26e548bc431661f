"""The coordinator half of the protocol (see ``coddl.elastic.protocol``): hosts the job's store,
posts memberships and reads what the workers report. It starts no processes, so the same object serves
the local ``ElasticJob`` and a multi-node executor whose workers live elsewhere.
"""

from __future__ import annotations

import datetime
import socket
import threading
from typing import Callable, Sequence, TypeVar

from coddl.elastic.failure import Failure, failure_key
from coddl.elastic.kvstore import KVServer, KVState, LocalStore, new_secret
from coddl.elastic.protocol import (
    FINISHED_KEY,
    GENERATION_KEY,
    INSPECTION_KEY,
    PROGRESS_KEY,
    Inspection,
    Membership,
    Progress,
    arrived_key,
    complete_key,
    hash_key,
    membership_key,
)
from coddl.waiting import WaitTimeout, wait_until

R = TypeVar("R")


class Coordinator:
    """Owner of one job's long-lived store (``coddl.elastic.kvstore``).

    The store listens on ``host`` only — loopback for a job on this host, the cluster interface when
    workers run on other nodes — and serves only clients holding ``secret``: ``address`` and
    ``secret`` are what the job's workers receive (CODDL_STORE_ADDR, CODDL_STORE_KEY). With
    ``serve=False`` nothing listens (a standalone session of one worker uses ``store`` in process).
    """

    def __init__(self, host: str = "127.0.0.1", timeout_s: float = 30.0, serve: bool = True,
                 listener: socket.socket | None = None) -> None:
        self.secret = new_secret()
        self.state = KVState()
        self.store = LocalStore(self.state, datetime.timedelta(seconds=timeout_s))
        self._server = KVServer(self.state, self.secret, host, listener) if serve else None
        self.address = self._server.address if self._server is not None else None
        self._lock = threading.Lock()  # posting and announcing happen in order, from several threads
        self._membership = Membership(0, (), "none")
        self.store.add(GENERATION_KEY, 0)

    def close(self) -> None:
        """Stop serving; connected workers see their store go away."""
        if self._server is not None:
            self._server.close()

    @property
    def membership(self) -> Membership:
        return self._membership

    def post(self, members: Sequence[str], reason: str, announce: bool = True) -> Membership:
        """Write the next membership's record; announce it to running ranks now or (``announce=False``,
        to let new workers start up first) later with ``announce``."""
        with self._lock:
            m = Membership(self._membership.generation + 1, tuple(members), reason)
            self.store.set(membership_key(m.generation), m.dumps())
            self._membership = m
        if announce:
            self.announce(m)
        return m

    def announce(self, membership: Membership) -> None:
        """Running ranks switch to ``membership`` at their next step boundary."""
        with self._lock:
            self.store.set(GENERATION_KEY, str(membership.generation))

    def arrived(self, generation: int) -> int:
        """How many workers started for ``generation`` are ready to join it."""
        return self.store.add(arrived_key(generation), 0)

    def is_complete(self, generation: int) -> bool:
        return self.store.check([complete_key(generation)])

    def wait_complete(self, generation: int, timeout_s: float, poll_s: float = 0.001) -> bool:
        """Poll (a blocking store wait logs a warning on every timeout) until ``generation`` trains."""
        try:
            return wait_until(lambda: self.is_complete(generation), timeout_s,
                              f"generation {generation} did not train", interval=poll_s)
        except WaitTimeout:
            return False

    def progress(self) -> Progress | None:
        return self._report(PROGRESS_KEY, Progress.loads)

    def inspection(self) -> Inspection | None:
        """Rank 0's measurements of the job's first steps, once it has reported them."""
        return self._report(INSPECTION_KEY, Inspection.loads)

    def _report(self, key: str, loads: Callable[[bytes], R]) -> R | None:
        raw = self.state.data.get(key)
        if raw is None:
            return None
        try:
            return loads(raw)
        except (ValueError, TypeError, KeyError):
            return None  # not a report rank 0 wrote: the job's own code overwrote it

    def finished(self) -> bool:
        return self.store.check([FINISHED_KEY])

    def failure(self, worker_id: str) -> Failure | None:
        """Why ``worker_id``'s script failed, if it said so before exiting (``coddl.elastic.failure``)."""
        raw = self.state.data.get(failure_key(worker_id))
        return None if raw is None else Failure.loads(raw)

    def state_hashes(self, generation: int, world_size: int) -> list[str]:
        """The state hashes the ranks of ``generation`` report when run with CODDL_VERIFY=1."""
        return [self.store.get(hash_key(generation, r)).decode() for r in range(world_size)]
