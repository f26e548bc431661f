"""Fixtures of the runtime tests (the helpers live in ``runtime_live``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from runtime_live import Server


@pytest.fixture
def server_factory(tmp_path: Path):
    started: list[Server] = []

    def start(state_dir: Path | None = None, **kw: Any) -> Server:
        s = Server(state_dir or tmp_path / "state", **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.cleanup()
