"""``coddl simulate --cluster examples/clusters/mixed.yaml`` as a user runs it: Gavel next to a
type-unaware policy, the estimator rate model by default, fragmentation in the table, and the
resolved settings in config.json so a run reproduces."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIXED = str(ROOT / "examples" / "clusters" / "mixed.yaml")


def coddl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "coddl.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "220"})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mixed") / "results"
    r = coddl("simulate", "--trace", "philly", "--vc", "6c71a0", "--jobs", "150", "--cluster", MIXED,
              "--policies", "gavel,max-min", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "rate=estimator" in r.stdout and "32 V100/32 P100/32 K80" in r.stdout
    assert "fragmentation" in r.stdout and "gavel" in r.stdout
    return out


def test_the_estimator_is_the_default_rate_with_a_cluster_spec_and_is_recorded(run_dir):
    cfg = json.loads((run_dir / "config.json").read_text())
    assert cfg["rate"] == "estimator" and cfg["allow_mixing"] is False
    assert cfg["policies"] == ["gavel", "max-min"]


def test_a_run_reproduces_from_its_config(run_dir):
    first = {r["policy"]: r["avg_jct"] for r in csv.DictReader(open(run_dir / "summary.csv"))}
    again = run_dir.parent / "again"
    r = coddl("simulate", "--config", str(run_dir / "config.json"), "--out", str(again))
    assert r.returncode == 0, r.stderr
    assert {r["policy"]: r["avg_jct"] for r in csv.DictReader(open(again / "summary.csv"))} == first


def test_an_unknown_rate_model_is_a_one_line_error():
    r = coddl("simulate", "--jobs", "5", "--rate", "magic")
    assert r.returncode == 2
    assert "rate: unknown value 'magic'; valid: curves, estimator" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr
