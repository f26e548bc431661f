"""AITurbo's queues pinned on corner cases, with hand-computed values: the walk down the T·U grid
at its edges, the decrease queue's benefit (R × Δcost, largest first, only positive, never below a
job's minimum GPUs), the increase queue's value (time saved ÷ service added, a free move first)
and its re-evaluation of stale moves, the pool's cores of a job left waiting, and the Borda
score's integer rank points."""

from __future__ import annotations

import numpy as np

from coddl.core.cluster import Cluster, Node
from coddl.core.job import JobSpec
from coddl.policies import make_policy
from coddl.policies.aiturbo import _grow, _Plan, _shed, borda_score, descend
from coddl.scheduler import Scheduler

# grid: a plan over w0 … GPUs × x cores per GPU, U = w × (service_per_gpu + x); pool: the free GPUs and cores
from test_aiturbo_pins import LIN, grid, pool


def plan(cost: list[float], lo: int = 1, x: int = 2) -> _Plan:
    """A plan over lo … lo + len(cost) − 1 GPUs at one core count, with T·U ÷ R = ``cost``."""
    c = np.array(cost, dtype=float)[:, None]
    w = np.arange(lo, lo + c.shape[0])
    return _Plan(0, w, np.array([x]), 1.0 / c, np.ones_like(c), c, x, 0.0)


# ------------------------------------------------------------------ the T·U walk at its edges
def test_descend_with_gpu_moves_also_moves_down_the_columns() -> None:
    # fewer cores per GPU is a move too when GPU moves are allowed: 3 → 1 one column to the left
    assert descend(np.array([[1.0, 2.0]]), (0, 1), gpu_moves=True) == (0, 0)
    # from (0, 2): the left neighbour 1 is the only lower one (5 is two columns away)
    assert descend(np.array([[5.0, 1.0, 3.0]]), (0, 2), gpu_moves=True) == (0, 1)


def test_descend_by_cpu_moves_takes_one_column_at_a_time() -> None:
    # from (0, 0) the next column (1) is lower; the one after it (5) is not a ±1 move
    assert descend(np.array([[3.0, 1.0, 5.0]]), (0, 0), gpu_moves=False) == (0, 1)
    assert descend(np.array([[2.0, 1.0]]), (0, 0), gpu_moves=False) == (0, 1)


def test_descend_on_a_grid_with_no_move_stays_put() -> None:
    # one GPU count and one core count: no neighbour at all; one column: no CPU move
    assert descend(np.array([[2.0]]), (0, 0), gpu_moves=True) == (0, 0)
    assert descend(np.array([[2.0], [1.0]]), (0, 0), gpu_moves=False) == (0, 0)
    assert descend(np.array([[2.0], [1.0]]), (0, 0), gpu_moves=True) == (1, 0)


# ------------------------------------------------------------------ the decrease queue
def test_shedding_never_takes_a_job_below_its_minimum_gpus() -> None:
    """P holds 1 GPU, its minimum (its plan starts at 1 GPU), and more GPUs would be cheaper
    (cost 2 at 1 GPU, 1 at 2): it has no −1 GPU move, so W (1 GPU, none free) keeps waiting."""
    p = pool([1, 0], [2, 2], free_g=0)
    _shed(p, [1], np.array([1, 1]), {0: plan([2.0, 1.0])}, np.array([10.0, 0.0]))
    assert p.gpus.tolist() == [1, 0] and p.free_g == 0


def test_shedding_skips_a_move_with_zero_benefit() -> None:
    """P at 2 GPUs costs the same at 1 (1.0 and 1.0): benefit 10 × 0 = 0, not positive, so it
    gives nothing up and W waits."""
    p = pool([2, 0], [2, 2], free_g=0)
    _shed(p, [1], np.array([2, 1]), {0: plan([1.0, 1.0])}, np.array([10.0, 0.0]))
    assert p.gpus.tolist() == [2, 0] and p.free_g == 0


