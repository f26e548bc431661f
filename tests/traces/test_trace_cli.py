"""``coddl trace`` run as a user would: a subprocess, exit codes, no traceback on a bad file."""

from __future__ import annotations

import os
import subprocess
import sys
import pytest

APP = "from coddl.cli.trace import app; app()"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", APP, *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "COLUMNS": "120"})


def test_info_bundled_vc():
    r = _run("info", "philly", "--vc", "6c71a0", "--gpus", "64")
    assert r.returncode == 0, r.stderr
    assert "9,953" in r.stdout and "offered load on 64 GPUs" in r.stdout and "0.60" in r.stdout


def test_convert_then_info(tmp_path):
    out = tmp_path / "t.parquet"
    r = _run("convert", "tiresias-60", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"wrote 60 jobs to {out}"
    r = _run("info", str(out))
    assert r.returncode == 0 and "60" in r.stdout


def test_export_writes_a_replayable_workload(tmp_path):
    pytest.importorskip("coddl.sim.workload")
    out = tmp_path / "w.csv"
    r = _run("export", "--trace", "itp", "--vc", "cluster03", "--jobs", "50", "--seed", "1", str(out))
    assert r.returncode == 0, r.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == "job_id,arrival,num_gpus,duration,steps,model,min_gpus,max_gpus,user,group"  # group: the team (VC)
    assert len(lines) == 51
    again = tmp_path / "w2.csv"
    assert _run("export", "--trace", str(out), "--seed", "5", str(again)).returncode == 0
    assert again.read_text() == out.read_text()
    rigid = tmp_path / "r.csv"
    assert _run("export", "--trace", str(out), "--policy-kind", "rigid", str(rigid)).returncode == 0
    row = rigid.read_text().splitlines()[1].split(",")
    assert row[2] == row[6] == row[7]  # num_gpus = min_gpus = max_gpus


@pytest.mark.parametrize("args, message", [
    (["info", "BAD"], "error: bad.csv:3: num_gpus: expected a positive integer, got 'x'"),
    (["info", "nope-trace"], "error: nope-trace: no such file, and not a bundled trace (bundled: philly,"),
    (["info", "itp", "--vc", "zzz"], "error: itp: vc: unknown virtual cluster 'zzz'; known (jobs): cluster04 (15802)"),
    (["convert", "pollux-1", "OUT"], "error: cifar10-0: duration: the native format needs"),
])
def test_user_mistakes_exit_2_with_one_line(tmp_path, args, message):
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,arrival,num_gpus,duration\na,0,1,5\nb,1,x,5\n")
    args = [str(bad) if a == "BAD" else str(tmp_path / "o.csv") if a == "OUT" else a for a in args]
    r = _run(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message)
