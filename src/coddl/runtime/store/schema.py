"""The store's tables (SQLAlchemy 2 declarative rows): what the real system keeps, column by column.

``add_missing_columns`` brings a table created by an older version up to date: ``create_all`` only
creates missing tables, so a column added since is added here with its server default.
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Dialect, Float, ForeignKey, Integer, String, Text, TypeDecorator, inspect
from sqlalchemy.engine import Connection
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class SafeText(TypeDecorator[str]):
    """Text with NUL characters replaced (U+FFFD): PostgreSQL rejects them in text columns, and a
    worker's last log line — a job's failure message — can hold anything the script printed."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return None if value is None else value.replace("\x00", "\ufffd")


class Base(DeclarativeBase):
    type_annotation_map = {dict: JSON, list: JSON}


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(64))
    owner: Mapped[str] = mapped_column(String(64), index=True)
    spec: Mapped[dict] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), index=True)
    admitted: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    total_steps: Mapped[int] = mapped_column(Integer)
    steps_done: Mapped[int] = mapped_column(Integer, default=0)
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)
    steps_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    share: Mapped[int] = mapped_column(Integer, default=0)
    resizes: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str | None] = mapped_column(SafeText, nullable=True)
    # GPU-seconds received so far, as of the controller's last write: least-attained-service
    # policies rank by it, so a restarted controller must not reset it to zero
    attained_service: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")


class EventRow(Base):
    """A job's history: submitted, planned (an action, written before the executor acts), applied
    (the same action done, with its latency), worker-lost, finished, failed, cancelled, recovered."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    at: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(24))
    action: Mapped[str | None] = mapped_column(String(16), nullable=True)
    gpus_before: Mapped[list | None] = mapped_column(JSON, nullable=True)
    gpus_after: Mapped[list | None] = mapped_column(JSON, nullable=True)
    latency_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    detail: Mapped[str | None] = mapped_column(SafeText, nullable=True)


class AllocationRow(Base):
    """The GPUs (and cores) each job holds according to the newest persisted plan."""

    __tablename__ = "allocations"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    gpus: Mapped[list] = mapped_column(JSON)
    cores: Mapped[list] = mapped_column(JSON)
    workers: Mapped[list] = mapped_column(JSON, default=list)  # the executor's records of the processes
    updated_at: Mapped[float] = mapped_column(Float)


class SampleRow(Base):
    """Progress reports as the controller received them (loss and throughput over time)."""

    __tablename__ = "samples"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    at: Mapped[float] = mapped_column(Float)
    step: Mapped[int] = mapped_column(Integer)
    world_size: Mapped[int] = mapped_column(Integer)
    steps_per_s: Mapped[float] = mapped_column(Float)
    loss: Mapped[float | None] = mapped_column(Float, nullable=True)


class ProfileRow(Base):
    """A job's throughput profile as its inspection measured it and the controller corrected it
    (``coddl.runtime.estimation``): its one-GPU rows, the measured rows folded in and its belief."""

    __tablename__ = "profiles"

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    profile: Mapped[dict] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)


class TokenRow(Base):
    """API tokens, stored as SHA-256 digests: a token is 256 random bits, so a fast hash is enough
    (there is nothing to brute-force) and the database alone never lets anyone in."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(64), index=True)
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # None: never
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_by: Mapped[str | None] = mapped_column(String(64), nullable=True)


class QueueRow(Base):
    """The teams' queues (``coddl.queues``) as an admin configured them, in order; each queue's
    settings (quota, cohort, limits, weight, members) as one JSON document."""

    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    position: Mapped[int] = mapped_column(Integer)
    settings: Mapped[dict] = mapped_column(JSON)


class MetaRow(Base):
    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(32), primary_key=True)
    value: Mapped[str] = mapped_column(SafeText)


def add_missing_columns(conn: Connection) -> None:
    """Columns added to a table after a state directory was created (``create_all`` creates only
    missing tables): each is added with its server default, so an older store opens unchanged."""
    for table in (JobRow.__table__, TokenRow.__table__):
        present = {c["name"] for c in inspect(conn).get_columns(table.name)}
        for col in table.columns:
            if col.name not in present:
                kind = col.type.compile(dialect=conn.dialect)
                default = f" DEFAULT {col.server_default.arg}" if col.server_default is not None else ""
                conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {col.name} {kind}{default}")
