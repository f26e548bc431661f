"""A restarted controller's take-over: what the last incarnation left unfinished, and its workers."""

from __future__ import annotations

from sqlalchemy import delete, select

from coddl.core.job import JobStatus
from coddl.runtime.executors.base import WorkerRecord
from coddl.runtime.store.connection import Database
from coddl.runtime.store.schema import AllocationRow, EventRow, JobRow
from coddl.runtime.store.views import TERMINAL, JobView, job_view, worker_records


class RecoveryStore(Database):
    def recover(self, at: float) -> tuple[list[JobView], list[WorkerRecord]]:
        """On controller start: every unfinished job is taken over again, and the worker records of
        the last incarnation are handed back (for the executor to make sure they are gone).
        Allocations are cleared and running jobs become suspended: the next plan restarts them from
        their checkpoints."""
        with self._w() as s:
            rows = list(s.scalars(select(JobRow).where(JobRow.status.not_in(TERMINAL)).order_by(JobRow.id)))
            workers = [w for a in s.scalars(select(AllocationRow)) for w in worker_records(a.workers)]
            s.execute(delete(AllocationRow))
            for row in rows:
                if row.status in (JobStatus.RUNNING.value, JobStatus.SUSPENDED.value):
                    s.add(EventRow(job_id=row.id, at=at, kind="recovered",
                                   detail=f"was {row.status} at step {row.steps_done}"))
                    row.status = JobStatus.SUSPENDED.value
                row.share = 0
                row.admitted = True
            return [job_view(r) for r in rows], workers
