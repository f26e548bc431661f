"""What the store keeps of each job's past — its events, progress samples and measured profile —
and the log of all events that the metrics and the dashboard read."""

from __future__ import annotations

import copy
from typing import Sequence

from sqlalchemy import func, or_, select

from coddl.runtime.store.connection import Database, tolerant
from coddl.runtime.store.schema import EventRow, JobRow, ProfileRow, SampleRow
from coddl.runtime.store.views import EventView, LoggedEvent, SampleView, event_view


class HistoryStore(Database):
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

    # ------------------------------------------------------------------ reads for operators (metrics, dashboard)
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
