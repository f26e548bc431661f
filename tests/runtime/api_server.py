"""The REST API alone over real HTTP (uvicorn on 127.0.0.1, a free port) on a real store, with three
users (alice, bob, root the admin) and no controller: what the API itself accepts and refuses."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from coddl.core.cluster import Cluster
from coddl.runtime.api import ClusterInfo, create_app
from coddl.runtime.isolation import Isolation
from coddl.runtime.limits import ApiLimits
from coddl.runtime.server import HttpServer
from coddl.runtime.store import EventRow, Store


@dataclass
class LiveApi:
    store: Store
    url: str
    state: Path
    tokens: dict[str, str]
    clients: dict[str, httpx.Client] = field(default_factory=dict)
    woken: list[float] = field(default_factory=list)

    def snapshot(self) -> dict[str, Any]:
        """Everything already accepted: jobs as stored, tokens and their states, the event count."""
        with self.store._r() as s:  # noqa: SLF001 - counting rows is the point
            events = s.scalar(select(func.count()).select_from(EventRow))
        jobs = [(j.id, j.name, j.owner, j.spec, j.status, j.total_steps, j.message, j.cancel_requested)
                for j in self.store.list_jobs(None, 10_000)]
        tokens = [(t.id, t.user, t.admin, t.expires_at, t.revoked_at) for t in self.store.list_tokens()]
        return {"jobs": jobs, "tokens": tokens, "events": events}


@contextmanager
def live_api(store: Store, state: Path, limits: ApiLimits = ApiLimits(), gpus: int = 4) -> Iterator[LiveApi]:
    app_woken: list[float] = []
    app = create_app(store, ClusterInfo(Cluster.for_gpus(gpus, 4), "local", "max-min()"), state / "jobs",
                     lambda: app_woken.append(time.time()), limits,
                     unseen=Isolation("sandbox", (str(state.resolve()),)).unseen)  # as a server's jobs see
    http = HttpServer(app, "127.0.0.1", 0)
    http.start()
    tokens = {"alice": store.create_token("alice"), "bob": store.create_token("bob"),
              "root": store.create_token("root", admin=True)}
    api = LiveApi(store, http.url, state, tokens, woken=app_woken)
    api.clients = {u: httpx.Client(base_url=http.url, headers={"Authorization": f"Bearer {t}"}, timeout=30)
                   for u, t in tokens.items()}
    api.clients["anon"] = httpx.Client(base_url=http.url, timeout=30)
    try:
        yield api
    finally:
        for c in api.clients.values():
            c.close()
        http.stop()
