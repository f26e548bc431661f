"""One server per state: a lock on the state directory and a lease in the database.

Two servers on one state would both drive the same jobs — two copies of a job training at once,
writing one checkpoint. Two mechanisms keep it to one:

- ``StateLock``: an exclusive ``flock`` on ``STATE/server.lock``, held for the server's life. A second
  server on the same directory is refused at once. The kernel drops the lock when the holder exits,
  however it exits (SIGKILL included), so a crashed server never blocks its successor.
- ``Lease``: one row in the database naming the server that drives it, with an expiry the holder
  renews every third of ``lease_s`` and an epoch that grows by one at every takeover. It covers what
  the file lock cannot see — another host, or another state directory, on the same database — and a
  server that stops renewing (a paused VM, a process stopped for longer than the lease) loses it: a
  new server may then take over, with the next epoch.

Fencing: a server that lost its lease must not act, even for the moment before it notices. Every
write of its controller runs ``fence`` first, inside the same transaction, which refuses when the
database's epoch is no longer the server's — and writers queue (SQLite's ``BEGIN IMMEDIATE``,
PostgreSQL's advisory lock), so no write can slip in after a takeover. Plans are written before they
are carried out, so no plan of a displaced server is ever carried out. Actions the executor takes on
its own (restarting a job after a lost worker, healing it back to its allocation) call ``guard``
first, which passes only while the server's renewal is recent enough that no one else can have taken
over (measured on the monotonic clock, which runs while a process is stopped); otherwise it renews on
the spot, or refuses. On losing the lease the server kills its workers without a checkpoint (the new
server restarts the jobs from their last one) and exits.

The expiry is kept in the database's own clock, so servers on different hosts do not compare clocks.
A holder on this host that is no longer running (its pid is gone) is taken over at once, so a
restart after a crash does not wait out the lease.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text, make_url, select, text
from sqlalchemy.orm import Session

from coddl.errors import ConfigError
from coddl.runtime.paths import LOCK_FILE, SERVER_FILE
from coddl.runtime.store import Store

log = logging.getLogger("coddl.lease")

_meta = MetaData()
leases = Table(
    "server_lease", _meta,
    Column("name", String(32), primary_key=True),
    Column("epoch", Integer, nullable=False),
    Column("holder", Text, nullable=False),  # JSON: who holds it (host, pid, started, state_dir, url)
    Column("expires_at", Float, nullable=False),  # seconds since 1970 on the DATABASE's clock
)
NAME = "server"
DEFAULT_LEASE_S = 15.0


class LeaseLost(RuntimeError):
    """This server no longer holds the lease: another one drives the jobs now."""


# ------------------------------------------------------------------ the state directory
class StateLock:
    """The exclusive lock on a state directory (see the module docstring)."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / LOCK_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise ConfigError(f"another coddl server {running_server(state_dir)}is running on {state_dir} "
                              f"(stop it with `coddl server stop --state-dir {state_dir}`)") from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def running_server(state_dir: Path) -> str:
    """'(pid N, URL) ' of the server a state directory's server.json names, or '' if unknown."""
    try:
        info = json.loads((Path(state_dir) / SERVER_FILE).read_text())
        return f"(pid {int(info['pid'])}, {info['url']}) "
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def is_locked(state_dir: Path) -> bool:
    """Whether a server holds the state directory's lock now."""
    return lock_holder(state_dir) is not None


