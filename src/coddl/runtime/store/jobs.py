"""The jobs: submissions and cancel requests (the API writes them), the reads of jobs and their
allocations, and what the controller takes in (admission)."""

from __future__ import annotations

import time
from typing import Sequence

from sqlalchemy import func, select, update

from coddl.core.job import JobStatus
from coddl.runtime.store.connection import MAX_ID, Database, tolerant
from coddl.runtime.store.schema import AllocationRow, EventRow, JobRow
from coddl.runtime.store.views import TERMINAL, JobView, job_view, worker_records


class JobStore(Database):
    # ------------------------------------------------------------------ API side
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
            return [JobView(*r[:16], tuple(r[16] or ()), worker_records(r[17]), r[18] or 0.0) for r in reversed(rows)]

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

    # ------------------------------------------------------------------ controller side
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
