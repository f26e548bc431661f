"""AITurbo's per-job state pinned with hand-computed values: the predictor's parameters and prior
points (the scheduler's curve at powers of two up to the job's maximum), the ingestion of samples
(only new ones, every job, loss and progress kept) and when it asks for an immediate re-plan, and
the plan of a predictable job — its grid of GPUs × cores per GPU, the predicted speed and
T·U ÷ R on it, the walk from the default allocation (its gain and the cores its CPU moves choose)
and its cache per model version."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.core.cluster import Cluster, Node
from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable
from coddl.perf.predictor import CpuEfficiency, JobPredictor, PredictorParams, SpeedModel
from coddl.policies.aiturbo import AITurbo, _JobState
from coddl.policies.base import ThroughputSample
from coddl.scheduler import Scheduler

from test_aiturbo_pins import LIN


def sched(policy: AITurbo | None = None, gpus: int = 8, cpus: int = 48, curves: CurveTable = LIN) -> Scheduler:
    return Scheduler(Cluster(nodes=(Node("n0", gpus, cpus=cpus),)), policy or AITurbo(), curves)


def sample(t: float, gpus: int = 2, cpus: int = 6, rate: float = 2.0, progress: float = 0.0,
           loss: float | None = None) -> ThroughputSample:
    return ThroughputSample(t, gpus, 1, cpus, rate, progress, loss)


# ------------------------------------------------------------------ the predictor's parameters
def test_the_policys_predictor_parameters_reach_every_job_predictor() -> None:
    params = AITurbo.Params(threshold=0.2, window=4, min_samples=5, min_cpu_configs=2,
                            reference_cores_per_gpu=2.5, prior_weight=0.7)
    s = sched(AITurbo(params))
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    s.observe("a", sample(1.0))
    s.policy._ingest(s.context(1.0))
    assert s.policy._jobs["a"].predictor.params == PredictorParams(
        threshold=0.2, window=4, min_samples=5, min_cpu_configs=2, reference=2.5, prior_weight=0.7)
    # GPUs only: cores are no decision, so one core count is enough
    s = sched(AITurbo(AITurbo.Params(unified=False, min_cpu_configs=4)))
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    s.observe("a", sample(1.0))
    s.policy._ingest(s.context(1.0))
    assert s.policy._jobs["a"].predictor.params.min_cpu_configs == 1


def predictable_after(policy: AITurbo, samples: list[ThroughputSample]) -> bool:
    """Feed a 2-GPU job on the linear curve (prior: rate = GPUs, so θ0 = 1 s and the model
    predicts 2 steps/s on 2 GPUs at any core count) these samples; is it predictable?"""
    s = sched(policy)
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    for smp in samples:
        s.observe("a", smp)
    policy._ingest(s.context(100.0))
    return policy._jobs["a"].predictor.predictable


def test_predictability_follows_the_policys_threshold_window_and_sample_counts() -> None:
    # measured 2.1 steps/s where 2 are predicted: error 0.1 / 2.1 = 0.0476 per sample, below the
    # 0.10 at which the predictor refits, so every sample is scored against the same prediction
    off = [sample(float(t), rate=2.1) for t in range(1, 4)]
    gpus_only = dict(unified=False)
    assert predictable_after(AITurbo(AITurbo.Params(**gpus_only)), off)  # 0.0476 < 0.10
    assert predictable_after(AITurbo(AITurbo.Params(threshold=0.05, **gpus_only)), off)
    assert not predictable_after(AITurbo(AITurbo.Params(threshold=0.04, **gpus_only)), off)
    exact = [sample(float(t)) for t in range(1, 5)]
    assert not predictable_after(AITurbo(AITurbo.Params(window=4, **gpus_only)), exact[:3])  # 3 errors < 4
    assert predictable_after(AITurbo(AITurbo.Params(window=4, **gpus_only)), exact)
    assert not predictable_after(AITurbo(AITurbo.Params(min_samples=5, **gpus_only)), exact)  # 4 samples < 5
    # when cores are a decision, three distinct core counts per GPU by default; one is enough
    # when they are not (unified=false) or when min_cpu_configs says so
    assert not predictable_after(AITurbo(), exact)
    assert predictable_after(AITurbo(AITurbo.Params(min_cpu_configs=1)), exact)
    three = [sample(1.0, cpus=4), sample(2.0, cpus=6), sample(3.0, cpus=8), sample(4.0, cpus=4)]
    assert predictable_after(AITurbo(), three)


def test_the_prior_weighs_prior_weight_against_one_sample() -> None:
    """One GPU, the prior's 1 step/s (step time 1 s) against one sample at 2 steps/s (0.5 s), both
    at the reference 3 cores per GPU: the fitted step time T minimises the weighted relative error
    pw²·(T/1 − 1)² + (T/0.5 − 1)², i.e. pw²·(T − 1) + 2·(2T − 1) = 0: T = (pw² + 2)/(pw² + 4) —
    0.6 for pw = 1 (1.667 steps/s), 2.09/4.09 for the default 0.3 (1.957 steps/s)."""
    for pw, t in ((1.0, 0.6), (0.3, 2.09 / 4.09)):
        s = sched(AITurbo(AITurbo.Params(prior_weight=pw)))
        s.submit(JobSpec("a", 0.0, 1, 1e6, "lin", max_gpus=1), 0.0)
        s.observe("a", sample(1.0, gpus=1, cpus=3))
        s.policy._ingest(s.context(1.0))
        assert float(s.policy._jobs["a"].predictor.speed(1, 1, 3.0)[0]) == pytest.approx(1.0 / t, rel=1e-6)


def test_the_cpu_efficiency_is_one_at_the_policys_reference_share() -> None:
    # samples at 1, 2 and 4 cores per GPU fit eff; the predictor normalises it to 1 at the policy's
    # reference (2 cores per GPU here), where the prior curve holds
    s = sched(AITurbo(AITurbo.Params(reference_cores_per_gpu=2.0)))
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    for t, (cpus, rate) in enumerate(((2, 1.0), (4, 2.0), (8, 2.5)), start=1):
        s.observe("a", sample(float(t), cpus=cpus, rate=rate))
    s.policy._ingest(s.context(10.0))
    model = s.policy._jobs["a"].predictor.model
    assert model.eff.a > 0  # the core count matters to this job
    assert float(model.eff(2.0)) == pytest.approx(1.0)
    assert s.policy._jobs["a"].predictor.prior[2].tolist() == [2.0, 2.0]


# ------------------------------------------------------------------ the prior
def test_the_prior_holds_the_curve_at_powers_of_two_and_at_the_maximum() -> None:
    """72 GPUs: 1, 2, 4, …, 64 and the maximum 72, on ⌈w/8⌉ nodes, at the reference 3 cores per GPU,
    with the linear curve's rate (k steps/s up to 8 GPUs, flat beyond)."""
    s = sched(gpus=72, cpus=216)
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=72), 0.0)
    s.observe("a", sample(1.0))
    s.policy._ingest(s.context(1.0))
    w, n, x, rate = s.policy._jobs["a"].predictor.prior
    assert w.tolist() == [1, 2, 4, 8, 16, 32, 64, 72]
    assert n.tolist() == [1, 1, 1, 1, 2, 4, 8, 9]
    assert x.tolist() == [3.0] * 8
    assert rate.tolist() == [1, 2, 4, 8, 8, 8, 8, 8]
    # a maximum that is a power of two appears once; one that is not ends the list
    for top, want in ((8, [1, 2, 4, 8]), (6, [1, 2, 4, 6]), (1, [1])):
        s = sched()
        s.submit(JobSpec("a", 0.0, 1, 1e6, "lin", max_gpus=top), 0.0)
        s.observe("a", sample(1.0, gpus=1, cpus=3, rate=1.0))
        s.policy._ingest(s.context(1.0))
        assert s.policy._jobs["a"].predictor.prior[0].tolist() == want


