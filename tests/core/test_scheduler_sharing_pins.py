"""The scheduler's GPU-sharing path and its constructor, pinned by hand (found by mutation testing of
``coddl/scheduler.py``): the GPUs and cores a step counts when it opens or empties shared GPUs, the
decisions ``_with_sharing`` asks for and the capacity it offers, where sharing jobs land by type,
and what ``__init__`` sets up. A ``Given`` policy hands out exactly the shares a test sets.

Cluster.for_gpus(g, per_node): nodes of 32 cores, so a GPU's block is 32 / per_node cores.
"""

from __future__ import annotations

import numpy as np
import pytest

from coddl.core import Cluster, JobSpec
from coddl.core.allocation import ActionKind
from coddl.core.cluster import GpuType, Node
from coddl.perf.curves import CurveTable
from coddl.placement.sharing import SharingRule
from coddl.policies import make_policy
from coddl.policies.base import Context, Policy, Shares
from coddl.scheduler import MAX_SHARING_DECISIONS, Scheduler

LIN = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})
PACK = SharingRule.parse("pack")


def half(a: int, b: int, t: int) -> float:
    return 0.5


class Given(Policy):
    """Hands out ``self.shares`` (job id → GPUs; 0 for the rest), with ``self.types`` as Shares.gpu_type
    when set; records every context it is asked with."""

    name = "given"

    def __init__(self) -> None:
        super().__init__()
        self.shares: dict[str, int] = {}
        self.types: dict[str, int] | None = None
        self.seen: list[Context] = []

    def allocate(self, ctx: Context):
        self.seen.append(ctx)
        ids = ctx.jobs.ids
        g = np.array([self.shares.get(j, 0) for j in ids], dtype=np.int64)
        if self.types is None:
            return g
        return Shares(g, np.array([self.types.get(j, -1) for j in ids], dtype=np.int64))


def shared(jid: str, fraction: float = 0.5, **kw) -> JobSpec:
    return JobSpec(jid, 0.0, 1, 100.0, "lin", max_gpus=1, gpu_fraction=fraction, **kw)


def whole(jid: str, gpus: int = 1, **kw) -> JobSpec:
    return JobSpec(jid, 0.0, gpus, 100.0, "lin", max_gpus=kw.pop("max_gpus", gpus), **kw)


def sharing_sched(gpus: int = 4, per_node: int = 2, cluster: Cluster | None = None, policy: Policy | None = None,
                  rule: SharingRule = PACK) -> tuple[Scheduler, Policy]:
    pol = policy if policy is not None else Given()
    s = Scheduler(cluster or Cluster.for_gpus(gpus, per_node), pol, LIN, sharing=rule, retained=half)
    return s, pol


# ---------------------------------------------------------------- the GPUs and cores a step counts
def test_opening_and_emptying_two_shared_gpus_in_one_step_counts_both_gpus_and_their_cores() -> None:
    """Four half-GPU jobs on 4 GPUs (2 per node: 16 cores a GPU) pack onto two GPUs: 2 GPUs and
    32 cores in use. All four suspended in one step empty both: 0 and 0. Then two of them back."""
    s, pol = sharing_sched()
    for j in "abcd":
        s.submit(shared(j), 0.0)
    pol.shares = dict.fromkeys("abcd", 1)
    acts = s.step(0.0).plan.actions
    assert sorted((a.job_id, a.kind, a.old) for a in acts) == [(j, ActionKind.START, ()) for j in "abcd"]
    assert s.gpus_in_use == 2 and s.cores_in_use == 32
    assert len({s.allocation.gpus[j] for j in "abcd"}) == 2
    assert (~s.placer.free).sum() == 2
    pol.shares = {}
    acts = s.step(1.0).plan.actions
    assert sorted((a.job_id, a.kind) for a in acts) == [(j, ActionKind.SUSPEND) for j in "abcd"]
    assert s.gpus_in_use == 0 and s.cores_in_use == 0 and s.placer.free.all()
    assert s.allocation.gpus == {} and s.allocation.cores == {}
    assert s.table.share[: s.table.n].tolist() == [0, 0, 0, 0]
    pol.shares = {"a": 1, "c": 1}
    s.step(2.0)
    assert s.gpus_in_use == 1 and s.cores_in_use == 16
    assert s.allocation.gpus["a"] == s.allocation.gpus["c"]
    assert s.allocation.cores["a"] == s.allocation.cores["c"] and len(s.allocation.cores["a"]) == 16


