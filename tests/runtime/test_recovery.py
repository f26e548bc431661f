"""The controller killed with SIGKILL and started again on the same state directory: every job is
still there, finished ones stay finished, running ones resume from their checkpoints and finish."""

from __future__ import annotations

import psutil
import pytest
from runtime_live import tiny_job, wait_for

pytestmark = pytest.mark.slow


def alive(pid: int, started: float) -> bool:
    try:
        p = psutil.Process(pid)
        return p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_killed_controller_restarts_with_every_job(server_factory, tmp_path):
    state = tmp_path / "state"
    first = server_factory(state, gpus=2)
    done = first.submit(tiny_job("done", steps=20, max_gpus=2, step_s=0.02))
    before = first.wait_job(done, lambda j: j["status"] == "finished", 120, "finished")
    long = first.submit(tiny_job("long", steps=300, max_gpus=2, step_s=0.08))
    first.wait_job(long, lambda j: j["steps_done"] >= 60, 180, "60 steps done")
    wait_for(lambda: (state / "jobs" / str(long) / "checkpoint.pt").is_file(), 30, "a checkpoint")
    late = first.submit(tiny_job("late", steps=40, max_gpus=2, step_s=0.05))
    orphans = first.job(long)["workers"]
    assert orphans
    # the controller writes attained service each period: wait for a write after at least 2 s of running
    served = first.wait_job(long, lambda j: j["attained_service"] >= 2.0, 60, "service persisted")

    first.kill()
    second = server_factory(state, gpus=2)

    for w in orphans:  # the old workers are gone (dead on their own, or reaped by the new controller)
        assert not alive(w["pid"], w["started"])
    jobs = {j["id"]: j for j in second.admin.get("/jobs").json()}
    assert set(jobs) == {done, long, late}
    after = second.job(done)
    assert (after["status"], after["finished_at"], after["steps_done"]) == ("finished", before["finished_at"], 20)
    assert "recovered" not in [e["kind"] for e in after["events"]]

    job = second.wait_job(long, lambda j: j["status"] == "finished", 300, "finished after the restart")
    assert job["steps_done"] == 300
    kinds = [e["kind"] for e in job["events"]]
    recovered = kinds.index("recovered")
    # it ran before: the restarted controller resumes it, keeping its first start and the service
    # it had received (which least-attained-service policies rank by)
    assert ("planned", "resume") in [(e["kind"], e["action"]) for e in job["events"][recovered:]]
    assert ("planned", "start") not in [(e["kind"], e["action"]) for e in job["events"][recovered:]]
    assert job["started_at"] == served["started_at"]
    assert job["attained_service"] > served["attained_service"]
    # it resumed from its checkpoint, not from step 0
    resumed_at = min(s["step"] for s in job["samples"] if s["at"] > job["events"][recovered]["at"])
    assert resumed_at > 10
    assert second.wait_job(late, lambda j: j["status"] == "finished", 180, "finished")["steps_done"] == 40
