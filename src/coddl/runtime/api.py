"""The REST API (FastAPI; OpenAPI docs at /docs): submit, list, inspect, follow and cancel jobs, and
look at the live cluster.

Every data endpoint needs ``Authorization: Bearer TOKEN`` (401 without a valid one). A user sees and
cancels only their own jobs (403 otherwise); an admin token sees and cancels all. The API writes
submissions and cancel requests to the store and wakes the controller; it never touches the
scheduler, so a slow request cannot stall scheduling. Malformed requests get a 4xx whose ``detail``
is one line naming the field — never a 500.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from coddl.core.cluster import Cluster
from coddl.core.job import JobStatus
from coddl.runtime.api_queues import queue_routes
from coddl.runtime.api_tokens import token_routes
from coddl.runtime.limits import MAX_STORE_INT, ApiLimits, fit_problem, held_message
from coddl.runtime.logs import stream_logs
from coddl.runtime.queues import queue_fit_problem
from coddl.runtime.spec import JobFile, SpecError, parse_job, script_argv
from coddl.runtime.store import JobView, Store, User
from coddl.runtime.text import short
from coddl.runtime.wire import BodyLimit, SafeJSONResponse, json_body, schema_body, text_param

MAX_LIST = 10_000
STATUSES = tuple(s.value for s in JobStatus)


@dataclass(frozen=True)
class ClusterInfo:
    """The static part of GET /cluster: what runs the jobs and under which policy."""

    cluster: Cluster
    executor: str
    policy: str


def job_json(j: JobView) -> dict[str, Any]:
    """Plain JSON values, built by hand: listing thousands of jobs should cost a dict each, not a
    recursive ``asdict`` plus FastAPI's generic encoder (every endpoint returns a SafeJSONResponse directly)."""
    return {
        "id": j.id, "name": j.name, "owner": j.owner, "spec": j.spec, "status": j.status,
        "cancel_requested": j.cancel_requested, "submitted_at": j.submitted_at, "started_at": j.started_at,
        "finished_at": j.finished_at, "total_steps": j.total_steps, "steps_done": j.steps_done, "loss": j.loss,
        "steps_per_s": j.steps_per_s, "share": j.share, "resizes": j.resizes, "message": j.message,
        "gpus": list(j.gpus), "workers": [w.to_dict() for w in j.workers], "terminal": j.terminal,
        "attained_service": j.attained_service,
    }


def _field_error(errors: list[dict]) -> str:
    e = errors[0]
    if e.get("type") == "json_invalid":
        return f"body: not valid JSON ({(e.get('ctx') or {}).get('error', 'decode error')})"
    loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "path", "query")]
    where = ".".join(loc) or ("body" if e.get("loc", ("",))[0] == "body" else "request")
    msg = e.get("msg", "invalid")
    return f"{where}: {msg[0].lower()}{msg[1:]}"


def _statuses(status: str | None) -> tuple[str, ...]:
    wanted = tuple(s.strip() for s in status.split(",") if s.strip()) if status else ()
    for s in wanted:
        if s not in STATUSES:
            raise HTTPException(422, f"status: unknown status {short(s)} (one of {', '.join(STATUSES)})")
    return wanted


