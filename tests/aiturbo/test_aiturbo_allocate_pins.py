"""AITurbo's ``allocate`` (and ``core_range``, ``wakeup``) pinned on small clusters with
hand-computed values: the clipped request, probing of unpredictable jobs, the Borda order (unified
service, benefit R × gain, ties by arrival then submission), jobs with user-fixed cores, the core
limit of unified mode, the decrease queue, the round-robin of idle GPUs, the increase queue, and
the forgetting of finished jobs.

Predictable jobs get a predictor whose speed model is set by hand (``predictable``): it is then
fed three samples that the model predicts exactly (three core counts, no error), so it is
predictable and its model, hence its plan, is exactly the one written in the test."""

from __future__ import annotations

import pytest

from coddl.core.cluster import Cluster, Node
from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable
from coddl.perf.predictor import CpuEfficiency, JobPredictor, SpeedModel
from coddl.policies import make_policy
from coddl.policies.aiturbo import AITurbo, _JobState
from coddl.policies.base import ThroughputSample
from coddl.scheduler import Scheduler

LIN = CurveTable.from_points({"lin": {k: float(k) for k in range(1, 9)}})  # as in test_aiturbo_pins.py

FLAT = (0.0, 1.0, 0.0, 0.0)  # step time 1 s on any number of GPUs: more GPUs never help
LINEAR = (1.0, 0.0, 0.0, 0.0)  # step time 1/w: speed w, perfect scaling
WORSE = (0.0, 1.0, 1.0, 0.0)  # step time 1 + (w − 1) = w: every GPU slows it down
CALM = (0.0, 1.0, 1.0)  # eff(x) = 1: cores make no difference


def sched(gpus: int, cpus: int, policy: AITurbo | str = "aiturbo") -> Scheduler:
    return Scheduler(Cluster(nodes=(Node("n0", gpus, cpus=cpus),)),
                     make_policy(policy) if isinstance(policy, str) else policy, LIN)


def predictable(s: Scheduler, job: str, theta: tuple[float, float, float, float], scale: float = 1.0) -> None:
    """Give ``job`` a predictable predictor with speed model θ·``scale`` (step time), cores ignored."""
    pol = s.policy
    pred = JobPredictor(pol._predictor_params, model=SpeedModel(tuple(scale * t for t in theta), CpuEfficiency(*CALM)))
    for i, x in enumerate((1, 2, 3)):  # three core counts, each predicted exactly: error 0
        pred.observe(1, 1, x, float(pred.speed(1, 1, x)[0]), float(i))
    assert pred.predictable and pred.version == 0
    pol._jobs[job] = _JobState(pred, was_predictable=True)


def decide(s: Scheduler, now: float = 0.0) -> tuple[list[int], list[int] | None]:
    out = s.policy.allocate(s.context(now))
    return out.gpus.tolist(), None if out.cpus is None else out.cpus.tolist()


# ------------------------------------------------------------------ core range and wakeup
def test_core_range_rounds_the_cluster_average_down_and_a_one_gpu_cluster_is_not_halved() -> None:
    # 50 cores / 8 GPUs = 6.25: the default is 6 (rounded down), the maximum twice that
    assert sched(8, 50).policy.core_range(sched(8, 50).context(0.0)) == (1, 6, 12)
    # one GPU with 6 cores: 6 per GPU (the divisor is the GPU count, never less than 1)
    s = sched(1, 6)
    assert s.policy.core_range(s.context(0.0)) == (1, 6, 12)


def test_wakeup_with_a_one_gpu_job_running_is_the_next_periodic_replan() -> None:
    s = sched(1, 6)
    s.submit(JobSpec("a", 0.0, 1, 1e6, "lin", max_gpus=1), 0.0)
    s.step(0.0)  # the first decision (periodic): a runs on its 1 GPU; next re-plan at 240
    assert int(s.table.share[s.table.row["a"]]) == 1
    assert s.policy.wakeup(s.context(10.0)) == pytest.approx(240.0)  # a job runs: re-plan at 240


