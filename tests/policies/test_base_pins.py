"""The policy contract's helpers, pinned with hand-computed values: the greedy walk (with and
without backfilling), the orders (NaN last, ties by arrival then submission, stable on many ties),
the jobs view's lazy columns and memo, a job's throughput and remaining time, and the base class."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.policies.base import Policy, arrival_order, greedy_fit, keyed_order, lexorder
from coddl.scheduler import Scheduler

# "lin": 1 it/s per GPU up to 4; "flat": 3 it/s on 1 or 2 GPUs (its curve ends at 2 columns of 4)
CURVES = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}, "flat": {1: 3.0, 2: 3.0}})


def scheduler(jobs: list[tuple[str, float, int, float, str]], gpus: int = 4) -> Scheduler:
    """Jobs (id, arrival, GPUs, steps, model), submitted in the order given."""
    s = Scheduler(Cluster.for_gpus(gpus, 4), make_policy("fifo"), CURVES)
    for jid, arrival, g, work, model in jobs:
        s.submit(JobSpec(jid, arrival, g, work, model), arrival)
    return s


# ------------------------------------------------------------------ greedy_fit
def test_greedy_fit_backfills_past_a_misfit_and_stops_without_backfill() -> None:
    demand = np.array([2, 3, 1, 1])
    # free 4: row 0 (2) fits → 2 left; row 1 (3) does not; row 2 (1) → 1 left; row 3 (1) → 0
    assert greedy_fit(np.array([0, 1, 2, 3]), demand, 4).tolist() == [True, False, True, True]
    assert greedy_fit(np.array([0, 1, 2, 3]), demand, 4, backfill=True).tolist() == [True, False, True, True]
    # without backfilling the walk ends at row 1
    assert greedy_fit(np.array([0, 1, 2, 3]), demand, 4, backfill=False).tolist() == [True, False, False, False]
    # the order decides, not the row index: row 1 first takes 3 GPUs, row 3 the last one
    assert greedy_fit(np.array([1, 3, 0, 2]), demand, 4).tolist() == [False, True, False, True]


def test_greedy_fit_fills_exactly_and_admits_nothing_without_room() -> None:
    demand = np.array([2, 2, 1])
    assert greedy_fit(np.array([0, 1, 2]), demand, 4).tolist() == [True, True, False]  # exactly full
    assert greedy_fit(np.array([0, 1, 2]), demand, 0).tolist() == [False, False, False]
    assert greedy_fit(np.array([0, 1, 2]), demand, -1).tolist() == [False, False, False]
    assert greedy_fit(np.array([], dtype=np.int64), demand, 4).tolist() == [False, False, False]
    # lists and floats are taken as integers (a float free count is rounded down)
    assert greedy_fit([2, 0], [2.0, 1.0, 1.0], 3.9).tolist() == [True, False, True]
    assert greedy_fit([0, 1], np.array([1, 1]), 1.5, backfill=0).tolist() == [True, False]


# ------------------------------------------------------------------ orders
def test_lexorder_sorts_by_the_first_key_then_the_next() -> None:
    a = np.array([2, 1, 2, 1])
    b = np.array([0.5, 0.7, 0.1, 0.2])
    assert lexorder(a, b).tolist() == [3, 1, 2, 0]
    assert lexorder(b).tolist() == [2, 3, 0, 1]
    assert lexorder(np.array([1, 1, 1])).tolist() == [0, 1, 2]  # stable


def test_lexorder_puts_nan_last_as_infinity_so_the_next_key_breaks_the_tie() -> None:
    key = np.array([np.nan, np.inf, 1.0, np.nan])
    second = np.array([0, 5, 9, 1])
    # NaN counts as +inf: rows 0, 1 and 3 tie on the first key and the second key orders them
    assert lexorder(key, second).tolist() == [2, 0, 3, 1]
    assert lexorder(key).tolist() == [2, 0, 1, 3]


def test_keyed_order_breaks_many_ties_by_arrival_then_submission() -> None:
    # 40 jobs (more than numpy sorts by insertion, where any sort is stable), arrivals 0, 1, …;
    # keys 0/1 alternating, with NaN (never scheduled) for every fifth: 0-keys first in arrival
    # order, then 1-keys, then NaN
    n = 40
    s = scheduler([(f"j{i}", float(i), 1, 10.0, "lin") for i in range(n)], gpus=64)
    jobs = s.context(0.0).jobs
    key = np.array([np.nan if i % 5 == 4 else float(i % 2) for i in range(n)])
    want = ([i for i in range(n) if key[i] == 0] + [i for i in range(n) if key[i] == 1]
            + [i for i in range(n) if np.isnan(key[i])])
    assert keyed_order(jobs, key).tolist() == want


def test_keyed_order_uses_arrival_when_submission_order_is_not_arrival_order() -> None:
    # submitted C (arrives 5), A (arrives 1), B (arrives 1): arrival order A, B (submission breaks
    # the tie), then C
    s = scheduler([("C", 5.0, 1, 10.0, "lin"), ("A", 1.0, 1, 10.0, "lin"), ("B", 1.0, 1, 10.0, "lin")])
    jobs = s.context(5.0).jobs
    assert not jobs.arrivals_in_order
    assert arrival_order(jobs).tolist() == [1, 2, 0]
    assert arrival_order(jobs, np.array([0, 2])).tolist() == [2, 0]
    assert keyed_order(jobs, np.array([0.0, 0.0, 0.0])).tolist() == [1, 2, 0]
    # keys C 1, A 2, B 1: C and B tie on 1 and B arrived first
    assert keyed_order(jobs, np.array([1.0, 2.0, 1.0])).tolist() == [2, 0, 1]


def test_arrival_order_of_some_rows_keeps_submission_order() -> None:
    s = scheduler([("A", 0.0, 1, 10.0, "lin"), ("B", 1.0, 1, 10.0, "lin"), ("C", 1.0, 1, 10.0, "lin"),
                   ("D", 2.0, 1, 10.0, "lin")])
    jobs = s.context(2.0).jobs
    assert jobs.arrivals_in_order
    assert arrival_order(jobs).tolist() == [0, 1, 2, 3]
    assert arrival_order(jobs, np.array([3, 1])).tolist() == [1, 3]
    assert arrival_order(jobs, np.array([2, 0, 3])).tolist() == [0, 2, 3]
    assert arrival_order(jobs, np.array([], dtype=np.int64)).tolist() == []


# ------------------------------------------------------------------ the jobs view
def test_jobs_view_columns_length_and_unknown_names() -> None:
    s = scheduler([("A", 0.0, 2, 10.0, "lin"), ("B", 3.0, 1, 20.0, "flat")])
    jobs = s.context(3.0).jobs
    assert len(jobs) == 2
    assert jobs.ids == ["A", "B"]
    assert jobs.requested.tolist() == [2, 1]
    assert jobs.arrival.tolist() == [0.0, 3.0]
    assert jobs.total_work.tolist() == [10.0, 20.0]
    assert jobs.model.tolist() == [CURVES.model_index("lin"), CURVES.model_index("flat")]
    assert jobs.requested is jobs.requested  # made once, then found directly
    assert [sp.job_id for sp in jobs.specs] == ["A", "B"]
    with pytest.raises(AttributeError, match="no_such_column"):
        jobs.no_such_column  # noqa: B018
    assert not hasattr(jobs, "ids_and_more")


def test_jobs_view_rows_stop_at_the_live_jobs() -> None:
    s = scheduler([("A", 0.0, 2, 10.0, "lin"), ("B", 0.0, 1, 20.0, "lin"), ("C", 0.0, 1, 30.0, "lin")])
    s.complete("A", 0.0)
    jobs = s.context(0.0).jobs
    assert len(jobs) == 2 and jobs.share.shape == (2,) and jobs.total_work.shape == (2,)
    assert sorted(jobs.total_work.tolist()) == [20.0, 30.0]


def test_memo_computes_once_per_view() -> None:
    s = scheduler([("A", 0.0, 1, 10.0, "lin")])
    jobs = s.context(0.0).jobs
    calls = []

    def compute():
        calls.append(1)
        return np.array([7.0])

    first = jobs.memo("k", compute)
    again = jobs.memo("k", compute)
    assert first is again and first.tolist() == [7.0] and len(calls) == 1
    other = jobs.memo("other", lambda: np.array([1.0]))
    assert other.tolist() == [1.0] and len(calls) == 1


# ------------------------------------------------------------------ throughput and remaining time
def test_throughput_reads_the_curve_clamped_to_its_last_column_times_the_speed() -> None:
    s = scheduler([("A", 0.0, 1, 12.0, "lin"), ("B", 0.0, 1, 30.0, "flat")])
    s.set_speed("B", 0.5)
    ctx = s.context(0.0)
    last = ctx.curves.shape[1] - 1
    assert ctx.throughput(1).tolist() == [1.0, 1.5]
    assert ctx.throughput(2).tolist() == [2.0, 1.5]
    assert ctx.throughput(np.array([3, 0])).tolist() == [3.0, 0.0]
    # beyond the table: the last column (what the curve table pads with)
    assert ctx.throughput(last + 5).tolist() == ctx.throughput(last).tolist()
    assert ctx.throughput(last + 5, np.array([0])).tolist() == [float(ctx.curves[0, last])]
    assert ctx.throughput(4, np.array([1])).tolist() == [1.5]


def test_remaining_time_is_work_over_rate_and_infinite_without_gpus() -> None:
    s = scheduler([("A", 0.0, 1, 12.0, "lin"), ("B", 0.0, 1, 30.0, "flat")])
    s.set_speed("B", 0.5)
    ctx = s.context(0.0)
    assert ctx.remaining_time(2).tolist() == [6.0, 20.0]
    assert ctx.remaining_time(np.array([3, 1])).tolist() == [4.0, 20.0]
    assert ctx.remaining_time(0).tolist() == [np.inf, np.inf]
    # on some rows (the numpy path): the same numbers
    assert ctx.remaining_time(2, np.array([1])).tolist() == [20.0]
    assert ctx.remaining_time(np.array([4, 0]), np.array([0, 1])).tolist() == [3.0, np.inf]
    assert ctx.remaining_time(1, slice(None)).tolist() == [12.0, 20.0]


def test_remaining_time_with_a_stopped_job_is_infinite() -> None:
    s = scheduler([("A", 0.0, 1, 12.0, "lin"), ("B", 0.0, 1, 30.0, "lin")])
    s.set_speed("A", 0.0)
    ctx = s.context(0.0)
    assert ctx.remaining_time(2).tolist() == [np.inf, 15.0]
    assert ctx.remaining_time(2, np.array([0, 1])).tolist() == [np.inf, 15.0]


def test_remaining_time_on_float32_curves_takes_the_numpy_path() -> None:
    s = scheduler([("A", 0.0, 1, 12.0, "lin"), ("B", 0.0, 1, 30.0, "flat")])
    ctx = s.context(0.0)
    ctx.curves = ctx.curves.astype(np.float32)
    assert ctx.remaining_time(2).tolist() == [6.0, 10.0]
    assert ctx.remaining_time(0).tolist() == [np.inf, np.inf]


# ------------------------------------------------------------------ the base class
def test_policy_defaults_and_description() -> None:
    class Toy(Policy):
        name = "toy"

        @dataclasses.dataclass
        class Params:
            size: int = 3
            label: str = "x"

    assert Toy().params == Toy.Params()
    given = Toy.Params(size=5)
    pol = Toy(given)
    assert pol.params is given
    assert pol.describe() == "toy(size=5, label=x)"
    assert Policy().describe() == "()"
    assert pol.wakeup(None) is None
    assert pol.assigns_cores() is False
    assert make_policy("tiresias-l:thresholds=10/20+knob=off").describe() == (
        "tiresias-l(thresholds=(10.0, 20.0), knob=None, service=attained, queue_order=arrival, "
        "starvation_wait=accumulated, keep_demotion=True, backfill=True)")


def test_greedy_fit_takes_orders_and_demands_as_integers() -> None:
    # a float order indexes as integers; a fractional demand counts its whole GPUs only (1.5 → 1)
    assert greedy_fit(np.array([1.0, 0.0]), np.array([1, 1]), 1).tolist() == [False, True]
    assert greedy_fit(np.array([0, 1]), np.array([1.5, 1.0]), 2).tolist() == [True, True]
    assert greedy_fit(np.array([0, 1]), [1.9, 1.2], 2).tolist() == [True, True]


def test_lexorder_compares_integer_keys_exactly() -> None:
    # 2⁶⁰ and 2⁶⁰ + 1 are one float: as integers they still order
    big = np.array([2**60 + 1, 2**60], dtype=np.int64)
    assert lexorder(big).tolist() == [1, 0]
    assert lexorder(np.array([1, 1]), big).tolist() == [1, 0]


def test_arrival_order_of_rows_given_out_of_order_breaks_ties_by_submission() -> None:
    # submitted C (arrives 5), A and B (both arrive 1): rows 2, 1 asked for → A (submitted first), B
    s = scheduler([("C", 5.0, 1, 10.0, "lin"), ("A", 1.0, 1, 10.0, "lin"), ("B", 1.0, 1, 10.0, "lin")])
    jobs = s.context(5.0).jobs
    assert arrival_order(jobs, np.array([2, 1])).tolist() == [1, 2]
    assert arrival_order(jobs, np.array([2, 0, 1])).tolist() == [1, 2, 0]


def test_remaining_time_takes_gpu_counts_as_integers() -> None:
    s = scheduler([("A", 0.0, 1, 12.0, "lin"), ("B", 0.0, 1, 30.0, "flat")])
    ctx = s.context(0.0)
    assert ctx.remaining_time(np.array([2.0, 1.0])).tolist() == [6.0, 10.0]
    assert ctx.remaining_time(3.0).tolist() == [4.0, 10.0]
