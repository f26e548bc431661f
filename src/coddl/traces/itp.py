"""Microsoft ITP clusters as published with ElasticFlow (``job_id,submission_time,duration,num_gpu``).

Submission times are already relative seconds. Each bundled cluster is one file whose name
(``cluster01`` …) becomes the jobs' group, so the merged ``itp`` trace can be cut by ``vc``.
"""

from __future__ import annotations

from coddl.traces._table import Parsed, Table

COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")


def parse(table: Table, group: str | None = None) -> Parsed:
    job_id, submitted, duration, gpus = (table.column(c) for c in COLUMNS)
    return Parsed(job_id.unique_texts(), submitted.nonneg_floats(), gpus.positive_ints(),
                  {"duration": duration.positive_floats(), "group": [group] * len(table.rows)})
