"""What a trace reader produces: jobs as the trace describes them, before any workload building."""

from __future__ import annotations

from dataclasses import dataclass, field


class TraceError(ValueError):
    """A bad trace row or an unknown trace. The message is one line naming file, line and field,
    e.g. ``philly-digest.csv:1042: num_gpus: expected a positive integer, got 'x'``; the CLI prints
    it and exits with code 2."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. ``arrival`` is in seconds from the trace's first arrival (after any
    virtual-cluster selection). ``duration`` is the runtime on ``num_gpus`` GPUs as recorded;
    ``steps`` and ``model`` are set by traces that carry them (native, Tiresias, Pollux,
    Gavel); when both are set the workload is replayed exactly as written."""

    job_id: str
    arrival: float
    num_gpus: int
    duration: float | None = None
    steps: float | None = None
    model: str | None = None
    min_gpus: int | None = None
    max_gpus: int | None = None
    cpus: int | None = None
    user: str | None = None
    batch_size: int | None = None
    group: str | None = None  # virtual cluster / cluster name, when the trace has one


@dataclass
class Trace:
    name: str
    jobs: list[TraceJob]
    source: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def span(self) -> float:
        return (self.jobs[-1].arrival - self.jobs[0].arrival) if self.jobs else 0.0
