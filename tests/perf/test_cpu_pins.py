"""Synergy's CPU sensitivity (perf/cpu.py) read from a hand-written table: one memory column kept,
core counts sorted, interpolation between them and the nearest measurement held outside."""

from __future__ import annotations

import numpy as np
import pytest

from coddl.perf.cpu import CpuProfile, CpuSensitivity, load_synergy_cpu

TABLE = """model,batch,iter_time_s,cpus,mem_gb,normalized_throughput
a,64,0.5,6,62.5,1.5
a,64,0.5,1,62.5,0.25
a,64,0.5,3,62.5,1.0
a,64,0.5,3,125,9.0
b,32,0.125,2,62.5,0.5
b,32,0.125,4,62.5,1.0
c,16,1.0,1,20.83,0.1
"""


def _synergy(tmp_path):
    p = tmp_path / "synergy.csv"
    p.write_text(TABLE)
    return p


def test_the_proportional_memory_column_is_read_with_sorted_cores(tmp_path):
    s = load_synergy_cpu(_synergy(tmp_path))
    assert s.models == ("a", "b")
    a = s.profiles["a"]
    assert (a.model, a.batch, a.iter_time_s) == ("a", 64, 0.5) and isinstance(a.batch, int)
    assert a.cores == (1.0, 3.0, 6.0) and a.factor == (0.25, 1.0, 1.5)
    assert s.profiles["b"].cores == (2.0, 4.0) and s.profiles["b"].iter_time_s == 0.125


def test_another_memory_column_and_a_column_with_no_rows(tmp_path):
    p = _synergy(tmp_path)
    s = load_synergy_cpu(str(p), memory_gb=125)
    assert s.models == ("a",) and s.profiles["a"].factor == (9.0,)
    assert load_synergy_cpu(p, memory_gb=20.83).models == ("c",)
    with pytest.raises(ValueError, match=r"^synergy.csv: no rows with mem_gb = 7.0$"):
        load_synergy_cpu(p, memory_gb=7.0)


def test_factor_interpolates_and_holds_the_nearest_measurement_outside(tmp_path):
    s = load_synergy_cpu(_synergy(tmp_path))
    assert s.factor("a", 2.0) == pytest.approx(0.625) and isinstance(s.factor("a", 2.0), float)
    assert s.factor("a", 4.5) == pytest.approx(1.25)
    assert s.factor("a", 0.5) == 0.25 and s.factor("a", 24.0) == 1.5
    assert s.factor("b", 3.0) == pytest.approx(0.75)
    assert s.factor("zzz", 0.5) == 1.0 and s.factor("c", 1.0) == 1.0  # no profile at this memory: insensitive


def test_a_profile_evaluates_arrays_too():
    p = CpuProfile("m", 8, 0.1, (1.0, 3.0), (0.5, 1.0))
    assert p.at(2.0) == 0.75 and type(p.at(2.0)) is float  # a plain float, not numpy's scalar (repr np.float64(…))
    out = p.at(np.array([0.0, 2.0, 5.0]))
    assert isinstance(out, np.ndarray) and out.tolist() == [0.5, 0.75, 1.0]
    assert CpuSensitivity({"m": p}).factor("m", 1.5) == pytest.approx(0.625)


def test_the_bundled_table_is_normalised_at_three_cores():
    s = load_synergy_cpu()
    assert len(s.models) == 12 and all(s.factor(m, 3.0) == pytest.approx(1.0) for m in s.models)
