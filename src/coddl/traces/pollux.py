"""Pollux (OSDI'21) workloads (``name,time,application,num_replicas,batch_size``).

These carry no duration: a Pollux job runs until its model converges, so the workload builder
decides the work from the application; the requested replicas and the global batch are kept.
"""

from __future__ import annotations

from coddl.traces._table import Parsed, Table

COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


def parse(table: Table) -> Parsed:
    name, time, app, replicas, batch = (table.column(c) for c in COLUMNS)
    return Parsed(name.unique_texts(), time.nonneg_floats(), replicas.positive_ints(),
                  {"model": app.texts(), "batch_size": batch.positive_ints()})
