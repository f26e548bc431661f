"""``RayExecutor``: the same executor with its workers on the nodes of a Ray cluster.

One ``NodeAgent`` actor per Ray node owns that node's GPUs (it reserves them from Ray) and its worker
processes: it forks them from its own warm pool through the same ``ConfinedLauncher`` as the local
executor (each worker runs as its owner's account on that node, or sandboxed, and never sees Ray's
own directory with its sockets), and they run the same worker protocol (``coddl.elastic``). Each
job's coordinator — its store and the ``ElasticJob`` that posts memberships — stays in the
controller, bound to the controller's cluster address; only worker processes live on the nodes.

A command job (``coddl.elastic.gang``) runs there too: its rank 0's node picks ``MASTER_PORT``; a gang
on one node meets on that node's loopback, inside a network namespace of its own that the node's agent
makes (root servers); a gang across nodes meets at rank 0's node address, in the hosts' network.

Placement is ours, not Ray's: the scheduler's cluster is built from the Ray nodes that have GPUs
(sorted by address and node id, so the order is stable), our node i is the Ray node whose agent is
pinned there with a hard node-affinity strategy, and a worker for global GPU g is started by the
agent of the node that owns g, on that node's GPU g − first GPU of the node.

Ray itself is the most privileged thing a job could reach: whatever reaches a Ray cluster's GCS port
and holds its token (if it has one) can join it as a node and run tasks on every node as the nodes'
account. A job of an elastic job, or a rank of a gang across nodes, runs in the hosts' network and
reaches that port; so a server that isolates its jobs refuses a cluster without token authentication
(``requires_token``) unless the operator passes ``--unsafe-ray-without-auth``, and every agent hides
from its jobs, besides Ray's directory, where its node keeps the token (``~/.ray`` and the directory of
``RAY_AUTH_TOKEN_PATH``); the token in the agent's environment never reaches a job (its environment is
rebuilt, and it sees only its own processes).

Caveats: a job's directory (checkpoint, logs) must be on a filesystem every node sees, for a job to
restart on another node and for ``coddl logs`` to show remote output; a script path must exist on
every node; with the server running as root, a user's account must have the same uid on every node
(map users to directory-service accounts in ``accounts.yaml``, or let each node create the same
dedicated accounts from a shared ``/etc/passwd``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from coddl.core.cluster import Cluster
from coddl.elastic.gang import LOOPBACK, free_port
from coddl.elastic.pool import WorkerHandle
from coddl.elastic.worker import WorkerSpec
from coddl.errors import ConfigError
from coddl.runtime.executors.base import WorkerRecord
from coddl.runtime.executors.driver import ElasticExecutor, ExecutorSettings
from coddl.runtime.executors.ray_connect import (DEFAULT_CONNECT_TIMEOUT_S, connect, import_ray, ray_cluster,
                                                 requires_token, split_address)
from coddl.runtime.isolation import Isolation, installation

# The node agent's warm pool: everything a worker imports, but not the actor's own __main__ (Ray's
# worker bootstrap, which must not run again inside the fork server).
AGENT_PRELOAD = ("torch", "torch._dynamo", "coddl.elastic.session", "coddl.elastic.worker")
AGENT_START_S = 180.0  # an agent reserves all of its node's GPUs; it waits if someone else holds them
# set (to 1) by `coddl server start --unsafe-ray-without-auth`: a cluster without token authentication
# is accepted on a server that isolates its jobs, which can then take over the cluster
UNSAFE_WITHOUT_AUTH = "CODDL_UNSAFE_RAY_WITHOUT_AUTH"


def _ray_temp_dir() -> tuple[str, ...]:
    """This node's Ray directory (sessions, sockets, logs): a job that reached its sockets could run
    anything through Ray, outside its sandbox."""
    try:
        from ray._private import worker

        return (worker.global_worker.node.get_temp_dir_path(),)
    except Exception:  # noqa: BLE001 - Ray's private layout moved: fall back on the default, under /tmp
        return ()


_SHARED = frozenset(("/var/tmp", "/var/lib", "/usr/local", "/usr/lib", "/usr/share", "/usr/bin", "/usr/sbin"))


def ray_token_dirs(environ: dict[str, str] | os._Environ = os.environ,
                   keep: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Where this node's Ray keeps its token, to hide from jobs: ``~/.ray`` (``ray get-auth-token
    --generate`` writes ``auth_token`` there, readable by all under the usual umask) and the directory
    of ``RAY_AUTH_TOKEN_PATH``. ConfigError if that directory cannot be hidden without hiding what jobs
    need (``/``, a top-level directory such as ``/etc``, or one holding ``keep``: the installation)."""
    dirs = []
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    if (home / ".ray").is_dir():
        dirs.append(str((home / ".ray").resolve()))
    token_path = environ.get("RAY_AUTH_TOKEN_PATH")
    if token_path:
        parent = Path(token_path).expanduser().resolve().parent
        held = [k for k in keep if Path(k).resolve().is_relative_to(parent)]
        if len(parent.parts) < 3 or str(parent) in _SHARED or held:
            raise ConfigError(f"RAY_AUTH_TOKEN_PATH={token_path}: jobs could read the token there, and its directory "
                              f"{parent} cannot be hidden from them ({'it holds ' + held[0] if held else 'shared'}): "
                              f"keep the token in a directory of its own, such as /etc/ray/auth/token")
        dirs.append(str(parent))
    return tuple(dict.fromkeys(dirs))


