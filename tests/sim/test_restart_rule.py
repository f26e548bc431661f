"""The simulator under the rule that a job whose resize costs a restart is grown only when that
saves more than the restart costs (``charge_restarts``): free and in-place resizes replay exactly
as without it; under ``reconfig: restart`` the rule restarts fewer jobs and finishes them sooner
on average (``benchmarks/restart_rule.py`` measures it on every Pollux workload)."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core.allocation import Action, ActionKind
from coddl.sim.config import SimConfig
from coddl.sim.reconfig import ReconfigCost
from coddl.sim.run import prepare, run_policy


def test_a_resize_costs_its_checkpoint_and_a_cold_start_only_under_restart() -> None:
    # VGG-16: 138 M fp32 parameters + one optimizer copy = 1.104 GB, written and read back at
    # 1 GB/s = 2.208 s, plus its measured cold start 0.35 + 3.57 s = 6.128 s.
    assert ReconfigCost("restart").resize_cost("VggnetModel256") == pytest.approx(6.128)
    assert ReconfigCost("restart").resize_cost("unknown") == pytest.approx(30.0 + 0.4)  # 100 MB default state
    assert ReconfigCost("in-place").resize_cost("VggnetModel256") == 0.0
    assert ReconfigCost("zero").resize_cost("VggnetModel256") == 0.0
    grow = Action(ActionKind.GROW, "j", (0,), (0, 1))
    assert ReconfigCost("restart").pause(grow, "VggnetModel256", 0.5) == pytest.approx(6.628)


def outcome(cfg: SimConfig, policy: str) -> tuple[list, float, int]:
    r = run_policy(prepare(cfg), policy, cfg)
    rows = sorted((x.spec.job_id, x.finish, x.resizes) for x in r.records)
    return rows, float(np.mean([x.finish - x.spec.arrival for x in r.records])), sum(x.resizes for x in r.records)


@pytest.mark.parametrize("reconfig", ["zero", "in-place"])
def test_free_and_in_place_resizes_replay_exactly_as_without_the_rule(reconfig) -> None:
    base = dict(trace="pollux-1", jobs=60, gpus=16, reconfig=reconfig, policies=["afs-l"])
    assert outcome(SimConfig.build(**base, charge_restarts=True), "afs-l")[0] == \
        outcome(SimConfig.build(**base), "afs-l")[0]


@pytest.mark.parametrize("policy", ["afs-l", "max-min"])
def test_under_restart_the_rule_restarts_fewer_jobs_and_finishes_them_sooner(policy) -> None:
    base = dict(trace="pollux-1", jobs=80, gpus=32, reconfig="restart", policies=[policy])
    _, jct_free, resizes_free = outcome(SimConfig.build(**base), policy)
    _, jct, resizes = outcome(SimConfig.build(**base, charge_restarts=True), policy)
    assert resizes < resizes_free
    assert jct < jct_free
