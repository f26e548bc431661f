"""Tiresias (NSDI'19) job lists (``job_id,num_gpu,submit_time,iterations,model_name,duration,interval``).

``iterations`` and ``model_name`` are optional columns so that Tiresias's other job files (e.g.
``tf_job.csv``, which has no step count) read too; ``interval`` is the generator's gap and
is implied by ``submit_time``.
"""

from __future__ import annotations

from coddl.traces._table import Parsed, Table

COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")


def parse(table: Table) -> Parsed:
    job_id, gpus, submitted, duration = (table.column(c) for c in COLUMNS)
    fields = {"duration": duration.positive_floats()}
    if (iterations := table.optional("iterations")) is not None:
        fields["steps"] = iterations.optional("float")  # Tiresias's name for them
    if (model := table.optional("model_name")) is not None:
        fields["model"] = model.optional("text")
    return Parsed(job_id.unique_texts(), submitted.nonneg_floats(), gpus.positive_ints(), fields)
