"""Shared fixtures (small hand-computable curves) and the suite's parallel plumbing.

``make test`` runs the suite on several pytest-xdist workers, a whole module per worker (``--dist
loadfile``: a module fixture — a live server, a Ray cluster, the testbed — is built once, not once per
worker), and modules with end-to-end tests (``slow``) are handed out first, so that no long module
starts last while the other workers sit idle.

Machine-wide state that tests create (the ``coddl-*`` Unix accounts a root server makes for job
owners) is removed by the process that runs the whole session — the xdist controller, or pytest
itself in a serial run — after every test has ended, never by one worker while another still uses it.
"""

from __future__ import annotations

import os
import pwd
import subprocess

import psutil
import pytest

from coddl.perf.curves import CurveTable


@pytest.fixture
def linear_curves() -> CurveTable:
    """P(k) = k iterations/s for k ≤ 4: makes JCTs easy to work out by hand."""
    return CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with an end-to-end test first, each kept whole (stable sort), so that pytest-xdist hands
    out the long ones before the short ones that fill the gaps, and a module's fixtures are still
    built once in a serial run."""
    slow_modules = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_modules)


def runs_the_whole_session(config: pytest.Config) -> bool:
    return not hasattr(config, "workerinput")  # an xdist worker runs a share of it


def pytest_sessionstart(session: pytest.Session) -> None:
    if runs_the_whole_session(session.config):
        session.config.stash[ACCOUNTS_BEFORE] = {p.pw_name for p in pwd.getpwall()}


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A root server creates a Unix account per coddl user (``coddl-NAME``): remove the ones this
    session created, so that the machine ends as it began."""
    before = session.config.stash.get(ACCOUNTS_BEFORE, None)
    if before is None or os.geteuid() != 0:
        return
    in_use = {uid for proc in psutil.process_iter(["uids"]) if proc.info["uids"] for uid in proc.info["uids"]}
    for p in pwd.getpwall():  # one still running a process belongs to another session (another checkout's)
        if p.pw_name.startswith("coddl-") and p.pw_name not in before and p.pw_uid not in in_use:
            subprocess.run(["userdel", p.pw_name], capture_output=True)


ACCOUNTS_BEFORE = pytest.StashKey[set]()
