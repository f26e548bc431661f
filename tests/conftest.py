"""Shared fixtures: small hand-computable curves and workloads."""

from __future__ import annotations

import pytest

from coddl.perf.curves import CurveTable


@pytest.fixture
def linear_curves() -> CurveTable:
    """P(k) = k iterations/s for k ≤ 4: makes JCTs easy to work out by hand."""
    return CurveTable.from_points({"lin": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}})
