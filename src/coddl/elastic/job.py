"""``ElasticJob``: the executor's handle on ONE elastic training job whose workers run on this host.

It hosts the job's long-lived store (through a ``Coordinator``), launches one worker per slot, and
turns ``start``/``resize``/``stop`` into memberships (see ``coddl.elastic.protocol``). A monitor thread
waits on the workers' process sentinels, so a worker that dies (any exit, SIGKILL included) is noticed
within milliseconds: the survivors get a ``failure`` membership and continue in place; if nobody
survives, fresh workers restart from the last checkpoint (at most ``max_restarts`` times). A worker
that exits before rank 0 has recorded the end of training counts as failed, whatever its exit code.

A slot is a logical GPU index. When CUDA exists the worker sees only that slot's GPU
(``CUDA_VISIBLE_DEVICES``); otherwise the slot is a CPU slot and only names the worker.

A worker whose script failed by itself says why (``coddl.elastic.failure``): a mistake in the script
fails the job at once with that reason, and so does the same exception at the same place again after
the job regrouped or restarted — neither is worth more restarts. ``JobReport.reason`` names it.

Nothing here needs the workers to be local except the launcher: a launcher whose handles stand for
processes elsewhere (a Ray actor running ``run_worker`` from a ``WorkerPool`` on its node) works
unchanged if each handle offers pid, exitcode, kill, join and a ``sentinel`` fd that becomes readable
when the process ends (a pipe that a watcher thread writes to will do), and ``JobConfig.host`` is an
address the other nodes can reach.
"""

from __future__ import annotations

import enum
import itertools
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as wait_for_sentinels
from pathlib import Path
from typing import Mapping, Self, Sequence

import torch

from coddl.elastic.coordinator import Coordinator
from coddl.elastic.pool import Launcher, WorkerHandle, WorkerPool
from coddl.elastic.protocol import (
    REASON_FAILURE,
    REASON_RESIZE,
    REASON_RESTART,
    REASON_START,
    REASON_STOP,
    Inspection,
    Membership,
    Progress,
    WorkerEnv,
)
from coddl.elastic.sandbox import EXIT_CONFINEMENT, Confinement
from coddl.elastic.worker import WorkerSpec
from coddl.waiting import wait_until


class JobPhase(enum.Enum):
    IDLE = "idle"  # never started
    STARTING = "starting"
    RUNNING = "running"
    RESIZING = "resizing"
    RECOVERING = "recovering"  # survivors re-forming after a failure, or a restart from checkpoint
    FINISHED = "finished"  # the training script reached its end
    STOPPED = "stopped"  # stop() was called; a checkpoint holds the progress (start() resumes it)
    FAILED = "failed"  # more than max_restarts restarts were needed

    @property
    def settled(self) -> bool:
        return self in (JobPhase.FINISHED, JobPhase.STOPPED, JobPhase.FAILED)


@dataclass(frozen=True)
class JobConfig:
    """How to run a job's workers. ``entry`` is ``module:function`` or a script path (see WorkerSpec)."""

    job_id: str
    entry: str
    job_dir: Path
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for the workers
    pg_timeout_s: float = 30.0
    checkpoint_s: float = 60.0
    report_s: float = 0.5
    seed: int = 0
    verify: bool = False  # ranks report state hashes after every regroup (Coordinator.state_hashes)
    max_restarts: int = 3
    start_timeout_s: float = 120.0  # cold workers import torch before they can join
    host: str = "127.0.0.1"  # how workers reach the store; use a routable address for remote workers
    threads: int = 1  # torch intra-op threads per worker
    gpu_of_slot: Mapping[int, int] | None = None  # slot → physical GPU; default: the slot number
    # slot → (device type, relative speed) as the cluster spec has them; ranks on more than one type
    # cut the global batch by speed (coddl.elastic.balance). Default: each device's own name, speed 1.
    device_of_slot: Mapping[int, tuple[str, float]] | None = None
    confinement: Confinement | None = None  # how the launcher confines the workers (None: not at all)


@dataclass(frozen=True)
class JobReport:
    """What ``poll()`` returns. ``slots`` are the slots of the newest membership, in rank order: after
    a failure they are fewer than the allocation until the controller grows the job again."""

    phase: JobPhase
    generation: int
    slots: tuple[int, ...]
    progress: Progress | None
    failures: int
    restarts: int
    reason: str | None = None  # why the job failed, or the newest worker failure's cause
    inspection: Inspection | None = None  # rank 0's timings of the job's first steps (CODDL_INSPECT)


@dataclass(eq=False)
class _Worker:
    worker_id: str
    slot: int
    handle: WorkerHandle | None = None


