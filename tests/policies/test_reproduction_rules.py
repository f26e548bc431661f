"""Hand-computed cases where the CoDDL authors' simulator (ALGORITHMS.md §4, "How the CoDDL
authors' simulator ran these baselines") or the source a policy follows decides differently from
the rule coddl used before; each comment says what the other rule would do."""

from __future__ import annotations

import pytest

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})


def starts(res, job: str) -> list[float]:
    out, held = [], 0
    for t, jid, gpus in res.timeline:
        if jid == job:
            if gpus and not held:
                out.append(t)
            held = gpus
    return out


def run(policy: str, specs: list[JobSpec], gpus: int, curves: CurveTable = LIN, seed: int = 0):
    return simulate(specs, Scheduler(Cluster.for_gpus(gpus, 8), make_policy(policy), curves, seed=seed), check=True)


def decide(policy: str, specs: list[JobSpec], gpus: int, curves: CurveTable, now: float = 0.0) -> list[int]:
    sched = Scheduler(Cluster.for_gpus(gpus, 8), make_policy(policy), curves)
    for sp in specs:
        sched.submit(sp, now)
    return sched.policy.allocate(sched.context(now)).tolist()


def test_fifo_breaks_same_second_ties_by_submission_order() -> None:
    # One GPU. X runs 0–10; D then E are submitted at t = 5. When X leaves the job table at 10,
    # the last row (E) takes X's row, so table order is E, D; FIFO must still start D first
    # (D 10–110, E 110–111). Ordering by table row started E at 10.
    specs = [JobSpec("X", 0.0, 1, 10.0, "lin"), JobSpec("D", 5.0, 1, 100.0, "lin"),
             JobSpec("E", 5.0, 1, 1.0, "lin")]
    res = run("fifo", specs, 1)
    assert starts(res, "D") == [pytest.approx(10.0)]
    assert starts(res, "E") == [pytest.approx(110.0)]


def test_tiresias_coddl_preset_clears_demotion_when_a_job_gets_gpus_again() -> None:
    # One GPU, threshold 100 GPU-s (the coddl preset otherwise); A (300 s of work) at 0, B and C
    # (300 s each) at 50 and 250. Service counts since the job was last scheduled.
    #   0: A runs.  100: A demoted; B runs.  200: B demoted; low queue by first start: A resumes —
    #   and is back in the top queue. 250: C arrives in the top queue behind A (first start 0), so
    #   A keeps running until 300, when it has run 100 s since resuming: demoted, C runs.
    #   400: C demoted; low queue A (0), B (100), C (300): A finishes 400–500, B 500–700, C 700–900.
    # With demotion kept for good, C preempts the demoted A at 250 (C: 250, A resumes at 350).
    specs = [JobSpec("A", 0.0, 1, 300.0, "lin"), JobSpec("B", 50.0, 1, 300.0, "lin"),
             JobSpec("C", 250.0, 1, 300.0, "lin")]
    res = run("tiresias-l:preset=coddl+thresholds=100", specs, 1)
    assert starts(res, "A") == pytest.approx([0.0, 200.0, 400.0])
    assert starts(res, "B") == pytest.approx([100.0, 500.0])
    assert starts(res, "C") == pytest.approx([300.0, 700.0])
    kept = run("tiresias-l:preset=coddl+thresholds=100+keep_demotion=true", specs, 1)
    assert starts(kept, "C") == pytest.approx([250.0, 700.0])
    assert starts(kept, "A") == pytest.approx([0.0, 200.0, 350.0])


def test_tiresias_paper_starvation_counts_every_wait_since_the_last_promotion() -> None:
    # One GPU, threshold 100, knob 1; A (300 s) at 0, B and C (300 s each) at 250.
    #   0–250: A (demoted at 100, alone).  250: B runs (top).  350: B demoted, C runs.
    #   450: C demoted; B has waited 100 ≥ 1 × its 100 s run: promoted, runs.
    #   500: A has waited 250 ≥ 250: promoted; top queue by arrival: A runs, finishes at 550.
    #   550: B (top, 50 s run since its promotion) resumes — its wait 500–550 is counted; C (waited
    #        100 ≥ 100) is promoted too but queues behind B.  600: B demoted, C runs.
    #   B has run 100 s since its promotion and has already waited 50 s: promoted at 650, when
    #   it preempts C (same top queue, earlier submission). Counting only the wait in progress
    #   promotes B at 700, when C is demoted.
    specs = [JobSpec("A", 0.0, 1, 300.0, "lin"), JobSpec("B", 250.0, 1, 300.0, "lin"),
             JobSpec("C", 250.0, 1, 300.0, "lin")]
    res = run("tiresias-l:preset=paper+thresholds=100+knob=1", specs, 1)
    assert starts(res, "A") == pytest.approx([0.0, 500.0])
    assert starts(res, "B") == pytest.approx([250.0, 450.0, 550.0, 650.0])
    current = run("tiresias-l:preset=paper+thresholds=100+knob=1+starvation_wait=current", specs, 1)
    assert starts(current, "B") == pytest.approx([250.0, 450.0, 550.0, 700.0])


AFS_CURVES = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0}, "b": {1: 1.0, 2: 1.8}, "c": {1: 1.0, 2: 1.45}})


