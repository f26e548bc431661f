"""Many jobs per GPU (placement/sharing.py, the scheduler's sharing path, the simulator's co-location
charge): packing properties, hand-computed co-located JCTs, whole-GPU runs unchanged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coddl.core.cluster import Cluster, GpuType, Node
from coddl.core.job import JobSpec
from coddl.perf.curves import CurveTable
from coddl.perf.interference import ColocationTable, load_gavel_pairs
from coddl.placement.sharing import SharedGpus, SharingRule, SharingRuleError, Tenant
from coddl.policies.base import Context, Policy, Shares
from coddl.policies.registry import make_policy
from coddl.scheduler import Scheduler
from coddl.sim.engine import simulate
from coddl.sim.invariants import InvariantViolation, check_step

# two models, one step per second on one GPU, perfectly scalable to 4
CURVES = CurveTable(["a", "b"], np.array([[0.0, 1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 2.0, 3.0, 4.0]]), np.array([4, 4]))
PAIR = {(0, 1): 0.6, (1, 0): 0.8, (0, 0): 0.7, (1, 1): 0.7}  # f(a|b): a keeps 0.6 beside b, b keeps 0.8


def retained(a: int, b: int, t: int) -> float:
    return PAIR[(a, b)]


def job(jid: str, arrival: float, work: float, model: str = "a", gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(jid, arrival, gpus, work, model, max_gpus=kw.pop("max_gpus", gpus), **kw)


def run(specs: list[JobSpec], gpus: int, rule: str | None, policy: str = "fifo", per_node: int | None = None):
    cluster = Cluster.for_gpus(gpus, per_node or gpus)
    s = Scheduler(cluster, make_policy(policy), CURVES, sharing=SharingRule.parse(rule) if rule else None,
                  retained=retained)
    res = simulate(specs, s, check=True)
    return {r.spec.job_id: r.finish for r in res.records}, res, s


# ---------------------------------------------------------------- hand-computed co-location
def test_two_half_gpu_jobs_share_one_gpu_at_the_measured_slowdowns() -> None:
    """a keeps 0.6 beside b, b keeps 0.8 beside a; 100 steps each at 1 it/s alone. Together from
    t=0: b ends at 100/0.8 = 125 s, when a has done 0.6 × 125 = 75, so a ends at 125 + 25 = 150 s.
    On exclusive GPUs (one GPU, FIFO) they run one after the other: 100 s and 200 s."""
    specs = [job("a1", 0, 100, "a", gpu_fraction=0.5), job("b1", 0, 100, "b", gpu_fraction=0.5)]
    shared, res, _ = run(specs, 1, "pack")
    assert shared == pytest.approx({"a1": 150.0, "b1": 125.0})
    assert res.colocation.slowdown("b1") == pytest.approx(1 / 0.8)
    assert res.colocation.slowdown("a1") == pytest.approx(150 / (125 * 0.6 + 25))  # ran 150 s, worked 100
    alone, _, _ = run(specs, 1, "exclusive")
    assert alone == pytest.approx({"a1": 100.0, "b1": 200.0})


def test_aware_keeps_apart_a_pair_that_slows_a_job_below_its_floor() -> None:
    """Under aware:min_retained=0.7 the pair (a keeps 0.6) may not share: they run one after the other."""
    specs = [job("a1", 0, 100, "a", gpu_fraction=0.5), job("b1", 0, 100, "b", gpu_fraction=0.5)]
    assert run(specs, 1, "aware:min_retained=0.7")[0] == pytest.approx({"a1": 100.0, "b1": 200.0})
    assert run(specs, 1, "aware:min_retained=0.6")[0] == pytest.approx({"a1": 150.0, "b1": 125.0})


def test_fractions_over_one_gpu_are_not_packed_together() -> None:
    specs = [job("x", 0, 100, gpu_fraction=0.6), job("y", 0, 100, gpu_fraction=0.5)]
    assert run(specs, 1, "pack")[0] == pytest.approx({"x": 100.0, "y": 200.0})


def test_memory_need_keeps_jobs_apart_even_when_fractions_fit() -> None:
    cluster = Cluster(nodes=(Node("n0", 1, "T"),), gpu_types={"T": GpuType("T", memory_gb=16.0)})
    specs = [job("x", 0, 100, gpu_fraction=0.25, gpu_memory_gb=10.0), job("y", 0, 100, gpu_fraction=0.25, gpu_memory_gb=8.0)]
    s = Scheduler(cluster, make_policy("fifo"), CURVES, sharing=SharingRule.parse("pack"), retained=retained)
    res = simulate(specs, s, check=True)
    assert {r.spec.job_id: r.finish for r in res.records} == pytest.approx({"x": 100.0, "y": 200.0})


def test_a_co_tenant_leaving_speeds_the_other_up_and_a_newcomer_joins_a_running_gpu() -> None:
    """b arrives at 50 s beside the running a: a has 50 left at 0.6 → but b (100 at 0.8) ends at
    50 + 125 = 175 unless a ends first: a ends at 50 + 50/0.6 = 133.3, then b (done 0.8 × 83.3 = 66.7)
    runs alone: 133.3 + 33.3 = 166.7."""
    specs = [job("a1", 0, 100, "a", gpu_fraction=0.5), job("b1", 50, 100, "b", gpu_fraction=0.5)]
    got = run(specs, 1, "pack")[0]
    assert got["a1"] == pytest.approx(50 + 50 / 0.6)
    assert got["b1"] == pytest.approx(50 + 50 / 0.6 + (100 - 0.8 * 50 / 0.6))


def test_a_packed_gpu_leaves_room_the_policy_gives_to_a_whole_gpu_job() -> None:
    """Two GPUs: two half-GPU jobs pack onto one, so FIFO can start the whole-GPU job at once (without
    sharing it would wait for one of them)."""
    specs = [job("h1", 0, 100, "a", gpu_fraction=0.5), job("h2", 0, 100, "a", gpu_fraction=0.5),
             job("w", 0, 100, "b")]
    got = run(specs, 2, "pack")[0]
    assert got["w"] == pytest.approx(100.0)
    assert got["h1"] == pytest.approx(100 / 0.7) and got["h2"] == pytest.approx(100 / 0.7)
    assert run(specs, 2, "exclusive")[0]["w"] == pytest.approx(200.0)


# ---------------------------------------------------------------- packing properties
fractions = st.sampled_from([0.125, 0.25, 0.3, 0.5, 0.75, 1.0])


@st.composite
def workloads(draw) -> list[JobSpec]:
    n = draw(st.integers(1, 24))
    out = []
    for i in range(n):
        arrival = float(draw(st.integers(0, 400)))
        work = float(draw(st.integers(1, 300)))
        model = draw(st.sampled_from(["a", "b"]))
        kind = draw(st.sampled_from(["whole", "fraction", "shareable", "multi"]))
        if kind == "whole":
            out.append(job(f"j{i}", arrival, work, model))
        elif kind == "multi":
            out.append(job(f"j{i}", arrival, work, model, gpus=2))
        elif kind == "shareable":
            out.append(job(f"j{i}", arrival, work, model, shareable=True))
        else:
            mem = draw(st.one_of(st.none(), st.sampled_from([2.0, 6.0, 12.0])))
            out.append(job(f"j{i}", arrival, work, model, gpu_fraction=draw(fractions.filter(lambda f: f < 1)),
                           gpu_memory_gb=mem))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=workloads(), rule=st.sampled_from(["pack", "aware", "aware:min_retained=0.65"]),
       policy=st.sampled_from(["fifo", "srtf", "max-min", "tiresias-l", "afs-l"]), gpus=st.integers(2, 6))
def test_no_gpu_is_overcommitted_and_whole_jobs_never_share(specs, rule, policy, gpus) -> None:
    """simulate(check=True) checks at every step: shared GPUs' fractions and memory within the GPU,
    every tenant placed where the packer says, no shared GPU also held whole, no whole-GPU job's GPU
    held by another, the free map equal to the allocation; at the end ∫ rate dt = work for each job."""
    finished, res, s = run(specs, gpus, rule, policy, per_node=2)
    assert set(finished) == {x.job_id for x in specs}
    multi = {x.job_id for x in specs if x.requested_gpus > 1}
    assert all(res.colocation.slowdown(j) == 1.0 for j in multi)


@settings(max_examples=60, deadline=None)
@given(jobs=st.lists(st.tuples(fractions.filter(lambda f: f < 1), st.integers(0, 1)), min_size=1, max_size=30),
       gone=st.sets(st.integers(0, 29)))
def test_packing_is_stable_and_never_overcommits(jobs, gone) -> None:
    """Packing every job, then the same set again, changes nothing; after some leave, the others stay
    where they were; fractions per GPU never exceed 1; best fit never opens a GPU a job would fit."""
    cluster = Cluster.for_gpus(64, 8)
    sg = SharedGpus(cluster, SharingRule("pack"), retained)
    ids = [f"t{i}" for i in range(len(jobs))]
    for jid, (f, kind) in zip(ids, jobs):
        sg.register(Tenant(jid, f, None, kind))
    free = list(range(64))
    sg.commit(sg.pack(ids), lambda t: free.pop(0), free.append)
    for group in sg.on.values():
        assert sum(t.fraction for t in group) <= 1 + 1e-9
    lower_bound = int(np.ceil(sum(f for f, _ in jobs) - 1e-9))
    assert lower_bound <= sg.gpus_used <= max(1, 2 * lower_bound)  # best fit is within 2× of optimal
    before = dict(sg.gpu_of)
    again = sg.pack(ids)
    assert not again.opened and not again.leaving and not again.at and sg.gpu_of == before
    stay = [j for i, j in enumerate(ids) if i not in gone]
    sg.commit(sg.pack(stay), lambda t: free.pop(0), free.append)
    assert {j: sg.gpu_of[j] for j in stay} == {j: before[j] for j in stay}
    assert set(sg.gpu_of) == set(stay)
    assert sg.gpus_used + len(free) == 64
    # the running total of the shared GPUs' room (packing's lower bound) is their room, summed
    assert sg._room_sum == pytest.approx(sum(1 - sum(t.fraction for t in g) for g in sg.on.values()), abs=1e-9)


class Forgetful(dict):
    """A refusal memory that keeps nothing: every packing asks every GPU again."""

    def get(self, key, default=None):
        return default

    def __setitem__(self, key, value) -> None:
        pass


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=workloads(), rule=st.sampled_from(["pack", "aware", "aware:min_retained=0.65", "aware:min_retained=0.75"]),
       policy=st.sampled_from(["fifo", "srtf", "max-min", "afs-l"]), gpus=st.integers(2, 5))
def test_remembered_refusals_change_no_decision(specs, rule, policy, gpus) -> None:
    """The packer remembers which GPUs refused a kind of job until their tenants change: every job's
    finish, first start and resizes are those of a packer that asks every GPU again at every step."""
    def finish(memory: bool):
        s = Scheduler(Cluster.for_gpus(gpus, 2), make_policy(policy), CURVES, sharing=SharingRule.parse(rule),
                      retained=retained, clash=lambda a, b, t: a == b == 1)
        if not memory:
            s.sharing._refused = Forgetful()
        res = simulate(specs, s, check=True)
        return {r.spec.job_id: (r.finish, r.first_start, r.resizes) for r in res.records}

    assert finish(True) == finish(False)


def test_a_refusal_is_forgotten_when_the_gpus_tenants_change() -> None:
    """A GPU that refused a job because of a tenant (a pair that does not fit together) takes the
    job in a packing where that tenant leaves, and once it has left."""
    free = [0, 1]
    sg = SharedGpus(Cluster.for_gpus(2, 2), SharingRule("pack"), retained, clash=lambda a, b, t: a == b == 1)
    sg.register(Tenant("a", 0.25, None, 0))
    sg.register(Tenant("x", 0.5, None, 1, declared=False))
    sg.register(Tenant("q", 0.25, None, 1))
    sg.commit(sg.pack(["a", "x"]), lambda t: free.pop(0), free.append)
    assert sg.gpu_of == {"a": 0, "x": 0}
    assert sg.pack(["a", "x", "q"]).opened  # q and x clash: q is refused by GPU 0
    assert sg.pack(["a", "q"]).at == {"q": 0}  # x leaves in the same packing
    assert sg.forget("x") is None  # a stays on GPU 0
    assert sg.pack(["a", "q"]).at == {"q": 0}


def test_room_split_between_a_shared_gpu_and_a_new_one_still_counts_the_waiting_job() -> None:
    """One job waits; half a GPU is free on a shared GPU and half on one the packing opens: the
    offer has room for it (scaling each part by 1/2 and rounding down counted none)."""
    free = [0, 1, 2, 3]
    sg = SharedGpus(Cluster.for_gpus(4, 4), SharingRule("pack"), retained, clash=lambda a, b, t: a == b == 1)
    sg.register(Tenant("a", 0.5, None, 1, declared=False))
    sg.register(Tenant("c", 0.5, None, 1, declared=False))
    sg.commit(sg.pack(["a"]), lambda t: free.pop(0), free.append)
    packing = sg.pack(["a", "c"])  # c clashes with a: a new GPU, half used
    assert len(packing.opened) == 1
    per_type, anywhere = sg.room(packing, 1, 1, 0.5)
    assert int(per_type.sum()) + anywhere == 1
    assert sg.room(packing, 1, 5, 0.5)[0].tolist() == [1] and sg.room(packing, 1, 5, 0.5)[1] == 1
    assert sg.has_room(packing, 1, 0.5) and not sg.has_room(packing, 0, 0.5)
    assert not sg.has_room(packing, 1, 0.75)


def test_the_refusal_memory_is_bounded(monkeypatch) -> None:
    """A server that sees ever new kinds of job (memory needs, fractions) does not grow the memory
    without bound: past the limit it forgets and starts again, and packs as before."""
    import coddl.placement.sharing as sharing

    monkeypatch.setattr(sharing, "MAX_REMEMBERED_KINDS", 2)
    free = list(range(8))
    sg = SharedGpus(Cluster.for_gpus(8, 8), SharingRule("pack"), retained)
    sg.register(Tenant("a", 0.5, 8.0, 0))
    sg.commit(sg.pack(["a"]), lambda t: free.pop(0), free.append)
    for i in range(5):  # each asks for more memory than is left beside a: refused, a new GPU each time
        sg.register(Tenant(f"m{i}", 0.25, 9.0 + i / 10, 0))
        assert sg.pack(["a", f"m{i}"]).opened
        assert len(sg._refused) <= 2


def test_a_refusal_is_forgotten_when_the_pair_is_measured_better() -> None:
    """Under ``aware`` a GPU refuses a job whose co-tenants would fall below the floor; once online
    measurements raise the pair's value, the same GPU takes it."""
    sg = SharedGpus(Cluster.for_gpus(2, 2), SharingRule("aware", 0.55), retained)
    for jid, kind in (("x", 0), ("z", 0), ("q", 1)):
        sg.register(Tenant(jid, 0.25, None, kind))
    sg.commit(sg.pack(["x", "z"]), lambda t: 0, lambda g: None)
    assert sg.pack(["x", "z", "q"]).opened  # beside q, x would keep 0.7 × 0.6 = 0.42 < 0.55
    assert sg.observe("x", 1.0) and sg.observe("x", 1.0)  # f(0|0): 0.7 → 0.85 → 0.925
    assert sg.pack(["x", "z", "q"]).at == {"q": 0}  # 0.925 × 0.6 = 0.555: it fits now


