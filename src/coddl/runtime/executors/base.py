"""The contract between the controller and a real executor, and the events that flow back.

The controller hands an executor the same Plan the simulator's executor gets (``apply``), plus what
only the real world needs: how to launch a job (``register``) and that a job must go now
(``cancel``: the scheduler frees a cancelled job's GPUs without a plan action). The executor never
decides anything; it carries out actions and reports what happened as events, which the controller
drains (``events``) after being woken (``notify``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, Union

from coddl.core.allocation import Plan
from coddl.core.cluster import Cluster
from coddl.core.job import JobId

if TYPE_CHECKING:  # importing coddl.elastic loads torch: the simulator, which uses these types, must not pay 2 s
    from coddl.elastic.protocol import Inspection


@dataclass(frozen=True)
class LaunchSpec:
    """How to run one job's workers: ``entry`` is a script path or ``module:function`` (for
    ``kind="command"``, a program: ``coddl.elastic.gang``); ``owner`` is the coddl user whose identity
    (or sandbox) the workers get."""

    job_id: JobId
    entry: str
    args: tuple[str, ...]
    env: Mapping[str, str]
    job_dir: Path
    owner: str = ""
    kind: str = "elastic"
    restartable: bool = False  # command jobs: resized by restart
    grace_s: float = 30.0  # command jobs: SIGTERM to SIGKILL


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    """Rank 0's newest report: cumulative ``step``, ``steps_per_s`` over the last window."""

    job_id: JobId
    at: float
    step: int
    world_size: int
    steps_per_s: float
    loss: float | None


@dataclass(frozen=True, slots=True)
class InspectionEvent:
    """Rank 0 timed the job's first steps (``coddl.elastic.protocol.Inspection``), once per job."""

    job_id: JobId
    at: float
    inspection: Inspection


@dataclass(frozen=True, slots=True)
class AppliedEvent:
    """An action was carried out: the job trains on ``gpus``; ``seconds`` from request to training."""

    job_id: JobId
    action: str
    gpus: tuple[int, ...]
    seconds: float
    at: float


@dataclass(frozen=True, slots=True)
class ExitEvent:
    """The job left the executor: ``finished`` (its script ended) or failed (``message`` says why)."""

    job_id: JobId
    finished: bool
    at: float
    message: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerLostEvent:
    """A worker process died; the job continues on the survivors (or restarts from its checkpoint)."""

    job_id: JobId
    at: float
    failures: int
    restarts: int
    cause: str | None = None  # what the worker's script said before it died (None: killed, or silent)


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """One worker process of a job: the slot it runs for, its pid and what identifies the process
    beyond its pid (local: its start time, None where it could not be read; Ray: its node), so that
    operators can find it and a restarted controller can tell its predecessor's orphans from
    recycled pids. The store keeps it, and the API shows it, as ``to_dict()``."""

    slot: int
    pid: int
    started: float | None = None
    node: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON: what is not known is left out."""
        out: dict[str, Any] = {"slot": self.slot, "pid": self.pid}
        if self.started is not None:
            out["started"] = self.started
        if self.node is not None:
            out["node"] = self.node
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkerRecord:
        """The record ``to_dict`` wrote; KeyError, TypeError or ValueError for anything else."""
        started, node = d.get("started"), d.get("node")
        return cls(int(d["slot"]), int(d["pid"]), None if started is None else float(started),
                   None if node is None else str(node))


@dataclass(frozen=True, slots=True)
class WorkersEvent:
    """The job's worker processes changed: the records of those it has now."""

    job_id: JobId
    at: float
    workers: tuple[WorkerRecord, ...]


@dataclass(frozen=True, slots=True)
class NoticeEvent:
    """Something the job's owner should know about how it runs (``kind`` names it, e.g. ``network``)."""

    job_id: JobId
    at: float
    kind: str
    detail: str


ExecutorEvent = Union[ProgressEvent, InspectionEvent, AppliedEvent, ExitEvent, WorkerLostEvent, WorkersEvent,
                      NoticeEvent]


class Executor(Protocol):
    """``kind`` names it (local, ray); ``cluster`` is the topology the scheduler plans on."""

    kind: str
    cluster: Cluster
    notify: Callable[[], None]

    def register(self, launch: LaunchSpec) -> None: ...

    def apply(self, plan: Plan) -> None:
        """Carry out the plan (asynchronously, in order with earlier plans and cancels)."""

    def cancel(self, job_id: JobId) -> None: ...

    def reap(self, workers: Sequence[WorkerRecord]) -> int:
        """Kill workers a previous controller left behind (records from WorkersEvent); returns how many."""

    def events(self) -> list[ExecutorEvent]: ...

    def close(self) -> None:
        """Stop every job gracefully (rank 0 checkpoints); no worker outlives it."""

    def abandon(self) -> None:
        """Kill every worker now, without checkpoints (the server lost its lease to another)."""