def test_the_prior_keeps_every_positive_rate_and_only_those() -> None:
    slow = CurveTable.from_points({"slow": {1: 0.25, 2: 0.5}, "big": {1: 0.0, 2: 2.0}})
    s = sched(curves=slow)
    s.submit(JobSpec("slow", 0.0, 2, 1e6, "slow", max_gpus=2), 0.0)  # rates below 1 step/s count
    s.submit(JobSpec("big", 0.0, 2, 1e6, "big", min_gpus=2, max_gpus=2), 0.0)  # does not run on 1 GPU
    s.observe("slow", sample(1.0, rate=0.5))
    s.observe("big", sample(1.0, rate=2.0))
    s.policy._ingest(s.context(1.0))
    prior = s.policy._jobs["slow"].predictor.prior
    assert prior[0].tolist() == [1.0, 2.0] and prior[3].tolist() == [0.25, 0.5]
    prior = s.policy._jobs["big"].predictor.prior
    assert prior[0].tolist() == [2.0] and prior[3].tolist() == [2.0]  # 0 steps/s on 1 GPU: no point


# ------------------------------------------------------------------ ingestion
def test_only_samples_newer_than_the_last_ingested_are_fed() -> None:
    # the scheduler keeps a job's latest samples: a re-plan sees the old ones again
    s = sched(AITurbo(AITurbo.Params(unified=False)))
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    s.observe("a", sample(1.0))
    s.observe("a", sample(2.0))
    s.policy._ingest(s.context(2.0))
    st = s.policy._jobs["a"]
    assert len(st.predictor.observations) == 2 and st.seen == 2.0
    s.policy._ingest(s.context(2.5))  # nothing new
    assert len(st.predictor.observations) == 2
    s.observe("a", sample(3.0))
    s.policy._ingest(s.context(3.0))  # t = 1 and 2 again, and the new t = 3
    assert len(st.predictor.observations) == 3 and st.seen == 3.0


