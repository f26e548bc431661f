"""The live web dashboard, served by the API server under ``/ui``: the cluster's GPUs and who holds
them, jobs with their progress, GPUs held and throughput over time, and each job's history and logs.

Pages are rendered on the server (Jinja2, autoescaped) with inline SVG charts; a small script
re-fetches the page every few seconds and swaps its ``<main>``, so it stays live without a build
step or a client framework.

Who sees what is the API's rule: a user sees their own jobs, an admin everyone's; a GPU held by
someone else's job shows as busy, without the job's id, name or owner. The login page takes an API
token and keeps it in an HttpOnly, SameSite=Strict cookie scoped to ``/ui``: scripts cannot read it,
other sites cannot send it, and the JSON API ignores it (it reads only the ``Authorization`` header),
so the cookie can never be used to submit or cancel. The dashboard itself only reads. Every page
carries a Content-Security-Policy that allows no inline script or style and nothing from elsewhere.
"""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, PackageLoader, select_autoescape

from coddl.runtime.api import ClusterInfo
from coddl.runtime.dashboard.charts import OTHERS, Series, colour, lines, stacked_steps
from coddl.runtime.logs import tail_logs
from coddl.runtime.queues import queue_states, stored_queues
from coddl.runtime.store import TERMINAL, JobView, Store, User
from coddl.traces.history import step_series

COOKIE = "coddl_token"
MAX_TOKEN = 512  # longer than any token coddl makes; a bigger login body is refused unread
MAX_JOBS = 200  # jobs listed on the overview (newest first)
MAX_SERIES = 10  # jobs drawn one by one in a chart; the rest share a band
WINDOWS_MIN = (10, 30, 60, 360, 1440)
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _clock(t: float | None) -> str:
    return "" if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ago(t: float | None) -> str:
    if t is None:
        return ""
    s = max(0.0, time.time() - t)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.0f} {unit} ago"
    return f"{s:.0f} s ago"


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("coddl.runtime.dashboard", "templates"),
                      autoescape=select_autoescape(["html"]))
    env.filters["clock"] = _clock
    env.filters["ago"] = _ago
    return env


