"""Helpers for the runtime tests: real servers, ``coddl server start`` as a subprocess on 127.0.0.1 on a port
the kernel picks (``--port 0``: no race with other tests for a probed "free" one) and a state directory in
tmp, real HTTP, real SQLite, real worker processes. Each server runs in its own process group so that
teardown kills exactly what the test started.

A server that runs as root creates a Unix account for each job owner; every server started here gets
an account prefix of its own (``ACCOUNTS`` for this test process, then a counter), and its cleanup
removes the accounts of that prefix, so tests running side by side never share or delete each
other's accounts, and the machine ends with the accounts it began with."""

from __future__ import annotations

import atexit
import glob
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import httpx

from coddl.runtime.identity import remove_accounts
from coddl.runtime.netns import cookie_of

REPO = Path(__file__).resolve().parents[2]
ACCOUNTS = f"ct{os.urandom(3).hex()}"  # the account prefixes of this test process's servers start so
_servers = iter(range(1 << 30))


JOB_PRIVATE = tuple(Path(p).resolve() for p in ("/tmp", "/dev/shm", tempfile.gettempdir()))  # a job's own


def readable(path: Path) -> Path:
    """``path``, or a copy every account can read when it is not (a checkout under a private /root)
    or a job would not see it (a checkout under /tmp: a job's /tmp is its own); a job runs as its
    owner's account, so the copy goes to /var/tmp."""
    if any(h == path.resolve() or h in path.resolve().parents for h in JOB_PRIVATE):
        parents_open = False
    else:
        parents_open = all(p.stat().st_mode & stat.S_IXOTH for p in path.parents)
    if parents_open and all(p.stat().st_mode & stat.S_IROTH for p in path.rglob("*") if p.is_file()) \
            if path.is_dir() else parents_open and path.stat().st_mode & stat.S_IROTH:
        return path
    base = Path(tempfile.mkdtemp(prefix="coddl-test-scripts-", dir="/var/tmp"))
    atexit.register(shutil.rmtree, base, True)
    os.chmod(base, 0o755)
    copy = base / path.name
    (shutil.copytree if path.is_dir() else shutil.copy)(path, copy)
    for p in [copy, *copy.rglob("*")] if copy.is_dir() else [copy]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    return copy


