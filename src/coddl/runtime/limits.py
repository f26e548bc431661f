"""What the service accepts, as numbers an operator can read: the store's integer range, the largest
request body, and the rule for a job that can never fit the cluster.

Integers: the store keeps steps and ids in INTEGER columns, which are 32-bit on PostgreSQL; every
integer a job carries is bounded by that range on every backend, so a job accepted on SQLite could
move to PostgreSQL, and ``steps = 2**63`` is a 422 rather than a database error.

The fit rule: a data-parallel job needs at least ``min_gpus`` GPUs at once, all of one type (the
placer never mixes types unless told to), so it can never run when no GPU type of the cluster has
that many. Such a job is refused at submission (``refuse``, the default: the cluster of a running
server does not grow) or accepted and held with the reason in its message (``hold``: an operator who
will restart the server on a larger Ray cluster). The controller holds such jobs in either case —
a job accepted by a larger cluster and recovered on a smaller one waits; it is never failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from coddl.core.cluster import Cluster

MAX_STORE_INT = 2**31 - 1  # INTEGER columns (ids, steps): 32-bit on PostgreSQL
DEFAULT_MAX_BODY_BYTES = 256 * 1024  # a job file is a few hundred bytes; a long env value still fits
TooLarge = Literal["refuse", "hold"]


@dataclass(frozen=True)
class ApiLimits:
    """The API's operator-set limits (``coddl server start --max-body-kib``, ``--too-large``)."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    too_large: TooLarge = "refuse"

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1024:
            raise ValueError(f"the body limit must be at least 1 KiB, got {self.max_body_bytes} bytes")
        if self.too_large not in ("refuse", "hold"):
            raise ValueError(f"too_large must be refuse or hold, got {self.too_large!r}")


def largest_gang(cluster: Cluster) -> int:
    """The most GPUs one job can hold at once: all the GPUs of the cluster's largest GPU type."""
    return max(cluster.capacity_by_type.values())


def fit_problem(cluster: Cluster, min_gpus: int) -> str | None:
    """Why a job needing ``min_gpus`` GPUs at once can never run on ``cluster``, or None."""
    most = largest_gang(cluster)
    if min_gpus <= most:
        return None
    kinds = len(cluster.capacity_by_type)
    where = f"{most} GPUs" if kinds == 1 else f"at most {most} GPUs of one type"
    return f"needs {min_gpus} GPUs at once and the cluster has {where}"


def held_message(problem: str) -> str:
    """The message of a job held because it can never fit: it runs once a server on a larger
    cluster takes it over (and the message is cleared then)."""
    return f"held: {problem}; it waits for a larger cluster"
