"""The teams' queues in the real system: kept in the store (so a restart keeps what admins set), read
into the scheduler's policy over queues, and shown with what each queue holds now.

The store holds each queue's settings as validated by ``coddl.queues.config``; every change goes
through ``update`` (one write transaction: read, validate the whole set against the cluster, write),
so a set that could not work — quotas over the cluster's GPUs, a user in two queues — is refused
and nothing already stored changes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

from pydantic import ValidationError

from coddl.core.cluster import Cluster
from coddl.queues.config import QueueFields
from coddl.queues.model import DEFAULT_QUEUE, Queue, QueueError, QueueSet
from coddl.runtime.store import Store

log = logging.getLogger("coddl.queues")


def _settings(q: Queue) -> dict:
    d = q.as_json()
    del d["name"]
    return d


def stored_queues(store: Store) -> QueueSet:
    """The queues in the store; a row this version cannot read (written by another) is left out, logged."""
    queues = []
    for name, settings in store.queues():
        try:
            queues.append(QueueFields.model_validate(settings).queue(name))
        except ValidationError as e:
            log.warning("queue %s: stored settings not readable, left out: %s", name, e.errors()[0]["msg"])
    try:
        return QueueSet(tuple(queues))
    except QueueError as e:
        log.warning("stored queues not usable (%s): every job is in one queue", e)
        return QueueSet()


def update(store: Store, cluster: Cluster, change: Callable[[list[Queue]], list[Queue]]) -> QueueSet:
    """Apply ``change`` to the stored queues, atomically; QueueError (nothing written) when the new
    set cannot work on ``cluster``."""
    result: list[QueueSet] = []

    def apply(rows: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
        current = [QueueFields.model_validate(settings).queue(name) for name, settings in rows]
        new = QueueSet(tuple(change(current)))
        new.quotas(cluster.total_gpus, cluster.total_cpus)  # refuses quotas the cluster cannot hold
        result.append(new)
        return [(q.name, _settings(q)) for q in new.configured]

    store.update_queues(apply)
    return result[0]


def replace_all(store: Store, cluster: Cluster, queues: QueueSet) -> QueueSet:
    return update(store, cluster, lambda _current: list(queues.configured))


def queue_fit_problem(store: Store, cluster: Cluster, owner: str, min_gpus: int) -> str | None:
    """Why a job of ``owner`` needing ``min_gpus`` at once can never run in its queue (None: it can)."""
    queues = stored_queues(store)
    if not queues.configured:
        return None
    try:
        quotas = queues.quotas(cluster.total_gpus, cluster.total_cpus)
    except QueueError:
        return None
    i = queues.queue_of(owner)
    ceiling = int(quotas.ceiling()[0, i])
    if min_gpus <= ceiling:
        return None
    return f"needs {min_gpus} GPUs at once and queue {queues.names[i]} can hold at most {ceiling}"


@dataclass(frozen=True)
class QueueState:
    """A queue as people look at it: its settings resolved on the cluster, and what it holds now."""

    queue: Queue
    nominal_gpus: int
    ceiling_gpus: int  # the most it can ever hold (its quota and what it may borrow)
    gpus: int  # held by its jobs now
    running: int
    waiting: int

    @property
    def borrowed(self) -> int:
        return max(0, self.gpus - self.nominal_gpus)

    def as_json(self, members: bool) -> dict:
        """The settings as configured (``nominal_gpus`` None: the rest of the cluster), the quota they
        come to (``quota_gpus``), and the state; members only if ``members``."""
        q = self.queue.as_json()
        if not members:
            q.pop("users")
            q.pop("accounts")
        q.update(quota_gpus=self.nominal_gpus, ceiling_gpus=self.ceiling_gpus, gpus=self.gpus,
                 borrowed_gpus=self.borrowed, running=self.running, waiting=self.waiting,
                 implicit=self.queue == Queue(DEFAULT_QUEUE, None))
        return q


def queue_states(store: Store, cluster: Cluster, queues: QueueSet | None = None) -> list[QueueState]:
    """Every queue with its quota on ``cluster`` and the GPUs and jobs it has now (from the store)."""
    queues = stored_queues(store) if queues is None else queues
    try:
        quotas = queues.quotas(cluster.total_gpus, cluster.total_cpus)
    except QueueError:  # quotas stored for a larger cluster than this server runs on
        quotas = QueueSet().quotas(cluster.total_gpus, cluster.total_cpus)
        queues = QueueSet()
    n = len(queues.names)
    gpus, running, waiting = [0] * n, [0] * n, [0] * n
    for j in store.holders():
        i = queues.queue_of(j.owner)
        gpus[i] += len(j.gpus)
        running[i] += 1
    for owner, count in store.waiting_by_owner().items():
        waiting[queues.queue_of(owner)] += count
    ceiling = quotas.ceiling()[0]
    return [QueueState(q, int(quotas.nominal[0, i]), int(ceiling[i]), gpus[i], running[i], waiting[i])
            for i, q in enumerate(queues.queues)]
