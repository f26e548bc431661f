"""``coddl experiment``'s flags as a user mistypes them: one line naming the flag, exit code 2, and no
simulation started."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("args, says", [
    (["coddl-nsdi21", "--vcs", "nope"], "--vcs: unknown virtual cluster 'nope'; valid: 6214e9"),
    (["coddl-nsdi21", "--vcs", ","], "--vcs: name at least one virtual cluster: 6214e9"),
    (["aiturbo", "--traces", "x"], "--traces: unknown trace 'x'; valid: philly-6c71a0, itp-cluster02, pollux-1"),
    (["fluid", "--scenarios", ","], "--scenarios: name at least one scenario: few, many, stream"),
    (["fluid", "--policies", ","], "--policies: name at least one policy"),
    (["fluid", "--seeds", ","], "--seeds: name at least one seed"),
    (["fluid", "--seeds", "1,x"], "--seeds: expected comma-separated non-negative integers, got '1,x'"),
    (["fluid", "--seeds", "1,-2"], "--seeds: expected comma-separated non-negative integers, got '1,-2'"),
    (["aiturbo", "--policies", "nope"], "unknown policy 'nope'"),
])
def test_a_bad_flag_is_one_line_and_exit_2(args, says, tmp_path):
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "experiment", *args, "--out", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120, env={"COLUMNS": "400", "PATH": ""})
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists()