def create_app(store: Store, info: ClusterInfo, jobs_dir: Path, on_change: Callable[[], None],
               limits: ApiLimits = ApiLimits(), on_queues: Callable[[], None] = lambda: None,
               unseen: Callable[[str], str | None] = lambda _script: None) -> FastAPI:
    """``on_change``: a job was submitted or cancelled; ``on_queues``: an admin changed the queues;
    ``unseen``: why a job could not see a script (``Isolation.unseen``), or None."""
    app = FastAPI(title="coddl", version="0.1.0", default_response_class=SafeJSONResponse,
                  description="Elastic GPU-cluster scheduler for deep-learning training. "
                              "Every endpoint needs `Authorization: Bearer TOKEN` (`coddl token create USER`). "
                              f"Request bodies are limited to {limits.max_body_bytes:,} bytes (413 beyond).")
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    bearer = HTTPBearer(auto_error=False, description="a token from `coddl token create USER`")
    body = json_body(limits.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return SafeJSONResponse(status_code=422, content={"detail": _field_error(list(exc.errors()))})

    def user(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> User:
        if creds is None:
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        u = store.authenticate(creds.credentials)
        if u is None:
            state = store.token_state(creds.credentials)  # only a refused token pays for this
            reason = f"token {state}" if state else "invalid token"
            raise HTTPException(401, reason, headers={"WWW-Authenticate": "Bearer"})
        return u

    def owned(job_id: int, u: User) -> JobView:
        j = store.get_job(job_id)
        if j is None:
            raise HTTPException(404, f"job {job_id}: no such job")
        if j.owner != u.name and not u.admin:
            raise HTTPException(403, f"job {job_id} belongs to another user")
        return j

    @app.post("/jobs", status_code=201, summary="submit a job (the job file's fields as JSON)",
              openapi_extra=schema_body(JobFile),
              responses={413: {"description": "the body is over the server's limit"},
                         422: {"description": "a field is invalid, or the job can never fit the cluster"}})
    def submit(u: User = Depends(user), data: Any = Depends(body)) -> SafeJSONResponse:
        try:
            job = parse_job(data, "job")
        except SpecError as e:
            raise HTTPException(422, str(e)) from None
        owner = job.user or u.name
        if owner != u.name and not u.admin:
            raise HTTPException(403, f"job: user: only an admin may submit as {short(owner)}")
        if job.command is not None and job.kind == "elastic":  # a command job's program is found by its ranks
            script, _ = script_argv(job.command)
            if not Path(script).is_absolute():
                raise HTTPException(422, f"job: command: script path must be absolute, got {short(script)}")
            try:
                exists = Path(script).is_file()
            except OSError as e:  # a name too long for the filesystem
                raise HTTPException(422, f"job: command: {e.strerror}: {short(script)}") from None
            if not exists:
                raise HTTPException(422, f"job: command: no such script on the server: {short(script, 200)}")
            if (why := unseen(script)) is not None:
                raise HTTPException(422, f"job: command: {short(script, 200)} {why}")
        problem = fit_problem(info.cluster, job.min_gpus)
        if limits.too_large == "refuse":  # (held instead: a job over its queue's ceiling waits for a new quota)
            refused = problem or queue_fit_problem(store, info.cluster, owner, job.min_gpus)
            if refused is not None:
                raise HTTPException(422, f"job: min_gpus: {refused}")
        row = store.add_job(job.name, owner, job.model_dump(mode="json"), job.total_steps,
                            None if problem is None else held_message(problem))
        on_change()
        return SafeJSONResponse(job_json(row), status_code=201)

    @app.get("/jobs", summary="your jobs (an admin sees everyone's): the newest `limit`, oldest first; "
                              "page back with `before` = the smallest id you have")
    def jobs(limit: int = Query(1000, ge=1, le=MAX_LIST),
             before: int | None = Query(None, ge=1, description="only jobs with a smaller id (the next page)"),
             user_: str | None = Query(None, alias="user", max_length=64, description="only this user's jobs"),
             status: str | None = Query(None, description="only jobs in these states, comma-separated"),
             u: User = Depends(user)) -> JSONResponse:
        owner = text_param("user", user_)
        if owner is not None and owner != u.name and not u.admin:
            raise HTTPException(403, "user: only an admin may list another user's jobs")
        if not u.admin:
            owner = u.name
        rows = store.list_jobs(owner, limit, before if before is not None and before <= MAX_STORE_INT else None,
                               _statuses(status))  # a bound past every id is no bound
        return SafeJSONResponse([job_json(j) for j in rows])

    @app.get("/jobs/{job_id}", summary="one job with its events and progress samples")
    def show(job_id: int, u: User = Depends(user)) -> SafeJSONResponse:
        j = owned(job_id, u)
        d = job_json(j)
        d["events"] = [asdict(e) for e in store.events(job_id)]
        d["samples"] = [asdict(s) for s in store.samples(job_id)]
        return SafeJSONResponse(d)

    @app.get("/jobs/{job_id}/profile", summary="the job's throughput profile: what its first steps measured, the "
                                              "estimator's belief and the curve the scheduler plans it on")
    def profile(job_id: int, u: User = Depends(user)) -> SafeJSONResponse:
        owned(job_id, u)
        record = store.profile(job_id)
        if record is None:
            raise HTTPException(404, f"job {job_id}: no profile yet (an elastic job reports one after its first steps)")
        return SafeJSONResponse(record)

    @app.get("/jobs/{job_id}/logs", summary="the job's worker output; follow=true streams until it ends")
    def logs(job_id: int, follow: bool = False, u: User = Depends(user)) -> StreamingResponse:
        owned(job_id, u)

        def ended() -> bool:
            j = store.get_job(job_id)
            return j is None or j.terminal

        return StreamingResponse(stream_logs(jobs_dir / str(job_id), follow, ended), media_type="text/plain")

    @app.delete("/jobs/{job_id}", status_code=202, summary="cancel a job")
    def cancel(job_id: int, u: User = Depends(user)) -> SafeJSONResponse:
        j = owned(job_id, u)
        if j.terminal:
            raise HTTPException(409, f"job {job_id} already {j.status}")
        j = store.request_cancel(job_id, u.name)
        on_change()
        return SafeJSONResponse(job_json(j), status_code=202)

    app.include_router(token_routes(store, user, body))
    app.include_router(queue_routes(store, info.cluster, user, body, on_queues))

    @app.get("/cluster", summary="the live cluster: nodes, GPUs in use, who holds them")
    def cluster(u: User = Depends(user)) -> SafeJSONResponse:
        c = info.cluster
        alloc = store.allocations()
        jobs = {jid: store.get_job(jid) for jid in alloc}
        holders: dict[int, list[int]] = {}  # several jobs on one GPU: they share it (gpu_fraction, shareable)
        for jid, gs in sorted(alloc.items()):
            for g in gs:
                holders.setdefault(g, []).append(jid)
        nodes = []
        for i, n in enumerate(c.nodes):
            first = int(c.node_first_gpu[i])
            gpus = []
            for g in range(first, first + n.gpus):
                seen = [j for j in holders.get(g, ()) if u.admin or jobs[j].owner == u.name]
                jid = seen[0] if seen else None
                gpus.append({"gpu": g, "job": jid, "jobs": seen, "tenants": len(holders.get(g, ())),
                             "busy": g in holders, "owner": jobs[jid].owner if jid is not None else None})
            nodes.append({"name": n.name, "gpu_type": n.gpu_type, "cpus": n.cpus, "gpus": gpus})
        return SafeJSONResponse({"executor": info.executor, "policy": info.policy, "total_gpus": c.total_gpus,
                                 "gpus_in_use": len(holders), "jobs": store.counts(), "nodes": nodes})

    return app
