"""Command jobs (``coddl.elastic.gang``): a torchrun-style gloo script (``gang_script.py``) run as a
rigid gang of real processes from the warm pool, confined as a job is, then preempted and resized by
restart; programs that ignore SIGTERM or fail on their own."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from coddl.elastic.gang import CommandJob, GangConfig
from coddl.elastic.job import JobPhase
from coddl.elastic.sandbox import Confinement
from coddl.runtime.isolation import installation

pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("gang_script.py"))


def starts(job_dir: Path) -> list[dict]:
    path = job_dir / "starts.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(cond, timeout: float, what: str):  # noqa: ANN001, ANN201
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (got := cond()):
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def step(job_dir: Path) -> int:
    try:
        return json.loads((job_dir / "ckpt.json").read_text())["step"]
    except (OSError, ValueError):
        return 0


def test_a_torchrun_style_script_runs_as_a_confined_gang_is_preempted_and_resized_by_restart(pool, tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    script = shutil.copy(SCRIPT, job_dir)  # the user's script, where the confined job can read it
    config = GangConfig(job_id="g", program=sys.executable, args=(str(script),), job_dir=job_dir,
                        env={"STEPS": "60", "STEP_S": "0.05"}, grace_s=20.0, restartable=True,
                        confinement=Confinement(job_dir=str(job_dir), hide=(str(tmp_path),), expose=installation()))
    with CommandJob(config, pool) as job:
        job.start([0, 1])
        first = wait_for(lambda: len(s := starts(job_dir)) == 2 and s, 120, "both ranks to start")
        assert sorted(int(s["env"]["RANK"]) for s in first) == [0, 1]
        for s in first:
            e = s["env"]
            assert (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["MASTER_ADDR"]) == ("2", "2", "127.0.0.1")
            assert e["LOCAL_RANK"] == e["RANK"] == e["CUDA_VISIBLE_DEVICES"]
            assert e["TORCHELASTIC_RESTART_COUNT"] == "0" and int(e["MASTER_PORT"]) > 0
            assert s["sum"] == 1.0 and s["from_step"] == 0  # 0 + 1: the group formed
            assert s["cwd"] == str(job_dir)
        assert len({s["env"]["MASTER_PORT"] for s in first}) == 1
        wait_for(lambda: step(job_dir) >= 5, 60, "five steps")

        job.resize([0, 1, 2])  # SIGTERM, every rank stops at one step, then three ranks resume
        term = [(job_dir / f"term-{r}.txt").read_text().split() for r in (0, 1)]
        assert term[0] == term[1] and term[0][0] == "2", term  # both stopped at the same step, cleanly
        stopped_at = int(term[0][1])
        again = wait_for(lambda: len(s := starts(job_dir)) == 5 and s[2:], 120, "three ranks to restart")
        for s in again:
            assert s["env"]["WORLD_SIZE"] == "3" and s["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"
            assert s["sum"] == 3.0 and s["from_step"] == stopped_at
        assert job.poll().slots == (0, 1, 2)
        report = job.wait(timeout=120)
    assert report.phase is JobPhase.FINISHED and report.failures == 0, report
    assert step(job_dir) == 60


def test_a_program_that_ignores_sigterm_is_killed_after_its_grace_period(pool, tmp_path):
    job_dir = tmp_path / "job"
    config = GangConfig(job_id="t", program="bash", args=("-c", "trap '' TERM; echo up; sleep 300 & wait"),
                        job_dir=job_dir, grace_s=1.0)
    with CommandJob(config, pool) as job:
        job.start([0])
        log = job_dir / "logs" / "rank0.log"
        wait_for(lambda: log.exists() and "up" in log.read_text(), 60, "the program to start")
        pid = job.worker_pids()[0]
        t0 = time.monotonic()
        job.stop()
        assert time.monotonic() - t0 >= 1.0
        assert job.poll().phase is JobPhase.STOPPED and not job.worker_pids()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_failing_rank_fails_a_rigid_job_with_its_exit_code_and_stops_the_others(pool, tmp_path):
    job_dir = tmp_path / "job"
    config = GangConfig(job_id="f", program="bash", job_dir=job_dir, grace_s=5.0,
                        args=("-c", 'if [ "$RANK" = 1 ]; then exit 3; fi; sleep 300 & wait'))
    with CommandJob(config, pool) as job:
        job.start([0, 1])
        report = job.wait(timeout=60)
    assert report.phase is JobPhase.FAILED and report.restarts == 0
    assert report.reason.startswith("rank 1 exited with code 3"), report.reason


def test_a_program_that_does_not_exist_is_named(pool, tmp_path):
    config = GangConfig(job_id="n", program="no-such-program-here", job_dir=tmp_path / "job")
    with CommandJob(config, pool) as job:
        job.start([0])
        report = job.wait(timeout=60)
    assert report.phase is JobPhase.FAILED and "code 127" in report.reason
    assert "cannot run 'no-such-program-here'" in (tmp_path / "job" / "logs" / "rank0.log").read_text()
