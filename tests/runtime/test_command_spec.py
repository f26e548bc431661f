"""Job files of command jobs (``kind: command``): what they turn into, and one-line errors naming the
field for what only they may say (or must not)."""

from __future__ import annotations

import pytest
from runtime_live import TINY_JOB

from coddl.runtime.spec import STORED, JobFile, SpecError, load_job, parse_job, validate

BASE = {"name": "c", "kind": "command", "command": "torchrun-like --lr 0.1", "steps": 10, "min_gpus": 2}


@pytest.mark.parametrize("change,message", [
    ({"max_gpus": 3}, "job.yaml: max_gpus: a command job that is not restartable runs on exactly min_gpus (2) GPUs, got 3"),
    ({"restartable": "yes"}, "job.yaml: restartable: input should be a valid boolean, got 'yes'"),
    ({"restartable": 1}, "job.yaml: restartable: input should be a valid boolean, got 1"),
    ({"grace_s": -1}, "job.yaml: grace_s: must be >= 0.0, got -1"),
    ({"grace_s": "30"}, "job.yaml: grace_s: input should be a valid number, got '30'"),
    ({"grace_s": 10**9}, "job.yaml: grace_s: must be <= 3600.0"),
    ({"env": {"RANK": "3"}}, "job.yaml: env: RANK: set by coddl for each process of a command job"),
    ({"env": {"MASTER_PORT": "1"}}, "job.yaml: env: MASTER_PORT: set by coddl"),
    ({"command": None, "entrypoint": "pkg.mod:main"}, "job.yaml: entrypoint: kind: command runs a program"),
    ({"command": "'unclosed"}, "job.yaml: command: No closing quotation"),
    ({"command": [""]}, "job.yaml: command: must not be empty"),
    ({"kind": "mpi"}, "job.yaml: kind: input should be 'elastic' or 'command', got 'mpi'"),
    ({"kind": "elastic", "command": f"python {TINY_JOB}", "restartable": True},
     "job.yaml: restartable: only with kind: command"),
    ({"kind": "elastic", "command": f"python {TINY_JOB}", "grace_s": 5}, "job.yaml: grace_s: only with kind: command"),
])
def test_errors_are_one_line_naming_the_field(change, message):
    with pytest.raises(SpecError) as e:
        parse_job({**BASE, **change}, "job.yaml")
    assert str(e.value).startswith(message) and "\n" not in str(e.value), str(e.value)


def test_a_command_job_is_rigid_unless_restartable():
    rigid = parse_job(BASE)
    assert rigid.entry_and_args() == ("torchrun-like", ("--lr", "0.1"))
    core = rigid.to_core("1", 0.0, "alice", "default")
    assert (core.requested_gpus, core.min_gpus, core.max_gpus) == (2, 2, 2)
    assert rigid.grace_s == 30.0 and not rigid.restartable
    elastic = parse_job({**BASE, "restartable": True, "max_gpus": 4, "grace_s": 5})
    core = elastic.to_core("1", 0.0, "alice", "default")
    assert (core.requested_gpus, core.min_gpus, core.max_gpus) == (2, 2, 4)
    assert parse_job({**BASE, "restartable": True}).to_core("1", 0.0, "a", "d").max_gpus is None


def test_what_the_store_keeps_reads_back_the_same():
    """The store keeps ``model_dump``: defaults included, which must not trip the elastic-only checks."""
    for job in (parse_job(BASE), parse_job({**BASE, "restartable": True, "grace_s": 2.5}),
                parse_job({"name": "e", "command": f"python {TINY_JOB}", "steps": 3})):
        assert validate(JobFile, job.model_dump(mode="json"), "stored job", context=STORED) == job


def test_a_command_job_file_is_taken_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "job.yaml"
    f.write_text("name: c\nkind: command\ncommand: bash -c 'echo $RANK'\nsteps: 5\nmin_gpus: 2\n"
                 "restartable: true\nmax_gpus: 4\ngrace_s: 12\n")
    job = load_job(f)  # no script to find, no path made absolute: the words are the program's
    assert job.command == ["bash", "-c", "echo $RANK"] and job.restartable and job.grace_s == 12.0
    f.write_text("name: c\nkind: command\ncommand: bash\nsteps: 5\nrestartable: yes\n")
    with pytest.raises(SpecError, match=r"job.yaml: line 5: restartable: "):
        load_job(f)



def test_the_api_takes_a_command_job_as_written_and_an_elastic_one_still_needs_its_script(tmp_path):
    import httpx

    from coddl.core.cluster import Cluster
    from coddl.runtime.api import ClusterInfo, create_app
    from coddl.runtime.server import HttpServer
    from coddl.runtime.store import Store

    store = Store(f"sqlite:///{tmp_path / 'coddl.db'}")
    app = create_app(store, ClusterInfo(Cluster.for_gpus(4, 4), "local", "max-min()"), tmp_path / "jobs", lambda: None)
    server = HttpServer(app, "127.0.0.1", 0)
    server.start()
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {store.create_token('alice')}"}) as http:
            r = http.post("/jobs", json={**BASE, "command": ["bash", "-c", "exit 0"]})
            assert r.status_code == 201, r.text
            assert store.get_job(r.json()["id"]).spec["command"] == ["bash", "-c", "exit 0"]
            r = http.post("/jobs", json={**BASE, "kind": "elastic", "command": "python /no/such/train.py"})
            assert r.status_code == 422 and "no such script on the server" in r.json()["detail"]
            r = http.post("/jobs", json={**BASE, "kind": "elastic", "command": "bash -c true"})
            assert r.status_code == 422 and r.json()["detail"].startswith("job: command: must run a Python script")
    finally:
        server.stop()
        store.close()