class NodeAgent:
    """Runs on one Ray node (as an actor): starts, waits for, kills and pins that node's workers."""

    def __init__(self, first_gpu: int, isolation: Isolation) -> None:
        import ray

        from coddl.elastic.pool import WorkerPool
        from coddl.runtime.isolation import ConfinedLauncher

        self._first_gpu = first_gpu
        self._gpu_ids = [str(g) for g in ray.get_gpu_ids()]  # the physical GPUs Ray reserved for us
        self._refused: ConfigError | None = None
        hide = _ray_temp_dir()
        if isolation.mode != "none":
            try:
                hide = (*hide, *ray_token_dirs(keep=installation()))
            except ConfigError as e:
                self._refused = e  # said by ``warm``, as one line
        self._launcher = ConfinedLauncher(WorkerPool(AGENT_PRELOAD), isolation, hide=hide)
        self._procs: dict[int, object] = {}

    def warm(self, work_dir: str) -> float:
        """Start the pool and check that this node confines workers as the server promises."""
        if self._refused is not None:
            raise self._refused
        return self._launcher.probe(Path(work_dir))

    def launch(self, spec: WorkerSpec) -> int:
        local = int(spec.env["CODDL_SLOT"]) - self._first_gpu
        env = dict(spec.env)
        if self._gpu_ids:
            env["CUDA_VISIBLE_DEVICES"] = self._gpu_ids[local]
        cwd = spec.cwd if os.path.isdir(spec.cwd) else os.getcwd()
        if spec.log_path:
            Path(spec.log_path).parent.mkdir(parents=True, exist_ok=True)
        p = self._launcher.launch(replace(spec, env=env, cwd=cwd))
        self._procs[p.pid] = p
        return p.pid

    def wait(self, pid: int) -> int | None:
        p = self._procs[pid]
        p.join()
        del self._procs[pid]
        return p.exitcode

    def kill(self, pid: int) -> None:
        p = self._procs.get(pid)
        if p is not None:
            p.kill()

    def free_port(self, host: str) -> int:
        """A port free on this node's ``host`` now: a command job's ``MASTER_PORT`` (its rank 0 is here)."""
        return free_port(host)

    def release_network(self, key: str) -> None:
        self._launcher.release_network(key)

    def pin(self, pids: list[int], cores: list[int]) -> None:
        from coddl.runtime.executors.driver import local_pin

        local_pin(dict(enumerate(pids)), tuple(cores))

    def shutdown(self) -> None:
        for p in list(self._procs.values()):
            p.kill()
        self._launcher.networks.close()


class RemoteWorker:
    """A worker on another node, presented as a local WorkerHandle: a thread waits for the agent to
    report the exit and then makes a local pipe readable, which is the sentinel ``ElasticJob``
    watches. A node that disappears counts as a worker killed by SIGKILL."""

    def __init__(self, ray, agent, pid: int) -> None:  # noqa: ANN001 - ray module and actor handle
        self.pid = pid
        self._ray = ray
        self._agent = agent
        self._exitcode: int | None = None
        self._done = threading.Event()
        self._read, self._write = os.pipe()
        threading.Thread(target=self._wait, name=f"remote-worker-{pid}", daemon=True).start()

    @property
    def sentinel(self) -> int:
        return self._read

    @property
    def exitcode(self) -> int | None:
        return self._exitcode

    def _wait(self) -> None:
        try:
            code = self._ray.get(self._agent.wait.remote(self.pid))
        except Exception:  # noqa: BLE001 - the actor or its node is gone: the worker is gone too
            code = -9
        self._exitcode = -9 if code is None else code
        self._done.set()
        os.write(self._write, b"x")

    def kill(self) -> None:
        self._agent.kill.remote(self.pid)

    def join(self, timeout: float | None = None) -> None:
        self._done.wait(timeout)

    def __del__(self) -> None:
        for fd in (self._read, self._write):
            try:
                os.close(fd)
            except OSError:
                pass


