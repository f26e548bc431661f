"""Hand-computed multi-event scenarios, one per policy rule, each built so that getting the rule
wrong changes the outcome: decisions after partial progress, arrivals mid-run, starvation
promotions, slice ends and coin flips kept or redrawn."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.policies.afs_p import AfsP
from coddl.policies.base import Policy
from coddl.policies.tiresias import TiresiasL
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})


def run(policy: Policy | str, specs: list[JobSpec], gpus: int, per_node: int = 8):
    pol = make_policy(policy) if isinstance(policy, str) else policy
    return simulate(specs, Scheduler(Cluster.for_gpus(gpus, per_node), pol, LIN), check=True)


def starts(res, job: str) -> list[float]:
    """Times at which ``job`` went from 0 GPUs to some."""
    out, held = [], 0
    for t, jid, gpus in res.timeline:
        if jid == job:
            if held == 0 and gpus > 0:
                out.append(t)
            held = gpus
    return out


def finish(res) -> dict[str, float]:
    return {r.spec.job_id: r.finish for r in res.records}


@pytest.mark.parametrize("policy", ["afs-l", "srtf", "srsf"])
def test_remaining_not_total_work_decides_after_partial_progress(policy: str) -> None:
    # One GPU, P(1) = 1. A (100 steps) runs alone from 0; B (50) arrives at 90, when A has 10
    # left. By remaining work A keeps the GPU: A ends at 100, B at 150. Ranking by total work
    # (shortest-job-first) would hand it to B at 90: B at 140, A at 150.
    specs = [JobSpec("A", 0.0, 1, 100.0, "lin", max_gpus=1), JobSpec("B", 90.0, 1, 50.0, "lin", max_gpus=1)]
    assert finish(run(policy, specs, 1)) == pytest.approx({"A": 100.0, "B": 150.0})


def test_srtf_ranks_by_time_on_the_requested_gpus() -> None:
    # Two GPUs. A asks for 2 and has 30 steps: T_A(2) = 15 s; B asks for 1 with 20: T_B(1) = 20 s.
    # SRTF on the request runs A first (0–15), then B (15–35). By time on one GPU (T_A(1) = 30) B
    # would go first and A, needing both GPUs, would wait until 20.
    specs = [JobSpec("A", 0.0, 2, 30.0, "lin", max_gpus=2), JobSpec("B", 0.0, 1, 20.0, "lin", max_gpus=1)]
    assert finish(run("srtf", specs, 2)) == pytest.approx({"A": 15.0, "B": 35.0})


def test_srsf_ranks_by_gpus_times_remaining_time() -> None:
    # Two GPUs. A: 2 GPUs × T(2) = 2 × 12/2 = 12 GPU-s; B: 1 × 10 = 10: B goes first (0–10) although
    # A's remaining time (6 s) is shorter; A needs both GPUs, so it starts at 10 and ends at 16.
    specs = [JobSpec("A", 0.0, 2, 12.0, "lin", max_gpus=2), JobSpec("B", 0.0, 1, 10.0, "lin", max_gpus=1)]
    assert finish(run("srsf", specs, 2)) == pytest.approx({"A": 16.0, "B": 10.0})


def test_fifo_backfills_the_last_free_gpu() -> None:
    # Three GPUs: A (2 GPUs) runs; B (2) cannot fit; C (1), arriving later, takes the last free GPU
    # at once. B starts when A ends (at 50) and is never overtaken once running.
    specs = [JobSpec("A", 0.0, 2, 100.0, "lin", max_gpus=2), JobSpec("B", 1.0, 2, 10.0, "lin", max_gpus=2),
             JobSpec("C", 2.0, 1, 200.0, "lin", max_gpus=1)]
    res = run("fifo", specs, 3)
    assert starts(res, "C") == [2.0] and starts(res, "B") == [50.0] and starts(res, "A") == [0.0]
    assert finish(res) == pytest.approx({"A": 50.0, "B": 55.0, "C": 202.0})


def test_tiresias_l_demotes_then_promotes_a_starved_job() -> None:
    # Two GPUs, both jobs ask for 2; threshold 20 GPU-s (= 10 s on 2 GPUs); knob 2: a demoted job
    # that has waited 2 × the TIME it ran since its last promotion goes back to the top queue.
    #   0–10  A (demoted at 10)         10–20 B, arrived at 10 (top queue; demoted at 20)
    #   20–40 A (queue 1, arrived first; B waits from 20, ran 10 s → promoted at 40)
    #   40–50 B (top queue again; demoted at 50)   50–70 A   70–80 B (promoted at 70, waits 50–70)
    #   80–90 A finishes its 120 steps (2/s: 10+20+20+10 s)   90–110 B finishes its 100
    # Counting the wait in GPU-seconds (20 for B's 10 s) would promote B only at 60.
    pol = TiresiasL(TiresiasL.Params(thresholds=(20.0,), knob=2.0))
    specs = [JobSpec("A", 0.0, 2, 120.0, "lin", max_gpus=2), JobSpec("B", 10.0, 2, 100.0, "lin", max_gpus=2)]
    res = run(pol, specs, 2)
    assert starts(res, "A") == pytest.approx([0.0, 20.0, 50.0, 80.0])
    assert starts(res, "B") == pytest.approx([10.0, 40.0, 70.0, 90.0])
    assert finish(res) == pytest.approx({"A": 90.0, "B": 110.0})


@pytest.mark.parametrize("order", ["arrival", "first-start"])
def test_tiresias_l_queue_order(order: str) -> None:
    # Two GPUs, threshold 5 GPU-s, no knob. Q (1 GPU, 5 steps) and P (2 GPUs) arrive at 0: Q
    # runs, P does not fit. D (1 GPU) arrives at 1 and backfills: D started before P, arrived after.
    # By arrival:
    #   5: Q ends; top queue P (arrived 0) before D: P takes both GPUs (demoted at 7.5 = 5 GPU-s)
    #   7.5: D (top queue, 4 GPU-s) runs on one GPU, P cannot fit; D is demoted at 8.5
    #   8.5: both in queue 1, P first: P takes both GPUs again, D stops.
    # By first start (D at 1, P never):
    #   5: D keeps its GPU, P cannot fit; D is demoted at 6 → P takes both (demoted at 8.5)
    #   8.5: both in queue 1, D (started at 1) before P (at 6): D runs to its end at 103.5, P waits.
    pol = TiresiasL(TiresiasL.Params(thresholds=(5.0,), knob=None, queue_order=order))
    specs = [JobSpec("Q", 0.0, 1, 5.0, "lin", max_gpus=1), JobSpec("P", 0.0, 2, 100.0, "lin", max_gpus=2),
             JobSpec("D", 1.0, 1, 100.0, "lin", max_gpus=1)]
    res = run(pol, specs, 2)
    if order == "arrival":
        assert starts(res, "D")[:2] == pytest.approx([1.0, 7.5])
        assert starts(res, "P")[:2] == pytest.approx([5.0, 8.5])
    else:
        assert starts(res, "D")[:2] == pytest.approx([1.0, 8.5])
        assert starts(res, "P")[:2] == pytest.approx([6.0, 103.5])


def test_afs_p_wakes_at_the_first_slice_end() -> None:
    # Two GPUs, slices of 100 s. j0 and j1 arrive at 0: light load (Σ min = 2 ≥ 2 GPUs is heavy, so
    # both start slices ending at 100). j0 ends at 30 (30 steps); j2, arriving at 40, starts a
    # slice at 40 ending at 140. j3 arrives at 50 and waits. At 100 j1's slice ends — the FIRST
    # end — and j3 (no slice yet) takes its GPU; waking at the last end (140) would start it late.
    pol = AfsP(AfsP.Params(slice_s=100.0))
    specs = [JobSpec("j0", 0.0, 1, 30.0, "lin", max_gpus=1), JobSpec("j1", 0.0, 1, 1000.0, "lin", max_gpus=1),
             JobSpec("j2", 40.0, 1, 1000.0, "lin", max_gpus=1), JobSpec("j3", 50.0, 1, 1000.0, "lin", max_gpus=1)]
    res = run(pol, specs, 2)
    assert starts(res, "j2")[0] == pytest.approx(40.0)
    assert starts(res, "j3")[0] == pytest.approx(100.0)
    assert starts(res, "j1")[:2] == pytest.approx([0.0, 140.0])  # back at j2's slice end


@pytest.mark.parametrize("reshuffle", [False, True])
def test_afs_p_coin_flips_kept_for_life_or_redrawn(reshuffle: bool) -> None:
    # Two identical linear jobs on 3 GPUs: after one GPU each, neither dominates (loss 1/2 < gain 1),
    # so the third GPU goes by coin flip. Without reshuffle a job keeps its priority: 30 decisions
    # give the same answer; with reshuffle each decision flips afresh and both answers occur.
    pol = AfsP(AfsP.Params(coin="per-decision" if reshuffle else "per-job"))
    sched = Scheduler(Cluster.for_gpus(3, 8), pol, LIN, seed=3)
    for jid in ("A", "B"):
        sched.submit(JobSpec(jid, 0.0, 1, 1e6, "lin", max_gpus=3), 0.0)
    seen = {tuple(np.asarray(pol.allocate(sched.context(float(t)))).tolist()) for t in range(30)}
    assert seen <= {(2, 1), (1, 2)}
    assert len(seen) == (2 if reshuffle else 1)


def test_srsf_ties_go_by_arrival_then_submission_order() -> None:
    # One GPU, three jobs with the same service left. "late" is submitted first but arrived at 5,
    # "early" at 0: arrival decides. Then a, b, c arrive together; a leaves, so c's row moves before
    # b's: submission order (b) decides, not the row.
    sched = Scheduler(Cluster.for_gpus(1, 8), make_policy("srsf"), LIN)
    sched.submit(JobSpec("late", 5.0, 1, 10.0, "lin", max_gpus=1), 5.0)
    sched.submit(JobSpec("early", 0.0, 1, 10.0, "lin", max_gpus=1), 5.0)
    assert dict(zip(sched.table.ids, sched.policy.allocate(sched.context(5.0)).tolist())) == {"late": 0, "early": 1}
    sched = Scheduler(Cluster.for_gpus(1, 8), make_policy("srsf"), LIN)
    for jid in ("a", "b", "c"):
        sched.submit(JobSpec(jid, 0.0, 1, 10.0, "lin", max_gpus=1), 0.0)
    sched.complete("a", 0.0)
    assert sched.table.ids == ["c", "b"]
    assert dict(zip(sched.table.ids, sched.policy.allocate(sched.context(0.0)).tolist())) == {"c": 0, "b": 1}


@pytest.mark.parametrize("policy", ["afs-l", "afs-l:preset=coddl"])
def test_afs_l_ties_in_t_min_go_by_submission_order(policy: str) -> None:
    # One GPU, a, b, c submitted together with equal work: equal T(min), so one of them runs and the
    # tie goes by submission order (ALGORITHMS.md §4: jobs arriving together keep trace order).
    # a leaves, so c's row moves before b's: b, submitted first, must still win, not the first row.
    sched = Scheduler(Cluster.for_gpus(1, 8), make_policy(policy), LIN)
    for jid in ("a", "b", "c"):
        sched.submit(JobSpec(jid, 0.0, 1, 10.0, "lin", max_gpus=1), 0.0)
    sched.complete("a", 0.0)
    assert sched.table.ids == ["c", "b"]
    assert dict(zip(sched.table.ids, sched.policy.allocate(sched.context(0.0)).tolist())) == {"c": 0, "b": 1}