def test_unchanged_shares_give_an_unchanged_placement_in_the_scheduler() -> None:
    specs = [job(f"h{i}", 0, 1000, "a", gpu_fraction=0.25) for i in range(6)] + [job("w", 0, 1000, "b", gpus=2)]
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("max-min"), CURVES, sharing=SharingRule.parse("pack"),
                  retained=retained)
    for x in specs:
        s.submit(x, 0.0)
    first = s.step(0.0)
    held = dict(s.allocation.gpus)
    again = s.step(1.0)
    assert first.plan.actions and not again.plan.actions and s.allocation.gpus == held
    check_step(s, 1.0)
    assert s.gpus_in_use == 2 + 2  # six quarter-GPU jobs on two GPUs, the whole job on two


def test_the_invariant_checker_catches_an_overcommitted_gpu() -> None:
    specs = [job("x", 0, 100, gpu_fraction=0.5), job("y", 0, 100, gpu_fraction=0.5)]
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("fifo"), CURVES, sharing=SharingRule.parse("pack"),
                  retained=retained)
    for x in specs:
        s.submit(x, 0.0)
    s.step(0.0)
    g = s.sharing.gpu_of["x"]
    s.sharing.on[g].append(Tenant("ghost", 0.5, None, 0))
    with pytest.raises(InvariantViolation, match="over-committed"):
        check_step(s, 0.0)


