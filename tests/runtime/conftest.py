"""Fixtures of the runtime tests (the helpers live in ``runtime_live`` and ``postgres``).

The store runs against both databases it supports: ``store_url`` is parametrized over SQLite (a file
in the test's tmp dir) and PostgreSQL (a fresh database on one throwaway server per session — per
worker under pytest-xdist, each on its own port and directory — started only when a test asks for
it). Without PostgreSQL's binaries those tests skip, except in CI (``CI`` set), where a missing server
is a failure rather than a silently smaller suite."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest
from postgres import BACKENDS, PostgresServer, PostgresUnavailable, backend_url
from runtime_live import ACCOUNTS, Server

from coddl.runtime.identity import remove_accounts


@pytest.fixture(scope="session", autouse=True)
def job_accounts() -> Iterator[None]:
    """A root server creates a Unix account per coddl user: each server of this process has a prefix
    of its own (``runtime_live.ACCOUNTS``) and removes its accounts; whatever a server left (one killed
    with a worker still running) goes at the end of the session. Other processes' accounts stay."""
    yield
    if os.geteuid() == 0:
        remove_accounts(ACCOUNTS)


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


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    try:
        server = PostgresServer()
    except PostgresUnavailable as e:
        missing = str(e)
    else:
        try:
            yield server
        finally:
            server.stop()
        return
    if os.environ.get("CI", "").lower() not in ("", "0", "false"):
        pytest.fail(f"PostgreSQL is required in CI: {missing}", pytrace=False)
    pytest.skip(f"PostgreSQL not available: {missing}")


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request, request.param, tmp_path)


@pytest.fixture(scope="module")
def testbed():
    """Two Ray nodes in network namespaces behind a 200 Mbit/s link, torn down (and checked) after the module."""
    from testbed_live import testbed_fixture

    yield from testbed_fixture(f"cdtb{os.getpid()}")