# ------------------------------------------------------------------ the request, clipped
def test_the_request_is_clipped_to_the_jobs_gpu_range() -> None:
    # 4 GPUs, 16 cores (4 per GPU). "over" asks 3 GPUs but may use at most 2: it is admitted with
    # 2 (× 4 cores). "under" asks 1 but needs at least 2: admitted with 2. Nothing left over.
    s = sched(4, 16, AITurbo(AITurbo.Params(spread_idle=False)))
    s.submit(JobSpec("over", 0.0, 3, 1e6, "lin", max_gpus=2), 0.0)
    s.submit(JobSpec("under", 0.0, 1, 1e6, "lin", min_gpus=2, max_gpus=2), 0.0)
    assert decide(s) == ([2, 2], [8, 8])


def test_a_request_above_the_maximum_would_not_fit_unclipped() -> None:
    # 2 GPUs; the job asks 4 but its maximum is 2: clipped to 2 it fits and runs
    s = sched(2, 12)
    s.submit(JobSpec("a", 0.0, 4, 1e6, "lin", max_gpus=2), 0.0)
    assert decide(s) == ([2], [12])


# ------------------------------------------------------------------ probing (step 6)
def running(policy: AITurbo | str, gpus: int, cpus: int, jobs: dict[str, int]) -> Scheduler:
    """``jobs`` (name: GPUs, rigid) started at 0, each then reporting one sample (so the policy
    knows them; one sample never makes a job predictable)."""
    s = sched(gpus, cpus, policy)
    for j, g in jobs.items():
        s.submit(JobSpec(j, 0.0, g, 1e9, "lin", min_gpus=g, max_gpus=g), 0.0)
    s.step(0.0)  # periodic, but no job is known yet: no probe; next periodic re-plan at 240
    for j, g in jobs.items():
        assert int(s.table.share[s.table.row[j]]) == g
        s.observe(j, ThroughputSample(1.0, g, 1, 2 * g, 2.0, 2.0))
    return s


def test_a_known_job_is_not_probed_at_a_replan_that_is_not_periodic() -> None:
    # 24 cores / 4 GPUs: 6 per GPU. At 100 the job is known (probe count 0) but 100 < 240: no
    # periodic re-plan, so no probe: the default 2 × 6
    s = running("aiturbo", 4, 24, {"a": 2})
    assert decide(s, 100.0) == ([2], [12])
    assert decide(s, 240.0) == ([2], [16])  # periodic: the first offset +2 → 8 per GPU


def test_a_one_gpu_job_is_probed_too() -> None:
    s = running("aiturbo", 4, 24, {"a": 1})
    assert decide(s, 240.0) == ([1], [8])  # 6 + 2 cores on its one GPU


def test_every_running_unpredictable_job_is_probed_not_only_the_first() -> None:
    # default 4 cores per GPU (24 cores, max 8 per GPU): both 1-GPU jobs move to 4 + 2 = 6
    s = running("aiturbo:base_cores_per_gpu=4", 2, 24, {"a": 1, "b": 1})
    assert decide(s, 240.0) == ([1, 1], [6, 6])


def test_a_waiting_job_asks_for_the_default_and_is_not_probed() -> None:
    # the job is known (a sample) but holds no GPU at the periodic re-plan at 0: it asks 2 × 6
    s = sched(4, 24)
    s.submit(JobSpec("a", 0.0, 2, 1e9, "lin", min_gpus=2, max_gpus=2), 0.0)
    s.observe("a", ThroughputSample(0.0, 2, 1, 4, 2.0, 0.0))
    assert decide(s, 0.0) == ([2], [12])
    assert s.policy._jobs["a"].probe == 0


def test_the_last_probe_stands_until_the_next_periodic_replan() -> None:
    """probe_rounds=1: the offsets +2, −1, +4, +1 at 240, 480, 720, 960 (8, 5, 10, 7 per GPU); a
    re-plan at 1000 (not periodic) keeps the last, 7; the next periodic one (1200) is past the
    probes: the default 6."""
    s = running("aiturbo:probe_rounds=1", 4, 24, {"a": 2})
    got = [decide(s, t)[1][0] for t in (240.0, 480.0, 720.0, 960.0, 1000.0, 1200.0)]
    assert got == [16, 10, 20, 14, 14, 12]


