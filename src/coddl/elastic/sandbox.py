"""Confining a worker before the user's code runs: its own view of the filesystem, its own process
tree, and (when the server runs as root) the job owner's Unix account.

The worker pool forks workers from a server that has already imported torch, so a sandbox that
``exec``s a new program (bubblewrap, ``unshare(1)``, ``runuser``) would throw that start-up away and
cost 3-4 s per worker. Instead the forked child confines ITSELF, with the same kernel mechanisms
those tools use, before it touches the job (``enter``):

1. It opens its log (from trusted directory descriptors, never following a link the job may have
   planted) and, as root, hands the job directory to the job's account.
2. ``unshare`` — a new mount namespace (its own view of the filesystem), a new PID namespace (it sees
   and can signal only its own processes: not the server, not other jobs, and no other process's
   command line), a new IPC namespace and, when the server is not root, a new user namespace in which
   the server's uid maps to itself (that is what lets an unprivileged process do the mounts below).
   Before that, as root, a rank of a command job's gang joins the gang's own network namespace
   (``coddl.runtime.netns``), where only its peers reach its rendezvous and collectives.
3. Mounts, all private to the worker: an empty, read-only tmpfs over every directory in ``hide`` (the
   server's state directory — database, tokens, every job — and the worker pool's temp directory with
   its fork-server socket), fresh ``/tmp`` and ``/dev/shm``, and the job's own directory put back,
   writable, at its usual path. Without root, everything else becomes read-only too: the job runs with
   the server account's file permissions, and must not be able to leave anything behind that the
   server account would later run (a ``~/.bashrc``, coddl's own source).
4. It forks once more: the grandchild is PID 1 of the new namespace, mounts its own ``/proc`` and runs
   the user's code; the child stays outside as a "keeper", waits for it and exits the same way, so the
   executor keeps one pid per worker. If the keeper is killed, the kernel kills the grandchild and
   everything it started (parent-death signal; the end of a PID namespace's PID 1).
5. Privileges go before the user's code: ``no_new_privs`` (no setuid binary can give them back), and
   as root ``setgroups([])``, ``setgid``, ``setuid`` to the job's account; without root, every
   capability the user namespace granted is dropped, so the job cannot unmount what hides the server.

A confined worker starts within a few milliseconds of an unconfined one
(``benchmarks/isolation_cost.py``). Needs Linux ≥ 5.12 (``open_tree``, ``mount_setattr``) and, without
root, unprivileged user namespaces; ``probe`` says whether this host allows it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import socket
import stat
import struct
import sys
from dataclasses import dataclass
from typing import NoReturn

# clone(2) flags
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x08000000, 0x10000000, 0x20000000
CLONE_NEWNET = 0x40000000
SO_NETNS_COOKIE = 71  # getsockopt: the network namespace's cookie (Linux 5.14 and later)
# mount(2) flags
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
# the new mount API (the same numbers on every architecture since Linux 5.2 / 5.12)
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_OPENAT2, SYS_MOUNT_SETATTR = 428, 429, 437, 442  # the same on x86-64 and arm64
RESOLVE_NO_SYMLINKS = 0x04
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
AT_FDCWD, AT_EMPTY_PATH, AT_RECURSIVE = -100, 0x1000, 0x8000
MOUNT_ATTR_RDONLY = 0x1
# prctl(2)
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPSET = {"x86_64": 126, "aarch64": 91, "arm64": 91}
_CAPABILITY_VERSION_3 = 0x20080522

EXIT_CONFINEMENT = 121  # a worker that could not be confined: it ran none of the job's code


@dataclass(frozen=True)
class Confinement:
    """How to confine one job's workers; plain data, so it pickles to the pool and travels to Ray nodes.

    ``uid``/``gid`` (root servers): the job's account, filled in by the launcher on the worker's node;
    None runs the job as the server's own uid in a user namespace. ``hide`` lists directories the job
    must not see; ``job_dir`` (usually inside one of them) is the one it sees, read-write.
    """

    job_dir: str
    hide: tuple[str, ...]
    expose: tuple[str, ...] = ()  # read-only: the Python installation the worker runs (see ``enter``)
    owner: str = ""  # the coddl user the job belongs to (the launcher maps it to an account)
    uid: int | None = None
    gid: int | None = None
    home: str | None = None
    account: str | None = None
    network: str | None = None  # a gang on one node: the key of the network namespace its ranks share
    netns: str | None = None  # that namespace (filled in by the node's launcher, root servers only) ...
    netns_ino: int = 0  # ... its inode, checked before joining (a descriptor number is reused) ...
    netns_cookie: int = 0  # ... and its cookie, checked after (so is an inode number; a cookie never is)


class ConfinementError(RuntimeError):
    """The kernel refused a step of the confinement (the message names the step and the errno)."""


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]


def _check(rc: int, what: str) -> int:
    if rc < 0:
        e = ctypes.get_errno()
        raise ConfinementError(f"{what}: {os.strerror(e)} (errno {errno.errorcode.get(e, e)})")
    return rc


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda v: None if v is None else v.encode()  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {fstype or source} on {target}")


def _syscall(number: int, what: str, *args: object) -> int:
    return _check(_libc.syscall(ctypes.c_long(number), *args), what)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# ------------------------------------------------------------------ the job directory and its log
def _open_dir(path: str) -> int:
    """``path`` opened without following a symbolic link at its last component."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def open_log(job_dir: str, name: str, owner: tuple[int, int] | None = None) -> int:
    """Open ``job_dir/logs/name`` for appending — the directory and the file created if missing, owned by
    ``owner`` (uid, gid) when given — without following links: the job can write its own directory,
    and must not be able to point the (possibly privileged) launcher at any other file."""
    dfd = _open_dir(job_dir)
    try:
        if owner is not None:
            os.fchown(dfd, *owner)
            os.fchmod(dfd, 0o700)
        try:
            os.mkdir("logs", 0o700, dir_fd=dfd)
        except FileExistsError:
            pass
        lfd = os.open("logs", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        if owner is not None:
            os.fchown(lfd, *owner)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o600, dir_fd=lfd)
    finally:
        os.close(lfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        raise ConfinementError(f"{job_dir}/logs/{name} is not a plain file of its own")
    if owner is not None:
        os.fchown(fd, *owner)
    os.set_blocking(fd, True)
    return fd


# ------------------------------------------------------------------ entering the sandbox
def enter(c: Confinement, forward_term: bool = False) -> None:
    """Confine this process (see the module docstring). Returns in the confined grandchild; the calling
    process becomes its keeper and never returns. Raises ConfinementError before anything of the job runs.
    ``forward_term``: the keepers pass SIGTERM on to the job (a command job's preemption notice) instead
    of dying of it (which kills the job at once through its parent-death signal)."""
    as_root = c.uid is not None
    if as_root and os.geteuid() != 0:
        raise ConfinementError("running a job as another account needs a server running as root")
    if len(os.listdir("/proc/self/task")) > 1:  # unshare(CLONE_NEWUSER) needs a single-threaded process
        _fork_keeper(forward_term)
    if c.netns is not None:
        _join_network(c.netns, c.netns_ino, c.netns_cookie)
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | (0 if as_root else CLONE_NEWUSER)
    _check(_libc.unshare(flags), "unshare (new mount, PID, IPC" + ("" if as_root else " and user") + " namespaces)")
    if not as_root:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    # Directories to show through what hides their surroundings: the job's own (writable) and, for
    # another account, the Python installation wherever a directory private to the server (a /root
    # 0700 holding a pyenv) is in the way. Copies of their mounts are taken now, put back below.
    # The same for an installation under a directory the sandbox covers (a checkout in /tmp: the job's
    # private /tmp would otherwise hide the very interpreter it runs).
    blocked = [b for p in c.expose if (b := _untraversable(p))] if as_root else []
    shown = {p: _clone_installation(p) for p in put_back(c.expose, (*blocked, "/tmp", "/dev/shm"), c.hide)}
    shown[c.job_dir] = _clone(c.job_dir, writable=True)  # last: attached after (over) everything else
    if not as_root:
        _syscall(SYS_MOUNT_SETATTR, "make the filesystem read-only", AT_FDCWD, b"/", AT_RECURSIVE,
                 _mount_attr(MOUNT_ATTR_RDONLY), ctypes.c_size_t(32))
    for path, private in _overlays((*c.hide, *blocked)):
        _mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | (0 if private else MS_NOEXEC),
               "mode=1777" if private else "mode=0755,size=1m")
        for target in shown:
            if _inside(target, path):
                os.makedirs(target, mode=0o755, exist_ok=True)  # a mount point, in the tmpfs
        if not private:
            _syscall(SYS_MOUNT_SETATTR, f"make {path} read-only", AT_FDCWD, path.encode(), 0,
                     _mount_attr(MOUNT_ATTR_RDONLY), ctypes.c_size_t(32))
    for target, fd in shown.items():
        _syscall(SYS_MOVE_MOUNT, f"mount {target}", fd, b"", AT_FDCWD, target.encode(), MOVE_MOUNT_F_EMPTY_PATH)
        os.close(fd)
    _fork_keeper(forward_term)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    if as_root:
        os.setgroups([])
        os.setgid(c.gid)
        os.setuid(c.uid)
        if os.getuid() != c.uid or os.geteuid() != c.uid or os.getegid() != c.gid:
            raise ConfinementError(f"could not switch to uid {c.uid}")
    else:
        _drop_capabilities()
    _forget_the_pool()