def test_shedding_takes_a_benefit_below_one() -> None:
    """P at 2 GPUs, R = 1, cost 1 at 1 GPU and 1.5 at 2: benefit 1 × 0.5 = 0.5 > 0, so W (1 GPU)
    gets P's second GPU."""
    p = pool([2, 0], [1, 1], free_g=0)
    _shed(p, [1], np.array([2, 1]), {0: plan([1.0, 1.5])}, np.array([1.0, 0.0]))
    assert p.gpus.tolist() == [1, 1] and p.free_g == 0


def test_shedding_ranks_by_remaining_steps_times_the_cost_change() -> None:
    """P and Q at 2 GPUs, R = 10 each. P's cost 1 → 2: benefit 10 × 1 = 10; Q's 1 → 3: 10 × 2 = 20.
    The largest benefit goes first: Q gives its GPU to W (1 GPU). (R ÷ Δcost would rank P first:
    10 vs 5; so would the smallest benefit.)"""
    p = pool([2, 2, 0], [1, 1, 1], free_g=0)
    plans = {0: plan([1.0, 2.0]), 1: plan([1.0, 3.0])}
    _shed(p, [2], np.array([2, 2, 1]), plans, np.array([10.0, 10.0, 0.0]))
    assert p.gpus.tolist() == [2, 1, 1]


def test_shedding_re_ranks_a_job_after_it_gave_up_a_gpu() -> None:
    """P at 3 GPUs (cost 1, 1.4, 2 at 1, 2, 3 GPUs; R = 10): benefit 6 for its 3rd GPU, then 4 for
    its 2nd; Q at 2 GPUs (cost 1, 1.3): benefit 3. W needs 2 GPUs: P's 3rd (6), then P's 2nd
    (4 > 3), so Q keeps both."""
    p = pool([3, 2, 0], [1, 1, 1], free_g=0)
    plans = {0: plan([1.0, 1.4, 2.0]), 1: plan([1.0, 1.3])}
    _shed(p, [2], np.array([3, 2, 2]), plans, np.array([10.0, 10.0, 0.0]))
    assert p.gpus.tolist() == [1, 2, 2] and p.free_g == 0


# ------------------------------------------------------------------ the increase queue: values
def test_growing_values_time_saved_per_service_the_gpu_adds() -> None:
    """One GPU free, cores unlimited, 1 core per GPU (a GPU adds 11 units). A (1 → 2 GPUs, speed
    1 → 2, R = 100) saves 50 s: 50/11; B (4 → 5 GPUs, speed 1 → 3) saves 66.7 s: 66.7/11. B gets it
    (per service the move adds, not per service held after it: that would be 50/33 vs 66.7/99)."""
    p = pool([1, 4], [1, 1], free_g=1)
    plans = {0: grid([[1.0], [2.0]], 1, [1]), 1: grid([[1.0], [3.0]], 4, [1])}
    _grow(p, plans, np.array([100.0, 100.0]), gpu_moves=True)
    assert p.gpus.tolist() == [1, 5] and p.free_g == 0


def test_growing_divides_time_saved_by_service_added() -> None:
    """One GPU free. A (1 core per GPU: a GPU adds 11; speed 1 → 2, R = 100) saves 50 s: 4.5 per
    unit; B (12 cores per GPU: a GPU adds 22; speed 1 → 2.5) saves 60 s: 2.7 per unit. A gets it
    (the product, 550 vs 1320, would pick B)."""
    p = pool([1, 1], [1, 12], free_g=1)
    plans = {0: grid([[1.0], [2.0]], 1, [1]), 1: grid([[1.0], [2.5]], 1, [12])}
    _grow(p, plans, np.array([100.0, 100.0]), gpu_moves=True)
    assert p.gpus.tolist() == [2, 1] and p.free_g == 0