# ---------------------------------------------------------------- whole-GPU runs unchanged
@pytest.mark.parametrize("policy", ["fifo", "srtf", "tiresias-l", "afs-l", "max-min", "optimus"])
def test_a_sharing_rule_without_sharing_jobs_changes_nothing(policy: str) -> None:
    from coddl.sim.config import SimConfig
    from coddl.sim.run import prepare, run_policy

    base = SimConfig.build(trace="philly", jobs=300, gpus=32, policies=[policy])
    prep = prepare(base)
    a = run_policy(prep, policy, base)
    b = run_policy(prep, policy, SimConfig.build(trace="philly", jobs=300, gpus=32, policies=[policy], sharing="aware"))
    assert [(r.spec.job_id, r.finish, r.resizes) for r in a.records] == [(r.spec.job_id, r.finish, r.resizes) for r in b.records]


# ---------------------------------------------------------------- the co-location table and the rule
def test_the_colocation_table_reproduces_gavels_measured_pairs() -> None:
    """Models matched to one of Gavel's job types ("same network": ResNet-50, Transformer) carry
    Gavel's measured V100 fraction, and Gavel's 0 (the two did not fit one GPU) is a clash."""
    names = ["Resnet50Model128", "TransformerModel256", "DeepspeechModel64", "ChatbotModel256"]
    table = ColocationTable.build(["V100"], names)
    measured = load_gavel_pairs("v100")
    from coddl.perf.heterogeneity import gavel_job_type
    from coddl.perf.profiles import load_gavel_throughputs

    gavel = load_gavel_throughputs()
    kinds = [gavel_job_type(n, gavel) for n in names]
    idx = {k: i for i, k in enumerate(measured.job_types)}
    checked = 0
    for a in range(len(names)):
        for b in range(len(names)):
            f = measured.retained[idx[kinds[a]], idx[kinds[b]]]
            if np.isnan(f):
                continue
            checked += 1
            if f == 0:
                assert table.clashes(a, b, 0) and 0 < table(a, b, 0) < 1
            else:
                assert table(a, b, 0) == pytest.approx(f) and table.source[0, a, b] == "measured"
    assert checked >= 10
    assert table(0, 99, 0) == pytest.approx(float(table.fallback[0]))  # an own curve of the real system