def put_back(expose: tuple[str, ...], covered: tuple[str, ...], hide: tuple[str, ...]) -> list[str]:
    """Which installation directories to show through what covers them (``covered``: the job's own
    /tmp and /dev/shm, directories private to the server): the outermost of those inside a covered
    directory. Never one reached through a symbolic link (an entry in a world-writable place, such as
    a PYTHONPATH entry under /tmp, that another user turned into a link), never a covered directory or
    an ancestor of one, and never one inside, equal to or above a hidden directory (the state, whose
    tokens and other jobs' files a job must not read). Whatever this leaves out is simply not there
    for the job (an import fails); nothing private is ever shown."""
    covered_real = [os.path.realpath(c) for c in covered]
    hidden = [os.path.realpath(h) for h in hide]
    chosen = []
    for p in dict.fromkeys(expose):
        real = os.path.realpath(p)
        if real != os.path.normpath(os.path.abspath(p)) or not os.path.isdir(real):
            continue
        if not any(_inside(real, b) for b in covered_real) or any(_inside(b, real) for b in covered_real):
            continue
        if any(_inside(real, h) or _inside(h, real) for h in hidden):
            continue
        chosen.append(real)
    chosen = list(dict.fromkeys(chosen))
    return [p for p in chosen if not any(q != p and _inside(p, q) for q in chosen)]


