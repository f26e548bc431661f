"""coddl's profile format: one table of throughput measurements, from any cluster.

Every measurement the estimator learns from or is judged against is one row: a job (``model``)
trained data-parallel on ``gpus`` GPUs of one ``gpu_type`` spread over ``nodes`` nodes, at a local
(per-GPU) batch, ran ``steps_per_s``. The bundled Pollux, Gavel and CPU/gloo measurements, a
user's own tables, a job's first steps in the real system and a cluster's collective
micro-benchmarks are all this one kind of data.

Columns (CSV with a header, optionally gzipped, or Parquet; unknown columns are ignored):

    column            required  meaning
    cluster           no        the testbed the row was measured on (default: the file's stem)
    model             yes       the job: rows of one (cluster, model) are one job's measurements
    param_bytes       yes       bytes all-reduced per step (gradients; 4 × parameters in fp32)
    gpu_type          yes       e.g. T4, V100, cpu
    gpus              yes       GPUs (data-parallel workers) the run used
    nodes             no        how many nodes they were on (default: from placement, else 1)
    placement         no        GPUs on each node, e.g. ``2+2+1`` (default: an even spread)
    local_batch       yes*      samples per GPU per step
    global_batch      no        samples per step, all GPUs (default gpus × local_batch)
    steps_per_s       yes       measured steps (optimizer updates) per second; a column under its
                                former name, iterations_per_s, still reads
    comm_s            no        seconds per step spent waiting for communication (exposed)
    compute_share     no        the share of a compute device each worker had, in (0, 1] (default
                                1: its own GPU; 0.5: two workers time-shared one CPU core)
    kind              no        ``job`` (default) or ``collective``: a micro-benchmark that only
                                all-reduces ``param_bytes`` (no compute; local_batch may be blank)

A bad cell is one line, ``<file>:<line>: <field>: <problem>``, raised as ``ProfileError`` (the CLI
prints it and exits with status 2). One model's ``param_bytes`` must agree on every row of a
cluster, since a job all-reduces the same gradients wherever it runs.
"""

from __future__ import annotations

import csv
import gzip
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from coddl.traces._table import Column, Table, read_csv
from coddl.traces.model import TraceError

COLUMNS = ("cluster", "model", "param_bytes", "gpu_type", "gpus", "nodes", "placement", "local_batch",
           "global_batch", "steps_per_s", "comm_s", "compute_share", "kind")
REQUIRED = ("model", "param_bytes", "gpu_type", "gpus", "steps_per_s")
KINDS = ("job", "collective")


class ProfileError(TraceError):
    """A profile table that cannot be used; the message is one line naming file, line and field."""