def test_afs_l_visiting_order_changes_the_winner() -> None:
    # Four GPUs, three jobs at one GPU each; the 4th is contested. T at one GPU: A 40, B 30, C 10.
    #   gain = P(2)/P(1) − 1: A 1, B 0.8, C 0.45;  loss = 1 − P(1)/P(2): A 0.5, B 0.444, C 0.310.
    # §2 (l = the shorter gets it iff gain_l > loss_h): B beats A (0.8 > 0.5), C beats B
    # (0.45 > 0.444), A beats C (0.45 ≤ 0.5) — a cycle, so the order decides:
    #   shortest first C, B, A: C keeps it against B, loses to A → A.
    #   arrival A, B, C (the CoDDL authors): B takes it from A, C from B → C.
    specs = [JobSpec("A", 0.0, 1, 40.0, "lin", max_gpus=2), JobSpec("B", 0.0, 1, 30.0, "b", max_gpus=2),
             JobSpec("C", 0.0, 1, 10.0, "c", max_gpus=2)]
    assert decide("afs-l", specs, 4, AFS_CURVES) == [2, 1, 1]
    assert decide("afs-l:preset=coddl", specs, 4, AFS_CURVES) == [1, 1, 2]
    # heavy load: both orders run the jobs with the smallest T(1)
    assert decide("afs-l:preset=coddl", specs, 2, AFS_CURVES) == [0, 1, 1]


def test_afs_p_per_contest_coin_is_fair_and_reproducible() -> None:
    # Two identical linear jobs: neither dominates, so every contest is a coin flip.
    specs = [JobSpec("A", 0.0, 1, 10.0, "lin", max_gpus=3), JobSpec("B", 0.0, 1, 10.0, "lin", max_gpus=3)]
    out = [tuple(decide_seeded("afs-p:preset=coddl", specs, 3, seed)) for seed in range(40)]
    assert set(out) == {(2, 1), (1, 2)}
    assert decide_seeded("afs-p:preset=coddl", specs, 3, 7) == decide_seeded("afs-p:preset=coddl", specs, 3, 7)


def decide_seeded(policy: str, specs: list[JobSpec], gpus: int, seed: int) -> list[int]:
    sched = Scheduler(Cluster.for_gpus(gpus, 8), make_policy(policy), LIN, seed=seed)
    for sp in specs:
        sched.submit(sp, 0.0)
    return sched.policy.allocate(sched.context(0.0)).tolist()


def test_afs_p_authors_slices_keep_shares_when_the_load_turns_heavy() -> None:
    # Four GPUs, slices of 100 s. A (max 4) arrives alone at 0 and gets all four GPUs. At 10 four
    # more jobs arrive: five jobs on four GPUs is heavy load.
    #   slices="always" (the authors): A's allocation is a slice to 100, so A keeps its 4 GPUs;
    #   at 100 its slice is counted and B–E (no slices served yet) get one GPU each.
    #   slices="heavy" (coddl's default): A held no slice; by (slices, first start, arrival)
    #   A, B, C, D get one GPU each at 10, E waits for their slices to end at 110.
    specs = [JobSpec("A", 0.0, 1, 10_000.0, "lin", max_gpus=4)] + [
        JobSpec(n, 10.0, 1, 10_000.0, "lin", max_gpus=4) for n in "BCDE"]
    res = run("afs-p:preset=coddl+slice_s=100", specs, 4)
    assert starts(res, "A") == [0.0] + [t for t in starts(res, "A") if t > 100]
    assert [starts(res, n)[0] for n in "BCDE"] == pytest.approx([100.0] * 4)
    default = run("afs-p:slice_s=100", specs, 4)
    assert [starts(default, n)[0] for n in "BCD"] == pytest.approx([10.0] * 3)
    assert starts(default, "E")[0] == pytest.approx(110.0)  # when the slices granted at 10 end


def test_afs_p_authors_slices_re_decide_under_light_load() -> None:
    sched = Scheduler(Cluster.for_gpus(4, 8), make_policy("afs-p:preset=coddl+slice_s=100"), LIN)
    sched.submit(JobSpec("A", 0.0, 1, 1000.0, "lin", max_gpus=4), 0.0)
    sched.step(0.0)
    assert sched.next_wakeup(0.0) == pytest.approx(100.0)  # re-run when the slice ends
    plain = Scheduler(Cluster.for_gpus(4, 8), make_policy("afs-p"), LIN)
    plain.submit(JobSpec("A", 0.0, 1, 1000.0, "lin", max_gpus=4), 0.0)
    plain.step(0.0)
    assert plain.next_wakeup(0.0) is None


def test_themis_fair_share_respects_the_minimum() -> None:
    # 3 GPUs, 3 jobs, now = 100: the fair share is one GPU. A needs at least 2 (P(2) = 1.5,
    # 200 steps), B (100 steps, linear) arrived at 0 like A, C (100) arrives now.
    #   A's fair share is its minimum for half the time: T_ideal = 200 / (1.5 × 0.5) = 266.7,
    #   ρ_A(2) = (100 + 200/1.5) / 266.7 = 0.875;  ρ_B(1) = (100 + 100) / 100 = 2;  ρ_C(1) = 1.
    #   First GPUs by ρ: B, C (one each), A's two no longer fit; the last GPU to the worst
    #   ρ: B → [0, 2, 1]. With one GPU as A's fair share (infeasible) ρ_A = 1.17 > ρ_C: [2, 1, 0].
    curves = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0},
                                     "half": {1: 1.0, 2: 1.5, 3: 2.0, 4: 2.5}})
    specs = [JobSpec("A", 0.0, 2, 200.0, "half", min_gpus=2, max_gpus=4), JobSpec("B", 0.0, 1, 100.0, "lin", max_gpus=4),
             JobSpec("C", 100.0, 1, 100.0, "lin", max_gpus=4)]
    assert decide("themis", specs, 3, curves, now=100.0) == [0, 2, 1]