def lock_holder(state_dir: Path) -> int | None:
    """The pid of the server holding the state directory's lock, or None if no server holds it."""
    try:
        fd = os.open(Path(state_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        try:
            return int(os.pread(fd, 32, 0).split()[0])
        except (ValueError, IndexError):
            return None
    finally:
        os.close(fd)


# ------------------------------------------------------------------ the database
@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    started: float
    state_dir: str
    url: str = ""

    def dumps(self) -> str:
        return json.dumps(self.__dict__)

    @classmethod
    def loads(cls, raw: str) -> Holder:
        try:
            return cls(**json.loads(raw))
        except (ValueError, TypeError):
            return cls("?", 0, 0.0, "?")

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}" + (f", {self.url}" if self.url else "")

    def gone(self) -> bool:
        """Whether this holder is a process on THIS host that no longer runs."""
        if self.host != socket.gethostname():
            return False
        try:
            return psutil.Process(self.pid).create_time() != self.started
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False


def _safe_url(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


def _db_now(s: Session, store: Store) -> float:
    if store.postgres:
        return float(s.execute(text("SELECT extract(epoch from clock_timestamp())")).scalar_one())
    return float(s.execute(text("SELECT (julianday('now') - 2440587.5) * 86400.0")).scalar_one())


class Lease:
    """This server's lease on a database: ``acquire`` once, then it renews itself until ``release``.
    ``on_lost`` is called once, from whichever thread notices, when the lease is gone."""

    def __init__(self, store: Store, state_dir: Path, lease_s: float = DEFAULT_LEASE_S,
                 on_lost: Callable[[str], None] = lambda reason: None) -> None:
        if lease_s <= 0:
            raise ConfigError(f"--lease-s must be > 0, got {lease_s}")
        self.store = store
        self.lease_s = lease_s
        self.on_lost = on_lost
        me = psutil.Process()
        self.me = Holder(socket.gethostname(), me.pid, me.create_time(), str(Path(state_dir).resolve()))
        self.epoch = 0
        self._valid_until = 0.0  # monotonic
        self._lock = threading.Lock()
        self._lost: str | None = None
        self._stop = threading.Event()
        self._released = False
        self._thread = threading.Thread(target=self._renew_loop, name="coddl-lease", daemon=True)
        with store.transaction() as s:
            _meta.create_all(s.connection())

    def acquire(self, url: str = "") -> int:
        """Take the lease (refused with ConfigError while another live server holds it); returns the
        new epoch. Starts renewing it."""
        self.me = Holder(**{**self.me.__dict__, "url": url})
        t0 = time.monotonic()
        with self.store.transaction() as s:
            now = _db_now(s, self.store)
            row = s.execute(select(leases).where(leases.c.name == NAME)).one_or_none()
            if row is not None:
                holder = Holder.loads(row.holder)
                if row.expires_at > now and not holder.gone():
                    raise ConfigError(f"the database {_safe_url(self.store.url)} is driven by another coddl server "
                                      f"({holder.describe()}, state {holder.state_dir}); its lease runs "
                                      f"{row.expires_at - now:.0f} s more")
                s.execute(leases.update().where(leases.c.name == NAME).values(
                    epoch=row.epoch + 1, holder=self.me.dumps(), expires_at=now + self.lease_s))
                self.epoch = row.epoch + 1
            else:
                s.execute(leases.insert().values(name=NAME, epoch=1, holder=self.me.dumps(),
                                                 expires_at=now + self.lease_s))
                self.epoch = 1
        self._valid_until = t0 + self.lease_s
        self._thread.start()
        return self.epoch

    def set_url(self, url: str) -> None:
        """Name where this server listens in the lease (so a refused second server can say)."""
        self.me = Holder(**{**self.me.__dict__, "url": url})
        self.renew()

    # ---- staying the holder
    def renew(self) -> None:
        """Extend the lease; raises LeaseLost (and reports it) if it is no longer ours."""
        if self._lost is not None:
            raise LeaseLost(self._lost)
        t0 = time.monotonic()
        try:
            with self.store.transaction() as s:
                row = s.execute(select(leases.c.epoch, leases.c.holder).where(leases.c.name == NAME)).one_or_none()
                if row is None or row.epoch != self.epoch:
                    holder = Holder.loads(row.holder).describe() if row is not None else "nobody"
                    raise LeaseLost(f"the database's lease moved to epoch {row.epoch if row else '-'} "
                                    f"({holder}); this server had epoch {self.epoch}")
                s.execute(leases.update().where(leases.c.name == NAME).values(
                    holder=self.me.dumps(), expires_at=_db_now(s, self.store) + self.lease_s))
        except LeaseLost as e:
            self._lose(str(e))
            raise
        with self._lock:
            self._valid_until = max(self._valid_until, t0 + self.lease_s)

    def fence(self, s: Session) -> None:
        """Run inside every write transaction of the controller: refuse it unless our epoch is current."""
        if self._lost is not None:
            raise LeaseLost(self._lost)
        epoch = s.execute(select(leases.c.epoch).where(leases.c.name == NAME)).scalar_one_or_none()
        if epoch != self.epoch:
            reason = f"another server took the database over (epoch {epoch}, ours {self.epoch})"
            self._lose(reason)
            raise LeaseLost(reason)

    def guard(self) -> None:
        """Before acting on a worker: pass while no one else can have taken over, else renew first."""
        if self._lost is not None:
            raise LeaseLost(self._lost)
        if time.monotonic() >= self._valid_until - min(1.0, self.lease_s / 10):
            self.renew()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                self.renew()
            except LeaseLost:
                return
            except Exception as e:  # noqa: BLE001 - the database is unreachable: retry; guard refuses meanwhile
                log.warning("could not renew the server lease: %s", e)

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self._lost is not None:
                return
            self._lost = reason
        self._stop.set()
        log.error("lost the server lease: %s", reason)
        self.on_lost(reason)

    @property
    def lost(self) -> str | None:
        return self._lost

    def release(self) -> None:
        """Stop renewing, and give the lease up (a clean stop): the next server need not wait for it to
        expire. The renewal thread is joined first, so none outlives the store it writes to."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=max(5.0, self.lease_s))
        if self._lost is not None or not self.epoch or self._released:
            return
        self._released = True
        try:
            with self.store.transaction() as s:
                s.execute(leases.update().where(leases.c.name == NAME, leases.c.epoch == self.epoch)
                          .values(expires_at=0.0))
        except Exception as e:  # noqa: BLE001 - it expires anyway
            log.warning("could not release the server lease: %s", e)
