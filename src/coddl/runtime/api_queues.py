"""The queue endpoints: everyone sees the queues (quota, cohort, limits, what each holds now; members
only for admins and for a user's own queue); admins create, change and delete them.

``PUT /queues/{name}`` creates or replaces one queue, ``DELETE /queues/{name}`` removes it (its users
fall back to ``default``), ``PUT /queues`` replaces them all (what ``coddl queue apply FILE`` sends).
Each change is validated as a whole set against the cluster in one store transaction: an invalid
body is 422, a set that cannot work (quotas over the cluster, a user in two queues) is 409, and
either way nothing stored changes. The scheduler takes the new queues at its next decision.
"""

from __future__ import annotations

from typing import Any, Callable

from fastapi import APIRouter, Depends, HTTPException
from fastapi.responses import JSONResponse

from coddl.core.cluster import Cluster
from coddl.queues.config import QueueFields, QueueFile, QueueModel, queue_set
from coddl.queues.model import Queue, QueueError
from coddl.runtime import queues as stored
from coddl.runtime.spec import SpecError, validate
from coddl.runtime.store import Store, User
from coddl.runtime.wire import SafeJSONResponse, schema_body


def queue_routes(store: Store, cluster: Cluster, user: Callable[..., User], body: Callable[..., Any],
                 on_change: Callable[[], None]) -> APIRouter:
    router = APIRouter(prefix="/queues", tags=["queues"])

    def admin(u: User = Depends(user)) -> User:
        if not u.admin:
            raise HTTPException(403, "only an admin may change queues")
        return u

    def listing(u: User) -> JSONResponse:
        states = stored.queue_states(store, cluster)
        mine = stored.stored_queues(store).queue_of(u.name)
        return SafeJSONResponse([s.as_json(members=u.admin or i == mine) for i, s in enumerate(states)])

    def change(edit: Callable[[list[Queue]], list[Queue]]) -> None:
        try:
            stored.update(store, cluster, edit)
        except QueueError as e:
            raise HTTPException(409, str(e)) from None
        on_change()

    @router.get("", summary="every queue: quota, cohort, limits, weight, GPUs held, jobs running and waiting")
    def list_queues(u: User = Depends(user)) -> JSONResponse:
        return listing(u)

    @router.put("/{name}", summary="create or replace a queue (admin only)", openapi_extra=schema_body(QueueFields))
    def put_queue(name: str, u: User = Depends(admin), data: Any = Depends(body)) -> JSONResponse:
        try:
            fields = validate(QueueFields, data, "queue", what="queue")  # a 'name' in the body is unknown
            new = queue_set([validate(QueueModel, {**fields.model_dump(), "name": name}, "queue")]).queues[0]
        except (SpecError, QueueError) as e:
            raise HTTPException(422, str(e)) from None

        def edit(current: list[Queue]) -> list[Queue]:
            names = [q.name for q in current]
            return [new if q.name == name else q for q in current] if name in names else [*current, new]

        change(edit)
        return listing(u)

    @router.delete("/{name}", summary="delete a queue (admin only); its users fall back to 'default'")
    def delete_queue(name: str, u: User = Depends(admin)) -> JSONResponse:
        if name not in [n for n, _ in store.queues()]:
            raise HTTPException(404, f"queue {name}: no such queue")
        change(lambda current: [q for q in current if q.name != name])
        return listing(u)

    @router.put("", summary="replace every queue (admin only): a queue file's content as JSON",
                openapi_extra=schema_body(QueueFile))
    def put_all(u: User = Depends(admin), data: Any = Depends(body)) -> JSONResponse:
        try:
            new = queue_set(validate(QueueFile, data, "queues", what="queue file").queues)
        except (SpecError, QueueError) as e:
            raise HTTPException(422, str(e)) from None
        change(lambda _current: list(new.configured))
        return listing(u)

    return router

