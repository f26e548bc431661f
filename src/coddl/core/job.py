"""What a user submits (JobSpec, immutable) and the lifecycle states a job moves through."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

JobId = str
# the smallest part of a GPU a job may ask for: a hundred jobs on one GPU is already more than any
# GPU runs usefully, and a smaller fraction would let one user's jobs crowd a shared GPU without bound
MIN_GPU_FRACTION = 0.01


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
    model's maximum useful GPUs, which can exceed the request. ``total_work`` is in steps of
    the job's model at its fixed global batch, so work is independent of how many GPUs run it.

    Sharing a GPU (the other scale of GPU management: many jobs per GPU). ``gpu_fraction`` < 1 asks
    for that part of one GPU (0.25, 0.5: a small model, a trial of a search); ``shareable`` says a
    one-GPU job accepts one co-tenant on its GPU (Gavel's space sharing, which measured pairs), and
    is packed as half a GPU. ``gpu_memory_gb`` is what the job needs of its GPU's memory; None:
    its fraction of the GPU's memory (half for a shareable job). A sharing job runs on exactly one
    GPU: a data-parallel job's GPUs are never shared (``coddl.placement.sharing``).
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
    gpu_fraction: float = 1.0  # of one GPU, in [MIN_GPU_FRACTION, 1]; < 1: packed beside other sharing jobs
    shareable: bool = False  # a one-GPU job that accepts a co-tenant on its GPU
    gpu_memory_gb: float | None = None  # GPU memory the job needs (None: its fraction of the GPU's)
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
        if not MIN_GPU_FRACTION <= self.gpu_fraction <= 1.0:
            raise ValueError(f"job {self.job_id}: gpu_fraction must be in [{MIN_GPU_FRACTION}, 1], got {self.gpu_fraction}")
        if self.gpu_memory_gb is not None and not self.gpu_memory_gb > 0:
            raise ValueError(f"job {self.job_id}: gpu_memory_gb must be > 0, got {self.gpu_memory_gb}")
        if self.shares_gpu and (self.requested_gpus != 1 or self.min_gpus != 1
                                or (self.max_gpus is not None and self.max_gpus != 1)):
            raise ValueError(f"job {self.job_id}: a job sharing a GPU (gpu_fraction < 1 or shareable) runs on "
                             f"one GPU; requested_gpus, min_gpus and max_gpus must be 1")

    @property
    def shares_gpu(self) -> bool:
        """The job may be packed with others on one GPU."""
        return self.gpu_fraction < 1.0 or self.shareable

    @property
    def packing_fraction(self) -> float:
        """The part of its GPU the job is packed as: its fraction, or half for a shareable job
        (one co-tenant), or the whole GPU for a job that does not share."""
        if self.gpu_fraction < 1.0:
            return self.gpu_fraction
        return 0.5 if self.shareable else 1.0
