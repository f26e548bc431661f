"""``coddl study run`` as a user runs it, against a real server: four trials of a real training
script at once on four GPUs, the two diverging ones pruned by Optuna's threshold pruner, their jobs
cancelled, and their GPUs handed to the two survivors (the event log shows the survivors' grows)."""

from __future__ import annotations

import json

import pytest
from runtime_live import TINY_JOB, Server, coddl

pytestmark = pytest.mark.slow

GOOD, BAD = 0.05, 1e-7  # SGD's learning rate on the tiny job's linear regression: converges / never moves


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("study") / "state", gpus=4, policy="max-min")
    yield s
    s.cleanup()


def test_pruned_trials_are_cancelled_and_their_gpus_go_to_the_survivors(server, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(f"""
name: lr-search
trials: 4
parallel: 4
pruner: {{kind: threshold, upper: 1.0, min_resource: 40}}
enqueue: [{{LR: {GOOD}}}, {{LR: {BAD}}}, {{LR: {GOOD}}}, {{LR: {BAD}}}]
job:
  command: python {TINY_JOB}
  model: tiny
  max_gpus: 4
  steps: 400
  batch_size: 32
  env: {{STEP_S: "0.05"}}
space:
  LR: {{choices: [{GOOD}, {BAD}]}}
""")
    token = server.token("alice")
    out = tmp_path / "study.json"
    r = coddl("study", "run", str(study), "--server", server.url, "--token", token, "--out", str(out), timeout=400)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    got = json.loads(out.read_text())
    states = {t["number"]: t["state"] for t in got["trials"]}
    assert states == {0: "finished", 1: "pruned", 2: "finished", 3: "pruned"}, got["trials"]
    assert got["best"]["params"] == {"LR": GOOD} and got["best"]["value"] < 1.0
    assert "best: trial" in r.stdout and "2 finished, 2 pruned" in r.stdout
    # GPU-hours: each trial's the server's attained service; the survivors ran longer on more GPUs
    hours = {t["number"]: t["gpu_hours"] for t in got["trials"]}
    assert all(h > 0 for h in hours.values()) and min(hours[0], hours[2]) > max(hours[1], hours[3]), hours
    assert f"{sum(hours.values()):.3f} GPU-hours" in r.stdout

    jobs = {t["number"]: server.job(t["job_id"]) for t in got["trials"]}
    assert all(j["owner"] == "alice" and j["name"] == f"lr-search-{n}" for n, j in jobs.items())
    cancelled_at = []
    for n in (1, 3):
        j = jobs[n]
        assert j["status"] == "cancelled", j
        kinds = [e["kind"] for e in j["events"]]
        assert "cancel-requested" in kinds and j["steps_done"] < 400
        cancelled_at.append(max(e["at"] for e in j["events"] if e["kind"] == "cancelled"))
        held = {g for e in j["events"] if e["kind"] == "applied" and e["gpus_after"] for g in e["gpus_after"]}
        assert held, j["events"]
    freed = {g for n in (1, 3) for e in jobs[n]["events"] if e["kind"] == "applied" and e["gpus_after"]
             for g in e["gpus_after"]}
    grown = set()
    for n in (0, 2):
        j = jobs[n]
        assert j["status"] == "finished" and j["steps_done"] == 400
        grows = [e for e in j["events"] if e["kind"] == "planned" and e["action"] == "grow"
                 and e["at"] >= min(cancelled_at) - 1e-3]
        assert grows, f"trial {n} never grew after the pruned trials left: {j['events']}"
        grown |= {g for e in grows for g in e["gpus_after"]}
    assert freed & grown, (freed, grown)  # the survivors grew into GPUs the pruned trials had held


def test_a_stored_study_continues_with_only_the_missing_trials(server, tmp_path):
    db = f"sqlite:///{tmp_path / 'study.db'}"
    token = server.token("bob")

    def run(trials: int) -> dict:
        study = tmp_path / "study.yaml"
        study.write_text(f"""
name: resumed
trials: {trials}
sampler: {{kind: random, seed: 3}}
pruner: {{kind: none}}
job: {{command: python {TINY_JOB}, model: tiny, max_gpus: 2, steps: 30, batch_size: 32, env: {{STEP_S: "0.02"}}}}
space:
  LR: {{low: 0.01, high: 0.1, log: true}}
""")
        out = tmp_path / f"out-{trials}.json"
        r = coddl("study", "run", str(study), "--storage", db, "--server", server.url, "--token", token,
                  "--out", str(out), timeout=300)
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
        return json.loads(out.read_text())

    first = run(2)
    assert sorted(t["number"] for t in first["trials"]) == [0, 1]
    assert all(t["state"] == "finished" for t in first["trials"])
    second = run(3)
    assert [t["number"] for t in second["trials"]] == [2]  # trials 0 and 1 are on record already
    values = [t["value"] for t in first["trials"] + second["trials"]]
    assert second["best"]["value"] == min(values)  # the best of the whole study, not of this run
    assert run(3)["trials"] == []  # nothing missing: nothing runs


def test_a_trial_whose_job_fails_is_recorded_failed_and_the_study_goes_on(server, tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(f"""
name: failing
trials: 2
pruner: {{kind: none}}
enqueue: [{{FAIL: "1"}}, {{FAIL: "0"}}]
job: {{command: python {TINY_JOB}, model: tiny, max_gpus: 1, steps: 20, batch_size: 32, env: {{STEP_S: "0.02"}}}}
space:
  FAIL: {{choices: ["0", "1"]}}
""")
    out = tmp_path / "out.json"
    r = coddl("study", "run", str(study), "--server", server.url, "--token", server.token("carol"), "--out", str(out),
              timeout=300)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    trials = {t["number"]: t for t in json.loads(out.read_text())["trials"]}
    assert trials[0]["state"] == "failed" and f"job {trials[0]['job_id']} failed" in trials[0]["message"]
    assert trials[1]["state"] == "finished" and "1 finished, 0 pruned, 1 failed" in r.stdout
    assert server.job(trials[0]["job_id"])["status"] == "failed"


def test_ctrl_c_cancels_the_trials_in_flight(server, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from runtime_live import wait_for

    study = tmp_path / "study.yaml"
    study.write_text(f"""
name: interrupted
trials: 4
parallel: 2
pruner: {{kind: none}}
job: {{command: python {TINY_JOB}, model: tiny, max_gpus: 1, steps: 2000, batch_size: 32, env: {{STEP_S: "0.05"}}}}
space:
  LR: {{low: 0.01, high: 0.1}}
""")
    token = server.token("dave")
    # Ctrl-C as a terminal sends it: SIGINT at its default. A suite started in the background of a
    # script (`make test &`) ignores SIGINT, children inherit that, and Python then leaves it ignored
    proc = subprocess.Popen([sys.executable, "-m", "coddl.cli", "study", "run", str(study), "--server", server.url,
                             "--token", token], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        def mine() -> list[dict]:
            return server.admin.get("/jobs", params={"user": "dave"}).json()

        wait_for(lambda: sum(j["status"] == "running" for j in mine()) == 2, 120, "two trials running")
        proc.send_signal(signal.SIGINT)
        try:
            # its two cancels may each wait out the client's 30 s timeout on a loaded server: 120 s
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack: where it hangs
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"study run did not end within 120 s of Ctrl-C; its threads:\n{err}")
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted: 2 trial(s) in flight cancelled" in err and "Traceback" not in err, err
    def ended() -> list[dict] | None:
        js = mine()
        return js if all(j["terminal"] for j in js) else None

    jobs = wait_for(ended, 60, "the trials' jobs ended")
    assert len(jobs) == 2 and all(j["status"] == "cancelled" for j in jobs), jobs


def test_a_diverging_trial_is_never_a_finished_one(server, tmp_path):
    """LR 1.5 on the tiny regression: the loss grows about 4x a step, finite in the first reports, then
    inf and NaN (the API sends those as nothing);
    without a pruner the trial must end failed, not finished on the last finite loss it reported."""
    study = tmp_path / "study.yaml"
    study.write_text(f"""
name: diverging
trials: 2
pruner: {{kind: none}}
enqueue: [{{LR: 1.5}}, {{LR: 0.05}}]
job: {{command: python {TINY_JOB}, model: tiny, max_gpus: 1, steps: 120, batch_size: 32, env: {{STEP_S: "0.02"}}}}
space:
  LR: {{choices: [1.5, 0.05]}}
""")
    out = tmp_path / "out.json"
    r = coddl("study", "run", str(study), "--server", server.url, "--token", server.token("erin"), "--out", str(out),
              timeout=300)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    trials = {t["number"]: t for t in json.loads(out.read_text())["trials"]}
    assert trials[0]["state"] == "failed" and "diverged" in trials[0]["message"], trials[0]
    assert trials[1]["state"] == "finished" and json.loads(out.read_text())["best"]["number"] == 1


def test_stopping_a_trial_whose_job_just_ended_is_no_error(server):
    from coddl.runtime.client import Client, ClientError, Endpoint
    from coddl.studies.runner import TrialRun

    from runtime_live import tiny_job

    job_id = server.submit(tiny_job("ended", 5, max_gpus=1, step_s=0.01))
    server.wait_job(job_id, lambda j: j["status"] == "finished", 120, "finished")
    with Client(Endpoint(server.url, server.admin_token)) as client:
        try:
            client.cancel(job_id)
        except ClientError as e:
            assert e.status == 409, e
        else:
            raise AssertionError("cancelling a finished job was accepted")
        run = TrialRun.__new__(TrialRun)  # only its bookkeeping: the trial it ran is not needed to stop it
        from coddl.studies.runner import TrialRecord

        run.record = TrialRecord(0, {}, job_id)
        run.stop(client, "the study was interrupted")
        assert run.record.state == "stopped" and run.record.message == "the study was interrupted"


def test_a_users_own_optuna_code_runs_its_trials_as_jobs(server, tmp_path):
    """``CoddlObjective`` in ``study.optimize`` with two threads: every trial a job of the token's user,
    a failing one recorded as failed (with ``catch``), the study's best the finished trial's loss."""
    import optuna

    from coddl.runtime.client import Endpoint
    from coddl.runtime.spec import parse_job
    from coddl.studies import CoddlObjective, Parameter, TrialFailed

    job = parse_job({"name": "own", "command": ["python", str(TINY_JOB)], "model": "tiny", "max_gpus": 1, "steps": 20,
                     "batch_size": 32, "env": {"STEP_S": "0.02"}})
    objective = CoddlObjective(Endpoint(server.url, server.token("frank")), job, {"FAIL": Parameter(choices=["0", "1"])})
    study = optuna.create_study()
    study.enqueue_trial({"FAIL": "0"})
    study.enqueue_trial({"FAIL": "1"})
    study.optimize(objective, n_trials=2, n_jobs=2, catch=(TrialFailed,))
    states = {t.params["FAIL"]: t.state for t in study.trials}
    assert states == {"0": optuna.trial.TrialState.COMPLETE, "1": optuna.trial.TrialState.FAIL}
    jobs = {t.params["FAIL"]: server.job(t.user_attrs["coddl_job"]) for t in study.trials}
    assert jobs["0"]["status"] == "finished" and jobs["1"]["status"] == "failed"
    assert all(j["owner"] == "frank" for j in jobs.values()) and study.best_value == study.best_trial.value