def test_clashing_pairs_share_only_when_both_declared_their_fractions() -> None:
    cluster = Cluster.for_gpus(2, 2)
    sg = SharedGpus(cluster, SharingRule("pack"), retained, clash=lambda a, b, t: True)
    sg.register(Tenant("s1", 0.5, None, 0, declared=False))
    sg.register(Tenant("s2", 0.5, None, 1, declared=False))
    assert sg.pack(["s1", "s2"]).gpus == 2
    sg.register(Tenant("f1", 0.5, None, 0))
    sg.register(Tenant("f2", 0.5, None, 1))
    assert sg.pack(["f1", "f2"]).gpus == 1


def test_online_correction_moves_the_pair_towards_what_was_measured() -> None:
    cluster = Cluster.for_gpus(1, 1)
    sg = SharedGpus(cluster, SharingRule("aware", 0.5), retained)
    for jid, kind in (("x", 0), ("y", 1)):
        sg.register(Tenant(jid, 0.5, None, kind))
    sg.commit(sg.pack(["x", "y"]), lambda t: 0, lambda g: None)
    assert sg.retained("x") == pytest.approx(0.6)
    assert sg.observe("x", 0.2)
    assert sg.retained("x") == pytest.approx(0.4)  # halfway from 0.6 to 0.2
    assert sg.retained("y") == pytest.approx(0.8)  # the other direction is its own pair
    # the corrected pair is now below the floor: a new (x-kind, y-kind) pair is not packed together
    sg.register(Tenant("x2", 0.5, None, 0))
    sg.register(Tenant("y2", 0.5, None, 1))
    assert sg.pack(["x", "y", "x2", "y2"]).gpus == 3
    assert not sg.observe("nobody", 0.5)


