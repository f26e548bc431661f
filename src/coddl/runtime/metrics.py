"""``GET /metrics``: the live cluster in Prometheus's text format (the official ``prometheus_client``).

Nothing here runs on the scheduling path. What the store already records is read when Prometheus
scrapes: gauges (GPUs held by each user and idle, jobs by state, each running job's throughput and
progress) are one query each, and the histograms and counters (queue wait, resize and restart
latency, preemptions, worker failures) fold in only the events written since the previous scrape,
by event id — a scrape costs what happened since the last one, not the cluster's history. The one
thing the store does not see, how long the policy and placer took to decide, the controller hands
over as a number per decision (``observe_decision``: one histogram update, about a microsecond).

Counters and histograms count from this server's start, as Prometheus expects of a process (its
``rate()`` and ``increase()`` handle the reset when a server restarts).

Who may scrape: the page names every user and every running job, so it needs an admin token or the
cluster's metrics token (``coddl metrics token``: read-only, good for /metrics and nothing else,
kept as a SHA-256 digest like every token). A user's own token gets 403.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import defaultdict
from typing import Iterator

from fastapi import APIRouter, Depends, HTTPException, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from coddl.core.allocation import ActionKind
from coddl.core.cluster import Cluster
from coddl.core.job import JobStatus
from coddl.queues.model import QueueSet
from coddl.runtime.queues import queue_states, stored_queues
from coddl.runtime.store import LoggedEvent, Store, digest

METRICS_TOKEN_KEY = "metrics_token"  # meta key of the metrics token's digest

RESIZES = (ActionKind.GROW.value, ActionKind.SHRINK.value, ActionKind.MIGRATE.value, ActionKind.RECORE.value,
           "heal")  # heal: a job that lost a worker brought back onto its whole allocation
RESTARTS = (ActionKind.RESUME.value,)  # a preempted job restarted from its checkpoint
_DECISION_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
_FOLD_BATCH = 10_000


class ClusterMetrics:
    """The registry behind /metrics: histograms and counters fed from the event log, plus gauges
    computed at each scrape."""

    def __init__(self, store: Store, cluster: Cluster, policy: str, executor: str) -> None:
        self.store = store
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.decision = Histogram("coddl_scheduler_decision_seconds",
                                  "time the policy and placer took per scheduling decision",
                                  buckets=_DECISION_BUCKETS, registry=r)
        self.plan_actions = Counter("coddl_scheduler_actions", "actions the scheduler's plans carried",
                                    registry=r)
        self.queue_wait = Histogram("coddl_queue_wait_seconds",
                                    "from submission to a job's first GPUs (jobs that started)",
                                    buckets=_WAIT_BUCKETS, registry=r)
        self.start = Histogram("coddl_start_seconds", "from a job's first plan to its workers running",
                               buckets=_LATENCY_BUCKETS, registry=r)
        self.resize = Histogram("coddl_resize_seconds", "in-place resizes carried out, by action, and their "
                                "latency (plan handed over to the job running at its new size)",
                                ["action"], buckets=_LATENCY_BUCKETS, registry=r)
        self.restart = Histogram("coddl_restart_seconds", "restarts from a checkpoint carried out, by action, and "
                                 "their latency", ["action"], buckets=_LATENCY_BUCKETS, registry=r)
        self.preemptions = Counter("coddl_preemptions", "jobs suspended to give their GPUs to others", registry=r)
        self.worker_failures = Counter("coddl_worker_failures", "worker processes that died", registry=r)
        self.recoveries = Counter("coddl_recoveries", "running jobs taken over after a controller restart",
                                  registry=r)
        self.finished = Counter("coddl_jobs_ended", "jobs that reached a terminal state, by state", ["state"],
                                registry=r)
        for a in RESIZES:
            self.resize.labels(a)
        for a in RESTARTS:
            self.restart.labels(a)
        for s in JobStatus:
            if s.terminal:
                self.finished.labels(s.value)
        r.register(_Snapshot(store, cluster, policy, executor))
        self._cursor = store.last_event_id()
        self._lock = threading.Lock()

    def observe_decision(self, seconds: float, actions: int) -> None:
        """The controller's report of one scheduling decision (thread-safe, about a microsecond)."""
        self.decision.observe(seconds)
        if actions:
            self.plan_actions.inc(actions)

    def scrape(self) -> bytes:
        with self._lock:  # two scrapes at once must not fold the same events twice
            while True:
                batch = self.store.event_log(self._cursor, limit=_FOLD_BATCH)
                for e in batch:
                    self._fold(e)
                if batch:
                    self._cursor = batch[-1].id
                if len(batch) < _FOLD_BATCH:
                    break
            return generate_latest(self.registry)

    def _fold(self, le: LoggedEvent) -> None:
        e = le.event
        if e.kind == "planned":
            if e.action == ActionKind.START.value and le.started_at == e.at:  # the first start only
                self.queue_wait.observe(max(0.0, e.at - le.submitted_at))
            elif e.action == ActionKind.SUSPEND.value:
                self.preemptions.inc()
        elif e.kind == "applied" and e.latency_s is not None:
            if e.action == ActionKind.START.value:
                self.start.observe(e.latency_s)
            elif e.action in RESIZES:
                self.resize.labels(e.action).observe(e.latency_s)
            elif e.action in RESTARTS:
                self.restart.labels(e.action).observe(e.latency_s)
        elif e.kind == "worker-lost":
            self.worker_failures.inc()
        elif e.kind == "recovered":
            self.recoveries.inc()
        elif e.kind in self._terminal:
            self.finished.labels(e.kind).inc()

    _terminal = frozenset(s.value for s in JobStatus if s.terminal)


