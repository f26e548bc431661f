"""The division between queues (coddl.queues.share): hand-computed cases, then properties."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.queues.share import entitlements, waterfill

INF = np.inf


def ent(nominal, demand, floor=None, cohort=None, weight=None, borrow=None, lend=None) -> list[int]:
    n = len(nominal)
    return entitlements(np.array(nominal), np.array(demand), np.array(floor or [0] * n),
                        np.array(cohort if cohort is not None else [0] * n), np.array(weight or [1.0] * n),
                        np.array(borrow or [INF] * n, dtype=float), np.array(lend or [INF] * n, dtype=float)).tolist()


def test_an_idle_queue_lends_all_its_quota_and_takes_it_back() -> None:
    # A and B own 4 each. B idle: A may use all 8. B wants 4 again: A is back at its 4 at once,
    # even though A's running jobs would need 8 at their minimum (an owner's reclaim beats a floor).
    assert ent([4, 4], [8, 0]) == [8, 0]
    assert ent([4, 4], [8, 4], floor=[8, 0]) == [4, 4]
    assert ent([4, 4], [8, 1], floor=[8, 0]) == [7, 1]  # B wants 1: A keeps 3 of B's


def test_the_pool_is_shared_by_weight() -> None:
    # C's 6 idle GPUs go 2:1 to A and B (4 and 2) on top of their own 2 each.
    assert ent([2, 2, 6], [10, 10, 0], weight=[2, 1, 1]) == [6, 4, 0]
    # A can take only 1 more (its demand): B gets the other 5
    assert ent([2, 2, 6], [3, 10, 0], weight=[2, 1, 1]) == [3, 7, 0]


def test_borrowing_and_lending_limits() -> None:
    # A may borrow 1 of C's 6 idle GPUs: B borrows the other 5
    assert ent([2, 2, 6], [10, 10, 0], borrow=[1, INF, INF]) == [3, 7, 0]
    # C lends at most 3 of its 6 idle GPUs: 1.5 each, the odd one to the first queue
    assert ent([2, 2, 6], [10, 10, 0], lend=[INF, INF, 3]) == [4, 3, 0]
    assert ent([2, 2, 6], [10, 10, 0], lend=[INF, INF, 0]) == [2, 2, 0]


def test_no_cohort_neither_borrows_nor_lends() -> None:
    assert ent([4, 4], [8, 0], cohort=[-1, 0]) == [4, 0]
    assert ent([4, 4], [8, 0], cohort=[0, -1]) == [4, 0]
    assert ent([4, 4, 4], [8, 0, 0], cohort=[0, 0, 1]) == [8, 0, 0]  # only its own cohort lends


def test_floors_keep_running_borrowers_whole_while_the_pool_covers_them() -> None:
    # Pool 6 (C idle). A runs jobs needing 5 at their minimum (floor 5: 3 borrowed), B none yet:
    # fair share would be 3/3, but A keeps its floor: A 3 borrowed, B 3.
    assert ent([2, 2, 6], [10, 10, 0], floor=[5, 0, 0]) == [5, 5, 0]
    # A's floor 7 (5 borrowed): A 5 borrowed, B the last 1 of the pool
    assert ent([2, 2, 6], [10, 10, 0], floor=[7, 0, 0]) == [7, 3, 0]


def test_when_the_pool_shrinks_every_borrower_is_cut_to_its_floor_first() -> None:
    # C takes back 4 of its 6: the pool is 2. A's and B's floors need 3 and 3 borrowed: neither may
    # stay above its floor while the other is below it; the 2 are shared 1:1.
    assert ent([2, 2, 6], [10, 10, 4], floor=[5, 5, 0]) == [3, 3, 4]
    # floors 2 and 5 borrowed, pool 2: B would be above... 1 each by weight, neither above its floor
    assert ent([2, 2, 6], [10, 10, 4], floor=[4, 7, 0]) == [3, 3, 4]
    # A is content at 1 borrowed (its floor): B gets the other 1
    assert ent([2, 2, 6], [10, 10, 4], floor=[3, 7, 0]) == [3, 3, 4]


def test_weight_zero_borrows_only_what_nobody_else_wants() -> None:
    assert ent([2, 2, 6], [10, 10, 0], weight=[0, 1, 1]) == [2, 8, 0]
    assert ent([2, 2, 6], [10, 5, 0], weight=[0, 1, 1]) == [5, 5, 0]


def test_waterfill_rounds_to_the_total() -> None:
    assert waterfill([1.0, 1, 1], [0, 0, 0], [1, 5, 5], 7) == [1, 3, 3]
    assert waterfill([1.0, 1, 1], [0, 0, 0], [5, 5, 5], 7) == [3, 2, 2]
    assert waterfill([3.0, 1], [0, 0], [9, 9], 8) == [6, 2]
    assert waterfill([1.0, 2], [4, 0], [9, 9], 8) == [4, 4]
    assert waterfill([1.0, 0, 1], [0, 0, 0], [1, 5, 2], 7) == [1, 4, 2]


# ---------------------------------------------------------------------------------- properties
@st.composite
def cohorts(draw):  # noqa: ANN001, ANN201 - a hypothesis strategy
    n = draw(st.integers(1, 6))
    nominal = np.array(draw(st.lists(st.integers(0, 16), min_size=n, max_size=n)))
    demand = np.array(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n)))
    floor = np.array([draw(st.integers(0, int(d))) for d in demand])
    cohort = np.array(draw(st.lists(st.sampled_from([-1, 0, 0, 1]), min_size=n, max_size=n)))
    weight = np.array(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0, 3.0]), min_size=n, max_size=n)))
    limit = st.one_of(st.just(INF), st.integers(0, 12).map(float))
    borrow = np.array(draw(st.lists(limit, min_size=n, max_size=n)))
    lend = np.array(draw(st.lists(limit, min_size=n, max_size=n)))
    return nominal, demand, floor, cohort, weight, borrow, lend


@settings(max_examples=200, deadline=None)
@given(cohorts())
def test_division_properties(case) -> None:  # noqa: ANN001
    nominal, demand, floor, cohort, weight, borrow, lend = case
    e = entitlements(nominal, demand, floor, cohort, weight, borrow, lend)
    guaranteed = np.minimum(demand, nominal)
    # its quota back, as far as it wants it, whatever the others hold; never more than it can use
    assert (e >= guaranteed).all() and (e <= demand).all()
    borrowed = e - guaranteed
    # borrowing within the borrowing limit, and only inside a cohort
    assert (borrowed <= borrow).all()
    assert (borrowed[cohort < 0] == 0).all()
    for c in np.unique(cohort[cohort >= 0]):
        m = cohort == c
        pool = np.minimum(nominal[m] - guaranteed[m], lend[m]).sum()
        # lenders lend no more than their unused quota within their lending limits
        assert borrowed[m].sum() <= pool
        cap = np.minimum(demand[m] - guaranteed[m], borrow[m])
        # work-conserving: the pool is used up unless every borrower is at its cap
        assert borrowed[m].sum() == min(pool, cap.sum())
        lo = np.minimum(np.minimum(cap, pool), np.maximum(0, floor[m] - guaranteed[m]))
        if pool >= lo.sum():  # running borrowers keep their floors
            assert (borrowed[m] >= lo).all()
        else:  # everyone at or below its floor before anyone goes below it
            assert (borrowed[m] <= lo).all()
        # weighted fair share between borrowers free to move (strictly between their bounds)
        b, w = borrowed[m], weight[m]
        hi = np.minimum(cap, pool) if pool >= lo.sum() else lo
        low = lo if pool >= lo.sum() else np.zeros_like(lo)
        free = (b > low) & (b < hi) & (w > 0)
        if free.sum() > 1:
            level = b[free] / w[free]
            assert level.max() - level.min() <= (1 / w[free]).max() + 1e-9
        # a weight-0 queue gets more than its floor only when the weighted ones are all capped
        if ((w == 0) & (b > low)).any():
            assert (b[w > 0] == hi[w > 0]).all()


# ------------------------------------------------------------------ against an exact transcription
def _exact_level(w: list, lo: list[int], hi: list[int], total: int) -> list[int]:
    """The module's rule in exact rational arithmetic, written the slow, obvious way: the level λ
    where Σ clamp(w·λ, lo, hi) = total (bisection on the breakpoints, then the linear piece), each
    share rounded down, the units left given to the largest remainders, ties to the earlier queue."""
    from fractions import Fraction as F

    w = [F(x) for x in w]
    if total <= sum(lo):
        return list(lo)
    if total >= sum(hi):
        return list(hi)

    def filled(lam):  # noqa: ANN001, ANN202
        return sum(min(max(wi * lam, a), b) for wi, a, b in zip(w, lo, hi))

    points = sorted({F(a) / wi for wi, a in zip(w, lo)} | {F(b) / wi for wi, b in zip(w, hi)})
    below = max(p for p in points if filled(p) <= total)
    above = min(p for p in points if filled(p) > total)
    lam = below + (total - filled(below)) * (above - below) / (filled(above) - filled(below))
    exact = [min(max(wi * lam, a), b) for wi, a, b in zip(w, lo, hi)]
    x = [int(e) for e in exact]  # non-negative: int() is floor
    order = sorted(range(len(x)), key=lambda i: (-(exact[i] - x[i]), i))
    for i in [i for i in order if x[i] < hi[i]][: total - sum(x)]:
        x[i] += 1
    return x


def _exact_waterfill(weight: list, lo: list[int], hi: list[int], total: int) -> list[int]:
    x = list(lo)
    pos = [i for i, w in enumerate(weight) if w > 0]
    zero = [i for i, w in enumerate(weight) if w <= 0]
    for group, w in ((pos, [weight[i] for i in pos]), (zero, [1] * len(zero))):
        left = total - sum(x)
        if left <= 0 or not group:
            continue
        want = min(left + sum(x[i] for i in group), sum(hi[i] for i in group))
        for i, v in zip(group, _exact_level(w, [x[i] for i in group], [hi[i] for i in group], want)):
            x[i] = v
    return x


@st.composite
def fills(draw):  # noqa: ANN001, ANN201 - a hypothesis strategy
    n = draw(st.integers(1, 7))
    weight = draw(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0]), min_size=n, max_size=n))
    lo = draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    hi = [a + draw(st.integers(0, 12)) for a in lo]
    total = draw(st.integers(sum(lo), sum(hi)))
    return weight, lo, hi, total


@settings(max_examples=400, deadline=None)
@given(fills())
def test_waterfill_is_the_exact_weighted_level_rounded_by_largest_remainders(case) -> None:  # noqa: ANN001
    weight, lo, hi, total = case
    got = waterfill(weight, lo, hi, total)
    assert got == _exact_waterfill(weight, lo, hi, total), case
    assert sum(got) == total and all(a <= g <= b for a, g, b in zip(lo, got, hi))


def test_weight_zero_queues_share_what_is_left_evenly_and_weight_one_is_not_zero() -> None:
    # only weight-0 queues: they split the total evenly (the earlier one takes the odd unit)
    assert waterfill([0.0, 0.0], [0, 0], [9, 9], 5) == [3, 2]
    # weight 1 against weight 2: 1 : 2, not "weight 1 takes only the rest"
    assert waterfill([1.0, 2.0], [0, 0], [9, 9], 6) == [2, 4]
    # a weight-0 queue gets only what the weighted ones cannot take
    assert waterfill([1.0, 0.0], [0, 0], [2, 9], 6) == [2, 4]


def test_a_tie_in_the_remainders_goes_to_the_earlier_queue_whatever_the_float_error() -> None:
    """Found by the exact transcription: the level is 3, the shares 3, 4.5, 1.5 and 6, one unit is left
    and queues 1 and 3 tie at .5; the float path had computed 4.4999… and 1.5000… and gave it to 3."""
    assert waterfill([1.5, 1.5, 0.0, 0.5, 2.0], [2, 4, 6, 0, 0], [3, 5, 6, 2, 7], 21) == [3, 5, 6, 1, 6]
