"""The REST API over real HTTP (uvicorn on 127.0.0.1, a free port) and a real store, SQLite and
PostgreSQL: tokens, ownership and malformed requests. No controller runs here — these are the API's own rules; the
end-to-end tests run the whole server."""

from __future__ import annotations


import httpx
import pytest

from coddl.core.cluster import Cluster
from coddl.runtime.api import ClusterInfo, create_app
from coddl.runtime.server import HttpServer
from coddl.runtime.store import Store, digest

from postgres import BACKENDS, backend_url
from runtime_live import TINY_JOB, tiny_job


@pytest.fixture(scope="module", params=BACKENDS)
def api(request, tmp_path_factory):
    state = tmp_path_factory.mktemp("api")
    store = Store(backend_url(request, request.param, state))
    woken: list[int] = []
    app = create_app(store, ClusterInfo(Cluster.for_gpus(4, 4), "local", "max-min()"), state / "jobs",
                     lambda: woken.append(1))
    http = HttpServer(app, "127.0.0.1", 0)
    http.start()
    tokens = {"alice": store.create_token("alice"), "bob": store.create_token("bob"),
              "root": store.create_token("root", admin=True)}
    clients = {u: httpx.Client(base_url=http.url, headers={"Authorization": f"Bearer {t}"}) for u, t in tokens.items()}
    clients["anon"] = httpx.Client(base_url=http.url)
    clients["forged"] = httpx.Client(base_url=http.url, headers={"Authorization": "Bearer not-a-token"})
    yield store, clients, woken, http.url, state
    for c in clients.values():
        c.close()
    http.stop()
    store.close()


def test_binds_loopback_and_serves_openapi_docs(api):
    _, clients, _, url, _ = api
    assert url.startswith("http://127.0.0.1:")
    spec = clients["anon"].get("/openapi.json").json()
    assert {"/jobs", "/jobs/{job_id}", "/jobs/{job_id}/logs", "/cluster"} <= set(spec["paths"])


@pytest.mark.parametrize("method,path", [("GET", "/jobs"), ("POST", "/jobs"), ("GET", "/jobs/1"),
                                         ("GET", "/jobs/1/logs"), ("DELETE", "/jobs/1"), ("GET", "/cluster")])
@pytest.mark.parametrize("who", ["anon", "forged"])
def test_every_endpoint_needs_a_valid_token(api, method, path, who):
    _, clients, *_ = api
    r = clients[who].request(method, path, json=tiny_job("x", 10) if method == "POST" else None)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"


def test_tokens_are_stored_hashed(api):
    store, *_ = api
    token = store.create_token("carol")
    with store._r() as s:  # noqa: SLF001 - looking at the rows themselves is the point
        from coddl.runtime.store import TokenRow

        digests = {row.digest for row in s.query(TokenRow)}
    assert digest(token) in digests and token not in digests


def test_users_see_and_cancel_only_their_own_jobs(api):
    store, clients, woken, *_ = api
    before = len(woken)
    r = clients["alice"].post("/jobs", json=tiny_job("alices", 50))
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["owner"] == "alice" and job["status"] == "queued"
    assert len(woken) == before + 1  # the controller is told at once

    assert clients["bob"].get(f"/jobs/{job['id']}").status_code == 403
    assert clients["bob"].get(f"/jobs/{job['id']}/logs").status_code == 403
    assert clients["bob"].delete(f"/jobs/{job['id']}").status_code == 403
    assert job["id"] not in [j["id"] for j in clients["bob"].get("/jobs").json()]
    assert job["id"] in [j["id"] for j in clients["alice"].get("/jobs").json()]
    assert job["id"] in [j["id"] for j in clients["root"].get("/jobs").json()]
    assert clients["root"].get(f"/jobs/{job['id']}").status_code == 200

    r = clients["alice"].delete(f"/jobs/{job['id']}")
    assert r.status_code == 202 and r.json()["cancel_requested"]
    kinds = [e["kind"] for e in clients["alice"].get(f"/jobs/{job['id']}").json()["events"]]
    assert kinds == ["submitted", "cancel-requested"]


