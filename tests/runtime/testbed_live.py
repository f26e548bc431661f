"""The two-node testbed for tests: ``coddl testbed up`` / ``down`` as a user runs them, under a name of
the test session's own, and a check that nothing of it is left behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from coddl.runtime.testbed import cluster as tb
from coddl.runtime.testbed.netns import list_namespaces, unavailable_reason

BANDWIDTH_MBIT = 200  # the session testbed's link: slow enough that a job's all-reduce feels it


def skip_reason() -> str | None:
    reason = unavailable_reason()
    if reason is None and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "ray")):
        reason = "Ray's command-line tool is not installed in this environment"
    return reason


def leftovers(prefix: str) -> list[str]:
    """What a torn-down testbed must not leave: its namespaces, its host-side links, its files."""
    out = list_namespaces(prefix)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    out += [line.split(":")[1].strip() for line in links.splitlines() if prefix in line]
    out += [str(p) for p in (tb.state_file(prefix), tb.STATE_ROOT / f"{prefix}-ray", tb.auth_token_path(prefix).parent)
            if p.exists()]
    return out


def coddl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coddl.cli", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200"})


def testbed_fixture(prefix: str):  # noqa: ANN201 - a generator for a pytest fixture
    reason = skip_reason()
    if reason:
        pytest.skip(f"no network-namespace testbed: {reason}")
    try:
        r = coddl("testbed", "up", "--name", prefix, "--nodes", "2", "--bandwidth", f"{BANDWIDTH_MBIT}mbit",
                  "--gpus-per-node", "2", "--cpus-per-node", "1")
        assert r.returncode == 0, r.stderr[-3000:]
        yield tb.load(prefix)
    finally:
        r = coddl("testbed", "down", "--name", prefix)
        assert r.returncode == 0, r.stderr[-2000:]
        assert leftovers(prefix) == []
