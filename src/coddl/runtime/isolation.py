"""How a server isolates its jobs, chosen once at start-up, and the launcher that applies it to every
worker on every node.

- The server runs as root: each job runs as its owner's Unix account (``coddl.runtime.identity``)
  inside a sandbox (``coddl.elastic.sandbox``) where the state directory shows only the job's own
  directory. Unix permissions keep users apart; the sandbox keeps everyone away from the server.
- The server runs as another user: there is no account to switch to, so every job runs as the
  server's uid in a sandbox with its own user namespace, where the state directory shows only the
  job's own directory and the rest of the filesystem is read-only. Jobs then share one uid; they are
  kept apart by what they can see, not by permissions (see the README).
- ``--unsafe-no-isolation``: jobs run with the server's privileges, as in a single-user setup. Only
  then may a host without user namespaces run jobs at all.

Only the root mode can give a command job's gang on one node, and an elastic job on the local
executor, a network namespace of its own (``coddl.runtime.netns``; ``network_note`` says what each
command job gets, ``describe`` what the server does).

Either confined mode is checked at start-up by running one confined worker (``probe``) that looks
around from the inside; if the kernel refuses any step, the server refuses to start rather than run
jobs unconfined.
"""

from __future__ import annotations

import getpass
import multiprocessing.util
import os
import shutil
import site
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from coddl.elastic.pool import WorkerHandle, WorkerPool
from coddl.elastic.sandbox import EXIT_CONFINEMENT, Confinement, network_cookie
from coddl.elastic.worker import WorkerSpec
from coddl.errors import ConfigError
from coddl.runtime.identity import PREFIX, AccountMap
from coddl.runtime.netns import Networks

Mode = Literal["accounts", "sandbox", "none"]
PROBE_UID = 65534  # nobody: the probe of the root mode drops to it without creating an account


@dataclass(frozen=True)
class Isolation:
    """The server-wide choice; ``hide`` is what no job may see (the state directory)."""

    mode: Mode
    hide: tuple[str, ...] = ()
    accounts: AccountMap | None = None

    @classmethod
    def for_server(cls, state_dir: Path, enabled: bool = True, account_prefix: str = PREFIX) -> Isolation:
        if not enabled:
            return cls("none")
        hide = (str(Path(state_dir).resolve()),)
        if os.geteuid() == 0:
            return cls("accounts", hide, AccountMap.load(state_dir, account_prefix))
        return cls("sandbox", hide)

    @property
    def gang_networks(self) -> bool:
        """Whether a command job's gang on one node gets a network namespace of its own (root only:
        making one needs CAP_SYS_ADMIN in the host's namespaces)."""
        return self.mode == "accounts"

    def network_note(self, nodes: int) -> str:
        """What protects the rendezvous and collectives of a command job whose gang spans ``nodes``
        nodes (the job's ``network`` event)."""
        if nodes > 1:
            return (f"the gang spans {nodes} nodes, so it runs in the hosts' network: its MASTER_PORT and its "
                    "collectives' ports are reachable by any process that can reach those hosts")
        if self.gang_networks:
            return "its own network namespace (only lo): no process outside the gang reaches MASTER_PORT " \
                   "or its collectives"
        why = ("the server does not run as root, which a network namespace per job needs" if self.mode == "sandbox"
               else "--unsafe-no-isolation")
        return f"the host's network ({why}): its MASTER_PORT and its collectives' ports are reachable by " \
               "every process on the host"

    def describe(self) -> str:
        return {"accounts": "each job as its owner's account, sandboxed; a command job's gang on one node, "
                            "and a job of this host's, in a network namespace of its own",
                "sandbox": f"jobs sandboxed as {getpass.getuser()} (user namespaces); NOT isolated: command jobs' "
                           "rendezvous and collectives, in the host's network (a namespace per job needs root)",
                "none": "NONE: jobs run with the server's privileges (--unsafe-no-isolation)"}[self.mode]

    def unseen(self, path: str) -> str | None:
        """Why a job could not see ``path`` (a script it is to run), or None: a confined job's /tmp and
        /dev/shm are its own, and the state directory does not exist for it."""
        if self.mode == "none":
            return None
        p = Path(path).resolve()
        for private in ("/tmp", "/dev/shm"):
            if p.is_relative_to(Path(private).resolve()):
                return f"is under {private}, which a job does not see (its {private} is its own): " \
                       "put it where its owner can read it"
        if any(p.is_relative_to(h) for h in self.hide):
            return "is inside the server's state directory, which no job sees"
        return None

    def confinement(self, owner: str, job_dir: Path) -> Confinement | None:
        """What a job's workers get (accounts are resolved later, on the node that starts them)."""
        if self.mode == "none":
            return None
        return Confinement(job_dir=str(Path(job_dir).resolve()), hide=self.hide, owner=owner)


def installation() -> tuple[str, ...]:
    """Where this interpreter, its libraries and coddl live: what a worker running as another account
    must be able to read (a job imports modules the pool did not preload). That includes what
    ``PYTHONPATH`` adds (a server run by a system interpreter over a virtual environment's packages)."""
    import coddl

    paths = {sys.base_prefix, sys.prefix, sys.exec_prefix, *site.getsitepackages(),
             str(Path(coddl.__file__).resolve().parent.parent),
             *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(p))}
    return tuple(sorted(p for p in paths if os.path.isdir(p)))