@dataclass(frozen=True)
class ProfileTable:
    """Measurements as columns (numpy arrays; names as lists). ``placement[i]`` is the tuple of
    GPUs per node of row i, largest first. ``comm_s`` is NaN where not measured."""

    cluster: list[str]
    model: list[str]
    param_bytes: np.ndarray
    gpu_type: list[str]
    gpus: np.ndarray
    placement: list[tuple[int, ...]]
    local_batch: np.ndarray
    steps_per_s: np.ndarray
    comm_s: np.ndarray
    kind: list[str]
    compute_share: np.ndarray | None = None  # None: 1 everywhere
    source: str = ""
    lines: np.ndarray | None = field(default=None, compare=False)  # file line of each row, for messages

    def __post_init__(self) -> None:
        n = len(self.model)
        if self.compute_share is None:
            object.__setattr__(self, "compute_share", np.ones(n))
        for name in ("cluster", "param_bytes", "gpu_type", "gpus", "placement", "local_batch",
                     "steps_per_s", "comm_s", "kind", "compute_share"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"profile table: column {name} has {len(getattr(self, name))} rows, model has {n}")

    def __len__(self) -> int:
        return len(self.model)

    # ---- derived columns ----
    @property
    def nodes(self) -> np.ndarray:
        return np.array([len(p) for p in self.placement], dtype=np.int64)

    @property
    def max_per_node(self) -> np.ndarray:
        return np.array([p[0] for p in self.placement], dtype=np.int64)

    @property
    def global_batch(self) -> np.ndarray:
        return self.gpus * self.local_batch

    @property
    def step_s(self) -> np.ndarray:
        return 1.0 / self.steps_per_s

    @property
    def samples_per_s(self) -> np.ndarray:
        return self.steps_per_s * self.global_batch

    @property
    def is_collective(self) -> np.ndarray:
        return np.array([k == "collective" for k in self.kind], dtype=bool)

    # ---- selection ----
    def take(self, rows: np.ndarray | Sequence[int]) -> "ProfileTable":
        idx = np.asarray(rows, dtype=np.int64) if not isinstance(rows, np.ndarray) or rows.dtype != bool \
            else np.flatnonzero(rows)
        pick = idx.tolist()
        return ProfileTable([self.cluster[i] for i in pick], [self.model[i] for i in pick], self.param_bytes[idx],
                            [self.gpu_type[i] for i in pick], self.gpus[idx], [self.placement[i] for i in pick],
                            self.local_batch[idx], self.steps_per_s[idx], self.comm_s[idx],
                            [self.kind[i] for i in pick], self.compute_share[idx], self.source,
                            None if self.lines is None else self.lines[idx])

    def where(self, *, cluster: str | None = None, model: str | None = None,
              kind: str | None = None) -> "ProfileTable":
        mask = np.ones(len(self), dtype=bool)
        if cluster is not None:
            mask &= np.array([c == cluster for c in self.cluster], dtype=bool)
        if model is not None:
            mask &= np.array([m == model for m in self.model], dtype=bool)
        if kind is not None:
            mask &= np.array([k == kind for k in self.kind], dtype=bool)
        return self.take(mask)

    @property
    def clusters(self) -> list[str]:
        return list(dict.fromkeys(self.cluster))

    def models(self, cluster: str | None = None, kind: str = "job") -> list[str]:
        return list(dict.fromkeys(m for m, c, k in zip(self.model, self.cluster, self.kind)
                                  if (cluster is None or c == cluster) and k == kind))

    @staticmethod
    def concat(tables: Iterable["ProfileTable"]) -> "ProfileTable":
        ts = list(tables)
        if not ts:
            raise ValueError("concat needs at least one table")
        return ProfileTable(
            [c for t in ts for c in t.cluster], [m for t in ts for m in t.model],
            np.concatenate([t.param_bytes for t in ts]), [g for t in ts for g in t.gpu_type],
            np.concatenate([t.gpus for t in ts]), [p for t in ts for p in t.placement],
            np.concatenate([t.local_batch for t in ts]), np.concatenate([t.steps_per_s for t in ts]),
            np.concatenate([t.comm_s for t in ts]), [k for t in ts for k in t.kind],
            np.concatenate([t.compute_share for t in ts]), ", ".join(dict.fromkeys(t.source for t in ts if t.source)))

    @staticmethod
    def build(rows: Iterable[dict[str, Any]], source: str = "") -> "ProfileTable":
        """A table from dicts with this module's column names (converters and measurement scripts
        use it); ``placement`` may be a tuple or a ``2+2`` string, ``nodes`` an even spread."""
        rs = list(rows)
        placement = [_placement_of(r) for r in rs]
        return ProfileTable(
            [str(r.get("cluster") or source or "cluster") for r in rs], [str(r["model"]) for r in rs],
            np.array([float(r["param_bytes"]) for r in rs]), [str(r["gpu_type"]) for r in rs],
            np.array([int(r["gpus"]) for r in rs], dtype=np.int64), placement,
            np.array([float(r.get("local_batch") or 0.0) for r in rs]),
            # a store written before the column was renamed keeps the former key
            np.array([float(r["steps_per_s"] if "steps_per_s" in r else r["iterations_per_s"]) for r in rs]),
            np.array([math.nan if r.get("comm_s") is None else float(r["comm_s"]) for r in rs]),
            [str(r.get("kind") or "job") for r in rs], np.array([float(r.get("compute_share") or 1.0) for r in rs]),
            source)


def even_spread(gpus: int, nodes: int) -> tuple[int, ...]:
    """``gpus`` over ``nodes`` as evenly as possible, largest first (what a row without a
    placement is taken to mean)."""
    base, extra = divmod(gpus, nodes)
    return tuple(base + (i < extra) for i in range(nodes))


