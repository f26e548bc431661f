"""Slurm's accounting as a history: the output of ``sacct`` in its parsable form.

Produce it on the cluster (times in UTC, one line per job allocation, every user's jobs)::

    TZ=UTC sacct -a -X -P --starttime 2024-01-01 --endtime 2024-04-01 \\
        --format=JobID,User,Account,Partition,Submit,Start,End,ElapsedRaw,State,AllocTRES > history.sacct

``-P`` separates fields with ``|`` and prints a header (``-p``, with a trailing ``|``, reads too);
``-X`` keeps allocations and drops job steps; ``-a`` needs an operator or admin account where
``PrivateData=jobs`` is set. The fields, by header name (any order, any case, other columns ignored):

========== ========= ==============================================================================
field      required  meaning here
========== ========= ==============================================================================
JobID      yes       the job; ``123``, an array task ``123_4``, a heterogeneous part ``123+0``. A step
                     (``123.batch``) means ``-X`` was left out: an error. Each id once (no ``-D``).
Submit     yes       when the job was submitted: ISO 8601 (``2024-03-04T09:00:00``, Slurm's
                     ``SLURM_TIME_FORMAT=standard``), in UTC unless it carries an offset or ``tz`` says
Start      yes       when it started; ``Unknown`` or ``None`` if it never did
End        yes       when it ended; ``Unknown`` while it runs (or waits)
State      yes       ``COMPLETED``, ``FAILED``, ``CANCELLED`` (also ``CANCELLED by 1234``), ``TIMEOUT``,
                     ``OUT_OF_MEMORY``, ``NODE_FAIL``, ``PREEMPTED``, ``DEADLINE``, ``BOOT_FAIL``,
                     ``RUNNING``, ``PENDING``, ``REQUEUED``, ``RESIZING``, ``REVOKED``, ``SUSPENDED``
AllocTRES  yes       what it held, e.g. ``billing=8,cpu=8,gres/gpu=2,mem=64G,node=1``; GPUs from
                     ``gres/gpu=N``, or the sum of typed ``gres/gpu:a100=N`` entries
User       yes       who submitted it (blank: ``(unknown)``)
Account    yes       the team it was charged to (blank: ``(none)``); per-team results group by it
Partition  yes       where it ran; ``coddl replay --partition`` keeps some
ElapsedRaw no        seconds it ran; without it, End − Start (which includes time suspended)
========== ========= ==============================================================================

Every job that ran is replayed with the work it did — its run time on its GPUs — whatever its final
state: a failed or cancelled job occupied the cluster just the same. Rows that cannot be replayed
are counted by reason, not guessed at: never started, not ended when exported, and CPU-only jobs
(no GPUs). A bad cell is a one-line error naming file, line and field (exit code 2), like every
trace reader's.
"""

from __future__ import annotations

import io
import re
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from coddl.traces._table import Parsed, Table, fail, read_text
from coddl.traces.history import History, RecordedJob, usage_of
from coddl.traces.model import TraceError, TraceJob

REQUIRED = ("JobID", "User", "Account", "Partition", "Submit", "Start", "End", "State", "AllocTRES")
OPTIONAL = ("ElapsedRaw",)
STATES = frozenset({
    "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PENDING",
    "PREEMPTED", "RUNNING", "REQUEUED", "RESIZING", "REVOKED", "SUSPENDED", "TIMEOUT",
})
NEVER = ("unknown", "none")  # what sacct prints for a time that has not happened
NEVER_STARTED, NOT_ENDED, NO_GPUS = "never started", "not ended when exported", "no GPUs (CPU-only)"
COMMAND = ("TZ=UTC sacct -a -X -P --starttime YYYY-MM-DD --endtime YYYY-MM-DD "
           "--format=" + ",".join(REQUIRED[:7] + ("ElapsedRaw",) + REQUIRED[7:]))
_GPU = re.compile(r"^gres/gpu(?::[^=]+)?$")


def looks_like_sacct(path: Path) -> bool:
    """A ``|``-separated file whose header names JobID: what ``sacct -P`` writes."""
    first = next((line for line in read_text(path).splitlines() if line.strip()), "")
    return "|" in first and "jobid" in (f.strip().lower() for f in first.split("|"))


def read_table(path: Path) -> Table:
    """The file as a :class:`Table` (rows checked for width there). Fields are not quoted by sacct,
    so ``|`` splits them exactly; a trailing ``|`` (``sacct -p``) is dropped."""
    lines = [(i, line) for i, line in enumerate(io.StringIO(read_text(path)), start=1) if line.strip()]
    if not lines:
        fail(path.name, 1, "header", "the file is empty")
    rows = [(i, line.rstrip("\r\n").split("|")) for i, line in lines]
    if rows[0][1] and rows[0][1][-1] == "":
        rows = [(i, r[:-1] if r and r[-1] == "" else r) for i, r in rows]
    (header_line, header), body = rows[0], rows[1:]
    return Table(path.name, [h.strip() for h in header], [i for i, _ in body], [r for _, r in body],
                 header_line=header_line)


