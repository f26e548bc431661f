"""Assembling the real system: store + executor + scheduler + controller (``Runtime``), served over
HTTP by uvicorn (``HttpServer``); ``serve`` is ``coddl server start``.

The state directory holds everything a restart needs: ``coddl.db`` (unless ``--database`` names
another URL), ``jobs/<id>/`` (each job's checkpoint and worker logs), ``server.json`` (where the
running server listens, and its pid), ``server.lock`` (locked by the running server), optionally
``accounts.yaml`` (``coddl.runtime.identity``) and ``client.json`` (server URL and the bootstrap admin
token, read by the CLI when no ``--server``/``--token`` is given). It is the server's alone: mode
0700, and everything the server creates in it is private to it (umask 077); a job's directory belongs
to the job's account, and no job sees any other part of the state (``coddl.runtime.isolation``).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager

import uvicorn
from fastapi import FastAPI

from coddl.clusterspec import ClusterSpecError, load_cluster
from coddl.core.cluster import MAX_GPUS_PER_NODE, Cluster
from coddl.perf.interference import ColocationTable
from coddl.placement.sharing import SharingRule
from coddl.policies.base import Policy
from coddl.policies.registry import make_policy
from coddl.queues.config import load_queues
from coddl.queues.policy import QueuedPolicy
from coddl.runtime import queues as stored_queues
from coddl.runtime.api import ClusterInfo, create_app
from coddl.runtime.calibrated import with_spec
from coddl.runtime.controller import Controller, ControllerSettings
from coddl.runtime.dashboard import mount_dashboard
from coddl.errors import ConfigError
from coddl.runtime.executors.base import Executor
from coddl.runtime.executors.driver import ExecutorSettings
from coddl.runtime.executors.ray_connect import DEFAULT_CONNECT_TIMEOUT_S
from coddl.runtime.identity import PREFIX
from coddl.runtime.isolation import Isolation
from coddl.runtime.lease import DEFAULT_LEASE_S, Lease, LeaseLost, StateLock
from coddl.runtime.limits import ApiLimits
from coddl.runtime.metrics import ClusterMetrics, metrics_router
from coddl.runtime.models import runtime_curves
from coddl.runtime.paths import CLIENT_FILE, DEFAULT_PORT, SERVER_FILE, default_state_dir
from coddl.runtime.store import Store, sqlite_url
from coddl.scheduler import Scheduler
from coddl.waiting import WaitTimeout, wait_until

DEFAULT_POLICY = "afs-p"
# A job asks to share only by giving gpu_fraction < 1 or shareable: true, and one that asks for a
# quarter of a GPU expects to share it; --sharing exclusive gives each such job a GPU of its own. A
# policy that assigns each job its CPU cores cannot share GPUs: with no --sharing it gets exclusive.
DEFAULT_SHARING = "pack"


def sharing_rule(text: str | None, policy: Policy) -> SharingRule:
    """The ``--sharing`` rule (None: the default for this policy), refused with a policy it cannot serve."""
    rule = SharingRule.parse(text) if text is not None else (
        SharingRule("exclusive") if policy.assigns_cores() else SharingRule.parse(DEFAULT_SHARING))
    rule.check_policy(policy)
    return rule
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
    sharing: str | None = None  # many jobs per GPU: exclusive | pack | aware[:min_retained=F]; None: sharing_rule's default
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    database: str | None = None  # SQLAlchemy URL; default SQLite in the state dir
    controller: ControllerSettings = ControllerSettings()
    workers: ExecutorSettings = ExecutorSettings()
    limits: ApiLimits = ApiLimits()  # request body size, and whether a job too large for the cluster is refused
    lease_s: float = DEFAULT_LEASE_S  # how long a server that stopped renewing keeps the database
    isolate: bool = True  # False: --unsafe-no-isolation
    account_prefix: str = PREFIX  # of the accounts a root server creates for job owners (coddl.runtime.identity)
    queues: Path | None = None  # a queue file that replaces the stored queues at start (coddl.queues)
    cluster_spec: Path | None = None  # device types and calibrated links of the executor's cluster (--cluster)


Step = Callable[[str], ContextManager[object]]


def _quietly(_what: str) -> ContextManager[object]:
    return contextlib.nullcontext()


def load_spec(path: Path | None) -> Cluster | None:
    if path is None:
        return None
    try:
        return load_cluster(path)
    except ClusterSpecError as e:
        raise ConfigError(f"--cluster: {e}") from None


def make_executor(config: ServerConfig, isolation: Isolation, work_dir: Path) -> Executor:
    if config.executor == "local":
        from coddl.runtime.executors.local import LocalExecutor

        spec = load_spec(config.cluster_spec)
        one_node = spec.nodes[0].gpus if spec is not None and len(spec.nodes) == 1 else None
        gpus = config.gpus if config.gpus is not None else one_node or LOCAL_GPUS
        if not 1 <= gpus <= MAX_GPUS_PER_NODE:  # one node: this host's slots
            raise ConfigError(f"--gpus must be 1 to {MAX_GPUS_PER_NODE} (the local executor is one node), got {gpus}")
        return LocalExecutor(gpus, config.workers, isolation, work_dir)
    if config.executor == "ray":
        if config.gpus is not None:
            raise ConfigError("--gpus is the local executor's; a Ray cluster's GPUs are those its nodes were "
                              "started with (ray start --num-gpus N)")
        if not config.ray_address:
            raise ConfigError("--executor ray needs --ray-address HOST:PORT")
        from coddl.runtime.executors.ray import RayExecutor

        return RayExecutor(config.ray_address, config.workers, config.ray_connect_timeout_s, isolation, work_dir)
    raise ConfigError(f"--executor must be local or ray, got {config.executor!r}")


def private_state_dir(state_dir: Path) -> None:
    """Create the state directory, or make an existing one private again (files an earlier version
    left readable: the database and its journal, the jobs directory)."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(state_dir, 0o700)
    for name in ("coddl.db", "coddl.db-wal", "coddl.db-shm", CLIENT_FILE, SERVER_FILE):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(state_dir / name, 0o600)
    jobs = state_dir / "jobs"
    jobs.mkdir(exist_ok=True, mode=0o700)
    os.chmod(jobs, 0o700)


