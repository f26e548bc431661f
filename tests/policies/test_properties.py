"""Properties every registered policy must have, on random contexts and workloads.

* Feasible: never more GPUs than the cluster has; an elastic policy gives 0 or a count within
  [min, max], a rigid one exactly the request or 0.
* Deterministic under a seed: two schedulers with the same seed give identical records.
* A whole simulation with the engine's invariant checks on (no over-allocation, each job finishes
  once, ∫ rate dt = work).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cases import random_curves, random_specs
from coddl.core import Cluster, JobSpec
from coddl.policies import Shares, available, make_policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate

POLICIES = sorted(available())


def scheduler(policy: str, seed: int, *, jobs: int, gpus: int, progress: float) -> tuple[Scheduler, float]:
    """A scheduler with random jobs submitted over [0, 50) and run (by the policy itself) until
    ``progress`` seconds, so that shares, attained service and first starts vary."""
    rng = np.random.default_rng(seed)
    curves = random_curves(rng)
    specs = [dataclasses.replace(s, requested_gpus=min(s.requested_gpus, gpus), min_gpus=min(s.min_gpus, gpus))
             for s in random_specs(rng, curves, jobs)]  # every job fits the cluster; see the last test
    sched = Scheduler(Cluster.for_gpus(gpus, 8), make_policy(policy), curves, seed=seed)
    arrivals = sorted(specs, key=lambda s: s.arrival)
    for sp in arrivals:
        sched.submit(sp, sp.arrival)
    sched.step(float(max(s.arrival for s in specs)))
    return sched, float(max(s.arrival for s in specs)) + progress


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), jobs=st.integers(1, 25), gpus=st.integers(1, 48),
       progress=st.floats(0.0, 500.0))
def test_shares_are_feasible(policy: str, seed: int, jobs: int, gpus: int, progress: float) -> None:
    sched, now = scheduler(policy, seed, jobs=jobs, gpus=gpus, progress=progress)
    ctx = sched.context(now)
    out = sched.policy.allocate(ctx)
    g = np.asarray(out.gpus if isinstance(out, Shares) else out)
    j = ctx.jobs
    assert g.shape == (len(j),)
    assert (g >= 0).all() and int(g.sum()) <= ctx.capacity
    on = g > 0
    if sched.policy.elastic:
        assert ((g[on] >= j.min_gpus[on]) & (g[on] <= j.max_gpus[on])).all()
    else:
        assert (g[on] == j.requested[on]).all()


def small_workload(seed: int):
    rng = np.random.default_rng(seed)
    curves = random_curves(rng)
    return curves, random_specs(rng, curves, int(rng.integers(5, 20)))


@pytest.mark.parametrize("policy", POLICIES)
def test_simulation_keeps_invariants_and_is_deterministic(policy: str) -> None:
    for seed in range(3):
        curves, specs = small_workload(seed)
        specs = [s for s in specs if s.min_gpus <= 12 and s.requested_gpus <= 12]
        runs = [simulate(specs, Scheduler(Cluster.for_gpus(12, 4), make_policy(policy), curves, seed=seed), check=True)
                for _ in range(2)]
        a, b = ([(r.spec.job_id, r.finish, r.first_start, r.attained_service) for r in res.records] for res in runs)
        assert len(a) == len(specs)
        assert a == b




@pytest.mark.parametrize("policy", POLICIES)
def test_job_that_cannot_fit_gets_nothing(policy: str) -> None:
    """A rigid job asking for more GPUs than the cluster has, or an elastic one whose minimum is
    more than that, cannot run, even on an otherwise idle cluster."""
    curves = random_curves(np.random.default_rng(0))
    m = curves.names[0]
    pol = make_policy(policy)
    sched = Scheduler(Cluster.for_gpus(2, 8), pol, curves)
    sched.submit(JobSpec("big", 0.0, 3, 100.0, m, min_gpus=3 if pol.elastic else 1, max_gpus=3), 0.0)
    out = sched.policy.allocate(sched.context(0.0))
    assert np.asarray(out.gpus if isinstance(out, Shares) else out).tolist() == [0]


@pytest.mark.parametrize("policy", POLICIES)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), jobs=st.integers(1, 25), gpus=st.integers(1, 48),
       progress=st.floats(0.0, 500.0))
def test_no_gpu_idles_while_a_waiting_job_fits(policy: str, seed: int, jobs: int, gpus: int,
                                               progress: float) -> None:
    """Work conservation, the property a stub policy (nothing, or the first job only) fails: after
    the decision, no job left waiting could have started in the GPUs left free — at its minimum
    for an elastic policy, at its request for a rigid one and for AITurbo, which admits every job
    at its requested GPUs and only then shrinks predictable ones (its rules 6–7)."""
    sched, now = scheduler(policy, seed, jobs=jobs, gpus=gpus, progress=progress)
    ctx = sched.context(now)
    out = sched.policy.allocate(ctx)
    g = np.asarray(out.gpus if isinstance(out, Shares) else out)
    j = ctx.jobs
    need = j.min_gpus if sched.policy.elastic and policy != "aiturbo" else j.requested
    free = ctx.capacity - int(g.sum())
    waiting = np.flatnonzero(g == 0)
    assert not (need[waiting] <= free).any(), (free, need[waiting].tolist())
