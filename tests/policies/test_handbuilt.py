"""Small cases whose allocations are worked out by hand in the comments."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.policies.book import JobBook
from coddl.policies.gittins import ServiceDistribution, bootstrap_samples
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})


def starts(res, job: str) -> list[float]:
    """Times at which ``job`` went from 0 GPUs to some."""
    out, held = [], 0
    for t, jid, gpus in res.timeline:
        if jid == job:
            if gpus and not held:
                out.append(t)
            held = gpus
    return out


def run(policy: str, specs: list[JobSpec], gpus: int, curves: CurveTable = LIN, seed: int = 0):
    return simulate(specs, Scheduler(Cluster.for_gpus(gpus, 8), make_policy(policy), curves, seed=seed), check=True)


def decide(policy: str, specs: list[JobSpec], gpus: int, curves: CurveTable, seed: int = 0) -> list[int]:
    sched = Scheduler(Cluster.for_gpus(gpus, 8), make_policy(policy), curves, seed=seed)
    for sp in specs:
        sched.submit(sp, 0.0)
    return sched.policy.allocate(sched.context(0.0)).tolist()


# ------------------------------------------------------------------ Tiresias-L
def test_tiresias_demotes_exactly_at_the_threshold() -> None:
    # One GPU. A (10,000 s) runs from 0; B (500 s) arrives at 100 into the same top queue, behind
    # A. A's service reaches 3,600 GPU-s at t = 3,600: demoted, B runs 3,600–4,100, A finishes
    # its remaining 6,400 s at 10,500.
    specs = [JobSpec("A", 0.0, 1, 10_000.0, "lin"), JobSpec("B", 100.0, 1, 500.0, "lin")]
    res = run("tiresias-l:thresholds=3600+knob=off", specs, 1)
    fin = {r.spec.job_id: r.finish for r in res.records}
    assert starts(res, "B") == [pytest.approx(3600.0, abs=1e-6)]
    assert fin["B"] == pytest.approx(4100.0) and fin["A"] == pytest.approx(10_500.0)


def test_tiresias_demotion_counts_gpu_seconds() -> None:
    # A asks for 2 GPUs: 3,600 GPU-s after 1,800 s. B (1 GPU) waits behind A in the top queue
    # (the cluster has 2 GPUs) and starts at 1,800.
    specs = [JobSpec("A", 0.0, 2, 20_000.0, "lin"), JobSpec("B", 10.0, 1, 100.0, "lin")]
    res = run("tiresias-l:thresholds=3600+knob=off", specs, 2)
    assert starts(res, "B") == [pytest.approx(1800.0, abs=1e-6)]


def test_tiresias_starvation_knob_promotes_a_waiting_job() -> None:
    # One GPU, threshold 100 GPU-s, knob 2. A arrives at 0, B at 50 (both long).
    #   0: A runs (top queue, first).           100: A demoted, B runs.
    # 200: B demoted; both low, FIFO: A runs.   B has run 100 s: promoted after waiting 200 s,
    # 400: B back on top, runs.                 500: B demoted again (100 s since promotion);
    #      A (run 300 s, waiting since 400, promoted only at 1,000) runs; 700: B promoted again.
    specs = [JobSpec("A", 0.0, 1, 5000.0, "lin"), JobSpec("B", 50.0, 1, 5000.0, "lin")]
    res = run("tiresias-l:thresholds=100+knob=2", specs, 1)
    assert [t for t in starts(res, "A") if t <= 700] == pytest.approx([0.0, 200.0, 500.0])
    assert [t for t in starts(res, "B") if t <= 700] == pytest.approx([100.0, 400.0, 700.0])


def test_tiresias_without_knob_never_promotes() -> None:
    specs = [JobSpec("A", 0.0, 1, 5000.0, "lin"), JobSpec("B", 50.0, 1, 5000.0, "lin")]
    res = run("tiresias-l:thresholds=100+knob=off", specs, 1)
    # after both are demoted (A at 100, B at 200) the low queue is FIFO: A to its end, then B
    assert starts(res, "B") == pytest.approx([100.0, 5100.0])


def test_tiresias_coddl_preset_counts_service_since_last_start() -> None:
    # coddl preset: demoted once the service since it was last scheduled reaches 50 GPU-hours.
    # A (2 GPUs) hits 180,000 GPU-s after 90,000 s; B (2 GPUs) waits in the top queue until then.
    specs = [JobSpec("A", 0.0, 2, 400_000.0, "lin"), JobSpec("B", 1.0, 2, 1000.0, "lin")]
    res = run("tiresias-l:preset=coddl", specs, 2)
    assert starts(res, "B") == [pytest.approx(90_000.0, abs=1e-6)]


# ------------------------------------------------------------------ Tiresias-G
def test_gittins_index_on_a_known_distribution() -> None:
    # Nine jobs of 100 GPU-s and one of 10,000; Δ = 100.
    #   G(0)   = P(S ≤ 100) / E[min(S, 100)] = 0.9 / 100
    #   G(50)  = P(S − 50 ≤ 100 | S > 50) / E[min(S − 50, 100) | S > 50] = 0.9 / (0.9·50 + 0.1·100)
    #   G(100) = 0: only the 10,000 GPU-s job is left, and it will not end within Δ
    dist = ServiceDistribution(np.array([100.0] * 9 + [10_000.0]), delta=100.0)
    g = dist.index(np.array([0.0, 50.0, 100.0, 20_000.0]))
    assert g == pytest.approx([0.9 / 100, 0.9 / 55, 0.0, 0.0])


def test_gittins_runs_the_job_most_likely_to_finish_next() -> None:
    # Same distribution (learned from ten finished jobs, no bootstrap). On one GPU, a job that has
    # received 50 GPU-s (index 0.9/55) runs before a new one (0.9/100) and one at 100 (index 0).
    curves = LIN
    sched = Scheduler(Cluster.for_gpus(1, 1), make_policy("tiresias-g:bootstrap=none+relearn_every=1"), curves)
    for i, s in enumerate([100.0] * 9 + [10_000.0]):
        sched.submit(JobSpec(f"old{i}", 0.0, 1, 1.0, "lin"), 0.0)
        sched.table.service0[sched.table.row[f"old{i}"]] = s  # as if it had received s GPU-s
        sched.complete(f"old{i}", 0.0)
    for jid, s in [("new", 0.0), ("half", 50.0), ("done", 100.0)]:
        sched.submit(JobSpec(jid, 0.0, 1, 1000.0, "lin"), 0.0)
        sched.table.service0[sched.table.row[jid]] = s
    shares = sched.policy.allocate(sched.context(0.0))
    assert dict(zip(sched.table.ids, shares.tolist())) == {"new": 0, "half": 1, "done": 0}
    assert sched.policy.wakeup(sched.context(0.0)) == pytest.approx(3250.0)  # re-plan while jobs wait


def naive_gittins(samples: list[float], delta: float, a: float) -> float:
    """§4's G(a) = P(S − a ≤ Δ | S > a) / E[min(S − a, Δ) | S > a], sample by sample; 0 where no
    sample exceeds a."""
    alive = [x for x in samples if x > a]
    if not alive:
        return 0.0
    p_end = sum(1 for x in alive if x - a <= delta) / len(alive)
    expected = sum(min(x - a, delta) for x in alive) / len(alive)
    return p_end / expected


def test_gittins_index_matches_a_plain_transcription() -> None:
    # Random sample sets with repeated values; attained service at 0, at samples, a quantum before
    # and after them, between them and past the largest — where the index is 0, without warnings.
    rng = np.random.default_rng(11)
    for _ in range(200):
        samples = rng.choice([10.0, 50.0, 100.0, 250.0, 400.0, 1000.0], int(rng.integers(1, 12))).tolist()
        if rng.random() < 0.5:
            samples += rng.uniform(1, 2000, int(rng.integers(1, 6))).tolist()
        delta = float(rng.choice([25.0, 100.0, 300.0, 5000.0]))
        at = sorted({0.0, *samples, *(x - delta for x in samples if x > delta), *(x + delta for x in samples),
                     *rng.uniform(0, 2500, 5).tolist(), max(samples) + 1.0})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = ServiceDistribution(np.array(samples), delta).index(np.array(at))
        assert got.tolist() == pytest.approx([naive_gittins(samples, delta, a) for a in at], rel=1e-9, abs=0.0)


def gittins_scheduler(spec: str, gpus: int = 1) -> Scheduler:
    return Scheduler(Cluster.for_gpus(gpus, gpus), make_policy(spec), LIN)


_OLD = itertools.count()


def finished(sched: Scheduler, *service: float) -> None:
    """Jobs that finished after receiving ``service`` GPU-seconds each (the distribution learns them)."""
    for s in service:
        jid = f"old{next(_OLD)}"
        sched.submit(JobSpec(jid, 0.0, 1, 1.0, "lin"), 0.0)
        sched.table.service0[sched.table.row[jid]] = s
        sched.complete(jid, 0.0)


def runs(sched: Scheduler, now: float = 0.0) -> list[str]:
    shares = sched.policy.allocate(sched.context(now))
    return [jid for jid, g in zip(sched.table.ids, shares.tolist()) if g]


def with_candidates(sched: Scheduler) -> Scheduler:
    """One GPU; a (submitted first, 0 GPU-s so far) and b (50 GPU-s) both wait for it."""
    for jid, s in [("a", 0.0), ("b", 50.0)]:
        sched.submit(JobSpec(jid, 0.0, 1, 1000.0, "lin"), 0.0)
        sched.table.service0[sched.table.row[jid]] = s
    return sched


# Δ = 100. Learned from {60}: G(0) = 1/60 < G(50) = 1/10: b. From {60, 1000}: G(0) = 1/160 <
# G(50) = 1/110: b. From {60, 1000, 20}: G(0) = 2/180 > G(50) = 1/110: a. With no samples every
# index is 0 and the order is FIFO: a.
def test_gittins_without_samples_is_fifo_and_learns_the_first_finished_job_at_once() -> None:
    sched = with_candidates(gittins_scheduler("tiresias-g:bootstrap=none+delta=100+relearn_every=3"))
    assert runs(sched) == ["a"]
    finished(sched, 60.0)
    assert runs(sched) == ["b"]  # the first sample is used at once, not after relearn_every
    finished(sched, 1000.0, 20.0)
    assert runs(sched) == ["b"]  # 2 new finished jobs < 3: not re-sorted yet
    finished(sched, 20.0)
    assert runs(sched) == ["a"]  # the 3rd: {60, 1000, 20, 20}: G(0) = 3/200 > G(50) = 1/110


def test_gittins_relearns_after_every_finished_job_when_asked() -> None:
    sched = with_candidates(gittins_scheduler("tiresias-g:bootstrap=none+delta=100+relearn_every=1"))
    finished(sched, 60.0, 1000.0)
    assert runs(sched) == ["b"]
    finished(sched, 20.0)
    assert runs(sched) == ["a"]


@pytest.mark.parametrize("learn", [True, False])
def test_gittins_learns_only_when_asked(learn: bool) -> None:
    sched = with_candidates(gittins_scheduler(f"tiresias-g:bootstrap=none+delta=100+learn={str(learn).lower()}"))
    finished(sched, 60.0)
    assert runs(sched) == (["b"] if learn else ["a"])  # not learning: no samples, FIFO


def test_gittins_uses_the_bootstrap_from_the_first_decision() -> None:
    # Nothing has finished yet; by the bundled YARN samples (Δ = 3,250) a new job is likelier to end
    # within the next quantum than one that has already received 5,000 GPU-s, which runs under FIFO.
    samples = bootstrap_samples("yarn-gput1000.csv").tolist()
    assert naive_gittins(samples, 3250.0, 0.0) > naive_gittins(samples, 3250.0, 5000.0)
    sched = gittins_scheduler("tiresias-g")
    for jid, s in [("old", 5000.0), ("new", 0.0)]:
        sched.submit(JobSpec(jid, 0.0, 1, 1000.0, "lin"), 0.0)
        sched.table.service0[sched.table.row[jid]] = s
    assert runs(sched) == ["new"]


def test_gittins_wakes_only_while_jobs_wait_and_only_in_the_future() -> None:
    sched = gittins_scheduler("tiresias-g", gpus=2)
    assert sched.policy.wakeup(sched.context(0.0)) is None  # nothing decided yet
    sched.submit(JobSpec("a", 0.0, 1, 1000.0, "lin"), 0.0)
    runs(sched)
    assert sched.policy.wakeup(sched.context(0.0)) is None  # every job runs: nothing to re-plan for
    sched.submit(JobSpec("b", 0.0, 2, 1000.0, "lin"), 0.0)
    runs(sched)
    assert sched.policy.wakeup(sched.context(0.0)) == pytest.approx(3250.0)
    assert sched.policy.wakeup(sched.context(3250.0)) is None  # due now or past: not a future wake-up
    assert sched.policy.wakeup(sched.context(4000.0)) is None


@pytest.mark.parametrize("backfill", [True, False])
def test_gittins_backfills_only_when_asked(backfill: bool) -> None:
    # Three GPUs, no samples (FIFO): p (1 GPU) runs, q (3) does not fit, r (1) may take the last free
    # GPUs only with backfilling.
    sched = gittins_scheduler(f"tiresias-g:bootstrap=none+backfill={str(backfill).lower()}", gpus=3)
    for jid, g in [("p", 1), ("q", 3), ("r", 1)]:
        sched.submit(JobSpec(jid, 0.0, g, 1000.0, "lin"), 0.0)
    assert runs(sched) == (["p", "r"] if backfill else ["p"])


# ------------------------------------------------------------------ Optimus
def test_optimus_first_marginal_gain_choices() -> None:
    # Three GPUs. Every job gets one first (T(0) = ∞), in list order. Then the third GPU:
    #   A: W = 100, linear:        T(1) − T(2) = 100 − 50 = 50
    #   B: W = 120, P = 1, 1.2:    T(1) − T(2) = 120 − 100 = 20
    # so A gets it; a fourth would go to B (A: 50 − 33.3 = 16.7 < 20).
    curves = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}, "flat": {1: 1.0, 2: 1.2, 3: 1.3, 4: 1.35}})
    specs = [JobSpec("A", 0.0, 1, 100.0, "lin"), JobSpec("B", 0.0, 1, 120.0, "flat")]
    assert decide("optimus", specs, 3, curves) == [2, 1]
    assert decide("optimus", specs, 4, curves) == [2, 2]
    assert decide("optimus", specs, 1, curves) == [1, 0]  # one GPU: the first job in list order


def test_optimus_request_start_within_the_elastic_range() -> None:
    # Nine GPUs, linear curves measured to 4 GPUs (so at most 4 help), T(k) − T(k+1) = W / (k(k+1)).
    #   A: W = 100, asks for 6: starts at its maximum, 4 (not 6)
    #   B: W = 20, asks for 1 but needs 2: starts at 2;  its next GPU: 20/6 = 3.3
    #   C: W = 300, asks for 2, range 1–4: starts at 2;  its next GPU: 300/6 = 50
    # 8 GPUs at the start; the 9th goes to C: [4, 2, 3].
    # From zero instead (the coddl preset): 1, 2, 1, then five GPUs by gain: C (150), A (50), C (50:
    # A is first in list order on the tie, so this one), C (25), A (16.7): [3, 2, 4].
    specs = [JobSpec("A", 0.0, 6, 100.0, "lin"), JobSpec("B", 0.0, 1, 20.0, "lin", min_gpus=2, max_gpus=3),
             JobSpec("C", 0.0, 2, 300.0, "lin", min_gpus=1, max_gpus=4)]
    assert decide("optimus:preset=request", specs, 9, LIN) == [4, 2, 3]
    assert decide("optimus", specs, 9, LIN) == [3, 2, 4]


def test_optimus_hands_out_every_gpu_beside_a_job_that_makes_no_progress() -> None:
    # 8 GPUs, three linear jobs with W = 100 on 1 GPU each; A runs at speed 0 (T = ∞ on any count:
    # its next GPU's gain is ∞ − ∞, no value). B and C share the other 5 by gain, B first on ties:
    # 1→2: 50, 50; 2→3: 16.7, 16.7; 3→4: 8.3 → B 4, C 3. A keeps its 1: [1, 4, 3], all 8 handed out.
    sched = Scheduler(Cluster.for_gpus(8, 8), make_policy("optimus"), LIN)
    for jid in "ABC":
        sched.submit(JobSpec(jid, 0.0, 1, 100.0, "lin"), 0.0)
    sched.set_speed("A", 0.0)
    assert sched.policy.allocate(sched.context(0.0)).tolist() == [1, 4, 3]


def test_optimus_decides_without_numpy_warnings_for_a_model_that_needs_two_gpus() -> None:
    # P(1) = 0: T(0) and T(1) are both ∞, and their difference (nan) is no gain; the decision must
    # not print a RuntimeWarning per event. 5 GPUs: A (2–4, W = 40) and B (1–4, linear, W = 10)
    # start at 2 and 1; then A 2→3 (40/2 − 40/3 = 6.7) beats B 1→2 (10 − 5 = 5), and B's 5 beats
    # A 3→4 (40/3 − 10 = 3.3): [3, 2].
    curves = CurveTable.from_points({"two": {1: 0.0, 2: 2.0, 3: 3.0, 4: 4.0}, "lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})
    specs = [JobSpec("A", 0.0, 2, 40.0, "two", min_gpus=2), JobSpec("B", 0.0, 1, 10.0, "lin")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert decide("optimus", specs, 5, curves) == [3, 2]


# ------------------------------------------------------------------ AFS
def test_afs_l_linear_curves_by_hand() -> None:
    # Linear curves, A shorter than B, 4 GPUs. Both get one GPU; the 3rd goes to A since
    # gain_A = (2 − 1)/1 = 1 > loss_B = (2 − 1)/2 = 0.5; the 4th to B since gain_A = (3 − 2)/2 = 0.5
    # is not > loss_B = 0.5.
    specs = [JobSpec("A", 0.0, 1, 10.0, "lin", max_gpus=4), JobSpec("B", 0.0, 1, 50.0, "lin", max_gpus=4)]
    assert decide("afs-l", specs, 3, LIN) == [2, 1]
    assert decide("afs-l", specs, 4, LIN) == [2, 2]
    # heavy load: one GPU goes to the job with the smaller T(1)
    assert decide("afs-l", specs, 1, LIN) == [1, 0]


def test_afs_p_dominance_overrides_the_coin() -> None:
    # Light load: both get one GPU, the 3rd is contested. A is linear: gain 1, loss 0.5; B is flat
    # past one GPU: gain 0, loss 0. loss_A ≥ gain_B, so A dominates B and wins whatever the coin.
    curves = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0}, "flat": {1: 1.0, 2: 1.0, 3: 1.0}})
    specs = [JobSpec("A", 0.0, 1, 10.0, "lin", max_gpus=3), JobSpec("B", 0.0, 1, 10.0, "flat", max_gpus=3)]
    assert {tuple(decide("afs-p", specs, 3, curves, seed)) for seed in range(20)} == {(2, 1)}


def test_afs_p_coin_decides_when_neither_dominates() -> None:
    # Two identical linear jobs: gain 1 > loss 0.5 both ways, so neither dominates: the seeded
    # coin picks; both outcomes occur over seeds and each seed is reproducible.
    specs = [JobSpec("A", 0.0, 1, 10.0, "lin", max_gpus=3), JobSpec("B", 0.0, 1, 10.0, "lin", max_gpus=3)]
    outcomes = {tuple(decide("afs-p", specs, 3, LIN, seed)) for seed in range(20)}
    assert outcomes == {(2, 1), (1, 2)}
    assert decide("afs-p", specs, 3, LIN, 7) == decide("afs-p", specs, 3, LIN, 7)


def test_afs_p_time_slices_under_heavy_load() -> None:
    # Three long one-GPU jobs on two GPUs: heavy load, slices of 100 s, least often scheduled
    # first (then first start, then arrival):
    #   0–100: j0, j1    100–200: j2 (0 slices), j0 (1 slice, started first)
    #   200–300: j1 (1 slice), j2 (1 slice, started at 100)    300–400: j0 (2), j1 (2)? no —
    #   at 300 j0 has 2 slices, j1 2, j2 2: by first start j0, j1.
    specs = [JobSpec(f"j{i}", 0.0, 1, 10_000.0, "lin") for i in range(3)]
    res = run("afs-p:slice_s=100", specs, 2)
    running = {}
    for t, jid, gpus in res.timeline:
        running.setdefault(t, {}).update({jid: gpus})
    held = {}
    at = {}
    for t in sorted(running):
        held.update(running[t])
        at[t] = sorted(j for j, g in held.items() if g)
    assert at[0.0] == ["j0", "j1"]
    assert at[100.0] == ["j0", "j2"]
    assert at[200.0] == ["j1", "j2"]
    assert at[300.0] == ["j0", "j1"]
    for t in at:
        assert all(g == 1 for g in held.values() if g)  # single-GPU slices


def test_afs_p_keeps_a_slice_until_it_expires() -> None:
    # Heavy load (2 jobs, 1 GPU). j2 arrives at 30 while j0 holds a slice: j0 keeps it to 100.
    # At 100 j1 and j2 have no slices and never ran: j1 by arrival; j2 at 200.
    specs = [JobSpec("j0", 0.0, 1, 1000.0, "lin"), JobSpec("j1", 0.0, 1, 1000.0, "lin"),
             JobSpec("j2", 30.0, 1, 1000.0, "lin")]
    res = run("afs-p:slice_s=100", specs, 1)
    assert starts(res, "j0")[:2] == pytest.approx([0.0, 300.0])
    assert starts(res, "j1")[0] == pytest.approx(100.0)
    assert starts(res, "j2")[0] == pytest.approx(200.0)


# ------------------------------------------------------------------ Themis
def test_themis_gives_the_gpu_to_the_worst_finish_time_ratio() -> None:
    # Three jobs, now = arrival (nothing spent yet), so ρ_j(k) = T_j(k) / T_ideal = P(fair) / P(k)
    # with the fair share ⌊G/N⌋ GPUs. On 4 GPUs fair = 1: every job has ρ = 1 at one GPU — the
    # extra GPU goes by arrival to A. On 6 GPUs fair = 2:
    #   A linear: ρ(1) = 2, ρ(2) = 1;   B, C (P = 1, 1.5, 1.6): ρ(1) = 1.5, ρ(2) = 1
    # One GPU each first (ρ(0) = ∞), then A (2 > 1.5), then B (tie with C: arrival), then C.
    curves = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0}, "slow": {1: 1.0, 2: 1.5, 3: 1.6}})
    specs = [JobSpec("A", 0.0, 1, 100.0, "lin", max_gpus=3), JobSpec("B", 0.0, 1, 100.0, "slow", max_gpus=3),
             JobSpec("C", 0.0, 1, 300.0, "slow", max_gpus=3)]
    assert decide("themis", specs, 4, curves) == [2, 1, 1]
    assert decide("themis", specs, 6, curves) == [2, 2, 2]


def test_themis_counts_time_already_spent() -> None:
    # Job A has waited 100 s (arrived at −100 relative to now) — ρ_A(1) = (100 + 100)/100 = 2 > ρ_B(1) = 1.
    curves = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0}})
    sched = Scheduler(Cluster.for_gpus(3, 8), make_policy("themis"), curves)
    sched.submit(JobSpec("B", 100.0, 1, 100.0, "lin", max_gpus=3), 100.0)
    sched.submit(JobSpec("A", 0.0, 1, 100.0, "lin", max_gpus=3), 100.0)
    shares = dict(zip(sched.table.ids, sched.policy.allocate(sched.context(100.0)).tolist()))
    assert shares == {"A": 2, "B": 1}
    # B (300 s of work) arrived at 0, A (100 s) at 50; now = 100, fair share 1 GPU (3 GPUs, 2 jobs).
    # With the time spent: ρ_A(1) = (50 + 100) / 100 = 1.5 > ρ_B(1) = (100 + 300) / 300 = 1.33: A grows.
    # elapsed=false: both ρ(1) = 1, a tie, which goes by arrival: B grows.
    for spec, expected in (("themis", {"A": 2, "B": 1}), ("themis:elapsed=false", {"A": 1, "B": 2})):
        sched = Scheduler(Cluster.for_gpus(3, 8), make_policy(spec), curves)
        sched.submit(JobSpec("B", 0.0, 1, 300.0, "lin", max_gpus=3), 100.0)
        sched.submit(JobSpec("A", 50.0, 1, 100.0, "lin", max_gpus=3), 100.0)
        shares = dict(zip(sched.table.ids, sched.policy.allocate(sched.context(100.0)).tolist()))
        assert shares == expected, spec


# ------------------------------------------------------------------ SRSF
def test_srsf_orders_by_gpus_times_remaining_time() -> None:
    # Four GPUs. Service left (GPUs × remaining time on them):
    #   A: 4 GPUs × 10/4 s = 10;  B: 1 × 8 = 8;  C: 2 × 12/2 = 12;  D: 1 × 20 = 20
    # Order B, A, C, D: B (1) and A (4) do not both fit — B runs, A is skipped, C (2) runs, D (1) runs.
    specs = [JobSpec("A", 0.0, 4, 10.0, "lin"), JobSpec("B", 0.0, 1, 8.0, "lin"),
             JobSpec("C", 0.0, 2, 12.0, "lin"), JobSpec("D", 0.0, 1, 20.0, "lin")]
    assert decide("srsf", specs, 4, LIN) == [0, 1, 2, 1]
    assert decide("srsf:backfill=off", specs, 4, LIN) == [0, 1, 0, 0]


def held_at(res, t: float) -> dict[str, int]:
    """GPUs each job holds just after the decisions made at time ``t``."""
    held: dict[str, int] = {}
    for at, jid, gpus in res.timeline:
        if at <= t:
            held[jid] = gpus
    return {j: g for j, g in held.items() if g}


def test_afs_p_authors_slices_last_for_the_whole_share() -> None:
    """``preset=coddl`` (slices="always") on 2 GPUs, slices of 100 s. A alone takes both GPUs at 0
    (its slice ends at 100); B and C arrive at 50 (heavy load) and A KEEPS both GPUs until 100 (the
    default mode would cut it to its minimum at 50). At 100 A's slice is counted (1): B and C (0)
    run. At 200 theirs are counted: all have 1, first start decides — A (0), then B (100). At 300:
    A 2, B 2, C 1 → C, then A."""
    specs = [JobSpec("A", 0.0, 1, 10_000.0, "lin", max_gpus=2), JobSpec("B", 50.0, 1, 10_000.0, "lin"),
             JobSpec("C", 50.0, 1, 10_000.0, "lin")]
    res = run("afs-p:preset=coddl+slice_s=100", specs, 2)
    assert [held_at(res, t) for t in (0.0, 50.0, 99.0, 100.0, 200.0, 300.0)] == [
        {"A": 2}, {"A": 2}, {"A": 2}, {"B": 1, "C": 1}, {"A": 1, "B": 1}, {"C": 1, "A": 1}]
    assert held_at(run("afs-p:slice_s=100", specs, 2), 50.0) == {"A": 1, "B": 1}


def test_afs_p_coin_per_contest_flips_anew_while_per_job_holds_for_life() -> None:
    """Two jobs neither of which dominates, one spare GPU: decided again and again on the same
    state, the authors' per-contest coin gives it to either job, the per-job coin always to the same."""
    specs = [JobSpec("A", 0.0, 1, 10.0, "lin", max_gpus=3), JobSpec("B", 0.0, 1, 10.0, "lin", max_gpus=3)]
    for coin, outcomes in (("per-contest", 2), ("per-job", 1)):
        sched = Scheduler(Cluster.for_gpus(3, 8), make_policy(f"afs-p:coin={coin}"), LIN, seed=3)
        for sp in specs:
            sched.submit(sp, 0.0)
        seen = {tuple(sched.policy.allocate(sched.context(0.0)).tolist()) for _ in range(30)}
        assert seen <= {(2, 1), (1, 2)} and len(seen) == outcomes, (coin, seen)