def test_a_probe_below_the_minimum_is_raised_to_it() -> None:
    # 4 cores / 4 GPUs: default 1 per GPU, minimum 1; the offset −1 would give 0: clipped to 1
    s = running(AITurbo(AITurbo.Params(probe=(-1,))), 4, 4, {"a": 2})
    assert decide(s, 240.0) == ([2], [2])


def test_a_probe_above_what_the_cluster_has_per_gpu_is_cut() -> None:
    # 24 cores / 4 GPUs: default 6, maximum 12; a 3-GPU job may not ask more than 24 // 3 = 8 per
    # GPU, so the offset +4 (10) is cut to 8: 24 cores, and it still fits
    s = running(AITurbo(AITurbo.Params(probe=(4,))), 4, 24, {"a": 3})
    assert decide(s, 240.0) == ([3], [24])


# ------------------------------------------------------------------ the Borda order (steps 1–5)
def two_rigid(service: dict[str, float] | None = None, cpu: dict[str, float] | None = None,
              arrival: dict[str, float] | None = None, names: tuple[str, ...] = ("A", "B")) -> Scheduler:
    """2 GPUs, 12 cores; rigid 2-GPU jobs (submitted in ``names`` order): only one can run."""
    s = sched(2, 12)
    for j in names:
        s.submit(JobSpec(j, (arrival or {}).get(j, 0.0), 2, 1.0, "lin", min_gpus=2, max_gpus=2), 0.0)
    for j, v in (service or {}).items():
        s.table.service0[s.table.row[j]] = v
    for j, v in (cpu or {}).items():
        s.table.cpu_service0[s.table.row[j]] = v
    return s


def test_unified_service_adds_core_seconds_to_gpu_seconds_times_ten() -> None:
    # A: 0 GPU-s, 60 core-s → U = 60; B: 5 GPU-s → U = 50. B has less: LAS rank 1, so B runs
    s = two_rigid(service={"B": 5.0}, cpu={"A": 60.0})
    assert decide(s) == ([0, 2], [0, 12])
    # A: 10 GPU-s → U = 100; B: 50 core-s → U = 50: B runs again
    s = two_rigid(service={"A": 10.0}, cpu={"B": 50.0})
    assert decide(s) == ([0, 2], [0, 12])


def rigid_benefit(speed: dict[str, float], steps: dict[str, float], service: dict[str, float]) -> Scheduler:
    """Two predictable rigid 2-GPU jobs on 2 GPUs, 12 cores (default 6 per GPU). Cores do not
    change their speed s, so their CPU moves go down to 1 per GPU: T·U ÷ R falls from 2·16/s to
    2·11/s, a gain of 10/s per remaining step; the benefit is R × 10/s."""
    s = two_rigid(service=service)
    for j in ("A", "B"):
        s.table.total_work[s.table.row[j]] = steps[j]
        predictable(s, j, FLAT, 1.0 / speed[j])
    return s


def test_the_benefit_is_remaining_steps_times_the_gain() -> None:
    """A has more service (LAS 2), B less (LAS 1). A: s = 1, R = 1 → benefit 10; B: s = 10, R = 2
    → benefit 2. A ranks 1 by benefit: scores A 2 + 1 = 3, B 1 + 2 = 3; equal, and equal arrival:
    A, submitted first, runs (with 1 core per GPU, its CPU moves' choice). (R ÷ gain would rank B
    first; without benefit ranks B, the least served, would run.)"""
    s = rigid_benefit(speed={"A": 1.0, "B": 10.0}, steps={"A": 1.0, "B": 2.0}, service={"A": 100.0})
    assert decide(s) == ([2, 0], [2, 0])


def test_the_larger_benefit_ranks_first_even_for_a_later_job() -> None:
    """A (LAS 2): s = 10, R = 1 → benefit 1; B (LAS 1): s = 1, R = 1 → benefit 10. B ranks 1 by
    both: 2 points against A's 4, so B runs."""
    s = rigid_benefit(speed={"A": 10.0, "B": 1.0}, steps={"A": 1.0, "B": 1.0}, service={"A": 100.0})
    assert decide(s) == ([0, 2], [0, 2])


