"""Job inspection and estimation in the real system: a job with no model name gets a profile from
its first steps and is planned on the estimator's curve; its measured throughput on 2 GPUs
contradicts that curve (each such step waits 0.3 s more, an interconnect the scheduler knows
nothing of), so the estimator's correction bends the curve and the job is re-planned on 1 GPU;
the profile survives a killed controller. A real server (AFS-P, 2 GPUs), real worker processes, a
real SQLite store; the job's compute is sleeps, so the figures do not depend on the machine's load."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_live import EXAMPLES, coddl, wait_for

from coddl.core.cluster import Cluster
from coddl.perf.estimator import Estimator
from coddl.perf.table import ProfileTable, read_profiles
from coddl.runtime.estimation import Estimates

pytestmark = pytest.mark.slow

JOB = EXAMPLES / "synthetic_job.py"
PARAMS = 100_000


def planned_gpus(job: dict) -> list[tuple[str, int]]:
    return [(e["action"], len(e["gpus_after"])) for e in job["events"] if e["kind"] == "planned"]


def profile_of(server, job_id: int) -> dict | None:
    r = server.admin.get(f"/jobs/{job_id}/profile")
    assert r.status_code in (200, 404), r.text
    return r.json() if r.status_code == 200 else None


def test_an_unnamed_job_is_profiled_corrected_replanned_and_keeps_its_profile(server_factory, tmp_path):
    state = tmp_path / "state"
    server = server_factory(state, gpus=2, policy="afs-p")
    job_id = server.submit({"name": "unnamed", "command": ["python", str(JOB)], "steps": 100_000,
                            "batch_size": 32, "env": {"PARAMS": str(PARAMS), "SAMPLE_S": "0.005", "SYNC_S": "0.3"}})
    assert profile_of(server, job_id) is None
    r = server.admin.get(f"/jobs/{job_id}/profile")
    assert r.status_code == 404 and "no profile yet" in r.json()["detail"]

    # the first steps' report becomes its profile: one-GPU rows at its local batch 16, its half, its
    # quarter and its sixteenth
    profile = wait_for(lambda: profile_of(server, job_id), 120, "the job's profile")
    rows = ProfileTable.build(profile["profile"])
    assert sorted(rows.local_batch) == [1.0, 4.0, 8.0, 16.0] and set(rows.gpus) == {1}
    assert set(rows.param_bytes) == {4.0 * (PARAMS + 17)} and profile["global_batch"] == 32
    # sleeping 5 ms per sample: the step at 16 samples takes 60 ms longer than at 4
    step = dict(zip(rows.local_batch.tolist(), (1 / rows.steps_per_s).tolist()))
    assert step[16.0] - step[4.0] == pytest.approx(0.060, abs=0.03)

    # the curve it is planned on is the estimator's for this cluster, from those rows and its belief
    b = profile["belief"]
    est = Estimates(Cluster.homogeneous(1, 2, gpu_type="local", cpus_per_node=2))
    model = est.restore("x", profile).model
    assert (model.t_ref, model.b_ref) == pytest.approx((b["t_ref_s"], b["b_ref"]))
    expected = Estimator.for_cluster(est.cluster).curve(model, 2, 2, global_batch=32)
    assert profile["curve"] == pytest.approx(list(expected[1:]), rel=1e-6)
    if not profile["measured"]:  # as inspected: compute that halves with the batch, near-linear on 2 GPUs
        # the default curve says 1.6; about 1.8 on a quiet machine, 1.66 measured beside a loaded
        # test run (the step's fixed Python overhead grows with load and does not halve with the batch)
        assert profile["curve"][1] / profile["curve"][0] > 1.6

    # measured on 2 GPUs, a step costs far more than the default links promise: the correction
    # raises the job's communication efficiency until one GPU is faster, and the scheduler shrinks it
    job = server.wait_job(job_id, lambda j: ("shrink", 1) in planned_gpus(j), 120, "a shrink to 1 GPU")
    corrected = profile_of(server, job_id)
    assert corrected["belief"]["measured_steps"] >= 1 and corrected["belief"]["comm_efficiency"] > 100
    assert corrected["useful_gpus"] == 1 and corrected["curve"][1] < corrected["curve"][0]
    assert any(r["gpus"] == 2 for r in corrected["measured"])
    kinds = [e["kind"] for e in job["events"]]
    assert kinds.count("inspected") == 1 and planned_gpus(job)[0] == ("start", 2)
    server.wait_job(job_id, lambda j: j["attained_service"] > 0, 60, "service persisted")

    # a killed controller: the next one plans the job on its stored profile, without inspecting again
    server.kill()
    again = server_factory(state, gpus=2, policy="afs-p")
    job = again.wait_job(job_id, lambda j: "recovered" in [e["kind"] for e in j["events"]]
                         and planned_gpus(j)[-1][0] == "resume", 120, "resumed")
    assert planned_gpus(job)[-1] == ("resume", 1)  # the default curve would give it both GPUs
    restored = profile_of(again, job_id)
    assert restored["profile"] == profile["profile"]
    assert restored["belief"]["measured_steps"] >= corrected["belief"]["measured_steps"]
    # what a user sees: coddl profile, and its rows as a profile table for coddl estimate
    out = tmp_path / "profile.csv"
    r = coddl("profile", str(job_id), "--out", str(out), "--server", again.url, "--token", again.admin_token)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "more than 1 GPUs would not make it faster" in text and "planned curve" in text
    table = read_profiles(out)  # (the job kept running: rows measured since ``restored`` are in it too)
    assert len(table) >= len(restored["profile"]) + len(restored["measured"]) and set(table.gpus[:3]) == {1}
    again.admin.delete(f"/jobs/{job_id}")
    job = again.wait_job(job_id, lambda j: j["terminal"], 60, "cancelled")
    assert [e["kind"] for e in job["events"]].count("inspected") == 1
    assert np.isfinite(restored["curve"]).all()
