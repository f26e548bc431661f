"""The CoDDL authors' model draw (``model_draw="coddl-authors"``), checked against their loop as
written in their simulator: the global legacy generator, ``np.random.seed(0)`` per VC."""

from __future__ import annotations

import numpy as np

from coddl.perf.curves import CODDL_POOL, load_coddl_curves
from coddl.sim.workload import build_workload_coddl_authors
from coddl.traces import load_trace

CURVES = load_coddl_curves()


def authors_loop(trace):
    """Their ``gen_philly_trace``: pool by max GPUs, skip before the draw, randint, skip < 1 step."""
    np.random.seed(0)
    out = []
    for tj in trace.jobs:
        pool = [m for m in CODDL_POOL if CURVES.max_gpus[CURVES.index[m]] >= tj.num_gpus]
        if len(pool) == 0:
            continue
        m = pool[np.random.randint(0, len(pool))]
        iters = tj.duration / (1.0 / CURVES.throughput(m, tj.num_gpus))
        if iters < 1:
            continue
        out.append((tj.job_id, m, iters))
    return out


def test_the_draw_is_the_authors_loop_on_a_vc_with_jobs_no_model_scales_to():
    trace = load_trace("philly", vc="ee9e8c")
    specs, skipped = build_workload_coddl_authors(trace, CURVES)
    expected = authors_loop(trace)
    assert [(s.job_id, s.model) for s in specs] == [(j, m) for j, m, _ in expected]
    assert np.allclose([s.total_work for s in specs], [w for _, _, w in expected], rtol=1e-12)
    too_big = [s for s in skipped if s.reason.startswith("no pool model")]
    assert {s.gpus for s in too_big} >= {128}  # ee9e8c's three 128-GPU jobs
    assert all(s.gpus > 52 for s in too_big)  # the largest pool model scales to 52 GPUs
    assert len(specs) + len(skipped) == len(trace.jobs)
    # the same trace draws the same models every time: the seed is fixed, not the run's
    again, _ = build_workload_coddl_authors(trace, CURVES)
    assert [s.model for s in again] == [s.model for s in specs]
