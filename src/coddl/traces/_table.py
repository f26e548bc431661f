"""The one place that reads tabular trace files and turns bad cells into one-line errors.

Every reader goes through :class:`Table` and :class:`Column` so that a user mistake in any format
reads the same way — ``<file>:<line>: <field>: <problem>`` with 1-based file lines (the header is
line 1) — and never surfaces as a traceback. Columns are converted whole with numpy; only a column
that fails is walked cell by cell, to name its first bad line. Readers return :class:`Parsed`
columns and :func:`assemble` selects, sorts and shifts them before building the frozen
``TraceJob`` objects once: together this keeps the 82k-row Philly digest well under a second.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import gzip
import io
import itertools
import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

import numpy as np

from coddl.traces.model import Trace, TraceError, TraceJob

_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(TraceJob))


@contextmanager
def gc_paused() -> Iterator[None]:
    """Loading a trace allocates ~10^5 objects, none of them garbage; left on, the cyclic
    collector rescans them again and again and costs about a third of the load time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def fail(file: str, line: int | None, field: str, problem: str) -> NoReturn:
    """Raise the one-line error; ``line`` is None where a file has no lines (a Parquet schema)."""
    where = file if line is None else f"{file}:{line}"
    raise TraceError(f"{where}: {field}: {problem}")


def read_text(path: Path) -> str:
    """The whole file as text (gunzipped when it ends in ``.gz``); I/O problems become TraceError."""
    try:
        raw = path.read_bytes()
        if path.suffix.lower() == ".gz":  # as the writer and the loader's extensions: any case
            raw = gzip.decompress(raw)
        return raw.decode("utf-8-sig")
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, expected a trace file") from None
    except (OSError, EOFError) as e:  # OSError includes gzip.BadGzipFile
        raise TraceError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a text file (expected UTF-8 CSV)") from None


@dataclass
class Table:
    """A file's header and rows, each row with the file line to name in errors.

    Values are strings for CSV and typed values for Parquet. Row widths are checked here, and a
    file without rows is an error here, so readers only deal with well-shaped tables.
    """

    file: str
    header: list[str]
    lines: list[int]
    rows: list[Sequence[Any]]
    header_line: int | None = 1
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.index = {}
        for i, name in enumerate(self.header):
            if name in self.index:
                fail(self.file, self.header_line, name, f"duplicate column in header {','.join(self.header)}")
            self.index[name] = i
        width = len(self.header)
        if set(map(len, self.rows)) - {width}:  # checked at C speed, walked only to name the line
            for line, values in zip(self.lines, self.rows):
                if len(values) < width:
                    fail(self.file, line, self.header[len(values)],
                         f"missing value (the row has {len(values)} of {width} fields)")
                if len(values) > width:
                    fail(self.file, line, "row", f"expected {width} fields ({','.join(self.header)}), "
                                                 f"got {len(values)}")
        if not self.rows:
            fail(self.file, self.header_line, "rows", "no jobs: the file has only a header")

    def column(self, name: str) -> "Column":
        """A required column; a missing one is named together with the header found."""
        if name not in self.index:
            fail(self.file, self.header_line, name, f"missing column; the header is {','.join(self.header)}")
        return self._column(name)

    def optional(self, name: str) -> "Column | None":
        return self._column(name) if name in self.index else None

    def read_as(self, former: str, name: str) -> None:
        """Read the column ``former`` as ``name`` when the file has only the former: a column coddl
        has renamed since the file was written. Errors name the column as the file spells it."""
        if former in self.index and name not in self.index:
            self.index[name] = self.index[former]

    def _column(self, name: str) -> "Column":
        i = self.index[name]
        return Column(self.file, self.header[i], self.lines, [r[i] for r in self.rows])


