"""``coddl simulate`` as a user runs it: a subprocess on a small bundled trace."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CODDL = [sys.executable, "-m", "coddl.cli"]


def coddl(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CODDL, *args], capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sim") / "results"
    r = coddl("simulate", "--trace", "philly", "--vc", "6c71a0", "--jobs", "200", "--gpus", "64",
              "--policies", "fifo,srtf,max-min", "--seed", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "avg JCT" in r.stdout and "max-min" in r.stdout
    return out


def test_writes_every_file(run_dir):
    names = {p.name for p in run_dir.iterdir()}
    assert {"summary.csv", "config.json", "jct_cdf.png", "allocations.png", "utilisation.png",
            "jobs-fifo.csv", "jobs-srtf.csv", "jobs-max-min.csv"} <= names
    for png in ("jct_cdf.png", "allocations.png", "utilisation.png"):
        assert (run_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_summary_figures_are_consistent_with_per_job_files(run_dir):
    summary = {r["policy"]: r for r in csv.DictReader(open(run_dir / "summary.csv"))}
    assert set(summary) == {"fifo", "srtf", "max-min"}
    for pol, row in summary.items():
        jobs = list(csv.DictReader(open(run_dir / f"jobs-{pol}.csv")))
        assert len(jobs) == 200 == int(row["jobs"])
        jct = [float(j["jct"]) for j in jobs]
        assert float(row["avg_jct"]) == pytest.approx(sum(jct) / len(jct), rel=1e-6)
        assert all(float(j["finish"]) >= float(j["arrival"]) for j in jobs)
        assert 0 < float(row["gpu_utilisation"]) <= 1
    # an elastic policy beats rigid FIFO on average JCT on a real trace
    assert float(summary["max-min"]["avg_jct"]) < float(summary["fifo"]["avg_jct"])


def test_config_json_reproduces_the_run_exactly(run_dir, tmp_path):
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["trace"] == "philly" and cfg["vc"] == "6c71a0" and cfg["jobs"] == 200
    again = tmp_path / "again"
    r = coddl("simulate", "--config", str(run_dir / "config.json"), "--out", str(again))
    assert r.returncode == 0, r.stderr
    for pol in ("fifo", "srtf", "max-min"):
        assert (again / f"jobs-{pol}.csv").read_text() == (run_dir / f"jobs-{pol}.csv").read_text()


@pytest.mark.parametrize("args, needle", [
    (["--policies", "nope"], "unknown policy 'nope'; valid policies:"),
    (["--policies", "fifo:bogus=1"], "unknown parameter 'bogus'"),
    (["--trace", "no-such-trace"], "not a bundled trace (bundled: philly, itp"),
    (["--reconfig", "sometimes"], "reconfig: unknown model 'sometimes'"),
])
def test_bad_flags_exit_2_with_one_line(args, needle):
    r = coddl("simulate", "--jobs", "10", *args)
    assert r.returncode == 2
    assert needle in r.stderr
    assert "Traceback" not in r.stderr + r.stdout


def test_bad_config_file_names_the_setting(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"trace": "philly", "gpu": 64}))
    r = coddl("simulate", "--config", str(bad))
    assert r.returncode == 2 and "gpu: unknown setting" in r.stderr