def _clone_installation(path: str) -> int:
    """A read-only copy of an installation directory's mount, opened without following any link on
    the way (``openat2`` RESOLVE_NO_SYMLINKS): a link swapped in after ``put_back`` looked is refused
    instead of followed. Kernels before 5.6 lack ``openat2``; there the path is opened as checked."""
    how = (ctypes.c_uint64 * 3)(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0, RESOLVE_NO_SYMLINKS)
    fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), AT_FDCWD, path.encode(), ctypes.byref(how), ctypes.c_size_t(24))
    if fd < 0:
        if ctypes.get_errno() != errno.ENOSYS:
            raise ConfinementError(f"open {path} without following links: {os.strerror(ctypes.get_errno())}")
        return _clone(path, writable=False)
    try:
        tree = _syscall(SYS_OPEN_TREE, f"open_tree {path}", fd, b"", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)
    finally:
        os.close(fd)
    _syscall(SYS_MOUNT_SETATTR, f"make the copy of {path} read-only", tree, b"", AT_EMPTY_PATH,
             _mount_attr(MOUNT_ATTR_RDONLY), ctypes.c_size_t(32))
    return tree


def network_cookie() -> int:
    """The cookie of the calling thread's network namespace: unlike its inode number, never given to
    another namespace while the host runs (0 on a kernel older than 5.14, which has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            return struct.unpack("Q", s.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8))[0]
        except OSError as e:
            if e.errno == errno.ENOPROTOOPT:
                return 0
            raise


def _join_network(path: str, ino: int, cookie: int) -> None:
    """Move into the gang's network namespace (``coddl.runtime.netns``), held open by the launcher at
    ``path``; needs root, so it comes before the switch to the job's account. Once the gang is
    stopped, another gang's namespace may hold the same descriptor number and even the same inode
    number: its cookie tells them apart (the process is still single-threaded and dies on the error,
    before anything of the job runs). A namespace recorded without a cookie is refused: by its inode
    alone a late rank could land in another gang's network (the server refuses to start on a kernel
    without cookies, ``ConfinedLauncher.probe``)."""
    gone = ConfinementError("the gang's network namespace is gone (the gang was stopped)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise ConfinementError(f"open the gang's network namespace: {e.strerror}") from None
    try:
        if os.fstat(fd).st_ino != ino:
            raise gone
        _check(_libc.setns(fd, CLONE_NEWNET), "setns (the gang's network namespace)")
    finally:
        os.close(fd)
    if not cookie or network_cookie() != cookie:  # no cookie (Linux < 5.14): no way to tell, so refuse
        raise gone


def _clone(path: str, writable: bool) -> int:
    """A detached copy of the mount at ``path`` (read-only unless ``writable``), to attach later."""
    fd = _syscall(SYS_OPEN_TREE, f"open_tree {path}", AT_FDCWD, path.encode(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)
    if not writable:
        _syscall(SYS_MOUNT_SETATTR, f"make the copy of {path} read-only", fd, b"", AT_EMPTY_PATH,
                 _mount_attr(MOUNT_ATTR_RDONLY), ctypes.c_size_t(32))
    return fd


def _untraversable(path: str) -> str | None:
    """The outermost directory above ``path`` that only its owner and group may pass through."""
    parts = os.path.abspath(path).split("/")[1:]
    for i in range(1, len(parts)):
        ancestor = "/" + "/".join(parts[:i])
        try:
            if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                return ancestor
        except OSError:
            return None
    return None


def _overlays(hide: tuple[str, ...]) -> list[tuple[str, bool]]:
    """The tmpfs mounts to make, outermost first, as (path, private): ``private`` ones (``/tmp``,
    ``/dev/shm``) are the job's own, writable; the others hide what is below them, read-only. A
    directory inside one already covered needs nothing: the tmpfs above it hides it."""
    wanted = {os.path.abspath(p): False for p in hide} | {"/tmp": True, "/dev/shm": True}
    out: list[tuple[str, bool]] = []
    for path in sorted(wanted, key=lambda p: (p.count("/"), p)):
        if os.path.isdir(path) and not any(_inside(path, outer) for outer, _ in out):
            out.append((path, wanted[path]))
    return out


def _inside(path: str, parent: str) -> bool:
    return os.path.commonpath([os.path.abspath(path), os.path.abspath(parent)]) == os.path.abspath(parent)


def _mount_attr(set_flags: int) -> ctypes.Array:
    """``struct mount_attr { u64 attr_set, attr_clr, propagation, userns_fd; }``"""
    return ctypes.create_string_buffer(struct.pack("=QQQQ", set_flags, 0, 0, 0), 32)


def _drop_capabilities() -> None:
    """Empty every capability set (the user namespace gave us all of them) and the bounding set."""
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    number = _CAPSET.get(platform.machine())
    if number is None:
        raise ConfinementError(f"capset: unknown system call number on {platform.machine()}")
    header = ctypes.create_string_buffer(struct.pack("=Ii", _CAPABILITY_VERSION_3, 0), 8)
    data = ctypes.create_string_buffer(bytes(24), 24)  # two empty (effective, permitted, inheritable) sets
    _syscall(number, "capset (drop every capability)", header, data)


def _fork_keeper(forward_term: bool) -> None:
    """Fork; the parent waits for the child and exits as it did, the child returns and dies with its
    keeper (after an unshare of the PID namespace, the child is that namespace's PID 1)."""
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid > 0:
        os.close(alive_r)
        _keep(pid, forward_term)
    os.close(alive_w)
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    os.set_blocking(alive_r, False)
    try:
        if os.read(alive_r, 1) == b"":  # end of file: the keeper died before the death signal was set
            os._exit(EXIT_CONFINEMENT)
    except BlockingIOError:
        pass
    os.close(alive_r)


def set_parent_death_signal() -> None:
    """SIGKILL this process when its parent ends (kept across exec)."""
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")


def _keep(child: int, forward_term: bool) -> NoReturn:
    """The keeper: wait for the confined worker, then leave the same way (exit code or signal)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the server's terminal is the server's to handle
    if forward_term:
        signal.signal(signal.SIGTERM, lambda *_: os.kill(child, signal.SIGTERM))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    sys.stdout.flush()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status))


def _forget_the_pool() -> None:
    """Close the descriptors the fork server handed its children (its liveness pipe, the resource
    tracker's pipe): the job has no business with them, and multiprocessing starts fresh ones if the
    job's own code uses it."""
    try:
        from multiprocessing import forkserver, resource_tracker
    except ImportError:  # pragma: no cover
        return
    fs, rt = forkserver._forkserver, resource_tracker._resource_tracker
    for owner, attr in ((fs, "_forkserver_alive_fd"), (rt, "_fd")):
        fd = getattr(owner, attr, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
            setattr(owner, attr, None)
    if hasattr(rt, "_pid"):
        rt._pid = None


# ------------------------------------------------------------------ the environment
_ALLOWED = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONHASHSEED",
            "PYTHONUNBUFFERED")
_ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "NCCL_", "GLOO_", "OMP_", "MKL_", "OPENBLAS_", "KMP_")


def clean_environment(environ: dict[str, str] | os._Environ) -> dict[str, str]:
    """The part of ``environ`` a job may inherit: locale, search paths, and the settings of the
    libraries it trains with (CUDA, NCCL, gloo, OpenMP, MKL). Nothing else of the server's environment
    — tokens (CODDL_TOKEN), database passwords, cloud credentials, Ray's settings — reaches a worker."""
    return {k: v for k, v in environ.items() if k in _ALLOWED or k.startswith(_ALLOWED_PREFIXES)}


# ------------------------------------------------------------------ what this host allows
def probe_entry() -> None:
    """Run as a confined worker by ``WorkerPool.probe``: check from the inside that the confinement
    holds, and say what does not (exit code 1, reason on stderr)."""
    job_dir, hidden = os.environ["CODDL_PROBE_JOB_DIR"], os.environ["CODDL_PROBE_HIDDEN"].split(os.pathsep)
    problems = []
    if os.getpid() != 1:
        problems.append(f"not in its own PID namespace (pid {os.getpid()})")
    for path in filter(None, hidden):
        if os.path.isdir(path) and any(not _inside(job_dir, os.path.join(path, e)) for e in os.listdir(path)):
            problems.append(f"{path} is visible")
    probe_file = os.path.join(job_dir, ".probe")
    with open(probe_file, "w") as f:
        f.write("ok")
    os.unlink(probe_file)
    if os.environ.get("CODDL_PROBE_UID") and os.getuid() != int(os.environ["CODDL_PROBE_UID"]):
        problems.append(f"runs as uid {os.getuid()}")
    try:
        import colorsys  # noqa: F401 - a module no worker preloads: the job can read the installation
    except ImportError as e:
        problems.append(f"cannot import from the Python installation ({e})")
    if _libc.mount(b"none", job_dir.encode(), b"tmpfs", 0, None) == 0:
        problems.append("may still mount file systems")
    if problems:
        sys.exit("confinement does not hold: " + "; ".join(problems))
