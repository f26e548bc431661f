"""The AITurbo policy: Borda ranks, MLFQ demotion, feasibility of its CPU–GPU shares, re-plans,
and whole simulations with CPU-sensitive throughput."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from coddl.core.allocation import ActionKind
from coddl.core.cluster import Cluster, Node
from coddl.core.job import JobSpec
from coddl.perf.predictor import CpuEfficiency
from coddl.policies import make_policy
from coddl.policies.aiturbo import AITurbo, borda_score, mlfq_level
from coddl.policies.base import ThroughputSample
from coddl.scheduler import Scheduler
from coddl.sim.cpu_rate import CpuAwareRate
from coddl.sim.engine import simulate
from coddl.sim.reconfig import ReconfigCost

EFF = CpuEfficiency(4.0, 0.9, 0.6)  # a CPU-hungry job's step-time factor (× 1/eff(3) to normalise)


def test_borda_scores_on_hand_built_jobs():
    # unified service 100, 0, 50, 10 → LAS ranks 4, 1, 3, 2; jobs 0 and 2 are predictable with
    # benefits 5 and 9 → benefit ranks 2 and 1; unpredictable jobs count their LAS rank twice
    service = np.array([100.0, 0.0, 50.0, 10.0])
    predictable = np.array([True, False, True, False])
    gain = np.array([5.0, 0.0, 9.0, 0.0])
    arrival = np.arange(4.0)
    assert borda_score(service, gain, predictable, arrival).tolist() == [4 + 2, 2 * 1, 3 + 1, 2 * 2]


def test_borda_ties_go_to_the_earlier_arrival():
    score = borda_score(np.zeros(3), np.zeros(3), np.zeros(3, dtype=bool), np.array([5.0, 1.0, 3.0]))
    assert score.tolist() == [6, 2, 4]


def test_mlfq_levels_at_the_thresholds():
    scores = np.array([2, 29, 30, 179, 180, 10_000])
    assert mlfq_level(scores, (30.0, 180.0)).tolist() == [0, 0, 1, 1, 2, 2]


def rigid_jobs(n: int, gpus: int = 8) -> list[JobSpec]:
    return [JobSpec(f"j{i}", float(i), gpus, 1e6, "lin", min_gpus=gpus, max_gpus=gpus) for i in range(n)]


def test_a_demoted_job_stays_demoted(linear_curves):
    """j0 reaches 40 points (LAS rank 20 of 20) → queue 1. Once only j0 and j1 are left, j0 has
    the lower score (2 vs 4) but stays in queue 1, so j1 (queue 0) gets the only 8 GPUs."""
    linear = type(linear_curves)(["lin"], np.arange(9, dtype=float)[None, :], np.array([8]))
    s = Scheduler(Cluster.homogeneous(1, 8), make_policy("aiturbo"), linear)
    for spec in rigid_jobs(20):
        s.submit(spec, 0.0)
    s.table.service0[s.table.row["j0"]] = 1e6
    s.step(0.0)
    assert s.policy._level["j0"] == 1
    for i in range(2, 20):
        s.complete(f"j{i}", 1.0)
    s.table.service0[s.table.row["j1"]] = 2e6
    ctx = s.context(2.0)
    shares = s.policy.allocate(ctx)
    assert shares.gpus[ctx.jobs.ids.index("j1")] == 8 and shares.gpus[ctx.jobs.ids.index("j0")] == 0
    assert AITurbo().allocate(ctx).gpus[ctx.jobs.ids.index("j0")] == 8  # a fresh policy: j0 first


def feed(s: Scheduler, job: str, curves, cores_per_gpu: list[int], gpus: int = 2) -> None:
    """Samples of a CPU-hungry job (eff(x) above, normalised at 3 cores per GPU) at several core counts."""
    row = s.table.row[job]
    base = curves.rate[s.table.model[row], gpus]
    for t, x in enumerate(cores_per_gpu):
        rate = base * float(EFF(3.0)) / float(EFF(x))
        s.observe(job, ThroughputSample(float(t), gpus, 1, gpus * x, rate, 10.0 * t))


@pytest.fixture
def mixed_cluster() -> Cluster:
    return Cluster(nodes=(Node("n0", 8, cpus=24), Node("n1", 8, cpus=48)))


def test_a_predicted_cpu_hungry_job_gets_more_cores_and_a_cpu_insensitive_one_fewer(mixed_cluster,
                                                                                      synergy_curves):
    s = Scheduler(mixed_cluster, make_policy("aiturbo:max_cores_per_gpu=6"), synergy_curves)
    s.submit(JobSpec("hungry", 0.0, 2, 1e5, "res18", max_gpus=2), 0.0)
    s.submit(JobSpec("calm", 0.0, 2, 1e5, "bert", max_gpus=2), 0.0)
    feed(s, "hungry", synergy_curves, [3, 5, 2, 4, 6, 3, 5])
    row = s.table.row["calm"]
    base = synergy_curves.rate[s.table.model[row], 2]
    for t, x in enumerate([3, 5, 2, 4, 6, 3]):
        s.observe("calm", ThroughputSample(float(t), 2, 1, 2 * x, base, 10.0 * t))
    ctx = s.context(100.0)
    shares = s.policy.allocate(ctx)
    assert s.policy._jobs["hungry"].predictor.predictable and s.policy._jobs["calm"].predictor.predictable
    cores = dict(zip(ctx.jobs.ids, shares.cpus.tolist()))
    assert cores["hungry"] == 2 * 6  # the cap: faster with every core, and cores are plentiful
    assert cores["calm"] == 2 * 1  # the fewest: more cores buy it nothing


def test_with_gpu_proportional_cores_the_policy_leaves_cores_to_the_placer(mixed_cluster, synergy_curves):
    s = Scheduler(mixed_cluster, make_policy("aiturbo:unified=false"), synergy_curves)
    s.submit(JobSpec("a", 0.0, 2, 1e5, "res18", max_gpus=2), 0.0)
    assert s.policy.allocate(s.context(0.0)).cpus is None


def test_replans_periodically_and_as_soon_as_a_job_becomes_predictable(mixed_cluster, synergy_curves):
    s = Scheduler(mixed_cluster, make_policy("aiturbo"), synergy_curves)
    s.submit(JobSpec("a", 0.0, 2, 1e5, "res18", max_gpus=2), 0.0)
    s.step(0.0)
    assert s.next_wakeup(0.0) == 240.0
    feed(s, "a", synergy_curves, [4, 6, 3, 5, 2, 4])
    w = s.next_wakeup(10.0)
    assert 10.0 < w < 10.0 + 1e-9
    assert s.next_wakeup(10.0) == 240.0  # reported once


jobs_strategy = st.lists(
    st.tuples(st.sampled_from(["res18", "bert", "alexnet", "vae", "res50"]), st.sampled_from([1, 1, 2, 4, 8]),
              st.integers(1, 16), st.floats(0, 5e4), st.booleans(), st.integers(0, 2)),
    min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=jobs_strategy, cores=st.lists(st.sampled_from([8, 16, 24, 32, 48]), min_size=1, max_size=4),
       cap=st.sampled_from([0, 4, 6, 12]), unified=st.booleans())
def test_never_over_commits_cores_or_gpus_and_stays_within_bounds(rows, cores, cap, unified, synergy_curves):
    cluster = Cluster(nodes=tuple(Node(f"n{i}", 8, cpus=c) for i, c in enumerate(cores)))
    policy = make_policy(f"aiturbo:max_cores_per_gpu={cap}+unified={unified}")
    s = Scheduler(cluster, policy, synergy_curves)
    for i, (model, gpus, top, service, informative, fixed) in enumerate(rows):
        top = max(top, 1)
        spec = JobSpec(f"j{i}", 0.0, gpus, 1e5, model, max_gpus=top,
                       min_cpus=[None, 2, None][fixed], max_cpus=[None, 40, 3][fixed])
        s.submit(spec, 0.0)
        s.table.service0[s.table.row[spec.job_id]] = service
        if informative:
            feed(s, spec.job_id, synergy_curves, [3, 5, 2, 4, 6, 3], gpus=min(gpus, top))
    for now in (0.0, 300.0, 600.0):  # three re-plans: probing, growth and shedding all get a turn
        ctx = s.context(now)
        shares = policy.allocate(ctx)
        g, j = shares.gpus, ctx.jobs
        assert g.sum() <= ctx.capacity
        on = g > 0
        assert (g[on] >= j.min_gpus[on]).all() and (g[on] <= np.maximum(j.max_gpus, j.requested)[on]).all()
        if shares.cpus is not None:
            c = shares.cpus
            assert c.sum() <= ctx.cpu_capacity
            assert (c[~on] == 0).all() and (c[on] >= 1).all()
            free = (j.max_cpus == 0) & (j.min_cpus == 0) & on
            lo, base, hi = policy.core_range(ctx)
            assert (c[free] >= g[free] * lo).all() and (c[free] <= g[free] * hi).all()
        s.step(now)


def workload(curves, n: int, seed: int) -> list[JobSpec]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        m = curves.names[int(rng.integers(len(curves.names)))]
        g = int(rng.choice([1, 1, 1, 2, 4, 8]))
        out.append(JobSpec(f"j{i}", float(rng.uniform(0, 30000)), g,
                           float(rng.lognormal(8.0, 1.0)) * curves.throughput(m, g), m, max_gpus=16))
    return out


def test_a_whole_simulation_keeps_the_invariants_and_uses_the_cpu_dimension(mixed_cluster, synergy_curves):
    specs = workload(synergy_curves, 40, seed=4)
    s = Scheduler(mixed_cluster, make_policy("aiturbo:max_cores_per_gpu=6"), synergy_curves)
    kinds: list[ActionKind] = []
    step = s.step

    def recording(now):
        out = step(now)
        kinds.extend(a.kind for a in out.plan)
        return out

    s.step = recording
    res = simulate(specs, s, ReconfigCost("in-place"), rate_model=CpuAwareRate(s), sample_noise=0.05,
                   check=True, seed=1)
    assert len(res.records) == len(specs)
    assert ActionKind.RECORE in kinds  # probes and CPU moves change cores without touching GPUs
    assert any(math.isfinite(r.jct) for r in res.records)


def test_unified_allocation_helps_cpu_hungry_jobs_on_a_cpu_poor_node(synergy_curves):
    """One 24-core node (3 cores per GPU) and long CPU-hungry res18 and CPU-insensitive bert jobs:
    moving cores from bert to res18 must finish the jobs sooner on average."""
    cluster = Cluster(nodes=(Node("n0", 8, cpus=24),))
    specs = [JobSpec(f"j{i}", 60.0 * i, 2, 4e4 * synergy_curves.throughput(m, 2), m, max_gpus=2)
             for i, m in enumerate(["res18", "bert", "res18", "bert"])]
    jct = {}
    for spec in ("aiturbo:max_cores_per_gpu=9", "aiturbo:unified=false"):
        s = Scheduler(cluster, make_policy(spec), synergy_curves)
        res = simulate(specs, s, rate_model=CpuAwareRate(s), sample_noise=0.02, check=True, seed=2)
        jct[spec] = np.mean([r.jct for r in res.records])
    assert jct["aiturbo:max_cores_per_gpu=9"] < 0.9 * jct["aiturbo:unified=false"]
