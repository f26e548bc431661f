"""Curves for real jobs before their profile: a measured model keeps its curve, anything else gets the default one."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.perf.curves import CurveTable
from coddl.runtime.models import DEFAULT_CURVE, curve_for, runtime_curves


def test_unknown_models_get_the_conservative_default_curve():
    table = runtime_curves()
    assert curve_for(table, "my-transformer") == DEFAULT_CURVE
    assert curve_for(table, "Resnet50Model128") == "Resnet50Model128"
    m = table.index[DEFAULT_CURVE]
    assert table.throughput(m, 1) == 1.0
    assert table.throughput(m, 8) == pytest.approx(8 / 2.75)
    assert table.max_gpus[m] == 64 and table.kmax >= 64


def test_add_model_pads_existing_curves_flat_and_interpolates_the_new_one():
    table = CurveTable.from_points({"a": {1: 1.0, 2: 1.5}})
    i = table.add_model("b", {1: 2.0, 4: 8.0})
    assert i == 1 and table.names == ["a", "b"]
    assert np.allclose(table.rate[0], [0, 1.0, 1.5, 1.5, 1.5])
    assert np.allclose(table.rate[1], [0, 2.0, 4.0, 6.0, 8.0])
    assert list(table.max_gpus) == [2, 4]
    with pytest.raises(ValueError, match="already has a curve"):
        table.add_model("a", {1: 1.0})