def test_samples_of_a_job_no_longer_listed_are_skipped_and_the_rest_still_fed() -> None:
    s = sched()
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    s.observe("gone", sample(1.0))  # e.g. a job that finished after reporting
    s.observe("a", sample(1.0))
    ctx = s.context(1.0)
    assert list(ctx.samples) == ["gone", "a"]
    s.policy._ingest(ctx)
    assert "gone" not in s.policy._jobs
    assert len(s.policy._jobs["a"].predictor.observations) == 1


def test_an_empty_sample_list_does_not_make_the_policy_know_the_job() -> None:
    """A running job with an empty list of samples is not yet known, so it is not probed: at the
    re-plan at 240 s it keeps 2 GPUs × the default 6 cores (4 GPUs, 24 cores), where a known one
    would move to 6 + 2 = 8 cores per GPU."""
    s = sched(gpus=4, cpus=24)
    s.submit(JobSpec("a", 0.0, 2, 1e9, "lin", max_gpus=2), 0.0)
    s.step(0.0)
    s.samples["a"] = []
    assert not s.policy._ingest(s.context(1.0)) and "a" not in s.policy._jobs
    s.step(240.0)
    assert int(s.table.cpus[s.table.row["a"]]) == 12


def test_losses_and_progress_reach_the_predictor() -> None:
    """Losses l(k) = 1/(0.01·k + 1) at k = 0, 100, 200 steps: β0 = 0.01, β1 = 1, β2 = 0, so 95 % of
    the drop is made at k = β1·(1/0.05 − 1)/β0 = 1900 steps, 1700 after the last sample."""
    s = sched()
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    for t, k in enumerate((0.0, 100.0, 200.0), start=1):
        s.observe("a", sample(float(t), progress=k, loss=1.0 / (0.01 * k + 1.0)))
    s.policy._ingest(s.context(5.0))
    pred = s.policy._jobs["a"].predictor
    assert [o.progress for o in pred.observations] == [0.0, 100.0, 200.0]
    assert pred.remaining_steps(1e6) == pytest.approx(1700.0, rel=1e-6)


def test_an_immediate_replan_only_when_a_job_becomes_predictable() -> None:
    """GPUs only (one core count suffices), samples that match the prior exactly: predictable at
    the third. A sample that leaves the job unpredictable, or arrives once it already is, waits
    for the periodic re-plan at 240 s."""
    s = sched(AITurbo(AITurbo.Params(unified=False)), gpus=4, cpus=24)
    s.submit(JobSpec("a", 0.0, 2, 1e9, "lin", max_gpus=2), 0.0)
    s.step(0.0)
    s.observe("a", sample(1.0))
    assert s.next_wakeup(1.0) == 240.0
    s.observe("a", sample(2.0))
    assert s.next_wakeup(2.0) == 240.0
    s.observe("a", sample(3.0))
    assert s.next_wakeup(3.0) == math.nextafter(3.0, math.inf)
    assert s.policy._jobs["a"].predictor.predictable
    s.observe("a", sample(4.0))
    assert s.next_wakeup(4.0) == 240.0


# ------------------------------------------------------------------ the plan
FLAT = CpuEfficiency(0.0, 1.0, 1.0)  # eff = 1 at every core count
HUNGRY = CpuEfficiency(8.0, math.log(2.0), 0.5)  # eff(x) = 8·2^−x + 0.5: 4.5, 2.5, 1.5, 1 at x = 1 … 4