def test_equal_scores_go_to_the_earlier_arrival_not_the_earlier_submission() -> None:
    """X submitted first but arriving at 10, Y submitted second arriving at 0. X: less service
    (LAS 1), smaller benefit (rank 2); Y: LAS 2, rank 1: both 3 points. Y arrived first: Y runs."""
    s = two_rigid(service={"Y": 100.0}, arrival={"X": 10.0, "Y": 0.0}, names=("X", "Y"))
    predictable(s, "X", FLAT, 0.1)  # benefit 1 × 10/10 = 1
    predictable(s, "Y", FLAT, 1.0)  # benefit 1 × 10/1 = 10
    assert decide(s) == ([0, 2], [0, 2])


def test_equal_scores_and_arrivals_go_to_the_earlier_submission_whatever_the_row() -> None:
    """Z, X, Y submitted in that order, all arriving at 0. Z completes: Y moves into Z's row, so
    Y's row comes before X's. X: LAS 1, benefit rank 2; Y: LAS 2, rank 1: both 3 points, same
    arrival: X, submitted first, runs."""
    s = two_rigid(service={"Y": 100.0}, names=("Z", "X", "Y"))
    s.complete("Z", 0.0)
    assert s.table.ids[:2] == ["Y", "X"]
    predictable(s, "X", FLAT, 0.1)
    predictable(s, "Y", FLAT, 1.0)
    assert decide(s) == ([0, 2], [0, 2])


# ------------------------------------------------------------------ cores fixed by the user
@pytest.mark.parametrize("requested, top, min_cpus, max_cpus, want", [
    (1, 1, None, 3, (1, 3)),  # a maximum alone fixes the cores: min(1 × 4, 3)
    (1, 1, None, 1, (1, 1)),  # a maximum of 1 too
    (1, 1, 10, None, (1, 10)),  # a minimum alone: max(1 × 4, 10)
    (2, 2, 2, None, (2, 8)),  # the default 2 × 4 is above the minimum 2: kept
    (1, 4, 1, None, (1, 4)),  # a fixed job gets no idle GPU (3 are free): 1 × 4
])
def test_cores_fixed_by_the_user(requested, top, min_cpus, max_cpus, want) -> None:
    # 4 GPUs, 16 cores: 4 per GPU by default; one unpredictable job
    s = sched(4, 16)
    s.submit(JobSpec("p", 0.0, requested, 1e6, "lin", max_gpus=top, min_cpus=min_cpus, max_cpus=max_cpus), 0.0)
    gpus, cpus = decide(s)
    assert (gpus[0], cpus[0]) == want


