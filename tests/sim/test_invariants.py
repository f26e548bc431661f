"""Every built-in policy, on random workloads, keeps the simulator's invariants (checked at every
step by ``simulate(check=True)``: no GPU over-allocated or shared, each job finishes exactly once and
never before its arrival, ∫ rate dt equals each job's work) and is deterministic under a seed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import load_coddl_curves
from coddl.policies import available, make_policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate
from coddl.sim.reconfig import ReconfigCost

CURVES = load_coddl_curves()
MODELS = list(CURVES.names)

job = st.tuples(st.floats(0, 5000), st.sampled_from([1, 1, 1, 2, 4, 8]), st.floats(10, 20000),
                st.sampled_from(MODELS))


def specs_from(rows) -> list[JobSpec]:
    out = []
    for i, (arr, gpus, dur, model) in enumerate(rows):
        m = CURVES.model_index(model)
        gpus = min(gpus, int(CURVES.max_gpus[m]))
        out.append(JobSpec(f"j{i}", arr, gpus, dur * CURVES.throughput(m, gpus), model,
                           max_gpus=int(CURVES.max_gpus[m])))
    return out


def run(policy: str, specs, reconfig="zero", seed=0):
    sched = Scheduler(Cluster.for_gpus(16, 8), make_policy(policy), CURVES, seed=seed)
    return simulate(specs, sched, ReconfigCost(reconfig), check=True)


@pytest.mark.parametrize("policy", sorted(available()))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(job, min_size=1, max_size=30), reconfig=st.sampled_from(["zero", "in-place", "restart"]))
def test_invariants_hold_for_every_policy(policy, rows, reconfig):
    specs = specs_from(rows)
    res = run(policy, specs, reconfig)
    assert len(res.records) == len(specs)
    for r in res.records:
        assert r.finish > r.spec.arrival


@pytest.mark.parametrize("policy", sorted(available()))
@settings(max_examples=10, deadline=None)
@given(rows=st.lists(job, min_size=2, max_size=25), seed=st.integers(0, 3))
def test_deterministic_under_a_seed(policy, rows, seed):
    specs = specs_from(rows)
    a = [(r.spec.job_id, r.finish) for r in run(policy, specs, seed=seed).records]
    b = [(r.spec.job_id, r.finish) for r in run(policy, specs, seed=seed).records]
    assert a == b
