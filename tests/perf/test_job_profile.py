"""A job's profile from its inspection, against hand-computed values; the controller's estimates
(curve, scorer, correction, stored record) and the scheduler's per-job curve."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coddl.core.cluster import Cluster, LinkSpec
from coddl.core.job import JobSpec
from coddl.elastic.protocol import Inspection
from coddl.perf.inspection import INSPECTION_CLUSTER, Timings, measured_row, profile_rows, table_records
from coddl.perf.table import ProfileTable
from coddl.perf.jobmodel import JobModel
from coddl.policies.registry import make_policy
from coddl.runtime.estimation import Estimates
from coddl.runtime.models import runtime_curves
from coddl.scheduler import Scheduler

# forward + backward = 50 ms + 2 ms per sample; 10 ms per step besides: a step of m samples on one
# device takes 60 + 2m ms, i.e. fixed share f = 60 / (60 + 2·12) = 0.714 at the geometric-mean batch 12
TIMINGS = ((24, 0.098), (12, 0.074), (6, 0.062), (12, 0.9), (24, 0.098), (12, 0.0741), (6, 0.062))
OVERHEAD = 0.010


def test_rows_are_one_gpu_steps_at_each_timed_batch_from_the_medians():
    rows = profile_rows(Timings(4e6, TIMINGS, OVERHEAD), "mystery", "cpu")
    assert list(rows.local_batch) == [6, 12, 24]
    # medians: 62, 74.1 (the 0.9 s outlier is one of three), 98 ms; plus the 10 ms overhead
    assert rows.step_s == pytest.approx([0.072, 0.0841, 0.108])
    assert set(rows.gpus) == {1} and set(rows.param_bytes) == {4e6}
    assert rows.model == ["mystery"] * 3 and rows.gpu_type == ["cpu"] * 3 and rows.cluster == [INSPECTION_CLUSTER] * 3


def test_rows_refuse_an_empty_inspection():
    with pytest.raises(ValueError, match="timed no step"):
        profile_rows(Timings(0.0, (), 0.0), "x", "cpu")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_rows_refuse_gradient_bytes_that_are_no_count(bad):
    with pytest.raises(ValueError, match=r"^job-7: param_bytes must be a finite count"):
        profile_rows(Timings(bad, ((8, 0.1),), 0.0), "job-7", "cpu")


def test_a_measured_row_and_stored_records_read_back_as_the_same_rows():
    """What the store keeps is what the estimator reads: a measured step on 2 + 1 GPUs keeps its
    placement and the inspection's cluster, through ``ProfileTable.build`` and back."""
    row = measured_row("bert", 4e8, "cpu", [2, 1], 8.0, 1.25)
    table = ProfileTable.build([row])
    assert table.cluster[0] == INSPECTION_CLUSTER and tuple(table.placement[0]) == (2, 1)
    assert table.gpus[0] == 3 and table.nodes[0] == 2 and table.max_per_node[0] == 2
    again = ProfileTable.build(table_records(table))
    assert table_records(again) == table_records(table)
    assert again.cluster[0] == INSPECTION_CLUSTER and tuple(again.placement[0]) == (2, 1)


def estimates(links: LinkSpec = LinkSpec(100.0, 12.5, 0.0, 0.0)) -> Estimates:
    return Estimates(Cluster.homogeneous(2, 4, gpu_type="cpu", links=links))


def report(param_bytes: int = 0, global_batch: int | None = 24, local_batch: int | None = None) -> Inspection:
    exact = ((24, 0.098), (12, 0.074), (6, 0.062))
    return Inspection(param_bytes, exact, OVERHEAD, global_batch, local_batch)


def test_job_model_from_the_inspection():
    est = estimates().inspected("7", "mystery", "cpu", report(param_bytes=4_000_000))
    m = est.model
    assert m.b_ref == pytest.approx(12.0)  # geometric mean of 6, 12, 24
    assert m.t_ref == pytest.approx(0.084, rel=1e-3)  # 60 + 2·12 ms
    # the posterior mean of f: the exact rows' 0.714, pulled slightly towards the prior's mean
    assert m.fixed_share == pytest.approx(0.06 / 0.084, abs=0.02)
    assert m.param_bytes == 4e6 and m.gpu_type == "cpu" and m.measured == 0


