"""Teams' queues in the real system: the store keeps them (SQLite and PostgreSQL), the API lets admins
change them and everyone see them, a change that cannot work is refused with nothing changed, a job its
queue can never hold is refused, /metrics shows GPUs by queue, and a live server gives a team its quota
back from a borrowing team's running job within one decision."""

from __future__ import annotations

import re
import time

import httpx
import pytest
from runtime_live import Server, coddl, tiny_job
from test_metrics import samples, value

from coddl.core.cluster import Cluster
from coddl.queues import Queue, QueueError, QueueSet
from coddl.runtime import queues as stored
from coddl.runtime.api import ClusterInfo, create_app
from coddl.runtime.dashboard import mount_dashboard
from coddl.runtime.metrics import ClusterMetrics, metrics_router
from coddl.runtime.server import HttpServer
from coddl.runtime.store import Store


def test_the_store_keeps_the_queues_and_refuses_a_set_that_cannot_work(store_url) -> None:
    cluster = Cluster.for_gpus(8, 4)
    store = Store(store_url)
    lab = QueueSet((Queue("vision", 4, cohort="lab", users=("alice",), weight=2.0),
                    Queue("default", None, cohort="lab")))
    assert store.queues() == []  # read, and kept until a change
    stored.replace_all(store.fenced(lambda _s: None), cluster, lab)  # a change through a view of the store
    assert [name for name, _ in store.queues()] == ["vision", "default"]
    store.queues()[0][1]["nominal_gpus"] = 99  # what a caller does with what it got stays its own
    assert stored.stored_queues(store) == lab
    with pytest.raises(QueueError, match="add up to 10 GPUs and the cluster has 8"):
        stored.update(store, cluster, lambda qs: [*qs, Queue("nlp", 6, users=("bob",))])
    with pytest.raises(QueueError, match="user alice is already in queue vision"):
        stored.update(store, cluster, lambda qs: [*qs, Queue("nlp", 2, users=("alice",))])
    store.close()
    store = Store(store_url)  # as a restarted server opens it
    assert stored.stored_queues(store) == lab
    states = {s.queue.name: s for s in stored.queue_states(store, cluster)}
    assert (states["vision"].nominal_gpus, states["default"].nominal_gpus, states["default"].ceiling_gpus) == (4, 4, 8)
    store.close()


@pytest.fixture
def api(tmp_path):
    store = Store.for_state_dir(tmp_path)
    cluster = Cluster.for_gpus(4, 4)
    changed: list[float] = []
    info = ClusterInfo(cluster, "local", "afs-p()")
    app = create_app(store, info, tmp_path / "jobs", lambda: None, on_queues=lambda: changed.append(time.time()))
    app.include_router(metrics_router(ClusterMetrics(store, cluster, "afs-p()", "local")))
    mount_dashboard(app, store, info, tmp_path / "jobs")
    http = HttpServer(app, "127.0.0.1", 0)
    http.start()
    tokens = {u: store.create_token(u, admin=u == "root") for u in ("alice", "bob", "root")}
    clients = {u: httpx.Client(base_url=http.url, headers={"Authorization": f"Bearer {t}"}, timeout=30)
               for u, t in tokens.items()}
    yield store, clients, changed
    for c in clients.values():
        c.close()
    http.stop()
    store.close()


