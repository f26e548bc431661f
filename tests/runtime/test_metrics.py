"""/metrics over real HTTP on a real store (SQLite and PostgreSQL), parsed with Prometheus's own parser.

The store is written the way the controller writes it (plans, applied actions, progress, exits), with
times chosen so that every value scraped is known by hand: a job that waited 30 s, a shrink that took
0.05 s, a resume that took 3 s. test_live_operator_views.py scrapes a running server while real jobs run and resize."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from coddl.core.allocation import Action, ActionKind
from coddl.core.cluster import Cluster
from coddl.core.job import JobStatus
from coddl.runtime.api import ClusterInfo, create_app
from coddl.runtime.metrics import ClusterMetrics, create_metrics_token, metrics_router
from coddl.runtime.server import HttpServer
from coddl.runtime.store import ProgressUpdate, Store

from runtime_live import REPO

DASHBOARD = REPO / "examples" / "grafana" / "coddl-dashboard.json"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as {(name, sorted labels): value}, through the official parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(m: dict, metric: str, /, **labels: str) -> float:
    return m[(metric, tuple(sorted(labels.items())))]


@pytest.fixture
def served(store_url, tmp_path):
    store = Store(store_url)
    metrics = ClusterMetrics(store, Cluster.for_gpus(4, 4), "max-min()", "local")
    app = create_app(store, ClusterInfo(Cluster.for_gpus(4, 4), "local", "max-min()"), tmp_path / "jobs",
                     lambda: None)
    app.include_router(metrics_router(metrics))
    http = HttpServer(app, "127.0.0.1", 0)
    http.start()
    yield store, metrics, http.url
    http.stop()
    store.close()


def scrape(url: str, token: str) -> dict:
    r = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=")  # the text exposition format
    return samples(r.text)


def test_values_follow_the_store_as_the_controller_writes_it(served):
    store, metrics, url = served
    admin = store.create_token("root", admin=True)
    a = store.add_job("train-a", "alice", {"name": "train-a"}, total_steps=100)
    m = scrape(url, admin)
    assert value(m, "coddl_gpus") == 4 and value(m, "coddl_gpus_idle") == 4
    assert value(m, "coddl_jobs", state="queued") == 1 and value(m, "coddl_jobs", state="running") == 0
    assert value(m, "coddl_queue_oldest_wait_seconds") >= 0
    assert value(m, "coddl_queue_wait_seconds_count") == 0
    assert value(m, "coddl_cluster_info", policy="max-min()", executor="local", nodes="1") == 1

    t = a.submitted_at + 30.0  # alice's job waited 30 s for its GPUs
    store.record_plan([Action(ActionKind.START, str(a.id), (), (0, 1, 2, 3))], at=t)
    store.record_applied(a.id, "start", (0, 1, 2, 3), 1.5, t + 1.5)
    store.record_progress([ProgressUpdate(a.id, t + 5, 50, 4, 12.5, 0.7)])
    metrics.observe_decision(0.003, 1)
    m = scrape(url, admin)
    assert value(m, "coddl_gpus_allocated", user="alice", queue="default") == 4 and value(m, "coddl_gpus_idle") == 0
    assert value(m, "coddl_jobs", state="running") == 1 and value(m, "coddl_queue_oldest_wait_seconds") == 0
    assert value(m, "coddl_queue_wait_seconds_count") == 1
    assert value(m, "coddl_queue_wait_seconds_sum") == pytest.approx(30.0)
    assert value(m, "coddl_queue_wait_seconds_bucket", le="15.0") == 0
    assert value(m, "coddl_queue_wait_seconds_bucket", le="30.0") == 1
    assert value(m, "coddl_start_seconds_sum") == pytest.approx(1.5)
    job = {"job": str(a.id), "user": "alice", "name": "train-a"}
    assert value(m, "coddl_job_steps_per_second", **job) == 12.5
    assert value(m, "coddl_job_progress_ratio", **job) == 0.5 and value(m, "coddl_job_gpus", **job) == 4
    assert value(m, "coddl_scheduler_decision_seconds_count") == 1
    assert value(m, "coddl_scheduler_decision_seconds_sum") == pytest.approx(0.003)
    assert value(m, "coddl_scheduler_decision_seconds_bucket", le="0.0025") == 0
    assert value(m, "coddl_scheduler_actions_total") == 1

    b = store.add_job("train-b", "bob", {"name": "train-b"}, total_steps=10)
    t2 = b.submitted_at + 2.0
    store.record_plan([Action(ActionKind.SHRINK, str(a.id), (0, 1, 2, 3), (0, 1)),
                       Action(ActionKind.START, str(b.id), (), (2, 3))], at=t2)
    store.record_applied(a.id, "shrink", (0, 1), 0.05, t2 + 0.05)
    store.record_plan([Action(ActionKind.SUSPEND, str(b.id), (2, 3), ())], at=t2 + 10)
    store.record_plan([Action(ActionKind.RESUME, str(b.id), (), (2, 3))], at=t2 + 20)
    store.record_applied(b.id, "resume", (2, 3), 3.0, t2 + 23)
    store.record_event(b.id, "worker-lost", t2 + 30, "1 worker failures, 0 restarts from checkpoint")
    m = scrape(url, admin)
    assert value(m, "coddl_gpus_allocated", user="alice", queue="default") == 2
    assert value(m, "coddl_gpus_allocated", user="bob", queue="default") == 2
    assert value(m, "coddl_queue_wait_seconds_count") == 2  # the resume is not a second wait
    assert value(m, "coddl_queue_wait_seconds_sum") == pytest.approx(32.0)
    assert value(m, "coddl_resize_seconds_count", action="shrink") == 1
    assert value(m, "coddl_resize_seconds_bucket", action="shrink", le="0.025") == 0
    assert value(m, "coddl_resize_seconds_bucket", action="shrink", le="0.05") == 1
    assert value(m, "coddl_resize_seconds_count", action="grow") == 0  # present before the first grow
    assert value(m, "coddl_restart_seconds_count", action="resume") == 1
    assert value(m, "coddl_restart_seconds_sum", action="resume") == pytest.approx(3.0)
    assert value(m, "coddl_preemptions_total") == 1 and value(m, "coddl_worker_failures_total") == 1

    store.finish(a.id, JobStatus.FINISHED, t2 + 40)
    m2 = scrape(url, admin)
    assert value(m2, "coddl_jobs", state="finished") == 1 and value(m2, "coddl_jobs_ended_total", state="finished") == 1
    assert ("coddl_job_gpus", tuple(sorted(job.items()))) not in m2  # an ended job leaves the per-job series
    for key in ("coddl_resize_seconds_count", "coddl_restart_seconds_count"):  # a scrape folds each event once
        assert {k: v for k, v in m2.items() if k[0] == key} == {k: v for k, v in m.items() if k[0] == key}


def test_only_admins_and_the_metrics_token_may_scrape(served):
    store, _, url = served
    alice = store.create_token("alice")
    admin = store.create_token("root", admin=True)
    first = create_metrics_token(store)
    second = create_metrics_token(store)  # rotation: the first one stops working

    def status(token: str | None) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(f"{url}/metrics", headers=headers).status_code

    assert status(None) == 401 and status("forged") == 401 and status(first) == 401
    assert status(alice) == 403
    assert status(admin) == 200 and status(second) == 200
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {second}"}) as scraper:
        assert scraper.get("/jobs").status_code == 401  # the metrics token opens /metrics only


def test_events_before_the_server_started_are_not_counted(store_url):
    store = Store(store_url)
    a = store.add_job("old", "alice", {"name": "old"}, total_steps=10)
    store.record_plan([Action(ActionKind.START, str(a.id), (), (0,))], at=a.submitted_at + 5)
    metrics = ClusterMetrics(store, Cluster.for_gpus(2, 2), "fifo()", "local")
    m = samples(metrics.scrape().decode())
    assert value(m, "coddl_queue_wait_seconds_count") == 0  # counters start at the server's start
    assert value(m, "coddl_gpus_allocated", user="alice", queue="default") == 1  # gauges show the present
    store.close()


def test_the_grafana_dashboard_queries_only_metrics_the_server_exports(tmp_path):
    store = Store.for_state_dir(tmp_path)
    metrics = ClusterMetrics(store, Cluster.for_gpus(2, 2), "fifo()", "local")
    a = store.add_job("a", "alice", {"name": "a"}, total_steps=10)
    store.record_plan([Action(ActionKind.START, str(a.id), (), (0,))], at=a.submitted_at)
    store.record_progress([ProgressUpdate(a.id, a.submitted_at + 1, 5, 1, 2.0, None)])
    exported = {name for name, _ in samples(metrics.scrape().decode())}
    panels = json.loads(DASHBOARD.read_text())["panels"]
    queried = {m for p in panels for t in p["targets"] for m in re.findall(r"\bcoddl_\w+", t["expr"])}
    assert len(panels) >= 10 and queried and queried <= exported, sorted(queried - exported)
    store.close()