class _Snapshot(Collector):
    """Gauges read from the store at scrape time."""

    def __init__(self, store: Store, cluster: Cluster, policy: str, executor: str) -> None:
        self.store = store
        self.cluster = cluster
        self.policy = policy
        self.executor = executor

    def collect(self) -> Iterator[Metric]:
        info = InfoMetricFamily("coddl_cluster", "the scheduler behind these metrics")
        info.add_metric([], {"policy": self.policy, "executor": self.executor,
                             "nodes": str(len(self.cluster.nodes))})
        yield info
        total = self.cluster.total_gpus
        yield GaugeMetricFamily("coddl_gpus", "GPUs in the cluster", value=total)
        holders = self.store.holders()
        queues = stored_queues(self.store)
        by_user: dict[tuple[str, str], int] = defaultdict(int)
        for j in holders:
            by_user[(j.owner, queues.names[queues.queue_of(j.owner)])] += len(j.gpus)
        allocated = GaugeMetricFamily("coddl_gpus_allocated", "GPUs held by each user's jobs, and the user's queue "
                                      "(a GPU jobs share counts for each of them)",
                                      labels=["user", "queue"])
        for (user, queue), n in sorted(by_user.items()):
            allocated.add_metric([user, queue], n)
        yield allocated
        held = len({g for j in holders for g in j.gpus})  # a GPU jobs share is held once
        yield GaugeMetricFamily("coddl_gpus_idle", "GPUs no job holds", value=total - held)
        yield from self._queues(queues)
        counts = self.store.counts()
        jobs = GaugeMetricFamily("coddl_jobs", "jobs by state", labels=["state"])
        for s in JobStatus:
            jobs.add_metric([s.value], counts.get(s.value, 0))
        yield jobs
        oldest = self.store.oldest_queued()
        yield GaugeMetricFamily("coddl_queue_oldest_wait_seconds",
                                "how long the longest-waiting job that never ran has waited (0: nobody waits)",
                                value=0.0 if oldest is None else max(0.0, time.time() - oldest))
        labels = ["job", "user", "name"]
        rate = GaugeMetricFamily("coddl_job_steps_per_second", "each running job's measured training throughput",
                                 labels=labels)
        gpus = GaugeMetricFamily("coddl_job_gpus", "GPUs each running job holds", labels=labels)
        progress = GaugeMetricFamily("coddl_job_progress_ratio", "steps done / steps planned, per running job",
                                     labels=labels)
        for j in holders:
            key = [str(j.id), j.owner, j.name]
            gpus.add_metric(key, len(j.gpus))
            progress.add_metric(key, min(1.0, j.steps_done / j.total_steps) if j.total_steps else 0.0)
            if j.steps_per_s is not None:
                rate.add_metric(key, j.steps_per_s)
        yield from (rate, gpus, progress)


    def _queues(self, queues: QueueSet) -> Iterator[Metric]:
        quota = GaugeMetricFamily("coddl_queue_quota_gpus", "each queue's nominal GPU quota", labels=["queue", "cohort"])
        borrowed = GaugeMetricFamily("coddl_queue_borrowed_gpus", "GPUs each queue holds beyond its quota",
                                     labels=["queue"])
        waiting = GaugeMetricFamily("coddl_queue_waiting_jobs", "each queue's jobs waiting for GPUs", labels=["queue"])
        for st in queue_states(self.store, self.cluster, queues):
            name = st.queue.name
            quota.add_metric([name, st.queue.cohort or ""], st.nominal_gpus)
            borrowed.add_metric([name], st.borrowed)
            waiting.add_metric([name], st.waiting)
        yield from (quota, borrowed, waiting)


# --------------------------------------------------------------------------- the scrape token
def create_metrics_token(store: Store) -> str:
    """A new metrics token (printed once); it replaces the previous one."""
    token = secrets.token_urlsafe(32)
    store.set_meta(METRICS_TOKEN_KEY, digest(token))
    return token


def may_scrape(store: Store, token: str) -> bool | None:
    """True for the metrics token or an admin's; False for a user's; None for no valid token."""
    expected = store.get_meta(METRICS_TOKEN_KEY)
    if expected is not None and secrets.compare_digest(expected, digest(token)):
        return True
    user = store.authenticate(token)
    return None if user is None else user.admin


def metrics_router(metrics: ClusterMetrics) -> APIRouter:
    router = APIRouter()
    bearer = HTTPBearer(auto_error=False, description="an admin token or the metrics token (`coddl metrics token`)")

    @router.get("/metrics", summary="Prometheus metrics (an admin token or the metrics token)",
                response_class=Response)
    def scrape(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Response:
        allowed = None if creds is None else may_scrape(metrics.store, creds.credentials)
        if allowed is None:
            raise HTTPException(401, "missing or invalid bearer token", headers={"WWW-Authenticate": "Bearer"})
        if not allowed:
            raise HTTPException(403, "/metrics names every user's jobs: it needs an admin token or the "
                                     "metrics token (`coddl metrics token`)")
        return Response(metrics.scrape(), media_type=CONTENT_TYPE_LATEST)

    return router
