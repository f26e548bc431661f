"""A network namespace of its own for each gang of a command job on one node, so that its rendezvous
(torch's ``TCPStore`` on ``MASTER_PORT``, which has no authentication) and its collectives (gloo's or
NCCL's sockets) are reachable by its own ranks and by nothing else on the host; and for each elastic
job on the local executor, whose collectives are the same, while its store (in the server) listens
inside the namespace (``listen_in``).

The namespace has only ``lo``, up: the ranks meet at ``127.0.0.1`` as they would on the host, and no
other process — another user's job, or the host's root — has a route to it. It is anonymous (never
bound to a name under ``/run/netns``): the node's launcher holds it open by a file descriptor until
the gang has stopped, each rank joins it through that descriptor before it drops root, and the kernel
frees it once the last rank and the descriptor are gone. A rank that starts late, after its gang was
stopped, could find that descriptor number and that inode number both handed on to another gang's
namespace (the kernel reuses the lowest free of each), so a rank checks the namespace's cookie, which
the kernel never reuses while it runs. So nothing can be left behind — not by a
cancel, a SIGKILL of the workers, nor a crash of the controller or of a Ray node's agent — and two
gangs, two servers or two test runs never collide on a name.

Making one needs CAP_SYS_ADMIN, i.e. a server (or Ray node agent) running as root; ``Networks`` is
used only then.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Callable, TypeVar

from coddl.elastic.sandbox import CLONE_NEWNET, network_cookie

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def _check(rc: int, what: str) -> None:
    if rc < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)} (errno {errno.errorcode.get(e, e)})")


def _loopback_up() -> None:
    """Bring ``lo`` of the calling thread's network namespace up (the kernel then gives it 127.0.0.1/8
    and ::1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifr = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, ifr)[:18])[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def _elsewhere(enter: Callable[[], None], work: Callable[[], T], discard: Callable[[T], None]) -> T:
    """``work()`` on a throwaway thread that first ``enter``s another network namespace and then moves
    back to the host's: a thread's network namespace is its own, so the rest of the process never
    leaves the host's. Were the thread unable to move back, it ends there. What ``work`` made is
    ``discard``ed if moving back fails."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                enter()
                try:
                    out["made"] = work()
                finally:
                    _check(_libc.setns(home, CLONE_NEWNET), "setns (back to the host's network)")
            finally:
                os.close(home)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            out["error"] = e
            if "made" in out:
                discard(out.pop("made"))  # type: ignore[arg-type]

    t = threading.Thread(target=run, name="coddl-netns", daemon=True)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["made"]  # type: ignore[return-value]


@dataclass(frozen=True)
class Namespace:
    """Where a rank finds its gang's namespace (a path it opens while still root), and what identifies
    the namespace: its inode number (checked before joining) and its cookie (checked after)."""

    path: str
    ino: int
    cookie: int


def cookie_of(path: str) -> int:
    """The cookie (see ``coddl.elastic.sandbox.network_cookie``) of the network namespace at ``path`` (``/proc/PID/ns/net``,
    or a descriptor of one under ``/proc/PID/fd``); needs CAP_SYS_ADMIN. OSError if it is gone."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return _elsewhere(lambda: _check(_libc.setns(fd, CLONE_NEWNET), "setns (to read a namespace's cookie)"),
                          network_cookie, lambda _: None)
    finally:
        os.close(fd)


def create() -> tuple[int, int, int]:
    """A new network namespace with ``lo`` up: (a descriptor holding it, its inode number, its cookie)."""

    def opened() -> tuple[int, int, int]:
        _loopback_up()
        fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        return fd, os.fstat(fd).st_ino, network_cookie()

    return _elsewhere(lambda: _check(_libc.unshare(CLONE_NEWNET), "unshare (a new network namespace)"), opened,
                      lambda made: os.close(made[0]))


def listen_in(fd: int, host: str) -> socket.socket:
    """A TCP socket listening on ``host`` (port chosen by the kernel) inside the namespace held by
    ``fd``: how a server in the host's network serves a job whose workers are in that namespace (a
    socket stays in the namespace it was made in)."""

    def listening() -> socket.socket:
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            s.listen(128)
        except BaseException:
            s.close()
            raise
        return s

    return _elsewhere(lambda: _check(_libc.setns(fd, CLONE_NEWNET), "setns (into the job's network)"), listening,
                      lambda s: s.close())


class Networks:
    """The gangs' namespaces on this node, by the key the gang's ranks carry
    (``Confinement.network``). Thread-safe."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def join(self, key: str) -> Namespace:
        """Where a rank of gang ``key`` finds its namespace, and how it tells that namespace from
        another that took its descriptor number once released (made now if it has none yet)."""
        with self._lock:
            if key not in self._held:
                self._held[key] = create()
            fd, ino, cookie = self._held[key]
        return Namespace(f"/proc/{os.getpid()}/fd/{fd}", ino, cookie)

    def listen(self, key: str, host: str) -> socket.socket:
        """A listening socket on ``host`` in the namespace of ``key`` (made now if it has none yet)."""
        self.join(key)
        with self._lock:
            fd = self._held[key][0]
            return listen_in(fd, host)

    def release(self, key: str) -> None:
        """The gang has stopped: drop the descriptor (the kernel frees the namespace with its last rank)."""
        with self._lock:
            held = self._held.pop(key, None)
        if held is not None:
            os.close(held[0])

    def close(self) -> None:
        with self._lock:
            held, self._held = list(self._held.values()), {}
        for fd, _, _ in held:
            os.close(fd)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)