def read_csv(path: Path) -> Table:
    """Parse a CSV file (optionally gzipped). Blank lines are skipped and spaces after a comma
    ignored; numbers tolerate surrounding spaces and names are stripped."""
    name = path.name
    reader = csv.reader(io.StringIO(read_text(path), newline=""), skipinitialspace=True)
    try:
        header = next((v for v in reader if len(v) > 1 or (v and v[0].strip())), None)
        if header is None:
            fail(name, 1, "header", "the file is empty")
        header_line = reader.line_num
        body = [(reader.line_num, v) for v in reader if len(v) > 1 or (v and v[0].strip())]
    except csv.Error as e:
        fail(name, reader.line_num, "row", f"not valid CSV ({e})")
    return Table(name, [h.strip() for h in header], [b[0] for b in body], [b[1] for b in body],
                 header_line=header_line)


# --------------------------------------------------------------------------------- cell parsers

def _number(value: Any) -> float | None:
    """A finite float from a CSV string or a typed (Parquet) value; None when it is not one."""
    if isinstance(value, str):
        try:
            x = float(value)
        except ValueError:
            return None
    elif isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        x = float(value)
    else:
        return None
    return x if math.isfinite(x) else None


def _show(value: Any) -> str:
    return repr(value.strip() if isinstance(value, str) else "" if value is None else str(value))


INT_LIMIT = 2.0 ** 63  # the columns are int64: a count at or past this cannot be held


def positive_int(value: Any, file: str, line: int, field: str) -> int:
    x = _number(value)
    if x is not None and 0 < x < INT_LIMIT and x.is_integer():
        return int(x)
    fail(file, line, field, f"expected a positive integer, got {_show(value)}")


def positive_float(value: Any, file: str, line: int, field: str) -> float:
    x = _number(value)
    if x is not None and x > 0:
        return x
    fail(file, line, field, f"expected a positive number, got {_show(value)}")


def nonneg_float(value: Any, file: str, line: int, field: str) -> float:
    x = _number(value)
    if x is not None and x >= 0:
        return x
    fail(file, line, field, f"expected a non-negative number, got {_show(value)}")


def text(value: Any, file: str, line: int, field: str) -> str:
    s = value.strip() if isinstance(value, str) else "" if value is None else str(value)
    if s:
        return s
    fail(file, line, field, "expected a non-empty value, got ''")


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


@dataclass
class Column:
    """One column's values with the file lines they came from."""

    file: str
    name: str
    lines: list[int]
    values: list[Any]

    def positive_ints(self) -> np.ndarray:
        # floats are not converted in bulk: astype would silently truncate 2.5 to 2
        return self._vector(np.int64, "iuUS", lambda a: a > 0, positive_int)

    def positive_floats(self) -> np.ndarray:
        return self._vector(np.float64, "iufUS", lambda a: np.isfinite(a) & (a > 0), positive_float)

    def nonneg_floats(self) -> np.ndarray:
        return self._vector(np.float64, "iufUS", lambda a: np.isfinite(a) & (a >= 0), nonneg_float)

    def texts(self) -> list[str]:
        """Non-empty names, stripped; typed (Parquet) values such as integer ids become strings."""
        out = [v.strip() if isinstance(v, str) else v if v is None else str(v) for v in self.values]
        if "" in out or None in out:
            self._each(text)
        return out

    def unique_texts(self) -> list[str]:
        """Job ids: non-empty and each used once (a duplicate names both lines)."""
        ids = self.texts()
        if len(set(ids)) != len(ids):
            first: dict[str, int] = {}
            for line, job_id in zip(self.lines, ids):
                if first.setdefault(job_id, line) != line:
                    fail(self.file, line, self.name,
                         f"duplicate job id {job_id!r} (first on line {first[job_id]})")
        return ids

    def optional(self, kind: Literal["int", "float", "text"]) -> list[Any]:
        """An optional column: positive ints, positive floats or names, None where blank. A
        column with no blank goes the fast, whole-column way."""
        whole, cell = _KINDS[kind]
        if "" not in self.values and None not in self.values:
            values = whole(self)
            return values.tolist() if isinstance(values, np.ndarray) else values
        return [None if _blank(v) else cell(v, self.file, line, self.name)
                for line, v in zip(self.lines, self.values)]

    def _vector(self, dtype: type, kinds: str, ok: Callable[[np.ndarray], np.ndarray],
                cell: Callable[[Any, str, int, str], Any]) -> np.ndarray:
        """Convert the whole column at C speed; only if that fails, or some value is out of
        range, walk it cell by cell so the error names the first bad line. Raw kinds outside
        ``kinds`` (bools, mixed objects with None) always go cell by cell."""
        try:
            raw = np.asarray(self.values)
            if raw.dtype.kind in kinds:
                arr = raw.astype(dtype)
                if ok(arr).all():
                    return arr
        except (ValueError, TypeError, OverflowError):
            pass
        return np.array(self._each(cell), dtype=dtype)

    def _each(self, cell: Callable[[Any, str, int, str], Any]) -> list[Any]:
        return [cell(v, self.file, line, self.name) for line, v in zip(self.lines, self.values)]


