"""A job that can never fit the cluster (more GPUs at once than any GPU type has): refused at
submission by default, or held — queued with the reason — under ``--too-large hold``; a held job
never reaches the policy, so it cannot stall a strict-order queue, and a server on a larger cluster
runs it. The end-to-end test starts from a store with rows an earlier version wrote, which the
controller must fail with a reason rather than stop on."""

from __future__ import annotations

import pytest
from api_server import live_api
from runtime_live import TINY_JOB, Server, coddl, tiny_job, wait_for
from test_legacy_rows import SPEC, insert_job, spec_sql
from typer.testing import CliRunner

from coddl.cli.main import app
from coddl.core.cluster import Cluster, Node
from coddl.runtime.limits import ApiLimits, fit_problem
from coddl.runtime.store import Store, sqlite_url


def test_the_fit_rule_counts_the_largest_gpu_type():
    one_type = Cluster.for_gpus(12, 8)
    assert fit_problem(one_type, 12) is None
    assert fit_problem(one_type, 13) == "needs 13 GPUs at once and the cluster has 12 GPUs"
    mixed = Cluster(nodes=(Node("a", 8, "V100"), Node("b", 8, "V100"), Node("c", 8, "K80")))
    assert fit_problem(mixed, 16) is None
    assert fit_problem(mixed, 17) == "needs 17 GPUs at once and the cluster has at most 16 GPUs of one type"


def test_hold_accepts_the_job_with_the_reason_as_its_message(tmp_path):
    store = Store.for_state_dir(tmp_path)
    with live_api(store, tmp_path, ApiLimits(too_large="hold"), gpus=4) as api:
        r = api.clients["alice"].post("/jobs", json=tiny_job("big", 10, min_gpus=5, max_gpus=8))
        assert r.status_code == 201
        assert r.json()["status"] == "queued"
        assert r.json()["message"] == ("held: needs 5 GPUs at once and the cluster has 4 GPUs; it waits for a "
                                       "larger cluster")
        assert api.clients["alice"].post("/jobs", json=tiny_job("fits", 10, min_gpus=4)).json()["message"] is None
        (tmp_path / "big.yaml").write_text(f"name: big\ncommand: python {TINY_JOB}\nsteps: 10\nmin_gpus: 6\n")
        r = CliRunner().invoke(app, ["submit", str(tmp_path / "big.yaml"), "--server", api.url,
                                     "--token", api.tokens["bob"]])
        assert r.exit_code == 0 and "held: needs 6 GPUs at once and the cluster has 4 GPUs" in " ".join(r.output.split())
    store.close()


@pytest.mark.slow
def test_a_server_holds_too_large_jobs_fails_legacy_rows_and_runs_held_jobs_on_a_larger_cluster(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    url = sqlite_url(state)
    Store(url).close()
    queued = insert_job(url, "'queued-legacy'", "'alice'", spec_sql(SPEC), admitted=False)
    running = insert_job(url, "'running-legacy'", "'alice'", spec_sql({**SPEC, "model": "m", "env": {}, "steps": 2**40}),
                         status="running")
    hold = ("--too-large", "hold")
    small = Server(state, gpus=2, policy="fifo", extra=hold)
    try:
        for job_id, reason in ((queued, "model: is not valid Unicode"), (running, "steps: must be <= 2147483647")):
            job = wait_for(lambda: (j := small.job(job_id))["terminal"] and j, 240, f"legacy job {job_id} to end")
            assert job["status"] == "failed" and reason in job["message"], job["message"]
        big = small.submit(tiny_job("big", steps=10, min_gpus=3, max_gpus=3, step_s=0.01))
        gone = small.submit(tiny_job("gone", steps=10, min_gpus=3, max_gpus=3, step_s=0.01))
        after = small.submit(tiny_job("after", steps=10, min_gpus=1, max_gpus=1, step_s=0.01))
        # FIFO: the held jobs came first, yet the one that fits is planned
        small.wait_job(after, lambda j: any(e["kind"] == "planned" for e in j["events"]), 240, "planned")
        shown = coddl("show", str(big), env={"CODDL_SERVER": small.url, "CODDL_TOKEN": small.admin_token})
        assert "held: needs 3 GPUs at once and the cluster has 2 GPUs" in " ".join(shown.stdout.split())
        assert small.admin.delete(f"/jobs/{gone}").status_code == 202
        wait_for(lambda: small.job(gone)["status"] == "cancelled", 240, "the held job cancelled")
        assert small.job(big)["status"] == "queued"
    finally:
        small.cleanup()
    larger = Server(state, gpus=4, policy="fifo", extra=hold)
    try:
        def started(j: dict) -> bool:
            return any(e["kind"] == "planned" and e["action"] == "start" for e in j["events"])

        job = larger.wait_job(big, started, 240, "started on the larger cluster")
        assert job["message"] is None
        assert [len(e["gpus_after"]) for e in job["events"] if e["kind"] == "planned"][0] == 3
    finally:
        larger.cleanup()