def test_a_gpu_move_that_lowers_the_service_comes_first() -> None:
    """Service counts cores only (0 per GPU). A: 2 GPUs × 5 cores, 1 core free: 3 × 5 and 3 × 4
    need 5 and 2 more, 3 × 3 = 9 gives one back, so its +1 GPU move lowers the service (10 → 9):
    infinitely worth it. B: 1 → 2 GPUs at 1 core, 1 more unit, saves 5 s (R = 10). The one free
    GPU goes to A, not to B's finite value (a negative saved ÷ added would rank A last)."""
    p = pool([2, 1], [5, 1], free_g=1, free_c=1)
    a = grid([[0.5, 0.6, 0.7, 0.8, 1.0], [0.9, 1.0, 1.2, 1.3, 1.4]], 2, [1, 2, 3, 4, 5], service_per_gpu=0.0)
    b = grid([[1.0], [2.0]], 1, [1], service_per_gpu=0.0)
    _grow(p, {0: a, 1: b}, np.array([10.0, 10.0]), gpu_moves=True)
    assert p.gpus.tolist() == [3, 1] and p.per_gpu.tolist() == [3, 1] and (p.free_g, p.free_c) == (0, 2)


def test_a_gpu_move_that_keeps_the_service_is_free_and_needs_no_division() -> None:
    """Service counts cores only. A: 2 GPUs × 3 cores, 1 core free: 3 × 3 needs 3 more, 3 × 2 = 6
    none, so the service stays 6 (nothing added: worth infinitely much, without dividing by
    zero). B: 1 → 2 GPUs at 1 core adds 1 unit. A gets the one free GPU."""
    p = pool([2, 1], [3, 1], free_g=1, free_c=1)
    a = grid([[0.5, 0.8, 1.0], [0.9, 1.2, 1.4]], 2, [1, 2, 3], service_per_gpu=0.0)
    b = grid([[1.0], [2.0]], 1, [1], service_per_gpu=0.0)
    with np.errstate(divide="raise", invalid="raise"):
        _grow(p, {0: a, 1: b}, np.array([10.0, 10.0]), gpu_moves=True)
    assert p.gpus.tolist() == [3, 1] and p.per_gpu.tolist() == [2, 1] and (p.free_g, p.free_c) == (0, 1)


def test_a_one_gpu_jobs_cpu_move_adds_one_unit_and_is_valued_as_such() -> None:
    """CPU moves, 2 cores free. A (1 GPU, 1 → 2 cores: 1 unit added) speeds 1 → 1.1, R = 100:
    saves 9.1 s, 9.1 per unit. B (2 GPUs, 1 → 2 cores per GPU: 2 units) speeds 1 → 2: saves 50 s,
    25 per unit. B takes both cores; A's core no longer fits."""
    p = pool([1, 2], [1, 1], free_g=0, free_c=2)
    plans = {0: grid([[1.0, 1.1]], 1, [1, 2]), 1: grid([[1.0, 2.0]], 2, [1, 2])}
    _grow(p, plans, np.array([100.0, 100.0]), gpu_moves=False)
    assert p.per_gpu.tolist() == [1, 2] and p.free_c == 0


def test_growing_orders_first_moves_by_value_not_by_gpu_count() -> None:
    """One GPU free, R = 1000. A at 1 of 1–2 GPUs (speed 1 → 2): 500/11 = 45 per unit; B at 3 of
    1–4 GPUs (speed 3 → 6): 1000 × (1/3 − 1/6)/11 = 15 per unit. A gets it."""
    p = pool([1, 3], [1, 1], free_g=1)
    plans = {0: grid([[1.0], [2.0]], 1, [1]), 1: grid([[1.0], [2.0], [3.0], [6.0]], 1, [1])}
    _grow(p, plans, np.array([1000.0, 1000.0]), gpu_moves=True)
    assert p.gpus.tolist() == [2, 3] and p.free_g == 0