# ---------------------------------------------------------------- what the constructor sets up
class Cores(Given):
    name = "cores"

    def assigns_cores(self) -> bool:
        return True


def test_a_policy_that_assigns_cores_is_refused_with_a_sharing_rule_and_accepted_without() -> None:
    from coddl.placement.sharing import SharingRuleError

    with pytest.raises(SharingRuleError, match=r"^policy cores assigns each job its CPU cores"):
        Scheduler(Cluster.for_gpus(2, 2), Cores(), LIN, sharing=PACK, retained=half)
    for rule in (None, SharingRule.parse("exclusive")):
        s = Scheduler(Cluster.for_gpus(2, 2), Cores(), LIN, sharing=rule, retained=half)
        assert s.sharing is None  # exclusive: every job holds whole GPUs, sharing jobs one each


def test_an_exclusive_rule_keeps_sharing_jobs_on_whole_gpus() -> None:
    s = Scheduler(Cluster.for_gpus(2, 2), Given(), LIN, sharing=SharingRule.parse("exclusive"), retained=half)
    s.submit(shared("a"), 0.0)
    s.submit(shared("b"), 0.0)
    assert s.table.shared_fraction[:2].tolist() == [0.0, 0.0]
    s.policy.shares = {"a": 1, "b": 1}
    s.step(0.0)
    assert s.allocation.gpus == {"a": (0,), "b": (1,)} and s.gpus_in_use == 2 and s.cores_in_use == 32


def test_a_fresh_scheduler_is_clean_and_empty() -> None:
    cluster = Cluster(nodes=(Node("n0", 2, "A"), Node("n1", 1, "B")), gpu_types={"A": GpuType("A"), "B": GpuType("B")})
    two = CurveTable.from_points({"lin": {1: 1.0, 2: 2.0}, "flat": {1: 1.0}})
    s = Scheduler(cluster, Given(), two)
    assert s.steps == 0 and not s.dirty and s.gpus_in_use == 0 and s.cores_in_use == 0
    assert s.records == [] and s.samples == {} and s.allocation.gpus == {} and s.sharing is None
    assert s.next_wakeup(0.0) is None
    ctx = s.context(5.0)
    assert ctx.now == 5.0 and ctx.capacity == 3 and ctx.capacity_by_type.tolist() == [2, 1]
    assert ctx.type_names == ("A", "B") and ctx.cpu_capacity == 64
    assert ctx.finished_service.size == 0 and len(ctx.jobs) == 0
    # no type speeds given: every type runs every model at its curve's speed
    assert ctx.type_speed.shape == (2, 2) and (ctx.type_speed == 1.0).all()
    # the curves reach the cluster's 3 GPUs, flat past each profile's last point
    assert ctx.curves.shape == (2, 4)
    assert ctx.curves[0].tolist() == [0.0, 1.0, 2.0, 2.0] and ctx.curves[1].tolist() == [0.0, 1.0, 1.0, 1.0]
    assert s.curves.max_gpus.tolist() == [2, 1]  # where more GPUs stop helping is unchanged
    speeds = np.array([[1.0, 1.0], [0.5, 0.25]])
    assert Scheduler(cluster, Given(), two, type_speed=speeds).context(0.0).type_speed is speeds
    # validation is on unless turned off
    s.submit(whole("x"), 0.0)
    s.policy.shares = {"x": 4}
    from coddl.scheduler import InfeasibleShares

    with pytest.raises(InfeasibleShares):
        s.step(0.0)
    off = Scheduler(cluster, Given(), two, validate=False)
    assert off.validate is False


def test_a_first_finished_job_is_the_first_finished_service() -> None:
    s, pol = sharing_sched(2, 2, rule=SharingRule.parse("exclusive"))
    s.submit(whole("x"), 0.0)
    pol.shares = {"x": 1}
    s.step(0.0)
    s.complete("x", 3.0)
    assert s.context(3.0).finished_service.tolist() == [3.0]


