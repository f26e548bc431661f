"""The configured queues (``coddl.runtime.queues`` validates them) and what their ceilings are
checked against: the jobs each owner has waiting."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from sqlalchemy import delete, func, select

from coddl.core.job import JobStatus
from coddl.runtime.store.connection import Database, tolerant
from coddl.runtime.store.schema import JobRow, QueueRow


@dataclass
class _QueueCache:
    rows: list[tuple[str, dict]] | None = None
    generation: int = 0  # grows at every committed change
    lock: threading.Lock = field(default_factory=threading.Lock)


class QueueStore(Database):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        # the queues as last read: every change goes through update_queues, which drops them (shared
        # with the fenced views, which are shallow copies)
        self._queues = _QueueCache()

    def queues(self) -> list[tuple[str, dict]]:
        """The configured queues in order: (name, settings). Kept from the last read until this store
        changes them (``update_queues``): every submission checks its queue's ceiling, and a server is
        the only writer of its database's queues while it runs (a second one is refused)."""
        cache = self._queues
        with cache.lock:
            if cache.rows is not None:
                return [(name, dict(settings)) for name, settings in cache.rows]
            generation = cache.generation
        rows = self._read_queues()
        with cache.lock:
            if cache.generation == generation:  # no change committed while this read ran
                cache.rows = rows
        return [(name, dict(settings)) for name, settings in rows]

    @tolerant
    def _read_queues(self) -> list[tuple[str, dict]]:
        with self._r() as s:
            return [(r.name, r.settings) for r in s.scalars(select(QueueRow).order_by(QueueRow.position))]

    def update_queues(self, change: Callable[[list[tuple[str, dict]]], list[tuple[str, dict]]]) -> list[tuple[str, dict]]:
        """Replace the queues with ``change(current)`` in one write transaction, so two admins' edits
        never interleave; ``change`` validates and may raise, which leaves the queues as they were."""
        with self._w() as s:
            current = [(r.name, r.settings) for r in s.scalars(select(QueueRow).order_by(QueueRow.position))]
            new = change(current)
            s.execute(delete(QueueRow))
            s.flush()
            s.add_all(QueueRow(name=name, position=i, settings=settings) for i, (name, settings) in enumerate(new))
        with self._queues.lock:  # committed: the next read sees the new queues
            self._queues.generation += 1
            self._queues.rows = None
        return new

    @tolerant
    def waiting_by_owner(self) -> dict[str, int]:
        """Per owner: jobs waiting for GPUs (queued or suspended, no cancel requested)."""
        with self._r() as s:
            q = (select(JobRow.owner, func.count())
                 .where(JobRow.status.in_((JobStatus.QUEUED.value, JobStatus.SUSPENDED.value)),
                        JobRow.cancel_requested.is_(False)).group_by(JobRow.owner))
            return {owner: n for owner, n in s.execute(q)}
