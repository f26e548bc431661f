"""Microsoft Philly, as digested by Pollux (``timestamp,duration,num_gpus,gpu_time,cluster``).

The digest's rows are not in submit order and mix 15 virtual clusters; :func:`assemble` does the
selection and ordering. Timestamps are naive wall-clock strings; they become seconds on a naive
(UTC-like) clock so that no local time zone or daylight-saving jump leaks into the arrivals.
"""

from __future__ import annotations

import warnings
from datetime import datetime, timezone

import numpy as np

from coddl.traces._table import Column, Parsed, Table, fail

COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
_EPOCH = datetime(1970, 1, 1)


def parse(table: Table) -> Parsed:
    """Job ids are ``philly-<file line>``, so any job can be found again in the digest."""
    stamps, duration, gpus, vc = (table.column(c) for c in COLUMNS)
    return Parsed([f"philly-{line}" for line in table.lines], _seconds(stamps), gpus.positive_ints(),
                  {"duration": duration.positive_floats(), "group": vc.texts()})


def _seconds(col: Column) -> np.ndarray:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy warns, rather than fails, on some odd stamps
            t = np.array(col.values, dtype="datetime64[s]")
        if not np.isnat(t).any():
            return t.astype(np.int64).astype(np.float64)
    except (ValueError, TypeError, Warning):  # e.g. a UserWarning on a stamp with a UTC offset
        pass
    return np.array([_cell_seconds(v, col.file, line) for line, v in zip(col.lines, col.values)])


def _cell_seconds(stamp: str, file: str, line: int) -> float:
    try:
        t = datetime.fromisoformat(stamp.strip())
    except (AttributeError, ValueError):
        fail(file, line, "timestamp", f"expected a date-time like '2017-10-09 07:01:55', got {stamp!r}")
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc).replace(tzinfo=None)
    return (t - _EPOCH).total_seconds()