# ---------------------------------------------------------------- submit under a sharing rule
def test_a_newcomer_to_a_full_cluster_asks_for_a_step_when_jobs_share_gpus() -> None:
    """FIFO skips the step for a newcomer to a full cluster only without sharing: with a sharing rule
    the newcomer may join a shared GPU, and here it does."""
    s = Scheduler(Cluster.for_gpus(1, 1), make_policy("fifo"), LIN, sharing=PACK, retained=half)
    s.submit(shared("a"), 0.0)
    s.step(0.0)
    assert s.gpus_in_use == 1 and not s.dirty
    s.submit(shared("b"), 1.0)
    assert s.dirty
    acts = s.step(1.0).plan.actions
    assert [(a.job_id, a.kind) for a in acts] == [("b", ActionKind.START), ("a", ActionKind.COTENANTS)]
    assert s.allocation.gpus == {"a": (0,), "b": (0,)} and s.gpus_in_use == 1


def test_a_whole_job_under_a_sharing_rule_is_no_tenant() -> None:
    s, pol = sharing_sched(2, 2)
    s.submit(whole("w", 1, max_gpus=2), 0.0)
    s.submit(shared("h", 0.25, gpu_type="V100"), 0.0)
    assert set(s.sharing.tenants) == {"h"}
    assert s.sharing.tenants["h"].fraction == 0.25 and s.sharing.tenants["h"].gpu_type == 0
    assert s.table.shared_fraction[:2].tolist() == [0.0, 0.25]
    assert s.table.max_gpus[:2].tolist() == [2, 1]
    pol.shares = {"w": 1, "h": 1}
    s.step(0.0)
    # typed requests are placed before those of any type: h's new shared GPU first
    assert s.allocation.gpus == {"w": (1,), "h": (0,)} and s.gpus_in_use == 2 and s.cores_in_use == 32


# ---------------------------------------------------------------- the decisions of a sharing step
class Greedy(Policy):
    """Hands each job, in table order (or ``order`` of ids), as many GPUs as it may have until the
    capacity it is shown runs out; records the capacity (and per type) of every call."""

    name = "greedy"

    def __init__(self, order: list[str] | None = None) -> None:
        super().__init__()
        self.order = order
        self.capacities: list[int] = []
        self.by_type: list[list] = []
        self.dtypes: list[str] = []

    def allocate(self, ctx: Context):
        self.capacities.append(int(ctx.capacity))
        self.by_type.append(np.asarray(ctx.capacity_by_type).tolist())
        self.dtypes.append(np.asarray(ctx.capacity_by_type).dtype.kind)
        ids = list(ctx.jobs.ids)
        g = np.zeros(len(ids), dtype=np.int64)
        left = int(ctx.capacity)
        for j in [j for j in self.order if j in ids] if self.order else ids:
            r = ids.index(j)
            g[r] = min(int(ctx.jobs.max_gpus[r]), left)
            left -= int(g[r])
        return g


def test_packing_frees_gpus_the_policy_is_offered_one_then_all_that_is_left() -> None:
    """4 GPUs; four half-GPU jobs and a whole job w (up to 3 GPUs). Decision 1 at the real 4: the
    four half jobs take them all (4 counted), packed onto 2 GPUs. Offered one more (5): w gets 1 and
    it fits (1 + 2). Then all that is left: 4 - 3 = 1 more (6): w gets 2, 2 + 2 = 4 fits. That is
    MAX_SHARING_DECISIONS = 3 calls. At the next step the packing's 2 saved GPUs are offered at once
    (6) and nothing is left: one call, nothing moves."""
    assert MAX_SHARING_DECISIONS == 3
    pol = Greedy(["s1", "s2", "s3", "s4", "w"])
    s, _ = sharing_sched(4, 4, policy=pol)
    for j in ("s1", "s2", "s3", "s4"):
        s.submit(shared(j), 0.0)
    s.submit(whole("w", 1, max_gpus=3), 0.0)
    acts = s.step(0.0).plan.actions
    assert pol.capacities == [4, 5, 6]
    assert sorted((a.job_id, len(a.new)) for a in acts) == [("s1", 1), ("s2", 1), ("s3", 1), ("s4", 1), ("w", 2)]
    assert s.gpus_in_use == 4 and s.cores_in_use == 32
    assert len({s.allocation.gpus[j] for j in ("s1", "s2", "s3", "s4")}) == 2
    pol.capacities.clear()
    assert s.step(1.0).plan.actions == []
    assert pol.capacities == [6]