class Runtime:
    """The scheduler of the simulator, driven by real events: built, started and stopped together.

    Building it takes the state directory's lock and the database's lease (``coddl.runtime.lease``):
    a second server on the same state or database is refused here, before anything else starts.
    ``on_lost`` is called if the lease is lost later; the owner must then call ``abandon``.
    """

    def __init__(self, config: ServerConfig, step: Step = _quietly) -> None:
        self.config = config
        self.state_dir = Path(config.state_dir)
        self.on_lost: Callable[[str], None] = lambda reason: None
        os.umask(0o077)  # whatever the server writes in the state is its own
        with step("locking the state directory"):
            private_state_dir(self.state_dir)
            self.lock = StateLock(self.state_dir)
        self.store: Store | None = None
        self.lease: Lease | None = None
        try:
            # a bad policy name fails before anything starts, and so does a bad sharing rule
            self.sharing = sharing = sharing_rule(config.sharing, make_policy(config.policy))
            queues = load_queues(config.queues) if config.queues else None  # and so does a bad queue file
            spec = load_spec(config.cluster_spec)  # and so does a bad cluster spec
            with step("opening the store and taking its lease"):
                self.store = Store(config.database or sqlite_url(self.state_dir))
                private_state_dir(self.state_dir)  # the database file SQLite just created
                self.lease = Lease(self.store, self.state_dir, config.lease_s, lambda r: self.on_lost(r))
                self.lease.acquire()
            self.isolation = Isolation.for_server(self.state_dir, config.isolate, config.account_prefix)
            self.jobs_dir = self.state_dir / "jobs"
            with step(f"warming the worker pool and checking job isolation ({self.isolation.describe()})"):
                self.executor = make_executor(config, self.isolation, self.jobs_dir)
            self.executor.guard = self.lease.guard
            if spec is not None:
                self.executor.cluster = with_spec(self.executor.cluster, spec, str(config.cluster_spec))
            cluster = self.executor.cluster
            if queues is not None:
                stored_queues.replace_all(self.store, cluster, queues)
            policy = QueuedPolicy(stored_queues.stored_queues(self.store), lambda: make_policy(config.policy))
            policy.quotas(cluster.total_gpus, cluster.total_cpus)  # stored quotas larger than this cluster fail here
            self.scheduler = sharing_scheduler(cluster, policy, sharing)
            self.controller = Controller(self.store.fenced(self.lease.fence), self.scheduler, self.executor,
                                         self.jobs_dir, config.controller)
            self.metrics = ClusterMetrics(self.store, self.executor.cluster, policy.describe(), self.executor.kind)
            self.controller.observe_decision = self.metrics.observe_decision
        except BaseException:
            self._release()
            raise

    def start(self) -> tuple[int, int]:
        """Recover the unfinished jobs and run; returns (jobs recovered, leftover workers killed)."""
        return self.controller.start()

    def reload_queues(self) -> None:
        """An admin changed the queues: the scheduler takes them from the store at its next decision."""
        policy = self.scheduler.policy
        self.controller.call_soon(lambda: policy.reconfigure(stored_queues.stored_queues(self.store)))

    def stop(self) -> None:
        """Stop scheduling, then every job (rank 0 checkpoints): a later start resumes them."""
        self.controller.stop()
        self.executor.close()
        self._release()

    def abandon(self) -> None:
        """After losing the lease: kill every worker at once (no checkpoint — the server that holds the
        lease now restarts the jobs from their last one) and write nothing more."""
        self.controller.abandon()
        self.executor.abandon()
        self._release()

    def _release(self) -> None:
        if self.lease is not None:
            self.lease.release()
        if self.store is not None:
            self.store.close()
        self.lock.release()

    def app(self) -> FastAPI:
        info = ClusterInfo(self.executor.cluster, self.executor.kind, self.scheduler.policy.describe())
        app = create_app(self.store, info, self.jobs_dir, self.controller.wake, self.config.limits,
                         on_queues=self.reload_queues, unseen=self.isolation.unseen)
        app.include_router(metrics_router(self.metrics))
        mount_dashboard(app, self.store, info, self.jobs_dir)
        return app