def test_a_job_that_grew_competes_with_its_next_move_value() -> None:
    """Two GPUs free, R = 1000. A (1–3 GPUs, speed 1, 2, 4): 2nd GPU 500/11 = 45, 3rd 250/11 = 23;
    B (1–2 GPUs, speed 1 → 1.2): 167/11 = 15. A takes both (its 3rd still beats B)."""
    p = pool([1, 1], [1, 1], free_g=2)
    plans = {0: grid([[1.0], [2.0], [4.0]], 1, [1]), 1: grid([[1.0], [1.2]], 1, [1])}
    _grow(p, plans, np.array([1000.0, 1000.0]), gpu_moves=True)
    assert p.gpus.tolist() == [3, 1] and p.free_g == 0


def test_growing_goes_on_past_a_job_whose_move_no_longer_fits() -> None:
    """CPU moves, 4 cores free, R = 100, 1 → 2 cores per GPU each. A (1 GPU, speed 1 → 2): 50 per
    unit; B (4 GPUs, speed 1 → 2, 4 units): 12.5; C (1 GPU, speed 1 → 1.1): 9.1. A takes 1 core;
    B's 4 no longer fit (3 left), so it is dropped, and C still takes 1."""
    p = pool([1, 4, 1], [1, 1, 1], free_g=0, free_c=4)
    plans = {0: grid([[1.0, 2.0]], 1, [1, 2]), 1: grid([[1.0, 2.0]], 4, [1, 2]), 2: grid([[1.0, 1.1]], 1, [1, 2])}
    _grow(p, plans, np.array([100.0, 100.0, 100.0]), gpu_moves=False)
    assert p.per_gpu.tolist() == [2, 1, 2] and p.free_c == 2


# ------------------------------------------------------------------ the increase queue: stale moves
def test_a_pushed_back_move_keeps_its_rank_by_value() -> None:
    """Three GPUs and 2 cores free, R = 100, 1 core per GPU unless said. C (speed 1 → 3): 66.7/11 =
    6.1. A (1 GPU × 2 cores, speed 1): to 2 × 2 (speed 2) saves 50 for 12 units: 4.2; short of
    cores, 2 × 1 (speed 1.5) saves 33.3 for 10 units: 3.3. B (speed 1 → 1.7): 41.2/11 = 3.7.
    D (2 GPUs × 3 cores, speed 1; 3 × 3 never fits, 3 × 2 needs no core: speed 1.25, 20 s for 10
    units): 2.0. C takes a GPU and a core; A's move is now 3.3 < B's 3.7: pushed back; B takes a
    GPU and the last core; then A's 3.3 (needing no core) beats D's 2.0 for the last GPU."""
    p = pool([1, 1, 1, 2], [2, 1, 1, 3], free_g=3, free_c=2)
    plans = {0: grid([[0.8, 1.0], [1.5, 2.0]], 1, [1, 2]),
             1: grid([[1.0], [1.7]], 1, [1]),
             2: grid([[1.0], [3.0]], 1, [1]),
             3: grid([[0.5, 0.8, 1.0], [0.9, 1.25, 1.5]], 2, [1, 2, 3])}
    _grow(p, plans, np.array([100.0, 100.0, 100.0, 100.0]), gpu_moves=True)
    assert p.gpus.tolist() == [2, 2, 2, 2] and p.per_gpu.tolist() == [1, 1, 1, 3] and p.free_g == 0


