"""``ElasticExecutor``: carries out plans on one ``coddl.elastic.ElasticJob`` per job.

The local and the Ray executor differ only in where a worker process starts (the ``Launcher``) and
how the job's store is reached (``host``); everything else — ordering, resizing in place, noticing
exits and lost workers, reporting progress — is this one class.

Ordering without stalls: ``apply`` returns at once; each operation (an action, a cancel, closing a
finished job, re-growing after a lost worker) runs in its own thread once its dependencies are done:
the previous operation on the same job (a job's operations happen in the order given), and, for each
GPU it takes, the operations that made its previous holders let go of that GPU (a GPU is never used
by two jobs at once, unless both share it on purpose). Nothing else waits, so a slow resize of one
job holds up only that job and whoever gets its GPUs next — never the whole cluster.

Shared GPUs: jobs that share a GPU (``coddl.placement.sharing``) hold it at once. A sharing job that
joins a GPU waits only for the jobs that left it — never for the tenants that stay — and a job that
takes a GPU after several tenants waits for every one of them to have let go. A ``cotenants``
action (the job's GPU got or lost a co-tenant: its speed changes, nothing moves) needs nothing of
the executor: the job keeps its workers, its GPU and its cores (the GPU's, shared with its
co-tenants), and no event is reported for it; the plan's record in the store is its only trace.

Keeping the allocation: after a worker dies the job continues on the survivors, with fewer workers
than GPUs allocated to it. The allocation did not change, so the monitor re-grows the job onto its
allocated slots — carrying out the standing plan, not deciding a new one.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import psutil

from coddl.core.allocation import Action, ActionKind, Plan
from coddl.core.cluster import Cluster
from coddl.core.job import JobId
from coddl.elastic.gang import CommandJob, GangConfig, OneHost, Rendezvous
from coddl.elastic.job import ElasticJob, JobConfig, JobPhase
from coddl.elastic.pool import Launcher, WorkerHandle
from coddl.elastic.worker import WorkerSpec
from coddl.runtime.executors.base import (
    AppliedEvent,
    ExecutorEvent,
    ExitEvent,
    LaunchSpec,
    InspectionEvent,
    NoticeEvent,
    ProgressEvent,
    WorkerLostEvent,
    WorkerRecord,
    WorkersEvent,
)
from coddl.runtime.isolation import Isolation
from coddl.runtime.logs import last_line
from coddl.waiting import WaitTimeout, wait_until

_RELEASES = (ActionKind.SUSPEND, ActionKind.SHRINK)
_BUSY = (JobPhase.STARTING, JobPhase.RESIZING, JobPhase.RECOVERING)
FINISH_GRACE_S = 5.0  # after training ended, how long workers may take to exit on their own
CANCEL_GRACE_S = 10.0  # an elastic job's workers, from the stop request to SIGKILL (a command job has its own)


@dataclass(frozen=True)
class ExecutorSettings:
    """Knobs of the worker protocol (see ``coddl.elastic.job.JobConfig``)."""

    poll_s: float = 0.5  # how often the monitor reads every job's progress and phase
    checkpoint_s: float = 30.0  # rank 0's periodic checkpoint: what a restart resumes from
    report_s: float = 0.5
    pg_timeout_s: float = 30.0
    start_timeout_s: float = 120.0
    max_restarts: int = 3
    threads: int = 1  # torch threads per worker


def _done() -> Future:
    f: Future = Future()
    f.set_result(None)
    return f


@dataclass(eq=False)
class _Running:
    """A job the executor holds: its handle, the allocation it was told about, its operation chain."""

    job: ElasticJob | CommandJob
    target: tuple[int, ...] = ()  # GPUs after the newest dispatched action
    slots: tuple[int, ...] = ()  # GPUs after the newest completed action
    cores: tuple[int, ...] = ()
    chain: Future = field(default_factory=_done)  # the newest operation on this job
    progress_time: float = 0.0
    failures: int = 0
    pinned: dict[int, int] = field(default_factory=dict)  # slot → pid whose affinity was set
    trained_since: float | None = None  # monotonic time the job's training was first seen complete
    inspected: bool = False  # its inspection report was passed on
    network_note: str | None = None  # a command job: what its owner was last told of its network


class ElasticExecutor:
    """Plans in, events out. Subclasses provide the launcher, the store host and core pinning.

    ``guard`` is called before every action and every worker start, and raises to refuse it: the
    server sets it to its lease check, so that a server that may have lost its lease to another one
    (a paused VM coming back) never starts or moves a worker.
    """

    kind = "elastic"

    def __init__(self, cluster: Cluster, launcher: Launcher, host: str,
                 settings: ExecutorSettings = ExecutorSettings(), isolation: Isolation = Isolation("none")) -> None:
        self.cluster = cluster
        self.settings = settings
        self.isolation = isolation
        self.notify: Callable[[], None] = lambda: None
        self.guard: Callable[[], None] = lambda: None
        self._launcher = _Guarded(launcher, lambda: self.guard())
        self._host = host
        self._launches: dict[JobId, LaunchSpec] = {}
        self._jobs: dict[JobId, _Running] = {}
        # GPU → the operations that release it, one per job that let go of it (several: a shared GPU)
        self._gpu_free_after: dict[int, list[Future]] = {}
        self._lock = threading.Lock()
        self._events: list[ExecutorEvent] = []
        self._closed = threading.Event()
        self._monitor = threading.Thread(target=self._monitor_loop, name="coddl-monitor", daemon=True)
        self._monitor.start()

    # ------------------------------------------------------------------ the contract
    def register(self, launch: LaunchSpec) -> None:
        with self._lock:
            self._launches[launch.job_id] = launch

    def apply(self, plan: Plan) -> None:
        """Dispatch the plan's actions (frees before takes) and return; see the module docstring."""
        actions = sorted(plan.actions, key=lambda a: a.kind not in _RELEASES)
        with self._lock:
            for a in actions:
                if a.kind is ActionKind.COTENANTS:
                    continue  # same GPU, same cores, same workers: nothing to carry out
                r = self._jobs.get(a.job_id)
                if r is None:
                    if a.job_id not in self._launches:
                        continue  # the job has already left; its exit event is on the way
                    r = self._open(a.job_id)
                taken = set(a.new) - set(r.target)
                deps = [r.chain] + [f for g in taken for f in self._gpu_free_after.get(g, ())]
                r.chain = self._after(deps, self._act, r, a)
                self._released(set(r.target) - set(a.new), r.chain)
                r.target = a.new

    def cancel(self, job_id: JobId) -> None:
        with self._lock:
            self._launches.pop(job_id, None)
            r = self._jobs.pop(job_id, None)
            if r is not None:
                self._retire(r, self._stop_and_close)

    def events(self) -> list[ExecutorEvent]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def reap(self, workers: Sequence[WorkerRecord]) -> int:
        """Workers of a previous controller (see WorkersEvent); only a local executor can reach them."""
        return 0

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop every job (rank 0 checkpoints) and the monitor; no worker outlives the executor: a job
        whose operations are still stuck after ``timeout_s`` has its workers killed."""
        self._closed.set()
        self._monitor.join(timeout=10)
        with self._lock:
            jobs, self._jobs = list(self._jobs.values()), {}
            for r in jobs:
                self._retire(r, self._stop_and_close)
        wait([r.chain for r in jobs], timeout=timeout_s)
        for r in jobs:
            if not r.chain.done():
                r.job.close()

    def abandon(self) -> None:
        """Kill every worker at once: no checkpoint, nothing reported (see ``Executor.abandon``)."""
        self._closed.set()
        with self._lock:
            jobs, self._jobs = list(self._jobs.values()), {}
            self._launches.clear()
        for r in jobs:
            r.job.close()

    # ------------------------------------------------------------------ hooks for subclasses
    def _rendezvous(self) -> Rendezvous:
        """Where a command job's ranks meet (see ``coddl.elastic.gang``)."""
        return OneHost()

    def _pin(self, pids: dict[int, int], cores: tuple[int, ...]) -> None:
        """Restrict each worker to the job's cores on its node (no cores: leave it alone)."""

    def _worker_record(self, slot: int, pid: int) -> WorkerRecord:
        return WorkerRecord(slot, pid)

    # ------------------------------------------------------------------ operations
    def _after(self, deps: list[Future], fn: Callable, *args: object) -> Future:
        """Run ``fn(*args)`` in a new thread once every dependency has completed (ok or not)."""
        fut: Future = Future()

        def run() -> None:
            wait(deps)
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - delivered through the future
                fut.set_exception(e)

        threading.Thread(target=run, name="coddl-op", daemon=True).start()
        return fut

    def _retire(self, r: _Running, fn: Callable[[_Running], None]) -> None:
        """Queue the job's last operation; its GPUs are free once that has run. Caller holds _lock."""
        r.chain = self._after([r.chain], fn, r)
        self._released(r.target, r.chain)
        r.target = ()

    def _released(self, gpus: Iterable[int], op: Future) -> None:
        """``op`` lets go of ``gpus``: whoever takes one next waits for it, and for any other job's
        release of the same GPU still under way (its co-tenants'). Caller holds _lock."""
        for g in gpus:
            pending = [f for f in self._gpu_free_after.get(g, ()) if not f.done()]
            self._gpu_free_after[g] = [*pending, op]

    def _emit(self, ev: ExecutorEvent) -> None:
        with self._lock:
            self._events.append(ev)
        self.notify()

    def _open(self, job_id: JobId) -> _Running:
        """A handle for a job about to start (caller holds _lock)."""
        launch = self._launches[job_id]
        s = self.settings
        confinement = self.isolation.confinement(launch.owner, launch.job_dir)
        if launch.kind == "command":
            r = _Running(CommandJob(GangConfig(
                job_id=job_id, program=launch.entry, job_dir=launch.job_dir, args=launch.args, env=dict(launch.env),
                grace_s=launch.grace_s, restartable=launch.restartable, max_restarts=s.max_restarts,
                confinement=confinement), self._launcher, self._rendezvous()))
            self._jobs[job_id] = r
            return r
        config = JobConfig(
            job_id=job_id, entry=launch.entry, job_dir=launch.job_dir, args=launch.args, env=dict(launch.env),
            pg_timeout_s=s.pg_timeout_s, checkpoint_s=s.checkpoint_s, report_s=s.report_s,
            max_restarts=s.max_restarts, start_timeout_s=s.start_timeout_s, host=self._host, threads=s.threads,
            confinement=confinement, device_of_slot=device_of_gpu(self.cluster),
        )
        r = _Running(ElasticJob(config, self._launcher))
        self._jobs[job_id] = r
        return r

    def _act(self, r: _Running, a: Action) -> None:
        if self._jobs.get(a.job_id) is not r:
            return  # failed or cancelled since this action was dispatched
        try:
            self.guard()
            phase = self._settle(r.job)
            if phase in (JobPhase.FINISHED, JobPhase.FAILED) or r.job.ended():
                return  # training is over: the monitor reports the exit; nothing left to move
            t0 = time.perf_counter()
            if a.kind is ActionKind.SUSPEND:
                r.job.stop()
            elif phase in (JobPhase.IDLE, JobPhase.STOPPED):
                r.job.start(a.new)
            elif set(a.new) != set(r.slots):
                r.job.resize(a.new)
                if r.job.ended():
                    return  # training ended while the resize waited for it: nothing was moved
            seconds = time.perf_counter() - t0  # same GPUs (RECORE): only the pinning below changes
            r.slots, r.cores = a.new, a.cores
            if a.new:
                self._repin(r)
                self._note_network(r)
            self._emit(AppliedEvent(a.job_id, a.kind.value, a.new, seconds, time.time()))
        except Exception as e:  # noqa: BLE001 - failing to carry out an action fails the job, with the reason
            self._fail(a.job_id, f"{a.kind.value} onto GPUs {list(a.new)} failed: {e}")

    def _settle(self, job: ElasticJob | CommandJob) -> JobPhase:
        """Wait out a start, resize or recovery in progress (the job cannot be moved mid-change)."""
        phase = JobPhase.STARTING  # asked at once below

        def settled() -> bool:
            nonlocal phase
            phase = job.poll().phase
            return phase not in _BUSY

        try:
            wait_until(settled, self.settings.start_timeout_s, "the job did not settle", interval=0.02)
        except WaitTimeout:
            pass  # the caller decides what a job still busy means
        return phase

    @staticmethod
    def _stop_and_close(r: _Running) -> None:
        try:
            r.job.stop(grace_s=CANCEL_GRACE_S if isinstance(r.job, ElasticJob) else None)
        finally:
            r.job.close()

    @staticmethod
    def _close(r: _Running) -> None:
        r.job.close()

    def _fail(self, job_id: JobId, message: str) -> None:
        """Give up on a job from inside one of its operations (the job's later operations, if any,
        find it closed and fail quietly)."""
        with self._lock:
            self._launches.pop(job_id, None)
            r = self._jobs.pop(job_id, None)
        if r is not None:
            r.job.close()
        self._emit(ExitEvent(job_id, finished=False, at=time.time(), message=message))

    def _repin(self, r: _Running) -> None:
        """Pin new worker processes to the job's cores and report them (the store keeps the list)."""
        pids = r.job.worker_pids()
        if pids != r.pinned:
            self._pin(pids, r.cores)
            r.pinned = pids
            records = tuple(self._worker_record(slot, pid) for slot, pid in sorted(pids.items()))
            self._emit(WorkersEvent(r.job.config.job_id, time.time(), records))

    def _note_network(self, r: _Running) -> None:
        """Tell a command job's owner what protects its rendezvous and collectives, whenever that changes
        (a restart may move the gang between one node and several)."""
        if not isinstance(r.job, CommandJob):
            return
        note = self.isolation.network_note(len({int(self.cluster.node_of_gpu[g]) for g in r.slots}))
        if note != r.network_note:
            r.network_note = note
            self._emit(NoticeEvent(r.job.config.job_id, time.time(), "network", note))

    def _heal(self, r: _Running) -> None:
        """Bring a job that lost a worker back onto its whole allocation."""
        self.guard()
        if self._settle(r.job) is JobPhase.RUNNING and not r.job.ended():
            seconds = r.job.resize(r.slots)
            self._repin(r)
            self._emit(AppliedEvent(r.job.config.job_id, "heal", r.slots, seconds, time.time()))

    # ------------------------------------------------------------------ monitor
    def _monitor_loop(self) -> None:
        while not self._closed.wait(self.settings.poll_s):
            for job_id, r in list(self._jobs.items()):
                try:
                    self._watch(job_id, r)
                except Exception as e:  # noqa: BLE001 - a broken job must not stop watching the others
                    self._fail(job_id, f"monitor: {e}")

    def _watch(self, job_id: JobId, r: _Running) -> None:
        rep = r.job.poll()
        p = rep.progress
        if p is not None and p.time != r.progress_time:
            r.progress_time = p.time
            self._emit(ProgressEvent(job_id, p.time, p.step, p.world_size, p.steps_per_s, p.loss))
        if rep.inspection is not None and not r.inspected:
            r.inspected = True
            self._emit(InspectionEvent(job_id, time.time(), rep.inspection))
        if rep.failures > r.failures:
            r.failures = rep.failures
            self._emit(WorkerLostEvent(job_id, time.time(), rep.failures, rep.restarts, rep.reason))
        trained = rep.phase is JobPhase.FINISHED or self._trained_for(r) > FINISH_GRACE_S
        if trained or rep.phase is JobPhase.FAILED:
            with self._lock:
                launch = self._launches.pop(job_id, None)
                if self._jobs.pop(job_id, None) is None:
                    return  # cancelled or failed meanwhile
                if trained and rep.phase is not JobPhase.FINISHED:
                    # Stragglers: workers still there FINISH_GRACE_S after training ended (say, one
                    # stuck starting up for a resize) would hold the GPUs and any operation waiting
                    # for them. Stopping the job ends both (not through the chain, which may be
                    # what is stuck).
                    threading.Thread(target=r.job.stop, kwargs={"grace_s": 2.0}, daemon=True).start()
                self._retire(r, self._close)
            message = None if trained else (rep.reason if rep.phase is JobPhase.FAILED and rep.reason
                                            else _last_error(launch.job_dir if launch else None))
            self._emit(ExitEvent(job_id, finished=trained, at=time.time(), message=message))
            return
        if rep.phase is JobPhase.RUNNING and r.chain.done() and r.slots:
            if set(rep.slots) != set(r.slots):
                with self._lock:
                    r.chain = self._after([r.chain], self._heal, r)
            else:
                self._repin(r)

    @staticmethod
    def _trained_for(r: _Running) -> float:
        """Seconds since rank 0 recorded the end of training: after a grace period the job counts as
        finished even if some of its workers have not exited (see the stragglers in ``_watch``)."""
        if not r.job.ended():
            return 0.0
        if r.trained_since is None:
            r.trained_since = time.monotonic()
        return time.monotonic() - r.trained_since