class ConfinedLauncher:
    """A ``WorkerPool`` whose workers are confined as the server's ``Isolation`` says: on this node it
    maps the job's owner to an account, adds the node's private directories to what the job must not
    see, and starts the worker (which confines itself before the job's code runs). The local executor
    and every Ray node agent launch through one of these, so every node applies the same rules."""

    def __init__(self, pool: WorkerPool, isolation: Isolation, hide: tuple[str, ...] = ()) -> None:
        self.pool = pool
        self.isolation = isolation
        # the fork server's socket lives in multiprocessing's temp dir: a job that reached it could have
        # the server fork anything, unconfined
        self._hide = (multiprocessing.util.get_temp_dir(), *hide)
        self._expose = installation()
        self.networks = Networks()

    def launch(self, spec: WorkerSpec) -> WorkerHandle:
        return self.pool.launch(self.resolve(spec))

    def resolve(self, spec: WorkerSpec) -> WorkerSpec:
        c = spec.confinement
        if c is None:
            if self.isolation.mode != "none":
                raise PermissionError("refusing to start a worker without confinement on an isolating server")
            return spec
        c = replace(c, hide=tuple(dict.fromkeys((*c.hide, *self._hide))), expose=self._expose)
        if self.isolation.mode == "accounts":
            account = self.isolation.accounts.ensure(c.owner)
            c = replace(c, uid=account.uid, gid=account.gid, home=account.home, account=account.name)
        else:
            c = replace(c, account=getpass.getuser())
        if c.network is not None and self.isolation.gang_networks:
            ns = self.networks.join(c.network)
            c = replace(c, netns=ns.path, netns_ino=ns.ino, netns_cookie=ns.cookie)
        return replace(spec, confinement=c)

    def release_network(self, key: str) -> None:
        """Gang ``key`` has stopped on this node (see ``coddl.runtime.netns``)."""
        self.networks.release(key)

    def listen_in_network(self, key: str, host: str) -> socket.socket | None:
        """For an elastic job whose workers run on this node: a socket listening on ``host`` inside the
        network namespace its workers will get under ``key`` (its store serves them there), or None
        where the server makes no namespaces."""
        return self.networks.listen(key, host) if self.isolation.gang_networks else None

    def probe(self, work_dir: Path, timeout_s: float = 120.0) -> float:
        """Start one confined worker that checks the confinement from the inside; returns the seconds
        taken (the pool's first fork included), or raises ConfigError saying what the host refused."""
        if self.isolation.mode == "none":
            return self.pool.warm()
        if self.isolation.gang_networks and not network_cookie():
            # a late rank tells its gang's namespace from one that took its descriptor and inode numbers
            # only by the cookie (coddl.runtime.netns): without it, gangs' networks would not be their own
            raise ConfigError("cannot give gangs networks of their own on this host: its kernel gives a network "
                              "namespace no cookie (SO_NETNS_COOKIE, Linux 5.14 and later); upgrade the kernel, "
                              "or start with --unsafe-no-isolation to run jobs with the server's privileges")
        t0 = time.perf_counter()
        Path(work_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        job_dir = Path(tempfile.mkdtemp(prefix=".probe-", dir=work_dir))  # several Ray agents share a host
        as_root = self.isolation.mode == "accounts"
        c = Confinement(job_dir=str(job_dir.resolve()), hide=tuple(dict.fromkeys((*self.isolation.hide, *self._hide))),
                        expose=self._expose, uid=PROBE_UID if as_root else None,
                        gid=PROBE_UID if as_root else None,
                        account="nobody" if as_root else getpass.getuser())
        env = {"CODDL_PROBE_JOB_DIR": c.job_dir, "CODDL_PROBE_HIDDEN": os.pathsep.join(self.isolation.hide)}
        if as_root:
            env["CODDL_PROBE_UID"] = str(PROBE_UID)
        spec = WorkerSpec(entry="coddl.elastic.sandbox:probe_entry", env=env, cwd=c.job_dir,
                          log_path=str(job_dir / "logs" / "probe.log"), confinement=c)
        try:
            p = self.pool.launch(spec)
            p.join(timeout_s)
            code = p.exitcode
            if code is None:
                p.kill()
            log = job_dir / "logs" / "probe.log"
            out = log.read_text(errors="replace").strip().splitlines() if log.is_file() else []
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        if code != 0:
            reason = out[-1] if out else f"exit code {code}"
            hint = ("allow unprivileged user namespaces (Debian: sysctl kernel.unprivileged_userns_clone=1; "
                    "Ubuntu: kernel.apparmor_restrict_unprivileged_userns=0), run the server as root, "
                    if not as_root else "")
            kind = "confine" if code == EXIT_CONFINEMENT else "verify the confinement of"
            raise ConfigError(f"cannot {kind} jobs on this host ({reason.removeprefix('coddl: ')}); {hint}"
                              f"or start with --unsafe-no-isolation to run jobs with the server's privileges")
        return time.perf_counter() - t0
