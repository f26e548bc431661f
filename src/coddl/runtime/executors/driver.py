"""``ElasticExecutor``: carries out plans on one ``coddl.elastic.ElasticJob`` per job.

The local and the Ray executor differ only in where a worker process starts (the ``Launcher``) and
how the job's store is reached (``host``); everything else — ordering, resizing in place, noticing
exits and lost workers, reporting progress — is this one class.

Ordering: plans and cancels are carried out in the order they were given, by one applier thread, and
within a plan every action that frees GPUs (suspend, shrink) completes before any action that takes
GPUs (start, resume, grow, migrate), so a GPU is never used by two jobs at once. Actions on
different jobs within a phase run in parallel (a resize takes about a second; four in a row would
quadruple the pause).

Keeping the allocation: after a worker dies the job continues on the survivors, with fewer workers
than GPUs allocated to it. The allocation did not change, so the monitor re-grows the job onto its
allocated slots — carrying out the standing plan, not deciding a new one.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from coddl.core.allocation import Action, ActionKind, Plan
from coddl.core.cluster import Cluster
from coddl.core.job import JobId
from coddl.elastic.job import ElasticJob, JobConfig, JobPhase
from coddl.elastic.pool import Launcher
from coddl.runtime.executors.base import (
    AppliedEvent,
    ExecutorEvent,
    ExecutorInfo,
    ExitEvent,
    LaunchSpec,
    ProgressEvent,
    WorkerLostEvent,
)

_RELEASES = (ActionKind.SUSPEND, ActionKind.SHRINK)
_BUSY = (JobPhase.STARTING, JobPhase.RESIZING, JobPhase.RECOVERING)


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


@dataclass(eq=False)
class _Running:
    """A job the executor holds: its handle and the allocation it was last told to carry out."""

    job: ElasticJob
    slots: tuple[int, ...] = ()
    cores: tuple[int, ...] = ()
    lock: threading.Lock = field(default_factory=threading.Lock)  # one action (or heal) at a time
    progress_time: float = 0.0
    failures: int = 0
    pinned: dict[int, int] = field(default_factory=dict)  # slot → pid whose affinity was set


@dataclass(frozen=True)
class _Cancel:
    job_id: JobId


class ElasticExecutor:
    """Plans in, events out. Subclasses provide the launcher, the store host and core pinning."""

    kind = "elastic"

    def __init__(self, cluster: Cluster, launcher: Launcher, host: str,
                 settings: ExecutorSettings = ExecutorSettings()) -> None:
        self.cluster = cluster
        self.settings = settings
        self.notify: Callable[[], None] = lambda: None
        self._launcher = launcher
        self._host = host
        self._launches: dict[JobId, LaunchSpec] = {}
        self._jobs: dict[JobId, _Running] = {}
        self._lock = threading.Lock()
        self._events: list[ExecutorEvent] = []
        self._work: queue.Queue[Plan | _Cancel | None] = queue.Queue()
        self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="coddl-action")
        self._closed = threading.Event()
        self._applier = threading.Thread(target=self._apply_loop, name="coddl-applier", daemon=True)
        self._monitor = threading.Thread(target=self._monitor_loop, name="coddl-monitor", daemon=True)
        self._applier.start()
        self._monitor.start()

    # ------------------------------------------------------------------ the contract
    def register(self, launch: LaunchSpec) -> None:
        with self._lock:
            self._launches[launch.job_id] = launch

    def apply(self, plan: Plan) -> None:
        if plan.actions:
            self._work.put(plan)

    def cancel(self, job_id: JobId) -> None:
        self._work.put(_Cancel(job_id))

    def events(self) -> list[ExecutorEvent]:
        with self._lock:
            out, self._events = self._events, []
        return out

    def info(self) -> ExecutorInfo:
        nodes = [{"name": n.name, "gpus": n.gpus, "first_gpu": int(self.cluster.node_first_gpu[i])}
                 for i, n in enumerate(self.cluster.nodes)]
        return ExecutorInfo(self.kind, nodes)

    def worker_pids(self, job_id: JobId) -> dict[int, int]:
        """slot → pid of each worker of a job (for operators, and for tests that kill one)."""
        r = self._jobs.get(job_id)
        return r.job.worker_pids() if r is not None else {}

    def close(self) -> None:
        """Stop every job (rank 0 checkpoints) and the threads; no worker outlives the executor."""
        self._closed.set()
        self._work.put(None)
        self._applier.join(timeout=60)
        self._monitor.join(timeout=10)
        with self._lock:
            jobs, self._jobs = list(self._jobs.values()), {}
        for r in jobs:
            try:
                r.job.stop(grace_s=10)
            finally:
                r.job.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ hooks for subclasses
    def _pin(self, pids: dict[int, int], cores: tuple[int, ...]) -> None:
        """Restrict each worker to the job's cores on its node (no cores: leave it alone)."""

    # ------------------------------------------------------------------ applier
    def _emit(self, ev: ExecutorEvent) -> None:
        with self._lock:
            self._events.append(ev)
        self.notify()

    def _apply_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            if isinstance(item, _Cancel):
                self._cancel(item.job_id)
                continue
            releases = [a for a in item.actions if a.kind in _RELEASES]
            takes = [a for a in item.actions if a.kind not in _RELEASES]
            for phase in (releases, takes):
                list(self._pool.map(self._act, phase))

    def _act(self, a: Action) -> None:
        try:
            r = self._jobs.get(a.job_id)
            if r is None:
                r = self._open(a.job_id)
            with r.lock:
                phase = self._settle(r.job)
                if phase in (JobPhase.FINISHED, JobPhase.FAILED):
                    return  # the monitor reports the exit; nothing left to move
                t0 = time.perf_counter()
                if a.kind is ActionKind.SUSPEND:
                    r.job.stop()
                elif a.kind is ActionKind.RECORE or set(a.new) == set(r.slots) and phase is JobPhase.RUNNING:
                    pass  # same GPUs: only the cores change (pinned below)
                elif phase in (JobPhase.IDLE, JobPhase.STOPPED):
                    r.job.start(a.new)
                else:
                    r.job.resize(a.new)
                seconds = time.perf_counter() - t0
                r.slots, r.cores = a.new, a.cores
                if a.new:
                    self._repin(r)
            self._emit(AppliedEvent(a.job_id, a.kind.value, a.new, seconds, time.time()))
        except Exception as e:  # noqa: BLE001 - any failure to carry out an action fails the job, with the reason
            self._fail(a.job_id, f"{a.kind.value} onto GPUs {list(a.new)} failed: {e}")

    def _open(self, job_id: JobId) -> _Running:
        launch = self._launches[job_id]
        s = self.settings
        config = JobConfig(
            job_id=job_id, entry=launch.entry, job_dir=launch.job_dir, args=launch.args, env=dict(launch.env),
            pg_timeout_s=s.pg_timeout_s, checkpoint_s=s.checkpoint_s, report_s=s.report_s,
            max_restarts=s.max_restarts, start_timeout_s=s.start_timeout_s, host=self._host, threads=s.threads,
        )
        r = _Running(ElasticJob(config, self._launcher))
        with self._lock:
            self._jobs[job_id] = r
        return r

    def _settle(self, job: ElasticJob) -> JobPhase:
        """Wait out a start, resize or recovery in progress (the job cannot be moved mid-change)."""
        deadline = time.monotonic() + self.settings.start_timeout_s
        while (phase := job.poll().phase) in _BUSY and time.monotonic() < deadline:
            time.sleep(0.02)
        return phase

    def _cancel(self, job_id: JobId) -> None:
        with self._lock:
            r = self._jobs.pop(job_id, None)
            self._launches.pop(job_id, None)
        if r is None:
            return
        with r.lock:
            try:
                r.job.stop(grace_s=10)
            finally:
                r.job.close()

    def _fail(self, job_id: JobId, message: str) -> None:
        with self._lock:
            r = self._jobs.pop(job_id, None)
            self._launches.pop(job_id, None)
        if r is not None:
            r.job.close()
        self._emit(ExitEvent(job_id, finished=False, at=time.time(), message=message))

    def _repin(self, r: _Running) -> None:
        pids = r.job.worker_pids()
        if pids != r.pinned:
            self._pin(pids, r.cores)
            r.pinned = pids

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
        if rep.failures > r.failures:
            r.failures = rep.failures
            self._emit(WorkerLostEvent(job_id, time.time(), rep.failures, rep.restarts))
        if rep.phase is JobPhase.FINISHED or rep.phase is JobPhase.FAILED:
            if not r.lock.acquire(blocking=False):
                return  # an action is finishing with this job; look again next round
            try:
                with self._lock:
                    self._jobs.pop(job_id, None)
                    launch = self._launches.pop(job_id, None)
                r.job.close()
            finally:
                r.lock.release()
            finished = rep.phase is JobPhase.FINISHED
            message = None if finished else _last_error(launch.job_dir if launch else None)
            self._emit(ExitEvent(job_id, finished=finished, at=time.time(), message=message))
            return
        if rep.phase is JobPhase.RUNNING and r.slots and r.lock.acquire(blocking=False):
            # lock handed to the heal, which releases it
            if set(rep.slots) != set(r.slots):
                self._pool.submit(self._heal, job_id, r)
            else:
                self._repin(r)
                r.lock.release()

    def _heal(self, job_id: JobId, r: _Running) -> None:
        """Bring a job that lost a worker back onto its whole allocation."""
        try:
            if self._settle(r.job) is JobPhase.RUNNING:
                seconds = r.job.resize(r.slots)
                self._repin(r)
                self._emit(AppliedEvent(job_id, "heal", r.slots, seconds, time.time()))
        except Exception:  # noqa: BLE001 - the job may have finished meanwhile; the next round looks again
            pass
        finally:
            r.lock.release()


def _last_error(job_dir: Path | None) -> str:
    """The last line of the most recently written worker log: usually the exception."""
    if job_dir is None:
        return "failed"
    logs = sorted((job_dir / "logs").glob("*.log"), key=lambda p: p.stat().st_mtime)
    for log in reversed(logs):
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        if lines:
            return f"{lines[-1].strip()[:300]} (see {log})"
    return f"failed (no worker output in {job_dir / 'logs'})"


def local_pin(pids: dict[int, int], cores: tuple[int, ...], first_core: int = 0) -> None:
    """Pin processes on THIS host to the job's cores (global indices minus the node's first core)."""
    if not cores:
        return
    local = {c - first_core for c in cores}
    for pid in pids.values():
        try:
            os.sched_setaffinity(pid, local)
        except (ProcessLookupError, OSError):
            pass  # exited meanwhile, or cores this host does not have