@pytest.mark.parametrize("spec, message", [
    ("afs-p:coin=fair", "afs-p: coin must be one of per-job, per-decision, per-contest, got 'fair'"),
    ("afs-p:slices=never", "afs-p: slices must be one of heavy, always, got 'never'"),
    ("afs-p:slice_s=0", "afs-p: slice_s must be positive, got 0.0"),
])
def test_afs_p_names_a_bad_parameter(spec: str, message: str) -> None:
    from coddl.policies.registry import PolicySpecError

    with pytest.raises(PolicySpecError) as e:
        make_policy(spec)
    assert str(e.value) == message


@pytest.mark.parametrize("wait, restart", [("accumulated", 240.0), ("current", 250.0)])
def test_tiresias_starvation_counts_earlier_waits_only_when_accumulated(wait: str, restart: float) -> None:
    """One GPU, threshold 100 GPU-s, knob 1. A runs 0–100 and is demoted; B (30 s) arrives at 100
    and runs 100–130 while A waits (30 s); A resumes at 130 and C arrives at 150, preempting it.
    A has now run 120 s since its last promotion. Accumulated (the Tiresias simulator): 30 + (t −
    150) ≥ 120 at t = 240, so A is promoted and preempts C. Current wait only: t − 150 ≥ 120 would
    be 270, but C is demoted first at 250 (100 GPU-s), and A, earlier in the low queue, resumes."""
    specs = [JobSpec("A", 0.0, 1, 10_000.0, "lin"), JobSpec("B", 100.0, 1, 30.0, "lin"),
             JobSpec("C", 150.0, 1, 1_000.0, "lin")]
    res = run(f"tiresias-l:thresholds=100+knob=1+starvation_wait={wait}", specs, 1)
    assert starts(res, "A")[:3] == pytest.approx([0.0, 130.0, restart])
    assert starts(res, "C")[0] == pytest.approx(150.0)