class WorkerGroup:
    """What every job handle shares: its worker processes (``_members`` in rank order, ``_leaving`` those
    told to go), a monitor thread, and the ways to wait for and end them. Subclasses provide the rest
    of the executor's surface (start, resize, restart, stop, poll, ended)."""

    _lock: threading.RLock
    _changed: threading.Condition
    _phase: JobPhase
    _members: list
    _leaving: list
    _closed: bool
    _monitor: threading.Thread

    def poll(self) -> JobReport:
        raise NotImplementedError

    def _check_startable(self, slots: Sequence[int]) -> None:
        """Refuse a start while workers of the job are still there, or onto no slot (caller holds the lock)."""
        if self._members or self._leaving:
            raise RuntimeError(f"job {self.config.job_id} is already running")
        if not slots:
            raise ValueError("start() needs at least one slot")

    def wait(self, timeout: float | None = None) -> JobReport:
        """Block until the job is finished, stopped or failed (or ``timeout`` passes); returns poll()."""
        with self._lock:
            self._changed.wait_for(lambda: self._phase.settled and not self._members and not self._leaving, timeout)
        return self.poll()

    def worker_pids(self) -> dict[int, int]:
        """slot → pid of the member worker on it (for operators, and for tests that kill workers)."""
        with self._lock:
            return {w.slot: w.handle.pid for w in self._members}

    def close(self) -> None:
        """Kill any remaining worker and stop watching."""
        with self._lock:
            self._closed = True
            for w in self._members + self._leaving:
                w.handle.kill()
            self._changed.notify_all()
        self._monitor.join()
        for w in self._members + self._leaving:
            w.handle.join(5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ElasticJob(WorkerGroup):
    """Start, resize, stop and watch one elastic job on this host. Thread-safe; use as a context
    manager (or call ``close()``) so that no worker outlives the handle."""

    def __init__(self, config: JobConfig, launcher: Launcher | None = None) -> None:
        self.config = config
        self._launcher = launcher if launcher is not None else WorkerPool()
        self._network, listener = self._own_network()
        self.coordinator = Coordinator(config.host, timeout_s=config.pg_timeout_s, listener=listener)
        self._cuda = torch.cuda.is_available()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._members: list[_Worker] = []  # rank order of the newest membership
        self._leaving: list[_Worker] = []  # told to leave and not yet exited
        self._slots: tuple[int, ...] = ()  # the allocation last asked for: a restart uses it
        self._phase = JobPhase.IDLE
        self._failures = 0
        self._restarts = 0
        self._reason: str | None = None
        self._seen: dict[str, int] = {}  # failure fingerprint → the earliest generation it failed in
        self._ids = itertools.count()
        self._closed = False
        self._monitor = threading.Thread(target=self._watch, name=f"elastic-{config.job_id}", daemon=True)
        self._monitor.start()
        config.job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # the workers make logs/ themselves

    # ---- executor API ----------------------------------------------------------------------------

    def start(self, slots: Sequence[int]) -> float:
        """Launch one worker per slot (resuming from the checkpoint if the job dir has one); returns the
        seconds until they train as one group."""
        t0 = time.perf_counter()
        with self._lock:
            self._check_startable(slots)
            self._slots = tuple(slots)
            self._phase = JobPhase.STARTING
            membership = self._launch(self._new_workers(slots), REASON_START)
        return self._await(membership.generation, t0)

    def resize(self, slots: Sequence[int]) -> float:
        """Move the job onto ``slots`` in place: workers on kept slots continue, workers on dropped slots
        leave, new slots get pooled workers that receive the state from a survivor. The survivors keep
        training until the new workers are up. Returns the seconds until the new group trains. With no
        slot kept this is a checkpoint-restart (``restart``)."""
        if not slots:
            raise ValueError("resize() needs at least one slot; use stop() to release all")
        t0 = time.perf_counter()
        with self._lock:
            if self._phase is not JobPhase.RUNNING:
                raise RuntimeError(f"job {self.config.job_id} cannot be resized while {self._phase.value}")
            keep = [w for w in self._members if w.slot in slots]
            leaving = [w for w in self._members if w.slot not in slots]
            joiners = self._new_workers([s for s in slots if s not in {w.slot for w in keep}])
            if not leaving and not joiners:
                return 0.0
            if keep:
                self._leaving += leaving
                self._slots = tuple(slots)
                self._phase = JobPhase.RESIZING
                # ranks in the order of the slots asked for (a node's GPUs are consecutive), never in the
                # order workers joined: a ring all-reduce follows the ranks, and a job grown from 1+1 to
                # 2+2 GPUs in join order (0, 4, 1, 5) would cross the link between the nodes at every hop
                order = {s: i for i, s in enumerate(slots)}
                members = sorted(keep + joiners, key=lambda w: order[w.slot])
                membership = self._launch(members, REASON_RESIZE, announce=not joiners)
        if not keep:
            return self.restart(slots)
        if joiners:
            self._announce_when_arrived(membership, len(joiners))
        return self._await(membership.generation, t0)

    def restart(self, slots: Sequence[int]) -> float:
        """Checkpoint-restart onto ``slots``: stop (rank 0 saves a checkpoint), then start fresh workers
        that resume from it. The slow path that in-place ``resize`` avoids; returns the seconds taken."""
        t0 = time.perf_counter()
        self.stop()
        self.start(slots)
        return time.perf_counter() - t0

    def stop(self, grace_s: float | None = None) -> None:
        """Ask every worker to leave at its next step boundary (rank 0 checkpoints first); kill those
        still alive after ``grace_s`` (default: the process-group timeout)."""
        with self._lock:
            if self._members:
                self.coordinator.post([], REASON_STOP)
                self._leaving += self._members
                self._members = []
            if not self._phase.settled:
                self._phase = JobPhase.STOPPED
            self._changed.notify_all()
        with self._lock:
            if not self._changed.wait_for(lambda: not self._leaving, self.config.pg_timeout_s if grace_s is None else grace_s):
                for w in self._leaving:
                    w.handle.kill()
                while not self._changed.wait_for(lambda: not self._leaving, 0.1):
                    pass

    def poll(self) -> JobReport:
        with self._lock:
            return JobReport(
                phase=self._phase,
                generation=self.coordinator.membership.generation,
                slots=tuple(w.slot for w in self._members),
                progress=self.coordinator.progress(),
                failures=self._failures,
                restarts=self._restarts,
                reason=self._reason,
                inspection=self.coordinator.inspection(),
            )

    def ended(self) -> bool:
        """Rank 0 recorded the end of training: the job's work is done."""
        return self.coordinator.finished()

    def close(self) -> None:
        """Kill any remaining worker and stop watching; the store (and the job's network namespace, if
        it has one) goes away with the handle."""
        super().close()
        self.coordinator.close()
        if self._network is not None:
            self._launcher.release_network(self._network)

    def _own_network(self) -> tuple[str | None, socket.socket | None]:
        """A network namespace for all the job's workers, with the store listening inside it, where the
        launcher can make one (a root server's, for workers on this host: ``coddl.runtime.netns``):
        then no process outside the job reaches its collectives. Its key and the store's socket."""
        c = self.config
        listen = getattr(self._launcher, "listen_in_network", None)
        if c.confinement is None or listen is None or c.host != "127.0.0.1":
            return None, None
        key = f"{c.job_id}-{secrets.token_hex(6)}"
        listener = listen(key, c.host)
        return (key, listener) if listener is not None else (None, None)

    # ---- internals -------------------------------------------------------------------------------

    def _new_workers(self, slots: Sequence[int]) -> list[_Worker]:
        return [_Worker(f"w{next(self._ids)}", slot) for slot in slots]

    def _launch(self, members: list[_Worker], reason: str, announce: bool = True) -> Membership:
        """Post the membership (record before action), then start the workers that have no process."""
        m = self.coordinator.post([w.worker_id for w in members], reason, announce=announce)
        for w in members:
            if w.handle is None:
                w.handle = self._launcher.launch(self._spec(w, m.generation))
        self._members = members
        self._changed.notify_all()
        return m

    def _announce_when_arrived(self, membership: Membership, joiners: int) -> None:
        """Announce a grow only once its new workers are up, so the survivors train until then. A
        failure meanwhile supersedes the membership, and then it must never be announced; nor once
        training has ended (the new workers see that and leave)."""
        def arrived_or_superseded() -> bool:
            if self.coordinator.arrived(membership.generation) >= joiners:
                return True
            with self._lock:
                return self.coordinator.membership != membership or self.coordinator.finished()

        wait_until(arrived_or_superseded, self.config.start_timeout_s,
                   f"job {self.config.job_id}: new workers did not start", interval=0.001)
        with self._lock:
            if self.coordinator.membership == membership and not self.coordinator.finished():
                self.coordinator.announce(membership)

    def _spec(self, worker: _Worker, generation: int) -> WorkerSpec:
        c = self.config
        env = dict(c.env)
        device_type, device_speed = (c.device_of_slot or {}).get(worker.slot, ("", 1.0))
        env.update(WorkerEnv(
            store_addr=self.coordinator.address, store_key=self.coordinator.secret, job_id=c.job_id,
            worker_id=worker.worker_id,
            generation=generation, job_dir=c.job_dir, pg_timeout_s=c.pg_timeout_s,
            checkpoint_s=c.checkpoint_s, report_s=c.report_s, seed=c.seed, verify=c.verify,
            device_type=device_type, device_speed=device_speed,
        ).to_environ())
        env["CODDL_SLOT"] = str(worker.slot)
        if self._cuda:
            env["CUDA_VISIBLE_DEVICES"] = str((c.gpu_of_slot or {}).get(worker.slot, worker.slot))
        confinement = c.confinement
        if self._network is not None:  # loopback is all the job's namespace has
            env = {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", **env}
            confinement = replace(confinement, network=self._network)
        return WorkerSpec(
            entry=c.entry, args=tuple(c.args), env=env,
            log_path=str(c.job_dir / "logs" / f"{worker.worker_id}.log"),
            cwd=str(c.job_dir), sys_path=tuple(sys.path), threads=c.threads, confinement=confinement,
        )

    def _await(self, generation: int, t0: float) -> float:
        """Seconds from ``t0`` until ``generation`` (or a later one, after a failure) trains."""
        def trains() -> bool:
            with self._lock:
                phase, newest = self._phase, self.coordinator.membership.generation
            if phase is JobPhase.FAILED:
                raise RuntimeError(f"job {self.config.job_id} failed (see {self.config.job_dir / 'logs'})")
            return phase.settled or any(self.coordinator.is_complete(g) for g in range(generation, newest + 1))

        wait_until(trains, self.config.start_timeout_s,
                   f"job {self.config.job_id}: generation {generation} did not form", interval=0.001)
        return time.perf_counter() - t0

    def _watch(self) -> None:
        """Monitor thread: reap exited workers and move the phase along."""
        while True:
            with self._lock:
                if self._closed:
                    return
                live = {w.handle.sentinel: w for w in self._members + self._leaving}
            if live:
                ended = wait_for_sentinels(list(live), timeout=0.05)
            else:
                time.sleep(0.05)
                ended = []
            with self._lock:
                if self._closed:
                    return
                for sentinel in ended:
                    try:
                        self._on_exit(live[sentinel])
                    except Exception as e:  # noqa: BLE001 - the launcher refused a replacement (no account for
                        # the owner, a server that lost its lease): the job cannot go on, say why
                        self._give_up(f"could not start a replacement worker: {e}")
                if self._phase in (JobPhase.STARTING, JobPhase.RESIZING, JobPhase.RECOVERING) and \
                        self.coordinator.is_complete(self.coordinator.membership.generation):
                    self._phase = JobPhase.RUNNING
                    self._changed.notify_all()

    def _on_exit(self, worker: _Worker) -> None:
        worker.handle.join(0)
        self._changed.notify_all()
        if worker in self._leaving:
            self._leaving.remove(worker)
            return
        self._members.remove(worker)
        if worker.handle.exitcode == 0 and self.coordinator.finished():
            if not self._members:
                self._phase = JobPhase.FINISHED
            return
        self._failures += 1
        failure = self.coordinator.failure(worker.worker_id)
        if failure is not None:
            self._reason = f"{worker.worker_id}: {failure.describe()}"
            first = self._seen.setdefault(failure.fingerprint, failure.generation)
            if failure.fatal or first < failure.generation:
                again = "" if failure.fatal else " — the same failure again after the job regrouped, so not retried"
                self._give_up(f"{failure.describe()}{again}")
                return
        elif worker.handle.exitcode == EXIT_CONFINEMENT:
            self._give_up(f"{worker.worker_id} could not be isolated, so none of the job's code ran "
                          f"(see {self.config.job_dir / 'logs' / (worker.worker_id + '.log')})")
            return
        if self._members:
            self._phase = JobPhase.RECOVERING
            self.coordinator.post([w.worker_id for w in self._members], REASON_FAILURE)
        elif self._restarts < self.config.max_restarts:
            self._restarts += 1
            self._phase = JobPhase.RECOVERING
            self._launch(self._new_workers(self._slots), REASON_RESTART)
        else:
            self._phase = JobPhase.FAILED

    def _give_up(self, reason: str) -> None:
        """Fail the job now: its script cannot succeed, so its other workers are stopped too."""
        self._reason = reason
        self._phase = JobPhase.FAILED
        for w in self._members:
            w.handle.kill()
        self._leaving += self._members
        self._members = []
