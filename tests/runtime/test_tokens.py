"""API tokens: created (optionally expiring), listed and revoked through the admin-only /tokens
endpoints and ``coddl token``, on SQLite and PostgreSQL; a store made before tokens could expire
opens with its tokens working."""

from __future__ import annotations

import time

import httpx
import pytest
from api_server import live_api
from postgres import BACKENDS, backend_url
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from coddl.cli.main import app
from coddl.cli.tokens import parse_duration
from coddl.runtime.store import Store, digest


@pytest.fixture(params=BACKENDS)
def api(request, tmp_path):
    store = Store(backend_url(request, request.param, tmp_path))
    with live_api(store, tmp_path) as api:
        yield api
    store.close()


def bearer(api, token: str) -> httpx.Client:
    return httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_tokens_are_created_listed_and_revoked_by_an_admin(api):
    root = api.clients["root"]
    r = root.post("/tokens", json={"user": "carol", "expires_in_s": 3600})
    assert r.status_code == 201
    made = r.json()
    assert made["user"] == "carol" and not made["admin"] and made["state"] == "active"
    assert 3590 < made["expires_at"] - time.time() <= 3600
    assert made["fingerprint"] == digest(made["token"])[:8]
    with bearer(api, made["token"]) as carol:
        assert carol.get("/jobs").status_code == 200

        listed = {t["id"]: t for t in root.get("/tokens").json()}
        assert {t["user"] for t in listed.values()} == {"alice", "bob", "root", "carol"}
        assert all("token" not in t and "digest" not in t for t in listed.values())
        assert listed[made["id"]]["expires_at"] == made["expires_at"]
        assert [t["user"] for t in root.get("/tokens", params={"user": "carol"}).json()] == ["carol"]

        r = root.delete(f"/tokens/{made['id']}")
        assert r.status_code == 200 and r.json()["state"] == "revoked" and r.json()["revoked_by"] == "root"
        refused = carol.get("/jobs")
        assert refused.status_code == 401 and refused.json()["detail"] == "token revoked"
        assert root.delete(f"/tokens/{made['id']}").json()["revoked_at"] == r.json()["revoked_at"]  # idempotent


def test_an_expired_token_is_refused_and_listed_as_expired(api):
    token, view = api.store.issue_token("erin", expires_at=time.time() - 1)
    with bearer(api, token) as erin:
        r = erin.get("/jobs")
    assert r.status_code == 401 and r.json()["detail"] == "token expired"
    states = {t["id"]: t["state"] for t in api.clients["root"].get("/tokens").json()}
    assert states[view.id] == "expired"


def test_the_last_active_admin_token_cannot_be_revoked(api):
    root = api.clients["root"]
    admins = [t for t in root.get("/tokens").json() if t["admin"]]
    assert len(admins) == 1
    r = root.delete(f"/tokens/{admins[0]['id']}")
    assert r.status_code == 409 and "only active admin token" in r.json()["detail"]
    second = root.post("/tokens", json={"user": "ops", "admin": True}).json()
    assert root.delete(f"/tokens/{admins[0]['id']}").status_code == 200
    assert root.get("/jobs").status_code == 401  # it revoked itself
    with bearer(api, second["token"]) as ops:
        assert ops.get("/tokens").status_code == 200


def test_an_expired_admin_token_does_not_count_as_an_admin(tmp_path):
    store = Store.for_state_dir(tmp_path)
    store.issue_token("old-admin", admin=True, expires_at=time.time() - 1)
    assert not store.has_admin()  # so the next `server start` creates one for the operator
    store.create_token("new-admin", admin=True)
    assert store.has_admin()
    store.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_store_from_before_expiry_opens_with_its_tokens_working(request, tmp_path, backend):
    url = backend_url(request, backend, tmp_path)
    engine = create_engine(url)
    with engine.begin() as c:  # the tokens table as earlier versions created it
        c.execute(text("CREATE TABLE tokens (id INTEGER PRIMARY KEY, user VARCHAR(64), digest VARCHAR(64) UNIQUE, "
                       "admin BOOLEAN, created_at FLOAT)".replace("user ", '"user" ')))
        c.execute(text("INSERT INTO tokens (id, \"user\", digest, admin, created_at) VALUES "
                       f"(1, 'old', '{digest('tok-from-before')}', TRUE, 1.0)"))
    engine.dispose()
    store = Store(url)
    engine = create_engine(url)
    assert {"expires_at", "revoked_at", "revoked_by"} <= {c["name"] for c in inspect(engine).get_columns("tokens")}
    engine.dispose()
    assert store.authenticate("tok-from-before").name == "old"
    assert [t.state(time.time()) for t in store.list_tokens()] == ["active"]
    store.close()
    Store(url).close()  # and opening it again adds nothing twice


def test_parse_duration():
    assert [parse_duration(s) for s in ("90s", "90m", "12h", "30d", "2w", "1.5h")] == \
        [90, 5400, 43200, 2592000, 1209600, 5400]
    for bad in ("12", "12x", "-1h", "0h", "h", ""):
        with pytest.raises(ValueError, match="--expires: expected a duration like 90m"):
            parse_duration(bad)


def test_coddl_token_create_list_revoke_through_the_server(api):
    args = ["--server", api.url, "--token", api.tokens["root"]]
    r = CliRunner().invoke(app, ["token", "create", "dana", "--expires", "12h", *args])
    assert r.exit_code == 0, r.output
    token = r.stdout.strip().splitlines()[0]
    assert api.store.authenticate(token).name == "dana"
    dana = next(t for t in api.store.list_tokens() if t.user == "dana")
    assert 12 * 3600 - 60 < dana.expires_at - time.time() <= 12 * 3600

    listing = CliRunner().invoke(app, ["token", "list", *args])
    assert listing.exit_code == 0 and "dana" in listing.stdout and dana.fingerprint in listing.stdout
    assert token not in listing.stdout
    r = CliRunner().invoke(app, ["token", "revoke", str(dana.id), *args])
    assert r.exit_code == 0 and "revoked" in r.stdout
    assert api.store.authenticate(token) is None

    r = CliRunner().invoke(app, ["token", "list", "--server", api.url, "--token", api.tokens["alice"]])
    assert r.exit_code == 1 and "403 Forbidden: only an admin may manage tokens" in " ".join(r.output.split())
    r = CliRunner().invoke(app, ["token", "create", "x", "--expires", "soon", *args])
    assert r.exit_code == 2 and "--expires: expected a duration" in r.output
    r = CliRunner().invoke(app, ["token", "create", " x", *args])
    assert r.exit_code == 2 and "USER: must be 1-64 printable characters" in r.output


def test_coddl_token_offline_writes_the_store_directly(tmp_path):
    state = tmp_path / "state"
    r = CliRunner().invoke(app, ["token", "create", "ops", "--admin", "--offline", "--state-dir", str(state)])
    assert r.exit_code == 0, r.output
    store = Store.for_state_dir(state)
    assert store.authenticate(r.stdout.strip().splitlines()[0]).admin
    listing = CliRunner().invoke(app, ["token", "list", "--offline", "--state-dir", str(state)])
    assert listing.exit_code == 0 and "ops" in listing.stdout and "admin" in listing.stdout
    r = CliRunner().invoke(app, ["token", "revoke", "1", "--offline", "--state-dir", str(state)])
    assert r.exit_code == 2 and "only active admin token" in r.output
    store.close()
