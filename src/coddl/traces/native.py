"""coddl's own trace format, as CSV or Parquet: what `trace convert` and `trace export` write.

Columns: ``job_id, arrival, num_gpus`` are required, and each row needs ``duration`` or
``steps`` (or both: with ``model`` and ``steps`` a workload is replayed exactly; ``iterations``, the
column's former name, reads as ``steps``);
``model, min_gpus, max_gpus, cpus, user, batch_size, group`` are optional. ``group`` (a virtual
cluster) lets ``--vc`` cut a converted multi-cluster trace. Unknown columns are ignored. Parquet
has no lines, so its errors name the 1-based data row instead.
"""

from __future__ import annotations

import csv
import gzip
import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coddl.core.job import JobSpec
from coddl.traces._table import Parsed, Table, fail
from coddl.traces.model import TraceError, TraceJob

REQUIRED = ("job_id", "arrival", "num_gpus")
# Column order of written files; optional columns are written only when some job has a value.
COLUMNS = ("job_id", "arrival", "num_gpus", "duration", "steps", "model", "min_gpus",
           "max_gpus", "cpus", "user", "batch_size", "group")
_INT = {"num_gpus", "min_gpus", "max_gpus", "cpus", "batch_size"}
_FLOAT = {"arrival", "duration", "steps"}
_KIND = {c: "int" if c in _INT else "float" if c in _FLOAT else "text" for c in COLUMNS[3:]}


def parse(table: Table) -> Parsed:
    table.read_as("iterations", "steps")  # the column's name in files written before coddl spoke of steps
    job_id, arrival, gpus = (table.column(c) for c in REQUIRED)
    fields = {name: col.optional(_KIND[name])
              for name in COLUMNS[3:] if (col := table.optional(name)) is not None}
    if "duration" not in fields and "steps" not in fields:
        table.column("duration")  # names the missing column and the header found
    work = zip(fields.get("duration", itertools.repeat(None)), fields.get("steps", itertools.repeat(None)))
    for line, (duration, steps) in zip(table.lines, work):
        if duration is None and steps is None:
            fail(table.file, line, "duration", "each job needs a duration or steps; both are empty")
    for line, lo, hi in zip(table.lines, fields.get("min_gpus", ()), fields.get("max_gpus", ())):
        if lo is not None and hi is not None and hi < lo:
            fail(table.file, line, "max_gpus", f"expected at least min_gpus ({lo}), got {hi}")
    return Parsed(job_id.unique_texts(), arrival.nonneg_floats(), gpus.positive_ints(), fields)


def read_parquet(path: Path) -> Table:
    file = path.name
    _, pq = _pyarrow()
    try:
        data = pq.read_table(path).to_pydict()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except Exception as e:  # pyarrow raises its own error types for corrupt or non-Parquet files
        problem = " ".join(str(e).split())
        raise TraceError(f"{file}: not a readable Parquet file ({problem})") from None
    rows = list(zip(*data.values()))
    return Table(file, list(data), list(range(1, len(rows) + 1)), rows, header_line=None)


def write_native(jobs: Iterable[TraceJob], path: str | Path) -> int:
    """Write jobs as a native trace: Parquet for ``.parquet``, CSV for ``.csv`` (``.csv.gz``
    gzipped). Floats keep full precision, so reading the file back gives the same jobs.
    Returns the number of jobs written.
    """
    jobs = list(jobs)
    for job in jobs:
        if job.duration is None and job.steps is None:
            raise TraceError(f"{job.job_id}: duration: the native format needs a duration or "
                             "steps for every job, this job has neither")
    columns = [c for c in COLUMNS
               if c in REQUIRED or any(getattr(j, c) is not None for j in jobs)]
    rows = [[getattr(j, c) for c in columns] for j in jobs]
    _write(Path(path), columns, rows)
    return len(jobs)


def write_specs(specs: Iterable[JobSpec], path: str | Path) -> int:
    """Write a built workload so that reading it back and building again gives the same specs:
    every job carries its model and steps (total work), so it is replayed exactly. The
    format has one CPU count per job, which is what the workload builder gives (min = max)."""
    return write_native((TraceJob(s.job_id, s.arrival, s.requested_gpus, duration=s.duration,
                                  steps=s.total_work, model=s.model, min_gpus=s.min_gpus,
                                  max_gpus=s.max_gpus, cpus=_one_cpu_count(s), user=s.user,
                                  group=s.account)
                         for s in specs), path)


def _one_cpu_count(spec: JobSpec) -> int | None:
    if spec.min_cpus != spec.max_cpus:
        raise TraceError(f"{spec.job_id}: cpus: the native format has one CPU count per job, "
                         f"this job has min_cpus={spec.min_cpus}, max_cpus={spec.max_cpus}")
    return spec.min_cpus


def _write(path: Path, columns: list[str], rows: list[list[Any]]) -> None:
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            _write_parquet(path, columns, rows)
        elif name.endswith(".csv") or name.endswith(".csv.gz"):
            _write_csv(path, columns, rows)
        else:
            raise TraceError(f"{path}: expected an output name ending in .csv, .csv.gz or .parquet")
    except OSError as e:
        raise TraceError(f"{path}: cannot write: {e.strerror or e}") from None


def _write_csv(path: Path, columns: list[str], rows: list[list[Any]]) -> None:
    """csv writes None as an empty cell and floats via str(), which round-trips exactly."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "wt", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        w.writerows(rows)


def _write_parquet(path: Path, columns: list[str], rows: list[list[Any]]) -> None:
    pa, pq = _pyarrow()
    kind = {c: pa.int64() if c in _INT else pa.float64() if c in _FLOAT else pa.string() for c in columns}
    table = pa.table({c: pa.array([row[i] for row in rows], type=kind[c]) for i, c in enumerate(columns)})
    pq.write_table(table, path)


def _pyarrow() -> tuple[Any, Any]:
    """pyarrow is an optional dependency (the ``parquet`` extra); CSV needs nothing."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TraceError("Parquet needs pyarrow: pip install 'coddl[parquet]'") from None
    return pa, pq
