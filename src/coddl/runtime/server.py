"""Assembling the real system: store + executor + scheduler + controller (``Runtime``), served over
HTTP by uvicorn (``HttpServer``); ``serve`` is ``coddl server start``.

The state directory holds everything a restart needs: ``coddl.db`` (unless ``--database`` names
another URL), ``jobs/<id>/`` (each job's checkpoint and worker logs), ``server.json`` (where the
running server listens) and ``client.json`` (server URL and the bootstrap admin token, mode 0600,
read by the CLI when no ``--server``/``--token`` is given).
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from coddl.policies.registry import make_policy
from coddl.runtime.api import ClusterInfo, create_app
from coddl.runtime.controller import Controller, ControllerSettings
from coddl.runtime.dashboard import mount_dashboard
from coddl.runtime.errors import ConfigError
from coddl.runtime.executors.base import Executor
from coddl.runtime.executors.driver import ExecutorSettings
from coddl.runtime.executors.ray_connect import DEFAULT_CONNECT_TIMEOUT_S
from coddl.runtime.limits import ApiLimits
from coddl.runtime.metrics import ClusterMetrics, metrics_router
from coddl.runtime.models import runtime_curves
from coddl.runtime.paths import CLIENT_FILE, DEFAULT_PORT, SERVER_FILE, default_state_dir
from coddl.runtime.store import Store, sqlite_url
from coddl.scheduler import Scheduler

DEFAULT_POLICY = "afs-p"
LOCAL_GPUS = 8

log = logging.getLogger("coddl.server")


@dataclass(frozen=True)
class ServerConfig:
    state_dir: Path = field(default_factory=default_state_dir)
    gpus: int | None = None  # the local executor's GPU slots (default LOCAL_GPUS); a Ray cluster's are its nodes'
    executor: str = "local"  # local | ray
    ray_address: str | None = None
    ray_connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    policy: str = DEFAULT_POLICY
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    database: str | None = None  # SQLAlchemy URL; default SQLite in the state dir
    controller: ControllerSettings = ControllerSettings()
    workers: ExecutorSettings = ExecutorSettings()
    limits: ApiLimits = ApiLimits()  # request body size, and whether a job too large for the cluster is refused


def make_executor(config: ServerConfig) -> Executor:
    if config.executor == "local":
        from coddl.runtime.executors.local import LocalExecutor

        gpus = LOCAL_GPUS if config.gpus is None else config.gpus
        if gpus < 1:
            raise ConfigError(f"--gpus must be at least 1, got {gpus}")
        return LocalExecutor(gpus, config.workers)
    if config.executor == "ray":
        if config.gpus is not None:
            raise ConfigError("--gpus is the local executor's; a Ray cluster's GPUs are those its nodes were "
                              "started with (ray start --num-gpus N)")
        if not config.ray_address:
            raise ConfigError("--executor ray needs --ray-address HOST:PORT")
        from coddl.runtime.executors.ray import RayExecutor

        return RayExecutor(config.ray_address, config.workers, config.ray_connect_timeout_s)
    raise ConfigError(f"--executor must be local or ray, got {config.executor!r}")


class Runtime:
    """The scheduler of the simulator, driven by real events: built, started and stopped together."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state_dir = Path(config.state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        policy = make_policy(config.policy)  # a bad policy name fails before anything starts
        self.store = Store(config.database or sqlite_url(self.state_dir))
        self.executor = make_executor(config)
        self.scheduler = Scheduler(self.executor.cluster, policy, runtime_curves())
        self.jobs_dir = self.state_dir / "jobs"
        self.controller = Controller(self.store, self.scheduler, self.executor, self.jobs_dir, config.controller)
        self.metrics = ClusterMetrics(self.store, self.executor.cluster, policy.describe(), self.executor.kind)
        self.controller.observe_decision = self.metrics.observe_decision

    def start(self) -> None:
        self.controller.start()

    def stop(self) -> None:
        """Stop scheduling, then every job (rank 0 checkpoints): a later start resumes them."""
        self.controller.stop()
        self.executor.close()
        self.store.close()

    def app(self) -> FastAPI:
        info = ClusterInfo(self.executor.cluster, self.executor.kind, self.scheduler.policy.describe())
        app = create_app(self.store, info, self.jobs_dir, self.controller.wake, self.config.limits)
        app.include_router(metrics_router(self.metrics))
        mount_dashboard(app, self.store, info, self.jobs_dir)
        return app


class HttpServer:
    """uvicorn in a background thread (signal handling stays with the caller)."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                                     access_log=False, lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, name="coddl-http", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"cannot listen on {self.host}:{self.port} (address in use or not this host's?)")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        port = self._server.servers[0].sockets[0].getsockname()[1]
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)


def write_private_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def bootstrap_client(store: Store, state_dir: Path, url: str) -> str | None:
    """Point the state dir's client file at this server; the first start also creates an admin token
    for the operator (returned, so it can be announced once)."""
    path = state_dir / CLIENT_FILE
    current = json.loads(path.read_text()) if path.is_file() else {}
    created = None
    if not store.has_admin() or not current.get("token"):
        created = store.create_token(getpass.getuser(), admin=True)
        current["token"] = created
    current["server"] = url
    write_private_json(path, current)
    return created


def serve(config: ServerConfig, announce=print) -> None:  # noqa: ANN001 - a print-like callable
    """Run until SIGINT/SIGTERM; then stop scheduling and every job (they resume on the next start)."""
    runtime = Runtime(config)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    http = None
    try:
        runtime.start()
        http = HttpServer(runtime.app(), config.host, config.port)
        http.start()
        created = bootstrap_client(runtime.store, runtime.state_dir, http.url)
        write_private_json(runtime.state_dir / SERVER_FILE, {"url": http.url, "pid": os.getpid()})
        c = runtime.executor.cluster
        announce(f"coddl server on {http.url} (docs: {http.url}/docs) — {runtime.executor.kind} executor, "
                 f"{c.total_gpus} GPUs on {len(c.nodes)} node(s), policy {runtime.scheduler.policy.describe()}, "
                 f"state in {runtime.state_dir}")
        if created:
            announce(f"admin token for {getpass.getuser()} written to {runtime.state_dir / CLIENT_FILE}")
        stop.wait()
    finally:
        if http is not None:
            http.stop()
        runtime.stop()
        (runtime.state_dir / SERVER_FILE).unlink(missing_ok=True)