def sharing_scheduler(cluster: Cluster, policy: Policy, sharing: SharingRule) -> Scheduler:
    """The scheduler on the runtime's curves, with ``sharing`` for the jobs that ask to share a GPU.
    Co-tenants are priced by the co-location model over the runtime's curve names and this cluster's
    GPU types (``perf/interference.ColocationTable``: Gavel's measured pairs; a type Gavel did not
    measure, like a local slot, takes the V100's), which each tenant's measured throughput then
    corrects (``Controller._observe``)."""
    curves = runtime_curves()
    if not sharing.shares:
        return Scheduler(cluster, policy, curves, sharing=sharing)
    table = ColocationTable.build(cluster.type_names, curves.names)
    return Scheduler(cluster, policy, curves, sharing=sharing, retained=table, clash=table.clashes)


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
        try:
            wait_until(lambda: self._server.started or not self._thread.is_alive(), timeout,
                       f"not listening on {self.host}:{self.port}", interval=0.02)
        except WaitTimeout:
            pass
        if not self._server.started:
            raise ConfigError(f"cannot listen on {self.host}:{self.port} (address in use or not this host's?)")

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


def serve(config: ServerConfig, announce=print, step: Step = _quietly) -> None:  # noqa: ANN001 - print-like
    """Run until SIGINT/SIGTERM (``coddl server stop``); then stop scheduling and every job (they resume
    on the next start). Raises LeaseLost if another server took the database over meanwhile."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    runtime = Runtime(config, step)
    runtime.on_lost = lambda reason: stop.set()
    http = None
    try:
        with step("recovering unfinished jobs"):
            recovered, reaped = runtime.start()
        if recovered:
            announce(f"recovered {recovered} unfinished job(s); they resume from their checkpoints"
                     + (f" ({reaped} leftover workers killed)" if reaped else ""))
        with step("starting the API"):
            http = HttpServer(runtime.app(), config.host, config.port)
            http.start()
            created = bootstrap_client(runtime.store, runtime.state_dir, http.url)
            write_private_json(runtime.state_dir / SERVER_FILE, {"url": http.url, "pid": os.getpid()})
            runtime.lease.set_url(http.url)
        c = runtime.executor.cluster
        announce(f"coddl server on {http.url} (docs: {http.url}/docs) — {runtime.executor.kind} executor, "
                 f"{c.total_gpus} GPUs on {len(c.nodes)} node(s), policy {runtime.scheduler.policy.describe()}, "
                 f"GPU sharing {runtime.sharing}, "
                 f"state in {runtime.state_dir}, jobs isolated: {runtime.isolation.describe()}")
        if runtime.config.cluster_spec is not None:
            lk = c.links
            announce(f"links from {runtime.config.cluster_spec}: intra-node {lk.intra_node_gbps:g} GB/s, "
                     f"{lk.intra_node_latency_us:g} µs; inter-node {lk.inter_node_gbps:g} GB/s, "
                     f"{lk.inter_node_latency_us:g} µs")
        if created:
            announce(f"admin token for {getpass.getuser()} written to {runtime.state_dir / CLIENT_FILE}")
        stop.wait()
    finally:
        if http is not None:
            http.stop()
        lost = runtime.lease.lost
        if lost:
            runtime.abandon()
        else:
            runtime.stop()
        with contextlib.suppress(OSError, ValueError):
            if json.loads((runtime.state_dir / SERVER_FILE).read_text()).get("pid") == os.getpid():
                (runtime.state_dir / SERVER_FILE).unlink()
    if lost:
        raise LeaseLost(f"lost the server lease: {lost}; stopped without touching the jobs, which the "
                        "server holding the lease now runs")