def test_a_policy_that_leaves_capacity_unused_is_asked_once() -> None:
    """Two half jobs on 4 GPUs: the policy gives 2 of the 4 it is shown: nobody wants more, no offer."""
    pol = Greedy()
    s, _ = sharing_sched(4, 4, policy=pol)
    s.submit(shared("a"), 0.0)
    s.submit(shared("b"), 0.0)
    s.step(0.0)
    assert pol.capacities == [4]
    assert s.allocation.gpus["a"] == s.allocation.gpus["b"] and s.gpus_in_use == 1


def test_an_offer_of_one_gpu_goes_to_the_sharing_job_that_fits_beside_the_first() -> None:
    """One GPU; a and b (half) in the policy's order before w. Decision 1 (1 GPU): a. Its shared
    GPU has room for b, so one more is offered (2): a and b, packed on the one GPU. Nothing is left
    to offer (w is whole, no sharing job waits): two calls."""
    pol = Greedy(["a", "b", "w"])
    s, _ = sharing_sched(1, 1, policy=pol)
    for j in ("a", "b"):
        s.submit(shared(j), 0.0)
    s.submit(whole("w"), 0.0)
    s.step(0.0)
    assert pol.capacities == [1, 2]
    assert s.allocation.gpus == {"a": (0,), "b": (0,)} and s.gpus_in_use == 1


def test_no_offer_when_the_cluster_is_held_and_no_shared_gpu_has_room() -> None:
    """One GPU; w first: it takes the GPU, no shared GPU exists for a and b: no offer, one call."""
    pol = Greedy(["w", "a", "b"])
    s, _ = sharing_sched(1, 1, policy=pol)
    for j in ("a", "b"):
        s.submit(shared(j), 0.0)
    s.submit(whole("w"), 0.0)
    s.step(0.0)
    assert pol.capacities == [1]
    assert s.allocation.gpus == {"w": (0,)}


def test_an_offer_that_does_not_fit_leaves_the_last_decision_that_did() -> None:
    """Two GPUs; order a, w (up to 2), b. Decision 1 (2): a 1, w 1: 1 shared + 1 whole fits. a's GPU
    has room, so one more is offered (3): w takes 2, 2 whole + 1 shared = 3 GPUs does not fit: the
    first decision stands (b, which would have fitted beside a, waits)."""
    pol = Greedy(["a", "w", "b"])
    s, _ = sharing_sched(2, 2, policy=pol)
    for j in ("a", "b"):
        s.submit(shared(j), 0.0)
    s.submit(whole("w", 1, max_gpus=2), 0.0)
    s.step(0.0)
    assert pol.capacities == [2, 3]
    assert sorted(s.allocation.gpus) == ["a", "w"] and len(s.allocation.gpus["w"]) == 1
    assert s.gpus_in_use == 2


def test_room_the_packing_saves_that_does_not_hold_falls_back_to_the_real_capacity() -> None:
    """Two GPUs; a and b share GPU 0, c runs alone on GPU 1 (3 counted on 2: 1 saved). The policy
    now puts w (up to 2) first: shown 3 it gives w 2 and a 1: 2 whole + 1 shared does not fit the 2
    GPUs; asked again at the real 2, w takes both and the sharing jobs stop."""
    pol = Greedy(["a", "b", "c", "w"])
    s, _ = sharing_sched(2, 2, policy=pol)
    for j in ("a", "b"):
        s.submit(shared(j), 0.0)
    s.submit(shared("c", 0.75), 0.0)
    s.submit(whole("w", 1, max_gpus=2), 0.0)
    s.step(0.0)
    assert s.allocation.gpus["a"] == s.allocation.gpus["b"] != s.allocation.gpus["c"]
    assert "w" not in s.allocation.gpus and s.gpus_in_use == 2
    pol.order, pol.capacities = ["w", "a", "b", "c"], []
    acts = s.step(1.0).plan.actions
    assert pol.capacities == [3, 2]
    assert s.allocation.gpus == {"w": (0, 1)} and s.gpus_in_use == 2 and s.cores_in_use == 32
    assert sorted((a.job_id, a.kind) for a in acts) == [
        ("a", ActionKind.SUSPEND), ("b", ActionKind.SUSPEND), ("c", ActionKind.SUSPEND), ("w", ActionKind.START)]


