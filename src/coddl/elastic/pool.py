"""Starting worker processes: warm (forked from a server that has already imported torch) or cold.

Importing torch costs about 3.4 s on this hardware class and the first optimizer step imports
``torch._dynamo`` on top; a child forked from a forkserver that preloaded both is ready in about
0.05 s. That difference is most of what makes an in-place grow cheap, so executors should launch
through a ``WorkerPool``; ``ColdLauncher`` exists for comparison (benchmarks) and for hosts where a
forkserver is unwanted. A worker whose spec asks for confinement confines itself after the fork
(``coddl.elastic.sandbox``), so the pool stays warm for confined jobs too.

The fork server is started with a clean environment (``sandbox.clean_environment``): every worker is a
copy of it, and must not carry the server's secrets even in memory.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from multiprocessing import forkserver
from typing import Protocol, Sequence

from coddl.elastic.sandbox import clean_environment
from coddl.elastic.worker import WorkerSpec, run_worker

# "__main__" makes the server import the launcher's main module once, so that forked children find
# it already imported instead of re-importing it each (multiprocessing's forkserver would).
DEFAULT_PRELOAD = ("__main__", "torch", "torch._dynamo", "coddl.elastic")


class WorkerHandle(Protocol):
    """A started worker process (``multiprocessing.Process`` satisfies it)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def sentinel(self) -> int:
        """A file descriptor that becomes readable when the process ends."""

    @property
    def exitcode(self) -> int | None:
        """None while running; negative signal number if killed by a signal."""

    def kill(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...


class Launcher(Protocol):
    def launch(self, spec: WorkerSpec) -> WorkerHandle: ...


def _noop() -> None:
    pass


_spawning = threading.Lock()


def _forkserver_running() -> bool:
    pid = forkserver._forkserver._forkserver_pid
    try:
        with open(f"/proc/{pid}/stat") as f:
            return pid is not None and f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _ensure_forkserver() -> None:
    """Start the process's fork server (if it is not running) with a clean environment: every worker
    is a copy of it, environment block included, so the server's secrets (CODDL_TOKEN, database
    passwords, cloud credentials) must never be in it — not even in memory the job could read back."""
    if _forkserver_running():
        return
    with _spawning:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(clean_environment(saved) | {k: saved[k] for k in ("TMPDIR",) if k in saved})
        try:
            forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(saved)


class WorkerPool:
    """Workers forked on demand from a forkserver that preloads torch and torch._dynamo.

    multiprocessing keeps ONE forkserver per process, so the first pool's preload list wins and every
    pool in the process shares that server.
    """

    def __init__(self, preload: Sequence[str] = DEFAULT_PRELOAD) -> None:
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(list(preload))

    def warm(self) -> float:
        """Start the server (if needed) and wait until it forks a child; returns the seconds taken."""
        t0 = time.perf_counter()
        _ensure_forkserver()
        p = self._ctx.Process(target=_noop)
        p.start()
        p.join()
        return time.perf_counter() - t0

    def launch(self, spec: WorkerSpec) -> WorkerHandle:
        _ensure_forkserver()
        p = self._ctx.Process(target=run_worker, args=(spec,), name=spec.env.get("CODDL_WORKER_ID", "worker"))
        p.start()
        return p


class _ColdProcess:
    """A ``subprocess.Popen`` presented as a WorkerHandle; a pidfd serves as its sentinel."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.sentinel = os.pidfd_open(popen.pid)

    @property
    def exitcode(self) -> int | None:
        return self._popen.poll()

    def kill(self) -> None:
        self._popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def __del__(self) -> None:
        os.close(self.sentinel)


class ColdLauncher:
    """Each worker a fresh interpreter (``python -m coddl.elastic``) that imports torch itself."""

    def launch(self, spec: WorkerSpec) -> WorkerHandle:
        cmd = [sys.executable, "-m", "coddl.elastic", spec.to_json()]
        return _ColdProcess(subprocess.Popen(cmd, cwd=spec.cwd, env=clean_environment(os.environ) | spec.env,
                                             stdin=subprocess.DEVNULL))
