"""A job's output: the log of each of its workers, merged line by line and tagged with the worker.

Workers come and go as a job is resized (w0, w1, … are never reused), and rank 0 prints most of what
matters, so ``coddl logs`` shows every worker's lines with its id; following polls the files and
stops once the job has ended and nothing new has arrived.

The logs live in the job's directory, which the job itself can write: it could replace ``logs`` or a
log with a link to another user's job, a token file or a FIFO, and the server — which reads them with
its own privileges — would serve that instead. So every open here starts from the job directory's
descriptor and follows no link (``O_NOFOLLOW`` on each component, ``O_NONBLOCK`` so a FIFO cannot
block), and only plain files are read, at most ``MAX_READ`` bytes at a time.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import Callable, Iterator

_WORKER = re.compile(r"^w(\d+)\.log$")
MAX_READ = 1 << 20
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_logs_dir(job_dir: Path) -> int | None:
    try:
        top = os.open(job_dir, _FLAGS | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        return os.open("logs", _FLAGS | os.O_DIRECTORY, dir_fd=top)
    except OSError:
        return None
    finally:
        os.close(top)


def _open_log(logs: int, name: str) -> int | None:
    try:
        fd = os.open(name, _FLAGS, dir_fd=logs)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _worker_logs(logs: int) -> list[str]:
    names = [n for n in os.listdir(logs) if _WORKER.match(n)]
    return sorted(names, key=lambda n: int(_WORKER.match(n).group(1)))


def _read_new(logs: int, name: str, offset: int) -> tuple[list[str], int]:
    """Complete lines written to the log ``name`` after ``offset`` (at most MAX_READ bytes of them),
    and the offset after them."""
    fd = _open_log(logs, name)
    if fd is None:
        return [], offset
    try:
        data = os.pread(fd, MAX_READ, offset)
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    if end == 0 and len(data) == MAX_READ:  # one line longer than MAX_READ: pass it on in pieces
        end = len(data)
    return data[:end].decode(errors="replace").splitlines(), offset + end


def last_line(job_dir: Path) -> tuple[str, str] | None:
    """(log name, its last non-empty line) of the most recently written worker log, if any."""
    logs = _open_logs_dir(job_dir)
    if logs is None:
        return None
    found: list[tuple[float, str, int]] = []
    try:
        for name in _worker_logs(logs):
            fd = _open_log(logs, name)
            if fd is not None:
                found.append((os.fstat(fd).st_mtime, name, fd))
        for _, name, fd in sorted(found, reverse=True):
            size = os.fstat(fd).st_size
            tail = os.pread(fd, 64 << 10, max(0, size - (64 << 10)))
            lines = [ln.strip() for ln in tail.decode(errors="replace").splitlines() if ln.strip()]
            if lines:
                return name, lines[-1]
        return None
    finally:
        for _, _, fd in found:
            os.close(fd)
        os.close(logs)


def stream_logs(job_dir: Path, follow: bool, ended: Callable[[], bool], poll_s: float = 0.5) -> Iterator[str]:
    """Yield ``[wN] line\\n`` strings: everything written so far, then (``follow``) what follows."""
    offsets: dict[str, int] = {}
    while True:
        new = False
        done = ended()  # read before the files: output written before the end is never missed
        logs = _open_logs_dir(job_dir)
        if logs is not None:
            try:
                for name in _worker_logs(logs):
                    lines, offsets[name] = _read_new(logs, name, offsets.get(name, 0))
                    tag = name.removesuffix(".log")
                    for line in lines:
                        new = True
                        yield f"[{tag}] {line}\n"
            finally:
                os.close(logs)
        if not follow or (done and not new):
            return
        if not new:
            time.sleep(poll_s)


def tail_logs(job_dir: Path, max_bytes: int = 16_384) -> list[str]:
    """The last ``max_bytes`` of each worker's log, worker by worker, as ``[wN] line`` (a page shows
    where a job is, without reading a week of output)."""
    out: list[str] = []
    logs = _open_logs_dir(job_dir)
    if logs is None:
        return out
    try:
        for name in _worker_logs(logs):
            fd = _open_log(logs, name)
            if fd is None:
                continue
            try:
                start = max(0, os.fstat(fd).st_size - max_bytes)
                data = os.pread(fd, max_bytes, start)
            finally:
                os.close(fd)
            lines = data.decode(errors="replace").splitlines()
            if start > 0:
                lines = lines[1:]  # the first line was cut
            out.extend(f"[{name.removesuffix('.log')}] {line}" for line in lines)
    finally:
        os.close(logs)
    return out
