"""Shared fixtures of the elastic tests."""

from __future__ import annotations

import pytest

from coddl.elastic.pool import WorkerPool


@pytest.fixture(scope="module")
def pool() -> WorkerPool:
    """A warm worker pool (the fork server preloads torch once per module)."""
    pool = WorkerPool()
    pool.warm()
    return pool
