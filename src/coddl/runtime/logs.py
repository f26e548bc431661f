"""A job's output: the log of each of its workers, merged line by line and tagged with the worker.

Workers come and go as a job is resized (w0, w1, … are never reused), and rank 0 prints most of what
matters, so ``coddl logs`` shows every worker's lines with its id; following polls the files and
stops once the job has ended and nothing new has arrived.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, Iterator

_WORKER = re.compile(r"^w(\d+)\.log$")


def _worker_logs(job_dir: Path) -> list[Path]:
    logs = [p for p in (job_dir / "logs").glob("w*.log") if _WORKER.match(p.name)]
    return sorted(logs, key=lambda p: int(_WORKER.match(p.name).group(1)))


def _read_new(path: Path, offset: int) -> tuple[list[str], int]:
    """Complete lines written to ``path`` after ``offset``, and the offset after them."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    lines = data[:end].decode(errors="replace").splitlines()
    return lines, offset + end


def stream_logs(job_dir: Path, follow: bool, ended: Callable[[], bool], poll_s: float = 0.5) -> Iterator[str]:
    """Yield ``[wN] line\\n`` strings: everything written so far, then (``follow``) what follows."""
    offsets: dict[Path, int] = {}
    while True:
        new = False
        done = ended()  # read before the files: output written before the end is never missed
        for path in _worker_logs(job_dir):
            lines, offsets[path] = _read_new(path, offsets.get(path, 0))
            tag = path.stem
            for line in lines:
                new = True
                yield f"[{tag}] {line}\n"
        if not follow or (done and not new):
            return
        time.sleep(poll_s)


def tail_logs(job_dir: Path, max_bytes: int = 16_384) -> list[str]:
    """The last ``max_bytes`` of each worker's log, worker by worker, as ``[wN] line`` (a page shows
    where a job is, without reading a week of output)."""
    out: list[str] = []
    for path in _worker_logs(job_dir):
        with open(path, "rb") as f:
            start = max(0, f.seek(0, 2) - max_bytes)
            f.seek(start)
            data = f.read()
        lines = data.decode(errors="replace").splitlines()
        if start > 0:
            lines = lines[1:]  # the first line was cut
        out.extend(f"[{path.stem}] {line}" for line in lines)
    return out
