"""The body of every worker process, however it was started (forked from the warm pool, a cold
``python -m coddl.elastic SPEC_JSON``, or a Ray actor on another node): send output to the worker's
log, confine the process (``coddl.elastic.sandbox``) when the spec says so, give it the job's
environment and working directory (its job directory), put a GPU-sharing job's limits in place
before anything touches CUDA (``coddl.elastic.gpu_share``), and run the user's entry point — or, for a
command job (``program``), start the user's program and stay as its parent: the init of the job's PID
namespace, which passes SIGTERM on to the program and reaps what it leaves behind."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from coddl.elastic import gpu_share, sandbox
from coddl.elastic.failure import Failure, report
from coddl.elastic.protocol import WorkerEnv
from coddl.elastic.sandbox import Confinement
from coddl.elastic.session import current_generation, session_opened


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process needs, as plain data (it pickles to a forkserver child and goes as JSON
    on a cold start's command line).

    ``entry`` is ``package.module:function`` (called with no arguments) or the path of a script (run
    as ``__main__``); either way ``sys.argv`` is ``[entry, *args]``. ``env`` carries the CODDL_* vars
    and the job's own; the worker inherits nothing else of its parent's environment but what
    ``sandbox.clean_environment`` lets through. ``log_path`` is ``JOB_DIR/logs/NAME``. With
    ``program``, ``entry`` is any program (found on PATH) and ``args`` its arguments: see ``run_program``.
    """

    entry: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    cwd: str = "."
    sys_path: tuple[str, ...] = ()
    threads: int = 1
    confinement: Confinement | None = None
    program: bool = False

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> WorkerSpec:
        d = json.loads(raw)
        c = d.get("confinement")
        return cls(**{**d, "args": tuple(d["args"]), "sys_path": tuple(d["sys_path"]),
                      "confinement": None if c is None else Confinement(**{**c, "hide": tuple(c["hide"]),
                                                                            "expose": tuple(c["expose"])})})


def run_worker(spec: WorkerSpec) -> None:
    """Run ``spec``'s entry point in this process. Exceptions propagate (the process exits non-zero);
    a rank that leaves the job raises ``Departed``, a ``SystemExit(0)``. A worker that cannot be
    confined as its spec asks exits with ``sandbox.EXIT_CONFINEMENT`` before any of the job's code runs."""
    c = spec.confinement
    os.umask(0o022)  # not the server's (077): a job's files are as private as their directory makes them
    if spec.log_path is not None:
        log = Path(spec.log_path)
        fd = sandbox.open_log(str(log.parent.parent), log.name,
                              (c.uid, c.gid) if c is not None and c.uid is not None else None)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout.reconfigure(line_buffering=True)
    if c is not None:
        try:
            sandbox.enter(c, forward_term=spec.program)
        except (sandbox.ConfinementError, OSError) as e:
            print(f"coddl: this worker could not be isolated, so none of the job's code ran: {e}", flush=True)
            os._exit(sandbox.EXIT_CONFINEMENT)
    os.chdir(spec.cwd)
    sys.path[:0] = [p for p in spec.sys_path if p not in sys.path]
    # Nothing of the parent's environment but what a job may see (before anything touches CUDA, so
    # that CUDA_VISIBLE_DEVICES takes effect).
    env = sandbox.clean_environment(os.environ)
    if c is not None:
        env |= {"HOME": c.home or c.job_dir, "USER": c.account or "", "LOGNAME": c.account or ""}
    os.environ.clear()
    os.environ.update(env | spec.env)
    gpu_share.apply(os.environ, in_process=not spec.program)  # a sharing job's limits, before CUDA starts
    if spec.program:
        sys.exit(run_program(spec, confined=c is not None))
    torch.set_num_threads(spec.threads)
    worker_env = WorkerEnv.from_environ()  # before the job's code can change the environment
    try:
        _run_entry(spec)
    except SystemExit as e:
        if e.code not in (None, 0):
            _failed(worker_env, e)
            raise
    except BaseException as e:
        _failed(worker_env, e)
        raise
    if worker_env.store_addr is not None and not session_opened():
        failure = Failure.no_session(spec.entry, worker_env.generation)
        print(f"coddl: {failure.summary}", flush=True)
        report(worker_env, failure)
        sys.exit(1)


def run_program(spec: WorkerSpec, confined: bool) -> int:
    """Run a command job's program as this process's child and return its exit code (128 + N if a
    signal N ended it, as a shell says). SIGTERM is passed on to the program's process group: the
    preemption notice, after which the executor waits the job's grace period before SIGKILL. Confined,
    this process is PID 1 of the job's namespace (which receives only signals it handles, hence the
    handler; its end ends every process of the job); unconfined, the program gets a parent-death signal
    instead, so that killing the worker kills it too."""
    argv = [spec.entry, *spec.args]

    def die_with_parent() -> None:
        sandbox.set_parent_death_signal()

    try:
        child = subprocess.Popen(argv, cwd=spec.cwd, start_new_session=True,
                                 preexec_fn=None if confined else die_with_parent)
    except OSError as e:
        print(f"coddl: cannot run {argv[0]!r}: {e.strerror or e}", flush=True)
        return 127

    def forward(signum: int, _frame: object) -> None:
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    while True:  # reap everything (as a namespace's init must) until the program itself ends
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1
        if pid == child.pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def _run_entry(spec: WorkerSpec) -> None:
    sys.argv = [spec.entry, *spec.args]
    if spec.entry.endswith(".py") or os.path.isfile(spec.entry):
        runpy.run_path(spec.entry, run_name="__main__")
        return
    module, sep, function = spec.entry.partition(":")
    if not sep or not function:
        raise ValueError(f"entry must be 'package.module:function' or a script path, got {spec.entry!r}")
    getattr(importlib.import_module(module), function)()


def _failed(env: WorkerEnv, exc: BaseException) -> None:
    """Tell the coordinator why this worker's script failed (``coddl.elastic.failure``)."""
    failure = Failure.of(exc, current_generation() or env.generation)
    if failure.fatal:
        print(f"coddl: {failure.summary}", file=sys.stderr, flush=True)
    report(env, failure)


def main() -> None:
    """Cold-start entry (``python -m coddl.elastic SPEC_JSON``). Ends like a forked worker does, with
    ``os._exit`` after flushing output: a full interpreter teardown with torch loaded takes seconds,
    which a stopping job would wait for."""
    code = 0
    try:
        run_worker(WorkerSpec.from_json(sys.argv[1]))
    except SystemExit as e:
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
