"""The store: the real system's source of truth (SQLAlchemy 2; SQLite in WAL mode by default, or PostgreSQL).

Every job, state change and allocation is written here BEFORE it is acted on — a submission before
the scheduler sees it, a plan before the executor carries it out, a cancel request before the job is
stopped — so a controller killed at any instant restarts from the store and loses nothing it had
accepted. The controller is the only writer of job state; the API writes submissions, cancel
requests and tokens. Readers get plain frozen dataclasses, never ORM objects bound to a session
(``views.py``); the tables are in ``schema.py``.

``Store`` is composed of one part per job, each a class over the shared connection
(``connection.py``: engines, the write lock, transactions; SQLite and PostgreSQL notes):
``meta.py`` (the epoch, key-values), ``queues.py`` (the configured queues), ``tokens.py`` (API tokens),
``jobs.py`` (submissions, cancel requests, job reads, admission), ``history.py`` (events, samples,
profiles, the event log), ``ledger.py`` (the controller's plans, progress and each job's end) and
``recovery.py`` (a restarted controller's take-over).
"""

from __future__ import annotations

from pathlib import Path

from coddl.runtime.store.connection import MAX_ID, WRITE_LOCK, Database, database_url, sqlite_url, tolerant
from coddl.runtime.store.history import HistoryStore
from coddl.runtime.store.jobs import JobStore
from coddl.runtime.store.ledger import LedgerStore
from coddl.runtime.store.meta import MetaStore
from coddl.runtime.store.queues import QueueStore
from coddl.runtime.store.recovery import RecoveryStore
from coddl.runtime.store.schema import (
    AllocationRow,
    EventRow,
    JobRow,
    MetaRow,
    ProfileRow,
    QueueRow,
    SampleRow,
    TokenRow,
)
from coddl.runtime.store.tokens import LastAdmin, TokenStore, digest
from coddl.runtime.store.views import (
    TERMINAL,
    EventView,
    JobView,
    LoggedEvent,
    ProgressUpdate,
    SampleView,
    TokenView,
    User,
)

__all__ = [
    "MAX_ID", "WRITE_LOCK", "TERMINAL", "Store", "Database", "LastAdmin", "digest", "database_url", "sqlite_url",
    "tolerant", "AllocationRow", "EventRow", "JobRow", "MetaRow", "ProfileRow", "QueueRow", "SampleRow", "TokenRow",
    "EventView", "JobView", "LoggedEvent", "ProgressUpdate", "SampleView", "TokenView", "User",
]


class Store(MetaStore, QueueStore, TokenStore, JobStore, HistoryStore, LedgerStore, RecoveryStore):
    """All reads and writes of the real system's state. Thread-safe (a session per call)."""

    @staticmethod
    def for_state_dir(state_dir: Path) -> Store:
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        return Store(sqlite_url(state_dir))