def test_when_no_decision_fits_the_jobs_stand_still() -> None:
    """Four half jobs packed on 2 GPUs; the policy insists on them and a whole job too (2 shared +
    1 whole on 2 GPUs): it fits neither the room packing saves (4) nor the real 2, so nothing moves
    and the shares are checked against what they hold (4 counted)."""
    s, pol = sharing_sched(2, 2)
    for j in "abcd":
        s.submit(shared(j), 0.0)
    s.submit(whole("w"), 0.0)
    pol.shares = dict.fromkeys("abcd", 1)
    s.step(0.0)
    before = dict(s.allocation.gpus)
    assert len(set(before.values())) == 2 and s.gpus_in_use == 2
    pol.shares = dict.fromkeys("abcdw", 1)
    pol.seen.clear()
    res = s.step(1.0)
    assert [c.capacity for c in pol.seen] == [4, 2]
    assert res.plan.actions == [] and res.changed.size == 0
    assert s.allocation.gpus == before and s.gpus_in_use == 2 and s.cores_in_use == 32


def two_types() -> Cluster:
    return Cluster(nodes=(Node("n0", 2, "A"), Node("n1", 2, "B")), gpu_types={"A": GpuType("A"), "B": GpuType("B")})


def test_offers_by_type_count_the_gpus_a_whole_job_of_no_type_holds() -> None:
    """Types A (GPUs 0, 1) and B (2, 3); w (whole, any type, up to 2) first, then half jobs.
    Step 0: at [2, 2] w 2 and s1, s2 (packed on one GPU): 3 GPUs, 2 + 1 of no type taken from the
    roomiest types leaves B one: offered [2, 3], s3 joins (a second shared GPU, room for one more);
    then the GPUs are all taken and s4 fits beside s3: offered [3, 3] (room of no type goes to the
    first type). w lands on A, the shared GPUs on B.
    Step 1 (s4 gone, s5 new): the packing saves one B GPU: [2, 3]; w's 2 GPUs count against A, B's
    two are shared: none free, but s3's GPU has room for s5: offered [2, 4], and s5 joins s3."""
    pol = Greedy(["w", "s1", "s2", "s3", "s4", "s5"])
    s, _ = sharing_sched(cluster=two_types(), policy=pol)
    s.submit(whole("w", 1, max_gpus=2), 0.0)
    for j in ("s1", "s2", "s3", "s4"):
        s.submit(shared(j), 0.0)
    s.step(0.0)
    assert pol.capacities == [4, 5, 6] and pol.by_type == [[2, 2], [2, 3], [3, 3]]
    assert s.allocation.gpus == {"w": (0, 1), "s1": (2,), "s2": (2,), "s3": (3,), "s4": (3,)}
    assert s.table.gpu_type[: s.table.n].tolist() == [-1, 1, 1, 1, 1]  # sharing jobs: their GPU's type
    assert s.gpus_in_use == 4 and s.cores_in_use == 64
    s.complete("s4", 1.0)
    s.submit(shared("s5"), 1.0)
    pol.capacities, pol.by_type, pol.dtypes = [], [], []
    acts = s.step(1.0).plan.actions
    assert pol.capacities == [5, 6] and pol.by_type == [[2, 3], [2, 4]]
    assert pol.dtypes == ["i", "i"]  # GPU counts, whole numbers
    assert [(a.job_id, a.kind) for a in acts] == [("s5", ActionKind.START), ("s3", ActionKind.COTENANTS)]
    assert s.allocation.gpus["s5"] == (3,) and s.gpus_in_use == 4


def test_types_given_as_floats_are_type_indices_when_shares_are_not_checked() -> None:
    """Unchecked (a simulation without --check), a policy that works its types out in floating point
    places its jobs as with integer types: w on B's two GPUs, a and b packed on an A GPU, c on the
    other A GPU (5 counted on 4 GPUs: it fits once packed)."""

    class FloatTypes(Given):
        def allocate(self, ctx):
            out = super().allocate(ctx)
            return Shares(out.gpus, out.gpu_type.astype(float))

    for pol in (Given(), FloatTypes()):
        s = Scheduler(two_types(), pol, LIN, sharing=PACK, retained=half, validate=False)
        s.submit(whole("w", 1, max_gpus=2), 0.0)
        for j in ("a", "b", "c"):
            s.submit(shared(j), 0.0)
        pol.shares = {"w": 2, "a": 1, "b": 1, "c": 1}
        pol.types = {"w": 1, "a": 0, "b": 0, "c": 0}
        s.step(0.0)
        assert s.allocation.gpus == {"w": (2, 3), "a": (0,), "b": (0,), "c": (1,)}
        assert s.table.gpu_type[: s.table.n].tolist() == [1, 0, 0, 0] and s.gpus_in_use == 4


