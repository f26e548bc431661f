"""The controller's record of what it decided and saw: each plan (written before the executor carries
it out), what was applied, the workers, attained service, progress, events, and each job's end."""

from __future__ import annotations

from typing import Sequence

from sqlalchemy import bindparam, delete, select, update

from coddl.core.allocation import Action, ActionKind
from coddl.core.job import JobStatus
from coddl.runtime.executors.base import WorkerRecord
from coddl.runtime.store.connection import Database
from coddl.runtime.store.schema import AllocationRow, EventRow, JobRow, SampleRow
from coddl.runtime.store.views import ProgressUpdate


class LedgerStore(Database):
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

    def record_workers(self, job_id: int, workers: Sequence[WorkerRecord]) -> None:
        with self._w() as s:
            alloc = s.get(AllocationRow, job_id)
            if alloc is not None:
                alloc.workers = [w.to_dict() for w in workers]

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
