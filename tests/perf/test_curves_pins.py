"""Throughput curves (perf/curves.py) pinned on hand-computed tables: linear interpolation between
measured k, flat beyond the largest, P(0) = 0, padding, appended models and the bundled file's order."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.perf.curves import CODDL_MODEL_ORDER, CurveTable, data_path, load_coddl_curves


def _two() -> CurveTable:
    # a: 2 at k=1, 5 at k=4 -> 3, 4 between; b: measured only at 2 -> 1.5 at 1 (from P(0) = 0), flat after
    return CurveTable.from_points({"a": {4: 5.0, 1: 2.0}, "b": {2: 3.0}})


def test_from_points_interpolates_from_zero_and_holds_flat():
    t = _two()
    assert t.names == ["a", "b"] and t.index == {"a": 0, "b": 1} and t.kmax == 4
    assert t.rate.tolist() == [[0.0, 2.0, 3.0, 4.0, 5.0], [0.0, 1.5, 3.0, 3.0, 3.0]]
    assert t.max_gpus.tolist() == [4, 2] and t.max_gpus.dtype == np.int64
    wide = CurveTable.from_points({"a": {1: 2.0, 2: 4.0}}, kmax=5)
    assert wide.rate.tolist() == [[0.0, 2.0, 4.0, 4.0, 4.0, 4.0]] and wide.kmax == 5
    narrow = CurveTable.from_points({"a": {1: 2.0, 3: 4.0}}, kmax=1)
    assert narrow.kmax == 3 and narrow.rate.tolist() == [[0.0, 2.0, 3.0, 4.0]]


def test_throughput_by_name_or_index_and_past_the_table():
    t = _two()
    assert t.throughput("a", 2) == 3.0 and isinstance(t.throughput("a", 2), float)
    assert t.throughput(1, 1) == 1.5
    assert t.throughput("a", 9) == 5.0 and t.throughput("b", 4) == 3.0
    assert t.throughput("a", 0) == 0.0
    assert t.model_index("b") == 1
    with pytest.raises(KeyError, match=r"unknown model 'c'; known models: a, b"):
        t.throughput("c", 1)


def test_extended_pads_flat_and_leaves_the_original_alone():
    t = _two()
    assert t.extended(4) is t and t.extended(2) is t
    e = t.extended(6)
    assert e.kmax == 6 and e.rate.tolist() == [[0, 2, 3, 4, 5, 5, 5], [0, 1.5, 3, 3, 3, 3, 3]]
    assert e.names == ["a", "b"] and e.index == {"a": 0, "b": 1} and e.max_gpus.tolist() == [4, 2]
    e.names.append("x")
    e.max_gpus[0] = 9
    assert t.names == ["a", "b"] and t.max_gpus.tolist() == [4, 2] and t.kmax == 4


def test_add_model_widens_the_table_when_needed():
    t = _two()
    assert t.add_model("c", {3: 6.0}) == 2
    assert t.rate.tolist()[2] == [0.0, 2.0, 4.0, 6.0, 6.0]  # within kmax: the table keeps its width
    assert t.kmax == 4 and t.max_gpus.tolist() == [4, 2, 3] and t.max_gpus.dtype == np.int64
    assert t.add_model("d", {6: 12.0, 2: 2.0}) == 3
    assert t.kmax == 6 and t.names == ["a", "b", "c", "d"] and t.index["d"] == 3
    assert t.rate.tolist() == [[0, 2, 3, 4, 5, 5, 5], [0, 1.5, 3, 3, 3, 3, 3], [0, 2, 4, 6, 6, 6, 6],
                               [0, 1, 2, 4.5, 7, 9.5, 12]]
    assert t.max_gpus.tolist() == [4, 2, 3, 6] and t.throughput("d", 5) == 9.5
    with pytest.raises(ValueError, match=r"^model 'a' already has a curve$"):
        t.add_model("a", {1: 1.0})


def test_the_bundled_curves_come_in_the_pool_order_and_a_stranger_last(tmp_path):
    t = load_coddl_curves()
    assert t.names == list(CODDL_MODEL_ORDER)
    # VggnetModel256, coddl-curves.csv: 3.020532 s per step on 1 GPU, 0.868694 on 4
    assert t.throughput("VggnetModel256", 1) == pytest.approx(1 / 3.020532)
    assert t.throughput("VggnetModel256", 4) == pytest.approx(1 / 0.868694)
    assert data_path("profiles/coddl-curves.csv").is_file()
    p = tmp_path / "c.csv"
    p.write_text("model,num_gpus,time_per_iter_s\nZed,1,0.5\nZed,2,0.4\nChatbotModel256,1,2\n"
                 "VggnetModel256,1,4\nVggnetModel256,2,2.5\n")
    mine = load_coddl_curves(p)
    assert mine.names == ["VggnetModel256", "ChatbotModel256", "Zed"]
    assert mine.rate.tolist() == [[0, 0.25, 0.4], [0, 0.5, 0.5], [0, 2.0, 2.5]]
    assert mine.max_gpus.tolist() == [2, 1, 2]
    assert load_coddl_curves(str(p)).names == mine.names