def test_a_type_the_policy_chose_pins_a_newcomer_sharing_job_to_it() -> None:
    """Types A (GPUs 0, 1) and B (2, 3). The policy puts w and the sharing job s on A (type 0): s
    opens a shared GPU of A (GPU 1), not of any type. On one A GPU the two do not fit: nothing starts."""
    pol = Given()
    s = Scheduler(two_types(), pol, LIN, sharing=PACK, retained=half)
    s.submit(whole("w"), 0.0)
    s.submit(shared("s"), 0.0)
    pol.shares, pol.types = {"w": 1, "s": 1}, {"w": 0, "s": 0}
    s.step(0.0)
    assert s.allocation.gpus == {"w": (0,), "s": (1,)}
    assert s.table.gpu_type[:2].tolist() == [0, 0]
    one_a = Cluster(nodes=(Node("n0", 1, "A"), Node("n1", 2, "B")), gpu_types={"A": GpuType("A"), "B": GpuType("B")})
    s = Scheduler(one_a, pol, LIN, sharing=PACK, retained=half)
    s.submit(whole("w"), 0.0)
    s.submit(shared("s"), 0.0)
    assert s.step(0.0).plan.actions == [] and s.allocation.gpus == {}


def test_shareable_jobs_take_spare_gpus_alone_and_share_the_last_one() -> None:
    """Jobs that may share but asked for no fraction take a GPU each while GPUs are spare. Three GPUs,
    w holds one: x takes one, y the last one; with w holding two, x and y share the last one."""
    for w_gpus, together in ((1, False), (2, True)):
        s, pol = sharing_sched(3, 3)
        s.submit(whole("w", w_gpus), 0.0)
        for j in "xy":
            s.submit(JobSpec(j, 0.0, 1, 100.0, "lin", max_gpus=1, shareable=True), 0.0)
        pol.shares = {"w": w_gpus, "x": 1, "y": 1}
        s.step(0.0)
        assert sorted(s.allocation.gpus) == ["w", "x", "y"] and s.gpus_in_use == 3
        assert (s.allocation.gpus["x"] == s.allocation.gpus["y"]) is together


# ---------------------------------------------------------------- step: rows that change but do not move
def test_a_type_named_for_a_job_already_on_it_moves_nothing_and_the_next_job_still_starts() -> None:
    """Types A (GPUs 0, 1) and B (2, 3). a (any type) runs on GPU 0, of A. The policy now names A for
    it and starts b: a's row changes (its table type becomes A) but it keeps its GPU and cores (no
    action, no resize); b, the row after it, starts."""
    s, pol = sharing_sched(cluster=two_types(), rule=SharingRule.parse("exclusive"))
    s.submit(whole("a"), 0.0)
    s.submit(whole("b"), 0.0)
    pol.shares = {"a": 1}
    s.step(0.0)
    assert s.allocation.gpus == {"a": (0,)} and s.table.gpu_type[:2].tolist() == [-1, -1]
    cores = s.allocation.cores["a"]
    pol.shares, pol.types = {"a": 1, "b": 1}, {"a": 0, "b": -1}
    res = s.step(1.0)
    assert res.changed.tolist() == [0, 1]
    assert [(a.job_id, a.kind) for a in res.plan.actions] == [("b", ActionKind.START)]
    assert s.allocation.gpus["a"] == (0,) and s.allocation.cores["a"] == cores
    assert s.table.gpu_type[:2].tolist() == [0, -1] and s.table.resizes[:2].tolist() == [0, 0]
    assert len(s.allocation.gpus["b"]) == 1 and s.gpus_in_use == 2 and s.cores_in_use == 32


def test_a_sharing_job_the_policy_puts_on_another_type_keeps_its_gpu() -> None:
    """s shares GPU 2 (type B) with t; the policy now names type A for s: it stays where it is (a
    sharing job is on its GPU's type), no action for it."""
    s, pol = sharing_sched(cluster=two_types())
    s.submit(shared("s"), 0.0)
    s.submit(shared("t"), 0.0)
    pol.shares, pol.types = {"s": 1, "t": 1}, {"s": 1, "t": 1}
    s.step(0.0)
    g = s.allocation.gpus["s"]
    assert g == s.allocation.gpus["t"] and g[0] >= 2
    pol.types = {"s": 0, "t": 1}
    res = s.step(1.0)
    assert res.plan.actions == [] and s.allocation.gpus["s"] == g
    assert s.table.gpu_type[:2].tolist() == [1, 1] and s.table.resizes[:2].tolist() == [0, 0]


