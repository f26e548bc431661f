"""The body of every worker process, however it was started (forked from the warm pool, a cold
``python -m coddl.elastic SPEC_JSON``, or a Ray actor on another node): apply the spec's
environment, send output to the worker's log and run the user's entry point."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import traceback
from dataclasses import asdict, dataclass, field

import torch


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process needs, as plain data (it pickles to a forkserver child and goes as JSON
    on a cold start's command line).

    ``entry`` is ``package.module:function`` (called with no arguments) or the path of a script (run
    as ``__main__``); either way ``sys.argv`` is ``[entry, *args]``. ``env`` carries the CODDL_* vars.
    """

    entry: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    cwd: str = "."
    sys_path: tuple[str, ...] = ()
    threads: int = 1

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> WorkerSpec:
        d = json.loads(raw)
        return cls(**{**d, "args": tuple(d["args"]), "sys_path": tuple(d["sys_path"])})


def run_worker(spec: WorkerSpec) -> None:
    """Run ``spec``'s entry point in this process. Exceptions propagate (the process exits non-zero);
    a rank that leaves the job raises ``Departed``, a ``SystemExit(0)``."""
    os.chdir(spec.cwd)
    sys.path[:0] = [p for p in spec.sys_path if p not in sys.path]
    # A forkserver child inherits the server's environment, not the launcher's: apply ours explicitly
    # (before anything touches CUDA, so that CUDA_VISIBLE_DEVICES takes effect).
    os.environ.update(spec.env)
    if spec.log_path is not None:
        fd = os.open(spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        sys.stdout.reconfigure(line_buffering=True)
    torch.set_num_threads(spec.threads)
    sys.argv = [spec.entry, *spec.args]
    if spec.entry.endswith(".py") or os.path.isfile(spec.entry):
        runpy.run_path(spec.entry, run_name="__main__")
        return
    module, sep, function = spec.entry.partition(":")
    if not sep or not function:
        raise ValueError(f"entry must be 'package.module:function' or a script path, got {spec.entry!r}")
    getattr(importlib.import_module(module), function)()


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