def test_a_stale_move_overtaken_by_another_waits_its_turn() -> None:
    """Two GPUs and 2 cores free, R = 10 (values below 1). C (1 core per GPU, speed 1 → 3): 6.7/11 =
    0.61. A (1 GPU × 2 cores, speed 1): to 2 × 2 (speed 2) saves 5 for 12 units: 0.42; short of
    cores, 2 × 1 (speed 1.5) saves 3.3 for 10 units: 0.33. B (1 core per GPU, speed 1 → 1.7):
    4.1/11 = 0.37. C goes first and takes a core; A's move is now 2 × 1 at 0.33 < B's 0.37, so it
    is pushed back and B takes the last GPU and core; then A has no GPU left."""
    p = pool([1, 1, 1], [2, 1, 1], free_g=2, free_c=2)
    plans = {0: grid([[0.8, 1.0], [1.5, 2.0]], 1, [1, 2]),
             1: grid([[1.0], [1.7]], 1, [1]),
             2: grid([[1.0], [3.0]], 1, [1])}
    _grow(p, plans, np.array([10.0, 10.0, 10.0]), gpu_moves=True)
    assert p.gpus.tolist() == [1, 2, 2] and p.per_gpu.tolist() == [2, 1, 1] and (p.free_g, p.free_c) == (0, 0)


def test_a_stale_move_that_only_ties_the_next_one_is_taken() -> None:
    """Two GPUs and 3 cores free, R = 100. C (row 2, speed 1 → 8): 87.5/11 = 8.0 goes first and takes
    a core. A (row 1, 1 GPU × 3 cores) first offered 2 × 3 (speed 4: 75/13 = 5.8); with 2 cores
    left it gets 2 × 2 (speed 2: 50 s for 11 units), exactly B's value (row 0, speed 1 → 2, 11
    units). Only a better move overtakes a stale one: A takes the last GPU, not B."""
    p = pool([1, 1, 1], [1, 3, 1], free_g=2, free_c=3)
    plans = {0: grid([[1.0], [2.0]], 1, [1]),
             1: grid([[0.5, 0.8, 1.0], [1.0, 2.0, 4.0]], 1, [1, 2, 3]),
             2: grid([[1.0], [8.0]], 1, [1])}
    _grow(p, plans, np.array([100.0, 100.0, 100.0]), gpu_moves=True)
    assert p.gpus.tolist() == [1, 2, 2] and p.per_gpu.tolist() == [1, 2, 1] and (p.free_g, p.free_c) == (0, 1)


# ------------------------------------------------------------------ the pool and the policy
def test_a_waiting_job_with_fixed_cores_holds_none() -> None:
    p = pool([0, 1], [2, 2], free_g=0, fixed=[True, True], fixed_cores=[5, 3])
    assert p.cores().tolist() == [0, 3]


def test_a_pinned_job_left_waiting_gets_no_cores() -> None:
    """4 GPUs, 16 cores (4 per GPU). 'big' (4 GPUs, first by arrival) takes them all with 16 cores;
    'pinned' (1 GPU, 3 cores fixed by the user) does not fit: 0 GPUs and so 0 cores."""
    s = Scheduler(Cluster(nodes=(Node("n0", 4, cpus=16),)), make_policy("aiturbo"), LIN)
    s.submit(JobSpec("big", 0.0, 4, 1e6, "lin", min_gpus=4, max_gpus=4), 0.0)
    s.submit(JobSpec("pinned", 1.0, 1, 1e6, "lin", max_gpus=1, min_cpus=3, max_cpus=3), 1.0)
    ctx = s.context(1.0)
    out = s.policy.allocate(ctx)
    big, pinned = ctx.jobs.ids.index("big"), ctx.jobs.ids.index("pinned")
    assert out.gpus[[big, pinned]].tolist() == [4, 0] and out.cpus[[big, pinned]].tolist() == [16, 0]


# ------------------------------------------------------------------ the Borda score
def test_borda_points_are_whole_rank_points() -> None:
    # LAS ranks 2, 1, 3; job 0 predictable (benefit rank 1): 2 + 1; the others 2 × 1 and 2 × 3
    s = borda_score(np.array([5.0, 1.0, 9.0]), np.array([4.0, 0.0, 0.0]), np.array([True, False, False]),
                    np.array([0, 1, 2]))
    assert s.dtype.kind == "i" and s.tolist() == [3, 2, 6]
