"""What a user submits (JobSpec, immutable) and the lifecycle states a job moves through."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

JobId = str


class JobStatus(enum.Enum):
    """Lifecycle of a job. QUEUED jobs hold no GPUs; SUSPENDED ones ran before and were preempted."""

    QUEUED = "queued"
    RUNNING = "running"
    SUSPENDED = "suspended"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """An immutable training-job request.

    ``requested_gpus`` (r_j) is what the user asked for: rigid policies give exactly that or nothing.
    ``min_gpus``/``max_gpus`` bound what elastic policies may give; ``max_gpus`` defaults to the
    model's maximum useful GPUs, which can exceed the request. ``total_work`` is in iterations of
    the job's model at its fixed global batch, so work is independent of how many GPUs run it.
    """

    job_id: JobId
    arrival: float
    requested_gpus: int
    total_work: float
    model: str
    min_gpus: int = 1
    max_gpus: int | None = None
    min_cpus: int | None = None
    max_cpus: int | None = None
    user: str = "default"
    account: str | None = None  # the team it is charged to: a Slurm account, a Philly virtual cluster
    gpu_type: str | None = None
    duration: float | None = None  # the trace's duration on requested_gpus, kept for reports
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.requested_gpus < 1:
            raise ValueError(f"job {self.job_id}: requested_gpus must be >= 1, got {self.requested_gpus}")
        if self.total_work <= 0:
            raise ValueError(f"job {self.job_id}: total_work must be > 0, got {self.total_work}")
        if self.arrival < 0:
            raise ValueError(f"job {self.job_id}: arrival must be >= 0, got {self.arrival}")
        if self.min_gpus < 1:
            raise ValueError(f"job {self.job_id}: min_gpus must be >= 1, got {self.min_gpus}")
        if self.max_gpus is not None and self.max_gpus < self.min_gpus:
            raise ValueError(f"job {self.job_id}: max_gpus {self.max_gpus} < min_gpus {self.min_gpus}")
