"""Shared fixtures (small hand-computable curves) and the suite's parallel plumbing.

``make test`` runs the suite on several pytest-xdist workers (``--dist loadgroup``). Two rules keep
that as cheap and as safe as a serial run:

- tests that share a module- or class-scoped fixture (a live server, a Ray cluster, a testbed, a warm
  worker pool) go to one worker together, so that the fixture is built once, not once per worker; a
  module fixture parametrized over the store's backends makes one group per backend;
- end-to-end tests (``slow``) are handed out first, so that no long test starts last while the other
  workers sit idle.

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

SHARED_SCOPES = ("class", "module", "package")


@pytest.fixture
def linear_curves() -> CurveTable:
    """P(k) = k iterations/s for k ≤ 4: makes JCTs easy to work out by hand."""
    return CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})


def shared_fixture_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that uses a module-, class- or package-scoped fixture: its module, and
    the parameters of those fixtures (one instance each); None for a test that shares nothing."""
    defs = getattr(item, "_fixtureinfo", None)
    if defs is None:
        return None
    shared = sorted(name for name, fds in defs.name2fixturedefs.items() if fds and fds[-1].scope in SHARED_SCOPES)
    if not shared:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    return "-".join([item.nodeid.split("::")[0], *(f"{n}={params[n]}" for n in shared if n in params)])


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]):  # noqa: ANN201 - a wrapper
    """Group before every other hook (xdist turns the marks into the node ids' group suffixes); order
    after them (pytest orders by fixtures first): modules with an end-to-end test first, each kept whole
    so that its module fixtures are still built once in a serial run."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (group := shared_fixture_group(item)):
            item.add_marker(pytest.mark.xdist_group(group))
    result = yield
    slow_modules = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_modules)  # stable
    return result


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