def test_tiresias_promotes_a_job_preempted_while_already_starved_at_once() -> None:
    """One GPU, threshold 100 GPU-s, knob 1, accumulated waits; A (10,000 s), B (30 s) at 100,
    C (1,000 s) at 150. As above until 240: A is promoted and preempts C (90 s run). A is demoted
    at 340 and C resumes: its wait 240–340 (100 s) is counted. At 350 C reaches 100 GPU-s and is
    demoted behind A (earlier arrival) — but it has already waited 100 s ≥ 1 × its 100 s run, so it
    is promoted in the same decision and keeps running (waiting for the next event would park it
    until A ends at 10,130). A, waiting since 340 after 100 s run, is promoted at 440 and preempts C
    (90 s since its promotion); from then on the two alternate every 100 s: C runs [340 + 200i,
    440 + 200i) and needs 910 s after 340, so it ends at 2,150; A then runs its remaining 8,880 s
    (it ran 100 + 20 + 100 + 9 × 100) and ends at 11,030."""
    specs = [JobSpec("A", 0.0, 1, 10_000.0, "lin"), JobSpec("B", 100.0, 1, 30.0, "lin"),
             JobSpec("C", 150.0, 1, 1_000.0, "lin")]
    res = run("tiresias-l:thresholds=100+knob=1+starvation_wait=accumulated", specs, 1)
    fin = {r.spec.job_id: r.finish for r in res.records}
    assert starts(res, "C")[:4] == pytest.approx([150.0, 340.0, 540.0, 740.0])
    assert starts(res, "A")[:5] == pytest.approx([0.0, 130.0, 240.0, 440.0, 640.0])
    assert fin["C"] == pytest.approx(2150.0) and fin["A"] == pytest.approx(11_030.0)
    # no job is dropped and given back its GPUs at the same instant
    changes = [(t, jid) for t, jid, _ in res.timeline]
    assert len(changes) == len(set(changes))


# ------------------------------------------------------------------ JobBook (per-job memory of a policy)
def test_job_book_remembers_stored_jobs_and_defaults_the_rest() -> None:
    book = JobBook(queue=0.0, since=-1.0)
    empty = book.lookup(np.array([5, 3]), since=np.array([50.0, 30.0]))  # defaults given here win
    assert empty["queue"].tolist() == [0.0, 0.0] and empty["since"].tolist() == [50.0, 30.0]
    book.store(np.array([7, 3]), queue=np.array([2, 1]), since=np.array([10.0, 20.0]))
    got = book.lookup(np.array([3, 9, 7, 1]), since=np.array([99.0, 98.0, 97.0, 96.0]))
    assert got["queue"].tolist() == [1.0, 0.0, 2.0, 0.0]  # 9 and 1: not in the book
    assert got["since"].tolist() == [20.0, 98.0, 10.0, 96.0]
    assert book.lookup(np.array([9]))["since"].tolist() == [-1.0]  # no default given: the book's own
    book.store(np.array([9]), queue=np.array([4.0]), since=np.array([1.0]))  # 3 and 7 are forgotten
    assert book.lookup(np.array([3, 9]))["queue"].tolist() == [0.0, 4.0]
