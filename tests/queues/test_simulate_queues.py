"""``coddl simulate --queues``: every policy without and with the teams' quotas, per-queue JCT and quota
attainment worked out by hand, and one run of a Philly sample with its virtual clusters as teams."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coddl.queues.report import queue_stats
from coddl.sim.config import SimConfig
from coddl.sim.run import prepare, run_policy

TRACE = """\
job_id,arrival,num_gpus,duration,user
A1,0,4,36000,ann
A2,0,4,36000,ann
B,3600,4,3600,bob
"""
QUEUES = """\
queues:
  - {name: a, cohort: lab, nominal_gpus: 4, users: [ann]}
  - {name: b, cohort: lab, nominal_gpus: 4, users: [bob]}
"""


def files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "t.csv").write_text(TRACE)
    (tmp_path / "q.yaml").write_text(QUEUES)
    return tmp_path / "t.csv", tmp_path / "q.yaml"


def test_fifo_with_and_without_quotas_by_hand(tmp_path: Path) -> None:
    # 8 GPUs, FIFO (rigid, never preempts). Without queues ann's two 4-GPU, 10-hour jobs hold all 8
    # GPUs and bob's 1-hour job (from 1 h) waits until 10 h: JCT 10 h; bob's team was owed 4 GPUs
    # from 1 h to 11 h (40 GPU-h) and got 4 GPU-h: 10%. With queues bob's team takes its 4 back at
    # 1 h: A2 (the newest) is suspended whole, B runs 1-2 h, A2 resumes and ends at 11 h.
    trace, queues = files(tmp_path)
    cfg = SimConfig.build(trace=str(trace), gpus=8, policies=["fifo"], queues=str(queues))
    prep = prepare(cfg)
    quotas = prep.queues.quotas(8, prep.cluster.total_cpus)
    plain, queued = run_policy(prep, "fifo", cfg, check=True), run_policy(prep, "fifo", cfg, check=True, queued=True)
    assert queued.policy == "fifo+queues"
    fin = {r.spec.job_id: r.finish / 3600 for r in plain.records}
    assert fin == pytest.approx({"A1": 10.0, "A2": 10.0, "B": 11.0})
    fin = {r.spec.job_id: r.finish / 3600 for r in queued.records}
    assert fin == pytest.approx({"A1": 10.0, "A2": 11.0, "B": 2.0})
    a, b, default = queue_stats(plain, prep.queues, quotas, elastic=False)
    assert (b.jobs, b.avg_jct / 3600, b.owed_gpu_hours, b.attainment) == pytest.approx((1, 10.0, 40.0, 0.1))
    assert (a.attainment, a.borrowed_gpu_hours, default.jobs) == pytest.approx((1.0, 40.0, 0))
    a, b, _ = queue_stats(queued, prep.queues, quotas, elastic=False)
    assert (b.avg_jct / 3600, b.owed_gpu_hours, b.attainment) == pytest.approx((1.0, 4.0, 1.0))
    # a: owed 4 GPUs for 11 h, had them; borrowed 4 GPUs for 0-1 h and 2-10 h
    assert (a.owed_gpu_hours, a.attainment, a.borrowed_gpu_hours) == pytest.approx((44.0, 1.0, 36.0))


@pytest.mark.slow
def test_simulate_a_philly_sample_with_its_virtual_clusters_as_teams(tmp_path: Path) -> None:
    qs = tmp_path / "vcs.yaml"
    qs.write_text("queues:\n" + "".join(f"  - {{name: {vc}, cohort: philly, nominal_gpus: 16, accounts: [{vc}]}}\n"
                                        for vc in ("6214e9", "11cb48", "6c71a0")) + "  - {name: default, cohort: philly}\n")
    r = subprocess.run([sys.executable, "-m", "coddl.cli", "simulate", "--trace", "philly", "--jobs", "150",
                        "--gpus", "64", "--policies", "afs-p,fifo", "--queues", str(qs)],
                       capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    table = r.stdout[r.stdout.index("per queue"):]
    rows, run = [], None
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if len(cells) == 9 and cells[1] in ("6214e9", "11cb48", "6c71a0", "default"):
            run = cells[0] or run
            rows.append((run, cells[1], int(cells[3]), cells[8]))
    assert {r[0] for r in rows} == {"afs-p", "fifo", "afs-p+queues", "fifo+queues"}
    jobs = {run: sum(n for r_, _, n, _ in rows if r_ == run) for run, *_ in rows}
    assert len(set(jobs.values())) == 1  # every run has the same jobs
    attained = {(run, q): float(a.rstrip("%")) / 100 for run, q, _, a in rows if a != "-"}
    assert all(0.0 <= a <= 1.0 for a in attained.values())
    for (run, q), a in attained.items():  # with quotas no team gets less of its quota than without
        if run.endswith("+queues") and (run.removesuffix("+queues"), q) in attained:
            assert a >= attained[(run.removesuffix("+queues"), q)] - 0.02


def test_queues_csv(tmp_path: Path) -> None:
    from coddl.cli.simulate import queue_results, write_queue_csv

    trace, queues = files(tmp_path)
    cfg = SimConfig.build(trace=str(trace), gpus=8, policies=["fifo"], queues=str(queues))
    prep = prepare(cfg)
    results = {r.policy: r for r in (run_policy(prep, "fifo", cfg), run_policy(prep, "fifo", cfg, queued=True))}
    path = write_queue_csv(tmp_path, queue_results(prep, results))
    rows = list(csv.DictReader(path.open()))
    got = {(row["run"], row["queue"]): (int(row["jobs"]), round(float(row["attainment"]), 6)) for row in rows
           if row["queue"] != "default"}
    assert got == {("fifo", "a"): (2, 1.0), ("fifo", "b"): (1, 0.1), ("fifo+queues", "a"): (2, 1.0),
                   ("fifo+queues", "b"): (1, 1.0)}


@pytest.mark.parametrize("text, message", [
    ("queues:\n  - name: x\n    nominal_gpus: 65\n", "q.yaml: the queues' nominal quotas add up to 65 GPUs and the cluster has 64"),
    ("queues:\n  - name: x\n    nominal_gpus: 1\n    users: 3\n", "line 4: queues.0.users: input should be a valid list"),
])
def test_a_bad_queue_file_is_one_line_and_exit_2(tmp_path: Path, text: str, message: str) -> None:
    from typer.testing import CliRunner

    from coddl.cli.main import app

    trace, queues = files(tmp_path)
    queues.write_text(text)
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--gpus", "64", "--queues", str(queues)])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output