def known(theta: tuple[float, float, float, float], eff: CpuEfficiency = FLAT) -> _JobState:
    """A job whose model is already fitted: step time (θ0/w + θ1 + θ2·(w − 1) + θ3·(n − 1))·eff(x)."""
    return _JobState(JobPredictor(PredictorParams(), model=SpeedModel(theta, eff)))


def plan_for(policy: AITurbo, job: JobSpec, st: _JobState, gpus: int = 8, cpus: int = 48, xs=None):
    s = sched(policy, gpus=gpus, cpus=cpus)
    s.submit(job, 0.0)
    ctx = s.context(0.0)
    return policy._plan(ctx, 0, st, xs or policy.core_range(ctx))


def test_the_plans_grid_speed_and_cost() -> None:
    """8 GPUs, 48 cores: cores per GPU 1 … 12 (default 6). A job of 2 … 5 GPUs (asks 3) with step
    time 8/w + 1·(nodes − 1) s: on one node w/8 steps/s at any core count. Cells with more cores
    than the cluster's 48 (5 GPUs × 10, 11, 12) have speed 0 and infinite cost; 4 × 12 = 48 does
    not. Service w·(10 + x), cost = service / speed = 8·(10 + x): the CPU moves go from 6 down to 1
    core per GPU (GPU moves change nothing), a gain of 8·16 − 8·11 = 40 core-seconds per step."""
    pl = plan_for(AITurbo(), JobSpec("a", 0.0, 3, 1e6, "lin", min_gpus=2, max_gpus=5), known((8.0, 0.0, 0.0, 1.0)))
    assert pl.w.tolist() == [2, 3, 4, 5]
    assert pl.x.tolist() == list(range(1, 13))
    w, x = np.meshgrid(pl.w, pl.x, indexing="ij")
    fits = w * x <= 48
    assert not fits[3, 9] and fits[2, 11]
    assert pl.speed == pytest.approx(np.where(fits, w / 8.0, 0.0), rel=1e-12)
    assert pl.service.tolist() == (w * (10 + x)).tolist()
    assert pl.cost == pytest.approx(np.where(fits, 8.0 * (10 + x), np.inf), rel=1e-12)
    assert pl.x_at_request == 1
    assert pl.gain == pytest.approx(40.0)


def test_the_plan_predicts_the_nodes_a_job_spans() -> None:
    """Step time 8/w + 1·(nodes − 1) s with 8 GPUs per node: 8 GPUs are one node (1 step/s), 9 two
    (1/(8/9 + 1) = 9/17 steps/s)."""
    pl = plan_for(AITurbo(), JobSpec("a", 0.0, 8, 1e6, "lin", min_gpus=8, max_gpus=9),
                  known((8.0, 0.0, 0.0, 1.0)), gpus=16, cpus=96)
    assert pl.speed[:, 5].tolist() == pytest.approx([1.0, 9.0 / 17.0])


def test_gpu_moves_and_cpu_moves_walk_apart_when_the_requested_row_is_short_of_cores() -> None:
    """8 GPUs, 16 cores: 1 … 4 cores per GPU, default 2. The job asks 8 GPUs (1 … 8), step time
    (8/w + 1)·eff(x) with eff = 4.5, 2.5, 1.5, 1: cost = (8 + w)·(10 + x)·eff(x), i.e. (8 + w) ×
    49.5, 30, 19.5, 14, and infinite where w·x > 16. From the default (8, 2), cost 16·30 = 480, the
    CPU moves alone stop at once (3 cores would need 24, 1 core costs 792): the cores at the
    request stay 2. With GPU moves too, the walk goes down the GPUs and up the cores, to (1, 4) with
    9·14 = 126: a gain of 480 − 126 = 354."""
    pl = plan_for(AITurbo(), JobSpec("a", 0.0, 8, 1e6, "lin", max_gpus=8), known((8.0, 1.0, 0.0, 0.0), HUNGRY),
                  cpus=16)
    assert pl.x.tolist() == [1, 2, 3, 4]
    assert pl.cost[7, 1] == pytest.approx(480.0) and pl.cost[0, 3] == pytest.approx(126.0)
    assert pl.x_at_request == 2
    assert pl.gain == pytest.approx(354.0)


