"""The HTTP client the CLI and the demo use. Where to connect and as whom comes from, in order:
``--server``/``--token``, ``CODDL_SERVER``/``CODDL_TOKEN``, the state directory's ``client.json``
(written by ``coddl server start``), and for the server the default ``http://127.0.0.1:8470``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

import httpx

from coddl.runtime.paths import CLIENT_FILE, DEFAULT_PORT, default_state_dir
from coddl.runtime.spec import JobFile


class ClientError(Exception):
    """A request that did not succeed, as one line (status and the server's detail); ``status`` is the
    HTTP status (None: the server was not reached)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    server: str
    token: str | None


def resolve(server: str | None = None, token: str | None = None, state_dir: Path | None = None) -> Endpoint:
    path = Path(state_dir or default_state_dir()) / CLIENT_FILE
    saved: dict[str, Any] = {}
    if path.is_file():
        try:
            saved = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            saved = {}
    return Endpoint(
        server=(server or os.environ.get("CODDL_SERVER") or saved.get("server")
                or f"http://127.0.0.1:{DEFAULT_PORT}").rstrip("/"),
        token=token or os.environ.get("CODDL_TOKEN") or saved.get("token"),
    )


_HINTS = {401: " (pass --token, set CODDL_TOKEN, or create one with `coddl token create USER`)"}


class Client:
    def __init__(self, endpoint: Endpoint, timeout: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {endpoint.token}"} if endpoint.token else {}
        self.endpoint = endpoint
        self._http = httpx.Client(base_url=endpoint.server, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check(self, r: httpx.Response) -> None:
        if r.is_success:
            return
        try:
            detail = r.json().get("detail", r.text)
        except (json.JSONDecodeError, AttributeError):
            detail = r.text
        raise ClientError(f"{r.status_code} {r.reason_phrase}: {detail}{_HINTS.get(r.status_code, '')}", r.status_code)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.TransportError as e:
            raise ClientError(f"cannot reach the coddl server at {self.endpoint.server} ({e.__class__.__name__}); "
                              f"is `coddl server start` running?") from None
        self._check(r)
        return r.json()

    def submit(self, job: JobFile) -> dict[str, Any]:
        return self._call("POST", "/jobs", json=job.model_dump(mode="json", exclude_none=True))

    def jobs(self, limit: int = 1000, before: int | None = None, user: str | None = None,
             statuses: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """One page: the newest ``limit`` (at most 10,000) jobs below id ``before``, oldest first."""
        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before
        if user is not None:
            params["user"] = user
        if statuses:
            params["status"] = ",".join(statuses)
        return self._call("GET", "/jobs", params=params)

    def newest_jobs(self, count: int | None, before: int | None = None, user: str | None = None,
                    statuses: tuple[str, ...] = (), page: int = 1000) -> tuple[list[dict[str, Any]], bool]:
        """The newest ``count`` jobs (every one if None), oldest first, fetched a page at a time; and
        whether older ones remain."""
        pages: list[list[dict[str, Any]]] = []
        got = 0
        while count is None or got < count:
            want = page if count is None else min(page, count - got)
            rows = self.jobs(want, before, user, statuses)
            if rows:
                pages.append(rows)
                got += len(rows)
                before = rows[0]["id"]
            if len(rows) < want:
                return [j for p in reversed(pages) for j in p], False
        more = bool(self.jobs(1, before, user, statuses))
        return [j for p in reversed(pages) for j in p], more

    def job(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{job_id}")

    def profile(self, job_id: int) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{job_id}/profile")

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self._call("DELETE", f"/jobs/{job_id}")

    def cluster(self) -> dict[str, Any]:
        return self._call("GET", "/cluster")

    def tokens(self, user: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", "/tokens", params={} if user is None else {"user": user})

    def create_token(self, user: str, admin: bool = False, expires_in_s: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"user": user, "admin": admin}
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        return self._call("POST", "/tokens", json=body)

    def revoke_token(self, token_id: int) -> dict[str, Any]:
        return self._call("DELETE", f"/tokens/{token_id}")

    def queues(self) -> list[dict[str, Any]]:
        return self._call("GET", "/queues")

    def put_queue(self, name: str, settings: dict[str, Any]) -> list[dict[str, Any]]:
        return self._call("PUT", f"/queues/{quote(name, safe='')}", json=settings)

    def delete_queue(self, name: str) -> list[dict[str, Any]]:
        return self._call("DELETE", f"/queues/{quote(name, safe='')}")

    def put_queues(self, document: dict[str, Any]) -> list[dict[str, Any]]:
        return self._call("PUT", "/queues", json=document)

    def logs(self, job_id: int, follow: bool = False) -> Iterator[str]:
        try:
            with self._http.stream("GET", f"/jobs/{job_id}/logs", params={"follow": follow},
                                   timeout=httpx.Timeout(30.0, read=None)) as r:
                if not r.is_success:
                    r.read()
                    self._check(r)
                yield from r.iter_lines()
        except httpx.TransportError as e:
            raise ClientError(f"lost the connection to {self.endpoint.server} ({e.__class__.__name__})") from None
