"""The store's own settings: the epoch and small key-values other modules keep beside the tables."""

from __future__ import annotations

import time

from coddl.runtime.store.connection import Database
from coddl.runtime.store.schema import MetaRow


class MetaStore(Database):
    def epoch(self) -> float:
        """Wall-clock time the state was created: the scheduler's clock is seconds since then, so
        arrivals and ``now`` stay comparable across controller restarts."""
        with self._w() as s:
            row = s.get(MetaRow, "epoch")
            if row is None:
                row = MetaRow(key="epoch", value=repr(time.time()))
                s.add(row)
            return float(row.value)

    def get_meta(self, key: str) -> str | None:
        with self._r() as s:
            row = s.get(MetaRow, key)
            return None if row is None else row.value

    def set_meta(self, key: str, value: str) -> None:
        with self._w() as s:
            s.merge(MetaRow(key=key, value=value))
