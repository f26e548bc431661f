"""Listing many jobs: ``GET /jobs`` pages backwards by id with user and status filters (SQLite and
PostgreSQL), ``coddl jobs`` fetches past 1,000 a page at a time and fits 80 columns without cutting
an id; and ``/openapi.json`` documents every field of a job and of a token request."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from api_server import live_api
from postgres import BACKENDS, backend_url
from runtime_live import TINY_JOB
from sqlalchemy import insert
from typer.testing import CliRunner

from coddl.cli.main import app
from coddl.runtime.api_tokens import TokenRequest
from coddl.runtime.spec import JobFile
from coddl.runtime.store import JobRow, Store

FIRST, COUNT = 1_000_000, 2_500
STATUSES = ("queued", "running", "finished", "failed", "cancelled")


def owner(job_id: int) -> str:
    return "bob" if job_id % 3 == 0 else "alice"


def status(job_id: int) -> str:
    return STATUSES[job_id % len(STATUSES)]


def fill(store: Store) -> None:
    """2,500 jobs with ids from 1,000,000, written in one statement (add_job would take a minute)."""
    spec = {"name": "j", "command": ["python", str(TINY_JOB)], "steps": 10, "model": "default", "min_gpus": 1}
    now = time.time()
    with store._w() as s:  # noqa: SLF001 - bulk rows for a listing test
        s.execute(insert(JobRow), [
            {"id": i, "name": f"job-{i}", "owner": owner(i), "spec": spec, "status": status(i), "admitted": True,
             "cancel_requested": False, "submitted_at": now, "total_steps": 10, "steps_done": 0, "share": 0,
             "resizes": 0} for i in range(FIRST, FIRST + COUNT)])


@pytest.fixture(scope="module", params=BACKENDS)
def api(request, tmp_path_factory):
    state = tmp_path_factory.mktemp("listing")
    store = Store(backend_url(request, request.param, state))
    fill(store)
    with live_api(store, state) as api:
        yield api
    store.close()


def ids(rows: list[dict]) -> list[int]:
    return [r["id"] for r in rows]


def test_pages_walk_back_through_every_job_once_in_order(api):
    root = api.clients["root"]
    pages, before = [], None
    while True:
        page = root.get("/jobs", params={"limit": 1000, **({} if before is None else {"before": before})}).json()
        if not page:
            break
        assert ids(page) == sorted(ids(page))  # each page oldest first
        pages.append(page)
        before = page[0]["id"]
    assert [len(p) for p in pages] == [1000, 1000, 500]
    assert [i for p in reversed(pages) for i in ids(p)] == list(range(FIRST, FIRST + COUNT))
    assert root.get("/jobs", params={"before": 2**70}).json()[-1]["id"] == FIRST + COUNT - 1


def test_filters_by_user_and_status(api):
    root, alice = api.clients["root"], api.clients["alice"]
    want = [i for i in range(FIRST, FIRST + COUNT) if owner(i) == "bob" and status(i) in ("queued", "failed")]
    got = root.get("/jobs", params={"user": "bob", "status": "queued,failed", "limit": 10_000}).json()
    assert ids(got) == want
    mine = alice.get("/jobs", params={"limit": 10_000}).json()
    assert ids(mine) == [i for i in range(FIRST, FIRST + COUNT) if owner(i) == "alice"]
    assert ids(alice.get("/jobs", params={"user": "alice", "status": "running", "limit": 10}).json()) == \
        [i for i in range(FIRST, FIRST + COUNT) if owner(i) == "alice" and status(i) == "running"][-10:]
    assert root.get("/jobs", params={"user": "nobody"}).json() == []


def coddl80(api, *args: str, who: str = "root") -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "80", "CODDL_SERVER": api.url, "CODDL_TOKEN": api.tokens[who]}
    return subprocess.run([sys.executable, "-m", "coddl.cli", "jobs", *args], capture_output=True, text=True,
                          env=env, timeout=180)


@pytest.mark.slow
def test_coddl_jobs_lists_past_1000_in_80_columns_with_whole_ids(api):
    if api.store.postgres:
        pytest.skip("the CLI is the same on either store; the API pages are tested on both")
    r = coddl80(api, "--all")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    shown = [int(line.split()[0]) for line in lines if line.strip()[:1].isdigit()]
    assert shown == list(range(FIRST, FIRST + COUNT))



def test_coddl_jobs_shows_the_newest_1000_says_how_to_see_more_and_filters(api):
    args = ["--server", api.url, "--token", api.tokens["root"]]
    r = CliRunner().invoke(app, ["jobs", *args])
    assert r.exit_code == 0, r.output
    assert len([line for line in r.stdout.splitlines() if line.strip()[:1].isdigit()]) == 1000
    assert r.stderr.strip() == f"the newest 1000 shown; older ones: --before {FIRST + COUNT - 1000}, or --all"

    r = CliRunner().invoke(app, ["jobs", "--user", "bob", "--status", "finished", "--limit", "5", *args])
    rows = [line.split() for line in r.stdout.splitlines() if line.strip()[:1].isdigit()]
    want = [i for i in range(FIRST, FIRST + COUNT) if owner(i) == "bob" and status(i) == "finished"][-5:]
    assert [int(row[0]) for row in rows] == want and all("bob" in row and "finished" in row for row in rows)
    r = CliRunner().invoke(app, ["jobs", "--status", "done", *args])
    assert r.exit_code == 1 and "status: unknown status 'done'" in r.output


def test_openapi_documents_every_field_of_a_job_and_a_token_request(api):
    spec = api.clients["anon"].get("/openapi.json").json()
    for path, model in (("/jobs", JobFile), ("/tokens", TokenRequest)):
        body = spec["paths"][path]["post"]["requestBody"]
        assert body["required"]
        schema = body["content"]["application/json"]["schema"]
        assert schema["additionalProperties"] is False
        assert set(schema["properties"]) == set(model.model_fields)
        for name, prop in schema["properties"].items():
            assert prop.get("description"), f"{path}: {name} has no description"
            assert "type" in prop or "anyOf" in prop, f"{path}: {name} has no type"
    job = spec["paths"]["/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert job["required"] == ["name"]
    assert job["properties"]["steps"]["anyOf"][0] == {"maximum": 2**31 - 1, "minimum": 1, "type": "integer"}
    assert job["properties"]["env"]["additionalProperties"] == {"type": "string"}
    params = {p["name"] for p in spec["paths"]["/jobs"]["get"]["parameters"]}
    assert {"limit", "before", "user", "status"} <= params
