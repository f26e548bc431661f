"""Mistakes in training scripts are named, not retried: real jobs on the warm pool (``mistakes.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coddl.elastic.job import ElasticJob, JobConfig, JobPhase
from coddl.elastic.pool import WorkerPool

pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("mistakes.py"))


def run(pool: WorkerPool, job_dir: Path, mistake: str, slots: list[int]):  # noqa: ANN201 - JobReport
    config = JobConfig(job_id=job_dir.name, entry=SCRIPT, job_dir=job_dir, env={"MISTAKE": mistake},
                       report_s=0.05, pg_timeout_s=20.0, checkpoint_s=0.0, start_timeout_s=60.0)
    with ElasticJob(config, pool) as job:
        try:
            job.start(slots)
        except RuntimeError:
            pass  # failed while starting: what the report says is what matters
        return job.wait(timeout=120)


def test_a_script_that_never_opens_a_session_fails_at_once(pool, tmp_path):
    report = run(pool, tmp_path / "no-session", "no-session", [0])
    assert report.phase is JobPhase.FAILED and report.restarts == 0
    assert "ended without opening coddl.elastic.session()" in report.reason


def test_a_script_that_steps_the_optimizer_itself_is_stopped_with_the_reason(pool, tmp_path):
    report = run(pool, tmp_path / "own-step", "own-step", [0, 1])
    assert report.phase is JobPhase.FAILED and report.restarts == 0
    assert "ScriptMistake: the script called optimizer.step() itself" in report.reason
    assert "mistakes.py:" in report.reason


def test_replicas_that_drift_apart_are_detected_from_their_parameter_digests(pool, tmp_path):
    report = run(pool, tmp_path / "drift", "drift", [0, 1])
    assert report.phase is JobPhase.FAILED and report.restarts == 0
    assert "parameters differ at step 10" in report.reason  # nudged at step 3, compared every 10


def test_the_same_failure_after_a_restart_is_not_retried(pool, tmp_path):
    report = run(pool, tmp_path / "raise", "raise", [0])
    assert report.phase is JobPhase.FAILED
    assert report.restarts == 1 and report.failures == 2  # once as a lost worker, then recognised
    assert "RuntimeError: this script fails here (mistakes.py:" in report.reason
    assert "the same failure again" in report.reason


def test_a_failure_that_does_not_come_back_is_retried_and_the_job_finishes(pool, tmp_path):
    report = run(pool, tmp_path / "once", "once", [0])
    assert report.phase is JobPhase.FINISHED and report.restarts == 1 and report.progress.step == 30
