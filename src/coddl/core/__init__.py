"""Domain types shared by the simulated and the real world. No I/O, no clock."""

from coddl.core.cluster import Cluster, GpuType, LinkSpec, Node
from coddl.core.job import JobId, JobSpec, JobStatus
from coddl.core.allocation import Allocation, Action, ActionKind, Plan

__all__ = [
    "Action", "ActionKind", "Allocation", "Cluster", "GpuType", "JobId", "JobSpec", "JobStatus",
    "LinkSpec", "Node", "Plan",
]