def test_curve_splits_a_fixed_global_batch_over_the_gpus():
    e = estimates()
    e.inspected("7", "mystery", "cpu", report())  # no gradient bytes, no latency: compute alone
    rate, useful = e.curve("7", 8)
    # one step of 24/k samples per device: 60 + 48/k ms
    expected = [0.0] + [1.0 / (0.060 + 0.048 / k) for k in range(1, 9)]
    assert rate == pytest.approx(expected, rel=0.02)
    assert useful == 8


def test_curve_of_a_fixed_local_batch_is_flat_and_a_global_batch_caps_the_useful_gpus():
    e = estimates()
    e.inspected("1", "weak", "cpu", report(global_batch=None, local_batch=12))
    rate, _ = e.curve("1", 4)
    assert rate[1:] == pytest.approx([1 / 0.084] * 4, rel=0.01)  # each device steps 12 samples
    e.inspected("2", "tiny", "cpu", report(global_batch=3))
    rate, useful = e.curve("2", 6)
    assert useful == 3 and rate[4] == rate[5] == rate[6] == rate[3]  # 3 samples: no more than 3 GPUs


def test_the_scorer_prices_a_spread_placement_below_a_consolidated_one():
    e = estimates(LinkSpec(10.0, 0.1, 5.0, 50.0))
    e.inspected("7", "comm-heavy", "cpu", report(param_bytes=100_000_000))
    one_node = e.shape_rate("7", (4,), ("cpu",))
    two_nodes = e.shape_rate("7", (2, 2), ("cpu",) * 2)
    # 100 MB over a 0.1 GB/s link between nodes: a second per step at least, against 15 ms inside one
    assert two_nodes < one_node / 10


def test_a_contradicting_measurement_corrects_the_curve_and_only_as_far_as_it_justifies():
    e = estimates(LinkSpec(100.0, 12.5, 5.0, 20.0))
    e.inspected("7", "mystery", "cpu", report(param_bytes=4_000_000))
    before, _ = e.curve("7", 4)
    assert before[2] == pytest.approx(1 / (0.060 + 0.024), rel=0.02)  # 4 MB over 100 GB/s costs ~nothing
    assert not e.correct("7")  # nothing measured yet
    for _ in range(5):  # measured: 2 GPUs run no faster than half of one
        e.observe("7", (2,), 0.5 * before[1])
    assert e.correct("7")
    after, useful = e.curve("7", 4)
    assert after[2] < 0.7 * before[2] and after[2] > 0.4 * before[1]
    assert e.jobs["7"].model.comm_efficiency > 10 and e.jobs["7"].model.measured == 1
    assert useful == 1  # one GPU is now the fastest: more would slow the job down
    assert after[1] == pytest.approx(before[1], rel=0.05)  # the one-GPU anchor does not move
    assert e.jobs["7"].measured[0]["gpus"] == 2 and not e.jobs["7"].pending


def test_whole_batch_steps_on_one_gpu_reanchor_the_compute_the_first_steps_measured():
    e = estimates()
    e.inspected("7", "mystery", "cpu", report())
    before, _ = e.curve("7", 2)
    assert before[1] == pytest.approx(1 / 0.108, rel=0.02)  # 24 samples: 60 + 48 ms
    for period in range(8):  # in steady state a one-GPU step of 24 samples takes 54 ms, half as long
        e.observe("7", (1,), 1 / 0.054)
        assert e.correct("7")
    after, _ = e.curve("7", 2)
    assert after[1] > 0.9 / 0.054 and len(e.jobs["7"].measured) == 8
    assert e.jobs["7"].model.measured == 0  # no multi-GPU step among them


def test_the_stored_record_restores_the_same_belief_and_curve():
    e = estimates()
    e.inspected("7", "mystery", "cpu", report(param_bytes=4_000_000))
    e.observe("7", (2,), 5.0)
    e.correct("7")
    rate, useful = e.curve("7", 8)
    record = json.loads(json.dumps(e.jobs["7"].record(rate, useful)))  # as the store keeps it: plain JSON
    assert record["curve"] == pytest.approx(list(rate[1:])) and record["useful_gpus"] == useful
    again = estimates()
    again.restore("7", record)
    assert again.curve("7", 8)[0] == pytest.approx(e.curve("7", 8)[0], rel=1e-12)
    assert again.jobs["7"].measured == record["measured"] and record["belief"]["measured_steps"] == 1