_KINDS: dict[str, tuple[Callable[[Column], Any], Callable[[Any, str, int, str], Any]]] = {
    "int": (Column.positive_ints, positive_int),
    "float": (Column.positive_floats, positive_float),
    "text": (Column.texts, text),
}


# ----------------------------------------------------------------------------------- assembly

@dataclass
class Parsed:
    """A file's jobs column by column, arrivals still in the file's own clock.

    ``fields`` holds the other :class:`TraceJob` fields (duration, model, group, …) as lists or
    arrays with None where a job has no value; a field that is absent is None for every job.
    """

    job_id: list[str]
    arrival: np.ndarray
    num_gpus: np.ndarray
    fields: dict[str, Sequence[Any] | np.ndarray]

    def __post_init__(self) -> None:
        unknown = set(self.fields) - set(_JOB_FIELDS)
        assert not unknown, f"not TraceJob fields: {unknown}"

    @staticmethod
    def concat(parts: list["Parsed"]) -> "Parsed":
        names = {k for p in parts for k in p.fields}
        return Parsed(
            [j for p in parts for j in p.job_id],
            np.concatenate([p.arrival for p in parts]),
            np.concatenate([p.num_gpus for p in parts]),
            {k: [v for p in parts for v in _as_list(p.fields.get(k), len(p.job_id))] for k in names},
        )


def _as_list(col: Sequence[Any] | np.ndarray | None, n: int) -> list[Any]:
    if col is None:
        return [None] * n
    return col.tolist() if isinstance(col, np.ndarray) else list(col)


def assemble(name: str, parsed: Parsed, *, source: str, fmt: str, vc: str | None = None,
             limit: int | None = None) -> Trace:
    """Select a virtual cluster, sort by arrival (stable: ties keep file order), keep the first
    ``limit`` jobs and make arrivals relative to the first kept job."""
    if limit is not None and limit < 1:
        raise TraceError(f"{name}: limit: expected a positive integer, got {limit}")
    rows = np.arange(len(parsed.job_id))
    if vc is not None:
        groups = _as_list(parsed.fields.get("group"), len(parsed.job_id))
        counts = Counter(g for g in groups if g is not None)
        if not counts:
            raise TraceError(f"{name}: vc: this trace has no virtual clusters to select from")
        if vc not in counts:
            known = ", ".join(f"{g} ({n})" for g, n in counts.most_common())
            raise TraceError(f"{name}: vc: unknown virtual cluster {vc!r}; known (jobs): {known}")
        rows = np.flatnonzero(np.array([g == vc for g in groups], dtype=bool))
    order = rows[np.argsort(parsed.arrival[rows], kind="stable")][:limit]
    arrival = parsed.arrival[order]
    origin = float(arrival[0]) if len(order) else 0.0
    columns: dict[str, Any] = {
        "job_id": [parsed.job_id[i] for i in order.tolist()],
        "arrival": (arrival - origin).tolist(),
        "num_gpus": parsed.num_gpus[order].tolist(),
    }
    for key, col in parsed.fields.items():
        columns[key] = (col[order].tolist() if isinstance(col, np.ndarray)
                        else [col[i] for i in order.tolist()])
    jobs = [TraceJob(*values) for values in
            zip(*(columns.get(f, itertools.repeat(None)) for f in _JOB_FIELDS))]
    meta = {"format": fmt, "vc": vc, "arrival_origin": origin}
    return Trace(f"{name}:{vc}" if vc else name, jobs, source=source, meta=meta)
