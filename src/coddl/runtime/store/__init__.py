"""The store: the real system's source of truth (SQLAlchemy 2; SQLite in WAL mode by default, or PostgreSQL).

Every job, state change and allocation is written here BEFORE it is acted on — a submission before
the scheduler sees it, a plan before the executor carries it out, a cancel request before the job is
stopped — so a controller killed at any instant restarts from the store and loses nothing it had
accepted. The controller is the only writer of job state; the API writes submissions, cancel
requests and tokens. Readers get plain frozen dataclasses, never ORM objects bound to a session
(``views.py``); the tables are in ``schema.py``.

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
import hashlib
import json
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence, TypeVar

from sqlalchemy import bindparam, create_engine, delete, event, func, or_, select, update
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from coddl.core.allocation import Action, ActionKind
from coddl.core.job import JobStatus
from coddl.runtime.limits import MAX_STORE_INT
from coddl.runtime.store.schema import (
    AllocationRow,
    Base,
    EventRow,
    JobRow,
    MetaRow,
    ProfileRow,
    QueueRow,
    SampleRow,
    TokenRow,
    add_missing_columns,
)
from coddl.runtime.store.views import (
    TERMINAL,
    EventView,
    JobView,
    LoggedEvent,
    ProgressUpdate,
    SampleView,
    TokenView,
    User,
    event_view,
    job_view,
    token_view,
)

MAX_ID = MAX_STORE_INT  # ids are INTEGER columns: 32-bit on PostgreSQL, so a larger id names no job
WRITE_LOCK = 0x636F64646C  # "coddl": the PostgreSQL advisory lock every write transaction holds


class LastAdmin(ValueError):
    """Revoking this token would leave no active admin token."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


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
    def wrapper(self: Store, *args: Any, **kwargs: Any) -> R:
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


@dataclass
class _QueueCache:
    rows: list[tuple[str, dict]] | None = None
    generation: int = 0  # grows at every committed change
    lock: threading.Lock = field(default_factory=threading.Lock)


def sqlite_url(state_dir: Path) -> str:
    return f"sqlite:///{Path(state_dir).resolve() / 'coddl.db'}"


def database_url(url: str) -> URL:
    """``url`` parsed, with a driverless ``postgresql://`` sent to psycopg 3 (the ``postgres`` extra):
    SQLAlchemy's default there is psycopg2, which coddl does not depend on."""
    parsed = make_url(url)
    return parsed.set(drivername="postgresql+psycopg") if parsed.drivername == "postgresql" else parsed