def test_admins_change_queues_and_everyone_sees_them(api) -> None:
    store, c, changed = api
    r = c["alice"].put("/queues/vision", json={"nominal_gpus": 2, "users": ["alice"]})
    assert r.status_code == 403 and store.queues() == []
    r = c["root"].put("/queues/vision", json={"nominal_gpus": 2, "cohort": "lab", "users": ["alice"]})
    assert r.status_code == 200, r.text
    r = c["root"].put("/queues/default", json={"cohort": "lab", "lending_limit_gpus": 1})
    assert r.status_code == 200 and len(changed) == 2
    rows = {q["name"]: q for q in c["bob"].get("/queues").json()}
    assert (rows["vision"]["quota_gpus"], rows["vision"]["ceiling_gpus"]) == (2, 3)  # default lends at most 1
    assert (rows["default"]["nominal_gpus"], rows["default"]["quota_gpus"]) == (None, 2)  # the rest of 4
    assert "users" not in rows["vision"]  # bob is not in vision: he does not see its members
    assert c["alice"].get("/queues").json()[0]["users"] == ["alice"]

    before = store.queues()
    for body, status, detail in [
        ({"nominal_gpus": "2"}, 422, "queue: nominal_gpus: must be an integer"),
        ({"nominal_gpus": 1, "name": "x"}, 422, "queue: name: unknown field"),
        ({"nominal_gpus": 1, "weight": True}, 422, "queue: weight: must be a number"),
        ({"nominal_gpus": 1, "users": ["bob\x00"]}, 422, "users.0"),
        ({"nominal_gpus": 3}, 409, "add up to 5 GPUs and the cluster has 4"),
        ({"nominal_gpus": 1, "users": ["alice"]}, 409, "user alice is already in queue vision"),
        ([1, 2], 422, "expected a mapping of queue fields"),
    ]:
        r = c["root"].put("/queues/nlp", json=body)
        assert r.status_code == status and detail in r.json()["detail"], (body, r.text)
        assert "\n" not in r.json()["detail"]
    assert c["root"].put("/queues/n%20lp", json={"nominal_gpus": 1}).json()["detail"].startswith("queue: name: must be")
    assert store.queues() == before and len(changed) == 2  # nothing refused was written or announced

    # a job its queue can never hold is refused: vision holds at most 2 + 1
    r = c["alice"].post("/jobs", json={"name": "big", "entrypoint": "m:f", "steps": 10, "min_gpus": 4})
    assert r.status_code == 422 and r.json()["detail"] == \
        "job: min_gpus: needs 4 GPUs at once and queue vision can hold at most 3"
    assert c["alice"].post("/jobs", json={"name": "ok", "entrypoint": "m:f", "steps": 10, "min_gpus": 3}).status_code == 201

    assert c["root"].delete("/queues/nope").status_code == 404
    assert c["alice"].delete("/queues/vision").status_code == 403
    assert [q["name"] for q in c["root"].delete("/queues/vision").json()] == ["default"]
    doc = {"queues": [{"name": "a", "nominal_gpus": 1, "users": ["bob"]}, {"name": "b", "nominal_gpus": 1}]}
    assert [q["name"] for q in c["root"].put("/queues", json=doc).json()] == ["a", "b", "default"]
    assert c["root"].put("/queues", json={"queues": [{"name": "a"}]}).status_code == 422

    # /metrics: GPUs by user and queue, each queue's quota
    store.record_plan([], time.time())
    m = samples(c["root"].get("/metrics").text)
    assert value(m, "coddl_queue_quota_gpus", queue="a", cohort="") == 1
    assert value(m, "coddl_queue_quota_gpus", queue="default", cohort="") == 2
    assert value(m, "coddl_queue_waiting_jobs", queue="default") == 1  # alice's job, now in default

    # /ui: every queue with its quota; members of one's own queue only
    def page(who: str) -> str:
        with httpx.Client(base_url=str(c[who].base_url)) as ui:
            assert ui.post("/ui/login", data={"token": c[who].headers["Authorization"][7:]}).status_code == 303
            return ui.get("/ui/").text

    row = re.compile(r'<tr id="queue-a"[^>]*data-quota="1"[^>]*>(.*?)</tr>', re.S)
    mine, theirs = row.search(page("bob")), row.search(page("alice"))
    assert mine and "(yours)" in mine.group(1) and "bob" in mine.group(1)
    assert theirs and "(yours)" not in theirs.group(1) and "bob" not in theirs.group(1)