def test_only_admins_submit_for_someone_else(api):
    _, clients, *_ = api
    r = clients["bob"].post("/jobs", json={**tiny_job("x", 10), "user": "alice"})
    assert r.status_code == 403 and "user" in r.json()["detail"]
    r = clients["root"].post("/jobs", json={**tiny_job("x", 10), "user": "alice"})
    assert r.status_code == 201 and r.json()["owner"] == "alice"


@pytest.mark.parametrize("body,field", [
    ({**tiny_job("x", 10), "max_gpus": 0}, "max_gpus: must be >= min_gpus (1), got 0"),
    ({**tiny_job("x", 10), "steps": "many"}, "steps: must be an integer"),
    ({**tiny_job("x", 10), "gpus": 3}, "gpus: unknown field"),
    ({"name": "x", "steps": 10}, "command: give exactly one of command or entrypoint"),
    ({**tiny_job("x", 10), "command": ["python", "rel/train.py"]}, "command: script path must be absolute"),
    ({**tiny_job("x", 10), "command": ["python", "/nonexistent/train.py"]}, "command: no such script"),
    ({**tiny_job("x", 10), "command": ["bash", str(TINY_JOB)]}, "command: must run a Python script"),
    ({**tiny_job("x", 10), "user": "u" * 65}, "user: must be 1-64 printable characters"),
    ([1, 2, 3], "expected a mapping of job fields"),
])
def test_malformed_jobs_are_422_naming_the_field(api, body, field):
    _, clients, *_ = api
    r = clients["alice"].post("/jobs", json=body)
    assert r.status_code == 422
    assert field in r.json()["detail"]


def test_malformed_requests_are_4xx_never_500(api):
    _, clients, *_ = api
    c = clients["alice"]
    r = c.post("/jobs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"].startswith("body")
    r = c.get("/jobs/abc")
    assert r.status_code == 422 and r.json()["detail"].startswith("job_id:")
    r = c.get("/jobs", params={"limit": 0})
    assert r.status_code == 422 and r.json()["detail"].startswith("limit:")
    assert c.get("/jobs/999999").status_code == 404
    assert c.get(f"/jobs/{2**31}").status_code == 404  # past PostgreSQL's INTEGER ids
    assert c.get(f"/jobs/{2**70}").status_code == 404  # past SQLite's
    assert c.delete("/jobs/999999").status_code == 404


def test_cancelling_a_finished_job_is_a_conflict(api):
    store, clients, *_ = api
    from coddl.core.job import JobStatus

    job = clients["alice"].post("/jobs", json=tiny_job("done", 10)).json()
    store.finish(job["id"], JobStatus.FINISHED, 0.0)
    r = clients["alice"].delete(f"/jobs/{job['id']}")
    assert r.status_code == 409 and "already finished" in r.json()["detail"]


def test_cluster_view_hides_other_users_jobs(api):
    store, clients, *_ = api
    from coddl.core.allocation import Action, ActionKind

    job = clients["alice"].post("/jobs", json=tiny_job("placed", 10)).json()
    store.record_plan([Action(ActionKind.START, str(job["id"]), (), (0, 1))], 0.0)
    mine = clients["alice"].get("/cluster").json()
    theirs = clients["bob"].get("/cluster").json()
    assert mine["total_gpus"] == 4 and mine["gpus_in_use"] == 2
    assert [g["job"] for g in mine["nodes"][0]["gpus"]][:2] == [job["id"], job["id"]]
    assert [(g["job"], g["busy"]) for g in theirs["nodes"][0]["gpus"]][:2] == [(None, True), (None, True)]


def test_logs_of_a_job_stream_every_workers_lines(api, tmp_path):
    _, clients, _, _, state = api
    job = clients["alice"].post("/jobs", json=tiny_job("logged", 10)).json()
    logs = state / "jobs" / str(job["id"]) / "logs"
    logs.mkdir(parents=True)
    (logs / "w0.log").write_text("step 1 loss 2.0\nstep 2 loss 1.0\n")
    (logs / "w1.log").write_text("hello from w1\n")
    text = clients["alice"].get(f"/jobs/{job['id']}/logs").text
    assert text.splitlines() == ["[w0] step 1 loss 2.0", "[w0] step 2 loss 1.0", "[w1] hello from w1"]
