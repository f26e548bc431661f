"""The Philly digest, loaded once for the whole trace test suite."""

from __future__ import annotations

import pytest

from coddl.traces import Trace, load_trace


@pytest.fixture(scope="session")
def philly() -> Trace:
    return load_trace("philly")
