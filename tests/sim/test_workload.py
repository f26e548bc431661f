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
