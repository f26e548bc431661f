"""``coddl estimate`` as a user runs it: subprocesses on a bundled profile (Gavel's three testbeds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CODDL = [sys.executable, "-m", "coddl.cli"]
P100 = "gpu_types: {P100: {speed: 0.8}}\nnodes: [{count: 4, gpu_type: P100, gpus: 4}]\n"


def coddl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CODDL, "estimate", *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("estimate")
    (d / "p100.yaml").write_text(P100)
    r = coddl("calibrate", "gavel", "--on", "gavel-p100", "--cluster", str(d / "p100.yaml"), "--out",
              str(d / "p100.json"))
    assert r.returncode == 0, r.stderr
    assert "between nodes" in r.stdout and "wrote" in r.stdout
    return d


def test_calibrate_writes_the_fabric_and_the_prior(calibrated):
    cal = json.loads((calibrated / "p100.json").read_text())
    assert cal["cluster"] == "gavel-p100" and cal["gpu_types"] == {"P100": 0.8}
    assert cal["fabric"]["inter_gbps"] > 0 and cal["fabric"]["algorithm"] in ("ring", "hierarchical", "tree", "auto")
    assert set(cal["calibrated_on"]) >= {"ResNet-50", "Transformer"}


def test_predict_gives_an_interval_and_corrects_with_measured_rows(calibrated):
    base = ["predict", "gavel", "--calibration", str(calibrated / "p100.json"), "--model", "ResNet-50", "--from",
            "gavel-p100", "--placement", "4", "--placement", "1+1+1+1", "--local-batch", "32", "--json"]
    r = coddl(*base)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [p["placement"] for p in out["placements"]] == ["4", "1+1+1+1"]
    for p in out["placements"]:
        assert 0 < p["low"] < p["steps_per_s"] < p["high"]
        assert p["samples_per_s"] == pytest.approx(p["steps_per_s"] * 32 * 4)
    measured = calibrated / "measured.csv"
    measured.write_text("model,param_bytes,gpu_type,gpus,nodes,local_batch,steps_per_s\n"
                        f"ResNet-50,102400000,P100,4,4,32,{out['placements'][1]['steps_per_s'] / 2}\n")
    r = coddl(*base, "--measured", str(measured))
    assert r.returncode == 0, r.stderr
    corrected = json.loads(r.stdout)
    assert corrected["corrected_with"] == 1
    assert corrected["placements"][1]["steps_per_s"] < out["placements"][1]["steps_per_s"]


@pytest.mark.slow
def test_accuracy_prints_a_table_and_writes_json_and_a_plot(tmp_path):
    r = coddl("accuracy", "gavel", "--points", "4", "--no-bundled-prior", "--json", str(tmp_path / "a.json"),
              "--plot", str(tmp_path / "a.png"))
    assert r.returncode == 0, r.stderr
    assert "gavel-k80" in r.stdout and "Amdahl" in r.stdout
    data = json.loads((tmp_path / "a.json").read_text())
    assert set(data) == {"gavel-k80", "gavel-p100", "gavel-v100"}
    row = data["gavel-p100"][0]
    assert {"before", "after", "linear", "amdahl", "after_two", "amdahl_two", "coverage"} <= set(row)
    assert (tmp_path / "a.png").stat().st_size > 10_000


def test_bad_input_is_one_line_and_exit_code_2(calibrated, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("model,param_bytes,gpu_type,gpus,local_batch,steps_per_s\nm,1e6,P100,two,8,1.0\n")
    cases = [
        (["accuracy", str(bad)], "bad.csv:2: gpus: expected a positive integer, got 'two'"),
        (["accuracy", str(tmp_path / "none.csv")], "none.csv: no such file"),
        (["calibrate", "gavel", "--cluster", str(calibrated / "p100.yaml")], "--on: the tables hold several"),
        (["calibrate", "gavel", "--on", "gavel-k80", "--cluster", str(calibrated / "p100.yaml")],
         "the profiles were measured on K80, which the spec does not define"),
        (["predict", "gavel", "--calibration", str(calibrated / "p100.json"), "--model", "VGG", "--placement", "2",
          "--local-batch", "8"], "--model: no rows of 'VGG'"),
        (["predict", "gavel", "--calibration", str(calibrated / "p100.json"), "--model", "LM", "--from",
          "gavel-p100", "--placement", "2x", "--local-batch", "8"], "--placement: expected GPUs per node"),
        (["predict", "gavel", "--calibration", str(bad), "--model", "LM", "--placement", "2", "--local-batch", "8"],
         "bad.csv: not a calibration written by `coddl estimate calibrate`"),
        # a type the calibration's cluster does not define would be priced at the profiled type's speed
        (["predict", "gavel", "--calibration", str(calibrated / "p100.json"), "--model", "LM", "--from",
          "gavel-p100", "--placement", "2", "--local-batch", "8", "--gpu-type", "H100"],
         "--gpu-type: 'H100' is not a GPU type of p100.json's cluster (P100)"),
        (["predict", "gavel", "--calibration", str(calibrated / "p100.json"), "--model", "LM", "--from",
          "gavel-p100", "--placement", "99999999999999999999", "--local-batch", "8"],
         "--placement: expected GPUs per node"),
    ]
    for args, message in cases:
        r = coddl(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert message in " ".join(r.stderr.split()), (args, r.stderr)
        assert "Traceback" not in r.stderr
