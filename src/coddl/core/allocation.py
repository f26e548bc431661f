"""Allocations (which GPUs each job holds) and the Plan that turns one allocation into the next.

The executor receives only the Plan: a list of actions for the jobs whose GPUs changed. That keeps
both worlds proportional to what changed: the simulator re-times only those jobs; the real system
resizes only those process groups.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from coddl.core.job import JobId

Gpus = tuple[int, ...]  # sorted global GPU indices


class ActionKind(enum.Enum):
    START = "start"  # first placement of a job
    RESUME = "resume"  # placed again after a suspension
    GROW = "grow"  # keeps all its GPUs, gains some
    SHRINK = "shrink"  # keeps a subset of its GPUs
    MIGRATE = "migrate"  # some GPUs kept and some swapped, or all moved
    SUSPEND = "suspend"  # loses all GPUs (preempted)
    RECORE = "recore"  # same GPUs, different CPU cores (unified CPU–GPU allocation)
    COTENANTS = "cotenants"  # same GPU, shared with different jobs now: its speed changes, nothing moves


@dataclass(frozen=True, slots=True)
class Action:
    kind: ActionKind
    job_id: JobId
    old: Gpus
    new: Gpus
    cpus: int = 0  # CPU cores the job holds after the action
    cores: tuple[int, ...] = ()  # which cores (global indices, see Cluster.node_first_core)

    @property
    def is_resize(self) -> bool:
        return self.kind in (ActionKind.GROW, ActionKind.SHRINK, ActionKind.MIGRATE, ActionKind.RECORE)


@dataclass(slots=True)
class Plan:
    actions: list[Action] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.actions)

    def __iter__(self):
        return iter(self.actions)


@dataclass(slots=True)
class Allocation:
    """job → GPUs it holds, and the CPU cores it holds. Jobs holding nothing are absent."""

    gpus: dict[JobId, Gpus] = field(default_factory=dict)
    cores: dict[JobId, tuple[int, ...]] = field(default_factory=dict)

    def used(self) -> int:
        return sum(len(g) for g in self.gpus.values())

    def copy(self) -> "Allocation":
        return Allocation(dict(self.gpus), dict(self.cores))


def classify(old: Gpus, new: Gpus, ever_ran: bool) -> ActionKind | None:
    """The action that moves a job from ``old`` GPUs to ``new`` GPUs (None: nothing to do)."""
    if old == new:
        return None
    if not new:
        return ActionKind.SUSPEND
    if not old:
        return ActionKind.RESUME if ever_ran else ActionKind.START
    so, sn = set(old), set(new)
    if so < sn:
        return ActionKind.GROW
    if sn < so:
        return ActionKind.SHRINK
    return ActionKind.MIGRATE

