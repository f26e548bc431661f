"""One server per state, in process: the state directory's lock and the database's lease, on SQLite
and PostgreSQL (the real servers are in ``test_one_server`` and ``test_hostile``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import psutil
import pytest

from coddl.errors import ConfigError
from coddl.runtime.lease import Holder, Lease, LeaseLost, StateLock, is_locked, leases, lock_holder
from coddl.runtime.store import Store


def test_a_state_directory_has_one_holder_and_a_crash_releases_it(tmp_path):
    lock = StateLock(tmp_path)
    assert is_locked(tmp_path) and lock_holder(tmp_path) is not None
    with pytest.raises(ConfigError, match="another coddl server .*is running on"):
        StateLock(tmp_path)
    lock.release()
    assert not is_locked(tmp_path)
    # a holder killed with SIGKILL leaves no lock behind
    proc = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom coddl.runtime.lease import StateLock\n"
                             f"StateLock({str(tmp_path)!r}); print('locked', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked" and lock_holder(tmp_path) == proc.pid
    proc.kill()
    proc.wait()
    StateLock(tmp_path).release()


@pytest.fixture
def make_lease() -> Iterator[Callable[..., Lease]]:
    """Leases for a test, each released at its end (so no renewal thread outlives its database)."""
    made: list[Lease] = []

    def make(store: Store, state: Path, lease_s: float = 30.0, lost: list | None = None) -> Lease:
        made.append(Lease(store, state, lease_s, on_lost=(lost.append if lost is not None else lambda r: None)))
        return made[-1]

    yield make
    for lease in made:
        lease.release()
        assert not lease._thread.is_alive()


def _pretend_elsewhere(store: Store) -> None:
    """Make the holder look like a live server on another host (this process is alive anyway)."""
    with store.transaction() as s:
        row = s.execute(leases.select()).one()
        h = Holder.loads(row.holder)
        s.execute(leases.update().values(holder=Holder("elsewhere", h.pid, h.started, h.state_dir).dumps()))


def test_a_second_server_is_refused_until_the_lease_expires_then_takes_over_and_fences_the_first(store_url, tmp_path, make_lease):
    first_store, second_store = Store(store_url), Store(store_url)
    lost: list[str] = []
    first = make_lease(first_store, tmp_path / "a", lease_s=1.0, lost=lost)
    assert first.acquire("http://a") == 1
    first._stop.set()  # it stops renewing: a paused server
    _pretend_elsewhere(first_store)
    second = make_lease(second_store, tmp_path / "b", lease_s=30.0)
    with pytest.raises(ConfigError, match=r"is driven by another coddl server \(pid \d+ on elsewhere"):
        second.acquire()
    time.sleep(1.2)
    assert second.acquire() == 2
    fenced = first_store.fenced(first.fence)
    with pytest.raises(LeaseLost):
        fenced.record_event(1, "x", 0.0)  # the old server's controller can write nothing
    assert lost and "epoch 2" in lost[0] and first.lost
    with pytest.raises(LeaseLost):
        first.guard()
    second_store.fenced(second.fence).epoch()  # the holder's writes go through
    first.release()
    second.release()
    for s in (first_store, second_store):
        s.close()


def test_a_holder_that_is_gone_from_this_host_is_taken_over_at_once(store_url, tmp_path, make_lease):
    store = Store(store_url)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lease = make_lease(store, tmp_path)  # creates the table
    dead = Holder(socket.gethostname(), proc.pid, psutil.Process(proc.pid).create_time(), "/elsewhere")
    with store.transaction() as s:
        s.execute(leases.insert().values(name="server", epoch=7, holder=dead.dumps(), expires_at=time.time() + 3600))
    proc.kill()
    proc.wait()
    assert lease.acquire() == 8
    lease.release()
    store.close()


def test_guard_renews_a_stale_lease_that_no_one_took(store_url, tmp_path, make_lease):
    store = Store(store_url)
    lease = make_lease(store, tmp_path, lease_s=0.5)
    lease.acquire()
    lease._stop.set()
    time.sleep(0.6)  # expired, but still ours: nobody else started
    lease.guard()  # renews instead of refusing
    assert lease.lost is None and time.monotonic() < lease._valid_until
    lease.release()
    following = make_lease(store, tmp_path / "next")
    assert following.acquire() == 2  # released: the next server need not wait
    following.release()
    store.close()
