"""AITurbo's parts pinned with hand-computed values: the core range, the walk down the T·U grid,
the allocation pool's bookkeeping, the round-robin of idle GPUs, the decrease queue (shedding GPUs
for waiting jobs, largest benefit first) and the increase queue, and the policy's probing and
re-plan times on small clusters."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coddl.core.cluster import Cluster, Node
from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.policies.aiturbo import AITurbo, _grow, _Plan, _Pool, _round_robin, _shed, borda_score, descend, mlfq_level
from coddl.scheduler import Scheduler

LIN = CurveTable.from_points({"lin": {k: float(k) for k in range(1, 9)}})


def pool(gpus, per_gpu, free_g, free_c=math.inf, fixed=None, fixed_cores=None) -> _Pool:
    n = len(gpus)
    return _Pool(np.array(gpus, dtype=np.int64), np.array(per_gpu, dtype=np.int64),
                 np.zeros(n, dtype=bool) if fixed is None else np.array(fixed),
                 np.zeros(n, dtype=np.int64) if fixed_cores is None else np.array(fixed_cores, dtype=np.int64),
                 free_g, free_c)


# ------------------------------------------------------------------ core range
@pytest.mark.parametrize("spec, cpus, gpus, want", [
    ("aiturbo", 48, 8, (1, 6, 12)),  # default: the cluster's 6 cores per GPU, up to twice that
    ("aiturbo", 7, 8, (1, 1, 2)),  # fewer cores than GPUs: at least 1
    ("aiturbo:base_cores_per_gpu=4", 48, 8, (1, 4, 8)),
    ("aiturbo:base_cores_per_gpu=4+max_cores_per_gpu=5", 48, 8, (1, 4, 5)),
    ("aiturbo:base_cores_per_gpu=4+max_cores_per_gpu=3", 48, 8, (1, 4, 4)),  # never below the default
    ("aiturbo:base_cores_per_gpu=4+min_cores_per_gpu=2", 48, 8, (2, 4, 8)),
    ("aiturbo:base_cores_per_gpu=4+min_cores_per_gpu=6", 48, 8, (4, 4, 8)),  # never above the default
])
def test_core_range(spec: str, cpus: int, gpus: int, want: tuple[int, int, int]) -> None:
    s = Scheduler(Cluster(nodes=(Node("n0", gpus, cpus=cpus),)), make_policy(spec), LIN)
    assert s.policy.core_range(s.context(0.0)) == want


# ------------------------------------------------------------------ the T·U walk
def test_descend_takes_the_steepest_move_until_none_lowers_the_cost() -> None:
    cost = np.array([[5.0, 4.0, 3.0],
                     [6.0, 2.0, 7.0],
                     [9.0, 8.0, 1.0]])
    # from (0, 0): (0, 1) = 4 beats (1, 0) = 6; from there (1, 1) = 2 beats (0, 2) = 3; from (1, 1)
    # nothing is lower (the 1 at (2, 2) is not a neighbour)
    assert descend(cost, (0, 0), gpu_moves=True) == (1, 1)
    # CPU moves only: along row 0 to (0, 2) = 3
    assert descend(cost, (0, 0), gpu_moves=False) == (0, 2)
    assert descend(cost, (2, 2), gpu_moves=True) == (2, 2)  # already the lowest
    assert descend(cost, (2, 0), gpu_moves=True) == (1, 1)  # 9 → 6 (up) → 2
    assert descend(cost, (2, 0), gpu_moves=False) == (2, 2)  # 9 → 8 → 1 along the last row
    assert descend(cost, (1, 2), gpu_moves=False) == (1, 1)  # 7 → 2 (a move down the columns)
    # equal cost is no move; the first of equal best moves is taken
    assert descend(np.array([[1.0, 1.0]]), (0, 0), gpu_moves=True) == (0, 0)
    assert descend(np.array([[3.0, 2.0, 2.0]]), (0, 1), gpu_moves=False) == (0, 1)
    assert descend(np.array([[2.0], [3.0], [2.0]]), (1, 0), gpu_moves=True) == (0, 0)
    assert descend(np.array([[np.inf, 5.0]]), (0, 0), gpu_moves=True) == (0, 1)


# ------------------------------------------------------------------ the pool
def test_pool_admits_while_gpus_and_cores_last_and_counts_them_back() -> None:
    p = pool([0, 0, 0], [2, 3, 4], free_g=6, free_c=20, fixed=[False, False, True], fixed_cores=[0, 0, 5])
    assert p.held(0) == 0 and p.held(2) == 0
    assert p.admit(0, 2) and (p.free_g, p.free_c) == (4, 16)  # 2 GPUs × 2 cores
    assert p.admit(2, 1) and (p.free_g, p.free_c) == (3, 11)  # fixed: its 5 cores whatever its GPUs
    assert p.held(2, 3) == 5 and p.held(2, 0) == 0
    assert not p.admit(1, 4) and (p.free_g, p.free_c) == (3, 11)  # 4 GPUs > 3 free
    assert p.admit(1, 3) and (p.free_g, p.free_c) == (0, 2)  # 9 cores of 11
    assert p.cores().tolist() == [4, 9, 5]
    p.set(0, 1, per_gpu=1)  # give back a GPU and 3 cores
    assert (p.free_g, p.free_c) == (1, 5) and p.per_gpu.tolist() == [1, 3, 4]
    assert p.fits(0, 2, 3)  # +1 GPU and 6 − 1 = 5 more cores: exactly what is free
    assert not p.fits(0, 2, 4)  # 8 − 1 = 7 cores > 5
    assert not p.fits(0, 3)  # 2 more GPUs > 1
    assert p.held(0, per_gpu=7) == 7 and p.held(0, gpus=2) == 2
    p.set(1, 0)
    assert p.cores().tolist() == [1, 0, 5] and (p.free_g, p.free_c) == (4, 14)


def test_pool_without_a_core_limit() -> None:
    p = pool([0], [100], free_g=2)
    assert p.admit(0, 2) and p.free_c == math.inf and p.cores().tolist() == [200]


# ------------------------------------------------------------------ idle GPUs round-robin
def test_round_robin_hands_one_gpu_each_in_turn_up_to_each_maximum() -> None:
    p = pool([1, 1, 1], [1, 1, 1], free_g=5)
    _round_robin(p, np.array([0, 1, 2]), np.array([2, 4, 4]))
    assert p.gpus.tolist() == [2, 3, 3] and p.free_g == 0
    p = pool([1, 1, 1], [1, 1, 1], free_g=4)
    _round_robin(p, np.array([2, 1, 0]), np.array([4, 4, 4]))  # the order given decides the last one
    assert p.gpus.tolist() == [2, 2, 3] and p.free_g == 0
    p = pool([1, 1], [2, 2], free_g=5, free_c=3)  # cores for one more GPU only
    _round_robin(p, np.array([0, 1]), np.array([8, 8]))
    assert p.gpus.tolist() == [2, 1] and (p.free_g, p.free_c) == (4, 1)
    p = pool([3], [1], free_g=5)
    _round_robin(p, np.array([0]), np.array([3]))  # already at its maximum
    assert p.gpus.tolist() == [3] and p.free_g == 5
    p = pool([1], [1], free_g=2)
    _round_robin(p, np.array([], dtype=np.int64), np.array([4]))
    assert p.gpus.tolist() == [1] and p.free_g == 2


# ------------------------------------------------------------------ the decrease queue
def plan(cost: list[float], lo: int = 1, x: int = 2) -> _Plan:
    """A plan over lo … lo + len(cost) − 1 GPUs at one core count, with T·U ÷ R = ``cost``."""
    c = np.array(cost, dtype=float)[:, None]
    w = np.arange(lo, lo + c.shape[0])
    return _Plan(0, w, np.array([x]), 1.0 / c, np.ones_like(c), c, x, 0.0)


def test_shedding_takes_the_largest_benefit_first_until_the_waiting_job_fits() -> None:
    """P and Q hold 4 GPUs each, none free. Benefits of giving up one GPU, R × (cost(w) − cost(w−1)):
    P (R = 10, cost 1, 1.2, 1.5, 2): 5 at 4 GPUs, 3 at 3, 2 at 2, none at 1; Q (R = 10, cost 1, 1.1,
    1.2, 1.3): 1 at each. W (2 GPUs) takes P's 4th and 3rd; V (1) P's 2nd (then P has no benefit
    left); U (4) takes Q down to 1 GPU, still does not fit — so nothing after it is tried, not even
    T (1 GPU), although 3 GPUs are now free."""
    p = pool([4, 4, 0, 0, 0, 0], [2] * 6, free_g=0)
    plans = {0: plan([1.0, 1.2, 1.5, 2.0]), 1: plan([1.0, 1.1, 1.2, 1.3])}
    want = np.array([4, 4, 2, 1, 4, 1])
    _shed(p, [2, 3, 4, 5], want, plans, np.array([10.0, 10.0, 0, 0, 0, 0]))
    assert p.gpus.tolist() == [1, 1, 2, 1, 0, 0]
    assert p.free_g == 3


def test_shedding_only_moves_with_a_positive_benefit() -> None:
    p = pool([3, 0], [2, 2], free_g=0)
    plans = {0: plan([3.0, 2.0, 1.0])}  # fewer GPUs cost more: no benefit in giving any up
    _shed(p, [1], np.array([3, 1]), plans, np.array([10.0, 0.0]))
    assert p.gpus.tolist() == [3, 0]


def test_shedding_in_queue_order_stops_when_a_job_cannot_fit() -> None:
    # W (first) fits without shedding; V needs what P frees
    p = pool([2, 0, 0], [1, 1, 1], free_g=1)
    plans = {0: plan([1.0, 2.0])}
    _shed(p, [1, 2], np.array([2, 1, 1]), plans, np.array([4.0, 0.0, 0.0]))
    assert p.gpus.tolist() == [1, 1, 1] and p.free_g == 0


# ------------------------------------------------------------------ the increase queue
def grid(speed: list[list[float]], w0: int, x: list[int], service_per_gpu: float = 10.0) -> _Plan:
    s = np.array(speed, dtype=float)
    w = np.arange(w0, w0 + s.shape[0])
    xs = np.array(x)
    service = w[:, None] * (service_per_gpu + xs[None, :])
    return _Plan(0, w, xs, s, service, service / s, int(xs[0]), 0.0)


def test_growing_by_gpus_goes_to_the_most_time_saved_per_service_added() -> None:
    """Two jobs at 1 GPU, 3 GPUs free, cores unlimited, one core count (1 per GPU): a GPU adds 11
    units of service. A (R = 100): speed 1, 2, 3, 4 — a 2nd GPU saves 100 × (1 − 1/2) = 50 s,
    a 3rd 100 × (1/2 − 1/3) = 16.7, a 4th 8.3; B (R = 100): speed 1, 1.5, 1.6 — a 2nd saves 33.3,
    a 3rd 4.2. In order: A's 2nd (50/11), B's 2nd (33.3/11), A's 3rd (16.7/11): no GPU left."""
    p = pool([1, 1], [1, 1], free_g=3)
    plans = {0: grid([[1.0], [2.0], [3.0], [4.0]], 1, [1]), 1: grid([[1.0], [1.5], [1.6]], 1, [1])}
    _grow(p, plans, np.array([100.0, 100.0]), gpu_moves=True)
    assert p.gpus.tolist() == [3, 2] and p.free_g == 0


