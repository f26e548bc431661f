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

from fastapi import Body, Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from coddl.core.cluster import Cluster
from coddl.runtime.logs import stream_logs
from coddl.runtime.spec import SpecError, parse_job, script_argv
from coddl.runtime.store import JobView, Store, User

MAX_LIST = 10_000


@dataclass(frozen=True)
class ClusterInfo:
    """The static part of GET /cluster: what runs the jobs and under which policy."""

    cluster: Cluster
    executor: str
    policy: str


def job_json(j: JobView) -> dict[str, Any]:
    """Plain JSON values, built by hand: listing thousands of jobs should cost a dict each, not a
    recursive ``asdict`` plus FastAPI's generic encoder (list endpoints return JSONResponse directly)."""
    return {
        "id": j.id, "name": j.name, "owner": j.owner, "spec": j.spec, "status": j.status,
        "cancel_requested": j.cancel_requested, "submitted_at": j.submitted_at, "started_at": j.started_at,
        "finished_at": j.finished_at, "total_steps": j.total_steps, "steps_done": j.steps_done, "loss": j.loss,
        "steps_per_s": j.steps_per_s, "share": j.share, "resizes": j.resizes, "message": j.message,
        "gpus": list(j.gpus), "workers": list(j.workers), "terminal": j.terminal,
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


def create_app(store: Store, info: ClusterInfo, jobs_dir: Path, on_change: Callable[[], None]) -> FastAPI:
    app = FastAPI(title="coddl", version="0.1.0",
                  description="Elastic GPU-cluster scheduler for deep-learning training. "
                              "Every endpoint needs `Authorization: Bearer TOKEN` (`coddl token create USER`).")
    bearer = HTTPBearer(auto_error=False, description="a token from `coddl token create USER`")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": _field_error(list(exc.errors()))})

    def user(creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> User:
        if creds is None:
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        u = store.authenticate(creds.credentials)
        if u is None:
            raise HTTPException(401, "invalid token", headers={"WWW-Authenticate": "Bearer"})
        return u

    def owned(job_id: int, u: User) -> JobView:
        j = store.get_job(job_id)
        if j is None:
            raise HTTPException(404, f"job {job_id}: no such job")
        if j.owner != u.name and not u.admin:
            raise HTTPException(403, f"job {job_id} belongs to another user")
        return j

    @app.post("/jobs", status_code=201, summary="submit a job (the job file's fields as JSON)")
    def submit(body: Any = Body(..., examples=[{"name": "mlp", "command": ["python", "/abs/train.py"],
                                                 "steps": 200, "min_gpus": 1, "max_gpus": 4}]),
               u: User = Depends(user)) -> dict[str, Any]:
        try:
            job = parse_job(body, "job")
        except SpecError as e:
            raise HTTPException(422, str(e)) from None
        owner = job.user or u.name
        if owner != u.name and not u.admin:
            raise HTTPException(403, f"job: user: only an admin may submit as {owner!r}")
        if job.command is not None:
            script, _ = script_argv(job.command)
            if not Path(script).is_absolute():
                raise HTTPException(422, f"job: command: script path must be absolute, got {script!r}")
            if not Path(script).is_file():
                raise HTTPException(422, f"job: command: no such script on the server: {script}")
        row = store.add_job(job.name, owner, job.model_dump(mode="json"), job.total_steps)
        on_change()
        return job_json(row)

    @app.get("/jobs", summary="your jobs (an admin sees everyone's), oldest first")
    def jobs(limit: int = Query(1000, ge=1, le=MAX_LIST), u: User = Depends(user)) -> JSONResponse:
        return JSONResponse([job_json(j) for j in store.list_jobs(None if u.admin else u.name, limit)])

    @app.get("/jobs/{job_id}", summary="one job with its events and progress samples")
    def show(job_id: int, u: User = Depends(user)) -> dict[str, Any]:
        j = owned(job_id, u)
        d = job_json(j)
        d["events"] = [asdict(e) for e in store.events(job_id)]
        d["samples"] = [asdict(s) for s in store.samples(job_id)]
        return d

    @app.get("/jobs/{job_id}/logs", summary="the job's worker output; follow=true streams until it ends")
    def logs(job_id: int, follow: bool = False, u: User = Depends(user)) -> StreamingResponse:
        owned(job_id, u)

        def ended() -> bool:
            j = store.get_job(job_id)
            return j is None or j.terminal

        return StreamingResponse(stream_logs(jobs_dir / str(job_id), follow, ended), media_type="text/plain")

    @app.delete("/jobs/{job_id}", status_code=202, summary="cancel a job")
    def cancel(job_id: int, u: User = Depends(user)) -> dict[str, Any]:
        j = owned(job_id, u)
        if j.terminal:
            raise HTTPException(409, f"job {job_id} already {j.status}")
        j = store.request_cancel(job_id, u.name)
        on_change()
        return job_json(j)

    @app.get("/cluster", summary="the live cluster: nodes, GPUs in use, who holds them")
    def cluster(u: User = Depends(user)) -> dict[str, Any]:
        c = info.cluster
        alloc = store.allocations()
        jobs = {jid: store.get_job(jid) for jid in alloc}
        holder: dict[int, int] = {g: jid for jid, gs in alloc.items() for g in gs}
        nodes = []
        for i, n in enumerate(c.nodes):
            first = int(c.node_first_gpu[i])
            gpus = []
            for g in range(first, first + n.gpus):
                jid = holder.get(g)
                visible = jid is not None and (u.admin or jobs[jid].owner == u.name)
                gpus.append({"gpu": g, "job": jid if visible else None, "busy": jid is not None,
                             "owner": jobs[jid].owner if visible else None})
            nodes.append({"name": n.name, "gpu_type": n.gpu_type, "cpus": n.cpus, "gpus": gpus})
        return {"executor": info.executor, "policy": info.policy, "total_gpus": c.total_gpus,
                "gpus_in_use": len(holder), "jobs": store.counts(), "nodes": nodes}

    return app