# ---------------------------------------------------------------- a sharing rule without sharing jobs; complete
def test_a_sharing_rule_with_only_whole_jobs_places_them_as_without_one() -> None:
    got = []
    for rule in (PACK, None):
        pol = Given()
        s = Scheduler(Cluster.for_gpus(4, 2), pol, LIN, sharing=rule, retained=half)
        s.submit(whole("a", 2), 0.0)
        s.submit(whole("b", 1), 0.0)
        pol.shares = {"a": 2, "b": 1}
        acts = s.step(0.0).plan.actions
        got.append(([(a.job_id, a.kind, a.new, a.cores) for a in acts], s.gpus_in_use, s.cores_in_use))
    assert got[0] == got[1]
    assert got[0][1:] == (3, 48) and [x[2] for x in got[0][0]] == [(0, 1), (2,)]


def test_a_finished_job_leaves_no_samples_and_its_id_starts_afresh() -> None:
    from coddl.policies.base import ThroughputSample

    s, pol = sharing_sched(2, 2, rule=SharingRule.parse("exclusive"))
    s.submit(whole("x"), 0.0)
    pol.shares = {"x": 1}
    s.step(0.0)
    s.observe("x", ThroughputSample(1.0, 1, 1, 16, 2.0, 2.0))
    assert list(s.context(1.0).samples) == ["x"]
    s.complete("x", 2.0)
    assert s.context(2.0).samples == {}
    s.submit(whole("x"), 3.0)  # the same id again (a job resubmitted): a new job, it starts
    assert [a.kind for a in s.step(3.0).plan.actions] == [ActionKind.START]


def test_a_clash_rule_keeps_shareable_jobs_apart() -> None:
    """One GPU, two shareable jobs (no fraction declared). Without a clash rule they share it; with
    one that makes every pair clash, only the first runs."""
    got = []
    for clash in (None, lambda a, b, t: True):
        pol = Greedy()
        s = Scheduler(Cluster.for_gpus(1, 1), pol, LIN, sharing=PACK, retained=half, clash=clash)
        for j in "xy":
            s.submit(JobSpec(j, 0.0, 1, 100.0, "lin", max_gpus=1, shareable=True), 0.0)
        s.step(0.0)
        got.append(dict(s.allocation.gpus))
    assert got == [{"x": (0,), "y": (0,)}, {"x": (0,)}]


def test_a_first_decision_that_does_not_fit_is_not_asked_again() -> None:
    """The first step of a sharing run: no packing saves anything, the policy sees the real capacity;
    its decision (a shared + a whole job on one GPU) does not fit: one call, nothing starts."""
    s, pol = sharing_sched(1, 1)
    s.submit(shared("a"), 0.0)
    s.submit(whole("w"), 0.0)
    pol.shares = {"a": 1, "w": 1}
    assert s.step(0.0).plan.actions == []
    assert len(pol.seen) == 1 and s.allocation.gpus == {}


def test_service_since_a_start_counts_from_that_start() -> None:
    """r comes back with 30 GPU-s received and resumes on 2 GPUs at t = 3: since that start it has
    0, then 2 × 2 = 4 at t = 5 (34 in all); suspended and resumed on 1 GPU at t = 6 (36 in all): 0
    since, 1 at t = 7."""
    s, pol = sharing_sched(4, 4, rule=SharingRule.parse("exclusive"))
    s.submit(whole("r", 2, max_gpus=2), 3.0, attained_service=30.0, first_start=1.0)
    pol.shares = {"r": 2}
    assert [a.kind for a in s.step(3.0).plan.actions] == [ActionKind.RESUME]
    s.set_rate("r", 1.0, 3.0)
    j = s.context(3.0).jobs
    assert (j.attained[0], j.service_since_start[0]) == (30.0, 0.0)
    j = s.context(5.0).jobs
    assert (j.attained[0], j.service_since_start[0]) == (34.0, 4.0)
    pol.shares = {}
    s.step(6.0)
    pol.shares = {"r": 1}
    s.step(6.0)
    j = s.context(7.0).jobs
    assert (j.attained[0], j.service_since_start[0]) == (37.0, 1.0)
