"""A 4-job trace on 4 GPUs whose JCTs under FIFO, SRTF and max-min were worked out by hand.

Jobs (linear speed-up, P(k) = k):  a: t=0, 2 GPUs, 20 it · b: t=0, 4 GPUs, 40 it ·
c: t=2, 1 GPU, 6 it · d: t=3, 2 GPUs, 4 it.
"""

from __future__ import annotations

import pytest

from coddl.core import Cluster, JobSpec
from coddl.policies import make_policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate
from coddl.sim.metrics import summarise
from coddl.sim.reconfig import ReconfigCost

SPECS = [
    JobSpec("a", 0.0, 2, 20.0, "lin", max_gpus=4),
    JobSpec("b", 0.0, 4, 40.0, "lin", max_gpus=4),
    JobSpec("c", 2.0, 1, 6.0, "lin", max_gpus=4),
    JobSpec("d", 3.0, 2, 4.0, "lin", max_gpus=4),
]

# FIFO+backfill: a runs 0–10; b (4 GPUs) cannot fit beside a, so c backfills 2–8; d (2) cannot fit
#   at t=3 (1 free) but backfills when c ends, 8–10; b runs 10–20.
# FIFO, no backfill: everything waits behind b: a 0–10, b 10–20, c 20–26, d 20–22.
# SRTF: t=3 d (2 s left) and c (5 s) outrank a (7 s): a is preempted (3→5) and ends at 12; b 12–22.
# max-min: 2+2; at t=2 a,b,c = 2,1,1; at t=3 one each; d ends 7, c ends 8; a 2 GPUs → 12; b 4 → 17.5.
EXPECTED = {
    "fifo": {"a": 10.0, "b": 20.0, "c": 6.0, "d": 7.0},
    "fifo:backfill=false": {"a": 10.0, "b": 20.0, "c": 24.0, "d": 19.0},
    "srtf": {"a": 12.0, "b": 22.0, "c": 6.0, "d": 2.0},
    "max-min": {"a": 12.0, "b": 17.5, "c": 6.0, "d": 4.0},
}


@pytest.mark.parametrize("policy", list(EXPECTED))
def test_jcts_match_hand_computation(policy, linear_curves):
    sched = Scheduler(Cluster.for_gpus(4, 4), make_policy(policy), linear_curves)
    res = simulate(SPECS, sched, check=True)
    got = {r.spec.job_id: r.jct for r in res.records}
    assert got == pytest.approx(EXPECTED[policy])
    s = summarise(res)
    assert s.avg_jct == pytest.approx(sum(EXPECTED[policy].values()) / 4)
    assert s.makespan == pytest.approx(max(r.finish for r in res.records))


def test_srtf_counts_the_preemption_as_a_reconfiguration(linear_curves):
    res = simulate(SPECS, Scheduler(Cluster.for_gpus(4, 4), make_policy("srtf"), linear_curves), check=True)
    # a is suspended at t=3 and resumed at t=5: two reconfigurations beyond the four starts
    assert summarise(res).reconfigurations == 2


def test_in_place_reconfiguration_pauses_without_losing_work(linear_curves):
    """Max-min, x (40 it) alone from t=0, y (8 it) arriving at t=4; every in-place action pauses the
    job for regroup 0.5 s (none for a start) plus one step 1/P(k) s (state transfer ~0 at 1e9 GB/s):
      x starts on 4 GPUs: paused 0–0.25, 15 it done by 4; shrinks to 2: paused 4–5 (0.5 + 1/2).
      y starts on 2: paused 4–4.5, runs 8 it at 2/s, ends 8.5 (JCT 4.5); x did 7 more in 5–8.5.
      x grows back to 4: paused 8.5–9.25 (0.5 + 1/4), 18 it left at 4/s: ends 13.75.
    For free reconfiguration the same trace gives x 12 and y 4."""
    specs = [JobSpec("x", 0.0, 4, 40.0, "lin", max_gpus=4), JobSpec("y", 4.0, 2, 8.0, "lin", max_gpus=4)]
    cost = ReconfigCost("in-place", regroup_s=0.5, state_gbps=1e9, warm_start_s=0.0)
    zero = simulate(specs, Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), linear_curves), check=True)
    paid = simulate(specs, Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), linear_curves), cost,
                    check=True)  # check=True asserts ∫ rate dt == work for every job
    assert {r.spec.job_id: r.jct for r in zero.records} == pytest.approx({"x": 12.0, "y": 4.0})
    assert {r.spec.job_id: r.jct for r in paid.records} == pytest.approx({"x": 13.75, "y": 4.5})


def test_a_start_pays_the_first_step_and_nothing_else_in_place(linear_curves):
    """One job alone: it runs on 4 GPUs after a warm start and one step (1/P(4) s)."""
    cost = ReconfigCost("in-place", warm_start_s=0.05)
    spec = [JobSpec("x", 0.0, 4, 40.0, "lin", max_gpus=4)]
    res = simulate(spec, Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), linear_curves), cost,
                   check=True)
    assert res.records[0].jct == pytest.approx(0.05 + 0.25 + 10.0)
