"""Workload building: the CoDDL methodology (ALGORITHMS.md §1) and other schedulers' traces."""

from __future__ import annotations

import pytest

from coddl.perf.curves import CODDL_POOL, load_coddl_curves
from coddl.sim.workload import build_workload, curves_for
from coddl.traces import load_trace
from coddl.traces.model import Trace, TraceError, TraceJob

CURVES = load_coddl_curves()


def test_philly_jobs_get_a_pool_model_that_fits_and_run_exactly_their_duration():
    trace = load_trace("philly", vc="6c71a0", limit=500)
    specs = build_workload(trace, CURVES, seed=1)
    for tj, s in zip(trace.jobs, specs):
        m = CURVES.model_index(s.model)
        assert s.model in CODDL_POOL
        assert CURVES.max_gpus[m] >= tj.num_gpus
        # on its requested GPUs the job takes exactly its recorded duration
        assert s.total_work / CURVES.throughput(m, tj.num_gpus) == pytest.approx(max(tj.duration, 1.0))
        assert s.max_gpus == CURVES.max_gpus[m] and s.requested_gpus == tj.num_gpus


def test_model_drawing_is_seeded():
    trace = load_trace("philly", vc="6c71a0", limit=300)
    a = [s.model for s in build_workload(trace, CURVES, seed=1)]
    assert a == [s.model for s in build_workload(trace, CURVES, seed=1)]
    assert a != [s.model for s in build_workload(trace, CURVES, seed=2)]
    assert len(set(a)) > 3  # drawn from the pool, not one model


def test_tiresias_and_gavel_names_map_to_measured_families():
    tir = build_workload(load_trace("tiresias-60"), CURVES)
    assert {s.model for s in tir} <= set(CURVES.names)
    assert next(s for s in tir if s.job_id == "0").model == "VggnetModel256"  # vgg19
    gav = build_workload(load_trace("gavel-philly-6c71a0", limit=50), CURVES)
    assert all(s.total_work > 0 for s in gav)


def test_pollux_jobs_run_to_convergence_on_estimated_curves():
    trace = load_trace("pollux-1")
    curves = curves_for(trace, CURVES)
    specs = build_workload(trace, curves)
    first = specs[0]
    assert first.model == "pollux-cifar10@2048"
    m = curves.model_index(first.model)
    assert curves.throughput(m, 2) > curves.throughput(m, 1) > 0
    with pytest.raises(TraceError, match="unknown model"):
        build_workload(trace, CURVES)  # without the estimated curves the models are unknown


def test_unknown_model_is_a_trace_error_naming_the_job():
    t = Trace("mine.csv", [TraceJob("x1", 0.0, 1, duration=10.0, model="quantum-net")])
    with pytest.raises(TraceError, match="mine.csv: job x1: model: unknown model 'quantum-net'"):
        build_workload(t, CURVES)


def test_a_duration_whose_work_overflows_is_a_trace_error_naming_the_job():
    # 1e308 s × a rate above 1 step/s is inf steps: the simulator's invariant checker then found a job
    # that could never run, in a traceback; 1e300 s still fits
    name = CURVES.names[1]  # GoogLeNet: 2.9 steps/s on one GPU
    t = Trace("mine.csv", [TraceJob("x1", 0.0, 1, duration=1e308, model=name),
                           TraceJob("x2", 0.0, 1, duration=1e300, model=name)])
    assert CURVES.throughput(1, 1) > 1
    with pytest.raises(TraceError, match=r"^mine\.csv: job x1: duration: 1e\+308 s is more work than a simulation can hold$"):
        build_workload(t, CURVES)
    assert build_workload(Trace("mine.csv", t.jobs[1:]), CURVES)[0].total_work == 1e300 * CURVES.throughput(1, 1)


def test_models_are_the_draws_of_one_scalar_call_per_unnamed_job_in_trace_order():
    """The draw is made in one vectorised call; it must give what one ``rng.integers(pool size)``
    per job without a model gives, in trace order (a reference transcription of that loop), so
    that a seed names the same workload before and after. Named jobs take no draw; a job larger
    than every model draws among the most scalable ones."""
    import numpy as np

    from coddl.sim.workload import _pool

    big = int(CURVES.max_gpus.max()) + 8
    jobs = [TraceJob(str(i), float(i), g, duration=60.0) for i, g in enumerate([1, 2, 4, 8, 16, 32, big, 1, 3])]
    jobs.insert(3, TraceJob("named", 3.5, 2, duration=60.0, model=CURVES.names[0]))
    jobs += [TraceJob(f"x{i}", 100.0 + i, int(g), duration=30.0) for i, g in
             enumerate(np.random.default_rng(7).choice([1, 1, 2, 4, 8, 64, big], size=500))]
    trace = Trace("mixed", jobs)
    for seed in (0, 1, 12345):
        rng = np.random.default_rng(seed)
        pool_idx, pool_max = _pool(CURVES, None)
        expected = []
        for tj in jobs:
            if tj.model is not None:
                expected.append(tj.model)
                continue
            eligible = pool_idx[pool_max >= tj.num_gpus]
            if eligible.size == 0:
                eligible = pool_idx[pool_max == pool_max.max()]
            expected.append(CURVES.names[int(eligible[rng.integers(eligible.size)])])
        assert [s.model for s in build_workload(trace, CURVES, seed=seed)] == expected
