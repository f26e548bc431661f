"""What a resize by restart costs a restartable command job, for the scheduler's rule that a job is
grown only when that saves more time than the restart costs (``coddl.policies.restarts``).

A restartable command job is resized by stopping its gang (SIGTERM, then the job's grace period
before SIGKILL) and starting a new one at the new world size, which then starts its program cold
and reloads its own checkpoint before it trains again. The executor times the first part of every
such restart — SIGTERM until the new gang is launched — and the controller keeps those times
per job: the cost is their mean plus ``COLD_START_S`` for the second part, which coddl cannot see
(a command reports no steps). Before the job's first restart the cost is the worst case of the
first part, the job's grace period, plus the same cold start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coddl.core.allocation import ActionKind

# A fresh Python process importing torch before its first step, measured on this project's hardware
# class (ALGORITHMS.md §7: 3.4 s cold, against 0.05 s from the warm pool an in-place resize uses).
COLD_START_S = 3.4
# the actions that restart a running command job's gang at another size or place
RESTARTS = frozenset({ActionKind.GROW.value, ActionKind.SHRINK.value, ActionKind.MIGRATE.value})


@dataclass
class RestartCost:
    """One restartable job's restart cost: its grace period until a restart has been measured."""

    grace_s: float
    measured: list[float] = field(default_factory=list)  # SIGTERM → new gang launched, per restart

    def seconds(self) -> float:
        stop_and_launch = sum(self.measured) / len(self.measured) if self.measured else self.grace_s
        return stop_and_launch + COLD_START_S

    def describe(self) -> str:
        n = len(self.measured)
        return (f"{self.seconds():.2f} s per resize: {self.seconds() - COLD_START_S:.2f} s from SIGTERM to the "
                f"new gang (mean of {n} restart{'s' if n != 1 else ''}) + {COLD_START_S} s cold start")