class RayLauncher:
    """Starts each worker through the agent of the node that owns the worker's GPU slot."""

    def __init__(self, ray, agents: list, cluster: Cluster) -> None:  # noqa: ANN001 - ray module
        self._ray = ray
        self._agents = agents
        self._node_of_gpu = cluster.node_of_gpu

    def launch(self, spec: WorkerSpec) -> WorkerHandle:
        agent = self._agents[int(self._node_of_gpu[int(spec.env["CODDL_SLOT"])])]
        return RemoteWorker(self._ray, agent, self._ray.get(agent.launch.remote(spec)))

    def release_network(self, key: str) -> None:
        """A gang stopped: the agent that holds its network namespace drops it (the others hold none)."""
        for agent in self._agents:
            agent.release_network.remote(key)


@dataclass(frozen=True)
class RayRendezvous:
    """A command job's ranks on the Ray nodes: rank 0's node chooses ``MASTER_PORT``; a gang across
    nodes meets at that node's address (``addresses``, Ray's node manager address of each node)."""

    ray: object
    agents: tuple
    node_of_gpu: tuple[int, ...]
    addresses: tuple[str, ...]

    def node_of(self, slot: int) -> int:
        return self.node_of_gpu[slot]

    def master(self, node: int, one_node: bool) -> tuple[str, int]:
        host = LOOPBACK if one_node else self.addresses[node]
        return host, self.ray.get(self.agents[node].free_port.remote(host))


class RayExecutor(ElasticExecutor):
    kind = "ray"

    def __init__(self, address: str, settings: ExecutorSettings = ExecutorSettings(),
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S, isolation: Isolation = Isolation("none"),
                 work_dir: Path | None = None) -> None:
        split_address(address)  # a malformed address is refused before Ray is imported
        ray = import_ray(address)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        connect(ray, address, connect_timeout_s)
        if isolation.mode != "none" and os.environ.get(UNSAFE_WITHOUT_AUTH) != "1" \
                and not requires_token(address, connect_timeout_s):
            raise ConfigError(f"the Ray cluster at {address} has no token authentication, so a job that reaches it "
                              f"could run code on its nodes as their Ray account: start the cluster with "
                              f"RAY_AUTH_MODE=token (this server too, with the token), or pass "
                              f"--unsafe-ray-without-auth")
        self._ray = ray
        cluster, node_ids = ray_cluster(ray)
        actor = ray.remote(NodeAgent)
        self._agents = [
            actor.options(num_cpus=0, num_gpus=node.gpus, max_concurrency=1024,
                          scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False))
            .remote(int(cluster.node_first_gpu[i]), isolation)
            for i, (node, node_id) in enumerate(zip(cluster.nodes, node_ids))
        ]
        probe_dir = str(work_dir or Path.cwd())
        try:
            ray.get([a.warm.remote(probe_dir) for a in self._agents], timeout=AGENT_START_S)
        except ray.exceptions.GetTimeoutError:
            raise ConfigError(f"the node agents did not start within {AGENT_START_S:.0f} s: are the nodes' GPUs "
                              f"held by another Ray job?") from None
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, ConfigError):
                raise ConfigError(f"a Ray node: {e.cause}") from None
            raise
        host = ray.util.get_node_ip_address()  # where the nodes reach this controller's job stores
        super().__init__(cluster, RayLauncher(ray, self._agents, cluster), host, settings, isolation)

    def _rendezvous(self) -> RayRendezvous:
        c = self.cluster
        return RayRendezvous(self._ray, tuple(self._agents), tuple(int(n) for n in c.node_of_gpu),
                             tuple(n.name.rsplit("/", 1)[0] for n in c.nodes))

    def _worker_record(self, slot: int, pid: int) -> WorkerRecord:
        return WorkerRecord(slot, pid, node=self.cluster.nodes[int(self.cluster.node_of_gpu[slot])].name)

    def _pin(self, pids: dict[int, int], cores: tuple[int, ...]) -> None:
        if not cores:
            return
        c = self.cluster
        for node in {int(c.node_of_gpu[slot]) for slot in pids}:
            first = int(c.node_first_core[node])
            local = [x - first for x in cores if int(c.node_of_core[x]) == node]
            mine = [pid for slot, pid in pids.items() if int(c.node_of_gpu[slot]) == node]
            self._agents[node].pin.remote(mine, local)

    def close(self, timeout_s: float = 60.0) -> None:
        try:
            super().close(timeout_s)
        finally:
            self._shutdown_agents()

    def abandon(self) -> None:
        try:
            super().abandon()
        finally:
            self._shutdown_agents()

    def _shutdown_agents(self) -> None:
        self._ray.get([a.shutdown.remote() for a in self._agents])
        for a in self._agents:
            self._ray.kill(a)
        self._ray.shutdown()
