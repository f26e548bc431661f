"""A queue's view of its jobs must answer everything a policy may ask of the whole ``JobsView``:
a policy does not know it runs inside a queue (SRTF and SRSF once died over queues on ``memo``)."""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pytest

from coddl.core import JobSpec
from coddl.core.table import JobTable
from coddl.policies.base import JobsView
from coddl.queues.view import RowsView


def jobs_view(n: int) -> JobsView:
    table = JobTable()
    for i in range(n):
        table.add(JobSpec(f"j{i}", float(i), 1 + i % 3, 1e6 * (i + 1), "resnet50", user=f"u{i % 2}"),
                  uid=i, model=0, max_gpus=4, now=float(i))
    return JobsView(table, 10.0)


def public(cls: type) -> list[str]:
    return [n for n in dir(cls) if not n.startswith("_")]


def test_a_queue_view_answers_every_public_name_of_the_whole_view() -> None:
    parent = jobs_view(6)
    rows = np.array([1, 3, 4])
    view = RowsView(parent, rows)
    names = set(public(JobsView)) | set(JobsView._PLAIN) | {"ids", "specs"}
    missing = [n for n in sorted(names) if not hasattr(view, n)]
    assert not missing, f"RowsView lacks {missing}"
    for name in JobsView._PLAIN + tuple(n for n, v in vars(JobsView).items() if isinstance(v, cached_property)
                                        and n != "by_submission"):
        np.testing.assert_array_equal(getattr(view, name), getattr(parent, name)[rows], err_msg=name)
    assert view.ids == ["j1", "j3", "j4"] and len(view) == 3
    assert [sp.job_id for sp in view.specs] == ["j1", "j3", "j4"]  # who submitted them: the queue's members
    assert view.by_submission.tolist() == [0, 1, 2]
    whole = RowsView(parent, np.arange(6))  # one queue: every row
    assert whole.ids == parent.ids and whole.specs == parent.specs
    with pytest.raises(AttributeError, match="no_such_column"):  # a policy's typo names itself
        view.no_such_column  # noqa: B018


def test_a_queue_view_memo_is_its_own() -> None:
    parent = jobs_view(4)
    parent.memo("k", lambda: np.array([9]))
    view = RowsView(parent, np.array([0, 2]))
    calls = []
    got = view.memo("k", lambda: calls.append(1) or np.array([1, 2]))
    assert got.tolist() == [1, 2] and view.memo("k", lambda: np.array([0])).tolist() == [1, 2] and calls == [1]