EXAMPLES = readable(REPO / "examples")
TINY_JOB = readable(Path(__file__).resolve().parent / "tiny_job.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def netns_identity(ino: int) -> tuple[int, int]:
    """Network namespace ``ino``, alive now, as (inode, cookie): once it is gone the kernel hands its
    inode number to the next namespace made (the lowest free), so only the cookie says it is the same."""
    for link in _links_to(ino):
        try:
            return ino, cookie_of(link)
        except OSError:
            continue
    raise AssertionError(f"network namespace {ino}: no process is in it or holds it")


def netns_holders(ns: tuple[int, int]) -> list[str]:
    """The processes in network namespace ``ns`` (see ``netns_identity``) or holding a descriptor of
    it, each as "PID COMMAND"."""
    ino, cookie = ns
    found = []
    for link in _links_to(ino):
        try:
            if cookie_of(link) == cookie:
                pid = link.split("/")[2]
                command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append(f"{pid} {command[:200]}")
        except OSError:
            continue  # gone meanwhile
    return found


def netns_alive(ns: tuple[int, int]) -> bool:
    return bool(netns_holders(ns))


def wait_netns_gone(ns: tuple[int, int], timeout: float, what: str) -> None:
    try:
        wait_for(lambda: not netns_alive(ns), timeout, what)
    except AssertionError as e:
        raise AssertionError(f"{e}; still there: {netns_holders(ns)}") from None


def _links_to(ino: int) -> list[str]:
    want = f"net:[{ino}]"
    found = []
    for link in glob.glob("/proc/[0-9]*/ns/net") + glob.glob("/proc/[0-9]*/fd/*"):
        try:
            if os.readlink(link) == want:
                found.append(link)
        except OSError:
            continue
    return found


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def coddl(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
          prefix: tuple[str, ...] = (sys.executable,)) -> subprocess.CompletedProcess:
    """Run the ``coddl`` CLI as a user would (a fresh interpreter; ``prefix`` may run it as another user)."""
    return subprocess.run([*prefix, "-m", "coddl.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {}), "COLUMNS": "200"}, timeout=timeout)


def tiny_job(name: str, steps: int, min_gpus: int = 1, max_gpus: int = 4, step_s: float = 0.05) -> dict[str, Any]:
    return {"name": name, "command": ["python", str(TINY_JOB)], "steps": steps, "batch_size": 32,
            "min_gpus": min_gpus, "max_gpus": max_gpus, "model": "tiny", "env": {"STEP_S": str(step_s)}}


class Server:
    """One ``coddl server start`` process; ``stop`` or ``kill`` it, ``cleanup`` kills its process group.

    ``python`` is the interpreter command (``setpriv ... python`` runs the server as another user:
    ``setpriv`` execs, so the server keeps the pid the test started); ``wait=False`` returns once it
    is started, for tests that start servers side by side (then call ``ready``)."""

    def __init__(self, state_dir: Path, gpus: int | None = 4, policy: str = "max-min", extra: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, python: tuple[str, ...] = (sys.executable,),
                 wait: bool = True) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        self.python = python
        self.account_prefix = f"{ACCOUNTS}{next(_servers):x}-"
        cmd = [*python, "-m", "coddl.cli", "server", "start", *(("--gpus", str(gpus)) if gpus else ()),
               "--port", "0", "--state-dir", str(state_dir), "--policy", policy, "--period-s", "2",
               "--checkpoint-s", "2", "--account-prefix", self.account_prefix, *extra]
        self.log_path = state_dir.parent / f"server-{self.account_prefix.rstrip('-')}.log"
        # multiprocessing's socket dirs: a killed server cannot remove them, so they live beside the state
        # directory; TMPDIR is a short link to it, since a socket path must fit in 108 bytes and pytest's
        # tmp paths (longer still under pytest-xdist) leave too little room for pymp-*/listener-*
        (state_dir.parent / "tmp").mkdir(exist_ok=True)
        self.tmp = Path(tempfile.gettempdir()) / f"cdt-{uuid.uuid4().hex[:12]}"
        self.tmp.symlink_to(state_dir.parent / "tmp", target_is_directory=True)
        atexit.register(self.tmp.unlink, missing_ok=True)  # for a server no test cleaned up
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env={**os.environ, "TMPDIR": str(self.tmp), **(env or {})},
                                         start_new_session=True)
        self.pgid = self.proc.pid
        self.url = ""  # known once the server has written server.json
        self.admin: httpx.Client | None = None
        if wait:
            self.ready()

    def ready(self) -> Server:
        wait_for(self._ready, 180, f"the server (log: {self.log_path})", interval=0.5)
        self.admin_token = json.loads((self.state_dir / "client.json").read_text())["token"]
        self.admin = self.client(self.admin_token)
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
        info = self.state_dir / "server.json"
        if not info.is_file() or (written := json.loads(info.read_text())).get("pid") != self.proc.pid:
            return False
        self.url = written["url"]
        try:
            return httpx.get(f"{self.url}/cluster", timeout=2).status_code == 401
        except httpx.TransportError:
            return False

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def token(self, user: str, admin: bool = False) -> str:
        r = coddl("token", "create", user, *(["--admin"] if admin else []), "--state-dir", str(self.state_dir),
                  prefix=self.python)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def submit(self, job: dict[str, Any], client: httpx.Client | None = None) -> int:
        r = (client or self.admin).post("/jobs", json=job)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def job(self, job_id: int) -> dict[str, Any]:
        r = self.admin.get(f"/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_job(self, job_id: int, predicate: Callable[[dict], bool], timeout: float, what: str) -> dict:
        def check() -> dict | None:
            j = self.job(job_id)
            if j["terminal"] and not predicate(j):
                raise AssertionError(f"job {job_id} ended {j['status']} ({j['message']}) before {what}")
            return j if predicate(j) else None

        return wait_for(check, timeout, f"job {job_id}: {what}", interval=0.5)

    def kill(self) -> None:
        """SIGKILL the server process only (its workers are left to the next server)."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def account(self, user: str) -> str:
        """The Unix account this server (as root) runs ``user``'s jobs as."""
        from coddl.runtime.identity import dedicated_account

        return dedicated_account(user, self.account_prefix)

    def cleanup(self) -> None:
        if self.admin is not None:
            self.admin.close()
        self.stop()
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.tmp.unlink(missing_ok=True)
        if os.geteuid() == 0:  # its job accounts, once the last worker running as one has gone
            wait_for(lambda: not remove_accounts(self.account_prefix)[1], 30, f"{self.account_prefix}* removed")

