"""The simulator's executor is an Executor like the real ones: the engine and the controller can
drive either through the same calls (DESIGN.md: one scheduler core, two worlds)."""

from __future__ import annotations

import inspect

import pytest

from coddl.runtime.executors.base import Executor
from coddl.runtime.executors.local import LocalExecutor
from coddl.runtime.executors.ray import RayExecutor
from coddl.sim.executor import SimExecutor

METHODS = sorted(n for n, v in vars(Executor).items() if inspect.isfunction(v) and not n.startswith("_"))
ATTRIBUTES = sorted(Executor.__annotations__)


def test_the_protocol_is_what_the_executors_share() -> None:
    assert METHODS == ["abandon", "apply", "cancel", "close", "events", "reap", "register"]
    assert ATTRIBUTES == ["cluster", "kind", "notify"]


@pytest.mark.parametrize("cls", [SimExecutor, LocalExecutor, RayExecutor])
def test_every_executor_has_the_protocols_methods_with_its_parameters(cls) -> None:
    """The protocol's parameters, in order; an executor may add its own only with defaults."""
    for name in METHODS:
        theirs = inspect.signature(getattr(cls, name)).parameters
        ours = list(inspect.signature(getattr(Executor, name)).parameters)
        assert list(theirs)[: len(ours)] == ours, f"{cls.__name__}.{name}{list(theirs)} is not Executor.{name}{ours}"
        extra = list(theirs.values())[len(ours):]
        assert all(p.default is not inspect.Parameter.empty for p in extra), f"{cls.__name__}.{name}: {extra}"


def test_a_sim_executor_has_the_protocols_attributes() -> None:
    import numpy as np

    from coddl.core.cluster import Cluster
    from coddl.perf.curves import CurveTable
    from coddl.policies.registry import make_policy
    from coddl.scheduler import Scheduler
    from coddl.sim.reconfig import ReconfigCost

    s = Scheduler(Cluster.for_gpus(2, 2), make_policy("fifo"), CurveTable(["m"], np.array([[0.0, 1.0, 2.0]]), np.array([2])))
    ex = SimExecutor(s, ReconfigCost("zero"))
    assert ex.kind == "sim" and ex.cluster is s.cluster and callable(ex.notify)
    assert ex.events() == [] and ex.reap([]) == 0
    ex.abandon()