def test_growing_stops_where_the_job_gets_no_faster() -> None:
    p = pool([1], [1], free_g=5)
    _grow(p, {0: grid([[1.0], [2.0], [2.0], [3.0]], 1, [1])}, np.array([10.0]), gpu_moves=True)
    assert p.gpus.tolist() == [2] and p.free_g == 4  # 3 GPUs would be no faster than 2


def test_a_gpu_short_of_cores_comes_with_fewer_cores_per_gpu() -> None:
    """One job at 2 GPUs × 3 cores (6), 1 GPU and 2 cores free: 3 GPUs × 3 = 9 would need 3 more;
    3 × 2 = 6 needs none, 3 × 1 = 3 frees 3: the walk down the columns stops at 2 cores per GPU."""
    p = pool([2], [3], free_g=1, free_c=2)
    speed = [[1.0, 1.5, 1.8], [2.0, 3.0, 3.6], [2.5, 4.0, 4.5]]  # w = 1, 2, 3; x = 1, 2, 3
    _grow(p, {0: grid(speed, 1, [1, 2, 3])}, np.array([100.0]), gpu_moves=True)
    assert p.gpus.tolist() == [3] and p.per_gpu.tolist() == [2] and (p.free_g, p.free_c) == (0, 2)


def test_growing_by_cores_one_group_at_a_time() -> None:
    """CPU moves only: 2 GPUs at 1 core per GPU, 3 cores free; speeds at 1, 2, 3 cores per GPU:
    1, 1.5, 1.6 — the 2nd core per GPU (2 cores) is worth it, the 3rd (2 more) does not fit."""
    p = pool([2], [1], free_g=0, free_c=3)
    _grow(p, {0: grid([[0.5, 0.6, 0.7], [1.0, 1.5, 1.6]], 1, [1, 2, 3])}, np.array([100.0]), gpu_moves=False)
    assert p.per_gpu.tolist() == [2] and p.free_c == 1


