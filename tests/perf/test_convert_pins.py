"""The converters from published measurements (perf/convert.py) and Gavel's throughputs as typed
data (perf/profiles.py), pinned on small hand-written copies of the original files, and the
bundled conversions re-written byte for byte."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from coddl.perf.convert import GAVEL_PARAMS, POLLUX_PARAMS, gavel_table, pollux_table, write_bundled
from coddl.perf.curves import data_path
from coddl.perf.profiles import load_gavel_throughputs

GAVEL = {  # an unconsolidated table before a consolidated one: skipping it must not stop the reading
    "v100": {
        "('ResNet-50 (batch size 32)', 1)": {"null": 10.0, "('A3C', 1)": [9.0, 4.0]},
        "('ResNet-50 (batch size 32)', 4)": {"null": 36.0},
        "('A3C', 1)": {"null": 5.0},
        "('LM (batch size 5)', 2)": {"null": 0.0},
        "('Transformer (batch size 16)', 1)": {"null": 4.0},
    },
    "v100_unconsolidated": {
        "('ResNet-50 (batch size 32)', 1)": {"null": 10.0},
        "('ResNet-50 (batch size 32)', 2)": {"null": 16.0},
    },
    "k80": {
        "('ResNet-50 (batch size 32)', 1)": {"null": 2.5},
        "('A3C', 1)": {"null": 1.0},
    },
}


@pytest.fixture
def gavel_json(tmp_path: Path) -> Path:
    p = tmp_path / "throughputs.json"
    p.write_text(json.dumps(GAVEL))
    return p


def test_gavel_throughputs_are_the_consolidated_solo_steps(gavel_json):
    g = load_gavel_throughputs(gavel_json)
    assert g.steps == {("V100", "ResNet-50 (batch size 32)", 1): 10.0, ("V100", "ResNet-50 (batch size 32)", 4): 36.0,
                       ("V100", "A3C", 1): 5.0, ("V100", "LM (batch size 5)", 2): 0.0,
                       ("V100", "Transformer (batch size 16)", 1): 4.0,
                       ("K80", "ResNet-50 (batch size 32)", 1): 2.5, ("K80", "A3C", 1): 1.0}
    assert g.gpu_types == ("K80", "V100")
    assert g.job_types == ("A3C", "LM (batch size 5)", "ResNet-50 (batch size 32)", "Transformer (batch size 16)")
    assert g.speed_by_type("A3C") == {"K80": 0.2, "V100": 1.0}
    assert g.speed_by_type("ResNet-50 (batch size 32)", reference="K80") == {"K80": 1.0, "V100": 4.0}
    assert g.speed_by_type("Transformer (batch size 16)") == {"V100": 1.0}
    assert load_gavel_throughputs(str(gavel_json)).steps == g.steps


def test_the_bundled_gavel_throughputs():
    g = load_gavel_throughputs()
    assert g.gpu_types == ("K80", "P100", "V100") and len(g.job_types) == 26
    assert g.steps[("V100", "ResNet-18 (batch size 16)", 1)] == pytest.approx(32.353384328946916)


def test_gavel_rows_one_iteration_is_k_steps_and_unconsolidated_runs_span_k_nodes(gavel_json):
    t = gavel_table(gavel_json)
    assert t.source == "gavel"
    assert t.cluster == ["gavel-k80"] * 2 + ["gavel-v100"] * 5
    assert t.model == ["A3C", "ResNet-50", "A3C", "ResNet-50", "ResNet-50", "ResNet-50", "Transformer"]
    assert t.gpu_type == ["K80", "K80", "V100", "V100", "V100", "V100", "V100"]
    assert t.gpus.tolist() == [1, 1, 1, 1, 2, 4, 1]
    assert t.placement == [(1,), (1,), (1,), (1,), (1, 1), (4,), (1,)]
    assert t.local_batch.tolist() == [1.0, 32.0, 1.0, 32.0, 32.0, 32.0, 16.0]
    assert t.steps_per_s.tolist() == [1.0, 2.5, 5.0, 10.0, 8.0, 9.0, 4.0]
    assert t.param_bytes.tolist() == [4 * GAVEL_PARAMS[m] for m in t.model]
    assert t.param_bytes[1] == 4 * 25.6e6 and all(math.isnan(c) for c in t.comm_s)
    assert t.kind == ["job"] * 7


def _pollux_root(tmp_path: Path) -> Path:
    root = tmp_path / "pollux"
    for app in POLLUX_PARAMS:
        (root / app).mkdir(parents=True)
        (root / app / "placements.csv").write_text("placement,local_bsz,step_time,sync_time\n12,16,0.5,0.1\n")
        (root / app / "scalability.csv").write_text(
            "num_nodes,num_replicas,local_bsz,step_time,sync_time\n2,5,8,0.25,0.05\n")
    return root


def test_pollux_rows_from_placements_and_scalability(tmp_path):
    root = _pollux_root(tmp_path)
    for t in (pollux_table(root), pollux_table(str(root))):
        assert t.source == "pollux" and len(t) == 12
        assert t.model == [a for a in POLLUX_PARAMS for _ in range(2)]
        assert set(t.cluster) == {"pollux-t4"} and set(t.gpu_type) == {"T4"}
        assert t.gpus.tolist() == [3, 5] * 6
        assert t.placement == [(2, 1), (3, 2)] * 6
        assert t.local_batch.tolist() == [16.0, 8.0] * 6
        assert t.steps_per_s.tolist() == [2.0, 4.0] * 6
        assert t.comm_s.tolist() == [0.1, 0.05] * 6
        assert t.param_bytes.tolist() == [4.0 * POLLUX_PARAMS[a] for a in POLLUX_PARAMS for _ in range(2)]
        assert t.param_bytes[0] == 4 * 110e6


def test_write_bundled_rewrites_the_bundled_files_byte_for_byte(tmp_path):
    counts = write_bundled(tmp_path)
    assert counts == {"pollux-t4.csv": 7103, "gavel.csv": 411}
    for name in counts:
        assert (tmp_path / name).read_bytes() == data_path(f"profiles/{name}").read_bytes()
    assert write_bundled(str(tmp_path)) == counts
