"""``CommandJob``: the executor's handle on ONE command job — any program, run as a rigid gang.

A command job does not use ``coddl.elastic``: coddl cannot move its state between processes, so it
runs at exactly the size it was given, one process per slot, all started together (a gang), with the
environment ``torchrun`` would give it: ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``, ``CUDA_VISIBLE_DEVICES`` (the slot's GPU) and
``TORCHELASTIC_RESTART_COUNT``. Every process is a pooled worker running the program
(``WorkerSpec.program``), so it is confined like any job's.

Where the ranks meet (``Rendezvous``): a gang on one node meets at ``127.0.0.1`` and, confined, gets a
key (``Confinement.network``) under which the node's launcher gives all its ranks one network
namespace of their own (``coddl.runtime.netns``, root servers), so that no other process reaches its
``TCPStore`` or its collectives; the namespace is released when the gang stops. A gang across nodes
meets at rank 0's node, on a port free there at each start; ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and
``GROUP_RANK`` count ranks and nodes as torchrun does (nodes in the order of their first rank).

Stopping (preemption, cancel, a resize) sends SIGTERM to every process and waits the job's grace
period before SIGKILL. A resize is a restart at the new size (stop, then start), which only a job
that resumes from its own checkpoint should get: the scheduler offers it only to restartable jobs.

The job has finished when every process exited with 0. A process that fails on its own (any other
end while the job was not being stopped) takes the gang down: the others get SIGTERM and the grace
period; a restartable job is then started again on the same slots (at most ``max_restarts`` times),
any other fails with the failed rank's exit code as its reason.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as wait_for_sentinels
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from coddl.elastic.job import JobPhase, JobReport, WorkerGroup
from coddl.elastic.pool import Launcher, WorkerHandle, WorkerPool
from coddl.elastic.sandbox import EXIT_CONFINEMENT, Confinement
from coddl.elastic.worker import WorkerSpec


LOOPBACK = "127.0.0.1"
# a gang on one node talks over loopback (in its own namespace, the only interface it has); the job's
# own env may say otherwise
ONE_NODE_ENV = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}


class Rendezvous(Protocol):
    """The executor's nodes as a gang sees them."""

    def node_of(self, slot: int) -> int:
        """The node that runs ``slot``'s rank."""

    def master(self, node: int, one_node: bool) -> tuple[str, int]:
        """``MASTER_ADDR`` and ``MASTER_PORT`` for a gang whose rank 0 runs on ``node``: loopback if
        ``one_node`` (every rank there), else the node's address; a port free there now."""


@dataclass(frozen=True)
class OneHost:
    """Every slot on this host."""

    def node_of(self, slot: int) -> int:
        return 0

    def master(self, node: int, one_node: bool) -> tuple[str, int]:
        return LOOPBACK, free_port(LOOPBACK)


@dataclass(frozen=True)
class GangConfig:
    """How to run a command job: ``program`` and ``args`` as given."""

    job_id: str
    program: str
    job_dir: Path
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    grace_s: float = 30.0
    restartable: bool = False
    max_restarts: int = 3
    gpu_of_slot: Mapping[int, int] | None = None
    confinement: Confinement | None = None


@dataclass(eq=False)
class _Rank:
    rank: int
    slot: int
    handle: WorkerHandle


