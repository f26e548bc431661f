from coddl.core import Cluster, JobSpec
from coddl.core.allocation import Action, ActionKind, Allocation, Plan, classify
from coddl.perf.curves import CurveTable
from coddl.policies import make_policy
from coddl.scheduler import Scheduler


def test_classify_each_kind():
    assert classify((), (1, 2), ever_ran=False) is ActionKind.START
    assert classify((), (1, 2), ever_ran=True) is ActionKind.RESUME
    assert classify((1,), (1, 2), ever_ran=True) is ActionKind.GROW
    assert classify((1, 2, 3), (1, 3), ever_ran=True) is ActionKind.SHRINK
    assert classify((1, 2), (2, 5), ever_ran=True) is ActionKind.MIGRATE
    assert classify((1, 2), (), ever_ran=True) is ActionKind.SUSPEND
    assert classify((1, 2), (1, 2), ever_ran=True) is None
    assert classify((1, 2), (3, 4), ever_ran=True) is ActionKind.MIGRATE  # all moved


def test_allocation_counts_gpus_and_its_copy_is_independent():
    a = Allocation({"a": (0, 1), "b": (4,)}, {"a": (0, 1, 2)})
    assert a.used() == 3 and Allocation().used() == 0
    b = a.copy()
    b.gpus["c"] = (5,)
    b.cores["b"] = (9,)
    assert a.gpus == {"a": (0, 1), "b": (4,)} and a.cores == {"a": (0, 1, 2)}
    assert b.used() == 4 and b.cores == {"a": (0, 1, 2), "b": (9,)}


def test_a_plan_is_its_actions():
    acts = [Action(ActionKind.START, "a", (), (0,)), Action(ActionKind.SHRINK, "b", (1, 2), (1,)),
            Action(ActionKind.SUSPEND, "c", (3,), ())]
    assert len(Plan(acts)) == 3 and list(Plan(acts)) == acts and len(Plan()) == 0
    assert [x.is_resize for x in acts] == [False, True, False]


def test_a_step_plans_only_the_jobs_whose_gpus_change():
    """FIFO on 4 GPUs: a and b (2 each) start; when a finishes and c (1) and d (1) arrive, the plan
    starts c and d on a's GPUs and says nothing about b, which keeps its own."""
    curves = CurveTable.from_points({"m": {1: 1.0, 2: 2.0, 4: 4.0}})
    s = Scheduler(Cluster.for_gpus(4, 4), make_policy("fifo"), curves)
    for jid, req in (("a", 2), ("b", 2)):
        s.submit(JobSpec(jid, 0.0, req, 100.0, "m"), 0.0)
    first = s.step(0.0).plan
    assert [(x.kind, x.job_id, len(x.new)) for x in first] == [(ActionKind.START, "a", 2), (ActionKind.START, "b", 2)]
    b_gpus = s.allocation.gpus["b"]
    s.complete("a", 10.0)
    for jid in ("c", "d"):
        s.submit(JobSpec(jid, 10.0, 1, 100.0, "m"), 10.0)
    second = s.step(10.0).plan
    assert sorted((x.kind, x.job_id) for x in second) == [(ActionKind.START, "c"), (ActionKind.START, "d")]
    assert {g for x in second for g in x.new} == set(range(4)) - set(b_gpus)
    assert s.allocation.gpus["b"] == b_gpus