@pytest.mark.parametrize("text, error", [
    ("share", "unknown sharing rule"), ("pack:min_retained=0.5", "pack takes none"),
    ("aware:floor=1", "unknown option 'floor'"), ("aware:min_retained=x", "must be a number"),
    ("aware:min_retained=1.5", "must be in [0, 1]")])
def test_a_bad_sharing_rule_is_one_line(text: str, error: str) -> None:
    with pytest.raises(SharingRuleError) as e:
        SharingRule.parse(text)
    assert error in str(e.value) and "\n" not in str(e.value)


def test_rules_round_trip() -> None:
    for text in ("exclusive", "pack", "aware:min_retained=0.6"):
        assert str(SharingRule.parse(text)) == text


@pytest.mark.parametrize("kw, error", [
    (dict(gpu_fraction=0.0), "gpu_fraction must be in [0.01, 1]"), (dict(gpu_fraction=0.005), "gpu_fraction must be in [0.01, 1]"), (dict(gpu_fraction=1.5), "gpu_fraction"),
    (dict(gpu_fraction=0.5, requested_gpus=2), "runs on one GPU"), (dict(shareable=True, max_gpus=4), "runs on one GPU"),
    (dict(gpu_memory_gb=0.0), "gpu_memory_gb must be > 0")])
