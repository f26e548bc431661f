"""``load_trace``: one entry point for bundled traces (by name) and trace files (by path).

Files are recognised by extension (``.parquet`` native, ``.trace`` Gavel), Slurm's ``sacct -P``
output by its ``|``-separated header, or else by a column only one CSV format has, so a user never
has to say which format a file is in; a file that is recognised but broken gets that format's
precise error rather than a vague "unknown format".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from coddl.perf.curves import data_path
from coddl.traces import gavel, itp, native, philly, pollux, sacct, tiresias
from coddl.traces._table import Parsed, Table, assemble, fail, gc_paused, read_csv
from coddl.traces.model import Trace, TraceError

# CSV formats: (name, a column that identifies it, parser, what it needs — for the error message).
_CSV_FORMATS: tuple[tuple[str, str, Callable[[Table], Parsed], str], ...] = (
    ("native", "arrival", native.parse, "job_id,arrival,num_gpus,duration|steps"),
    ("philly", "timestamp", philly.parse, ",".join(philly.COLUMNS)),
    ("itp", "submission_time", itp.parse, ",".join(itp.COLUMNS)),
    ("pollux", "application", pollux.parse, ",".join(pollux.COLUMNS)),
    ("tiresias", "submit_time", tiresias.parse, ",".join(tiresias.COLUMNS)),
)
_POLLUX_VARIANTS = ("", "0.5", "1.5", "2.0", "realistic")


@dataclass(frozen=True)
class _Bundled:
    fmt: str
    files: tuple[str, ...]  # relative to coddl/data


def load_trace(source: str, *, vc: str | None = None, limit: int | None = None) -> Trace:
    """A bundled trace by name (see :func:`list_bundled`) or a trace file by path.

    ``vc`` keeps one virtual cluster (Philly digest, merged ITP, native files with ``group``);
    arrivals are then relative to that cluster's first job. ``limit`` keeps the first N jobs in
    arrival order. Every problem is a one-line :class:`TraceError`.
    """
    bundled = _registry().get(source)
    path = Path(source)
    if bundled is None and not path.exists():
        raise TraceError(f"{source}: no such file, and not a bundled trace "
                         f"(bundled: {', '.join(list_bundled())})")
    with gc_paused():
        if bundled is not None:
            fmt, parsed = bundled.fmt, _read_bundled(bundled)
            name, where = source, ", ".join(str(data_path(f)) for f in bundled.files)
        else:
            (fmt, parsed), name, where = _read_file(path), path.name, str(path)
        return assemble(name, parsed, source=where, fmt=fmt, vc=vc, limit=limit)


def list_bundled() -> list[str]:
    return list(_registry())


def _read_bundled(b: _Bundled) -> Parsed:
    if b.fmt == "gavel":
        return gavel.parse_msr(data_path(b.files[0]))
    if b.fmt == "itp":  # each cluster file is its own group, so the merged trace can be cut by vc
        return Parsed.concat([itp.parse(read_csv(data_path(f)), group=Path(f).name.split(".")[0])
                              for f in b.files])
    parser = next(p for name, _, p, _ in _CSV_FORMATS if name == b.fmt)
    return parser(read_csv(data_path(b.files[0])))


def _read_file(path: Path) -> tuple[str, Parsed]:
    lower = path.name.lower()
    if lower.endswith(".parquet"):
        return "native", native.parse(native.read_parquet(path))
    if lower.endswith((".trace", ".trace.gz")):
        return "gavel", gavel.parse_msr(path)
    if sacct.looks_like_sacct(path):
        return "sacct", sacct.parse(path)
    table = read_csv(path)
    for name, key, parser, _ in _CSV_FORMATS:
        if key in table.index:
            return name, parser(table)
    expected = "; ".join(f"{name} ({cols})" for name, _, _, cols in _CSV_FORMATS)
    fail(table.file, table.header_line, "header",
         f"unrecognised trace format, header is {','.join(table.header)}; expected one of: "
         f"{expected}; or a .parquet or Gavel .trace file")


@lru_cache(maxsize=1)
def _registry() -> dict[str, _Bundled]:
    """Bundled names, built from the data folders so the list never drifts from what ships."""
    reg = {"philly": _Bundled("philly", ("traces/philly/philly-digest.csv.gz",))}
    clusters = sorted(p.name for p in data_path("traces/itp").glob("cluster*.csv.gz"))
    reg["itp"] = _Bundled("itp", tuple(f"traces/itp/{c}" for c in clusters))
    for i, c in enumerate(clusters, start=1):
        reg[f"itp-{i}"] = _Bundled("itp", (f"traces/itp/{c}",))
    for variant in _POLLUX_VARIANTS:
        folder = "workloads" + (f"-{variant}" if variant else "")
        files = data_path(f"traces/pollux/{folder}").glob("workload-*.csv")
        for n in sorted(int(p.stem.split("-")[1]) for p in files):
            name = f"pollux-{variant}-{n}" if variant else f"pollux-{n}"
            reg[name] = _Bundled("pollux", (f"traces/pollux/{folder}/workload-{n}.csv",))
    reg["tiresias-60"] = _Bundled("tiresias", ("traces/tiresias/60_job.csv",))
    for p in sorted(data_path("traces/gavel/msr_philly_seed0").glob("*.trace.gz")):
        vc = p.name.split(".")[0]
        reg[f"gavel-philly-{vc}"] = _Bundled("gavel", (f"traces/gavel/msr_philly_seed0/{p.name}",))
    return reg
