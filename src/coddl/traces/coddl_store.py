"""coddl's own store as a history: the jobs a coddl cluster ran, to replay under other policies.

Every job that ended (finished, failed or cancelled) after doing some work is replayed with the work
it did, in the units the simulator runs: a job's measured throughput at each world size, divided
by its model's curve at that size, is how much faster or slower than the curve it ran (the median
over its progress reports; the online correction's factor), and its steps done divided by that
factor is its work on the curve. Replayed alone at the sizes it had, it therefore takes the time it
really took. Its team is its owner (until queues exist), its GPU range the one it was submitted with.
Jobs that never started, or ended before reporting any progress, are counted as skipped.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from coddl.perf.curves import CurveTable
from coddl.traces.history import History, RecordedJob, step_series
from coddl.traces.model import TraceError, TraceJob

NO_PROGRESS = "no progress recorded"
UNFINISHED = "not ended yet"
NEVER_STARTED = "never started"
UNREADABLE = "a stored spec this version cannot read"


def read_store(url: str, curves: CurveTable) -> History:
    """The store at SQLAlchemy ``url`` (``sqlite:///…/coddl.db`` or PostgreSQL) as a history;
    ``curves`` are the runtime's (``coddl.runtime.models.runtime_curves``)."""
    from coddl.runtime.models import curve_for
    from coddl.runtime.spec import STORED, JobFile, SpecError, validate
    from coddl.runtime.store import TERMINAL, Store

    try:
        store = Store(url)
    except Exception as e:  # noqa: BLE001 - a wrong URL or an unreadable database is the user's to fix
        raise TraceError(f"{url}: cannot open the coddl store ({' '.join(str(e).split())[:200]})") from None
    try:
        rows = store.list_jobs(None, limit=2**31 - 1)
        held: dict[int, list[tuple[float, int]]] = defaultdict(list)  # GPUs each job held, as planned
        after = 0
        while batch := store.event_log(after, kinds=("planned", *TERMINAL)):
            for le in batch:
                e = le.event
                held[e.job_id].append((e.at, len(e.gpus_after or ()) if e.kind == "planned" else 0))
            after = batch[-1].id
        skipped = {NEVER_STARTED: 0, UNFINISHED: 0, NO_PROGRESS: 0, UNREADABLE: 0}
        jobs: list[RecordedJob] = []
        changes: list[tuple[float, int]] = []
        for j in rows:
            if j.started_at is None:
                skipped[NEVER_STARTED] += 1
                continue
            if not j.terminal or j.finished_at is None:
                skipped[UNFINISHED] += 1
                continue
            try:
                spec = validate(JobFile, j.spec, f"job {j.id}", context=STORED)
            except SpecError:
                skipped[UNREADABLE] += 1
                continue
            m = curves.index[curve_for(curves, spec.model)]
            ratios = [s.steps_per_s / curves.rate[m, min(s.world_size, curves.kmax)]
                      for s in store.samples(j.id) if s.steps_per_s > 0 and s.world_size >= 1]
            if j.steps_done <= 0 or not ratios:
                skipped[NO_PROGRESS] += 1
                continue
            work = j.steps_done / float(np.median(ratios))
            tj = TraceJob(f"coddl-{j.id}", j.submitted_at, spec.min_gpus, steps=work,
                          model=curves.names[m], min_gpus=spec.min_gpus, max_gpus=spec.max_gpus, user=j.owner,
                          group=j.owner)
            level, since, gpu_seconds = 0, j.started_at, 0.0
            for at, gpus in held.get(j.id, ()):
                changes.append((at, gpus - level))
                gpu_seconds += level * (at - since)
                level, since = gpus, at
            jobs.append(RecordedJob(tj, j.owner, "", j.status, j.submitted_at, j.started_at, j.finished_at,
                                    gpu_seconds))
    finally:
        store.close()
    if not jobs:
        why = ", ".join(f"{n} {reason}" for reason, n in skipped.items() if n) or "no jobs"
        raise TraceError(f"{url}: no job to replay ({why})")
    return History("coddl store", url, jobs, step_series(changes), {r: n for r, n in skipped.items() if n},
                   rows=len(rows))
