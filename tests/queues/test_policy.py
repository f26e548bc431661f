"""The policy over queues, driven through the real Scheduler and placer: hand-computed scenarios, and
the quota properties — a queue under its quota with waiting jobs gets it back within one decision,
borrowing stays within the limits, and no preemption breaks a minimum or splits a gang."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coddl.core import Cluster, JobSpec
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.policies.registry import available
from coddl.queues import Queue, QueueSet
from coddl.queues.policy import QueuedPolicy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate

LIN = CurveTable.from_points({"lin": {k: float(k) for k in range(1, 33)}})


def scheduler(queues: QueueSet, policy: str, gpus: int, per_node: int = 4) -> Scheduler:
    return Scheduler(Cluster.for_gpus(gpus, per_node), QueuedPolicy(queues, lambda: make_policy(policy)), LIN)


def held(s: Scheduler) -> dict[str, int]:
    return {jid: len(g) for jid, g in s.allocation.gpus.items()}


def job(jid: str, user: str, gpus: int, work: float = 1e6, lo: int = 1, hi: int | None = None,
        at: float = 0.0) -> JobSpec:
    return JobSpec(jid, at, gpus, work, "lin", min_gpus=lo, max_gpus=hi, user=user)


LAB = QueueSet((Queue("a", 4, cohort="lab", users=("ann",)), Queue("b", 4, cohort="lab", users=("bob",))))


# ------------------------------------------------------------------------- hand-computed
def test_a_team_gets_its_quota_back_in_the_next_decision() -> None:
    # 8 GPUs, a and b own 4 each. ann's elastic job (1..8) runs alone on all 8; bob's job (1..4)
    # arrives: ann's job shrinks to 4 (never stopped), bob's gets 4, in one decision.
    s = scheduler(LAB, "afs-p", 8)
    s.submit(job("A", "ann", 1, hi=8), 0.0)
    s.step(0.0)
    assert held(s) == {"A": 8}
    s.submit(job("B", "bob", 1, hi=4), 10.0)
    plan = s.step(10.0).plan
    assert held(s) == {"A": 4, "B": 4}
    assert {a.job_id: a.kind.value for a in plan.actions} == {"A": "shrink", "B": "start"}


def test_jcts_with_borrowing_and_reclaim() -> None:
    # P(k) = k. A: 16,000 steps, 1..8 GPUs, from t=0: 8 GPUs until B arrives at 1,000 (8,000
    # done), then 4 GPUs while B runs; B: 4,000 steps on 4 GPUs, 1,000-2,000. A has 4,000 left
    # at 2,000 and gets all 8 back: done at 2,500.
    specs = [job("A", "ann", 1, 16_000.0, hi=8), job("B", "bob", 1, 4_000.0, hi=4, at=1000.0)]
    res = simulate(specs, scheduler(LAB, "afs-p", 8), check=True)
    fin = {r.spec.job_id: r.finish for r in res.records}
    assert fin == {"A": pytest.approx(2500.0), "B": pytest.approx(2000.0)}


def test_a_rigid_gang_is_preempted_whole_and_the_newest_goes_first() -> None:
    # FIFO (rigid). ann's two 4-GPU jobs run on 8 GPUs (borrowing 4 of b's). bob asks for 2: a's
    # entitlement is 6 (its 4, and 2 of b's that b does not want); FIFO keeps A1 (4) and A2 (4)
    # no longer fits: A2 is suspended whole, never cut to 2.
    s = scheduler(LAB, "fifo", 8)
    s.submit(job("A1", "ann", 4, lo=4), 0.0)
    s.submit(job("A2", "ann", 4, lo=4, at=1.0), 1.0)
    s.step(1.0)
    assert held(s) == {"A1": 4, "A2": 4}
    s.submit(job("B", "bob", 2, lo=2, at=5.0), 5.0)
    s.step(5.0)
    assert held(s) == {"A1": 4, "B": 2}


def test_the_implicit_default_queue_holds_the_rest_and_has_no_cohort() -> None:
    # 12 GPUs, a and b own 8: the 4 others belong to 'default' (users nobody listed), which neither
    # borrows nor lends. zed (unlisted) wants 8: gets 4; ann wants 12: gets a's and b's 8.
    s = scheduler(LAB, "afs-p", 12)
    s.submit(job("Z", "zed", 1, hi=8), 0.0)
    s.submit(job("A", "ann", 1, hi=12), 0.0)
    s.step(0.0)
    assert held(s) == {"Z": 4, "A": 8}


def test_shrink_to_minimum_before_any_preemption() -> None:
    # a (4) and b (4) and c (8) in one cohort, 16 GPUs. c idle: ann's three 1..8 jobs and bob's
    # one share the 8 idle GPUs. Then carol wants 6 of c's 8: the pool is 2, and a (floor 3, 1
    # borrowed... its 3 jobs at minimum) and b are cut to their floors: nobody is stopped.
    qs = QueueSet((Queue("a", 4, cohort="lab", users=("ann",)), Queue("b", 4, cohort="lab", users=("bob",)),
                   Queue("c", 8, cohort="lab", users=("carol",))))
    s = scheduler(qs, "afs-p", 16)
    for i in range(3):
        s.submit(job(f"A{i}", "ann", 1, hi=8), 0.0)
    s.submit(job("B", "bob", 1, hi=8), 0.0)
    s.step(0.0)
    assert sum(held(s).values()) == 16
    s.submit(job("C", "carol", 6, lo=6, hi=6, at=1.0), 1.0)
    s.step(1.0)
    h = held(s)
    assert h["C"] == 6 and all(h[f"A{i}"] >= 1 for i in range(3)) and h["B"] >= 1
    assert sum(h[f"A{i}"] for i in range(3)) + h["B"] == 10
    # carol wants all 8 now (and a 1-GPU job more): the pool is empty, a and b are back at their
    # quotas, a's three jobs run at 1-2 GPUs, nothing of a or b is stopped
    s.submit(job("C2", "carol", 2, lo=2, hi=2, at=2.0), 2.0)
    s.step(2.0)
    h = held(s)
    assert h["C"] + h["C2"] == 8 and sum(h[f"A{i}"] for i in range(3)) == 4 and h["B"] == 4


def test_a_stop_that_frees_more_than_the_cut_leaves_nothing_idle() -> None:
    # 4 GPUs: a owns 1, b owns 2 (cohort lab), the implicit default 1 (no cohort). max-min. ann runs
    # A1 (1..2 GPUs) and the gangs A2, A3 (2 each). t=0: a is owed its 1 and b's idle 2: 3 GPUs,
    # A1 at 1 and A2 at 2 (A3 does not fit). t=1: bob wants 1 of b's quota back: b gets 1, a 2 (its
    # 1 and b's last idle 1; a's floor is 3). A1 is at its minimum already, A1 and A2 need 3: one
    # stops, A2 (started with A1, submitted after it), and A1 grows into the GPU A2 leaves over —
    # A2 could not run on it. The property used to demand A1 at 1 beside an idle GPU.
    qs = QueueSet((Queue("a", 1, cohort="lab", users=("ann",)), Queue("b", 2, cohort="lab", users=("bob",))))
    s = scheduler(qs, "max-min", 4)
    s.submit(job("A1", "ann", 1, lo=1, hi=2), 0.0)
    s.submit(job("A2", "ann", 2, lo=2, hi=2), 0.0)
    s.submit(job("A3", "ann", 2, lo=2, hi=2), 0.0)
    s.step(0.0)
    before = held(s)
    assert before == {"A1": 1, "A2": 2}
    s.submit(job("B", "bob", 1, lo=1, hi=1, at=1.0), 1.0)
    s.step(1.0)
    assert held(s) == {"A1": 2, "B": 1}
    check_decision(s, qs, before, elastic=True)


def test_shrink_before_preempt_property_still_catches_a_stop_that_shrinking_would_have_avoided() -> None:
    # X (minimum 1) and Y (minimum 2) in queue 0, Z (minimum 1) in queue 1; arguments: before, after, borrowing
    jobs = {"X": (0, 1), "Y": (0, 2), "Z": (1, 1)}
    assert shrink_before_preempt(jobs, {"X": 1, "Y": 2}, {"X": 2}, [0]) is None  # Y needs 2, 1 is left over
    assert shrink_before_preempt(jobs, {"X": 3, "Y": 2}, {"X": 3}, [0]) is not None  # X at 1 would keep Y
    assert shrink_before_preempt(jobs, {"X": 1, "Y": 2}, {"X": 2, "Y": 0}, [0, 1]) is None
    # queue 0 stopped nothing, yet Z (queue 1) was stopped while X is above its minimum
    assert shrink_before_preempt(jobs, {"X": 2, "Y": 2, "Z": 1}, {"X": 2, "Y": 2}, [0]) is not None
    assert shrink_before_preempt(jobs, {"X": 2, "Y": 2}, {"X": 2, "Y": 2}, [0]) is None  # nobody stopped


# ------------------------------------------------------------------------- properties
@st.composite
def setups(draw):  # noqa: ANN001, ANN201 - a hypothesis strategy
    per_node = 4
    nodes = draw(st.integers(1, 6))
    gpus = nodes * per_node
    nq = draw(st.integers(2, 4))
    cuts = sorted(draw(st.lists(st.integers(0, gpus), min_size=nq - 1, max_size=nq - 1)))
    nominal = np.diff([0, *cuts, draw(st.integers(cuts[-1], gpus))])
    queues = []
    for i in range(nq):
        queues.append(Queue(
            f"q{i}", int(nominal[i]), cohort=draw(st.sampled_from([None, "c", "c", "c"])),
            borrowing_limit_gpus=draw(st.one_of(st.none(), st.integers(0, gpus))),
            lending_limit_gpus=draw(st.one_of(st.none(), st.integers(0, gpus))),
            weight=draw(st.sampled_from([0.0, 1.0, 1.0, 2.0])), users=(f"u{i}",)))
    qs = QueueSet(tuple(queues))
    users = [f"u{i}" for i in range(nq)] + ["nobody"]
    jobs = []
    for k in range(draw(st.integers(1, 12))):
        lo = draw(st.integers(1, 3))
        req = draw(st.integers(lo, 4))
        jobs.append((draw(st.sampled_from(users)), lo, req, draw(st.integers(req, 8))))
    claimant = draw(st.integers(0, nq - 1))
    return qs, gpus, jobs, claimant


def usage(s: Scheduler, qs: QueueSet) -> np.ndarray:
    out = np.zeros(len(qs.names), dtype=np.int64)
    for sp in s.table.specs:
        out[qs.queue_of(sp.user)] += len(s.allocation.gpus.get(sp.job_id, ()))
    return out


def check_decision(s: Scheduler, qs: QueueSet, before: dict[str, int], elastic: bool,
                   shrinks_first: bool | None = None) -> None:
    quotas = qs.quotas(s.cluster.total_gpus, s.cluster.total_cpus)
    nom = quotas.nominal[0]
    use = usage(s, qs)
    borrowed = np.maximum(0, use - nom)
    lim = quotas.borrowing_limit[0]
    assert (borrowed <= lim).all(), "a queue borrowed beyond its borrowing limit"
    assert (borrowed[quotas.cohort < 0] == 0).all(), "a queue outside any cohort borrowed"
    for c in np.unique(quotas.cohort[quotas.cohort >= 0]):
        m = quotas.cohort == c
        lendable = np.minimum(np.maximum(0, nom[m] - use[m]), quotas.lending_limit[0][m]).sum()
        assert borrowed[m].sum() <= lendable + 0, "borrowed more than the cohort's idle quota"
    t = s.table
    shares = held(s)
    for r, sp in enumerate(t.specs):
        g = shares.get(sp.job_id, 0)
        assert g == int(t.share[r]), "a job's placement differs from its share (a split gang)"
        if g:
            assert g >= t.min_gpus[r], "a job below its minimum"
            if not elastic:
                assert g == t.requested[r], "a rigid job not at its request"
    if elastic if shrinks_first is None else shrinks_first:
        jobs = {sp.job_id: (qs.queue_of(sp.user), int(t.min_gpus[r])) for r, sp in enumerate(t.specs)}
        borrowing = [q for q in range(len(nom)) if use[q] > nom[q] and quotas.cohort[q] >= 0]
        problem = shrink_before_preempt(jobs, before, shares, borrowing)
        assert problem is None, problem


def shrink_before_preempt(jobs: dict[str, tuple[int, int]], before: dict[str, int], after: dict[str, int],
                          borrowing: list[int]) -> str | None:
    """What breaks shrink-before-preempt at one decision, or None. ``jobs``: job id → (queue, minimum
    GPUs); ``before``/``after``: GPUs held; ``borrowing``: the queues of a cohort holding more than
    their quota after the decision.

    When a job that ran is stopped, every running job of a borrowing queue is at its minimum — except
    what a stop in that same queue freed beyond the cut: a job stops whole (a gang is never split),
    so the GPUs it frees can be more than its queue had to give back, and the queue's other jobs may
    grow into them (``coddl.queues.share``). Kept idle they would serve no one: the job was stopped
    because, with every job of its queue at its minimum, it did not fit, and it cannot run on the
    part of its GPUs that is left over. Kueue holds no quota back either: what a preempted workload
    frees beyond what was needed is quota like any other. So a borrowing queue's running jobs may hold
    GPUs above their minimums only if the queue stopped a job itself, and then fewer than the smallest
    minimum among the jobs it stopped — had they held as many, shrinking them would have kept that
    job running."""
    preempted = [k for k in jobs if before.get(k, 0) > 0 and after.get(k, 0) == 0]
    if not preempted:
        return None
    for q in borrowing:
        running = [k for k, (qk, _) in jobs.items() if qk == q and after.get(k, 0) > 0]
        surplus = sum(after[k] - jobs[k][1] for k in running)
        if surplus <= 0:
            continue
        own = [jobs[k][1] for k in preempted if jobs[k][0] == q]
        if not own or surplus >= min(own):
            above = next(k for k in running if after[k] > jobs[k][1])
            why = (f"its queue stopped jobs of minimum {min(own)} and its jobs hold {surplus} above their minimums"
                   if own else f"{', '.join(preempted)} stopped and its queue stopped none")
            return f"{above} above its minimum while a job was preempted ({why})"
    return None


# Themis and AITurbo stop jobs by their own rule inside a queue's entitlement (a lease ends; a new
# job's finish-time fairness comes first), whether or not another queue borrows: shrink-before-preempt
# is the queue layer's rule for its own cuts, so it is checked for the policies that preempt only
# when their capacity shrinks. The quota invariants are checked for every policy.
PREEMPTS_BY_ITSELF = {"themis", "aiturbo"}


@pytest.mark.parametrize("policy", sorted(available()))  # every registered policy
@settings(max_examples=60, deadline=None)
@given(setup=setups())
def test_quota_properties(policy: str, setup) -> None:  # noqa: ANN001
    qs, gpus, jobs, claimant = setup
    elastic = make_policy(policy).elastic
    shrinks_first = elastic and policy not in PREEMPTS_BY_ITSELF
    s = scheduler(qs, policy, gpus)
    for k, (user, lo, req, hi) in enumerate(jobs):
        if elastic:
            s.submit(job(f"j{k}", user, req, lo=lo, hi=hi), 0.0)
        else:
            s.submit(job(f"j{k}", user, req, lo=req, hi=req), 0.0)
    s.step(0.0)
    check_decision(s, qs, {}, elastic, shrinks_first)
    # the claimant's team (under its quota) submits 1-GPU jobs worth its whole quota
    quotas = qs.quotas(gpus, s.cluster.total_cpus)
    nominal = int(quotas.nominal[0, claimant])
    user = qs.queues[claimant].users[0]
    before = held(s)
    for k in range(nominal):
        s.submit(job(f"c{k}", user, 1, lo=1, hi=1), 1.0)
    s.step(1.0)
    check_decision(s, qs, before, elastic, shrinks_first)
    # within this one decision the team holds at least its quota (its 1-GPU jobs fill it)
    assert usage(s, qs)[claimant] >= nominal