# ------------------------------------------------------------------ score and queues
def test_borda_and_mlfq_edges() -> None:
    assert borda_score(np.array([3.0]), np.array([0.0]), np.array([True]), np.array([0])).tolist() == [2]
    assert borda_score(np.array([]), np.array([]), np.array([], dtype=bool), np.array([])).tolist() == []
    # two predictable jobs with equal benefit: the earlier arrival ranks first
    s = borda_score(np.array([5.0, 1.0]), np.array([2.0, 2.0]), np.array([True, True]), np.array([1, 0]))
    assert s.tolist() == [2 + 2, 1 + 1]
    assert mlfq_level(np.array([0, 5, 6, 9]), (5.0,)).tolist() == [0, 1, 1, 1]


# ------------------------------------------------------------------ the policy on small clusters
def test_the_first_decision_and_its_replan_time() -> None:
    # 8 GPUs and 48 cores: 6 cores per GPU by default. Two unpredictable jobs asking 2 and 4 GPUs
    # get them with 6 cores each; the 2 idle GPUs go round-robin (the first job by Borda order:
    # equal service, so arrival) up to each maximum.
    s = Scheduler(Cluster(nodes=(Node("n0", 8, cpus=48),)), make_policy("aiturbo"), LIN)
    s.submit(JobSpec("a", 0.0, 2, 1e6, "lin", max_gpus=3), 0.0)
    s.submit(JobSpec("b", 0.0, 4, 1e6, "lin", max_gpus=8), 0.0)
    ctx = s.context(0.0)
    out = s.policy.allocate(ctx)
    assert out.gpus.tolist() == [3, 5] and out.cpus.tolist() == [18, 30]
    assert s.policy.wakeup(ctx) is None  # nothing runs yet: nothing a re-plan looks at can change
    s.step(0.0)
    assert s.next_wakeup(0.0) == pytest.approx(240.0)
    assert s.next_wakeup(100.0) == pytest.approx(240.0)
    assert s.next_wakeup(240.0) == pytest.approx(480.0)  # due now: the one after
    no_spread = AITurbo(AITurbo.Params(spread_idle=False)).allocate(ctx)
    assert no_spread.gpus.tolist() == [2, 4] and no_spread.cpus.tolist() == [12, 24]
    gpus_only = make_policy("aiturbo:unified=false").allocate(ctx)
    assert gpus_only.gpus.tolist() == [3, 5] and gpus_only.cpus is None