def test_a_bad_sharing_request_is_refused(kw: dict, error: str) -> None:
    base = dict(job_id="j", arrival=0.0, requested_gpus=1, total_work=10.0, model="a")
    with pytest.raises(ValueError) as e:
        JobSpec(**{**base, **kw})
    assert error in str(e.value)


def test_packing_fraction_of_each_kind() -> None:
    base = dict(job_id="j", arrival=0.0, requested_gpus=1, total_work=10.0, model="a")
    assert JobSpec(**base).packing_fraction == 1.0 and not JobSpec(**base).shares_gpu
    assert JobSpec(**base, shareable=True).packing_fraction == 0.5
    assert JobSpec(**base, gpu_fraction=0.25, shareable=True).packing_fraction == 0.25
    assert dataclasses.replace(JobSpec(**base), gpu_fraction=0.3).shares_gpu


# ---------------------------------------------------------------- found in review
def two_types(a_gpus: int, b_gpus: int, a_mem: float = 16.0, b_mem: float = 16.0) -> Cluster:
    return Cluster(nodes=(Node("n0", a_gpus, "A"), Node("n1", b_gpus, "B")),
                   gpu_types={"A": GpuType("A", memory_gb=a_mem), "B": GpuType("B", memory_gb=b_mem)})


def test_a_policy_that_keeps_its_running_jobs_counts_packed_jobs_without_breaking_capacity() -> None:
    """Gavel keeps running jobs mid-round: two packed half-GPU jobs are two of its units on one GPU."""
    specs = [job("s1", 0, 5000, gpu_fraction=0.5), job("s2", 0, 5000, gpu_fraction=0.5), job("w", 1, 5000)]
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("gavel"), CURVES, sharing=SharingRule.parse("pack"),
                  retained=retained)
    res = simulate(specs, s, check=True)
    assert {r.spec.job_id for r in res.records} == {"s1", "s2", "w"}