def test_the_scheduler_plans_a_job_on_its_own_curve_and_recycles_the_row():
    cluster = Cluster.homogeneous(1, 4, gpu_type="cpu")
    s = Scheduler(cluster, make_policy("afs-p"), runtime_curves())
    models = len(s.curves.names)
    s.submit(JobSpec("a", 0.0, 1, 1000.0, "default"), 0.0)
    s.submit(JobSpec("b", 0.0, 1, 1000.0, "default"), 0.0)
    flat = np.array([0.0, 10.0, 9.0, 8.0, 7.0])
    s.set_curve("a", flat, max_gpus=1)
    r = s.table.row["a"]
    assert s.curves.names[s.table.model[r]] == "job:a" and len(s.curves.names) == models + 1
    assert s.context(0.0).throughput(1, np.array([r]))[0] == 10.0
    assert s.table.max_gpus[r] == 1 and s.type_speed.shape[1] == models + 1
    step = s.step(0.0)
    assert {a.job_id: len(a.new) for a in step.plan.actions} == {"a": 1, "b": 3}
    s.complete("a", 1.0)
    s.set_curve("b", np.array([0.0, 1.0, 2.0]), max_gpus=2)  # reuses a's row; padded flat to the cluster
    rb = s.table.row["b"]
    assert s.curves.names[s.table.model[rb]] == "job:b" and len(s.curves.names) == models + 1
    assert list(s.curves.rate[s.table.model[rb], :5]) == [0.0, 1.0, 2.0, 2.0, 2.0]


def test_the_fit_reaches_communication_the_belief_priced_at_nearly_nothing():
    """One 2-GPU step 3× slower than compute alone, where the fabric prices the all-reduce at 10 µs
    (η would have to be ~17,000): a fit started at the belief sees log T flat in log η and stays
    put; the second start, at the η the step needs, lands on it."""
    from coddl.perf.jobmodel import Prior, Steps, _comm_start, step_model

    prior = Prior(mean=(0.2, 0.0, 0.4966), sd=(0.3, 3.0, 0.35))
    job = JobModel.from_one_gpu("j", 4e6, np.array([8.0, 16.0]), np.array([0.06, 0.1]), prior)
    step = Steps(np.array([8.0]), np.array([1e-5]), np.array([0.18]), np.array([np.nan]))
    start = _comm_start(job, step, job.theta)
    assert start is not None and np.exp(start[1]) > 1e3
    fitted = job.updated(step)
    log_t, = step_model(job.t_ref, job.b_ref, 8.0, 1.0, 1e-5, fitted.theta)
    assert float(np.exp(log_t)) == pytest.approx(0.18, rel=0.1)
    explained = Steps(np.array([8.0]), np.array([1e-5]), np.array([0.061]), np.array([np.nan]))
    assert _comm_start(job, explained, job.theta) is None  # the belief already explains it


def test_a_gpu_s_floor_seen_in_the_inspection_is_kept_shown_and_restored():
    from rich.console import Console

    from coddl.runtime.render import profile_view

    # a GPU's first steps: 12 ms whatever the batch up to 16 samples, then 0.2 ms per sample
    floored = Inspection(0, ((256, 0.0542), (128, 0.0286), (64, 0.0158), (16, 0.012)), 0.0, 256, None)
    e = estimates()
    model = e.inspected("7", "mystery", "NVIDIA H100", floored).model
    assert model.t_floor == pytest.approx(0.012) and float(model.compute_seconds(2.0)) == pytest.approx(0.012)
    rate, useful = e.curve("7", 8)
    record = json.loads(json.dumps(e.jobs["7"].record(rate, useful)))
    assert record["belief"]["t_floor_s"] == pytest.approx(0.012)
    assert estimates().restore("7", record).model.t_floor == model.t_floor  # rebuilt from the same rows
    console = Console(width=400, record=True)
    console.print(profile_view(7, record))
    assert "never under 12 ms, the device's floor" in console.export_text()
    # the CPU job of the other tests: its step shrinks with the batch, no floor, none shown
    plain = e.inspected("8", "mystery", "cpu", report())
    record = plain.record(*e.curve("8", 8))
    console = Console(width=400, record=True)
    console.print(profile_view(8, record))
    assert plain.model.t_floor == 0 and "floor" not in console.export_text()
