"""One server per database, even across state directories and hosts: the lease (``coddl.runtime.lease``).

Two real servers on one PostgreSQL database, each with its own state directory (as two hosts would
have): while the first one lives, the second is refused. Then the first is paused — SIGSTOP to its
whole process group, workers included, as a suspended VM would be — for longer than its lease; the
second takes over (restarting the job from scratch: its state directory has no checkpoint) and, when
the first comes back, the first notices that it lost the lease and stops without acting: it never
writes to the database again (the job is not marked failed by it, though it lost its workers), and
no process of its own is left. The same-directory case is in ``test_hostile``.
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
from runtime_live import coddl, tiny_job, wait_for

pytestmark = pytest.mark.slow

LEASE_S = 5.0


def session_processes(sid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error, PermissionError):
            continue
    return out


def test_a_paused_server_loses_its_lease_and_stops_acting(server_factory, postgres, tmp_path):
    url = postgres.database()
    lease = ("--database", url, "--lease-s", str(LEASE_S))
    first = server_factory(tmp_path / "a" / "state", gpus=2, extra=lease)
    refused = coddl("server", "start", "--port", "0", "--state-dir", str(tmp_path / "b" / "state"), *lease)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "is driven by another coddl server" in refused.stderr and f"pid {first.proc.pid}" in refused.stderr

    job = first.submit(tiny_job("long", steps=200, max_gpus=2, step_s=0.05))
    first.wait_job(job, lambda j: j["steps_done"] >= 10 and j["workers"], 120, "training")

    os.killpg(first.pgid, signal.SIGSTOP)  # a paused VM: the server and its workers
    try:
        time.sleep(LEASE_S + 1)
        second = server_factory(tmp_path / "b" / "state", gpus=2, extra=lease)
        recovered = second.job(job)
        assert "recovered" in [e["kind"] for e in recovered["events"]]
    finally:
        os.killpg(first.pgid, signal.SIGCONT)

    assert first.proc.wait(timeout=60) == 1  # it noticed, and left
    log = first.log_path.read_text()
    assert "lost the server lease" in log, log[-2000:]
    wait_for(lambda: not session_processes(first.pgid), 30, "no process of the first server left")

    done = second.wait_job(job, lambda j: j["status"] == "finished", 240, "finished under the second server")
    assert done["steps_done"] == 200
    kinds = [e["kind"] for e in done["events"]]
    assert "failed" not in kinds and kinds[-1] == "finished", kinds