class CommandJob(WorkerGroup):
    """Start, restart, stop and watch one command job on this host; the same surface as
    ``ElasticJob`` for the executor. Thread-safe; ``close()`` leaves no process behind."""

    def __init__(self, config: GangConfig, launcher: Launcher | None = None,
                 rendezvous: Rendezvous = OneHost()) -> None:
        self.config = config
        self._launcher = launcher if launcher is not None else WorkerPool()
        self._rendezvous = rendezvous
        self._network: str | None = None  # the running gang's network namespace key (one node, confined)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._members: list[_Rank] = []  # the running gang
        self._leaving: list[_Rank] = []  # told to stop (SIGTERM), not yet exited
        self._kill_at: float | None = None  # when those still leaving get SIGKILL
        self._slots: tuple[int, ...] = ()
        self._phase = JobPhase.IDLE
        self._starts = 0
        self._failures = 0
        self._restarts = 0
        self._reason: str | None = None
        self._closed = False
        config.job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._monitor = threading.Thread(target=self._watch, name=f"gang-{config.job_id}", daemon=True)
        self._monitor.start()

    # ---- executor API ----------------------------------------------------------------------------

    def start(self, slots: Sequence[int]) -> float:
        """Start one process per slot; returns the seconds until all were started (a command says
        nothing of when it trains)."""
        t0 = time.perf_counter()
        with self._lock:
            self._check_startable(slots)
            self._launch(tuple(slots))
        return time.perf_counter() - t0

    def resize(self, slots: Sequence[int]) -> float:
        """A restart at the new size (see the module docstring)."""
        if not slots:
            raise ValueError("resize() needs at least one slot; use stop() to release all")
        return self.restart(slots)

    def restart(self, slots: Sequence[int]) -> float:
        t0 = time.perf_counter()
        self.stop()
        with self._lock:
            if self._phase in (JobPhase.FINISHED, JobPhase.FAILED):
                return time.perf_counter() - t0  # it ended on its own while being stopped
        self.start(slots)
        return time.perf_counter() - t0

    def stop(self, grace_s: float | None = None) -> None:
        """SIGTERM to every process; SIGKILL to those still there after ``grace_s`` (default: the
        job's grace period). Returns once all have exited."""
        with self._lock:
            self._terminate(self.config.grace_s if grace_s is None else grace_s)
            if not self._phase.settled:
                self._phase = JobPhase.STOPPED
            while self._leaving:
                self._changed.wait(0.1)
            if not self._members:
                self._release_network()

    def close(self) -> None:
        super().close()
        with self._lock:
            self._release_network()

    def poll(self) -> JobReport:
        with self._lock:
            # While it runs, the gang holds all its slots, even after a rank ended first with 0.
            slots = self._slots if self._phase is JobPhase.RUNNING else tuple(r.slot for r in self._members)
            return JobReport(phase=self._phase, generation=self._starts, slots=slots,
                             progress=None, failures=self._failures, restarts=self._restarts, reason=self._reason)

    def ended(self) -> bool:
        """Every process of the job exited with 0: its work is done."""
        with self._lock:
            return self._phase is JobPhase.FINISHED

    # ---- internals -------------------------------------------------------------------------------

    def _launch(self, slots: tuple[int, ...]) -> None:
        """Start the gang on ``slots`` (caller holds the lock)."""
        c = self.config
        self._release_network()  # the previous gang's, if any: it is gone
        node_of = {slot: self._rendezvous.node_of(slot) for slot in slots}
        nodes = list(dict.fromkeys(node_of[s] for s in slots))  # GROUP_RANK: order of first rank
        one_node = len(nodes) == 1
        host, port = self._rendezvous.master(nodes[0], one_node)
        confinement = c.confinement
        if one_node and confinement is not None:
            self._network = f"{c.job_id}-{self._starts}-{secrets.token_hex(6)}"
            confinement = replace(confinement, network=self._network)
        per_node, seen = Counter(node_of.values()), Counter()
        self._slots, self._phase = slots, JobPhase.RUNNING
        ranks = []
        try:
            for rank, slot in enumerate(slots):
                node = node_of[slot]
                env = {**(ONE_NODE_ENV if one_node else {}), **c.env, "RANK": str(rank),
                       "WORLD_SIZE": str(len(slots)), "LOCAL_RANK": str(seen[node]),
                       "LOCAL_WORLD_SIZE": str(per_node[node]), "GROUP_RANK": str(nodes.index(node)),
                       "MASTER_ADDR": host, "MASTER_PORT": str(port), "TORCHELASTIC_RESTART_COUNT": str(self._starts),
                       "CUDA_VISIBLE_DEVICES": str((c.gpu_of_slot or {}).get(slot, slot)),
                       "CODDL_JOB_ID": c.job_id, "CODDL_JOB_DIR": str(c.job_dir), "CODDL_SLOT": str(slot)}
                seen[node] += 1
                spec = WorkerSpec(entry=c.program, args=c.args, env=env, program=True, cwd=str(c.job_dir),
                                  log_path=str(c.job_dir / "logs" / f"rank{rank}.log"), confinement=confinement,
                                  sys_path=tuple(sys.path))
                ranks.append(_Rank(rank, slot, self._launcher.launch(spec)))
        except BaseException:
            for r in ranks:
                r.handle.kill()
            self._leaving += ranks
            self._phase = JobPhase.STOPPED
            raise
        finally:
            self._starts += 1
            self._changed.notify_all()
        self._members = ranks

    def _release_network(self) -> None:
        """Let the node's launcher drop the stopped gang's network namespace (caller holds the lock)."""
        key, self._network = self._network, None
        release = getattr(self._launcher, "release_network", None)
        if key is not None and release is not None:
            release(key)

    def _terminate(self, grace_s: float) -> None:
        """SIGTERM the running gang and move it to the leavers (caller holds the lock)."""
        for r in self._members:
            _signal(r.handle, signal.SIGTERM)
        self._leaving += self._members
        self._members = []
        if self._leaving:
            kill_at = time.monotonic() + grace_s
            self._kill_at = kill_at if self._kill_at is None else min(self._kill_at, kill_at)
        self._changed.notify_all()

    def _watch(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                live = {r.handle.sentinel: r for r in self._members + self._leaving}
                if self._kill_at is not None and time.monotonic() >= self._kill_at:
                    for r in self._leaving:
                        r.handle.kill()
                    self._kill_at = None
            ended = wait_for_sentinels(list(live), timeout=0.05) if live else time.sleep(0.05) or []
            with self._lock:
                if self._closed:
                    return
                for sentinel in ended:
                    self._on_exit(live[sentinel])
                if not self._leaving:
                    self._kill_at = None
                    if self._phase is JobPhase.RECOVERING and not self._members:
                        self._recover()

    def _on_exit(self, r: _Rank) -> None:
        r.handle.join(0)
        self._changed.notify_all()
        if r in self._leaving:
            self._leaving.remove(r)
            return
        code = r.handle.exitcode
        if code == 0:
            self._members.remove(r)
            if not self._members:
                self._phase = JobPhase.FINISHED
            return
        self._members.remove(r)
        self._failures += 1
        if code == EXIT_CONFINEMENT:
            self._reason = (f"rank {r.rank} could not be isolated, so none of the job's code ran "
                            f"(see {self.config.job_dir / 'logs' / f'rank{r.rank}.log'})")
        else:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            self._reason = f"rank {r.rank} {how} (see {self.config.job_dir / 'logs' / f'rank{r.rank}.log'})"
        self._terminate(self.config.grace_s)  # the others cannot go on without it
        retry = (self.config.restartable and code != EXIT_CONFINEMENT and self._restarts < self.config.max_restarts)
        self._phase = JobPhase.RECOVERING if retry else JobPhase.FAILED

    def _recover(self) -> None:
        """The failed gang is gone: start it again on the same slots (caller holds the lock)."""
        self._restarts += 1
        try:
            self._launch(self._slots)
        except Exception as e:  # noqa: BLE001 - a launcher that refuses (a lost lease) fails the job with why
            self._reason = f"could not restart: {e}"
            self._phase = JobPhase.FAILED


def _signal(handle: WorkerHandle, sig: int) -> None:
    if handle.pid is not None and handle.exitcode is None:
        try:
            os.kill(handle.pid, sig)
        except ProcessLookupError:
            pass


def free_port(host: str) -> int:
    """A port free on ``host`` now, for rank 0's rendezvous (``MASTER_PORT``)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
