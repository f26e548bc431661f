"""Some rows of a ``JobsView``, looking like a whole one to a policy: how one queue's jobs are handed
to the job policy without the policy knowing there are other queues."""

from __future__ import annotations

from functools import cached_property
from typing import Callable

import numpy as np

from coddl.policies.base import JobsView

# JobsView attributes that are one value per row (indexed by the subset) and those that are not
ROW_COLUMNS = frozenset(JobsView._PLAIN) | frozenset(
    {name for name, v in vars(JobsView).items() if isinstance(v, cached_property)}) - {"by_submission"}


class RowsView:
    """``rows`` (ascending row indices) of ``parent``; every per-row column is the parent's, indexed."""

    def __init__(self, parent: JobsView, rows: np.ndarray) -> None:
        self._parent = parent
        self._rows = rows
        self._memo: dict[str, np.ndarray] = {}
        every = len(rows) == len(parent)  # ascending and distinct: all of them, in order (one queue)
        self.ids = list(parent.ids) if every else [parent.ids[r] for r in rows.tolist()]
        if hasattr(parent, "specs"):
            self.specs = list(parent.specs) if every else [parent.specs[r] for r in rows.tolist()]

    def __len__(self) -> int:
        return len(self._rows)

    def memo(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """``JobsView.memo`` for these rows (a view lives for one call of the queue's policy)."""
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = compute()
        return got

    def __getattr__(self, name: str) -> np.ndarray:
        if name in ROW_COLUMNS:
            col = getattr(self._parent, name)[self._rows]
        elif name == "by_submission":  # the parent's submission order, restricted to these rows
            pos = np.full(len(self._parent), -1, dtype=np.int64)
            pos[self._rows] = np.arange(len(self._rows))
            order = pos[self._parent.by_submission]
            col = order[order >= 0]
        elif name == "arrivals_in_order":
            return self._parent.arrivals_in_order
        else:
            raise AttributeError(name)
        setattr(self, name, col)
        return col