def read_sacct(path: str | Path, tz: str = "UTC") -> History:
    """Read a ``sacct -P`` file; naive times are in ``tz`` (an IANA name such as Europe/Berlin)."""
    path = Path(path)
    zone = _zone(tz)
    table = read_table(path)
    canonical = {name.lower(): name for name in REQUIRED + OPTIONAL}
    table.index = {canonical.get(h.lower(), h): i for h, i in table.index.items()}
    cols = {name: table.column(name) for name in REQUIRED}
    elapsed = table.optional("ElapsedRaw")
    ids = cols["JobID"].unique_texts()
    skipped = {NEVER_STARTED: 0, NOT_ENDED: 0, NO_GPUS: 0}
    jobs: list[RecordedJob] = []
    f = table.file
    for k, line in enumerate(table.lines):
        cell = {name: _text(c.values[k]) for name, c in cols.items()}
        job_id = ids[k]
        if "." in job_id:
            fail(f, line, "JobID", f"{job_id!r} is a job step, not a job: export with -X (allocations only)")
        state = _state(cell["State"], f, line)
        submit = _time(cell["Submit"], zone, f, line, "Submit", allow_never=False)
        start = _time(cell["Start"], zone, f, line, "Start")
        end = _time(cell["End"], zone, f, line, "End")
        gpus = _gpus(cell["AllocTRES"], f, line)
        ran = None if elapsed is None else _seconds(elapsed.values[k], f, line)
        if start is None:
            skipped[NEVER_STARTED] += 1
            continue
        if start < submit:
            fail(f, line, "Start", f"{cell['Start']} is before Submit {cell['Submit']}")
        if end is None:  # still running (or suspended) when sacct ran
            skipped[NOT_ENDED] += 1
            continue
        if end < start:
            fail(f, line, "End", f"{cell['End']} is before Start {cell['Start']}")
        if gpus == 0:
            skipped[NO_GPUS] += 1
            continue
        duration = float(ran if ran is not None else end - start)
        account = cell["Account"] or "(none)"
        trace_job = TraceJob(job_id, submit, gpus, duration=max(duration, 1.0), user=cell["User"] or "(unknown)",
                             group=account)
        jobs.append(RecordedJob(trace_job, account, cell["Partition"], state, submit, start, end,
                                gpus * duration))
    if not jobs:
        why = ", ".join(f"{n} {reason}" for reason, n in skipped.items() if n) or "no rows"
        raise TraceError(f"{path.name}: no job to replay: every row was skipped ({why})")
    return History(path.name, str(path), jobs, usage_of(jobs), {r: n for r, n in skipped.items() if n},
                   rows=len(table.rows))


def parse(path: Path) -> Parsed:
    """The replayable jobs as any reader's columns (``load_trace`` of a sacct file, times in UTC unless
    they carry an offset: its accounts are the groups ``--vc`` selects)."""
    jobs = [r.job for r in read_sacct(path).jobs]
    return Parsed([j.job_id for j in jobs], np.array([j.arrival for j in jobs]), np.array([j.num_gpus for j in jobs]),
                  {"duration": [j.duration for j in jobs], "user": [j.user for j in jobs],
                   "group": [j.group for j in jobs]})


def _zone(tz: str) -> tzinfo:
    if tz.upper() == "UTC":
        return timezone.utc
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise TraceError(f"tz: unknown time zone {tz!r}; give an IANA name such as UTC or Europe/Berlin") from None


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def _state(raw: str, file: str, line: int) -> str:
    """``CANCELLED by 1234`` is CANCELLED; a ``+`` (sacct's mark of a truncated field) is dropped."""
    word = raw.split(" ", 1)[0].rstrip("+").upper()
    if word not in STATES:
        fail(file, line, "State", f"unknown Slurm job state {raw!r}; expected one of {', '.join(sorted(STATES))}")
    return word


def _time(raw: str, zone: tzinfo, file: str, line: int, field: str, allow_never: bool = True) -> float | None:
    if allow_never and raw.lower() in NEVER:
        return None
    try:
        t = datetime.fromisoformat(raw)
    except ValueError:
        never = " or Unknown/None" if allow_never else ""
        fail(file, line, field, f"expected a date-time like 2024-03-04T09:00:00{never}, got {raw!r} "
                                "(export with SLURM_TIME_FORMAT=standard)")
    return (t if t.tzinfo is not None else t.replace(tzinfo=zone)).timestamp()


def _gpus(tres: str, file: str, line: int) -> int:
    total: int | None = None
    typed = 0
    for item in (x.strip() for x in tres.split(",") if x.strip()):
        key, eq, value = item.partition("=")
        if not eq or not key:
            fail(file, line, "AllocTRES", f"expected key=value items like cpu=8,gres/gpu=2, got {item!r}")
        if _GPU.match(key):
            if not value.isdigit():
                fail(file, line, "AllocTRES", f"{key}: expected a whole number of GPUs, got {value!r}")
            if key == "gres/gpu":
                total = int(value)
            else:
                typed += int(value)
    return total if total is not None else typed


def _seconds(value: object, file: str, line: int) -> int | None:
    raw = _text(value)
    if not raw:
        return None
    if not raw.isdigit():
        fail(file, line, "ElapsedRaw", f"expected whole seconds, got {raw!r}")
    return int(raw)
