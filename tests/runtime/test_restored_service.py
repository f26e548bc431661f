"""A job taken over after a controller restart keeps its attained service and first start, so a
least-attained-service policy ranks it exactly as before the restart."""

from __future__ import annotations

import math

from coddl.core import Cluster, JobSpec
from coddl.core.allocation import ActionKind
from coddl.perf.curves import CurveTable
from coddl.policies.tiresias import TiresiasL
from coddl.scheduler import Scheduler

def las() -> TiresiasL:
    return TiresiasL(TiresiasL.Params(thresholds=(100.0,), knob=None))


LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0}})


def test_a_restored_job_keeps_its_service_rank_and_resumes():
    # One GPU, Tiresias-L with one threshold of 100 GPU-s. "old" had received 150 GPU-s before the
    # restart (demoted), "new" none: "new" must run, and "old" resumes later keeping its first start.
    sched = Scheduler(Cluster.for_gpus(1, 8), las(), LIN)
    sched.submit(JobSpec("old", 0.0, 1, 50.0, "lin"), 500.0, attained_service=150.0, first_start=20.0)
    sched.submit(JobSpec("new", 400.0, 1, 30.0, "lin"), 500.0)
    ctx = sched.context(500.0)
    assert ctx.jobs.attained.tolist() == [150.0, 0.0]
    plan = sched.step(500.0).plan
    assert [(a.kind, a.job_id) for a in plan] == [(ActionKind.START, "new")]
    sched.complete("new", 530.0)
    plan = sched.step(530.0).plan
    assert [(a.kind, a.job_id) for a in plan] == [(ActionKind.RESUME, "old")]
    assert sched.context(540.0).jobs.attained.tolist() == [160.0]
    rec = sched.complete("old", 580.0)
    assert (rec.first_start, rec.attained_service) == (20.0, 200.0)


def test_without_a_restore_the_same_job_would_run_first():
    # The control: the same two jobs, "old" with no history, arrived first: FIFO inside the top queue.
    sched = Scheduler(Cluster.for_gpus(1, 8), las(), LIN)
    sched.submit(JobSpec("old", 0.0, 1, 50.0, "lin"), 500.0)
    sched.submit(JobSpec("new", 400.0, 1, 30.0, "lin"), 500.0)
    assert [(a.kind, a.job_id) for a in sched.step(500.0).plan] == [(ActionKind.START, "old")]
    assert math.isnan(sched.context(500.0).jobs.first_start[1])