def test_no_gain_from_a_default_that_does_not_fit() -> None:
    """As above with a default of 4 cores per GPU: 8 GPUs × 4 = 32 cores > 16, an infinite cost with
    only infinite neighbours: the plan has no gain (not inf − inf) and stays at 4 cores."""
    pl = plan_for(AITurbo(AITurbo.Params(base_cores_per_gpu=4)), JobSpec("a", 0.0, 8, 1e6, "lin", max_gpus=8),
                  known((8.0, 1.0, 0.0, 0.0), HUNGRY), cpus=16)
    assert pl.x.tolist() == list(range(1, 9))
    assert math.isinf(pl.cost[7, 3])
    assert pl.gain == 0.0
    assert pl.x_at_request == 4


def test_the_walk_starts_at_the_request_clipped_to_the_jobs_range() -> None:
    """Step time 8/w + 1 s at any core count: cost (8 + w)·(10 + x), lowest at (2 GPUs, 1 core) =
    110. Asking 1 GPU with a minimum of 2 starts at 2 GPUs: (8 + 2)·16 = 160, a gain of 50; asking
    8 with a maximum of 4 starts at 4: 12·16 = 192, a gain of 82."""
    model = (8.0, 1.0, 0.0, 0.0)
    low = plan_for(AITurbo(), JobSpec("a", 0.0, 1, 1e6, "lin", min_gpus=2, max_gpus=4), known(model))
    assert low.w.tolist() == [2, 3, 4] and low.cost[0, 5] == pytest.approx(160.0)
    assert low.gain == pytest.approx(50.0) and low.x_at_request == 1
    high = plan_for(AITurbo(), JobSpec("a", 0.0, 8, 1e6, "lin", min_gpus=2, max_gpus=4), known(model))
    assert high.gain == pytest.approx(82.0) and high.x_at_request == 1


@pytest.mark.parametrize("group, cols, start", [(2, [2, 4, 6, 8, 10, 12], 2), (4, [2, 6, 10], 1)])
def test_cpu_groups_step_through_the_default(group: int, cols: list[int], start: int) -> None:
    """Cores per GPU 1 … 12 around the default 6 in groups of 2 (2, 4, …, 12) or 4 (2, 6, 10). Step
    time 8/w + 1 s: from (3 GPUs, 6 cores), cost 11·16 = 176, to (2 GPUs, 2 cores), 10·12 = 120."""
    pl = plan_for(AITurbo(AITurbo.Params(cpu_group=group)), JobSpec("a", 0.0, 3, 1e6, "lin", min_gpus=2, max_gpus=5),
                  known((8.0, 1.0, 0.0, 0.0)))
    assert pl.x.tolist() == cols and pl.x[start] == 6
    assert pl.cost[1, start] == pytest.approx(176.0)
    assert pl.gain == pytest.approx(56.0) and pl.x_at_request == 2


@pytest.mark.parametrize("group", [1, 4])
def test_without_unified_allocation_the_plan_has_the_default_cores_only(group: int) -> None:
    """unified=false: one column at the default 6 cores per GPU, only GPU moves: from 3 GPUs,
    cost (8 + 3)·16 = 176, to 2 GPUs, 160."""
    pl = plan_for(AITurbo(AITurbo.Params(unified=False, cpu_group=group)),
                  JobSpec("a", 0.0, 3, 1e6, "lin", min_gpus=2, max_gpus=5), known((8.0, 1.0, 0.0, 0.0)))
    assert pl.x.tolist() == [6] and pl.x_at_request == 6
    assert pl.gain == pytest.approx(16.0)


def test_the_plan_is_kept_until_the_model_changes() -> None:
    policy = AITurbo()
    s = sched(policy)
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=4), 0.0)
    ctx = s.context(0.0)
    st = policy._state(ctx, 0)  # the prior: 1, 2, 4 steps/s on 1, 2, 4 GPUs
    xs = policy.core_range(ctx)
    first = policy._plan(ctx, 0, st, xs)
    assert first.version == st.predictor.version
    assert policy._plan(ctx, 0, st, xs) is first
    assert first.speed[1, 2] == pytest.approx(2.0)  # 2 GPUs, 3 cores per GPU
    st.predictor.observe(2, 1, 6, 1.0, 0.0)  # half the prior's speed: a refit
    second = policy._plan(ctx, 0, st, xs)
    assert second is not first and second.version == st.predictor.version == first.version + 1
    assert second.speed[1, 2] == pytest.approx(float(st.predictor.speed(2, 1, 3.0)[0]))
    assert second.speed[1, 2] < 1.9
    assert policy._plan(ctx, 0, st, xs) is second
