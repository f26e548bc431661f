"""What the store's readers get: plain frozen dataclasses, never ORM objects bound to a session, and
the conversions from the store's rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coddl.core.job import JobStatus
from coddl.runtime.executors.base import WorkerRecord
from coddl.runtime.store.schema import AllocationRow, EventRow, JobRow, TokenRow

TERMINAL = tuple(s.value for s in JobStatus if s.terminal)


@dataclass(frozen=True, slots=True)
class User:
    name: str
    admin: bool


@dataclass(frozen=True, slots=True)
class TokenView:
    """A token as an admin sees it: never the token, only the first characters of its digest (enough
    to tell tokens apart in a list)."""

    id: int
    user: str
    admin: bool
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    revoked_by: str | None
    fingerprint: str

    def state(self, now: float) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    def as_json(self, now: float) -> dict:
        return {"id": self.id, "user": self.user, "admin": self.admin, "created_at": self.created_at,
                "expires_at": self.expires_at, "revoked_at": self.revoked_at, "revoked_by": self.revoked_by,
                "fingerprint": self.fingerprint, "state": self.state(now)}


@dataclass(frozen=True, slots=True)
class JobView:
    id: int
    name: str
    owner: str
    spec: dict
    status: str
    cancel_requested: bool
    submitted_at: float
    started_at: float | None
    finished_at: float | None
    total_steps: int
    steps_done: int
    loss: float | None
    steps_per_s: float | None
    share: int
    resizes: int
    message: str | None
    gpus: tuple[int, ...] = ()
    workers: tuple[WorkerRecord, ...] = ()
    attained_service: float = 0.0

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


@dataclass(frozen=True, slots=True)
class EventView:
    job_id: int
    at: float
    kind: str
    action: str | None
    gpus_before: tuple[int, ...] | None
    gpus_after: tuple[int, ...] | None
    latency_s: float | None
    detail: str | None


@dataclass(frozen=True, slots=True)
class SampleView:
    at: float
    step: int
    world_size: int
    steps_per_s: float
    loss: float | None


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event with its place in the log (``id`` only grows) and what readers of the whole log need
    of its job: the metrics fold new events in by id; the dashboard shows a user only their own."""

    id: int
    event: EventView
    owner: str
    submitted_at: float
    started_at: float | None


@dataclass(frozen=True, slots=True)
class ProgressUpdate:
    """A progress report; ``sample`` also keeps it in the job's history (the controller thins the
    history out: a report every half second for a week-long job is more than anyone reads)."""

    job_id: int
    at: float
    step: int
    world_size: int
    steps_per_s: float
    loss: float | None
    sample: bool = True


def job_view(r: JobRow, alloc: AllocationRow | None = None) -> JobView:
    return JobView(r.id, r.name, r.owner, r.spec, r.status, r.cancel_requested, r.submitted_at, r.started_at,
                   r.finished_at, r.total_steps, r.steps_done, r.loss, r.steps_per_s, r.share, r.resizes,
                   r.message, tuple(alloc.gpus) if alloc else (), worker_records(alloc.workers) if alloc else (),
                   r.attained_service or 0.0)


def worker_records(stored: Any) -> tuple[WorkerRecord, ...]:
    """The worker records of an allocation's JSON column; what is not one (a row damaged outside
    coddl) is left out rather than fail every read of the job."""
    if not isinstance(stored, list):
        return ()
    records = []
    for d in stored:
        try:
            records.append(WorkerRecord.from_dict(d))
        except (AttributeError, KeyError, TypeError, ValueError):
            continue
    return tuple(records)


def token_view(r: TokenRow) -> TokenView:
    return TokenView(r.id, r.user, r.admin, r.created_at, r.expires_at, r.revoked_at, r.revoked_by, r.digest[:8])


def event_view(r: EventRow) -> EventView:
    return EventView(r.job_id, r.at, r.kind, r.action, None if r.gpus_before is None else tuple(r.gpus_before),
                     None if r.gpus_after is None else tuple(r.gpus_after), r.latency_s, r.detail)