class MovesToB(Policy):
    """Until t = 10: whole job w on type A, sharing job s on type B; then w moves to B and s waits."""

    name = "moves-to-b"

    def allocate(self, ctx: Context) -> Shares:
        later = ctx.now >= 10
        plan = {"w": (1, 1 if later else 0), "s": (0 if later else 1, 1)}
        gpus = np.array([plan[j][0] for j in ctx.jobs.ids], dtype=np.int64)
        types = np.array([plan[j][1] for j in ctx.jobs.ids], dtype=np.int64)
        return Shares(gpus, types)


def test_a_whole_job_moves_onto_a_gpu_a_sharing_job_leaves_in_the_same_step() -> None:
    """A job moved to another type needs new GPUs: it is placed after the sharing jobs leave theirs
    (placed first, as a shrink, it found B's only GPU still shared and the step failed)."""
    s = Scheduler(two_types(1, 1), MovesToB(), CURVES, sharing=SharingRule.parse("pack"), retained=retained)
    s.submit(job("w", 0, 1000), 0.0)
    s.submit(job("s", 0, 1000, gpu_fraction=0.5), 0.0)
    s.step(0.0)
    assert s.allocation.gpus == {"w": (0,), "s": (1,)}
    s.step(10.0)
    check_step(s, 10.0)
    assert s.allocation.gpus == {"w": (1,)} and not s.sharing.gpu_of


def test_a_typed_sharing_job_waits_for_its_type_while_a_job_of_no_type_holds_it() -> None:
    """w2 asked for no type and runs on B's only GPU; s must run on B. When w1 leaves A, s still
    waits: the GPUs a job of no type holds count against their type (counted by type alone, the
    decision looked feasible and placing it failed)."""
    specs = [job("w1", 0, 10), job("w2", 0.5, 100), job("s", 1, 10, gpu_fraction=0.5, gpu_type="B")]
    s = Scheduler(two_types(1, 1), make_policy("fifo"), CURVES, sharing=SharingRule.parse("pack"), retained=retained)
    res = simulate(specs, s, check=True)
    done = {r.spec.job_id: (r.first_start, r.finish) for r in res.records}
    assert done["w1"] == (0, 10) and done["w2"] == (0.5, 100.5)
    assert done["s"] == (100.5, 110.5)


def test_a_new_shared_gpu_of_no_type_is_packed_for_the_smallest_memory() -> None:
    """Two 6 GB quarter-GPU jobs may not go together on an 8 GB GPU, whichever type the placer picks."""
    specs = [job(f"x{i}", 0, 100, gpu_fraction=0.25, gpu_memory_gb=6.0) for i in range(2)]
    s = Scheduler(two_types(1, 2, 16.0, 8.0), make_policy("fifo"), CURVES, sharing=SharingRule.parse("pack"),
                  retained=retained)
    simulate(specs, s, check=True)  # check_step verifies no GPU's memory is over-committed


