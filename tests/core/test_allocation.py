from coddl.core.allocation import ActionKind, Allocation, classify, diff


def test_classify_each_kind():
    assert classify((), (1, 2), ever_ran=False) is ActionKind.START
    assert classify((), (1, 2), ever_ran=True) is ActionKind.RESUME
    assert classify((1,), (1, 2), ever_ran=True) is ActionKind.GROW
    assert classify((1, 2, 3), (1, 3), ever_ran=True) is ActionKind.SHRINK
    assert classify((1, 2), (2, 5), ever_ran=True) is ActionKind.MIGRATE
    assert classify((1, 2), (), ever_ran=True) is ActionKind.SUSPEND
    assert classify((1, 2), (1, 2), ever_ran=True) is None


def test_diff_lists_only_changed_jobs_in_id_order():
    cur = Allocation({"a": (0, 1), "b": (2,), "c": (3,)})
    tgt = Allocation({"a": (0, 1), "b": (2, 4), "d": (5,)})
    plan = diff(cur, tgt, ever_ran={"a", "b", "c"})
    assert [(x.kind, x.job_id) for x in plan] == [
        (ActionKind.GROW, "b"), (ActionKind.SUSPEND, "c"), (ActionKind.START, "d")]