# ------------------------------------------------------------------ the core limit (unified only)
def test_cores_limit_admission_only_when_the_policy_decides_cores() -> None:
    """4 GPUs, 8 cores (2 per GPU). A (1 GPU) fixes 6 cores; B asks 2 GPUs × 2 cores = 4 > the 2
    left: unified, B waits. GPUs only: cores are the placer's business, B runs."""
    def jobs(spec: str) -> Scheduler:
        s = sched(4, 8, spec)
        s.submit(JobSpec("A", 0.0, 1, 1e6, "lin", max_gpus=1, min_cpus=6), 0.0)
        s.submit(JobSpec("B", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
        return s

    assert decide(jobs("aiturbo")) == ([1, 0], [6, 0])
    assert decide(jobs("aiturbo:unified=false")) == ([1, 2], None)


# ------------------------------------------------------------------ the decrease queue (step 7)
def test_a_waiting_job_takes_gpus_a_predictable_job_gains_by_giving_up() -> None:
    """4 GPUs, 24 cores (6 per GPU). P is predictable, asks 4 (1 … 4) and runs no faster on more
    GPUs: T·U ÷ R = w·(10 + x), so its CPU moves choose 1 core per GPU and each GPU it gives up
    saves R × 11. P ranks first (score 1 + 1 against W's 2 × 2) and takes all 4 GPUs; W (2 GPUs)
    waits, so P gives up two: P 2 GPUs × 1 core, W 2 × 6."""
    s = sched(4, 24)
    s.submit(JobSpec("P", 0.0, 4, 100.0, "lin", max_gpus=4), 0.0)
    s.submit(JobSpec("W", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    predictable(s, "P", FLAT)
    assert decide(s) == ([2, 2], [2, 12])


# ------------------------------------------------------------------ idle GPUs (step 8, spread_idle)
@pytest.mark.parametrize("requested, want", [
    (1, 3),  # a 1-GPU job gets both idle GPUs
    (2, 3),  # a single idle GPU is handed out too
])
def test_idle_gpus_go_to_a_running_unpredictable_job(requested, want) -> None:
    s = sched(3, 18)
    s.submit(JobSpec("a", 0.0, requested, 1e6, "lin", max_gpus=3), 0.0)
    assert decide(s) == ([want], [want * 6])


def test_idle_gpus_do_not_go_to_a_waiting_job() -> None:
    # 4 GPUs: A (2, its maximum) runs; B needs 3, only 2 are left: B waits, the 2 stay idle
    s = sched(4, 24)
    s.submit(JobSpec("A", 0.0, 2, 1e6, "lin", max_gpus=2), 0.0)
    s.submit(JobSpec("B", 0.0, 3, 1e6, "lin", min_gpus=3, max_gpus=3), 0.0)
    assert decide(s) == ([2, 0], [12, 0])


def test_idle_gpus_do_not_go_to_a_predictable_job_that_gets_no_faster() -> None:
    # P is predictable and no faster on more GPUs: it keeps 1 GPU with 1 core (its CPU moves'
    # choice); the 3 idle GPUs are not handed to it round-robin, and no +1 GPU move makes it faster
    s = sched(4, 24)
    s.submit(JobSpec("P", 0.0, 1, 1e6, "lin", max_gpus=4), 0.0)
    predictable(s, "P", FLAT)
    assert decide(s) == ([1], [1])


# ------------------------------------------------------------------ the increase queue (step 8)
def test_a_predictable_job_on_one_gpu_grows_while_it_gets_faster() -> None:
    # speed w: each +1 GPU move (1 core with it) saves time, up to its maximum 4
    s = sched(4, 24)
    s.submit(JobSpec("P", 0.0, 1, 1e6, "lin", max_gpus=4), 0.0)
    predictable(s, "P", LINEAR)
    assert decide(s) == ([4], [4])


def test_a_waiting_predictable_job_is_not_grown_into_the_idle_gpus() -> None:
    """U (unpredictable, 1 GPU) ranks first (2 points against P's 2 + 1). P asks 4 GPUs and only 3
    are free: it waits. It would run faster on 1 GPU (every GPU slows it down), but the increase
    queue grows only admitted jobs: P stays at 0 and 3 GPUs stay idle."""
    s = sched(4, 24)
    s.submit(JobSpec("U", 0.0, 1, 1e6, "lin", max_gpus=1), 0.0)
    s.submit(JobSpec("P", 0.0, 4, 1e6, "lin", max_gpus=4), 0.0)
    predictable(s, "P", WORSE)
    assert decide(s) == ([1, 0], [6, 0])


# ------------------------------------------------------------------ forgetting finished jobs
def many(n: int, keep: int) -> Scheduler:
    """``n`` jobs decided once, then all but the first ``keep`` complete."""
    s = sched(1, 6)
    for i in range(n):
        s.submit(JobSpec(f"j{i}", 0.0, 1, 1e6, "lin", max_gpus=1), 0.0)
    predictable(s, "j0", FLAT)
    predictable(s, f"j{n - 1}", FLAT)
    s.policy.allocate(s.context(0.0))
    assert len(s.policy._level) == n
    for i in range(keep, n):
        s.complete(f"j{i}", 1.0)
    return s


def test_finished_jobs_are_remembered_up_to_twice_the_active_plus_64() -> None:
    s = many(68, keep=2)  # 68 remembered, 2 active: 68 ≤ 2 × 2 + 64, nothing is forgotten
    s.policy.allocate(s.context(2.0))
    assert len(s.policy._level) == 68 and set(s.policy._jobs) == {"j0", "j67"}


def test_beyond_that_finished_jobs_are_forgotten_and_active_ones_kept() -> None:
    s = many(67, keep=1)  # 67 remembered, 1 active: 67 > 2 × 1 + 64
    assert decide(s, 2.0) == ([1], [1])  # j0, predictable and no faster with cores: 1 core
    assert list(s.policy._level) == ["j0"] and list(s.policy._jobs) == ["j0"]
    assert decide(s, 3.0) == ([1], [1])  # and still known to be predictable after the forgetting
