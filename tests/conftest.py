"""Shared fixtures (small hand-computable curves) and the suite's parallel plumbing.

``make test`` runs the suite on several pytest-xdist workers, a whole module per worker (``--dist
loadfile``: a module fixture — a live server, a Ray cluster, the testbed — is built once, not once per
worker), and modules with end-to-end tests (``slow``) are handed out first, so that no long module
starts last while the other workers sit idle.
"""

from __future__ import annotations

import pytest

from coddl.perf.curves import CurveTable


@pytest.fixture
def linear_curves() -> CurveTable:
    """P(k) = k steps/s for k ≤ 4: makes JCTs easy to work out by hand."""
    return CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules with an end-to-end test first, each kept whole (stable sort), so that pytest-xdist hands
    out the long ones before the short ones that fill the gaps, and a module's fixtures are still
    built once in a serial run."""
    slow_modules = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow_modules)
