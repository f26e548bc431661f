"""The store's connection to its database: engines, the write lock, transactions, tolerant reads.

SQLite notes: WAL lets the API read while the controller writes; ``synchronous=NORMAL`` keeps every
committed transaction across a process crash (SIGKILL) and only risks the last ones on power loss.
Write transactions start with ``BEGIN IMMEDIATE`` so two writers queue on the busy timeout instead
of failing when a read lock cannot be upgraded.

PostgreSQL notes (``postgresql+psycopg://USER@HOST/DB``; a plain ``postgresql://`` means psycopg 3 too):
every write transaction first takes one transaction-level advisory lock, so writers queue exactly as
they do on SQLite and a read-then-write (the epoch, a cancel request next to the controller finishing
the job, two processes creating the tables) never interleaves; readers never wait for it. PostgreSQL
refuses NUL characters in text, so messages (the last line of a worker's log) have them replaced.
"""

from __future__ import annotations

import copy
import functools
import json
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Self, TypeVar

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from coddl.runtime.limits import MAX_STORE_INT
from coddl.runtime.store.schema import Base, add_missing_columns

MAX_ID = MAX_STORE_INT  # ids are INTEGER columns: 32-bit on PostgreSQL, so a larger id names no job
WRITE_LOCK = 0x636F64646C  # "coddl": the PostgreSQL advisory lock every write transaction holds


def _json_or_placeholder(raw: str) -> Any:
    """A JSON column's value; text that is not JSON (a row damaged outside coddl) reads as a marker
    instead of failing every query that touches the row."""
    try:
        return json.loads(raw)
    except ValueError:
        return {"unreadable": raw[:60]}


def _decode_or_replace(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


R = TypeVar("R")


def tolerant(read: Callable[..., R]) -> Callable[..., R]:
    """A read that, on SQLite, retries with undecodable text replaced (U+FFFD) when a row holds bytes
    that are not UTF-8 (written outside coddl): the row is shown, not turned into an error. Only the
    retry pays for the replacing decoder; normal reads keep sqlite3's own."""

    @functools.wraps(read)
    def wrapper(self: Database, *args: Any, **kwargs: Any) -> R:
        try:
            return read(self, *args, **kwargs)
        except OperationalError as e:
            if not self.sqlite or "decode" not in str(e.orig):
                raise
        self._local.tolerant = True
        try:
            return read(self, *args, **kwargs)
        finally:
            self._local.tolerant = False

    return wrapper


def sqlite_url(state_dir: Path) -> str:
    return f"sqlite:///{Path(state_dir).resolve() / 'coddl.db'}"


def database_url(url: str) -> URL:
    """``url`` parsed, with a driverless ``postgresql://`` sent to psycopg 3 (the ``postgres`` extra):
    SQLAlchemy's default there is psycopg2, which coddl does not depend on."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql+psycopg") if parsed.drivername == "postgresql" else parsed


class Database:
    """The connection every part of the store shares: read and write sessions, the write lock, the
    fence. Thread-safe (a session per call). Creates the tables (and columns added since) on open."""

    def __init__(self, url: str) -> None:
        self.url = url
        parsed = database_url(url)
        self.sqlite = parsed.get_backend_name() == "sqlite"
        self.postgres = parsed.get_backend_name() == "postgresql"
        self._read = self._engine(parsed, immediate=False)
        # writes read few rows, so they always replace undecodable text (a recovery never stops on one)
        self._write_engine = self._engine(parsed, immediate=True, replace_undecodable=True) if self.sqlite else self._read
        with self._write_engine.begin() as conn:
            self._lock(conn)
            Base.metadata.create_all(conn)
            add_missing_columns(conn)
        self._reads = sessionmaker(self._read, expire_on_commit=False)
        self._writes = sessionmaker(self._write_engine, expire_on_commit=False)
        self._local = threading.local()  # per thread: is this read the tolerant retry?
        self._tolerant_engine: Engine | None = None
        self._tolerant_reads: sessionmaker | None = None
        self._fence: Callable[[Session], None] | None = None

    def fenced(self, fence: Callable[[Session], None]) -> Self:
        """The same store, with ``fence`` run at the start of every write transaction (it raises to
        refuse the write). The server gives its controller one fenced by its lease, so that a server
        that lost its lease cannot write a plan (see ``coddl.runtime.lease``)."""
        view = copy.copy(self)
        view._fence = fence
        return view

    def _engine(self, url: URL, immediate: bool, replace_undecodable: bool = False) -> Engine:
        if not self.sqlite:
            return create_engine(url, pool_pre_ping=True, json_deserializer=_json_or_placeholder)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               json_deserializer=_json_or_placeholder)

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001 - DB-API connection
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (below)
            if replace_undecodable:
                dbapi_conn.text_factory = _decode_or_replace
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _begin(conn) -> None:  # noqa: ANN001 - SQLAlchemy connection
            conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

        return engine

    def close(self) -> None:
        self._read.dispose()
        if self._write_engine is not self._read:
            self._write_engine.dispose()
        if self._tolerant_engine is not None:
            self._tolerant_engine.dispose()

    def _lock(self, conn: Connection | Session) -> None:
        """Make this write transaction wait for any other: SQLite's ``BEGIN IMMEDIATE`` already did;
        on PostgreSQL the advisory lock does (released at commit or rollback)."""
        if self.postgres:
            conn.execute(select(func.pg_advisory_xact_lock(WRITE_LOCK)))

    @contextmanager
    def _w(self) -> Iterator[Session]:
        with self._writes.begin() as s:
            self._lock(s)
            if self._fence is not None:
                self._fence(s)
            yield s

    def transaction(self) -> Iterator[Session]:
        """A write transaction, queued behind every other writer (for modules with tables of their own)."""
        return self._w()

    @contextmanager
    def _r(self) -> Iterator[Session]:
        reads = self._reads
        if getattr(self._local, "tolerant", False):
            if self._tolerant_reads is None:
                self._tolerant_engine = self._engine(database_url(self.url), immediate=False, replace_undecodable=True)
                self._tolerant_reads = sessionmaker(self._tolerant_engine, expire_on_commit=False)
            reads = self._tolerant_reads
        with reads() as s:
            yield s