def test_a_job_needing_more_memory_than_a_gpu_gets_one_to_itself() -> None:
    specs = [job("big", 0, 100, gpu_fraction=0.5, gpu_memory_gb=40.0), job("small", 0, 100, gpu_fraction=0.25)]
    got = run(specs, 2, "pack")[0]
    assert got == pytest.approx({"big": 100.0, "small": 100.0})  # apart, both at once


def test_shared_gpus_leave_room_for_whole_jobs_of_a_type() -> None:
    specs = [job("w", 0, 100, gpus=2, gpu_type="B"), job("s", 0, 100, gpu_fraction=0.5)]
    for policy in ("fifo", "gavel"):
        s = Scheduler(two_types(1, 2), make_policy(policy), CURVES, sharing=SharingRule.parse("pack"),
                      retained=retained)
        res = simulate(specs, s, check=True)
        assert {r.spec.job_id: r.finish for r in res.records}["w"] == pytest.approx(50.0)


def test_a_sharing_job_is_recorded_on_the_type_of_the_gpu_it_holds() -> None:
    s = Scheduler(two_types(1, 1), make_policy("gavel"), CURVES, sharing=SharingRule.parse("pack"), retained=retained)
    s.submit(job("s", 0, 10_000, gpu_fraction=0.5), 0.0)
    s.step(0.0)
    (g,) = s.allocation.gpus["s"]
    assert s.table.gpu_type[s.table.row["s"]] == s.cluster.node_type_index[s.cluster.node_of_gpu[g]]
    s.submit(job("w", 1, 10_000), 1.0)
    s.step(1.0)
    check_step(s, 1.0)


# ---------------------------------------------------------------- found by mutation testing
def packer(gpus: int = 4) -> SharedGpus:
    return SharedGpus(Cluster.for_gpus(gpus, gpus), SharingRule("pack"), retained)


def test_packing_is_best_fit_decreasing() -> None:
    """0.7, 0.7, 0.3, 0.3 pack onto two GPUs largest first; smallest first would need three."""
    sg = packer()
    for jid, f in (("a", 0.3), ("b", 0.7), ("c", 0.3), ("d", 0.7)):
        sg.register(Tenant(jid, f, None, 0))
    assert sg.pack(["a", "b", "c", "d"]).gpus == 2


def test_a_newcomer_takes_the_room_a_leaver_frees_in_the_same_packing_best_fit() -> None:
    """GPU 0 holds a and b (0.5 each), GPU 1 holds e (0.4). a leaves as c (0.5) arrives: GPU 0 then
    has 0.5 left, GPU 1 0.6, so best fit puts c on GPU 0."""
    sg = packer()
    for jid, f in (("a", 0.5), ("b", 0.5), ("e", 0.4), ("c", 0.5)):
        sg.register(Tenant(jid, f, None, 0))
    free = [0, 1, 2, 3]
    sg.commit(sg.pack(["a", "b"]), lambda t: free.pop(0), free.append)
    sg.commit(sg.pack(["a", "b", "e"]), lambda t: free.pop(0), free.append)
    assert sg.gpu_of == {"a": 0, "b": 0, "e": 1}
    packing = sg.pack_changes(["c"], ["a"], free=2)
    assert packing.at == {"c": 0} and packing.gpus == 2 and not packing.opened


def test_a_gpu_its_last_tenant_leaves_counts_as_free_for_the_newcomers() -> None:
    sg = packer(1)
    for jid in ("a", "c"):
        sg.register(Tenant(jid, 0.5, None, 0))
    sg.commit(sg.pack(["a"]), lambda t: 0, lambda g: None)
    packing = sg.pack_changes(["c"], ["a"], free=1)
    assert packing.emptied == [0] and packing.gpus == 1 and len(packing.opened) == 1