def test_a_bad_queue_file_is_one_line_and_exit_2_before_anything_starts(tmp_path) -> None:
    bad = tmp_path / "queues.yaml"
    bad.write_text("queues:\n  - name: vision\n    nominal_gpus: -2\n")
    message = f"error: {bad}: line 3: queues.0.nominal_gpus: must be >= 0, got -2"
    for args in (("server", "start", "--gpus", "4", "--port", "0", "--queues", str(bad)), ("queue", "apply", str(bad))):
        r = coddl(*args, "--state-dir", str(tmp_path / "state"))
        assert (r.returncode, r.stderr.strip().splitlines()) == (2, [message]), r.stderr
    assert not (tmp_path / "state" / "server.json").exists()


@pytest.mark.slow
def test_a_live_team_gets_its_quota_back_from_a_borrowing_job(tmp_path) -> None:
    """4 GPUs, afs-p, queues from a file: carol's team and dave's own 2 each. carol's job (1..4 GPUs)
    borrows dave's idle 2; dave submits one (1..2): in one decision carol's job shrinks in place to 2
    (elastic first: nothing is preempted) and dave's starts on 2. Then the admin commands, live."""
    qfile = tmp_path / "queues.yaml"
    qfile.write_text("queues:\n  - {name: vision, cohort: lab, nominal_gpus: 2, users: [carol]}\n"
                     "  - {name: nlp, cohort: lab, nominal_gpus: 2, users: [dave]}\n")
    srv = Server(tmp_path / "state", gpus=4, policy="afs-p", extra=("--queues", str(qfile)))
    try:
        with srv.client(srv.token("carol")) as carol, srv.client(srv.token("dave")) as dave:
            first = srv.submit(tiny_job("borrower", steps=100_000, max_gpus=4, step_s=0.05), client=carol)
            srv.wait_job(first, lambda j: j["share"] == 4 and j["status"] == "running", 120, "4 GPUs")
            queues = {q["name"]: q for q in srv.admin.get("/queues").json()}
            assert (queues["vision"]["gpus"], queues["vision"]["borrowed_gpus"]) == (4, 2)
            second = srv.submit(tiny_job("owner", steps=100_000, max_gpus=2, step_s=0.05), client=dave)
            srv.wait_job(second, lambda j: j["share"] == 2 and j["status"] == "running", 120, "its quota")
            j = srv.job(first)
            assert j["share"] == 2 and j["status"] == "running"
            # one decision: dave's start and carol's shrink were planned together; carol's job never stopped
            planned = [e for e in j["events"] if e["kind"] == "planned"]
            shrinks = [e["at"] for e in planned if e["action"] == "shrink"]
            start = [e for e in srv.job(second)["events"] if e["kind"] == "planned" and e["action"] == "start"]
            assert start and start[0]["at"] in shrinks
            assert not [e for e in planned if e["action"] in ("suspend", "migrate")]
            queues = {q["name"]: q for q in dave.get("/queues").json()}
            assert (queues["nlp"]["gpus"], queues["nlp"]["borrowed_gpus"], queues["vision"]["borrowed_gpus"]) == (2, 0, 0)
        listed = coddl("queue", "list", "--state-dir", str(srv.state_dir))
        assert listed.returncode == 0 and "vision" in listed.stdout and "nlp" in listed.stdout, listed.stderr
        bad = coddl("queue", "set", "nlp", "--nominal-gpus", "3", "--state-dir", str(srv.state_dir))
        assert bad.returncode == 1 and "add up to 5 GPUs and the cluster has 4" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
        unknown = coddl("queue", "delete", "nope", "--state-dir", str(srv.state_dir))
        assert (unknown.returncode, unknown.stderr.strip().splitlines()) == (1, ["error: 404 Not Found: queue nope: "
                                                                                 "no such queue"])
        ok = coddl("queue", "set", "nlp", "--weight", "2", "--state-dir", str(srv.state_dir))
        assert ok.returncode == 0, ok.stderr
        nlp = next(q for q in srv.admin.get("/queues").json() if q["name"] == "nlp")
        assert (nlp["weight"], nlp["nominal_gpus"], nlp["users"]) == (2.0, 2, ["dave"])
    finally:
        srv.cleanup()
