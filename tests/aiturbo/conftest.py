"""Shared fixtures: curves for Synergy's models, so the CPU-aware rate model knows every job's model."""

from __future__ import annotations

import pytest

from coddl.perf.cpu import load_synergy_cpu
from coddl.perf.curves import CurveTable


@pytest.fixture(scope="session")
def synergy():
    return load_synergy_cpu()


@pytest.fixture(scope="session")
def synergy_curves(synergy) -> CurveTable:
    """P(k) = k / (1 + 0.1 (k − 1)) ÷ Synergy's 1-GPU step time, k ≤ 16: concave, like real scaling."""
    return CurveTable.from_points({m: {k: k / (1 + 0.1 * (k - 1)) / p.iter_time_s for k in range(1, 17)}
                                   for m, p in synergy.profiles.items()})