def format_placement(p: Sequence[int]) -> str:
    return "+".join(str(g) for g in p)


def _placement_of(r: dict[str, Any]) -> tuple[int, ...]:
    p = r.get("placement")
    if p:
        parts = tuple(int(x) for x in (p.split("+") if isinstance(p, str) else p))
        return tuple(sorted(parts, reverse=True))
    return even_spread(int(r["gpus"]), int(r.get("nodes") or 1))


# ------------------------------------------------------------------------------------ reading

def read_profiles(path: str | Path) -> ProfileTable:
    """Read and validate a profile table (``.csv``, ``.csv.gz`` or ``.parquet``)."""
    p = Path(path)
    try:
        if p.name.lower().endswith(".parquet"):
            from coddl.traces.native import read_parquet

            table = read_parquet(p)
        else:
            table = read_csv(p)
        return _parse(table, p)
    except ProfileError:
        raise
    except TraceError as e:  # the shared table reader's one-line errors
        raise ProfileError(str(e)) from None


def read_many(paths: Iterable[str | Path]) -> ProfileTable:
    return ProfileTable.concat(read_profiles(p) for p in paths)


def _err(file: str, line: int, field: str, problem: str) -> None:
    raise ProfileError(f"{file}:{line}: {field}: {problem}")


def _parse(table: Table, path: Path) -> ProfileTable:
    file = table.file
    stem = path.name.split(".")[0]
    table.read_as("iterations_per_s", "steps_per_s")  # the column's former name
    cols = {c: table.column(c) for c in REQUIRED}
    opt = {c: table.optional(c) for c in COLUMNS if c not in REQUIRED}
    n = len(table.rows)
    model = cols["model"].texts()
    gpu_type = cols["gpu_type"].texts()
    gpus = cols["gpus"].positive_ints()
    rate = cols["steps_per_s"].positive_floats()
    nbytes = cols["param_bytes"].positive_floats()
    cluster = _texts_or(opt["cluster"], n, stem)
    kind = _texts_or(opt["kind"], n, "job")
    for line, k in zip(table.lines, kind):
        if k not in KINDS:
            _err(file, line, "kind", f"expected one of {', '.join(KINDS)}, got {k!r}")
    collective = np.array([k == "collective" for k in kind], dtype=bool)
    nodes = _optional_numbers(opt["nodes"], "int", n)
    local = _optional_numbers(opt["local_batch"], "float", n)
    global_ = _optional_numbers(opt["global_batch"], "float", n)
    comm = _optional_numbers(opt["comm_s"], "nonneg", n)
    share = _optional_numbers(opt["compute_share"], "float", n)
    if opt["local_batch"] is None and opt["global_batch"] is None and not collective.all():
        table.column("local_batch")  # names the missing column with the header found
    raw_place = opt["placement"].values if opt["placement"] is not None else [None] * n
    placement: list[tuple[int, ...]] = []
    local_out = np.zeros(n)
    for i, line in enumerate(table.lines):
        k = int(gpus[i])
        shape = _parse_placement(raw_place[i], file, line)
        if shape is not None:
            if sum(shape) != k:
                _err(file, line, "placement", f"{_show(raw_place[i])} holds {sum(shape)} GPUs, but gpus is {k}")
            if nodes[i] is not None and nodes[i] != len(shape):
                _err(file, line, "nodes", f"placement {_show(raw_place[i])} spans {len(shape)} nodes, "
                                          f"but nodes is {nodes[i]}")
        else:
            n_nodes = 1 if nodes[i] is None else int(nodes[i])
            if n_nodes > k:
                _err(file, line, "nodes", f"{n_nodes} nodes cannot hold {k} GPUs (at least one each)")
            shape = even_spread(k, n_nodes)
        placement.append(tuple(sorted(shape, reverse=True)))
        lb, gb = local[i], global_[i]
        if lb is None and gb is None:
            if not collective[i]:
                _err(file, line, "local_batch", "a job row needs local_batch or global_batch; both are empty")
            lb = 0.0
        elif lb is None:
            lb = gb / k
        elif gb is not None and abs(gb / k - lb) > 1.0:
            _err(file, line, "global_batch", f"{gb:g} over {k} GPUs is {gb / k:g} per GPU, "
                                             f"but local_batch is {lb:g}")
        if collective[i] and lb:
            _err(file, line, "local_batch", "a collective micro-benchmark has no batch; leave it empty")
        local_out[i] = lb
        if share[i] is not None and share[i] > 1.0:
            _err(file, line, "compute_share", f"expected a share of a device in (0, 1], got {share[i]:g}")
        if comm[i] is not None and comm[i] > 1.01 / rate[i]:
            _err(file, line, "comm_s", f"{comm[i]:g} s of communication exceeds the step itself "
                                       f"({1.0 / rate[i]:g} s at {rate[i]:g} steps/s)")
    first: dict[tuple[str, str], tuple[int, float]] = {}
    for line, c, m, b in zip(table.lines, cluster, model, nbytes.tolist()):
        seen = first.setdefault((c, m), (line, b))
        if not math.isclose(seen[1], b, rel_tol=1e-6):
            _err(file, line, "param_bytes", f"{m} on {c} all-reduces {seen[1]:g} bytes on line {seen[0]}, "
                                            f"{b:g} here; a job's gradient bytes do not change")
    return ProfileTable(cluster, model, nbytes, gpu_type, gpus, placement, local_out, rate,
                        np.array([math.nan if c is None else c for c in comm]), kind,
                        np.array([1.0 if v is None else v for v in share]), file, np.array(table.lines, dtype=np.int64))


