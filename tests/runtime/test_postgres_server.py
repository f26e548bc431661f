"""The whole server on PostgreSQL (``--database``): a job submitted over HTTP runs to its end, a token
made with ``coddl token create --database`` works, and a controller killed with SIGKILL comes back with
the job. The store's own tests cover PostgreSQL in detail; this is the controller writing to it."""

from __future__ import annotations

import pytest
from runtime_live import coddl, tiny_job

pytestmark = pytest.mark.slow


def test_a_server_on_postgresql_runs_jobs_and_survives_a_kill(server_factory, postgres, tmp_path):
    url = postgres.database()
    state = tmp_path / "state"
    first = server_factory(state, gpus=2, extra=("--database", url))
    assert not (state / "coddl.db").exists()
    done = first.submit(tiny_job("done", steps=20, max_gpus=2, step_s=0.02))
    job = first.wait_job(done, lambda j: j["status"] == "finished", 120, "finished")
    assert job["steps_done"] == 20 and job["samples"] and job["events"][0]["kind"] == "submitted"

    r = coddl("token", "create", "dora", "--state-dir", str(state), "--database", url)
    assert r.returncode == 0, r.stderr
    with first.client(r.stdout.strip()) as dora:
        assert dora.post("/jobs", json=tiny_job("doras", steps=10, step_s=0.02)).status_code == 201

    first.kill()
    second = server_factory(state, gpus=2, extra=("--database", url))
    again = second.job(done)
    assert (again["status"], again["finished_at"], again["steps_done"]) == ("finished", job["finished_at"], 20)
    assert {j["name"] for j in second.admin.get("/jobs").json()} == {"done", "doras"}
