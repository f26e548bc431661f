"""``coddl simulate`` as a user runs it: a subprocess on a small bundled trace."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coddl.errors import ConfigError
from coddl.sim.config import SimConfig

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
    (["--reconfig", "sometimes"], "reconfig: unknown value 'sometimes'; valid: zero, in-place, restart"),
    (["--oversized", "shrug"], "oversized: unknown value 'shrug'"),
    (["--sharing", "squeeze"], "unknown sharing rule 'squeeze'"),
    (["--policies", "fifo,aiturbo", "--sharing", "pack"],
     "sharing: policy aiturbo assigns each job its CPU cores, which jobs sharing a GPU cannot have"),
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


def test_a_wrongly_typed_config_setting_is_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"trace": "philly", "jobs": "ten"}))
    r = coddl("simulate", "--config", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip() == "error: config.json: jobs: input should be a valid integer, got 'ten'"


def test_jobs_larger_than_the_cluster_are_named_before_simulating_and_skipped(tmp_path):
    # the first 300 jobs of 6c71a0 include three 16-GPU jobs; the cluster has 8 GPUs
    out = tmp_path / "small"
    r = coddl("simulate", "--trace", "philly", "--vc", "6c71a0", "--jobs", "300", "--gpus", "8",
              "--policies", "fifo,max-min", "--out", str(out))
    assert r.returncode == 0, r.stderr
    big = ["philly-32961", "philly-32936", "philly-32749"]
    line = next(x for x in r.stdout.splitlines() if x.startswith("skipped"))
    assert line == f"skipped 3 jobs (needs 16 GPUs, the cluster has 8): {', '.join(big)}"
    assert r.stdout.index("skipped 3 jobs") < r.stdout.index("fifo ")  # named before the simulation
    rows = list(csv.DictReader(open(out / "skipped.csv")))
    assert [(x["job_id"], x["gpus"]) for x in rows] == [(j, "16") for j in big]
    for pol in ("fifo", "max-min"):
        ids = {x["job_id"] for x in csv.DictReader(open(out / f"jobs-{pol}.csv"))}
        assert len(ids) == 297 and not ids & set(big)
    capped = coddl("simulate", "--trace", "philly", "--vc", "6c71a0", "--jobs", "300", "--gpus", "8",
                   "--policies", "fifo", "--oversized", "cap", "--out", str(tmp_path / "cap"))
    assert capped.returncode == 0 and "skipped" not in capped.stdout
    assert len(list(csv.DictReader(open(tmp_path / "cap" / "jobs-fifo.csv")))) == 300
    failed = coddl("simulate", "--trace", "philly", "--vc", "6c71a0", "--jobs", "300", "--gpus", "8",
                   "--policies", "fifo", "--oversized", "fail")
    assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1
    assert "3 jobs need more GPUs than the cluster has (8): philly-32961 (16)" in failed.stderr


def test_summary_has_fairness_columns_in_range(tmp_path):
    # the first 60 Philly jobs of every VC: the trace names no users, so Jain's index is over its 8 VCs
    out = tmp_path / "fair"
    r = coddl("simulate", "--trace", "philly", "--jobs", "60", "--gpus", "16",
              "--policies", "fifo,afs-p", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "mean ρ" in r.stdout and "ρ > 1.5" in r.stdout and "Jain (groups)" in r.stdout
    assert "over 8 groups (the trace names no users" in r.stdout
    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert [x["policy"] for x in rows] == ["fifo", "afs-p"]
    for row in rows:
        mean, top = float(row["mean_rho"]), float(row["max_rho"])
        assert 0 < mean <= top < float("inf")
        assert 0 <= float(row["share_rho_over_1_5"]) <= float(row["share_rho_over_1"]) <= 1
        assert 1 / 8 <= float(row["jain_users"]) <= 1 and row["fairness_groups"] == "group"
        rho = [float(j["rho"]) for j in csv.DictReader(open(out / f"jobs-{row['policy']}.csv"))]
        assert len(rho) == 60
        assert (sum(rho) / 60, max(rho)) == pytest.approx((mean, top), abs=1e-4)


@pytest.mark.parametrize("setting, value, message", [
    ("gpus", 99999999999999999999, "gpus: input should be less than or equal to 1048576, got 99999999999999999999"),
    ("gpus_per_node", 65537, "gpus_per_node: input should be less than or equal to 65536, got 65537"),
    ("seed", -1, "seed: input should be greater than or equal to 0, got -1"),
])
def test_a_size_past_any_cluster_or_a_negative_seed_is_a_setting_error(setting, value, message):
    # they were tracebacks: an OverflowError building 1e20 GPUs, a MemoryError at 9e18, numpy's
    # ValueError for a negative seed
    with pytest.raises(ConfigError) as e:
        SimConfig.build(**{setting: value})
    assert str(e.value) == message
    assert SimConfig.build(gpus=2**20, gpus_per_node=2**16, seed=0).gpus == 2**20
