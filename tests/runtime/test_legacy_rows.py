"""Rows that an earlier version stored (or anything else wrote into the database) and that cannot be
sent as they are: a lone surrogate in a job's spec (the old API stored ``"\\ud800"`` as given), a NaN or
infinite loss, bytes that are not UTF-8 and a spec that is not JSON (SQLite only: PostgreSQL refuses
both). They are written here with SQL, straight into SQLite and PostgreSQL; every listing and view
shows them with placeholders (U+FFFD, null) and the server keeps serving everyone."""

from __future__ import annotations

import json
import time

import pytest
from api_server import live_api
from postgres import BACKENDS, backend_url
from runtime_live import TINY_JOB, tiny_job
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from coddl.cli.main import app
from coddl.runtime.store import Store

SPEC = {"name": "legacy", "command": ["python", str(TINY_JOB)], "steps": 10, "model": "\ud800", "min_gpus": 1,
        "env": {"K\udfff": "v"}, "args": []}


def insert_job(url: str, name: str, owner: str, spec_sql: str, *, status: str = "queued", loss: str = "NULL",
               admitted: bool = True, message: str = "NULL") -> int:
    """One job row written with SQL, as another program (or an older coddl) would have."""
    engine = create_engine(url)
    try:
        with engine.begin() as c:
            row = c.execute(text(
                "INSERT INTO jobs (name, owner, spec, status, admitted, cancel_requested, submitted_at, total_steps, "
                f"steps_done, share, resizes, loss, message) VALUES ({name}, {owner}, {spec_sql}, '{status}', "
                f"{'TRUE' if admitted else 'FALSE'}, FALSE, {time.time()}, 10, 0, 0, 0, {loss}, {message}) "
                "RETURNING id")).scalar_one()
            c.execute(text(f"INSERT INTO events (job_id, at, kind, detail) VALUES ({row}, {time.time()}, 'submitted', "
                           f"{message})"))
            return int(row)
    finally:
        engine.dispose()


def spec_sql(spec: dict) -> str:
    """JSON text with ``\\uXXXX`` escapes (what the old store wrote for a lone surrogate)."""
    return "'" + json.dumps(spec).replace("'", "''") + "'"


@pytest.fixture(params=BACKENDS)
def poisoned(request, tmp_path):
    url = backend_url(request, request.param, tmp_path)
    store = Store(url)  # the tables, as coddl creates them
    ids = {"surrogate": insert_job(url, "'legacy'", "'alice'", spec_sql(SPEC)),
           "infinite loss": insert_job(url, "'inf'", "'alice'", spec_sql({**SPEC, "model": "m"}),
                                        loss="'Infinity'" if store.postgres else "9e999")}
    if store.postgres:
        ids["NaN loss"] = insert_job(url, "'nan'", "'alice'", spec_sql({**SPEC, "model": "m"}), loss="'NaN'")
    if store.sqlite:  # bytes that are not UTF-8, and a spec that is not JSON
        ids["not UTF-8"] = insert_job(url, "CAST(X'6c6567ff' AS TEXT)", "CAST(X'616cff' AS TEXT)",
                                      spec_sql({**SPEC, "model": "m"}), message="CAST(X'6f6f7073ed' AS TEXT)")
        ids["not JSON"] = insert_job(url, "'broken'", "'alice'", "'{not json'")
    with live_api(store, tmp_path) as api:
        yield api, ids
    store.close()


def test_legacy_rows_are_listed_and_shown_with_placeholders(poisoned):
    api, ids = poisoned
    listing = api.clients["root"].get("/jobs")
    assert listing.status_code == 200, listing.text
    by_id = {j["id"]: j for j in listing.json()}
    assert set(ids.values()) <= set(by_id)
    legacy = by_id[ids["surrogate"]]
    assert legacy["spec"]["model"] == "\ufffd" and legacy["spec"]["env"] == {"K\ufffd": "v"}
    assert by_id[ids["infinite loss"]]["loss"] is None
    if "NaN loss" in ids:
        assert by_id[ids["NaN loss"]]["loss"] is None
    if "not UTF-8" in ids:
        broken = by_id[ids["not UTF-8"]]
        assert (broken["name"], broken["owner"], broken["message"]) == ("leg\ufffd", "al\ufffd", "oops\ufffd")
        assert by_id[ids["not JSON"]]["spec"] == {"unreadable": "{not json"}
    for job_id in ids.values():
        r = api.clients["root"].get(f"/jobs/{job_id}")
        assert r.status_code == 200, r.text
    assert api.clients["alice"].get("/jobs").status_code == 200  # the owner's listing too
    assert api.clients["alice"].delete(f"/jobs/{ids['surrogate']}").status_code == 202
    assert api.clients["alice"].post("/jobs", json=tiny_job("fresh", 10)).status_code == 201


def test_the_cli_renders_legacy_rows(poisoned):
    api, ids = poisoned
    args = ["--server", api.url, "--token", api.tokens["root"]]
    r = CliRunner().invoke(app, ["jobs", *args])
    assert r.exit_code == 0, r.output
    for job_id in ids.values():
        shown = CliRunner().invoke(app, ["show", str(job_id), *args])
        assert shown.exit_code == 0, shown.output
        assert "Traceback" not in shown.output