class Store:
    """All reads and writes of the real system's state. Thread-safe (a session per call)."""

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
        # the queues as last read: every change goes through update_queues, which drops them (shared
        # with the fenced views, which are shallow copies)
        self._queues = _QueueCache()

    def fenced(self, fence: Callable[[Session], None]) -> Store:
        """The same store, with ``fence`` run at the start of every write transaction (it raises to
        refuse the write). The server gives its controller one fenced by its lease, so that a server
        that lost its lease cannot write a plan (see ``coddl.runtime.lease``)."""
        view = copy.copy(self)
        view._fence = fence
        return view

    @staticmethod
    def for_state_dir(state_dir: Path) -> Store:
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        return Store(sqlite_url(state_dir))

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

    # ------------------------------------------------------------------ meta
    def epoch(self) -> float:
        """Wall-clock time the state was created: the scheduler's clock is seconds since then, so
        arrivals and ``now`` stay comparable across controller restarts."""
        with self._w() as s:
            row = s.get(MetaRow, "epoch")
            if row is None:
                row = MetaRow(key="epoch", value=repr(time.time()))
                s.add(row)
            return float(row.value)

    def get_meta(self, key: str) -> str | None:
        with self._r() as s:
            row = s.get(MetaRow, key)
            return None if row is None else row.value

    def set_meta(self, key: str, value: str) -> None:
        with self._w() as s:
            s.merge(MetaRow(key=key, value=value))

    # ------------------------------------------------------------------ queues
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

    # ------------------------------------------------------------------ tokens
    def create_token(self, user: str, admin: bool = False, expires_at: float | None = None) -> str:
        return self.issue_token(user, admin, expires_at)[0]

    def issue_token(self, user: str, admin: bool = False, expires_at: float | None = None) -> tuple[str, TokenView]:
        """A new token (returned once; only its digest is kept) and how it is listed."""
        token = secrets.token_urlsafe(32)
        with self._w() as s:
            row = TokenRow(user=user, digest=digest(token), admin=admin, created_at=time.time(), expires_at=expires_at)
            s.add(row)
            s.flush()
            return token, token_view(row)

    def authenticate(self, token: str, now: float | None = None) -> User | None:
        """The token's user if it is known, not revoked and not expired."""
        with self._r() as s:
            row = s.scalar(select(TokenRow).where(TokenRow.digest == digest(token)))
            if row is None or token_view(row).state(time.time() if now is None else now) != "active":
                return None
            return User(row.user, row.admin)

    def token_state(self, token: str) -> str | None:
        """Why a token that does not authenticate fails: "revoked", "expired", or None (unknown)."""
        with self._r() as s:
            row = s.scalar(select(TokenRow).where(TokenRow.digest == digest(token)))
            return None if row is None else token_view(row).state(time.time())

    @tolerant
    def list_tokens(self, user: str | None = None) -> list[TokenView]:
        with self._r() as s:
            q = select(TokenRow).order_by(TokenRow.id)
            if user is not None:
                q = q.where(TokenRow.user == user)
            return [token_view(r) for r in s.scalars(q)]

    def get_token(self, token_id: int) -> TokenView | None:
        if not 0 < token_id <= MAX_ID:
            return None
        with self._r() as s:
            row = s.get(TokenRow, token_id)
            return None if row is None else token_view(row)

    def revoke_token(self, token_id: int, by: str) -> TokenView:
        """Revoke a token (kept in the list, marked revoked). Raises LastAdmin rather than revoke the
        only active admin token: nobody could then create tokens through the API."""
        now = time.time()
        with self._w() as s:
            row = s.get(TokenRow, token_id)
            if row.revoked_at is None:
                if row.admin and token_view(row).state(now) == "active" and self._active_admins(s, now) <= 1:
                    raise LastAdmin(f"token {token_id} is the only active admin token; create another first")
                row.revoked_at, row.revoked_by = now, by
            return token_view(row)

    @staticmethod
    def _active_admins(s: Session, now: float) -> int:
        q = select(func.count()).select_from(TokenRow).where(
            TokenRow.admin, TokenRow.revoked_at.is_(None),
            (TokenRow.expires_at.is_(None)) | (TokenRow.expires_at > now))
        return s.scalar(q)

    def has_admin(self) -> bool:
        """Is there an admin token that still works (not revoked, not expired)?"""
        with self._r() as s:
            return self._active_admins(s, time.time()) > 0

    # ------------------------------------------------------------------ jobs (API side)
    def add_job(self, name: str, owner: str, spec: dict, total_steps: int, message: str | None = None) -> JobView:
        now = time.time()
        with self._w() as s:
            row = JobRow(name=name, owner=owner, spec=spec, status=JobStatus.QUEUED.value, admitted=False,
                         cancel_requested=False, submitted_at=now, total_steps=total_steps, steps_done=0,
                         share=0, resizes=0, message=message)
            s.add(row)
            s.flush()
            s.add(EventRow(job_id=row.id, at=now, kind="submitted", detail=f"by {owner}"))
            return job_view(row)

    @tolerant
    def get_job(self, job_id: int) -> JobView | None:
        if not 0 < job_id <= MAX_ID:  # PostgreSQL would fail the query; SQLite does past 64 bits
            return None
        with self._r() as s:
            row = s.get(JobRow, job_id)
            if row is None:
                return None
            return job_view(row, s.get(AllocationRow, job_id))

    @tolerant
    def list_jobs(self, owner: str | None = None, limit: int = 1000, before: int | None = None,
                  statuses: Sequence[str] = ()) -> list[JobView]:
        """The newest ``limit`` jobs (with an id below ``before``, in one of ``statuses``), oldest first:
        a page; the next older page is the one before its first id. Plain column rows, not ORM objects:
        listing a thousand jobs is the API's most expensive read, and the identity map would triple its
        cost."""
        j, a = JobRow.__table__.c, AllocationRow.__table__.c
        with self._r() as s:
            q = select(j.id, j.name, j.owner, j.spec, j.status, j.cancel_requested, j.submitted_at, j.started_at,
                       j.finished_at, j.total_steps, j.steps_done, j.loss, j.steps_per_s, j.share, j.resizes,
                       j.message, a.gpus, a.workers, j.attained_service).outerjoin_from(
                           JobRow, AllocationRow, a.job_id == j.id)
            if owner is not None:
                q = q.where(j.owner == owner)
            if before is not None:
                q = q.where(j.id < before)
            if statuses:
                q = q.where(j.status.in_(list(statuses)))
            rows = s.execute(q.order_by(j.id.desc()).limit(limit)).all()
            return [JobView(*r[:16], tuple(r[16] or ()), tuple(r[17] or ()), r[18] or 0.0) for r in reversed(rows)]

    def request_cancel(self, job_id: int, by: str) -> JobView:
        now = time.time()
        with self._w() as s:
            row = s.get(JobRow, job_id)
            if row.status not in TERMINAL and not row.cancel_requested:
                row.cancel_requested = True
                s.add(EventRow(job_id=job_id, at=now, kind="cancel-requested", detail=f"by {by}"))
            return job_view(row)

    def set_message(self, job_id: int, message: str | None) -> None:
        """A job's message while it is not finished (why it is held); a terminal job's stays."""
        with self._w() as s:
            s.execute(update(JobRow).where(JobRow.id == job_id, JobRow.status.not_in(TERMINAL)).values(message=message))

    @tolerant
    def events(self, job_id: int) -> list[EventView]:
        with self._r() as s:
            rows = s.scalars(select(EventRow).where(EventRow.job_id == job_id).order_by(EventRow.id))
            return [event_view(r) for r in rows]

    @tolerant
    def samples(self, job_id: int) -> list[SampleView]:
        with self._r() as s:
            rows = s.scalars(select(SampleRow).where(SampleRow.job_id == job_id).order_by(SampleRow.id))
            return [SampleView(r.at, r.step, r.world_size, r.steps_per_s, r.loss) for r in rows]

    @tolerant
    def profile(self, job_id: int) -> dict | None:
        """The job's stored profile (``coddl.runtime.estimation.JobEstimate.record``), if it has one."""
        with self._r() as s:
            row = s.get(ProfileRow, job_id)
            return None if row is None else copy.deepcopy(row.profile)

    def save_profile(self, job_id: int, profile: dict, at: float) -> None:
        with self._w() as s:
            s.merge(ProfileRow(job_id=job_id, profile=profile, updated_at=at))

    @tolerant
    def allocations(self) -> dict[int, tuple[int, ...]]:
        with self._r() as s:
            return {r.job_id: tuple(r.gpus) for r in s.scalars(select(AllocationRow))}

    @tolerant
    def counts(self) -> dict[str, int]:
        with self._r() as s:
            rows = s.execute(select(JobRow.status, func.count()).group_by(JobRow.status)).all()
            return {status: n for status, n in rows}

    # ------------------------------------------------------------------ reads for operators (metrics, dashboard)
    def holders(self) -> list[JobView]:
        """The jobs holding GPUs by the newest persisted plan, with their GPUs, by id."""
        with self._r() as s:
            q = select(JobRow, AllocationRow).join(AllocationRow, AllocationRow.job_id == JobRow.id)
            return [job_view(j, a) for j, a in s.execute(q.order_by(JobRow.id))]

    def oldest_queued(self) -> float | None:
        """When the longest-waiting job that never ran was submitted (None: nobody waits)."""
        with self._r() as s:
            return s.scalar(select(func.min(JobRow.submitted_at)).where(JobRow.status == JobStatus.QUEUED.value))

    def last_event_id(self) -> int:
        with self._r() as s:
            return s.scalar(select(func.max(EventRow.id))) or 0

    def event_log(self, after: int = 0, *, alive_since: float | None = None, kinds: Sequence[str] | None = None,
                  owner: str | None = None, limit: int = 10_000) -> list[LoggedEvent]:
        """Events with an id above ``after``, oldest first, at most ``limit``; with ``alive_since``, only
        those of jobs that had not ended by then (what a chart of the time since needs)."""
        with self._r() as s:
            q = (select(EventRow, JobRow.owner, JobRow.submitted_at, JobRow.started_at)
                 .join(JobRow, JobRow.id == EventRow.job_id).where(EventRow.id > after))
            if alive_since is not None:
                q = q.where(or_(JobRow.finished_at.is_(None), JobRow.finished_at >= alive_since))
            if kinds is not None:
                q = q.where(EventRow.kind.in_(list(kinds)))
            if owner is not None:
                q = q.where(JobRow.owner == owner)
            rows = s.execute(q.order_by(EventRow.id).limit(limit))
            return [LoggedEvent(e.id, event_view(e), o, sub, st) for e, o, sub, st in rows]

    def samples_since(self, since: float, job_ids: Sequence[int]) -> dict[int, list[SampleView]]:
        """The progress history of these jobs from ``since`` on, by job."""
        out: dict[int, list[SampleView]] = {j: [] for j in job_ids}
        if not out:
            return out
        with self._r() as s:
            q = select(SampleRow).where(SampleRow.job_id.in_(list(out)), SampleRow.at >= since)
            for r in s.scalars(q.order_by(SampleRow.id)):
                out[r.job_id].append(SampleView(r.at, r.step, r.world_size, r.steps_per_s, r.loss))
        return out

    # ------------------------------------------------------------------ jobs (controller side)
    @tolerant
    def unadmitted(self) -> list[JobView]:
        """Submissions the controller has not taken in yet, oldest first."""
        with self._r() as s:
            rows = s.scalars(select(JobRow).where(JobRow.admitted.is_(False)).order_by(JobRow.id))
            return [job_view(r) for r in rows]

    def mark_admitted(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            with self._w() as s:
                s.execute(update(JobRow).where(JobRow.id.in_(list(job_ids))).values(admitted=True))

    @tolerant
    def unfinished(self) -> list[JobView]:
        """Every job not yet finished, failed or cancelled (what a restarted controller takes over)."""
        with self._r() as s:
            rows = s.scalars(select(JobRow).where(JobRow.status.not_in(TERMINAL)).order_by(JobRow.id))
            return [job_view(r) for r in rows]

    def cancel_requests(self) -> list[int]:
        with self._r() as s:
            q = select(JobRow.id).where(JobRow.cancel_requested.is_(True), JobRow.status.not_in(TERMINAL),
                                        JobRow.admitted.is_(True))
            return list(s.scalars(q.order_by(JobRow.id)))

    def record_plan(self, actions: Sequence[Action], at: float) -> None:
        """Persist a plan before the executor acts on it: new allocations, job states, one event each."""
        with self._w() as s:
            for a in actions:
                jid = int(a.job_id)
                row = s.get(JobRow, jid)
                if a.new:
                    alloc = s.get(AllocationRow, jid)
                    if alloc is None:
                        s.add(AllocationRow(job_id=jid, gpus=list(a.new), cores=list(a.cores), workers=[],
                                            updated_at=at))
                    else:
                        alloc.gpus, alloc.cores, alloc.updated_at = list(a.new), list(a.cores), at
                else:
                    s.execute(delete(AllocationRow).where(AllocationRow.job_id == jid))
                row.share = len(a.new)
                if a.kind in (ActionKind.START, ActionKind.RESUME):
                    row.status = JobStatus.RUNNING.value
                    row.started_at = row.started_at if row.started_at is not None else at
                elif a.kind is ActionKind.SUSPEND:
                    row.status = JobStatus.SUSPENDED.value
                elif a.is_resize:
                    row.resizes += 1
                s.add(EventRow(job_id=jid, at=at, kind="planned", action=a.kind.value, gpus_before=list(a.old),
                               gpus_after=list(a.new)))

    def record_applied(self, job_id: int, action: str, gpus: Sequence[int], latency_s: float, at: float) -> None:
        with self._w() as s:
            s.add(EventRow(job_id=job_id, at=at, kind="applied", action=action, gpus_after=list(gpus),
                           latency_s=latency_s))

    def record_workers(self, job_id: int, workers: Sequence[dict]) -> None:
        with self._w() as s:
            alloc = s.get(AllocationRow, job_id)
            if alloc is not None:
                alloc.workers = list(workers)

    def record_service(self, attained: dict[int, float]) -> None:
        """Each job's attained service (GPU-seconds) as the scheduler has it now; it never goes back."""
        if not attained:
            return
        with self._w() as s:  # two columns, and only the rows that grew (a queued job's never does)
            stored = s.execute(select(JobRow.id, JobRow.attained_service).where(JobRow.id.in_(list(attained))))
            grew = [{"jid": jid, "service": float(attained[jid])} for jid, service in stored
                    if float(attained[jid]) > (service or 0.0)]
            if grew:
                s.connection().execute(update(JobRow).where(JobRow.id == bindparam("jid"))
                                       .values(attained_service=bindparam("service")), grew)

    def record_event(self, job_id: int, kind: str, at: float, detail: str | None = None) -> None:
        with self._w() as s:
            s.add(EventRow(job_id=job_id, at=at, kind=kind, detail=detail))

    def record_progress(self, updates: Sequence[ProgressUpdate]) -> None:
        if not updates:
            return
        with self._w() as s:
            for u in updates:
                row = s.get(JobRow, u.job_id)
                row.steps_done = max(row.steps_done, u.step)
                row.steps_per_s = u.steps_per_s
                if u.loss is not None:
                    row.loss = u.loss
                if u.sample:
                    s.add(SampleRow(job_id=u.job_id, at=u.at, step=u.step, world_size=u.world_size,
                                    steps_per_s=u.steps_per_s, loss=u.loss))

    def finish(self, job_id: int, status: JobStatus, at: float, message: str | None = None) -> None:
        """A job reached a terminal state: record it, release its allocation."""
        with self._w() as s:
            row = s.get(JobRow, job_id)
            row.status = status.value
            row.finished_at = at
            row.share = 0
            row.admitted = True
            if message:
                row.message = message
            s.execute(delete(AllocationRow).where(AllocationRow.job_id == job_id))
            s.add(EventRow(job_id=job_id, at=at, kind=status.value, detail=message))

    def recover(self, at: float) -> tuple[list[JobView], list[dict]]:
        """On controller start: every unfinished job is taken over again, and the worker records of
        the last incarnation are handed back (for the executor to make sure they are gone).
        Allocations are cleared and running jobs become suspended: the next plan restarts them from
        their checkpoints."""
        with self._w() as s:
            rows = list(s.scalars(select(JobRow).where(JobRow.status.not_in(TERMINAL)).order_by(JobRow.id)))
            workers = [w for a in s.scalars(select(AllocationRow)) for w in (a.workers or ())]
            s.execute(delete(AllocationRow))
            for row in rows:
                if row.status in (JobStatus.RUNNING.value, JobStatus.SUSPENDED.value):
                    s.add(EventRow(job_id=row.id, at=at, kind="recovered",
                                   detail=f"was {row.status} at step {row.steps_done}"))
                    row.status = JobStatus.SUSPENDED.value
                row.share = 0
                row.admitted = True
            return [job_view(r) for r in rows], workers
