"""Per-job bookkeeping of a policy, kept as numpy columns keyed by job uid.

Policies that remember something about a job between decisions (queues, time slices, coin-flip
priorities) look it up for all active jobs at once and store it back after deciding; storing
keeps only the jobs passed in, so finished jobs are pruned as a matter of course.
"""

from __future__ import annotations

import numpy as np


class JobBook:
    def __init__(self, **defaults: float) -> None:
        self._defaults = defaults
        self._uid = np.zeros(0, dtype=np.int64)
        self._cols = {name: np.zeros(0) for name in defaults}

    def lookup(self, uid: np.ndarray, **defaults: np.ndarray) -> dict[str, np.ndarray]:
        """Each column for ``uid`` (aligned with it); a job not in the book gets the default given
        here (an array aligned with ``uid``) or the one given at construction."""
        pos = np.searchsorted(self._uid, uid)
        pos = np.minimum(pos, max(self._uid.size - 1, 0))
        known = (self._uid[pos] == uid) if self._uid.size else np.zeros(uid.size, dtype=bool)
        out = {}
        for name, col in self._cols.items():
            default = defaults.get(name, self._defaults[name])
            value = np.where(known, col[pos] if col.size else 0.0, default)
            out[name] = value
        return out

    def store(self, uid: np.ndarray, **cols: np.ndarray) -> None:
        """Replace the book with these jobs' columns (jobs not passed are forgotten)."""
        order = np.argsort(uid, kind="stable")
        self._uid = uid[order]
        self._cols = {name: np.asarray(cols[name], dtype=float)[order] for name in self._cols}