def _show(v: Any) -> str:
    return repr(v.strip() if isinstance(v, str) else v)


def _texts_or(col: Column | None, n: int, default: str) -> list[str]:
    if col is None:
        return [default] * n
    return [default if v is None else v for v in col.optional("text")]


def _optional_numbers(col: Column | None, kind: str, n: int) -> list[Any]:
    if col is None:
        return [None] * n
    if kind == "nonneg":
        from coddl.traces._table import _blank, nonneg_float

        return [None if _blank(v) else nonneg_float(v, col.file, line, col.name)
                for line, v in zip(col.lines, col.values)]
    return col.optional(kind)  # type: ignore[arg-type]


def _parse_placement(value: Any, file: str, line: int) -> tuple[int, ...] | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = str(value).strip()
    parts = text.split("+")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        shape = ()
    if not shape or any(g < 1 for g in shape):
        _err(file, line, "placement", f"expected GPUs per node joined by '+', e.g. 2+2+1, got {text!r}")
    return shape


# ------------------------------------------------------------------------------------ writing

def write_profiles(table: ProfileTable, path: str | Path) -> int:
    """Write ``table`` as CSV (``.csv``/``.csv.gz``) or Parquet; reading it back gives the same rows."""
    p = Path(path)
    rows = []
    for i in range(len(table)):
        k = int(table.gpus[i])
        local = float(table.local_batch[i])
        rows.append([table.cluster[i], table.model[i], _num(table.param_bytes[i]), table.gpu_type[i], k,
                     len(table.placement[i]), format_placement(table.placement[i]),
                     None if table.kind[i] == "collective" else _num(local),
                     None if table.kind[i] == "collective" else _num(local * k),
                     _num(table.steps_per_s[i]),
                     None if math.isnan(table.comm_s[i]) else _num(table.comm_s[i]),
                     None if table.compute_share[i] == 1.0 else _num(table.compute_share[i]), table.kind[i]])
    name = p.name.lower()
    try:
        if name.endswith(".parquet"):
            from coddl.traces.native import _pyarrow

            pa, pq = _pyarrow()
            data = {c: [r[j] for r in rows] for j, c in enumerate(COLUMNS)}
            pq.write_table(pa.table(data), p)
        elif name.endswith(".csv") or name.endswith(".csv.gz"):
            opener = gzip.open if name.endswith(".gz") else open
            with opener(p, "wt", newline="", encoding="utf-8") as f:
                w = csv.writer(f, lineterminator="\n")
                w.writerow(COLUMNS)
                w.writerows(rows)
        else:
            raise ProfileError(f"{p}: expected an output name ending in .csv, .csv.gz or .parquet")
    except OSError as e:
        raise ProfileError(f"{p}: cannot write: {e.strerror or e}") from None
    except TraceError as e:
        raise ProfileError(str(e)) from None
    return len(rows)


def _num(x: float) -> int | float:
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x
