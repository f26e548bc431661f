"""What a policy reads of a job's speed: ``Context.remaining_time`` over every row takes a compiled
path; it must give, float for float, what the numpy expression gives on any rows (the reference
here is the same method on an explicit row list, which takes the numpy path)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.scheduler import Scheduler

CURVES = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 4: 4.0}, "flat": {1: 3.0, 2: 3.0},
                                 "odd": {1: 0.7, 3: 1.9, 8: 2.2}})


@settings(max_examples=60, deadline=None)
@given(jobs=st.lists(st.tuples(st.sampled_from(CURVES.names), st.floats(0.5, 1e7), st.integers(1, 8),
                               st.sampled_from([1.0, 0.5, 1.7, 0.0])), min_size=1, max_size=30),
       k=st.one_of(st.integers(0, 12), st.lists(st.integers(0, 12), min_size=30, max_size=30)),
       now=st.floats(0.0, 1e5))
def test_remaining_time_over_every_row_equals_the_numpy_expression(jobs, k, now) -> None:
    # 8 GPUs: "odd" is measured to 8, so its last column is not the flat padding beyond a profile
    s = Scheduler(Cluster.for_gpus(8, 8), make_policy("max-min"), CURVES)
    for i, (model, work, gpus, speed) in enumerate(jobs):
        s.submit(JobSpec(str(i), 0.0, gpus, work, model), 0.0)
        s.set_speed(str(i), speed)
    s.step(0.0)
    for i in range(len(jobs)):
        if i % 2:
            s.set_rate(str(i), 0.3 * i, 0.0)  # some progress by ``now``, some none
    ctx = s.context(now)
    kk = k if isinstance(k, int) else np.array(k[: len(jobs)], dtype=np.int64)
    fast = ctx.remaining_time(kk)
    slow = ctx.remaining_time(kk, np.arange(len(jobs)))
    assert fast.dtype == slow.dtype == np.float64
    assert np.array_equal(fast, slow)
    assert np.isinf(fast[np.asarray(kk) * np.ones(len(jobs)) == 0]).all()  # no GPUs: never done