def test_a_job_larger_than_the_cluster_never_runs_and_fixed_cores_are_kept() -> None:
    s = Scheduler(Cluster(nodes=(Node("n0", 4, cpus=16),)), make_policy("aiturbo"), LIN)
    s.submit(JobSpec("huge", 0.0, 8, 1e6, "lin", min_gpus=8, max_gpus=8), 0.0)
    s.submit(JobSpec("pinned", 0.0, 1, 1e6, "lin", max_gpus=1, min_cpus=3, max_cpus=3), 0.0)
    out = s.policy.allocate(s.context(0.0))
    assert out.gpus.tolist() == [0, 1] and out.cpus.tolist() == [0, 3]


def test_an_unpredictable_running_job_probes_core_counts_at_each_replan() -> None:
    """One job running on 2 GPUs of a 4-GPU node with 24 cores (default 6 cores per GPU); the
    probe offsets +2, −1, +4, +1 at each periodic re-plan once the policy knows the job (it has
    sent a sample): 8, 5, 10, 7 cores per GPU, clipped to [1, 12] and to 24 / 2 = 12."""
    from coddl.policies.base import ThroughputSample

    s = Scheduler(Cluster(nodes=(Node("n0", 4, cpus=24),)), make_policy("aiturbo:probe_rounds=1"), LIN)
    s.submit(JobSpec("a", 0.0, 2, 1e9, "lin", max_gpus=2), 0.0)
    s.step(0.0)
    s.observe("a", ThroughputSample(1.0, 2, 1, 12, 2.0, 2.0))
    cores = []
    for t in (240.0, 300.0, 480.0, 720.0, 960.0, 1200.0):
        s.step(t)
        cores.append(int(s.table.cpus[s.table.row["a"]]))
    # 300 is no periodic re-plan: the probe stays; after one round through the list: the default
    assert cores == [16, 16, 10, 20, 14, 12]