class Dashboard:
    def __init__(self, store: Store, info: ClusterInfo, jobs_dir: Path) -> None:
        self.store = store
        self.info = info
        self.jobs_dir = Path(jobs_dir)
        self.env = _environment()

    # ------------------------------------------------------------------ plumbing
    def user(self, request: Request) -> User | None:
        token = request.cookies.get(COOKIE)
        return self.store.authenticate(token) if token and len(token) <= MAX_TOKEN else None

    def page(self, name: str, request: Request, status: int = 200, **context: Any) -> HTMLResponse:
        refresh = request.query_params.get("refresh", "5")
        context.setdefault("refresh", refresh if refresh.isdigit() and 1 <= int(refresh) <= 300 else "5")
        html = self.env.get_template(name).render(info=self.info, **context)
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    # ------------------------------------------------------------------ the overview
    def overview(self, request: Request, u: User) -> HTMLResponse:
        minutes = request.query_params.get("window", "30")
        window = int(minutes) if minutes.isdigit() and int(minutes) in WINDOWS_MIN else 30
        now = time.time()
        since = now - 60 * window
        holders = self.store.holders()
        jobs = list(reversed(self.store.list_jobs(None if u.admin else u.name, MAX_JOBS)))
        held, throughput = self._history(u, since, now)
        return self.page("overview.html", request, user=u, nodes=self._gpus(u, holders), jobs=jobs,
                         counts=self.store.counts(), queues=self._queues(u),
                         gpus_in_use=len({g for j in holders for g in j.gpus}), window=window, windows=WINDOWS_MIN,
                         allocation_chart=held, throughput_chart=throughput)

    def _queues(self, u: User) -> list[dict[str, Any]]:
        """The teams' queues (none when none are configured): quota, use, borrowing; members for admins
        and for the user's own queue."""
        queues = stored_queues(self.store)
        if not queues.configured:
            return []
        mine = queues.queue_of(u.name)
        return [dict(st.as_json(members=u.admin or i == mine), mine=i == mine)
                for i, st in enumerate(queue_states(self.store, self.info.cluster, queues))]

    def _gpus(self, u: User, holders: list[JobView]) -> list[dict[str, Any]]:
        """Each node's GPUs with the job on each: named only where the user may see the job."""
        holder = {g: j for j in holders for g in j.gpus}
        c = self.info.cluster
        nodes = []
        for i, n in enumerate(c.nodes):
            first = int(c.node_first_gpu[i])
            cells = []
            for g in range(first, first + n.gpus):
                j = holder.get(g)
                mine = j is not None and (u.admin or j.owner == u.name)
                cells.append({"gpu": g, "busy": j is not None, "job": j if mine else None})
            nodes.append({"name": n.name, "gpu_type": n.gpu_type, "gpus": cells})
        return nodes

    def _history(self, u: User, since: float, now: float) -> tuple[Any, Any]:
        """GPUs held over the window (a band per visible job, one for everyone else's) and the
        visible jobs' throughput."""
        levels: dict[int, list[tuple[float, float]]] = defaultdict(list)
        names: dict[int, str] = {}
        owners: dict[int, str] = {}
        after = 0
        while batch := self.store.event_log(after, alive_since=since, kinds=("planned", "recovered", *TERMINAL)):
            for le in batch:
                e = le.event
                levels[e.job_id].append((e.at, float(len(e.gpus_after or ())) if e.kind == "planned" else 0.0))
                owners[e.job_id] = le.owner
            after = batch[-1].id
        mine = sorted(sorted((j for j in levels if u.admin or owners[j] == u.name), reverse=True)[:MAX_SERIES])
        for j in mine:
            view = self.store.get_job(j)
            names[j] = view.name if view else ""
        band = [Series(f"{j} {names.get(j, '')}", colour(j), levels[j]) for j in mine]
        rest = [j for j in levels if j not in mine]
        if rest:
            changes = [(t, v - prev) for j in rest for (t, v), prev in zip(levels[j], [0.0] + [v for _, v in levels[j]])]
            band.append(Series("others" if not u.admin else "other jobs", OTHERS,
                               [(t, float(v)) for t, v in step_series(changes)]))
        # a window longer than the cluster's history starts where the history does
        first = min((pts[0][0] for pts in levels.values() if pts), default=since)
        t0 = max(since, first - 0.02 * (now - first))
        allocation = stacked_steps(band, t0, now, self.info.cluster.total_gpus, "GPUs held over time")
        samples = self.store.samples_since(since, mine)
        rates = [Series(f"{j} {names.get(j, '')}", colour(j), [(s.at, s.steps_per_s) for s in samples[j]])
                 for j in mine if samples[j]]
        return allocation, lines(rates, t0, now, "training throughput over time")

    # ------------------------------------------------------------------ one job
    def job(self, request: Request, u: User, job_id: int) -> HTMLResponse:
        j = self.store.get_job(job_id)
        if j is None:
            return self.page("error.html", request, 404, user=u, message=f"job {job_id}: no such job")
        if not (u.admin or j.owner == u.name):
            return self.page("error.html", request, 403, user=u, message=f"job {job_id} belongs to another user")
        events = self.store.events(job_id)
        samples = self.store.samples(job_id)
        t0 = j.submitted_at
        t1 = j.finished_at or time.time()
        held = [(e.at, float(len(e.gpus_after or ()))) for e in events if e.kind == "planned"]
        held += [(e.at, 0.0) for e in events if e.kind in TERMINAL or e.kind == "recovered"]
        held.sort()
        gpus_chart = stacked_steps([Series("GPUs", colour(j.id), held)], t0, t1, self.info.cluster.total_gpus,
                                   "GPUs held over time")
        rate_chart = lines([Series("steps/s", colour(j.id), [(s.at, s.steps_per_s) for s in samples])], t0, t1,
                           "throughput over time")
        losses = [(s.at, s.loss) for s in samples if s.loss is not None]
        loss_chart = lines([Series("loss", "#444", losses)], t0, t1, "loss over time") if losses else None
        return self.page("job.html", request, user=u, job=j, events=events, gpus_chart=gpus_chart,
                         rate_chart=rate_chart, loss_chart=loss_chart, logs=tail_logs(self.jobs_dir / str(job_id)))


def mount_dashboard(app: FastAPI, store: Store, info: ClusterInfo, jobs_dir: Path) -> None:
    """Add the dashboard's pages to the API server's app."""
    d = Dashboard(store, info, jobs_dir)
    app.mount("/ui/static", StaticFiles(packages=[("coddl.runtime.dashboard", "static")]), name="ui-static")

    def login_page() -> Response:
        return RedirectResponse("/ui/login", status_code=303)

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return RedirectResponse("/ui/", status_code=303)

    @app.get("/ui/", include_in_schema=False)
    def overview(request: Request) -> Response:
        u = d.user(request)
        return d.overview(request, u) if u else login_page()

    @app.get("/ui/jobs/{job_id}", include_in_schema=False)
    def job(request: Request, job_id: str) -> Response:
        u = d.user(request)
        if u is None:
            return login_page()
        if not job_id.isdigit() or len(job_id) > 10:
            return d.page("error.html", request, 404, user=u, message=f"job {job_id[:20]!r}: no such job")
        return d.job(request, u, int(job_id))

    @app.get("/ui/login", include_in_schema=False)
    def login_form(request: Request) -> Response:
        return d.page("login.html", request, user=None, error=None)

    @app.post("/ui/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        body = await request.body()
        token = ""
        if len(body) <= 2 * MAX_TOKEN:
            token = (parse_qs(body.decode("utf-8", "replace")).get("token") or [""])[0].strip()
        u = d.store.authenticate(token) if token and len(token) <= MAX_TOKEN else None
        if u is None:
            return d.page("login.html", request, 401, user=None, error="That token is not valid.")
        resp = RedirectResponse("/ui/", status_code=303)
        resp.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/ui",
                        secure=request.url.scheme == "https")
        return resp

    @app.post("/ui/logout", include_in_schema=False)
    def logout() -> Response:
        resp = RedirectResponse("/ui/login", status_code=303)
        resp.delete_cookie(COOKIE, path="/ui")
        return resp
