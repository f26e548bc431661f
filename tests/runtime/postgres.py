"""A throwaway PostgreSQL server for the store tests: ``initdb`` into a temporary directory, ``postgres``
on 127.0.0.1 and a free port (its socket in the same directory, trust authentication, no fsync), one
fresh database per test, and on ``stop`` the server killed and the directory removed.

PostgreSQL refuses to run as root; as root the server runs as the ``postgres`` system user (``runuser``)
in a directory handed over to it. The binaries are found on ``PATH``, in ``$CODDL_PG_BIN``, or where
Debian's ``postgresql`` package puts them (``/usr/lib/postgresql/VERSION/bin``, not on ``PATH``)."""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from runtime_live import free_port

from coddl.runtime.store import sqlite_url

BACKENDS = ("sqlite", "postgresql")  # what the store tests run against
PG_USER = "postgres"  # the system user the server runs as under root, and the database superuser


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries (or, as root, no ``postgres`` user to run them as)."""


def find_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``: ``$CODDL_PG_BIN`` if set (only there), else
    ``PATH``'s, else the newest Debian version's."""
    candidates = [os.environ["CODDL_PG_BIN"]] if os.environ.get("CODDL_PG_BIN") else []
    if not candidates and shutil.which("initdb"):
        candidates.append(str(Path(shutil.which("initdb")).resolve().parent))
    if not candidates:
        candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                             if Path(p).parent.name.isdigit() else 0, reverse=True)
    for c in candidates:
        if (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    raise PostgresUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) in $CODDL_PG_BIN, on PATH or in "
                              "/usr/lib/postgresql/*/bin: `apt-get install -y postgresql` (.ci/run does)")


class PostgresServer:
    """One server; ``database()`` creates an empty database and returns its SQLAlchemy URL."""

    def __init__(self, bin_dir: Path | None = None) -> None:
        self.bin = bin_dir or find_bin_dir()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            try:
                self._owner = pwd.getpwnam(PG_USER)
            except KeyError:
                raise PostgresUnavailable(f"running as root, and there is no {PG_USER!r} user to run "
                                          "PostgreSQL as (it refuses root)") from None
        # not pytest's tmp_path: its parent is private to root, and the server may run as another user
        self.root = Path(tempfile.mkdtemp(prefix="coddl-pg-"))
        self.data, self.log = self.root / "data", self.root / "server.log"
        self.port = 0
        self._names = itertools.count(1)
        try:
            if self.as_root:
                os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
            self._pg("initdb", "-D", str(self.data), "-U", PG_USER, "--auth=trust", "--encoding=UTF8",
                     "--locale=C", "--no-sync")
            self._start()
        except BaseException:
            self.stop()
            raise

    def _pg(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", PG_USER, "--", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            log = self.log.read_text()[-3000:] if self.log.is_file() else ""
            raise RuntimeError(f"{tool} failed ({r.returncode}):\n{r.stdout}{r.stderr}\n{log}")
        return r

    def _start(self, attempts: int = 3) -> None:
        """Start on a free port; another process may take the port between the probe and the bind, so
        a failed start is retried on a new one."""
        for attempt in range(attempts):
            self.port = free_port()
            opts = (f"-p {self.port} -h 127.0.0.1 -k {self.root} -c fsync=off -c synchronous_commit=off "
                    "-c full_page_writes=off -c max_connections=200")
            try:
                self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "60", "start")
                return
            except RuntimeError:
                self._kill()
                if attempt == attempts - 1:
                    raise

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new, empty database. FILE_COPY (PostgreSQL 15's default is WAL_LOG, which writes the whole
        template through the WAL): with fsync off it is a directory copy, the fastest way."""
        import psycopg

        name = f"t{next(self._names)}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=PG_USER, dbname="postgres",
                             autocommit=True) as conn:
            strategy = " STRATEGY FILE_COPY" if conn.info.server_version >= 150000 else ""
            conn.execute(f'CREATE DATABASE "{name}"{strategy}')
        return self.url(name)

    def _kill(self) -> None:
        """Stop the server at once (``immediate``: nothing here needs to survive), or SIGKILL the
        postmaster if ``pg_ctl`` cannot; its backends exit when the postmaster is gone."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.is_file():
            return
        try:
            self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop", timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
                time.sleep(0.5)
            except (ProcessLookupError, ValueError, FileNotFoundError):
                pass

    def stop(self) -> None:
        try:
            self._kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def backend_url(request: pytest.FixtureRequest, backend: str, state_dir: Path) -> str:
    """A URL of an empty store: SQLite in ``state_dir``, or a new database on the session's server (the
    ``postgres`` fixture, started by the first test that needs it)."""
    if backend == "sqlite":
        state_dir.mkdir(parents=True, exist_ok=True)
        return sqlite_url(state_dir)
    return request.getfixturevalue("postgres").database()