def _last_error(job_dir: Path | None) -> str:
    """The last line of the most recently written worker log: usually the exception."""
    if job_dir is None:
        return "failed"
    found = last_line(job_dir)
    if found is None:
        return f"failed (no worker output in {job_dir / 'logs'})"
    name, line = found
    return f"{line[:300]} (see {job_dir / 'logs' / name})"


class _Guarded:
    """A launcher that asks ``guard`` before every start (see ``ElasticExecutor``)."""

    def __init__(self, launcher: Launcher, guard: Callable[[], None]) -> None:
        self.launcher = launcher
        self._guard = guard

    def launch(self, spec: WorkerSpec) -> WorkerHandle:
        self._guard()
        return self.launcher.launch(spec)

    def release_network(self, key: str) -> None:
        release = getattr(self.launcher, "release_network", None)
        if release is not None:
            release(key)

    def listen_in_network(self, key: str, host: str) -> socket.socket | None:
        listen = getattr(self.launcher, "listen_in_network", None)
        return listen(key, host) if listen is not None else None


def device_of_gpu(cluster: Cluster) -> dict[int, tuple[str, float]]:
    """Each GPU's device type and its relative speed, as the cluster (spec) names them: a job whose
    workers get more than one type balances its batch by speed (``coddl.elastic.balance``)."""
    out: dict[int, tuple[str, float]] = {}
    for gpu, node in enumerate(cluster.node_of_gpu.tolist()):
        t = cluster.nodes[node].gpu_type
        out[gpu] = (t, float(cluster.gpu_type_of(t).speed))
    return out


def local_pin(pids: dict[int, int], cores: tuple[int, ...], first_core: int = 0) -> None:
    """Pin processes on THIS host to the job's cores (global indices minus the node's first core): each
    worker and what it started (a confined worker runs the job in a child of the pid the executor knows)."""
    if not cores:
        return
    local = {c - first_core for c in cores}
    for pid in pids.values():
        try:
            family = [pid, *(p.pid for p in psutil.Process(pid).children(recursive=True))]
        except psutil.Error:
            continue
        for member in family:
            try:
                os.sched_setaffinity(member, local)
            except (ProcessLookupError, OSError):
                pass  # exited meanwhile, or cores this host does not have
